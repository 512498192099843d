"""Loading compiled mechanisms and calling their kernels from NumPy."""
