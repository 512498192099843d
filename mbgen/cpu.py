"""Which vector instructions the compiled C may use on this machine, and how many CPUs
this process may run on.

Built with ``-march=x86-64-v3`` (AVX2; FMA only where the source asks, see build.py), the
core's vector loops and the unrolled kernels run ~1.5x faster than with the x86-64
baseline (SSE2; measured in benchmarks/peers.py and scaling.py). Modules are compiled on
the machine that loads them, so mbgen uses the level where the CPU has it; the level is
part of the build's cache key, and a package made with ``mbgen compile --package``
records it and refuses to load on a CPU without it (instead of dying of an illegal
instruction). Standard library only; below the compiler and the runtime because shipped
packages have the runtime alone.
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

X86_64_V3 = "x86-64-v3"
# /proc/cpuinfo names of the x86-64-v3 features beyond v2 (lzcnt is listed as abm)
_V3_FLAGS = frozenset({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe",
                       "xsave"})


@functools.cache
def vector_level() -> str | None:
    """``"x86-64-v3"`` where this CPU has AVX2 and FMA (Linux, x86-64), else None."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return X86_64_V3 if set(line.split(":", 1)[1].split()) >= _V3_FLAGS else None
    return None


def march_flags(level: str | None) -> list[str]:
    return [f"-march={level}"] if level else []


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
