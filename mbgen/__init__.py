"""mbgen: a symbolic code-generation compiler for multibody mechanisms, planar and spatial.

``mbgen.load("fourbar.yaml")`` compiles the mechanism (if its cached module is stale)
and returns a :class:`~mbgen.runtime.compiled.CompiledMechanism`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mbgen.version import __version__

if TYPE_CHECKING:
    from mbgen.runtime.compiled import CompiledMechanism


def load(path: str, out_dir: str | None = None, force: bool = False,
         **kwargs: Any) -> CompiledMechanism:
    """Compile ``path`` if needed and return the loaded mechanism."""
    from mbgen.loading import load as _load

    return _load(path, out_dir=out_dir, force=force, **kwargs)


__all__ = ["__version__", "load"]
