"""The stacked products equal their einsum definitions, entry by entry."""

from __future__ import annotations

import numpy as np

from mbgen.numerics.batched import matrix_vector, transposed_product, transposed_vector


def test_stacked_products_equal_einsum() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(6, 4, 5)), rng.normal(size=(6, 4, 3))
    x, y = rng.normal(size=(6, 5)), rng.normal(size=(6, 4))
    np.testing.assert_allclose(transposed_product(a, b), np.einsum("kri,krj->kij", a, b),
                               rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(matrix_vector(a, x), np.einsum("kij,kj->ki", a, x),
                               rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(transposed_vector(a, y), np.einsum("kri,kr->ki", a, y),
                               rtol=1e-14, atol=1e-14)
    assert transposed_product(a, b).shape == (6, 5, 3)
