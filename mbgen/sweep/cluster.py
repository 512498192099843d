"""A study's chunks on a Dask cluster (``mbgen sweep --scheduler ADDRESS``).

Each task is one chunk. The client sends the study, the drawn runs (once, scattered to
every worker) and the mechanism file's text; a worker compiles the mechanism into its own
build cache from that text (a cache hit after the first task, as the build is keyed by
content) and runs the chunk as a local run would, so the numbers are the same to the bit.
The client writes each chunk as it comes back, so a study cut off resumes as a local one.
Dask's ``distributed`` is the extra ``mbgen[cluster]``.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mbgen.errors import MbgenError
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.sweep.design import Design
from mbgen.sweep.runner import ChunkResult, run_chunk
from mbgen.sweep.study import Study

CONNECT_TIMEOUT = "20s"  # to reach the scheduler: a wrong address fails within it

_loaded: dict[tuple[str, str | None], CompiledMechanism] = {}
_loading = threading.Lock()


def client(address: str) -> Any:
    """A ``distributed.Client`` connected to ``address``, or a clear error."""
    try:
        from distributed import Client
    except ImportError:
        raise MbgenError("running on a Dask cluster needs Dask's distributed: "
                         "pip install 'mbgen[cluster]'") from None
    try:
        return Client(address, timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError, ValueError) as exc:
        raise MbgenError(f"no Dask scheduler reached at {address!r}: {exc}") from None


def worker_mechanism(text: str, name: str, build_dir: str | None) -> CompiledMechanism:
    """The mechanism of file ``name`` with content ``text``, compiled into this worker's
    build cache (``build_dir``, else its default) once per process."""
    from mbgen.files import atomic_write_text
    from mbgen.loading import default_out_dir, load

    key = (hashlib.sha256(text.encode()).hexdigest(), build_dir)
    with _loading:
        if key not in _loaded:
            root = Path(build_dir) if build_dir else default_out_dir()
            source = root / "sweep-sources" / key[0][:16] / name
            if not source.is_file() or source.read_text(encoding="utf-8") != text:
                atomic_write_text(source, text)
            _loaded[key] = load(source, out_dir=build_dir)
        return _loaded[key]


def cluster_chunk(study: Study, design: Design, rows: Any, nominal_q: Any,
                  phi_limit: float, text: str, name: str, build_dir: str | None,
                  ) -> ChunkResult:
    """One chunk, on a worker."""
    return run_chunk(worker_mechanism(text, name, build_dir), study, design, rows, nominal_q,
                     phi_limit)


def run_on_cluster(prepared: Any, address: str, todo: list[int], build_dir: Path | None,
                   ) -> Iterator[tuple[int, ChunkResult]]:
    """The chunks ``todo`` of a prepared study (execute.Prepared) on the cluster at
    ``address``, as they finish."""
    study = prepared.study
    text = study.mechanism.read_text(encoding="utf-8")
    with client(address) as dask:
        from distributed import as_completed


        design = dask.scatter(prepared.design, broadcast=True)
        chunks = prepared.chunks
        futures = {dask.submit(cluster_chunk, study, design, chunks[index],
                               prepared.nominal_q, prepared.phi_limit, text,
                               study.mechanism.name,
                               None if build_dir is None else str(build_dir),
                               key=f"mbgen-sweep-{prepared.key[:12]}-{index}", pure=False):
                   index for index in todo}
        for future in as_completed(futures):
            yield futures[future], future.result()
