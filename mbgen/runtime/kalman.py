"""What the Kalman filters need from C: the errorEKF or the UKF over a whole readings file
in one call (mbgen/csrc/kalman.c; their references are mbgen/estimation/kalman.py and
ukf.py)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from mbgen.runtime.calls import Core
from mbgen.runtime.options import SolverOptions
from mbgen.runtime.structure import Structure

Array = np.ndarray


@dataclass(frozen=True)
class KalmanRun:
    """mb_kalman_run's (or mb_ukf_run's) outputs for the ``done`` steps it completed."""

    q: Array  # (done, n)
    qd: Array  # (done, n)
    qdd: Array  # (done, n)
    sigma_q: Array  # (done, n)
    sigma_qd: Array  # (done, n)
    force: Array  # (done, forces)
    sigma_force: Array  # (done, forces)
    nis: Array  # (done,) NaN: no reading
    lost: Array  # (done,) bool
    status: int  # of the step that failed (0: none)
    switches: int  # re-choices of z
    z: Array  # (d,) the independent coordinates at the end
    state: tuple[Array, Array, Array, Array]  # q, q̇, f, P at the end


class KalmanFilters:
    """The Kalman filters' runs on the mechanism's plan, options and parameters."""

    def __init__(self, core: Core, options: SolverOptions, structure: Structure,
                 n: int) -> None:
        self._core = core
        self._options = options
        self._structure = structure
        self._n = n

    def kalman_run(self, q: Array, qd: Array, z: Array, forces: Array, force: Array,
                   P: Array, readings: Array, noise_s: Array, noise_a: Array, dt: float,
                   sigma_a: float, sigma_f: float, lost_limit: float, reselect: float,
                   unscented: tuple[float, float, float] | None = None) -> KalmanRun:
        """The errorEKF (``unscented``: the UKF with the unscented transform's α, β, κ,
        mb_ukf_run) from a consistent (q, q̇) (n,), z (d,) coordinate indices, the
        forces' coordinates (nf,) and values (nf,), covariance P (2d + nf)² over
        ``readings`` (steps, sensors + accelerometers; one row per filter step, NaN: no
        reading) with the reading noises ``noise_s``, ``noise_a``; see mb_kalman_run.
        Inputs are copied, not changed."""
        core, n, d = self._core, self._n, self._structure.dof
        nf = len(forces)
        size = 2 * d + nf
        q = np.array(q, dtype=np.float64).reshape(n)
        qd = np.array(qd, dtype=np.float64).reshape(n)
        zfix = np.array(z, dtype=np.int32).reshape(d)
        index = np.array(forces, dtype=np.int32).reshape(nf)
        f = np.array(force, dtype=np.float64).reshape(nf)
        cov = np.array(P, dtype=np.float64).reshape(size, size)
        noise_s = np.ascontiguousarray(noise_s, dtype=np.float64)
        noise_a = np.ascontiguousarray(noise_a, dtype=np.float64)
        ns, na = len(noise_s), len(noise_a)
        y = np.ascontiguousarray(readings, dtype=np.float64)
        steps = len(y)
        if y.shape != (steps, ns + na):
            raise ValueError(f"readings must be (steps, {ns + na}), got {y.shape}")
        out = [np.full((steps, n), np.nan) for _ in range(5)]
        out_f, out_sf = np.full((steps, nf), np.nan), np.full((steps, nf), np.nan)
        nis, lost = np.full(steps, np.nan), np.zeros(steps, dtype=np.int32)
        ffi = core.ffi
        switches, done = ffi.new("int*"), ffi.new("long*")
        run = (core.lib.mb_kalman_run if unscented is None
               else functools.partial(core.lib.mb_ukf_run, *unscented))
        status = run(
            self._structure.plan, self._options.struct, core.parameters.pointer, nf,
            core.ints(index), core.ints(zfix), core.doubles(q), core.doubles(qd),
            core.doubles(f), core.doubles(cov), sigma_a, sigma_f, ns, core.doubles(noise_s),
            na, core.doubles(noise_a), dt, lost_limit, reselect, steps, core.doubles(y),
            *(core.doubles(a) for a in out), core.doubles(out_f), core.doubles(out_sf),
            core.doubles(nis), core.ints(lost), switches, done)
        if status < 0:
            core.checked(status)
        k = int(done[0])
        return KalmanRun(out[0][:k], out[1][:k], out[2][:k], out[3][:k], out[4][:k],
                         out_f[:k], out_sf[:k], nis[:k], lost[:k].astype(bool), int(status),
                         int(switches[0]), zfix, (q, qd, f, cov))
