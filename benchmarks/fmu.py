"""The FMI unit's co-simulation step, called from FMPy, against the same step inside
``mbgen simulate``.

Why these figures: a unit is only worth importing into a system simulator if a
co-simulation master pays for mbgen's dynamics, not for the wrapper around them. Issue
54: one co-simulation step of the four-bar's unit at 1 ms, called from FMPy, costs at
most 2x the same step inside ``mbgen simulate`` plus FMPy's own cost of a call.

1. ``mbgen simulate``'s step: the C integrator (``mb_simulate``, RK4 at 1 ms in all q,
   projected onto the constraints after each step, as ``mbgen simulate`` runs it) over
   one long run from the file's q0, its time divided by its steps; the whole of
   ``mbgen.simulation.simulate`` (what the command calls: chunks, energy and ‖Φ‖ in
   NumPy) the same way, as context.
2. FMPy's own cost: ``doStep`` of an empty unit (built here: every FMI 2.0 function
   returns at once, no variables), through the same ``FMU2Slave`` API. FMPy's reference
   units are not shipped with it (it downloads them), so the empty unit stands in.
3. The unit's step: ``mbgen export --fmu`` of mechanisms/fourbar.yaml (RK4, 1 ms), one
   instance through FMPy's step-by-step API (instantiate, initialize, ``doStep`` of 1 ms
   in a loop over as many steps as the long run); its end state checked against the long
   run's (they are the same numbers). A master's usual step, ``setReal`` of the input,
   ``doStep``, ``getReal`` of the coordinates, is timed too, as context.

Every time is the best of ``--repeat`` trials (the least disturbed by other jobs),
the trials taking turns so that a busy moment falls on every figure alike.
Run: ``.venv/bin/python benchmarks/fmu.py [--quick]``. Writes benchmarks/results/fmu.json.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _common import MECHANISMS, REPO, Figure, mbgen_executable, print_table, write_results
from rich.console import Console

import mbgen
from mbgen.codegen.fmu import BUILD_FLAGS, library_suffix, platform_folder
from mbgen.simulation import simulate

FOURBAR = MECHANISMS / "fourbar.yaml"
DT = 1e-3

# An FMI 2.0 unit that does nothing: every function FMPy binds, returning at once.
EMPTY_SOURCE = r"""
#include <stdlib.h>
#include "fmi2Functions.h"
static int instance;
#define ARGS(...) __VA_ARGS__
#define OK(name, args) fmi2Status name(args) { return fmi2OK; }
const char* fmi2GetTypesPlatform(void) { return fmi2TypesPlatform; }
const char* fmi2GetVersion(void) { return fmi2Version; }
fmi2Component fmi2Instantiate(fmi2String a, fmi2Type b, fmi2String c, fmi2String d,
    const fmi2CallbackFunctions* e, fmi2Boolean f, fmi2Boolean g) { return &instance; }
void fmi2FreeInstance(fmi2Component c) {}
OK(fmi2SetDebugLogging, ARGS(fmi2Component c, fmi2Boolean a, size_t n, const fmi2String s[]))
OK(fmi2SetupExperiment, ARGS(fmi2Component c, fmi2Boolean a, fmi2Real b, fmi2Real d,
                             fmi2Boolean e, fmi2Real f))
