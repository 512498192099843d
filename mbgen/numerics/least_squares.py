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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg as linalg
import scipy.linalg.lapack as lapack
import scipy.sparse as sparse
from threadpoolctl import threadpool_limits

from mbgen.numerics.batched import transposed_vector

Array = np.ndarray


@dataclass(frozen=True)
class LeastSquaresResult:
    x: Array
    cost: float  # ½ ‖r‖²
    residuals: Array
    normal: BorderedMatrix | None  # JᵀJ at x (None: not asked for)
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
    """Solves with a :class:`BorderedMatrix` (plus a diagonal shift): a banded Cholesky
    factor L of A and the Schur complement C − WᵀW with W = L⁻¹B (one triangular solve
    per border column, half of what A⁻¹B costs)."""

    def __init__(self, matrix: BorderedMatrix, shift: Array | None,
                 factor_border: bool) -> None:
        banded = self.banded = matrix.banded
        bands, corner = matrix.bands, matrix.corner
        if shift is not None:
            bands = bands.copy(order="K")  # Fortran-ordered bands stay so: no copy in LAPACK
            bands[0] += shift[:banded]
            corner = corner + np.diag(shift[banded:])
        self.factor = linalg.cholesky_banded(bands, overwrite_ab=shift is not None, lower=True,
                                             check_finite=False)  # a copy of ours: in place
        self.whitened_border = self._triangular(matrix.border, "N")
        schur = corner - self.whitened_border.T @ self.whitened_border
        self.schur = 0.5 * (schur + schur.T)  # what the data tell about the border unknowns
        self._schur_factor = (linalg.cho_factor(self.schur) if len(corner) and factor_border
                              else None)

    def _triangular(self, rhs: Array, trans: str) -> Array:
        """L⁻¹ rhs ("N") or L⁻ᵀ rhs ("T"); rhs (n,) or (n, columns)."""
        if rhs.ndim == 2 and rhs.shape[1] == 0:
            return rhs.copy()
        columns = rhs if rhs.ndim == 2 else rhs[:, None]
        solved, info = lapack.dtbtrs(self.factor, columns, uplo="L", trans=trans)
        if info:
            raise linalg.LinAlgError(f"banded triangular solve failed (info {info})")
        return solved if rhs.ndim == 2 else solved[:, 0]

    def border_columns(self, border_inverse: Array) -> Array:
        """The border unknowns' columns (unknowns, p) of the matrix's inverse, given the
        inverse (or a pseudo-inverse, where it is singular) of the Schur complement:
        [−L⁻ᵀ W S⁻¹; S⁻¹]."""
        top = -self._triangular(self.whitened_border @ border_inverse, "T")
        return np.vstack([top, border_inverse])

    def solve(self, rhs: Array) -> Array:
        inner = self._triangular(rhs[:self.banded], "N")
        if self._schur_factor is None:
            return self._triangular(inner, "T")
        bottom = linalg.cho_solve(self._schur_factor,
                                  rhs[self.banded:] - self.whitened_border.T @ inner)
        top = self._triangular(inner - self.whitened_border @ bottom, "T")
        return np.concatenate([top, bottom])


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

    def __init__(self, groups: Sequence[RowBlocks], banded: int) -> None:
        self.groups = groups
        self.banded = banded
        self.rows = sum(g.band.shape[0] * g.band.shape[1] for g in groups)

    def split(self, r: Array) -> list[Array]:
        """Each group's residuals of r (rows,), shaped (K, a) as its row blocks."""
        sizes = np.cumsum([g.band.shape[0] * g.band.shape[1] for g in self.groups])[:-1]
        return [part.reshape(g.band.shape[:2])
                for part, g in zip(np.split(r, sizes), self.groups, strict=True)]

    def mean_squares(self, r: Array) -> list[float]:
        """The mean square of each group's residuals in r (rows,) (1 for an empty group)."""
        return [float(np.mean(rg * rg)) if rg.size else 1.0 for rg in self.split(r)]

    def _through(self, g: RowBlocks, columns: Array) -> Array:
        """J_g X (K, a, c) for X = ``columns`` (unknowns, c)."""
        through = g.border @ columns[self.banded:]
        width = g.band.shape[2]
        if width:
            through = through + g.band @ columns[g.start[:, None] + np.arange(width)]
        return through

    def weighted_gram(self, columns: Array, variances: Sequence[float]) -> Array:
        """Σ_g s_g² (J_g X)ᵀ(J_g X) (c, c) for X = ``columns`` (unknowns, c) and the
        groups' variances s_g². With X the border columns of (JᵀJ)⁻¹, the sandwich
        covariance of the border unknowns when group g's whitened residuals have variance
        s_g² instead of the 1 their weights state (with every s_g² = 1: S⁻¹)."""
        out = np.zeros((columns.shape[1], columns.shape[1]))
        for g, variance in zip(self.groups, variances, strict=True):
            if variance:
                flat = self._through(g, columns).reshape(-1, columns.shape[1])
                out += variance * (flat.T @ flat)
        return out

    def clustered_gram(self, columns: Array, r: Array, group: int) -> Array:
        """Σ_k u_k u_kᵀ (c, c), u_k = (J_k X)ᵀ r_k over the row blocks k of ``group`` with
        their residuals r_k (from r, all rows): that group's part of the sandwich when its
        residuals' variance is not known but read off the fit, block by block (robust to
        blocks of unequal size and to correlation within a block)."""
        g = self.groups[group]
        u = transposed_vector(self._through(g, columns), self.split(r)[group])
        return u.T @ u

    def gradient(self, r: Array) -> Array:
        """Jᵀr for residuals r (rows,)."""
        top = np.zeros(self.banded)
        bottom = 0.0
        for g, rg in zip(self.groups, self.split(r), strict=True):
            width = g.band.shape[2]
            if width:
                index = g.start[:, None] + np.arange(width)
                product = (rg[:, None, :] @ g.band)[:, 0]  # batched matmul: BLAS, not einsum
                top += np.bincount(index.ravel(), product.ravel(), minlength=self.banded)
            bottom = bottom + np.einsum("kap,ka->p", g.border, rg)
        return np.concatenate([top, np.broadcast_to(bottom, self.groups[0].border.shape[2])])

    def normal(self) -> BorderedMatrix:
        """JᵀJ as a :class:`BorderedMatrix`, its bands Fortran-ordered (see
        :meth:`StridedJacobian.normal`)."""
        n, p = self.banded, self.groups[0].border.shape[2]
        width = max(g.band.shape[2] for g in self.groups)
        columns = np.zeros((n, width + 1))  # one spare diagonal: see _add_gram
        border = np.zeros((n, p))
        corner = np.zeros((p, p))
        for g in self.groups:
            w = g.band.shape[2]
            flat = g.border.reshape(g.border.shape[0] * g.border.shape[1], p)
            corner += flat.T @ flat
            if not w:
                continue
            transposed = g.band.transpose(0, 2, 1)
            _add_gram(columns, transposed @ g.band, g.start)
            if p:
                rows = (g.start[:, None] + np.arange(w)).ravel()
                cross = (transposed @ g.border).reshape(len(rows), p)
                for column in range(p):
                    border[:, column] += np.bincount(rows, cross[:, column], minlength=n)
        return BorderedMatrix(columns.T, border, corner)


