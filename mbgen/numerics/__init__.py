"""Generic numerics with no mechanism in them: banded least squares."""
