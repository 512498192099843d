"""When a run's rows are a motion of the mechanism: the rules (and their default
tolerances) that `simulate` and `sweep` apply before a result earns a ✓."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the command line reads the defaults without loading the runtime
    from mbgen.runtime.compiled import CompiledMechanism

#: Default --phi-tol of the commands that integrate (simulate, sweep): max ‖Φ‖ / size²
#: above it makes a run untrusted.
PHI_TOL = 1e-3
#: Default --energy-tol of simulate: a run without applied forces, dampers or friction
#: whose max |E(t) - E(0)| exceeds it, relative to the energy in play, is untrusted. Every
#: shipped mechanism stays below 7e-9 with rk4 (5 s at 1 ms) and below 6e-3 with spook;
#: explicit Euler drifts 2e-2 to 0.15 there (docs/cli.md has the figures).
ENERGY_TOL = 1e-2


def constraint_limit(mech: CompiledMechanism, phi_tol: float) -> float:
    """The largest ‖Φ‖ a trusted run may reach: ``phi_tol`` × size² (Φ holds squared
    lengths; size: ``mech.size``, no floor: a 7 mm crank is measured in its own size)."""
    return phi_tol * mech.size**2


def energy_change(result: Any) -> tuple[float | None, str]:
    """(max |E(t) − E(0)| over the energy in play, None when nothing is in play; the
    summary's words). The energy in play is the largest T, or V's swing, over the run: an
    end-minus-start change hid a swing, a scale of E(0) or of the largest |E| hid drift
    under V's arbitrary zero (E(0) = 0 on a chain, -29 J on Bricard's linkage)."""
    parts = result.mechanism.energy_parts(result.q, result.qd).reshape(len(result.t), -1)
    kinetic, potential = parts[:, 0], parts[:, 1]
    energy = kinetic + potential
    change = float(np.abs(energy - energy[0]).max())
    scale = max(float(kinetic.max()), float(potential.max() - potential.min()))
    if scale > 0:
        return change / scale, (f"relative energy change = {change / scale:.2e} (max "
                                "|E - E(0)| over the largest T or V's swing)")
    return None, f"energy change = {change:.2e} (nothing moves)"


def conservative(result: Any) -> bool:
    """No applied force (--force, an actuator's command), damper or friction: E must
    stay E(0), so its change measures the integrator alone."""
    meta = result.mechanism.meta
    return not (result.forces or meta.get("dissipative") or meta.get("friction"))
