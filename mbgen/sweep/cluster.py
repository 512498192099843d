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
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mbgen.errors import MbgenError
from mbgen.runtime.compiled import CompiledMechanism
from mbgen.sweep.design import Design
from mbgen.sweep.runner import ChunkResult, run_chunk
from mbgen.sweep.study import Study

#: Seconds to reach the scheduler and hear its handshake, and for it to have a worker: a
#: wrong address, or a server that accepts and never answers, fails within it.
CONNECT_TIMEOUT = 20.0
#: Seconds a study waits with chunks left and no worker on the cluster (all of them lost or
#: retired) before it stops; the chunks finished are kept, so the same command resumes.
WORKERLESS_LIMIT = 60.0
#: Seconds between two looks at the cluster while no chunk finishes.
POLL_INTERVAL = 2.0
SCHEMES = ("tcp", "tls")  # the transports mbgen connects over (ucx needs UCX-Py, untested)
_HOST_PORT = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):[0-9]{1,5}")

_loaded: dict[tuple[str, str | None], CompiledMechanism] = {}
_loading = threading.Lock()


def check_address(address: str) -> str:
    """A scheduler's address as ``tcp://HOST:PORT`` (``HOST:PORT`` alone is tcp), or a
    ValueError saying what is wrong with it, before anything connects."""
    scheme, sep, rest = address.strip().partition("://")
    if not sep:
        scheme, rest = "tcp", address.strip()
    scheme = scheme.lower()
    if scheme in ("http", "https"):
        raise ValueError(f"{address!r} is a web address: give the scheduler's own address "
                         "(tcp://HOST:8786, which `dask scheduler` prints), not its "
                         "dashboard's")
    if scheme not in SCHEMES:
        raise ValueError(f"{address!r}: mbgen reaches a Dask scheduler over "
                         f"{' or '.join(s + '://' for s in SCHEMES)} only")
    if not _HOST_PORT.fullmatch(rest) or not 0 < int(rest.rpartition(":")[2]) < 65536:
        raise ValueError(f"{address!r} is not an address HOST:PORT (e.g. tcp://10.0.0.5:8786)")
    return f"{scheme}://{rest}"


def security(address: str) -> Any:
    """Dask's ``Security`` for ``address`` from Dask's configuration; a ValueError when a
    tls:// address has no certificates configured (Dask would fail deep inside)."""
    from distributed.security import Security

    try:
        settings = Security()
        context = settings.get_connection_args("client")["ssl_context"]
    except (OSError, ValueError) as exc:
        raise ValueError(f"Dask's TLS configuration cannot be used: {exc}") from None
    if address.startswith("tls://") and context is None:
        raise ValueError(f"{address!r} needs TLS certificates: set Dask's "
                         "distributed.comm.tls.ca-file, client.cert and client.key (e.g. "
                         "DASK_DISTRIBUTED__COMM__TLS__CA_FILE), or use tcp://")
    return settings


def _handshake(address: str, settings: Any) -> None:
    """Connects to ``address`` and waits for a Dask handshake, all within CONNECT_TIMEOUT
    (Dask's own connect bounds reaching the port, not the handshake: a server that accepts
    and never answers held it for ever)."""
    import asyncio

    from distributed.comm import connect

    async def hello() -> None:
        comm = await asyncio.wait_for(connect(address, timeout=CONNECT_TIMEOUT,
                                              deserialize=False,
                                              **settings.get_connection_args("client")),
                                      CONNECT_TIMEOUT)
        await comm.close()

    asyncio.run(hello())


def client(address: str) -> Any:
    """A ``distributed.Client`` connected to ``address`` (tcp:// or tls://, checked by
    :func:`check_address`) with a worker, or a clear error within bounded time."""
    try:
        from distributed import Client
    except ImportError:
        raise MbgenError("running on a Dask cluster needs Dask's distributed: "
                         "pip install 'mbgen[cluster]'") from None
    try:
        address = check_address(address)
        settings = security(address)
    except ValueError as exc:
        raise MbgenError(str(exc)) from None
    try:  # whatever a peer that is not a scheduler makes Dask raise (a web server's
        # reply read as a frame length asked for 3 EiB: MemoryError)
        _handshake(address, settings)
        dask = Client(address, timeout=CONNECT_TIMEOUT, security=settings)
    except Exception as exc:
        why = str(exc).strip() or f"nothing answered within {CONNECT_TIMEOUT:g} s"
        raise MbgenError(f"no Dask scheduler reached at {address!r}: "
                         f"{type(exc).__name__}: {why[:300]}") from None
    try:
        dask.wait_for_workers(1, timeout=CONNECT_TIMEOUT)
    except Exception:
        dask.close()
        raise MbgenError(f"the Dask scheduler at {address!r} has no worker after "
                         f"{CONNECT_TIMEOUT:g} s: start `dask worker {address}`") from None
    return dask


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
        try:
            design = dask.scatter(prepared.design, broadcast=True, timeout=CONNECT_TIMEOUT)
        except TimeoutError:
            raise MbgenError(f"the Dask cluster at {address!r} took no data within "
                             f"{CONNECT_TIMEOUT:g} s: its workers are gone or unreachable"
                             ) from None
        chunks = prepared.chunks
        futures = {dask.submit(cluster_chunk, study, design, chunks[index],
                               prepared.nominal_q, prepared.phi_limit, text,
                               study.mechanism.name,
                               None if build_dir is None else str(build_dir),
                               key=f"mbgen-sweep-{prepared.key[:12]}-{index}", pure=False):
                   index for index in todo}
        yield from as_finished(dask, address, futures)


def as_finished(dask: Any, address: str, futures: dict[Any, int],
                 ) -> Iterator[tuple[int, ChunkResult]]:
    """Each chunk's result as it finishes; a clear error, not a wait for ever, when the
    cluster has had no worker for WORKERLESS_LIMIT seconds or its scheduler stops
    answering (a look at it is bounded by CONNECT_TIMEOUT)."""
    import time

    from distributed import wait
    from distributed.client import FuturesCancelledError
    from distributed.scheduler import KilledWorker

    pending = set(futures)
    workerless_since: float | None = None
    while pending:
        try:
            try:
                finished, pending = wait(pending, timeout=POLL_INTERVAL,
                                         return_when="FIRST_COMPLETED")
            except TimeoutError:
                finished = set()
            results = [(futures[future], future.result()) for future in finished]
        except (FuturesCancelledError, KilledWorker, OSError) as exc:
            raise MbgenError(f"the Dask cluster at {address!r} lost chunks of the study "
                             f"({type(exc).__name__}); the chunks finished are kept: run "
                             "the same command to resume") from None
        yield from results
        if finished:
            workerless_since = None
            continue
        try:
            workers = len(dask.nthreads(callback_timeout=CONNECT_TIMEOUT))
        except Exception as exc:
            raise MbgenError(f"the Dask scheduler at {address!r} stopped answering "
                             f"({type(exc).__name__}) with {len(pending)} chunks not run; "
                             "the chunks finished are kept: run the same command to "
                             "resume") from None
        now = time.monotonic()
        if workers:
            workerless_since = None
        elif workerless_since is None:
            workerless_since = now
        elif now - workerless_since >= WORKERLESS_LIMIT:
            raise MbgenError(f"the Dask cluster at {address!r} has had no worker for "
                             f"{WORKERLESS_LIMIT:g} s with {len(pending)} chunks not run; "
                             "the chunks finished are kept: start workers "
                             f"(`dask worker {address}`) and run the same command to "
                             "resume")
