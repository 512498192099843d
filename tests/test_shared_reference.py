"""The customer's reference files in the shared directory compile unchanged, and the copies in
tests/data/reference, which every other test uses, are still identical to them.

The only tests that read the shared directory (``../shared`` beside the repository, or
``$MBGEN_SHARED``). A user's clone has none: then this whole module is one skip.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import REFERENCE_DATA, REFERENCE_DIR, REFERENCE_MECHANISMS, SHARED_REFERENCE

from mbgen.model import load_mechanism
from mbgen.runtime.compiled import CompiledMechanism

if not SHARED_REFERENCE.is_dir():
    pytest.skip(f"{SHARED_REFERENCE} not found: the reference-file checks need the shared "
                "directory ../shared or $MBGEN_SHARED (CI always has it)",
                allow_module_level=True)

Compiled = Callable[[Path], CompiledMechanism]
ORIGINALS_DIR = SHARED_REFERENCE / REFERENCE_DIR.relative_to(REFERENCE_DATA)
COPIES = sorted(path.relative_to(REFERENCE_DATA) for path in REFERENCE_DATA.rglob("*")
                if path.is_file() and path.name != "README.md")
NAMES = [path.stem for path in REFERENCE_MECHANISMS]


def test_reference_set_is_complete() -> None:
    originals = sorted(path.name for path in ORIGINALS_DIR.glob("*.yaml"))
    copies = sorted(path.name for path in REFERENCE_MECHANISMS)
    assert originals == copies, f"{ORIGINALS_DIR} and its copies in {REFERENCE_DIR} differ"


@pytest.mark.parametrize("relative", COPIES, ids=str)
def test_copy_is_identical_to_original(relative: Path) -> None:
    copy, original = REFERENCE_DATA / relative, SHARED_REFERENCE / relative
    assert original.is_file(), f"{copy} is a copy of {original}, which is missing"
    assert copy.read_bytes() == original.read_bytes(), f"{copy} differs from {original}"


@pytest.mark.parametrize("name", NAMES)
def test_compiles_and_q0_satisfies_constraints(name: str, compiled: Compiled) -> None:
    mech = compiled(ORIGINALS_DIR / f"{name}.yaml")
    assert mech.q0.shape == (mech.n,)
    assert np.all(np.isfinite(mech.q0))
    assert np.max(np.abs(mech.phi(mech.q0)), initial=0.0) <= 1e-9


@pytest.mark.parametrize("name", NAMES)
def test_coordinate_names_follow_reference_order(name: str, compiled: Compiled) -> None:
    path = ORIGINALS_DIR / f"{name}.yaml"
    mech = compiled(path)
    model = load_mechanism(path)
    expected: list[str] = []
    for point in model.points:
        if not point.fixed:
            expected += [f"x{point.index}", f"y{point.index}"]
    expected += [f"theta{k}" for k in range(len(model.relative_angles))]
    assert mech.coordinate_names == expected
