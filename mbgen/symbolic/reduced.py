"""The dynamics in a spatial open chain's joint angles z: d equations instead of n + m.

With q̇ = J(q) ż (``joint_space.py``), the constrained equations of motion projected on
J are Mz z̈ = Jᵀ Qext − bz, with Mz = Jᵀ M J and bz = Jᵀ(M c − Q), c = J̇ ż (all in the
state q, q̇ itself: J is polynomial in q, so nothing nests). Their derivatives along the
constraint manifold at constant ż (the KKT path's ∂z̈/∂z, ∂z̈/∂ż) follow from
δq = J δz, δq̇ = (∂(J ż)/∂q) J δz and δq̇ = J δż, by the chain rule on the q, q̇
derivatives. The core then factors Mz (d × d) per state (csrc/joint_space.c).

Kernels (derive.py; every parameter enters through the constants, so a batch with one
parameter set evaluates them once):
  reduced_constants  (p)             the parameter parts, k
  reduced_terms      (q, q̇, k)       [Mz (d×d), bz (d), ∂bz/∂z (d×d), ∂bz/∂ż (d×d),
                                      ∂Mz/∂z (d×d×d, [a][b][w] = ∂Mz_ab/∂z_w)], row-major,
                                      in one function so that they share subexpressions
  reduced_accelerations (q, q̇, k)    [Mz, bz] alone: z̈ without its Jacobians
  reduced_basis      (q, k)          J (n × d)
  reduced_basis_q    (q, k)          ∂J/∂z (n × d², [i][k d + w] = ∂J_ik/∂z_w)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sympy as sp

from mbgen.symbolic.differentiate import Differentiator
from mbgen.symbolic.joint_space import JointSpace

Matrix = list[list[sp.Expr]]
Entry = tuple[tuple[int, ...], sp.Expr]


class _Along:
    """Derivatives along the constraint manifold of expressions in q, q̇."""

    def __init__(self, q: Sequence[sp.Symbol], qd: Sequence[sp.Symbol], basis: Matrix,
                 rate_change: Matrix, diff: Differentiator) -> None:
        self.q, self.qd, self.basis, self.rate_change = q, qd, basis, rate_change
        self.position = {s: i for i, s in enumerate(q)}
        self.rate = {s: i for i, s in enumerate(qd)}
        self.diff = diff
        self.d = len(basis[0]) if basis else 0

    def _chain(self, expr: sp.Expr, slots: dict[sp.Symbol, int], through: Matrix
               ) -> list[sp.Expr]:
        out = [sp.Integer(0)] * self.d
        for symbol in expr.free_symbols & slots.keys():
            row = through[slots[symbol]]
            if any(e != 0 for e in row):
                partial = self.diff(expr, symbol)
                for k, entry in enumerate(row):
                    if entry != 0:
                        out[k] += partial * entry
        return out

    def z(self, expr: sp.Expr) -> list[sp.Expr]:
        """∂expr/∂z at constant ż: δq = J δz, δq̇ = (∂(Jż)/∂q) J δz."""
        moved = self._chain(expr, self.position, self.basis)
        rates = self._chain(expr, self.rate, self.rate_change)
        return [a + b for a, b in zip(moved, rates, strict=True)]

    def zd(self, expr: sp.Expr) -> list[sp.Expr]:
        """∂expr/∂ż: δq̇ = J δż."""
        return self._chain(expr, self.rate, self.basis)


def hoist(exprs: Sequence[sp.Expr], params: Sequence[sp.Symbol], prefix: str
          ) -> tuple[list[sp.Expr], list[tuple[sp.Symbol, sp.Expr]]]:
    """``exprs`` with each largest parameter-only part (a factor, a sum of terms, a
    function's value) replaced by a constant symbol ``<prefix><k>``: (the expressions,
    [(constant, its value in the parameters)]). The constants are evaluated once per
    parameter set instead of once per state."""
    known = set(params)
    constants: dict[sp.Expr, sp.Symbol] = {}
    memo: dict[sp.Expr, sp.Expr] = {}
    parameter_only: dict[sp.Expr, bool] = {}

    def fixed(expr: sp.Expr) -> bool:
        """Only parameters and numbers (memoized: free_symbols walks the whole tree)."""
        found = parameter_only.get(expr)
        if found is None:
            found = parameter_only[expr] = (expr in known or expr.is_Number if expr.is_Atom
                                            else all(fixed(a) for a in expr.args))
        return found

    def constant(expr: sp.Expr) -> sp.Expr:
        if expr.is_Number:
            return expr
        symbol = constants.get(expr)
        if symbol is None:
            symbol = constants[expr] = sp.Symbol(f"{prefix}{len(constants)}", real=True)
        return symbol

    def visit(expr: sp.Expr) -> sp.Expr:
        if expr.is_Atom:
            return constant(expr) if expr in known else expr
        found = memo.get(expr)
        if found is not None:
            return found
        if fixed(expr):
            found = constant(expr)
        elif expr.is_Add or expr.is_Mul:
            parts = [a for a in expr.args if fixed(a)]
            moving = [visit(a) for a in expr.args if not fixed(a)]
            found = expr.func(constant(expr.func(*parts)), *moving) if parts else expr.func(
                *moving)
        else:
            found = expr.func(*[visit(a) for a in expr.args])
        memo[expr] = found
        return found

    out = [visit(e) for e in exprs]
    return out, [(symbol, expr) for expr, symbol in constants.items()]


@dataclass
class ReducedKernels:
    """The joint-space kernels' outputs, before they become ``Kernel``s: every parameter
    appears through ``constants`` (evaluated once per parameter set)."""

    constants: list[tuple[sp.Symbol, sp.Expr]]
    terms: list[sp.Expr]  # Mz, bz, ∂bz/∂z, ∂bz/∂ż, ∂Mz/∂z, row-major
    basis: list[Entry]  # J: (i, k)
    basis_q: list[Entry]  # ∂J_ik/∂z_w: (i, k d + w)


def reduced_kernels(space: JointSpace, q: Sequence[sp.Symbol], qd: Sequence[sp.Symbol],
                    params: Sequence[sp.Symbol], mass: dict[tuple[int, int], sp.Expr],
                    forces: Sequence[sp.Expr], diff: Differentiator) -> ReducedKernels:
    """The terms of the module's docstring, their parameter parts hoisted. By the product
    rule on Mz = Jᵀ(M J) and bz = Jᵀ y, y = M c − Q, only J's entries, c and Q (short
    expressions) are differentiated, never the long sums."""
    n, d = len(q), len(space.z)
    basis = space.basis
    zd = [qd[i] for i in space.z]
    # J ż and its change as q moves: q̇ on the manifold, and c = J̇ ż = (∂(Jż)/∂q) q̇
    rates = [sp.Add(*(e * zd[k] for k, e in enumerate(row) if e != 0)) for row in basis]
    position = {s: i for i, s in enumerate(q)}
    rate_q: list[dict[int, sp.Expr]] = [
        {position[s]: diff(expr, s) for s in expr.free_symbols & position.keys()}
        for expr in rates]
    rate_change = [[sp.Add(*(e * basis[j][k] for j, e in row.items() if basis[j][k] != 0))
                    for k in range(d)] for row in rate_q]
    c = [sp.Add(*(e * qd[j] for j, e in row.items())) for row in rate_q]
    by_row: dict[int, list[tuple[int, sp.Expr]]] = {}
    for (i, j), value in mass.items():
        by_row.setdefault(i, []).append((j, value))

    def times_mass(vector: Sequence[sp.Expr]) -> list[sp.Expr]:
        return [sp.Add(*(value * vector[j] for j, value in by_row.get(i, []))) for i in range(n)]

    def dot(a: Sequence[sp.Expr], b: Sequence[sp.Expr]) -> sp.Expr:
        return sp.Add(*(x * y for x, y in zip(a, b, strict=True) if x != 0 and y != 0))

    along = _Along(q, qd, basis, rate_change, diff)
    columns = [[row[k] for row in basis] for k in range(d)]  # J[:, k]
    moved = [[along.z(e) for e in row] for row in basis]  # moved[i][k][w] = ∂J_ik/∂z_w
    # change[w][k]: the column ∂J[:, k]/∂z_w (J depends on q alone)
    change = [[[moved[i][k][w] for i in range(n)] for k in range(d)] for w in range(d)]
    mass_columns = [times_mass(column) for column in columns]
    y = [mc - f for mc, f in zip(times_mass(c), forces, strict=True)]
    c_z, c_zd = [along.z(e) for e in c], [along.zd(e) for e in c]
    forces_z, forces_zd = [along.z(e) for e in forces], [along.zd(e) for e in forces]
    # ∂y/∂z_w and ∂y/∂ż_w
    y_z = [[mc - f[w] for mc, f in zip(times_mass([e[w] for e in c_z]), forces_z, strict=True)]
           for w in range(d)]
    y_zd = [[mc - f[w] for mc, f in zip(times_mass([e[w] for e in c_zd]), forces_zd,
                                        strict=True)] for w in range(d)]
    pairs = [(a, b) for a in range(d) for b in range(d)]
    terms = [dot(columns[a], mass_columns[b]) for a, b in pairs]  # Mz
    terms += [dot(columns[a], y) for a in range(d)]  # bz
    terms += [dot(change[w][a], y) + dot(columns[a], y_z[w]) for a, w in pairs]
    terms += [dot(columns[a], y_zd[w]) for a, w in pairs]
    terms += [dot(change[w][a], mass_columns[b]) + dot(mass_columns[a], change[w][b])
              for a, b in pairs for w in range(d)]
    basis_entries: list[Entry] = [((i, k), e) for i, row in enumerate(basis)
                                  for k, e in enumerate(row) if e != 0]
    basis_q: list[Entry] = [((i, k * d + w), moved[i][k][w]) for (i, k), _ in basis_entries
                            for w in range(d) if moved[i][k][w] != 0]
    hoisted, constants = hoist([*terms, *(e for _, e in basis_entries),
                                *(e for _, e in basis_q)], params, "k_")
    ends = (len(terms), len(terms) + len(basis_entries))
    return ReducedKernels(
        constants, hoisted[:ends[0]],
        [(index, e) for (index, _), e in zip(basis_entries, hoisted[ends[0]:ends[1]],
                                             strict=True)],
        [(index, e) for (index, _), e in zip(basis_q, hoisted[ends[1]:], strict=True)])
