"""A study from its file to its results: the runs drawn, cut into chunks, the chunks run
on local threads or a Dask cluster and written as they finish (so an interrupted study
resumes), then merged into the Parquet files asked for."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbgen.errors import MbgenError
from mbgen.io.chunks import ChunkStore
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.runtime.parallel import usable_cores
from mbgen.simulation.trust import constraint_limit
from mbgen.sweep.design import Design, draw
from mbgen.sweep.runner import OK, ChunkResult, run_chunk
from mbgen.sweep.study import Spec, Study
from mbgen.version import __version__

Array = np.ndarray
Progress = Callable[[int, int], None]  # (runs done, runs in all)


@dataclass(frozen=True)
class Prepared:
    """A study bound to its mechanism: the runs' values, their chunks, the start."""

    study: Study
    design: Design
    nominal_q: Array
    phi_limit: float  # ‖Φ‖ above which a run has drifted off its constraints
    key: str

    @property
    def chunks(self) -> list[Array]:
        runs, size = self.study.runs, self.study.chunk
        return [np.arange(start, min(start + size, runs)) for start in range(0, runs, size)]


def prepare(study: Study, mech: CompiledMechanism, phi_tol: float) -> Prepared:
    """The study's names checked against ``mech``, its runs drawn, the nominal start
    assembled; ``phi_tol``: the largest ‖Φ‖ of a trusted run, times the mechanism's size
    squared."""
    study.check_names(list(mech.parameters), mech.coordinate_names, mech.sensor_labels)

    def nominal(spec: Spec) -> float:
        if spec.section == "parameters":
            return float(mech.parameters[spec.name])
        if spec.section == "initial":
            return float(mech.q0[mech.coordinate_index(spec.name)])
        return 0.0

    solved, status = mech.solve_position(mech.q0, minimum_norm=True, errors="status")
    if int(np.asarray(status).reshape(-1)[0]):
        raise MbgenError(f"{mech.name}'s initial positions cannot be assembled: "
                         f"{mech.status_text(int(np.asarray(status).reshape(-1)[0]))}")
    text = {"study": study.digest,  # of the text read, not of the file as it is now
            "mechanism": study.mechanism.read_text(encoding="utf-8"), "mbgen": __version__,
            "phi_tol": repr(phi_tol)}
    key = hashlib.sha256(json.dumps(text, sort_keys=True).encode()).hexdigest()
    return Prepared(study, draw(study, nominal), np.asarray(solved).reshape(-1),
                    constraint_limit(mech, phi_tol), key)


def run_local(prepared: Prepared, mech: CompiledMechanism, todo: list[int], workers: int,
              ) -> Iterator[tuple[int, ChunkResult]]:
    """The chunks ``todo`` on ``workers`` threads (the C calls release the GIL), as they
    finish."""
    chunks = prepared.chunks
    workers = max(1, min(workers, len(todo)))  # no idle threads (--workers 1000)
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        pending: dict[Future[ChunkResult], int] = {}
        queue = list(todo)
        while queue or pending:
            while queue and len(pending) < 2 * workers:
                index = queue.pop(0)
                pending[pool.submit(run_chunk, mech, prepared.study, prepared.design,
                                    chunks[index], prepared.nominal_q,
                                    prepared.phi_limit)] = index
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield pending.pop(future), future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@dataclass(frozen=True)
class Outcome:
    """What a finished study says of itself: its runs, the failed ones by status, how many
    chunks a previous run had done."""

    runs: int
    failures: Counter[str]
    resumed: int
    chunks: int

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


def run_study(prepared: Prepared, mech: CompiledMechanism, out: Path, workers: int,
              scheduler: str | None = None, build_dir: Path | None = None,
              progress: Progress | None = None) -> tuple[ChunkStore, Outcome]:
    """Every chunk not done yet, written to the work directory beside ``out`` as it
    finishes; merge with :func:`finish`."""
    chunks = prepared.chunks
    store = ChunkStore(out, prepared.key, len(chunks), [len(rows) for rows in chunks])
    done = store.open()
    todo = [index for index in range(len(chunks)) if index not in done]
    finished = sum(len(chunks[index]) for index in done)
    total = prepared.study.runs
    if progress:
        progress(finished, total)
    if scheduler is None:
        results = run_local(prepared, mech, todo, workers or usable_cores())
    else:
        from mbgen.sweep.cluster import run_on_cluster

        results = run_on_cluster(prepared, scheduler, todo, build_dir)
    written = 0
    try:
        for index, result in results:
            store.write(index, {"runs": result.columns, "trajectories": result.trajectories})
            written += 1
            finished += len(chunks[index])
            if progress:
                progress(finished, total)
    except BaseException:
        if not done and not written:  # nothing to resume: leave nothing behind
            store.remove()
        raise
    return store, Outcome(total, failure_counts(store), len(done), len(chunks))


def failure_counts(store: ChunkStore) -> Counter[str]:
    """The failed runs of every chunk, by status."""
    import pyarrow.parquet as pq

    counts: Counter[str] = Counter()
    for index in range(store.count):
        status = pq.read_table(store.part("runs", index), columns=["status"]).column(0)
        counts.update(s for s in status.to_pylist() if s != OK)
    return counts


def finish(store: ChunkStore, runs: Path, trajectories: Path | None) -> None:
    """The chunks merged into ``runs`` (and ``trajectories``), then the work directory
    removed."""
    targets = {"runs": runs}
    if trajectories is not None:
        targets["trajectories"] = trajectories
    store.merge(targets)
    store.remove()


def trajectories_path(out: Path) -> Path:
    """Where a study's trajectories go: ``results.parquet`` → ``results.trajectories.parquet``."""
    return out.with_name(f"{out.stem}.trajectories{out.suffix}")
