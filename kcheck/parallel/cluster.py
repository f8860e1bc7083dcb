"""Tasks on a Dask cluster (``--scheduler``): the one module that imports Dask (an optional extra,
imported only when a session opens). ``batch`` sends one task per data set and ``verify`` one per
grid point through a :class:`Session`.

Determinism: LIBLINEAR and LIBSVM draw folds from the process-wide ``rand()``, so workers must have
one thread each (a session refuses others), and every task also holds a process-wide lock. Dask's
daemonic workers cannot start kcheck's pools, so tasks run with one job.

Faults: each start of a task is counted on the scheduler; one started :data:`MAX_TRIES` times fails
with :class:`WorkerDied` (as does Dask's ``KilledWorker``).

Addresses: a ``tcp://`` address is checked first (:func:`_greeted`): a scheduler greets at once,
anything else is named in one line within :data:`CONNECT_SECONDS`. ``local:N`` is bounded by cores
and memory (:func:`check_local`)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import logging
import multiprocessing.resource_tracker
import os
import re
import signal
import socket
import struct
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from kcheck import __version__
from kcheck.errors import KcheckError
from kcheck.memory import default_memory_limit, size_text

T = TypeVar("T")

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
#: Least memory per ``local:N`` worker: Python with Dask, NumPy, SciPy, kcheck (80 MB).
LOCAL_WORKER_BYTES = 256 * 2**20

_ADDRESS = re.compile(
    r"^(?P<scheme>[a-z]+)://(?P<host>\[[0-9a-fA-F:]+\]|[^/:\s]+)(?::(?P<port>\d+))?$"
)
_LOCAL = re.compile(r"^local:(?P<n>\d+)$")


class WorkerDied(KcheckError):
    """A task whose worker process died every time it ran (killed or crashed)."""


@dataclass(frozen=True)
class Scheduler:
    """A parsed ``--scheduler``: a running cluster's address, or ``local:N``."""

    text: str
    address: str | None = None
    local_workers: int | None = None


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


def require(text: str, memory_limit: int | None = None) -> Scheduler:
    """The parsed ``--scheduler`` once the extra is installed and ``local:N`` fits, so a bad
    address, missing extra or too many workers fail before any work."""
    scheduler = parse_scheduler(text)
    check_local(scheduler, memory_limit)
    if importlib.util.find_spec("distributed") is None:  # found, not imported: see Session
        _import_distributed()
    return scheduler


def check_local(scheduler: Scheduler, memory_limit: int | None = None) -> None:
    """Refuse ``local:N`` beyond this machine: more workers than cores, or than ``memory_limit``
    (default: half of physical memory) holds at :data:`LOCAL_WORKER_BYTES` each (Dask starts every
    one asked for: ``local:99999999`` took 13 GB)."""
    n = scheduler.local_workers
    if n is None:
        return
    cores = os.cpu_count() or 1
    if n > cores:
        raise KcheckError(
            f"--scheduler {scheduler.text}: this machine has {cores} "
            f"core{'s' if cores != 1 else ''}; start at most local:{cores}"
        )
    limit = default_memory_limit() if memory_limit is None else memory_limit
    fit = limit // LOCAL_WORKER_BYTES
    if n > fit:
        each = size_text(LOCAL_WORKER_BYTES)
        raise KcheckError(
            f"--scheduler {scheduler.text}: {n} workers need about {each} each, over the "
            f"memory limit of {size_text(limit)}; "
            + (f"start at most local:{fit}" if fit else "raise --memory-limit")
        )


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise KcheckError(
            f"--scheduler needs Dask's distributed, which is not installed: {INSTALL_HINT}"
        ) from None
    return distributed


