"""The build: the generated file compiled as several translation units side by side."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import SHIPPED_DIR

import mbgen
import mbgen.codegen.emit


def _inputs(mech: mbgen.runtime.compiled.CompiledMechanism, kernel: str,
            rng: np.random.Generator) -> dict[str, np.ndarray]:
    sizes = {"q": mech.n, "qd": mech.n, "v": mech.n, "lam": mech.m}
    inputs = {name: rng.standard_normal((16, size)) for name, size in sizes.items()
              if name in mech.meta["kernels"][kernel]["inputs"]}
    if "q" in inputs:
        inputs["q"] = mech.q0 + 0.05 * inputs["q"]
    return inputs


def test_a_module_in_parts_computes_what_one_unit_computes(tmp_path: Path, out_dir: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            ) -> None:
    """The four-bar's kernels and KKT functions are spread over two or more translation
    units, each compiled once; every kernel and the dynamics (whose unrolled KKT functions
    sit in several parts) give the same bits as the file compiled as one unit."""
    parted = mbgen.load(str(SHIPPED_DIR / "fourbar.yaml"), out_dir=str(out_dir))
    parts = parted.meta["parts"]
    assert parts >= 2
    assert sorted(p.name for p in parted.directory.glob("*.o")) == [
        f"mechanism_{k}.o" for k in range(parts)]

    whole_source = tmp_path / "fourbar.yaml"  # another hash: another module name
    whole_source.write_text((SHIPPED_DIR / "fourbar.yaml").read_text() + "# one unit\n")
    monkeypatch.setattr(mbgen.codegen.emit, "PART_COST", 10**15)
    whole = mbgen.load(str(whole_source), out_dir=str(tmp_path / "out"))
    assert whole.meta["parts"] == 1

    for kernel in parted.meta["kernels"]:
        inputs = _inputs(parted, kernel, np.random.default_rng(1))
        np.testing.assert_array_equal(parted.evaluate(kernel, **inputs)[0],
                                      whole.evaluate(kernel, **inputs)[0], err_msg=kernel)
    rng = np.random.default_rng(2)
    q = parted.solve_position(parted.q0 + 0.01 * rng.standard_normal((16, parted.n)))
    qd = parted.project_velocity(q, rng.standard_normal((16, parted.n)))
    for a, b in zip(parted.forward_dynamics_jacobians(q, qd),
                    whole.forward_dynamics_jacobians(q, qd), strict=True):
        np.testing.assert_array_equal(a, b)
    shutil.rmtree(tmp_path / "out")


def test_templates_are_compiled_once_into_the_cache(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The templates' compiled form is kept in $MBGEN_CACHE/templates; a damaged one is
    compiled anew, and the text rendered is the same either way."""
    from mbgen.codegen.templates import render

    monkeypatch.setenv("MBGEN_CACHE", str(tmp_path))
    context = {"name": "x", "upper": "X", "version": "v", "mechanism": "m", "digest": "d",
               "n": 1, "m": 0, "coordinate_names": ["a"], "q0": [0.0], "parameters": [],
               "active_rows": [], "program": "example", "program_text": "int main(void);",
               "names": ["main"]}
    first = render("export_example.c.j2", **context)
    cached = sorted((tmp_path / "templates").iterdir())
    assert cached
    for path in cached:
        path.write_bytes(b"damaged")
    assert render("export_example.c.j2", **context) == first
    assert all(path.read_bytes() != b"damaged" for path in cached)  # compiled anew


def test_a_first_build_into_a_relative_out_dir(tmp_path: Path, quick_core: list[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's own case: `mbgen simulate` on a fresh machine builds into ./generated
    while the core is not cached yet, so the mechanism's compilers run beside the core's
    (whose jobs run in their own staging directory): every path they get is absolute."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MBGEN_CACHE", "cache")  # relative too, and empty
    mech = mbgen.load(SHIPPED_DIR / "fourbar.yaml", out_dir="generated")
    assert mech.n == 4 and np.isfinite(mech.forward_dynamics(mech.q0, np.zeros(4))).all()
    assert any((tmp_path / "cache" / "core").iterdir())