OK(fmi2EnterInitializationMode, fmi2Component c)
OK(fmi2ExitInitializationMode, fmi2Component c)
OK(fmi2Terminate, fmi2Component c)
OK(fmi2Reset, fmi2Component c)
#define GETSET(T) \
    OK(fmi2Get##T, ARGS(fmi2Component c, const fmi2ValueReference v[], size_t n, fmi2##T x[])) \
    OK(fmi2Set##T, ARGS(fmi2Component c, const fmi2ValueReference v[], size_t n, \
                        const fmi2##T x[]))
GETSET(Real) GETSET(Integer) GETSET(Boolean) GETSET(String)
OK(fmi2GetFMUstate, ARGS(fmi2Component c, fmi2FMUstate* s))
OK(fmi2SetFMUstate, ARGS(fmi2Component c, fmi2FMUstate s))
OK(fmi2FreeFMUstate, ARGS(fmi2Component c, fmi2FMUstate* s))
OK(fmi2SerializedFMUstateSize, ARGS(fmi2Component c, fmi2FMUstate s, size_t* n))
OK(fmi2SerializeFMUstate, ARGS(fmi2Component c, fmi2FMUstate s, fmi2Byte b[], size_t n))
OK(fmi2DeSerializeFMUstate, ARGS(fmi2Component c, const fmi2Byte b[], size_t n,
                                 fmi2FMUstate* s))
OK(fmi2GetDirectionalDerivative, ARGS(fmi2Component c, const fmi2ValueReference a[],
   size_t na, const fmi2ValueReference b[], size_t nb, const fmi2Real x[], fmi2Real y[]))
OK(fmi2EnterEventMode, fmi2Component c)
OK(fmi2NewDiscreteStates, ARGS(fmi2Component c, fmi2EventInfo* e))
OK(fmi2EnterContinuousTimeMode, fmi2Component c)
OK(fmi2CompletedIntegratorStep, ARGS(fmi2Component c, fmi2Boolean a, fmi2Boolean* b,
                                     fmi2Boolean* d))
OK(fmi2SetTime, ARGS(fmi2Component c, fmi2Real t))
OK(fmi2SetContinuousStates, ARGS(fmi2Component c, const fmi2Real x[], size_t n))
OK(fmi2GetDerivatives, ARGS(fmi2Component c, fmi2Real x[], size_t n))
OK(fmi2GetEventIndicators, ARGS(fmi2Component c, fmi2Real x[], size_t n))
OK(fmi2GetContinuousStates, ARGS(fmi2Component c, fmi2Real x[], size_t n))
OK(fmi2GetNominalsOfContinuousStates, ARGS(fmi2Component c, fmi2Real x[], size_t n))
OK(fmi2SetRealInputDerivatives, ARGS(fmi2Component c, const fmi2ValueReference v[],
   size_t n, const fmi2Integer o[], const fmi2Real x[]))
OK(fmi2GetRealOutputDerivatives, ARGS(fmi2Component c, const fmi2ValueReference v[],
   size_t n, const fmi2Integer o[], fmi2Real x[]))
OK(fmi2DoStep, ARGS(fmi2Component c, fmi2Real t, fmi2Real h, fmi2Boolean a))
OK(fmi2CancelStep, fmi2Component c)
OK(fmi2GetStatus, ARGS(fmi2Component c, const fmi2StatusKind s, fmi2Status* x))
OK(fmi2GetRealStatus, ARGS(fmi2Component c, const fmi2StatusKind s, fmi2Real* x))
OK(fmi2GetIntegerStatus, ARGS(fmi2Component c, const fmi2StatusKind s, fmi2Integer* x))
OK(fmi2GetBooleanStatus, ARGS(fmi2Component c, const fmi2StatusKind s, fmi2Boolean* x))
OK(fmi2GetStringStatus, ARGS(fmi2Component c, const fmi2StatusKind s, fmi2String* x))
"""

EMPTY_DESCRIPTION = """<?xml version="1.0" encoding="UTF-8"?>
<fmiModelDescription fmiVersion="2.0" modelName="empty" guid="{0}"
  generationTool="benchmarks/fmu.py" numberOfEventIndicators="0">
  <CoSimulation modelIdentifier="empty" canHandleVariableCommunicationStepSize="true"/>
  <ModelVariables>
    <ScalarVariable name="y" valueReference="0" causality="output" variability="continuous"
      initial="exact"><Real start="0"/></ScalarVariable>
  </ModelVariables>
  <ModelStructure><Outputs><Unknown index="1"/></Outputs></ModelStructure>
</fmiModelDescription>
"""
EMPTY_GUID = "{9f1c7a52-1b0e-4a57-9d61-3f0c5d2e8b10}"


def empty_unit(folder: Path) -> Path:
    """``folder/empty.fmu``: the do-nothing unit, built with the flags of mbgen's units."""
    source = folder / "empty.c"
    source.write_text(EMPTY_SOURCE)
    library = folder / f"empty{library_suffix()}"
    subprocess.run(["cc", *BUILD_FLAGS, f"-I{REPO / 'mbgen' / 'csrc' / 'fmi2'}", str(source),
                    "-o", str(library)], check=True, capture_output=True, timeout=120)
    unit = folder / "empty.fmu"
    with zipfile.ZipFile(unit, "w") as archive:
        archive.writestr("modelDescription.xml", EMPTY_DESCRIPTION.format(EMPTY_GUID))
        archive.write(library, f"binaries/{platform_folder()}/{library.name}")
    return unit


class Slave:
    """One co-simulation instance of ``unit`` through FMPy's step-by-step API."""

    def __init__(self, unit: Path) -> None:
        from fmpy import extract, read_model_description
        from fmpy.fmi2 import FMU2Slave

        self.description = read_model_description(str(unit))
        self.vr = {v.name: v.valueReference for v in self.description.modelVariables}
        self.fmu = FMU2Slave(guid=self.description.guid,
                             unzipDirectory=extract(str(unit)),
                             modelIdentifier=self.description.coSimulation.modelIdentifier)
        self.fmu.instantiate()
        self.started = False

    def start(self) -> None:
        """(Re)start at t = 0 from the unit's start values."""
        if self.started:
            self.fmu.reset()
        self.fmu.setupExperiment(startTime=0.0)
        self.fmu.enterInitializationMode()
        self.fmu.exitInitializationMode()
        self.started = True

    def steps(self, count: int) -> float:
        """Seconds for ``count`` doStep calls of DT from a fresh start."""
        self.start()
        do_step = self.fmu.doStep
        begin = time.perf_counter()
        for k in range(count):
            do_step(k * DT, DT)
        return time.perf_counter() - begin

    def master_steps(self, count: int, inputs: list[int], outputs: list[int]) -> float:
        """Seconds for ``count`` steps of a master: set the inputs, doStep, get the
        outputs."""
        self.start()
        fmu = self.fmu
        zeros = [0.0] * len(inputs)
        begin = time.perf_counter()
        for k in range(count):
            if inputs:
                fmu.setReal(inputs, zeros)
            fmu.doStep(k * DT, DT)
            fmu.getReal(outputs)
        return time.perf_counter() - begin

    def real(self, names: list[str]) -> np.ndarray:
        return np.array(self.fmu.getReal([self.vr[n] for n in names]))

    def close(self) -> None:
        self.fmu.terminate()
        self.fmu.freeInstance()


def timed(function: Callable[[], Any]) -> float:
    begin = time.perf_counter()
    function()
    return time.perf_counter() - begin


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 000 steps, 3 trials, no results file")
    parser.add_argument("--steps", type=int, default=20_000,
                        help="steps of each run [default: 20 000, 20 s]")
    parser.add_argument("--repeat", type=int, default=15, help="trials [default: 15]")
    args = parser.parse_args()
    steps, repeat = (2000, 3) if args.quick else (args.steps, args.repeat)
    console = Console(width=160)
    folder = Path(tempfile.mkdtemp(prefix="mbgen-fmu-bench-"))
    build = folder / "build"
    mech = mbgen.load(str(FOURBAR), out_dir=str(build))
    unit = folder / "fourbar.fmu"
    subprocess.run([str(mbgen_executable()), "export", str(FOURBAR), "--fmu", str(unit),
                    "--integrator", "rk4", "--step", str(DT), "--build-dir", str(build)],
                   check=True, capture_output=True, timeout=600)

    q0, qd0 = mech.q0.copy(), np.zeros(mech.n)
    t_end = steps * DT
    reference = simulate(mech, t_end=t_end, dt=DT, integrator="rk4")
    empty, slave = Slave(empty_unit(folder)), Slave(unit)
    outputs = [slave.vr[n] for n in mech.coordinate_names]
    trials: dict[str, list[float]] = {}
    for _ in range(repeat):  # each trial times everything, so load falls on all alike
        for name, run in (
                ("c", lambda: timed(lambda: mech.integrate(q0, qd0, DT, steps, "rk4"))),
                ("api", lambda: timed(lambda: simulate(mech, t_end=t_end, dt=DT,
                                                       integrator="rk4"))),
                ("empty", lambda: empty.steps(steps)),
                ("unit", lambda: slave.steps(steps)),
                ("empty master", lambda: empty.master_steps(steps, [], [0])),
                ("unit master", lambda: slave.master_steps(steps, [], outputs))):
            trials.setdefault(name, []).append(run())
    slave.steps(steps)
    difference = float(np.abs(slave.real(list(mech.coordinate_names))
                              - reference.q[-1]).max())
    empty.close()
    slave.close()
    c_run, api_run, empty_run, unit_run, empty_master, unit_master = (
        min(trials[name]) for name in ("c", "api", "empty", "unit", "empty master",
                                       "unit master"))

    simulate_step, api_step = c_run / steps, api_run / steps
    overhead, unit_step = empty_run / steps, unit_run / steps
    target = 2 * simulate_step + overhead
    us = 1e6
    results = [
        Figure("mbgen simulate's step: C integrator (RK4, 1 ms, projected)",
               simulate_step * us, "µs", note=f"one run of {steps} steps, {c_run:.3f} s"),
        Figure("mbgen simulate's step: the Python API's whole run / steps",
               api_step * us, "µs", note="context: chunks, energy and ‖Φ‖ included"),
        Figure("FMPy's overhead: doStep of an empty unit", overhead * us, "µs",
               note="FMU2Slave.doStep, built here (FMPy ships no reference units)"),
        Figure("the unit's step: FMU2Slave.doStep of 1 ms (four-bar, RK4)",
               unit_step * us, "µs", target * us,
               f"target 2 x {simulate_step * us:.3g} + {overhead * us:.3g} µs"),
        Figure("the unit's step less FMPy's overhead / simulate's step",
               (unit_step - overhead) / simulate_step, "×", 2.0, "the same target, as a ratio"),
        Figure("unit vs simulate: end state after the run, max |Δq|", difference, "m", 1e-9,
               f"t = {t_end:g} s"),
        Figure("a master's step through FMPy: doStep + getReal of q (four-bar)",
               unit_master / steps * us, "µs", note="context"),
        Figure("a master's step through FMPy: doStep + getReal (empty unit)",
               empty_master / steps * us, "µs", note="context"),
    ]
    print_table(f"FMI unit vs mbgen simulate: four-bar, RK4 at 1 ms, {steps} steps, best "
                f"of {repeat}", results, console)
    if args.quick:
        console.print(f"--quick: results not written ({folder})")
        return 0
    path = write_results("fmu", results, {"steps": steps, "repeat": repeat})
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