def _started_apart(build: Callable[[], T], undo: Callable[[T], object]) -> T:
    """``build()`` in a thread of its own that blocks SIGINT, while this thread waits and stays
    interruptible.

    Threads and processes inherit the starting thread's signal mask, so Dask's workers cannot get
    SIGINT from their first instruction: a terminal's Ctrl-C reaches the process group, is the
    client's to handle, and made a worker print a traceback while importing. On an interrupt here
    the start finishes (a worker cut off during start-up prints a traceback), ``undo`` gets what it
    built, and the interrupt goes on; an interrupt of that wait goes on at once."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            if hasattr(signal, "pthread_sigmask"):
                # multiprocessing's resource tracker unblocks SIGINT in the thread that starts it:
                # start it here, not in a Dask thread just before a worker.
                multiprocessing.resource_tracker.ensure_running()
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            box["value"] = build()
        except BaseException as e:  # noqa: BLE001 - raised again in the waiting thread
            box["error"] = e
        finally:
            done.set()

    # Wait on an event, not Thread.join: an interrupted join() marks a thread ended (3.11).
    thread = threading.Thread(target=target, name="kcheck-cluster-start", daemon=True)
    try:
        thread.start()
        while not done.wait(0.1):
            pass
    except BaseException:
        if thread.ident is not None:  # started, even if start() was interrupted
            done.wait()
        if "value" in box:
            undo(box["value"])
        raise
    if "error" in box:
        raise box["error"]
    return cast(T, box["value"])


_SESSIONS: weakref.WeakSet[Session] = weakref.WeakSet()
#: Dask's own log messages are not kcheck's output: a task's failure comes back as its result.
_SILENT = logging.CRITICAL + 10


def dask_setup(worker: Any) -> None:
    """Run by each ``local:N`` worker as it starts (a Dask preload): ignore Ctrl-C for good (see
    :func:`_started_apart`), and keep the shared terminal free of a closed client's traceback."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.unraisablehook = _without_closed_client_errors(sys.unraisablehook)


def _without_closed_client_errors(hook: Callable[[Any], object]) -> Callable[[Any], None]:
    """Wrap a worker's ``sys.unraisablehook`` to drop the "IOLoop is closed" a task's client prints
    from ``__del__`` as the cluster closes after Ctrl-C; all else prints."""

    def quiet(args: Any) -> None:
        if getattr(args.object, "__qualname__", "") == "Client.__del__" and isinstance(
            args.exc_value, RuntimeError
        ):
            return
        hook(args)

    return quiet


def _unreachable(s: Scheduler, e: BaseException) -> KcheckError:
    return KcheckError(
        f"--scheduler {s.text}: cannot reach the scheduler within "
        f"{CONNECT_SECONDS:g}s ({' '.join(str(e).split()) or type(e).__name__})"
    )


def _not_dask(s: Scheduler, where: str, found: str) -> KcheckError:
    return KcheckError(f"--scheduler {s.text}: not a Dask scheduler at {where} ({found})")


def _greeted(s: Scheduler, deadline: float) -> None:
    """Connect to a ``tcp://`` address and read the handshake a Dask scheduler sends at once, by
    ``deadline`` (``time.monotonic()``); else a KcheckError saying what is there. Other schemes are
    Dask's.

    Dask's client waits for it without a timeout and takes any reply's first eight bytes as a length
    ("HTTP/1.0": 3 EiB). Here at most :data:`_GREETING_BYTES` are read, and the handshake is echoed
    so the scheduler sees a whole one."""
    m = _ADDRESS.match(s.text)
    if m is None or m.group("scheme") != "tcp":
        return
    host = m.group("host").strip("[]")
    port = int(m.group("port") or DEFAULT_PORT)
    try:
        sock = socket.create_connection((host, port), timeout=_left(deadline))
    except OSError as e:
        raise _unreachable(s, e) from None
    where = f"{m.group('host')}:{port}"
    with sock:
        head = _receive(sock, _FRAME_HEADER.size, deadline)
        if len(head) < _FRAME_HEADER.size:
            raise _not_dask(s, where, _silence(head, deadline))
        (size,) = _FRAME_HEADER.unpack(head)
        if not 0 < size <= _GREETING_BYTES:
            raise _not_dask(s, where, _answer(head + _receive(sock, 200, time.monotonic() + 0.5)))
        body = _receive(sock, size, deadline)
        if len(body) < size or not _is_handshake(body):
            raise _not_dask(s, where, _answer(head + body))
        with contextlib.suppress(OSError):
            sock.sendall(head + body)


#: Dask's TCP frames start with their length, an unsigned 64-bit integer in native order.
_FRAME_HEADER = struct.Struct("Q")
#: A Dask scheduler's handshake is about 60 bytes; more is read from no one.
_GREETING_BYTES = 1 << 16
#: Dask's port when an address gives none.
DEFAULT_PORT = 8786


