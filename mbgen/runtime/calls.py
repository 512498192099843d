"""Turning NumPy inputs into the C calling convention shared by every generated function:
contiguous (N, width) float64 batches, a parameter vector with its stride, raw pointers."""

from __future__ import annotations

from typing import Any

import numpy as np

Array = np.ndarray


class CallHelpers:
    ffi: Any
    parameter_vector: Array

    def _int_ptr(self, array: Array) -> Any:
        return self.ffi.from_buffer("int[]", array)

    def _dbl(self, array: Array | None) -> Any:
        """A C pointer into a contiguous float64 array (from_buffer: ~10× cheaper than
        going through ``array.ctypes``, which matters for single-state calls)."""
        return self.ffi.NULL if array is None else self.ffi.from_buffer("double[]", array)

    def _batch(self, **inputs: tuple[Any, int]) -> tuple[dict[str, Array], int, bool]:
        """Inputs as C-contiguous (N, width) float64 arrays with one common N.

        Each keyword is ``name=(value, width)``; a single state broadcasts against a batch.
        Returns the arrays, N, and whether any input was a batch.
        """
        arrays: dict[str, Array] = {}
        batched = False
        for name, (value, width) in inputs.items():
            array = np.ascontiguousarray(value, dtype=np.float64)
            batched |= array.ndim == 2
            if array.ndim == 1:
                array = array[None, :]
            if array.ndim != 2 or array.shape[1] != width:
                raise ValueError(f"{name} must have shape ({width},) or (N, {width}), got "
                                 f"{np.shape(value)}")
            arrays[name] = array
        count = max(a.shape[0] for a in arrays.values())
        for name, array in arrays.items():
            if array.shape[0] != count:
                if array.shape[0] != 1:
                    raise ValueError(f"{name} has {array.shape[0]} states, expected {count}")
                arrays[name] = np.repeat(array, count, axis=0)
        return arrays, count, batched

    def _params(self, params: Any, count: int) -> tuple[Array, int]:
        """(parameters, stride): one vector for all states (stride 0) or one row each."""
        if params is None:
            return self.parameter_vector, 0
        p = np.ascontiguousarray(params, dtype=np.float64)
        width = len(self.parameter_vector)
        if p.shape == (width,):
            return p, 0
        if p.ndim != 2 or p.shape[1] != width or p.shape[0] not in (1, count):
            raise ValueError(f"params must have shape ({width},) or ({count}, {width}), got "
                             f"{p.shape}")
        return (p, width) if p.shape[0] == count else (p[0], 0)
