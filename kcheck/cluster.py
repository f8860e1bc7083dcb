"""Tasks on a Dask cluster (``--scheduler``): the one module that imports Dask.

``distributed`` is an optional extra (``pip install 'kcheck[dask]'``), so it is imported only
when a session opens; the core installs and imports without it. ``batch`` sends one task per
data set and ``verify`` one per grid point through a :class:`Session`; what a task computes
stays in those modules.

Determinism: LIBLINEAR and LIBSVM draw their folds from the process-wide ``rand()``, so two
tasks must never run at once in one worker process. Workers must have one thread each
(``dask worker --nthreads 1``; a session refuses others), and every task also holds a
process-wide lock while it runs, should a worker with more threads join later. Dask's worker
processes are daemonic and may not start kcheck's own worker pools, so tasks run with one job.

Faults: Dask runs a task again elsewhere when its worker dies. Each start of a task is counted
on the scheduler; a task that has already been started :data:`MAX_TRIES` times (its workers
died each time) is not run again but fails with :class:`WorkerDied`, whatever the scheduler's
own ``allowed-failures`` (Dask's ``KilledWorker``, when that comes first, becomes the same).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib.util
import logging
import os
import re
import signal
import sys
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kcheck import __version__
from kcheck.errors import KcheckError

#: How a user installs what ``--scheduler`` needs.
INSTALL_HINT = "pip install 'kcheck[dask]'"
#: Dask's address schemes a scheduler can be reached by.
SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")
#: Seconds to reach a scheduler before giving up with one line (exit 2).
CONNECT_SECONDS = 10.0
#: Seconds to wait for the first worker to join a cluster that has none yet.
WORKER_WAIT_SECONDS = 60.0
#: Starts of one task (each ended by its worker dying) before it fails with WorkerDied.
MAX_TRIES = 3

_ADDRESS = re.compile(r"^(?P<scheme>[a-z]+)://(?P<host>\[[0-9a-fA-F:]+\]|[^/:\s]+)(?::\d+)?$")
_LOCAL = re.compile(r"^local:(?P<n>\d+)$")


class WorkerDied(KcheckError):
    """A task whose worker process died every time it ran (killed or crashed)."""


@dataclass(frozen=True)
class Scheduler:
    """A parsed ``--scheduler``: a running cluster's address, or ``local:N``."""

    text: str
    address: str | None = None
    local_workers: int | None = None

    @property
    def is_local(self) -> bool:
        return self.local_workers is not None


def parse_scheduler(text: str) -> Scheduler:
    """``tcp://host:8786`` (or tls://, ws://, wss://, ucx://) or ``local:N``; else KcheckError."""
    value = text.strip()
    local = _LOCAL.match(value)
    if local:
        n = int(local.group("n"))
        if n < 1:
            raise KcheckError(f"--scheduler {text}: local:N needs at least one worker")
        return Scheduler(text=value, local_workers=n)
    m = _ADDRESS.match(value)
    if m is None or m.group("scheme") not in SCHEMES:
        raise KcheckError(
            f"--scheduler {text}: expected a scheduler address such as tcp://host:8786 "
            f"({', '.join(s + '://' for s in SCHEMES)}) or local:N"
        )
    return Scheduler(text=value, address=value)


def require(text: str) -> Scheduler:
    """The parsed ``--scheduler``, once Dask's distributed is known to be installed; for the
    command line to refuse a bad address or a missing extra before any work starts."""
    scheduler = parse_scheduler(text)
    if importlib.util.find_spec("distributed") is None:  # found, not imported: see Session
        _import_distributed()
    return scheduler


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise KcheckError(
            f"--scheduler needs Dask's distributed, which is not installed: {INSTALL_HINT}"
        ) from None
    return distributed


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Processes started here ignore SIGINT from their first instruction on: a Ctrl-C in the
    terminal reaches the whole process group, and it is the client's to handle (it ends the
    local cluster itself); a worker that got it while importing printed a traceback. Dask
    starts workers with ``spawn``, which clears a blocked signal mask but keeps an ignored
    signal ignored. Only the main thread can set that, for the whole process: a Ctrl-C while
    ``local:N`` starts its workers (a few seconds) is ignored.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


_SESSIONS: weakref.WeakSet[Session] = weakref.WeakSet()
#: Dask's own log messages are not kcheck's output: a task's failure comes back as its result.
_SILENT = logging.CRITICAL + 10