def _left(deadline: float) -> float:
    return max(0.01, deadline - time.monotonic())


def _receive(sock: socket.socket, n: int, deadline: float) -> bytes:
    """Up to ``n`` bytes, fewer if the peer closes or ``deadline`` passes first."""
    data = b""
    while len(data) < n and time.monotonic() < deadline:
        sock.settimeout(_left(deadline))
        try:
            chunk = sock.recv(n - len(data))
        except OSError:  # TimeoutError included
            break
        if not chunk:
            break
        data += chunk
    return data


def _silence(head: bytes, deadline: float) -> str:
    if head:
        return _answer(head)
    if time.monotonic() >= deadline:
        return (
            f"it accepted the connection and said nothing for {CONNECT_SECONDS:g}s; "
            "a scheduler greets at once"
        )
    return "it closed the connection without a word"


def _answer(data: bytes) -> str:
    """What a peer sent, for a message: its first line, printable, at most 60 characters."""
    line = (data.splitlines() or [b""])[0].decode("latin-1")
    shown = "".join(c if c.isprintable() else "?" for c in line).strip()
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"it answered {shown!r}" if shown else f"it answered {len(data)} bytes of something else"


def _is_handshake(body: bytes) -> bool:
    """Whether ``body`` (a message's frames) is a Dask handshake (Python, pickle versions)."""
    try:
        from distributed.protocol.core import loads
        from distributed.protocol.utils import unpack_frames

        message = loads(unpack_frames(body), deserialize=False)  # type: ignore[no-untyped-call]
    except Exception:  # noqa: BLE001 - anything that does not decode is not one
        return False
    return isinstance(message, dict) and {"python", "pickle-protocol"} <= set(message)


class Session:
    """A client of a running cluster, or of a LocalCluster of N workers started here; on open the
    scheduler must answer and workers have one thread and our version (else exit 2)."""

    def __init__(self, scheduler: Scheduler | str, memory_limit: int | None = None) -> None:
        self.scheduler = parse_scheduler(scheduler) if isinstance(scheduler, str) else scheduler
        self.run_id = uuid.uuid4().hex
        self._cluster: Any = None
        self._client: Any = None
        self._closed = False
        self._done = threading.Event()
        try:
            check_local(self.scheduler, memory_limit)
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
            n = s.local_workers

            def build() -> tuple[Any, Any]:
                cluster = distributed.LocalCluster(
                    n_workers=n,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    # No dashboard; the scheduler's HTTP server on a free local port (8787 may be
                    # busy).
                    scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
                    silence_logs=_SILENT,
                    preload=["kcheck.parallel.cluster"],
                )
                try:
                    return cluster, distributed.Client(cluster, set_as_default=False)
                except BaseException:
                    cluster.close(timeout=10)
                    raise

            def undo(built: tuple[Any, Any]) -> None:
                self._cluster, self._client = built

            self._cluster, self._client = _started_apart(build, undo)
            return
        assert s.address is not None
        deadline = time.monotonic() + CONNECT_SECONDS
        _greeted(s, deadline)
        try:
            self._client = distributed.Client(
                s.address,
                timeout=max(1.0, deadline - time.monotonic()),
                set_as_default=False,
            )
        except (OSError, TimeoutError) as e:
            raise _unreachable(s, e) from None

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
        """Wait up to ``timeout`` seconds; ``(index, result, error)`` of futures done, removed from
        ``futures``. A worker that died every time is a WorkerDied error."""
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
            except (_asyncio_cancelled(), concurrent.futures.CancelledError):
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
        """Cancel queued tasks; one running in C finishes unused, or ends with the local cluster."""
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
    """On a worker: count this start, refuse after :data:`MAX_TRIES` deaths, run ``fn`` alone."""
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
    """What a worker must see at ``path`` for the same file (path, size, mtime), or None."""
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


def _asyncio_cancelled() -> type[BaseException]:
    """asyncio's CancelledError, which Dask's futures raise: imported here, where a session
    already has it loaded, so that a check without a cluster does not pay asyncio's import."""
    import asyncio

    return asyncio.CancelledError
