"""KernelSet → C source, cffi declarations and the metadata the runtime needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jinja2
import sympy as sp

from mbgen import __version__
from mbgen.codegen.c_printer import kernel_body
from mbgen.codegen.cache import templates_dir
from mbgen.symbolic.derive import KernelSet

STRIDES = {"q": "MB_N", "qd": "MB_N", "v": "MB_N", "lam": "MB_M", "p": "p_stride"}


@dataclass
class GeneratedSource:
    c_source: str
    cdef: str
    meta: dict[str, Any]


def template_environment() -> jinja2.Environment:
    loader = jinja2.FunctionLoader(lambda name: template_text(name))
    return jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True)


def template_text(name: str) -> str:
    return templates_dir().joinpath(name).read_text()


def _c_names(kernels: KernelSet) -> dict[sp.Symbol, str]:
    return {symbol: f"{array}[{k}]" for array, symbols in kernels.symbols.items()
            for k, symbol in enumerate(symbols)}


def cdef_for(kernels: KernelSet) -> str:
    lines = []
    for k in kernels.kernels:
        args = "".join(f"const double* {a}, " for a in k.inputs)
        lines.append(f"void mb_{k.name}(long count, {args}long p_stride, double* out);")
    return "\n".join(lines) + "\n"


def generate(kernels: KernelSet, extra_cdef: str = "", extra_context: dict | None = None,
             progress: Any = None) -> GeneratedSource:
    """Render the module's C source; ``progress(kernel_name)`` is called per kernel."""
    model = kernels.model
    mechanism = model.mechanism
    names = _c_names(kernels)
    rendered = []
    for k in kernels.kernels:
        if progress is not None:
            progress(k.name)
        rendered.append({
            "name": k.name, "doc": k.doc, "inputs": k.inputs, "nnz": k.nnz,
            "strides": STRIDES,
            "pattern": [[index[axis] for index, _ in k.entries] for axis in range(len(k.shape))]
            if len(k.shape) > 1 else [],
            "body": kernel_body([e for _, e in k.entries], names),
        })
    context = {
        "version": __version__, "source": mechanism.source.replace("*/", "* /"),
        "name": mechanism.name.replace("*/", "* /"), "n": model.n, "m": model.m,
        "np": len(model.params), "kernels": rendered, **(extra_context or {}),
    }
    c_source = template_environment().get_template("mechanism.c.j2").render(context)
    return GeneratedSource(c_source, cdef_for(kernels) + extra_cdef, build_meta(kernels))


def build_meta(kernels: KernelSet) -> dict[str, Any]:
    model = kernels.model
    mech = model.mechanism
    values = mech.parameter_values

    def number(expr: sp.Expr) -> float:
        return float(sp.N(expr.subs(values)))

    return {
        "name": mech.name,
        "source": mech.source,
        "mbgen_version": __version__,
        "n": model.n,
        "m": model.m,
        "coordinate_names": model.coordinate_names,
        "q0": mech.initial_coordinates(),
        "parameters": {p.name: p.value for p in mech.parameters},
        "constraint_labels": [c.label for c in model.constraints],
        "sensor_labels": model.sensor_labels,
        "actuators": [{"name": a.name, "coordinate": a.coordinate} for a in mech.actuators],
        "independent": mech.independent,
        "dissipative": any(s.damping != 0 for s in mech.springs),
        "points": [{"index": p.index, "name": p.name, "fixed": p.fixed, "x": number(p.x),
                    "y": number(p.y)} for p in mech.points],
        "bodies": [{"name": b.name, "points": list(b.points), "mass": number(b.mass),
                    "visual": b.visual} for b in mech.bodies],
        "kernels": {k.name: {"inputs": list(k.inputs), "shape": list(k.shape),
                             "indices": [list(index) for index, _ in k.entries]}
                    for k in kernels.kernels},
    }
