"""Levenberg–Marquardt on a sparse Jacobian, with box bounds, by sparse direct solves.

SciPy's ``least_squares`` handles a sparse Jacobian only through the iterative LSMR,
which stalls on the ill-conditioned normal equations of stiff regularized constraints.
Trajectory problems (identification, the inverse-dynamics factor graph) have a banded JᵀJ
(each state couples with its neighbours) bordered by a few dense rows (parameters, if
any): a banded Cholesky factor and the parameters' Schur complement solve it exactly in
O(K b²), milliseconds. It lives with the dynamics, below the factor graphs and the
estimators that both use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg as linalg
import scipy.sparse as sparse

Array = np.ndarray


@dataclass(frozen=True)
class LeastSquaresResult:
    x: Array
    cost: float  # ½ ‖r‖²
    residuals: Array
    normal: BorderedMatrix  # JᵀJ at x
    iterations: int
    converged: bool
    message: str


class BorderedMatrix:
    """A symmetric matrix [[A, B], [Bᵀ, C]] with A banded (the first ``banded`` unknowns)
    and C small and dense, held as A's bands (LAPACK's lower band storage, row 0 the
    diagonal), B and C; :meth:`factor` then costs one banded Cholesky per diagonal shift
    (the LM damping)."""

    def __init__(self, bands: Array, border: Array, corner: Array) -> None:
        # lower storage: OpenBLAS's upper-storage band Cholesky is 4 times slower on two
        # threads (measured: 28 against 7 ms, n = 12 000)
        self.bands, self.border, self.corner = bands, border, corner
        self.banded = bands.shape[1]

    @classmethod
    def from_sparse(cls, matrix: sparse.spmatrix, banded: int) -> BorderedMatrix:
        coo = sparse.coo_matrix(matrix)
        inner = (coo.row < banded) & (coo.col < banded) & (coo.row <= coo.col)
        rows, cols, values = coo.row[inner], coo.col[inner], coo.data[inner]
        bands = np.zeros((int((cols - rows).max(initial=0)) + 1, banded))
        np.add.at(bands, (cols - rows, rows), values)
        dense = sparse.csc_matrix(matrix)[:, banded:].toarray()
        return cls(bands, dense[:banded], dense[banded:])

    def diagonal(self) -> Array:
        return np.concatenate([self.bands[0], np.diag(self.corner)])

    def factor(self, shift: Array | None = None, factor_border: bool = True
               ) -> BorderedSystem:
        """The factors of the matrix plus diag(shift); ``factor_border``: False when only
        the Schur complement is wanted (it may be singular)."""
        return BorderedSystem(self, shift, factor_border)


class BorderedSystem:
    """Solves with a :class:`BorderedMatrix` (plus a diagonal shift): a banded Cholesky of
    A and the Schur complement C − Bᵀ A⁻¹ B."""

    def __init__(self, matrix: BorderedMatrix, shift: Array | None,
                 factor_border: bool) -> None:
        banded = self.banded = matrix.banded
        bands, corner = matrix.bands, matrix.corner
        if shift is not None:
            bands = bands.copy()
            bands[0] += shift[:banded]
            corner = corner + np.diag(shift[banded:])
        self.factor = linalg.cholesky_banded(bands, lower=True, check_finite=False)
        self.border = matrix.border
        self.solved_border = self._inner(self.border)
        schur = corner - self.border.T @ self.solved_border
        self.schur = 0.5 * (schur + schur.T)  # what the data tell about the border unknowns
        self._schur_factor = (linalg.cho_factor(self.schur) if len(corner) and factor_border
                              else None)

    def _inner(self, rhs: Array) -> Array:
        return linalg.cho_solve_banded((self.factor, True), rhs, check_finite=False)

    def solve(self, rhs: Array) -> Array:
        top = self._inner(rhs[:self.banded])
        if self._schur_factor is None:
            return top
        bottom = linalg.cho_solve(self._schur_factor, rhs[self.banded:] - self.border.T @ top)
        return np.concatenate([top - self.solved_border @ bottom, bottom])


@dataclass(frozen=True)
class RowBlocks:
    """Rows that come in K groups of ``a`` (K, a, ·): group k touches the banded unknowns
    ``start[k]`` … ``start[k] + w − 1`` through ``band`` (K, a, w) and every border unknown
    through ``border`` (K, a, border unknowns)."""

    start: Array
    band: Array
    border: Array


class BlockJacobian:
    """A Jacobian given as dense row blocks (identification's residuals: one block per
    step, observation, ...), in the order of the residual vector. JᵀJ and Jᵀr are formed
    block by block (batched products and one bincount), never as a sparse product, which
    took a third of identification's time."""

    def __init__(self, groups: list[RowBlocks], banded: int) -> None:
        self.groups = groups
        self.banded = banded
        self.rows = sum(g.band.shape[0] * g.band.shape[1] for g in groups)

    def _split(self, r: Array) -> list[Array]:
        sizes = np.cumsum([g.band.shape[0] * g.band.shape[1] for g in self.groups])[:-1]
        return [part.reshape(g.band.shape[:2])
                for part, g in zip(np.split(r, sizes), self.groups, strict=True)]

    def gradient(self, r: Array) -> Array:
        """Jᵀr for residuals r (rows,)."""
        top = np.zeros(self.banded)
        bottom = 0.0
        for g, rg in zip(self.groups, self._split(r), strict=True):
            width = g.band.shape[2]
            if width:
                index = g.start[:, None] + np.arange(width)
                product = (rg[:, None, :] @ g.band)[:, 0]  # batched matmul: BLAS, not einsum
                top += np.bincount(index.ravel(), product.ravel(), minlength=self.banded)
            bottom = bottom + np.einsum("kap,ka->p", g.border, rg)
        return np.concatenate([top, np.broadcast_to(bottom, self.groups[0].border.shape[2])])

    def normal(self) -> BorderedMatrix:
        """JᵀJ as a :class:`BorderedMatrix`."""
        n, p = self.banded, self.groups[0].border.shape[2]
        width = max(g.band.shape[2] for g in self.groups)
        bands = np.zeros((width, n)).ravel() if width else np.zeros(n)
        border = np.zeros((n, p))
        corner = np.zeros((p, p))
        for g in self.groups:
            w = g.band.shape[2]
            flat = g.border.reshape(-1, p)
            corner += flat.T @ flat
            if not w:
                continue
            transposed = g.band.transpose(0, 2, 1)
            gram = transposed @ g.band
            i, j = np.triu_indices(w)
            index = (j - i)[None, :] * n + g.start[:, None] + i[None, :]
            bands += np.bincount(index.ravel(), gram[:, i, j].ravel(), minlength=bands.size)
            rows = (g.start[:, None] + np.arange(w)).ravel()
            cross = (transposed @ g.border).reshape(-1, p)
            for column in range(p):
                border[:, column] += np.bincount(rows, cross[:, column], minlength=n)
        return BorderedMatrix(bands.reshape(max(width, 1), n), border, corner)