def _add_gram(columns: Array, gram: Array, start: Array) -> None:
    """Adds the symmetric blocks gram[k] (K, w, w) at rows and columns start[k]… to a
    matrix held as columns[c, d] = M[c + d, c] (at least w + 1 diagonals).

    Blocks at equal strides (a trajectory's steps) go in through skewed strided views,
    one addition per set of non-overlapping blocks (w > stride: consecutive blocks
    overlap, so they alternate between sets); other starts by one scatter."""
    count, w = gram.shape[:2]
    height = columns.shape[1]
    upper = gram * np.triu(np.ones((w, w), dtype=bool))  # the lower half mirrors it
    steps = np.diff(start)
    if count > 1 and (steps[0] <= 0 or np.any(steps != steps[0])):
        i, j = np.triu_indices(w)
        index = (start[:, None] + i) * height + (j - i)
        columns += np.bincount(index.ravel(), upper[:, i, j].ravel(),
                               minlength=columns.size).reshape(columns.shape)
        return
    classes = -(-w // int(steps[0])) if count > 1 else 1
    for c in range(min(classes, count)):
        part = upper[c::classes]
        view = _view(columns, start[c::classes], part.shape, (height - 1, 1))
        view += part


@dataclass(frozen=True)
class Block:
    """The columns one residual set has in each of its K groups: group k's unknowns
    ``start[k] + offset`` … ``+ s − 1``, as a dense (K, rows, s) array, or, when the block
    is diagonal (rows == s: an integrator's or an equality's scaled identity), as its
    diagonal (K, s)."""

    offset: int
    values: Array

    @property
    def size(self) -> int:
        return self.values.shape[-1]

    @property
    def diagonal(self) -> bool:
        return self.values.ndim == 2


@dataclass(frozen=True)
class ResidualSet:
    """K groups of ``rows`` residuals, group k at unknowns ``start[k]`` + the blocks'
    offsets; the starts at a constant stride (one group per sample or pair of samples)."""

    start: Array
    rows: int
    blocks: list[Block]


class StridedJacobian:
    """A Jacobian of residual sets made of dense and diagonal blocks (the factors of a
    trajectory), no border unknowns. JᵀJ is formed block pair by block pair (a diagonal
    block's products are scalings, not matrix products), each pair added at once through
    a strided view of the band storage, so the work follows the blocks' nonzeros."""

    def __init__(self, sets: list[ResidualSet], banded: int) -> None:
        for s in sets:  # the strided views below rely on it
            steps = np.diff(s.start)
            widest = max(b.size for b in s.blocks)
            if steps.size and (np.any(steps != steps[0]) or steps[0] < widest):
                raise ValueError("a residual set's groups must start at a constant stride "
                                 "no shorter than its widest block")
        self.sets, self.banded = sets, banded
        self.rows = sum(len(s.start) * s.rows for s in sets)

    def gradient(self, r: Array) -> Array:
        """Jᵀr for residuals r (rows,), in the sets' order, each (K, rows) row-major."""
        out = np.zeros(self.banded)
        first = 0
        for s in self.sets:
            count = len(s.start)
            rs = r[first:first + count * s.rows].reshape(count, s.rows)
            first += count * s.rows
            for block in s.blocks:
                product = (rs * block.values if block.diagonal
                           else (rs[:, None, :] @ block.values)[:, 0])
                view = _view(out, s.start + block.offset, product.shape, (1,))
                view += product
        return out

    def _pairs(self) -> list[tuple[ResidualSet, Block, Block]]:
        """Every set's block pairs (a, b) with a's columns before or equal to b's."""
        pairs = []
        for s in self.sets:
            ordered = sorted(s.blocks, key=lambda b: b.offset)
            pairs += [(s, a, b) for i, a in enumerate(ordered) for b in ordered[i:]]
        return pairs

    def normal(self) -> BorderedMatrix:
        """JᵀJ as a :class:`BorderedMatrix` (no border), its bands Fortran-ordered as
        LAPACK's band Cholesky reads them: ``columns[c, d]`` = JᵀJ[c + d, c]."""
        pairs = self._pairs()
        reach = max(b.offset - a.offset + (0 if a.diagonal and b.diagonal else b.size - 1)
                    for _, a, b in pairs)
        # at least one more diagonal than any block is wide: the skewed views below never
        # alias (a block's masked lower triangle lands on columns' unused ends)
        height = max(reach, max(b.size for _, b, _ in pairs)) + 1
        columns = np.zeros((self.banded, height))
        for s, a, b in pairs:
            shift = b.offset - a.offset
            if a.diagonal and b.diagonal:  # the product of two diagonals is one diagonal
                view = _view(columns, s.start + a.offset, a.values.shape, (height,), shift)
                view += a.values * b.values
                continue
            if a.diagonal:
                product = a.values[:, :, None] * b.values  # (K, s_a, s_b)
            elif b.diagonal:
                product = a.values.transpose(0, 2, 1) * b.values[:, None, :]
            else:
                product = a.values.transpose(0, 2, 1) @ b.values
            if a is b:  # the lower triangle is the upper's mirror
                product *= np.triu(np.ones((a.size, a.size), dtype=bool))
            # entry (i, j) of group k: column start[k] + a.offset + i, diagonal
            # shift + j − i, at flat index … + i (height − 1) + j
            view = _view(columns, s.start + a.offset, product.shape, (height - 1, 1), shift)
            view += product
        return BorderedMatrix(columns.T, np.zeros((self.banded, 0)), np.zeros((0, 0)))


def _view(array: Array, rows: Array, shape: tuple[int, ...], strides: tuple[int, ...],
          offset: int = 0) -> Array:
    """A writable view of C-ordered ``array`` whose slab k starts at flat element
    rows[k]·(row length) + offset, with ``strides`` (in elements) inside a slab; the
    slabs are equally spaced (``rows`` at a constant step) and the callers' slabs never
    overlap."""
    width = array.shape[1] if array.ndim == 2 else 1
    step = int(rows[1] - rows[0]) * width if len(rows) > 1 else 0
    flat = array.reshape(-1)
    item = array.itemsize
    return np.lib.stride_tricks.as_strided(
        flat[int(rows[0]) * width + offset:], shape=shape,
        strides=(step * item, *(s * item for s in strides)), writeable=True)


def _gradient(jac: sparse.spmatrix | BlockJacobian | StridedJacobian, r: Array) -> Array:
    """Jᵀr from any form of Jacobian."""
    if isinstance(jac, BlockJacobian | StridedJacobian):
        return jac.gradient(r)
    return sparse.csr_matrix(jac).T @ r


def _normal_equations(jac: sparse.spmatrix | BlockJacobian | StridedJacobian, r: Array,
                      banded: int) -> tuple[Array, BorderedMatrix]:
    """(Jᵀr, JᵀJ) from any form of Jacobian."""
    if isinstance(jac, BlockJacobian | StridedJacobian):
        return jac.gradient(r), jac.normal()
    jac = sparse.csr_matrix(jac)
    return jac.T @ r, BorderedMatrix.from_sparse(jac.T @ jac, banded)


# fun(x, jacobian) -> (residuals (m,), Jacobian (m, n) sparse or as blocks, or None)
Residuals = Callable[[Array, bool],
                     tuple[Array, "sparse.spmatrix | BlockJacobian | StridedJacobian | None"]]


def levenberg_marquardt(fun: Residuals, x0: Array, banded: int,
                        lower: Array | None = None,
                        upper: Array | None = None, max_iterations: int = 100,
                        ftol: float = 1e-10, xtol: float = 1e-10,
                        callback: Callable[[int, float], None] | None = None,
                        correct: Callable[[Array, Array], Array] | None = None,
                        scaling: str = "marquardt", damping: float = 1e-4,
                        atol: float = 0.0,
                        border_rtol: float = 0.0, final_normal: bool = True,
                        chord_stop: bool = False, gtol: float = 1e-10) -> LeastSquaresResult:
    """Minimize ½‖fun(x)‖² from x0 within [lower, upper] (Marquardt's scaling by diag JᵀJ,
    steps projected onto the box); JᵀJ is banded in the first ``banded`` unknowns (see
    :class:`BorderedMatrix`). ``callback(iteration, cost)`` after each iteration.
    ``correct(x, trial)`` may move each trial point before it is judged (a second-order
    correction: where stiff residuals curve, the straight step leaves their valley).
    ``scaling``: damping μ·diag(JᵀJ) ("marquardt", invariant to the units of x) or μ·I
    scaled by the mean of that diagonal ("levenberg": it does not block a direction that
    combines stiff unknowns with a weak one, where Marquardt's scaling damps it by the
    stiff ones' curvature), or μ·I in the units of the cost ("absolute", GTSAM's default:
    stiff directions take the Gauss–Newton step, a null direction is held); ``damping``:
    the initial μ. Stops when a step lowers the cost by less than ``ftol``·cost
    or ``atol``, or moves x by less than ``xtol``·‖x‖, or (``border_rtol``) when three
    steps in a row lower the cost by less than 1e-4 of itself and move no border unknown
    by more than ``border_rtol`` of its size: the states may still creep, the answer
    does not change. ``final_normal``: False when the caller does not need JᵀJ at the
    solution (``result.normal`` is then None), which saves forming it once more.
    ``chord_stop``: also stop, without forming JᵀJ and factoring it again, when the last
    step lowered the cost by what the linear model predicted (within 10 %) and the step
    that same factor gives from the new point would lower it by less than the
    tolerances: on a nearly linear problem the last iteration only confirms the first.
    ``gtol``: stop before trying a step when x is first-order optimal, every free
    unknown's gradient |(Jᵀr)ᵢ| at most ``gtol``·‖Jᵢ‖‖r‖ (the cosine between the residual
    and that column: invariant to the units of x and r). When no step lowers the cost,
    x is a solution if the Gauss–Newton model predicts no decrease worth the tolerances
    (at a stationary point rounding alone decides whether a trial lowers the cost), and
    a failure otherwise.

    BLAS runs on one thread meanwhile: its threads only slow down the band factorizations
    and the batched small products (the robot's inverse-dynamics graph: 2.9 s with two
    threads, 1.9 s with one)."""
    with threadpool_limits(1, "blas"):
        return _levenberg_marquardt(fun, x0, banded, lower, upper, max_iterations, ftol,
                                    xtol, callback, correct, scaling, damping, atol,
                                    border_rtol, final_normal, chord_stop, gtol)


@dataclass(frozen=True)
class _Trial:
    """A step that lowered the cost: the new point, its residuals and cost, the step, the
    factored system it came from (None when no system was factored) and the damping to
    try next."""

    x: Array
    r: Array
    cost: float
    step: Array
    system: BorderedSystem | None
    damping: float


def _levenberg_marquardt(fun: Residuals, x0: Array, banded: int, lower: Array | None,
                         upper: Array | None, max_iterations: int, ftol: float, xtol: float,
                         callback: Callable[[int, float], None] | None,
                         correct: Callable[[Array, Array], Array] | None, scaling: str,
                         damping: float, atol: float, border_rtol: float,
                         final_normal: bool, chord_stop: bool, gtol: float
                         ) -> LeastSquaresResult:
    x = np.asarray(x0, dtype=float).copy()
    lower = np.full(x.size, -np.inf) if lower is None else np.asarray(lower, dtype=float)
    upper = np.full(x.size, np.inf) if upper is None else np.asarray(upper, dtype=float)
    r, jac = fun(x, True)
    cost = 0.5 * float(r @ r)
    message = f"no convergence in {max_iterations} iterations"
    converged = False
    iteration = 0
    assert jac is not None
    gradient, normal = _normal_equations(jac, r, banded)
    settled = 0  # consecutive steps that left the border unknowns where they were
    for iteration in range(1, max_iterations + 1):
        diagonal = normal.diagonal()
        if _gradient_cosine(gradient, diagonal, cost, x, lower, upper) <= gtol:
            converged = True
            message = "converged: first-order optimal (the gradient is zero to gtol)"
            break
        trial = _lower_cost(fun, normal, gradient, _damping_scale(scaling, diagonal), damping,
                            x, cost, lower, upper, correct)
        if trial is None:
            return _stalled(x, cost, r, normal, gradient, lower, upper, iteration,
                            max(ftol * cost, atol))
        moved = float(np.linalg.norm(trial.x - x))
        decrease = cost - trial.cost
        predicted = -0.5 * float(gradient @ trial.step)  # the linear model's (small damping)
        border_moved = (np.abs(trial.x[banded:] - x[banded:])
                        <= border_rtol * np.abs(x[banded:]))
        settled = settled + 1 if decrease <= 1e-4 * cost and border_moved.all() else 0
        x, r, cost, damping = trial.x, trial.r, trial.cost, trial.damping
        if callback is not None:
            callback(iteration, cost)
        tolerance = max(ftol * cost, atol)
        stopped = decrease <= tolerance or moved <= xtol * (float(np.linalg.norm(x)) + xtol)
        r, jac = fun(x, True)
        assert jac is not None
        if (chord_stop and not (stopped or settled >= 3) and trial.system is not None
                and abs(decrease - predicted) < 0.1 * predicted
                and _chord_gains_nothing(trial.system, _gradient(jac, r), tolerance)):
            converged, message = True, "converged: the next step would not change the cost"
            if not final_normal:
                return LeastSquaresResult(x, cost, r, None, iteration, converged, message)
        gradient, normal = _normal_equations(jac, r, banded)
        if stopped or settled >= 3:
            converged, why = _settled(normal, gradient, x, lower, upper, banded, cost,
                                      tolerance, border_rtol, stopped)
            message, settled = (why, settled) if converged else (message, 0)
        if converged:
            break
    return LeastSquaresResult(x, cost, r, normal, iteration, converged, message)


def _damping_scale(scaling: str, diagonal: Array) -> Array:
    """What the damping μ multiplies, per unknown (see ``scaling`` of
    :func:`levenberg_marquardt`)."""
    if scaling == "marquardt":
        return np.maximum(diagonal, 1e-12 * max(diagonal.max(), 1e-300))
    if scaling == "levenberg":
        return np.full(diagonal.size, max(diagonal.mean(), 1e-300))
    return np.ones(diagonal.size)


def _lower_cost(fun: Residuals, normal: BorderedMatrix, gradient: Array, scale: Array,
                damping: float, x: Array, cost: float, lower: Array, upper: Array,
                correct: Callable[[Array, Array], Array] | None) -> _Trial | None:
    """The first damped step from x that lowers the cost, raising the damping ×4 after
    each one that does not; None once the damping passes 1e12."""
    while True:
        step, system = _bounded_step(normal, damping * scale, gradient, x, lower, upper)
        trial = np.clip(x + step, lower, upper)
        if correct is not None:
            trial = correct(x, trial)
        r_trial = None
        cost_trial = np.inf
        if np.all(np.isfinite(trial)):
            r_trial, _ = fun(trial, False)
            cost_trial = 0.5 * float(r_trial @ r_trial)
        if cost_trial < cost and r_trial is not None:
            return _Trial(trial, r_trial, cost_trial, step, system, max(damping / 3.0, 1e-18))
        damping *= 4.0
        if damping > 1e12:
            return None


def _stalled(x: Array, cost: float, r: Array, normal: BorderedMatrix, gradient: Array,
             lower: Array, upper: Array, iteration: int, tolerance: float,
             ) -> LeastSquaresResult:
    """No step lowers the cost: a solution when the Gauss–Newton model predicts no
    decrease worth ``tolerance`` (rounding alone then decides whether a trial lowers the
    cost), a failure otherwise."""
    if _model_predicts_no_decrease(normal, gradient, cost, x, lower, upper, tolerance):
        return LeastSquaresResult(x, cost, r, normal, iteration, True,
                                  "converged: no step lowers the cost, and the model "
                                  "predicts none")
    return LeastSquaresResult(x, cost, r, normal, iteration, False,
                              "no step lowers the cost (not a stationary point: is the "
                              "Jacobian right?)")


def _chord_gains_nothing(system: BorderedSystem, gradient: Array, tolerance: float) -> bool:
    """The step the last factor gives from the new point (the model predicted the last
    decrease) would lower the cost by at most ``tolerance``: another iteration is not
    worth a new factorization."""
    chord = system.solve(-gradient)
    return -0.5 * float(gradient @ chord) <= tolerance


def _free(gradient: Array, x: Array, lower: Array, upper: Array) -> Array:
    """The unknowns that a descent step (along −gradient) may move: not those on a bound
    that the step would leave."""
    return ~(((x <= lower) & (gradient > 0)) | ((x >= upper) & (gradient < 0)))


def _gradient_cosine(gradient: Array, diagonal: Array, cost: float, x: Array,
                     lower: Array, upper: Array) -> float:
    """max over the free unknowns of |(Jᵀr)ᵢ| / (‖Jᵢ‖‖r‖), with ‖Jᵢ‖² = diag(JᵀJ)ᵢ and
    ‖r‖² = 2·cost: 0 at a first-order optimum, at most 1 anywhere."""
    norms = np.sqrt(np.maximum(diagonal, 0.0) * 2.0 * cost)
    free = _free(gradient, x, lower, upper)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(free & (gradient != 0), np.abs(gradient) / norms, 0.0)
    return float(np.max(np.nan_to_num(ratio, nan=np.inf), initial=0.0))


def _gauss_newton_step(normal: BorderedMatrix, gradient: Array, x: Array, lower: Array,
                       upper: Array) -> Array | None:
    """The barely damped Gauss–Newton step of the free unknowns (those on a bound the
    step would leave held), or None when even that does not factor."""
    free = _free(gradient, x, lower, upper)
    diagonal = normal.diagonal()
    tiny = 1e-12 * np.maximum(diagonal, 1e-300)
    big = 1e12 * max(float(diagonal.max(initial=0.0)), 1.0)
    try:
        step = normal.factor(tiny + big * ~free).solve(np.where(free, -gradient, 0.0))
    except linalg.LinAlgError:
        return None
    return step if np.all(np.isfinite(step)) else None


def _model_predicts_no_decrease(normal: BorderedMatrix, gradient: Array, cost: float,
                                x: Array, lower: Array, upper: Array,
                                tolerance: float) -> bool:
    """Whether the Gauss–Newton step would lower the cost by at most ``tolerance`` plus
    rounding in the cost, −½ gᵀs: x is stationary to what the stopping tests can tell."""
    step = _gauss_newton_step(normal, gradient, x, lower, upper)
    if step is None:
        return False
    rounding = 64 * np.finfo(float).eps * cost
    return -0.5 * float(gradient @ step) <= max(tolerance, rounding)


def _settled(normal: BorderedMatrix, gradient: Array, x: Array, lower: Array, upper: Array,
             banded: int, cost: float, tolerance: float, border_rtol: float,
             stopped: bool) -> tuple[bool, str]:
    """(converged, why) once the steps stopped changing the cost or x (``stopped``) or
    the border unknowns: a small change may come from a heavily damped step far from a
    minimum, so the barely damped Gauss–Newton step decides. Stopped: converged when it
    predicts no decrease worth ``tolerance``; border: when it moves no border unknown by
    more than ``border_rtol`` of its size (the states may still creep)."""
    if stopped and _model_predicts_no_decrease(normal, gradient, cost, x, lower, upper,
                                               tolerance):
        return True, "converged: the cost or the step stopped changing"
    if not stopped:
        step = _gauss_newton_step(normal, gradient, x, lower, upper)
        if step is not None and np.all(np.abs(step[banded:])
                                       <= border_rtol * np.abs(x[banded:])):
            return True, "converged: the border unknowns stopped changing"
    return False, ""


def _bounded_step(normal: BorderedMatrix, shift: Array, gradient: Array, x: Array,
                  lower: Array, upper: Array) -> tuple[Array, BorderedSystem | None]:
    """The damped Gauss–Newton step with the unknowns that sit on a bound and would leave
    it held fixed (re-solved until that set settles), so the others' step accounts for
    them; NaN if the system is not positive definite. Also the factored system when no
    unknown was held (else None)."""
    frozen = np.zeros(x.size, dtype=bool)
    big = 1e12 * max(float(np.max(shift, initial=0.0)), 1.0)
    step = np.full(x.size, np.nan)
    system = None
    for _ in range(5):
        try:
            rhs = np.where(frozen, 0.0, -gradient)
            system = normal.factor(shift + big * frozen)
            step = system.solve(rhs)
        except linalg.LinAlgError:
            return np.full(x.size, np.nan), None
        leaving = ((x <= lower) & (step < 0)) | ((x >= upper) & (step > 0))
        if not np.any(leaving & ~frozen):
            break
        frozen |= leaving
    return np.where(frozen, 0.0, step), None if frozen.any() else system
