"""Inverse dynamics of a prescribed motion: direct (batched in C) or by factor graph."""