def _normal_equations(jac: sparse.spmatrix | BlockJacobian, r: Array, banded: int,
                      ) -> tuple[Array, BorderedMatrix]:
    """(Jᵀr, JᵀJ) from either form of Jacobian."""
    if isinstance(jac, BlockJacobian):
        return jac.gradient(r), jac.normal()
    jac = sparse.csr_matrix(jac)
    return jac.T @ r, BorderedMatrix.from_sparse(jac.T @ jac, banded)


# fun(x, jacobian) -> (residuals (m,), Jacobian (m, n) sparse or as blocks, or None)
Residuals = Callable[[Array, bool], tuple[Array, "sparse.spmatrix | BlockJacobian | None"]]


def levenberg_marquardt(fun: Residuals, x0: Array, banded: int,
                        lower: Array | None = None,
                        upper: Array | None = None, max_iterations: int = 100,
                        ftol: float = 1e-10, xtol: float = 1e-10,
                        callback: Callable[[int, float], None] | None = None,
                        correct: Callable[[Array, Array], Array] | None = None,
                        scaling: str = "marquardt", atol: float = 0.0,
                        border_rtol: float = 0.0,
                        ) -> LeastSquaresResult:
    """Minimize ½‖fun(x)‖² from x0 within [lower, upper] (Marquardt's scaling by diag JᵀJ,
    steps projected onto the box); JᵀJ is banded in the first ``banded`` unknowns (see
    :class:`BorderedMatrix`). ``callback(iteration, cost)`` after each iteration.
    ``correct(x, trial)`` may move each trial point before it is judged (a second-order
    correction: where stiff residuals curve, the straight step leaves their valley).
    ``scaling``: damping μ·diag(JᵀJ) ("marquardt", invariant to the units of x) or μ·I
    scaled by the mean of that diagonal ("levenberg": it does not block a direction that
    combines stiff unknowns with a weak one, where Marquardt's scaling damps it by the
    stiff ones' curvature). Stops when a step lowers the cost by less than ``ftol``·cost
    or ``atol``, or moves x by less than ``xtol``·‖x‖, or (``border_rtol``) when three
    steps in a row lower the cost by less than 1e-4 of itself and move no border unknown
    by more than ``border_rtol`` of its size: the states may still creep, the answer
    does not change."""
    x = np.asarray(x0, dtype=float).copy()
    lower = np.full(x.size, -np.inf) if lower is None else np.asarray(lower, dtype=float)
    upper = np.full(x.size, np.inf) if upper is None else np.asarray(upper, dtype=float)
    r, jac = fun(x, True)
    cost = 0.5 * float(r @ r)
    damping = 1e-4
    message = f"no convergence in {max_iterations} iterations"
    converged = False
    iteration = 0
    assert jac is not None
    gradient, normal = _normal_equations(jac, r, banded)
    settled = 0  # consecutive steps that left the border unknowns where they were
    for iteration in range(1, max_iterations + 1):
        diagonal = normal.diagonal()
        scale = (np.maximum(diagonal, 1e-12 * max(diagonal.max(), 1e-300))
                 if scaling == "marquardt" else np.full(x.size, max(diagonal.mean(), 1e-300)))
        while True:
            step = _bounded_step(normal, damping * scale, gradient, x, lower, upper)
            trial = np.clip(x + step, lower, upper)
            if correct is not None:
                trial = correct(x, trial)
            if np.all(np.isfinite(trial)):
                r_trial, _ = fun(trial, False)
                cost_trial = 0.5 * float(r_trial @ r_trial)
            else:
                cost_trial = np.inf
            if cost_trial < cost:
                damping = max(damping / 3.0, 1e-18)
                break
            damping *= 4.0
            if damping > 1e12:
                return LeastSquaresResult(x, cost, r, normal, iteration, cost < 1e-30,
                                          "no step lowers the cost")
        moved = float(np.linalg.norm(trial - x))
        decrease = cost - cost_trial
        border_moved = np.abs(trial[banded:] - x[banded:]) <= border_rtol * np.abs(x[banded:])
        settled = settled + 1 if decrease <= 1e-4 * cost and border_moved.all() else 0
        x = trial
        r, jac = fun(x, True)
        assert jac is not None
        gradient, normal = _normal_equations(jac, r, banded)
        cost = 0.5 * float(r @ r)
        if callback is not None:
            callback(iteration, cost)
        if (decrease <= max(ftol * cost, atol)
                or moved <= xtol * (float(np.linalg.norm(x)) + xtol)):
            converged = True
            message = "converged: the cost or the step stopped changing"
            break
        if settled >= 3:
            converged = True
            message = "converged: the border unknowns stopped changing"
            break
    return LeastSquaresResult(x, cost, r, normal, iteration, converged, message)


def _bounded_step(normal: BorderedMatrix, shift: Array, gradient: Array, x: Array,
                  lower: Array, upper: Array) -> Array:
    """The damped Gauss–Newton step with the unknowns that sit on a bound and would leave
    it held fixed (re-solved until that set settles), so the others' step accounts for
    them; NaN if the system is not positive definite."""
    frozen = np.zeros(x.size, dtype=bool)
    big = 1e12 * max(float(np.max(shift, initial=0.0)), 1.0)
    step = np.full(x.size, np.nan)
    for _ in range(5):
        try:
            rhs = np.where(frozen, 0.0, -gradient)
            step = normal.factor(shift + big * frozen).solve(rhs)
        except linalg.LinAlgError:
            return np.full(x.size, np.nan)
        leaving = ((x <= lower) & (step < 0)) | ((x >= upper) & (step > 0))
        if not np.any(leaving & ~frozen):
            break
        frozen |= leaving
    return np.where(frozen, 0.0, step)
