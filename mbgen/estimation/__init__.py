"""State estimation of mechanisms from their sensors."""
