"""The lane rewrite of the unrolled KKT code (mbgen/codegen/lanes.py) on a small program:
the generated lane functions themselves are checked bit for bit against the one-state
code in test_predict_particles.py."""

from __future__ import annotations

from dataclasses import replace

from mbgen.codegen.kkt import KktProgram
from mbgen.codegen.lanes import LANE_STATEMENTS, kernel_lanes, kkt_lanes

PROGRAM = KktProgram(
    size=2, rows=[0], perm=[0, 1], column_starts=[0, 1, 1], row_indices=[1],
    prologue=["double h = 0.0;", "if (mv[0] > h) h = mv[0];", "const double g = h;",
              "*gamma = g;"],
    factor=[["const double d0 = mv[0];",
             "if (!(d0 > mass_tol)) return d0 != d0 ? MB_NOT_FINITE : MB_SINGULAR_MASS;",
             "D[0] = 1.0 / d0;", "E[0] = a[1];", "L[0] = E[0] * D[0];"]],
    solve=[["x[1] -= L[0] * x[0];", "x[0] *= D[0];"]], inverse=None, jacobians=None)


def test_every_index_becomes_per_lane_and_checks_mark_the_lane() -> None:
    factor, solve = kkt_lanes(PROGRAM)
    assert factor == [
        "double h = 0.0;",
        "h = mv[0 * MB_LANES + l] > h ? mv[0 * MB_LANES + l] : h;",
        "const double g = h;",
        "gamma[l] = g;",
        "const double d0 = mv[0 * MB_LANES + l];",
        "bad |= !(d0 > mass_tol);",
        "D[0 * MB_LANES + l] = 1.0 / d0;",
        "E[0 * MB_LANES + l] = a[1 * MB_LANES + l];",
        "L[0 * MB_LANES + l] = E[0 * MB_LANES + l] * D[0 * MB_LANES + l];",
    ]
    assert solve == ["x[1 * MB_LANES + l] -= L[0 * MB_LANES + l] * x[0 * MB_LANES + l];",
                     "x[0 * MB_LANES + l] *= D[0 * MB_LANES + l];"]


def test_a_kernel_keeps_its_parameters_shared() -> None:
    assert kernel_lanes(["out[2] = p[0] * sin(q[1]) + x[0];"]) == [
        "out[2 * MB_LANES + l] = p[0] * sin(q[1 * MB_LANES + l]) + x[0 * MB_LANES + l];"]


def test_statements_it_cannot_rewrite_give_no_lanes() -> None:
    unknown = replace(PROGRAM, factor=[PROGRAM.factor[0] + ["if (d0 < 0.0) return 7;"]])
    assert kkt_lanes(unknown) is None
    long = replace(PROGRAM, solve=[["x[0] *= D[0];"] * (LANE_STATEMENTS + 1)])
    assert kkt_lanes(long) is None
