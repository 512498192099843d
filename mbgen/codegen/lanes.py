"""The same straight-line C for MB_LANES states at once: each array [entry][lane].

A particle filter moves thousands of states through the same few statements. One state at
a time, the unrolled KKT factorization is a chain of divisions and the CPU waits on each;
MB_LANES states side by side in one loop give the C compiler independent lanes to put in
SIMD registers (the four-bar's factorization: 39 ns per state alone, 9.5 ns in lanes of 8
with AVX2). The templates write the lane functions from the same macros as the one-state
code, with every array index k made k * MB_LANES + l (templates/c.j2, `at`), so each lane
computes exactly what the one-state code would: the same operations in the same order,
bit for bit. A failed check cannot return from the middle of a lane; it marks the lane
bad and the caller redoes that state alone. This module says which code has lanes.
"""

from __future__ import annotations

from mbgen.codegen.kkt import KktProgram

# Kernels the batched prediction evaluates in lanes (particles.c)
LANE_KERNELS = ("forces", "dphiq_qd", "phi", "phi_q", "mass")
# ... and those of batched q̈ with its Jacobians (dynamics.c, jacobian_terms), for a
# mechanism whose KKT inverse and Jacobian products are unrolled and have lanes
JACOBIAN_LANE_KERNELS = ("forces_q", "forces_qd", "mass_v_q", "phiqT_lam_q", "dphiq_qd_q",
                         "dphiq_qd_qd", "phiq_v_q")
# ... and the joint-space terms of batched z̈ with (and without) its Jacobians
# (joint_space.c), where their body stays under LANE_STATEMENTS (the Furuta pendulum's
# has ~230)
JOINT_SPACE_LANE_KERNELS = ("reduced_terms", "reduced_accelerations", "reduced_basis",
                            "reduced_basis_q")
# Statements of the factor and solve above which there are no KKT lanes (the five-bar has
# ~190, the pick-and-place robot over 1 000): one loop body that long would slow the C
# compiler more than the lanes gain; such mechanisms run the one-state code
LANE_STATEMENTS = 1000
# Kernel inputs that differ per lane: the parameters too, so that the runs of a sweep
# (each its own parameter set) share a block; callers with one set copy it into every lane
LANE_ARRAYS = ("q", "x", "p")


def kkt_has_lanes(kkt: KktProgram) -> bool:
    return kkt.factor_and_solve_statements <= LANE_STATEMENTS


def jacobians_have_lanes(kkt: KktProgram | None) -> bool:
    """Whether ∂q̈/∂q, ∂q̈/∂q̇ get lane functions too: the unrolled inverse and products
    exist, and the factor has lanes."""
    return (kkt is not None and kkt_has_lanes(kkt) and kkt.inverse is not None
            and bool(kkt.jacobians))
