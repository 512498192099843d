"""Every quantity the generated module evaluates, as sparse SymPy kernels.

A kernel is a function of some of the input vectors (q, qd, v, lam, p) with a sparse
output. Derivatives are taken entry by entry and only with respect to the symbols an
entry really contains, so derivation time grows linearly with the mechanism's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sympy as sp

from mbgen.symbolic.differentiate import Differentiator
from mbgen.symbolic.joint_space import joint_space_of
from mbgen.symbolic.model import SymbolicModel
from mbgen.symbolic.reduced import reduced_kernels

Entry = tuple[tuple[int, ...], sp.Expr]


@dataclass
class Kernel:
    """``out[entries[k].index] = entries[k].expr`` for a function of ``inputs``."""

    name: str
    inputs: tuple[str, ...]  # among "q", "qd", "v", "lam", "qdd", "p", "k"
    shape: tuple[int, ...]
    entries: list[Entry]
    doc: str

    @property
    def nnz(self) -> int:
        return len(self.entries)


@dataclass
class KernelSet:
    model: SymbolicModel
    symbols: dict[str, list[sp.Symbol]]  # input name → its symbols, in order
    kernels: list[Kernel]
    # the independent coordinates (indices in q) of the joint-space kernels, if any, or
    # why there are none
    joint_space: list[int] | str = "not derived"

    def __getitem__(self, name: str) -> Kernel:
        for kernel in self.kernels:
            if kernel.name == name:
                return kernel
        raise KeyError(name)


def _dense(values: Sequence[sp.Expr]) -> list[Entry]:
    return [((i,), v if isinstance(v, sp.Basic) else sp.Integer(v)) for i, v in enumerate(values)]


def _jacobian(rows: Sequence[sp.Expr], wrt: Sequence[sp.Symbol], diff: Differentiator
              ) -> list[Entry]:
    position = {s: k for k, s in enumerate(wrt)}
    entries: list[Entry] = []
    for i, expr in enumerate(rows):
        for symbol in sorted(expr.free_symbols & position.keys(), key=position.__getitem__):
            derivative = diff(expr, symbol)
            if derivative != 0:
                entries.append(((i, position[symbol]), derivative))
    return entries


def _matvec(entries: Iterable[Entry], vector: Sequence[sp.Expr], size: int) -> list[sp.Expr]:
    """Rows of (sparse matrix)·vector."""
    out: list[sp.Expr] = [sp.Integer(0)] * size
    for (i, j), value in entries:
        out[i] += value * vector[j]
    return out


def _gradient(terms: Iterable[sp.Expr], wrt: Sequence[sp.Symbol], diff: Differentiator
              ) -> list[sp.Expr]:
    position = {s: k for k, s in enumerate(wrt)}
    out: list[sp.Expr] = [sp.Integer(0)] * len(wrt)
    for term in terms:
        for symbol in term.free_symbols & position.keys():
            out[position[symbol]] += diff(term, symbol)
    return out


def _parameter_tensor(entries: Iterable[Entry], params: Sequence[sp.Symbol],
                      diff: Differentiator) -> list[Entry]:
    """d(entries)/dp as a tensor whose last index is the parameter."""
    position = {s: k for k, s in enumerate(params)}
    out: list[Entry] = []
    for index, expr in entries:
        for symbol in sorted(expr.free_symbols & position.keys(), key=position.__getitem__):
            derivative = diff(expr, symbol)
            if derivative != 0:
                out.append(((*index, position[symbol]), derivative))
    return out


def derive_kernels(model: SymbolicModel) -> KernelSet:
    n, m = model.n, model.m
    q, qd, params = model.q, model.qd, model.params
    v = [sp.Symbol(f"v_{k}", real=True) for k in range(n)]
    lam = [sp.Symbol(f"lam_{k}", real=True) for k in range(m)]
    symbols = {"q": q, "qd": qd, "v": v, "lam": lam, "qdd": model.qdd, "p": params}
    diff = Differentiator()

    phi = [c.expr for c in model.constraints]
    phi_q = _jacobian(phi, q, diff)
    phiq_qd = _matvec(phi_q, qd, m)
    # Φ̇q q̇ = (Φq q̇)_q q̇, so c = -Φ̇q q̇
    dphiq_qd = _matvec(_jacobian(phiq_qd, q, diff), qd, m)
    phiT_lam = _matvec((((j, i), e) for (i, j), e in phi_q), lam, n)

    mass: list[Entry] = [((i, j), e) for (i, j), e in sorted(model.mass.items())]
    forces = [-g for g in _gradient(model.potential_terms, q, diff)]
    forces = [f + d for f, d in zip(forces, model.dissipative_forces, strict=True)]
    # one Add of all terms: adding them one at a time re-flattens the sum each time (O(n²))
    kinetic = sp.Add(*(e * qd[i] * qd[j] for (i, j), e in mass)) / 2
    potential = sp.Add(*model.potential_terms)

    kernels = [
        Kernel("phi", ("q", "p"), (m,), _dense(phi), "constraints Φ(q)"),
        Kernel("phi_q", ("q", "p"), (m, n), phi_q, "Jacobian Φq"),
        Kernel("phiq_v_q", ("q", "v", "p"), (m, n),
               _jacobian(_matvec(phi_q, v, m), q, diff), "tensor product (Φq v)_q"),
        Kernel("dphiq_qd", ("q", "qd", "p"), (m,), _dense(dphiq_qd), "Φ̇q q̇ (c = -Φ̇q q̇)"),
        Kernel("dphiq_qd_q", ("q", "qd", "p"), (m, n), _jacobian(dphiq_qd, q, diff),
               "(Φ̇q q̇)_q"),
        Kernel("dphiq_qd_qd", ("q", "qd", "p"), (m, n), _jacobian(dphiq_qd, qd, diff),
               "(Φ̇q q̇)_q̇"),
        Kernel("phiqT_lam_q", ("q", "lam", "p"), (n, n), _jacobian(phiT_lam, q, diff),
               "tensor product (Φqᵀ λ)_q"),
        Kernel("mass", ("q", "p"), (n, n), mass, "mass matrix M"),
        Kernel("mass_v_q", ("q", "v", "p"), (n, n), _jacobian(_matvec(mass, v, n), q, diff),
               "tensor product (M v)_q"),
        Kernel("forces", ("q", "qd", "p"), (n,), _dense(forces), "generalized forces Q"),
        Kernel("forces_q", ("q", "qd", "p"), (n, n), _jacobian(forces, q, diff), "∂Q/∂q"),
        Kernel("forces_qd", ("q", "qd", "p"), (n, n), _jacobian(forces, qd, diff), "∂Q/∂q̇"),
        Kernel("energy", ("q", "qd", "p"), (2,), _dense([kinetic, potential]),
               "kinetic and potential energy"),
        Kernel("phi_p", ("q", "p"), (m, len(params)),
               _parameter_tensor(_dense(phi), params, diff), "∂Φ/∂p"),
        Kernel("mass_p", ("q", "p"), (n, n, len(params)),
               _parameter_tensor(mass, params, diff), "∂M/∂p"),
        Kernel("forces_p", ("q", "qd", "p"), (n, len(params)),
               _parameter_tensor(_dense(forces), params, diff), "∂Q/∂p"),
        # what ∂q̈/∂p needs from the KKT system's other terms (v: q̈, lam: λ, qd: q̇)
        Kernel("mass_v_p", ("q", "v", "p"), (n, len(params)),
               _parameter_tensor(_dense(_matvec(mass, v, n)), params, diff), "∂(M v)/∂p"),
        Kernel("phiqT_lam_p", ("q", "lam", "p"), (n, len(params)),
               _parameter_tensor(_dense(phiT_lam), params, diff), "∂(Φqᵀ λ)/∂p"),
        Kernel("phiq_v_p", ("q", "v", "p"), (m, len(params)),
               _parameter_tensor(_dense(_matvec(phi_q, v, m)), params, diff), "∂(Φq v)/∂p"),
        Kernel("dphiq_qd_p", ("q", "qd", "p"), (m, len(params)),
               _parameter_tensor(_dense(dphiq_qd), params, diff), "∂(Φ̇q q̇)/∂p"),
    ]
    if model.sensors:
        ns = len(model.sensors)
        kernels += [
            Kernel("sensors", ("q", "qd", "p"), (ns,), _dense(model.sensors), "sensor model h"),
            Kernel("sensors_q", ("q", "qd", "p"), (ns, n), _jacobian(model.sensors, q, diff),
                   "∂h/∂q"),
            Kernel("sensors_qd", ("q", "qd", "p"), (ns, n), _jacobian(model.sensors, qd, diff),
                   "∂h/∂q̇"),
            Kernel("sensors_p", ("q", "qd", "p"), (ns, len(params)),
                   _parameter_tensor(_dense(model.sensors), params, diff), "∂h/∂p"),
        ]
    if model.accelerometers:
        na, readings = len(model.accelerometers), model.accelerometers
        kernels += [
            Kernel("accelerometers", ("q", "qdd", "p"), (na,), _dense(readings),
                   "accelerometers' readings Rᵀ(a − g)"),
            Kernel("accelerometers_q", ("q", "qdd", "p"), (na, n),
                   _jacobian(readings, q, diff), "their ∂/∂q"),
            Kernel("accelerometers_qdd", ("q", "qdd", "p"), (na, n),
                   _jacobian(readings, model.qdd, diff), "their ∂/∂q̈"),
            Kernel("accelerometers_p", ("q", "qdd", "p"), (na, len(params)),
                   _parameter_tensor(_dense(readings), params, diff), "their ∂/∂p"),
        ]
    if model.coefficients:
        nc = len(model.coefficients)
        kernels += [
            Kernel("coefficients", ("q", "p"), (nc,), _dense(model.coefficients),
                   "dry-friction bounds, then actuator gains"),
            Kernel("coefficients_p", ("q", "p"), (nc, len(params)),
                   _parameter_tensor(_dense(model.coefficients), params, diff),
                   "∂(dry-friction bounds, actuator gains)/∂p"),
        ]
    space = joint_space_of(model)
    if not isinstance(space, str):
        reduced = reduced_kernels(space, q, qd, params, model.mass, forces, diff)
        symbols["k"] = [symbol for symbol, _ in reduced.constants]
        d = len(space.z)
        kernels += [
            Kernel("reduced_constants", ("q", "p"), (len(reduced.constants),),
                   _dense([e for _, e in reduced.constants]),
                   "the joint-space kernels' parameter parts k"),
            Kernel("reduced_terms", ("q", "qd", "k"), (len(reduced.terms),),
                   _dense(reduced.terms),
                   "joint space: Mz, bz, ∂bz/∂z, ∂bz/∂ż, ∂Mz/∂z (symbolic/reduced.py)"),
            Kernel("reduced_accelerations", ("q", "qd", "k"), (d * d + d,),
                   _dense(reduced.terms[:d * d + d]),
                   "joint space: Mz, bz alone (z̈ without its Jacobians)"),
            Kernel("reduced_basis", ("q", "k"), (n, d), reduced.basis, "J = ∂q/∂z"),
            Kernel("reduced_basis_q", ("q", "k"), (n, d * d), reduced.basis_q, "∂J/∂z"),
        ]
    return KernelSet(model, symbols, kernels, space if isinstance(space, str) else space.z)
