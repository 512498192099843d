"""C generation and compilation. Import submodules directly: only ``cache`` is light."""