def dask_setup(worker: Any) -> None:
    """Run by each worker process of ``local:N`` as it starts (a Dask preload): ignore Ctrl-C
    also in a worker that the nanny restarts later, outside :func:`_sigint_ignored`; and keep
    the user's terminal, which these processes share, free of a closed client's traceback."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.unraisablehook = _without_closed_client_errors(sys.unraisablehook)


def _without_closed_client_errors(hook: Callable[[Any], object]) -> Callable[[Any], None]:
    """Wrap a worker's ``sys.unraisablehook`` to drop one message: a task that asks for its
    worker's client (:func:`run_task`) while the cluster is being closed, after a Ctrl-C, gets
    a client that the closing worker never closes; when it is freed its ``__del__`` meets the
    closed event loop and printed "Exception ignored in: <function Client.__del__ ...>
    RuntimeError: IOLoop is closed" under "kcheck: interrupted". Anything else still prints."""

    def quiet(args: Any) -> None:
        if getattr(args.object, "__qualname__", "") == "Client.__del__" and isinstance(
            args.exc_value, RuntimeError
        ):
            return
        hook(args)

    return quiet


class Session:
    """A client of a running cluster, or of a LocalCluster of N worker processes started here.

    Checked when it opens: the scheduler answers, a worker has joined, every worker has one
    thread and runs this kcheck version. Any failure is a KcheckError (one line, exit 2).
    """

    def __init__(self, scheduler: Scheduler | str) -> None:
        self.scheduler = parse_scheduler(scheduler) if isinstance(scheduler, str) else scheduler
        self.run_id = uuid.uuid4().hex
        self._cluster: Any = None
        self._client: Any = None
        self._closed = False
        self._done = threading.Event()
        try:
            if self.scheduler.is_local:
                with _sigint_ignored():
                    self._open(_import_distributed())
            else:
                self._open(_import_distributed())
            self._check_workers()
        except BaseException:
            self.close()
            raise
        _SESSIONS.add(self)

    def _open(self, distributed: Any) -> None:
        logging.getLogger("distributed").setLevel(_SILENT)
        self._killed = distributed.KilledWorker
        s = self.scheduler
        if s.local_workers is not None:
            self._cluster = distributed.LocalCluster(
                n_workers=s.local_workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                # No dashboard, and the scheduler's HTTP server (which runs without one) on a
                # free port of this host only: by default it took Dask's well-known 8787 and,
                # where another cluster held that, warned on stderr.
                scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
                silence_logs=_SILENT,
                preload=["kcheck.cluster"],
            )
            self._client = distributed.Client(self._cluster, set_as_default=False)
            return
        try:
            self._client = distributed.Client(
                s.address, timeout=CONNECT_SECONDS, set_as_default=False
            )
        except (OSError, TimeoutError) as e:
            raise KcheckError(
                f"--scheduler {s.text}: cannot reach the scheduler within "
                f"{CONNECT_SECONDS:g}s ({' '.join(str(e).split()) or type(e).__name__})"
            ) from None

    @property
    def address(self) -> str:
        """The scheduler's address, for another client of the same cluster."""
        return str(self._client.scheduler.address)

    def _check_workers(self) -> None:
        try:
            self._client.wait_for_workers(1, timeout=WORKER_WAIT_SECONDS)
        except (OSError, TimeoutError):
            raise KcheckError(
                f"--scheduler {self.scheduler.text}: no worker joined within "
                f"{WORKER_WAIT_SECONDS:g}s; start some with dask worker "
                f"{self.scheduler.text} --nthreads 1"
            ) from None
        many = {a: n for a, n in self._client.nthreads().items() if n != 1}
        if many:
            addr, n = next(iter(sorted(many.items())))
            raise KcheckError(
                f"--scheduler {self.scheduler.text}: worker {addr} has {n} threads; LIBSVM's "
                "folds need one task per process: start workers with --nthreads 1"
            )
        try:
            versions = self._client.run(_worker_version)
        except Exception as e:  # noqa: BLE001 - e.g. kcheck not installed on a worker
            raise KcheckError(
                f"--scheduler {self.scheduler.text}: the workers cannot run kcheck "
                f"({' '.join(str(e).split()) or type(e).__name__}); install kcheck[dask] "
                "on every worker"
            ) from None
        other = {a: v for a, v in versions.items() if v != __version__}
        if other:
            addr, v = next(iter(sorted(other.items())))
            raise KcheckError(
                f"--scheduler {self.scheduler.text}: worker {addr} runs kcheck {v}, this is "
                f"{__version__}; the results would differ: install the same version"
            )

    @property
    def slots(self) -> int:
        """Tasks the cluster runs at once now (one per single-threaded worker)."""
        return max(1, int(sum(self._client.nthreads().values())))

    def probe(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on one worker, its result returned here."""
        return self._client.submit(fn, *args, pure=False).result()

    def scatter(self, data: Any) -> Any:
        """Send ``data`` to the cluster once; tasks given the returned future share it."""
        return self._client.scatter([data], hash=False)[0]

    def submit(self, index: int, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` as a task of this session, counted (see the module's docstring)."""
        key = f"kcheck-{self.run_id}-{index}"
        future = self._client.submit(
            run_task, self.run_id, key, fn, *args, key=key, pure=False, priority=-index
        )
        future.add_done_callback(self._on_done)
        return future

    def _on_done(self, future: Any) -> None:
        self._done.set()

    def finished(
        self, futures: dict[Any, int], timeout: float
    ) -> list[tuple[int, Any, BaseException | None]]:
        """Wait up to ``timeout`` seconds; ``(index, result, error)`` of the futures done, which
        are removed from ``futures``. A worker that died every time is a WorkerDied error."""
        self._done.clear()
        done = [f for f in futures if f.done()]
        if not done and futures:
            self._done.wait(timeout)
            done = [f for f in futures if f.done()]
        out: list[tuple[int, Any, BaseException | None]] = []
        for fut in done:
            index = futures.pop(fut)
            try:
                out.append((index, fut.result(), None))
            except (asyncio.CancelledError, concurrent.futures.CancelledError):
                # Nobody here cancels a future still wanted: the scheduler went away.
                raise KcheckError(
                    f"--scheduler {self.scheduler.text}: the cluster dropped the run's tasks "
                    "(scheduler lost?); run again, with --resume for a batch"
                ) from None
            except self._killed:
                out.append((index, None, WorkerDied(_died(MAX_TRIES))))
            except Exception as e:  # noqa: BLE001 - the task's own error, for the caller
                out.append((index, None, e))
        return sorted(out, key=lambda x: x[0])

    def cancel(self, futures: Any) -> None:
        """Cancel queued tasks; a task already running in C finishes and its result is
        dropped (on a shared cluster), or its worker is ended with the local cluster."""
        if self._client is None or not futures:
            return
        with contextlib.suppress(Exception):
            self._client.cancel(list(futures), force=True)

    def close(self) -> None:
        """Release every future of this client and, for ``local:N``, end its workers."""
        if self._closed:
            return
        self._closed = True
        _SESSIONS.discard(self)
        client, self._client = self._client, None
        cluster, self._cluster = self._cluster, None
        if client is not None:
            with contextlib.suppress(Exception):
                if cluster is None:
                    client.cancel(list(client.futures), force=True)
                    client.set_metadata(["kcheck", self.run_id], None)  # the tries counted
                client.close(timeout=5)
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.close(timeout=10)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def end_all_sessions() -> None:
    """Cancel every open session's futures and close it; for a run that is being interrupted."""
    for session in list(_SESSIONS):
        session.close()


def _died(tries: int) -> str:
    return (
        f"the worker process died each of the {tries} times this task ran (killed, for "
        "example for lack of memory, or crashed); try a larger --memory-limit on bigger workers"
    )


def _worker_version() -> str:
    return __version__


#: Held by every task while it runs: one task at a time per worker process (``rand()``).
_ONE_AT_A_TIME = threading.Lock()


def run_task(run_id: str, key: str, fn: Callable[..., Any], *args: Any) -> Any:
    """On a worker: count this start of the task, refuse a task that has killed its worker
    :data:`MAX_TRIES` times, then run ``fn(*args)`` alone in this process."""
    distributed = _import_distributed()
    client = distributed.get_client()
    path = ["kcheck", run_id, key]
    tries = int(client.get_metadata(path, default=0) or 0)
    if tries >= MAX_TRIES:
        raise WorkerDied(_died(tries))
    client.set_metadata(path, tries + 1)
    with _ONE_AT_A_TIME:
        return fn(*args)


def shared_path(path: str) -> tuple[str, int, int] | None:
    """What a worker must see at ``path`` for the file to be the same one: its absolute path,
    size and modification time (whole seconds); None if this process cannot read it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not os.access(path, os.R_OK):
        return None
    return os.path.abspath(path), st.st_size, int(st.st_mtime)


def same_files(expected: list[tuple[str, int, int]]) -> list[bool]:
    """On a worker: for each (path, size, mtime), whether this worker reads that same file."""
    return [shared_path(p) == (p, size, mtime) for p, size, mtime in expected]
