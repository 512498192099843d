"""Which vector instructions the compiled C may use on this machine, and how many CPUs
this process may run on.

Built with ``-march=x86-64-v3`` (AVX2; FMA only where the source asks, see build.py), the
core's vector loops and the unrolled kernels run ~1.5x faster than with the x86-64
baseline (SSE2; measured in benchmarks/peers.py and scaling.py); with ``x86-64-v4``
(AVX-512) where the CPU has it, the lanes of 8 states written as GNU C vectors of 8
doubles (joint_space.c) are one register instead of two: the Furuta pendulum's batched
θ̈ + J 77 → 55 ns (benchmarks/spatial.py), the planar four-bar's unchanged. Modules are
compiled on the machine that loads them, so mbgen uses the highest level the CPU has;
the level is part of the build's cache key, and a package made with ``mbgen compile
--package`` records it and refuses to load on a CPU without it (instead of dying of an
illegal instruction). Standard library only; below the compiler and the runtime because
shipped packages have the runtime alone.
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

X86_64_V3 = "x86-64-v3"
X86_64_V4 = "x86-64-v4"
#: the levels, each with every instruction of the ones before it, and what they add
LEVELS = {X86_64_V3: "AVX2, FMA", X86_64_V4: "AVX-512"}
# /proc/cpuinfo names of the x86-64-v3 features beyond v2 (lzcnt is listed as abm), and
# of x86-64-v4's beyond v3
_V3_FLAGS = frozenset({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe",
                       "xsave"})
_V4_FLAGS = frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"})


@functools.cache
def vector_level() -> str | None:
    """The highest level of LEVELS this CPU has (Linux, x86-64), else None."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return level_of(set(line.split(":", 1)[1].split()))
    return None


def level_of(flags: set[str]) -> str | None:
    """The highest level whose features are all among ``flags`` (/proc/cpuinfo's)."""
    if flags >= _V3_FLAGS | _V4_FLAGS:
        return X86_64_V4
    return X86_64_V3 if flags >= _V3_FLAGS else None


def runs(level: str) -> bool:
    """Whether this machine runs code compiled for ``level`` (one of LEVELS)."""
    here = vector_level()
    order = list(LEVELS)
    return here is not None and level in LEVELS and order.index(here) >= order.index(level)


def march_flags(level: str | None) -> list[str]:
    return [f"-march={level}"] if level else []


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
