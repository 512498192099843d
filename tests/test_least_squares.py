"""The bordered banded solver and Levenberg–Marquardt of identification, against dense
linear algebra and SciPy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sparse
from scipy.optimize import least_squares

from mbgen.numerics.least_squares import BorderedMatrix, levenberg_marquardt


def bordered_jacobian(rng: np.random.Generator, blocks: int = 40, size: int = 3,
                      border: int = 2) -> sparse.csr_matrix:
    """Rows that touch two neighbouring state blocks and the border: identification's
    pattern."""
    banded = blocks * size
    rows = []
    for k in range(blocks - 1):
        row = np.zeros((size, banded + border))
        row[:, k * size:(k + 2) * size] = rng.normal(size=(size, 2 * size))
        row[:, banded:] = rng.normal(size=(size, border))
        rows.append(row)
    rows.append(np.eye(banded + border)[:size])  # anchor the first block
    return sparse.csr_matrix(np.vstack(rows + [np.eye(banded + border)]))


def test_bordered_solve_matches_a_dense_solve() -> None:
    rng = np.random.default_rng(3)
    jac = bordered_jacobian(rng)
    normal = (jac.T @ jac).tocsr()
    banded = normal.shape[0] - 2
    shift = rng.uniform(0.1, 1.0, size=normal.shape[0])
    rhs = rng.normal(size=normal.shape[0])
    system = BorderedMatrix.from_sparse(normal, banded).factor(shift)
    expected = np.linalg.solve(normal.toarray() + np.diag(shift), rhs)
    assert np.allclose(system.solve(rhs), expected, rtol=1e-10, atol=1e-12)
    # The Schur complement is what the data say about the border unknowns.
    dense = normal.toarray() + np.diag(shift)
    a, b, c = dense[:banded, :banded], dense[:banded, banded:], dense[banded:, banded:]
    assert np.allclose(system.schur, c - b.T @ np.linalg.solve(a, b), rtol=1e-10)


def test_levenberg_marquardt_matches_scipy_with_an_active_bound() -> None:
    # Exponential fit y = a exp(-b t) + c with c bounded above below its unbounded optimum.
    rng = np.random.default_rng(4)
    t = np.linspace(0.0, 3.0, 40)
    y = 2.0 * np.exp(-1.3 * t) + 0.5 + 0.01 * rng.normal(size=t.size)

    def residuals(x: np.ndarray) -> np.ndarray:
        return x[0] * np.exp(-x[1] * t) + x[2] - y

    def jacobian(x: np.ndarray) -> np.ndarray:
        e = np.exp(-x[1] * t)
        return np.column_stack([e, -x[0] * t * e, np.ones_like(t)])

    lower, upper = np.array([0.0, 0.0, -1.0]), np.array([10.0, 10.0, 0.4])
    x0 = np.array([1.0, 0.5, 0.0])
    ours = levenberg_marquardt(
        lambda x, jac: (residuals(x), sparse.csr_matrix(jacobian(x)) if jac else None),
        x0, 0, lower, upper)
    theirs = least_squares(residuals, x0, jac=jacobian, bounds=(lower, upper),
                           xtol=1e-14, ftol=1e-14, gtol=1e-14)
    assert ours.converged
    assert ours.x[2] == pytest.approx(0.4)  # on its bound
    assert np.allclose(ours.x, theirs.x, rtol=1e-6, atol=1e-8)
    assert ours.cost == pytest.approx(theirs.cost, rel=1e-8)


def assert_same_gradient(jac, matrix: np.ndarray, rng: np.random.Generator) -> None:
    """The Jacobian form's row count and Jᵀr equal the dense matrix's."""
    r = rng.normal(size=matrix.shape[0])
    assert jac.rows == matrix.shape[0]
    assert np.allclose(jac.gradient(r), matrix.T @ r, rtol=1e-12, atol=1e-12)


def test_block_jacobian_forms_the_same_normal_equations_as_its_matrix() -> None:
    """JᵀJ and Jᵀr block by block equal the sparse products, with overlapping bands, a
    group without band columns (priors) and blocks that reach the last banded unknown."""
    from mbgen.numerics.least_squares import BlockJacobian, RowBlocks

    rng = np.random.default_rng(5)
    banded, border = 20, 3
    groups = [RowBlocks(np.arange(0, 16, 2), rng.normal(size=(8, 3, 4)),
                        rng.normal(size=(8, 3, border))),
              RowBlocks(np.array([0, 7, 17]), rng.normal(size=(3, 1, 3)),
                        rng.normal(size=(3, 1, border))),
              RowBlocks(np.zeros(2, dtype=int), np.zeros((2, 1, 0)),
                        rng.normal(size=(2, 1, border)))]
    rows = []
    for g in groups:
        for k in range(len(g.start)):
            block = np.zeros((g.band.shape[1], banded + border))
            block[:, g.start[k]:g.start[k] + g.band.shape[2]] = g.band[k]
            block[:, banded:] = g.border[k]
            rows.append(block)
    matrix = np.vstack(rows)
    jac = BlockJacobian(groups, banded)
    assert_same_gradient(jac, matrix, rng)
    normal = jac.normal()
    expected = BorderedMatrix.from_sparse(sparse.csr_matrix(matrix.T @ matrix), banded)
    width = expected.bands.shape[0]
    assert np.allclose(normal.bands[:width], expected.bands, rtol=1e-12, atol=1e-12)
    assert not normal.bands[width:].any()
    assert np.allclose(normal.border, expected.border, rtol=1e-12, atol=1e-12)
    assert np.allclose(normal.corner, expected.corner, rtol=1e-12, atol=1e-12)


def test_strided_jacobian_forms_the_same_normal_equations_as_its_matrix() -> None:
    """Dense and diagonal blocks, sets on one group of unknowns and on two consecutive
    ones (a trajectory's factors), a block paired with itself: JᵀJ and Jᵀr equal the
    dense products, entry by entry."""
    from mbgen.numerics.least_squares import Block, ResidualSet, StridedJacobian

    rng = np.random.default_rng(7)
    width, count = 7, 6  # unknowns per sample, samples
    banded = width * count
    sets = [
        ResidualSet(np.arange(count) * width, 4,  # one sample, two dense blocks
                    [Block(3, rng.normal(size=(count, 4, 2))),
                     Block(0, rng.normal(size=(count, 4, 3)))]),
        ResidualSet(np.arange(count) * width, 2, [Block(5, rng.normal(size=(count, 2))),
                                                  Block(0, rng.normal(size=(count, 2, 3)))]),
        ResidualSet(np.arange(count - 1) * width, 3,  # two samples: x_k − x_{k−1} − …
                    [Block(0, rng.normal(size=(count - 1, 3))),
                     Block(width, rng.normal(size=(count - 1, 3))),
                     Block(width + 3, rng.normal(size=(count - 1, 3, 4)))]),
    ]
    rows = []
    for s in sets:
        for k, start in enumerate(s.start):
            block = np.zeros((s.rows, banded))
            for b in s.blocks:
                values = np.diag(b.values[k]) if b.diagonal else b.values[k]
                block[:, start + b.offset:start + b.offset + b.size] = values
            rows.append(block)
    matrix = np.vstack(rows)
    jac = StridedJacobian(sets, banded)
    assert_same_gradient(jac, matrix, rng)
    normal = jac.normal()
    expected = matrix.T @ matrix
    dense = np.zeros_like(expected)
    for d in range(normal.bands.shape[0]):
        index = np.arange(banded - d)
        dense[index + d, index] = normal.bands[d, :banded - d]
    dense = dense + np.tril(dense, -1).T
    assert np.allclose(dense, expected, rtol=1e-12, atol=1e-12)
    x = rng.normal(size=banded)  # and its factor solves the system
    solved = normal.factor(np.full(banded, 1e-3)).solve(expected @ x + 1e-3 * x)
    assert np.allclose(solved, x, rtol=1e-8, atol=1e-8)
    uneven = ResidualSet(np.array([0, 7, 21]), 2, [Block(0, rng.normal(size=(3, 2)))])
    with pytest.raises(ValueError, match="constant stride"):
        StridedJacobian([uneven], banded)


@pytest.mark.parametrize("chord_stop", [False, True])
def test_a_linear_problem_needs_one_factorization_with_the_chord_stop(chord_stop: bool,
                                                                      ) -> None:
    """On a linear least-squares problem the first step is exact: with ``chord_stop`` the
    solver sees that from the same factor and stops after one iteration, without it it
    takes a second one to confirm; both land on the exact solution."""
    rng = np.random.default_rng(11)
    jac = bordered_jacobian(rng, border=0)
    rhs = rng.normal(size=jac.shape[0])
    exact = sparse.linalg.spsolve((jac.T @ jac).tocsc(), jac.T @ rhs)
    result = levenberg_marquardt(lambda x, want: (jac @ x - rhs, jac if want else None),
                                 np.zeros(jac.shape[1]), jac.shape[1], scaling="absolute",
                                 damping=1e-12, atol=1e-12, final_normal=False,
                                 chord_stop=chord_stop)
    assert result.converged
    assert result.iterations == (1 if chord_stop else 2)
    assert np.allclose(result.x, exact, rtol=1e-8, atol=1e-10)


def linear_problem(seed: int = 11) -> tuple[sparse.csr_matrix, np.ndarray, np.ndarray]:
    """A banded linear least-squares problem with a nonzero residual, and its solution."""
    rng = np.random.default_rng(seed)
    jac = bordered_jacobian(rng, border=0)
    rhs = rng.normal(size=jac.shape[0])
    exact = sparse.linalg.spsolve((jac.T @ jac).tocsc(), jac.T @ rhs)
    return jac, rhs, exact


def test_a_start_at_the_solution_is_converged_before_any_step() -> None:
    """At the exact minimizer the first-order test stops the solver before it tries a
    step, whatever rounding does to the trial costs."""
    jac, rhs, exact = linear_problem()
    result = levenberg_marquardt(lambda x, want: (jac @ x - rhs, jac if want else None),
                                 exact, jac.shape[1])
    assert result.converged, result.message
    assert result.iterations == 1 and "first-order" in result.message
    assert np.array_equal(result.x, exact)


def test_no_lower_cost_at_a_stationary_point_is_convergence() -> None:
    """Trial costs that never come out lower (rounding at a stationary point, here made
    certain by a nudge to every trial residual) end in convergence when the model
    predicts nothing to gain, with the first-order test switched off to reach that path."""
    jac, rhs, exact = linear_problem()

    def nudged(x: np.ndarray, want: bool) -> tuple[np.ndarray, sparse.csr_matrix | None]:
        r = jac @ x - rhs
        return (r, jac) if want else (r * (1 + 1e-12), None)

    result = levenberg_marquardt(nudged, exact, jac.shape[1], gtol=0.0)
    assert result.converged and "predicts none" in result.message
    assert np.array_equal(result.x, exact)


def test_no_lower_cost_away_from_a_stationary_point_is_a_failure() -> None:
    """A wrong Jacobian (sign flipped) points every step uphill: no step lowers the cost,
    the model still promises a decrease, so the result is not converged."""
    jac, rhs, exact = linear_problem()
    result = levenberg_marquardt(lambda x, want: (jac @ x - rhs, -jac if want else None),
                                 np.zeros(jac.shape[1]), jac.shape[1])
    assert not result.converged
    assert "not a stationary point" in result.message


def test_a_heavily_damped_start_is_not_taken_for_convergence() -> None:
    """A huge initial damping makes the first steps tiny: the cost and x barely change,
    yet the Gauss–Newton model still promises a large decrease, so the solver goes on
    (and reaches the minimum) instead of reporting the start as converged."""
    jac, rhs, exact = linear_problem()
    result = levenberg_marquardt(lambda x, want: (jac @ x - rhs, jac if want else None),
                                 np.zeros(jac.shape[1]), jac.shape[1], scaling="absolute",
                                 damping=1e9, xtol=1e-3, ftol=1e-3, max_iterations=200)
    assert result.converged, result.message
    assert result.iterations > 2
    best = 0.5 * float(np.sum((jac @ exact - rhs) ** 2))
    assert best <= result.cost <= best * (1 + 2e-3)  # within ftol of the minimum
    stuck = levenberg_marquardt(lambda x, want: (jac @ x - rhs, jac if want else None),
                                np.zeros(jac.shape[1]), jac.shape[1], scaling="absolute",
                                damping=1e9, xtol=1e-3, ftol=1e-3, max_iterations=3)
    assert not stuck.converged and "no convergence" in stuck.message
