"""Worker processes, started one way everywhere.

Processes, not threads, wherever LIBLINEAR or LIBSVM cross-validate: both draw folds from the
process-wide C ``rand()``. Workers come from a fork server (the parent runs threads, so no plain
fork), ignore Ctrl-C (the parent ends them), and exit when the parent dies (the CLI ends an
interrupted run with ``os._exit``).

Interrupts with ``-j N``: every pool is registered and workers start only under one lock (in
``submit``), so :func:`end_all_pools` can take it, end every pool and release their semaphores
(``os._exit`` skips multiprocessing's exit handlers), then end the fork server and the resource
tracker (:func:`_end_helpers`; the tracker ignores SIGINT and SIGTERM and would outlive us).

A terminal's Ctrl-C reaches the whole process group; helpers that get it while importing print a
traceback, so SIGINT is blocked in the thread that starts them (a pending SIGINT is dropped once
ignored). The resource tracker is started first because its start unblocks SIGINT in the caller
(CPython 3.11), see :func:`_sigint_blocked`; :mod:`kcheck.parallel.cluster` does the same for
Dask."""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import multiprocessing.util
import os
import pickle
import resource
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, TypeVar, cast

from kcheck.errors import TimeLimitReached

R = TypeVar("R")

#: Held while submitting (pools start workers then) and ending pools: none half started at exit.
_LOCK = threading.Lock()
_POOLS: weakref.WeakSet[ProcessPoolExecutor] = weakref.WeakSet()
_closing = False


#: CPU seconds workers spent on this process's calls, sent back with each result: a fork server's
#: workers are not our children, so RUSAGE_CHILDREN misses them.
_worker_cpu = 0.0
_CPU_LOCK = threading.Lock()


def process_cpu_seconds() -> float:
    """CPU seconds of this process, its ended children, and its pool tasks and :func:`stoppable`
    calls (not a :class:`Background`'s: it runs beside the stages)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    with _CPU_LOCK:
        workers = _worker_cpu
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + workers


def _add_worker_cpu(seconds: float) -> None:
    global _worker_cpu
    with _CPU_LOCK:
        _worker_cpu += seconds


def _measured(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``fn``'s value and the CPU seconds it took in this worker, its own workers included."""
    c0 = process_cpu_seconds()
    value = fn(*args, **kwargs)
    return value, process_cpu_seconds() - c0


class _Measured(Future):  # type: ignore[type-arg]
    """A pool task's future, its CPU seconds added to :func:`process_cpu_seconds` on arrival."""

    def __init__(self, inner: Future) -> None:  # type: ignore[type-arg]
        super().__init__()
        self._inner = inner
        inner.add_done_callback(self._relay)

    def cancel(self) -> bool:
        # Where the task has not started, its callback marks this future cancelled too.
        return self._inner.cancel()

    def _relay(self, inner: Future) -> None:  # type: ignore[type-arg]
        if inner.cancelled():
            super().cancel()
            self.set_running_or_notify_cancel()
            return
        error = inner.exception()
        if error is not None:
            self.set_exception(error)
            return
        value, cpu = inner.result()
        _add_worker_cpu(cpu)
        self.set_result(value)


class RunEnding(BaseException):
    """Raised by ``submit`` once :func:`end_all_pools` has run: the process is about to exit."""


class _Pool(ProcessPoolExecutor):
    """A ProcessPoolExecutor that starts workers only under the module lock."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with _LOCK, _sigint_blocked():
            if _closing:
                raise RunEnding()
            inner = super().submit(_measured, fn, *args, **kwargs)
        return _Measured(inner)


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Block SIGINT in this thread so processes started here inherit the mask. The resource tracker
    is started first and SIGINT blocked again, because its start unblocks SIGINT in the caller
    (CPython 3.11), which let a Ctrl-C hit the fork server's numpy import."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    multiprocessing.resource_tracker.ensure_running()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _context(preload: Sequence[str]) -> multiprocessing.context.BaseContext:
    """The one way workers start: a fork server importing ``preload`` once (spawn where none)."""
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        ctx.set_forkserver_preload(list(preload))
        _short_socket_dir()
    return ctx


#: Longest Unix socket path (sun_path's 108 bytes, NUL last), and what multiprocessing appends for
#: the fork server's: /pymp-XXXXXXXX/listener-XXXXXXXX.
SOCKET_PATH_MAX = 107
SOCKET_NAME_LEN = 40


def _short_socket_dir() -> None:
    """Give multiprocessing a folder whose socket paths fit where TMPDIR is too long (about 70
    characters gave "AF_UNIX path too long"). Made and removed as multiprocessing does its own,
    under the first short system folder that can hold it; only the socket's folder moves."""
    import shutil
    import tempfile

    config = multiprocessing.current_process()._config  # type: ignore[attr-defined]
    if config.get("tempdir") is not None:
        return
    if len(tempfile.gettempdir()) + SOCKET_NAME_LEN <= SOCKET_PATH_MAX:
        return
    for base in ("/tmp", "/var/tmp", "/dev/shm"):
        try:
            folder = tempfile.mkdtemp(prefix="pymp-", dir=base)
        except OSError:
            continue
        multiprocessing.util.Finalize(
            None,
            multiprocessing.util._remove_temp_dir,  # type: ignore[attr-defined]
            args=(shutil.rmtree, folder),
            exitpriority=-100,
        )
        config["tempdir"] = folder
        return


def process_pool(
    workers: int,
    preload: Sequence[str],
    initializer: Callable[..., None] | None = None,
    initargs: tuple[Any, ...] = (),
) -> ProcessPoolExecutor:
    """A pool whose workers import ``preload`` once (in the fork server) and run ``initializer``."""
    ctx = _context(preload)
    with _LOCK, _sigint_blocked():  # creating its queues may start the resource tracker
        if _closing:
            raise RunEnding()
        pool = _Pool(
            max_workers=workers,
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(initializer, initargs),
        )
        _POOLS.add(pool)
    return pool


def _init_worker(initializer: Callable[..., None] | None, initargs: tuple[Any, ...]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SIGTERM ends a worker at once, even inside a LIBLINEAR call: a Python handler would wait for
    # the call, and a stopped worker would never see it.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    if initializer is not None:
        initializer(*initargs)


def _exit_with(parent: multiprocessing.process.BaseProcess) -> None:
    parent.join()
    os._exit(1)


def end_pool(pool: ProcessPoolExecutor, grace: float = 3.0) -> None:
    """Cancel what has not started and end the workers now, running tasks included."""
    processes = _processes(pool)
    # Stopped before the shutdown drops the pool's queues (their semaphores are unlinked when
    # collected), or a worker reading its start-up data prints a traceback.
    stopped = _stop_workers(pool)
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        with contextlib.suppress(Exception):
            p.kill()  # stopped: SIGTERM would wait for a SIGCONT
    # Where the fork server has died, worker handles think they ended and kill() sends nothing, so
    # each still-stopped worker is killed by pid (a stopped pid cannot have been reused).
    for pid in stopped:
        if _state(pid) in (b"T", b"t"):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace
    for p in processes:
        with contextlib.suppress(Exception):
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()


#: Seconds past the deadline a stopped worker gets to end after SIGKILL before it is left.
_REAP_SECONDS = 1.0


class Stopped(Exception):
    """The deadline passed before a :func:`stoppable` call finished; its worker was killed."""


def _run_and_send(conn: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """``fn(*args)`` with its CPU seconds here: (True, value, cpu) or (False, exception, cpu)."""
    c0 = process_cpu_seconds()
    try:
        out: tuple[bool, Any, float] = (True, fn(*args), process_cpu_seconds() - c0)
    except BaseException as e:  # noqa: BLE001 - sent to the parent, which raises it
        out = (False, e, process_cpu_seconds() - c0)
    try:
        conn.send(out)
    except Exception as e:  # noqa: BLE001 - an unpicklable result or error
        error = RuntimeError(f"worker result could not be sent back: {e}")
        conn.send((False, error, out[2]))
    conn.close()


def stoppable(
    fn: Callable[..., Any],
    *args: Any,
    deadline: float,
    preload: Sequence[str] = ("kcheck.bindings.engines",),
) -> Any:
    """Run ``fn(*args)`` in a worker process and return its result, or kill the worker and raise
    :class:`Stopped` once ``time.perf_counter()`` passes ``deadline`` (a LIBLINEAR or LIBSVM call
    cannot be interrupted otherwise). The arguments are sent as :class:`Background` sends them,
    never pickled whole (that doubled the data while the worker started), but the worker holds a
    copy: for time-limited runs only. The worker ignores Ctrl-C and exits when the parent dies."""
    if time.perf_counter() >= deadline:
        raise Stopped()
    job = Background(fn, *args, preload=preload)
    try:
        if not job.ready(max(0.0, deadline - time.perf_counter())):
            raise Stopped()
        return job.result()
    finally:
        job.cancel()
        if job.cpu_seconds is not None:
            _add_worker_cpu(job.cpu_seconds)


def run_until(deadline: float | None, fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)`` in a stoppable worker where there is a deadline (``--time-limit``), else in
    this process (no data copy); TimeLimitReached when the deadline passes."""
    if deadline is None:
        return fn(*args)
    try:
        return cast(R, stoppable(fn, *args, deadline=deadline))
    except Stopped:
        raise TimeLimitReached() from None


class Background:
    """A call running in its own worker process while this process goes on; :meth:`result` waits for
    it and ends the worker. Arguments are sent before the constructor returns with arrays written to
    a pipe as they are (pickle 5 out-of-band buffers), so no pickled copy exists here. The worker's
    copy costs memory: callers start one only where it fits."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *args: Any,
        preload: Sequence[str] = ("kcheck.bindings.engines",),
    ) -> None:
        ctx = _context(preload)
        #: The call's CPU seconds in its worker, once :meth:`result` has returned or raised.
        self.cpu_seconds: float | None = None
        self._conn, child = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(  # type: ignore[attr-defined]
            target=_background_main, args=(child,), daemon=False
        )
        with _LOCK, _sigint_blocked():  # as a pool's workers start (see the module's doc)
            if _closing:
                raise RunEnding()
            self._proc.start()
            _BACKGROUND.add(self)
        child.close()
        try:
            _send_out_of_band(self._conn, (fn, args))
        except (BrokenPipeError, ConnectionResetError):
            self.cancel()  # the worker died before it had read its call
            raise RuntimeError(f"worker process died (exit code {self._proc.exitcode})") from None
        except BaseException:
            self.cancel()
            raise

    def ready(self, timeout: float) -> bool:
        """Whether the call has ended (or its worker died) within ``timeout`` seconds."""
        return bool(self._conn.poll(timeout))

    def result(self) -> Any:
        """The call's value (or its exception, raised here); the worker ends either way."""
        try:
            try:
                ok, value, self.cpu_seconds = self._conn.recv()
            except (EOFError, ConnectionResetError):
                self._proc.join(_REAP_SECONDS)
                raise RuntimeError(
                    f"worker process died (exit code {self._proc.exitcode})"
                ) from None
        finally:
            self.cancel()
        if not ok:
            raise value
        return value

    def cancel(self) -> None:
        """End the worker now, finished or not."""
        with contextlib.suppress(Exception):
            self._conn.close()
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join(_REAP_SECONDS)
        _BACKGROUND.discard(self)

    @property
    def pid(self) -> int | None:
        pid = self._proc.pid
        return None if pid is None else int(pid)


_BACKGROUND: weakref.WeakSet[Background] = weakref.WeakSet()


def _background_main(conn: Any) -> None:
    _init_worker(None, ())
    fn, args = _recv_out_of_band(conn)
    _run_and_send(conn, fn, args)


def _send_out_of_band(conn: Any, obj: Any) -> None:
    """Pickle ``obj`` with arrays sent out-of-band (protocol 5): no pickled copy here."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    views = [b.raw() for b in buffers]
    conn.send((head, [v.nbytes for v in views]))
    for v in views:
        conn.send_bytes(v)


def _recv_out_of_band(conn: Any) -> Any:
    """The other end of :func:`_send_out_of_band`, into writable buffers."""
    head, sizes = conn.recv()
    buffers = []
    for size in sizes:
        buf = bytearray(size)
        conn.recv_bytes_into(buf)
        buffers.append(buf)
    return pickle.loads(head, buffers=buffers)


def end_all_pools(wait_for_start: float = 10.0) -> None:
    """End every pool of this process, release their semaphores, end the fork server and resource
    tracker; for a run about to exit.

    Waits up to ``wait_for_start`` for a starting worker, then refuses new tasks, then runs
    multiprocessing's exit finalizers of priority >= 0 (which ``os._exit`` skips) before ending
    workers: ending them lets pool threads drop references mid-finalizer and leaves the tracker a
    semaphore to warn about."""
    global _closing
    # Tell multiprocessing we are exiting, so a queue feeder meeting a closed pipe drops the error
    # instead of printing a traceback after "interrupted".
    multiprocessing.util._exiting = True  # type: ignore[attr-defined]
    locked = _LOCK.acquire(timeout=wait_for_start)
    try:
        _closing = True
        # A just-forked worker reading start-up data names the pool's semaphores; unlinked under it,
        # it prints a traceback. Stopped first it prints nothing; end_pool kills it.
        for pool in list(_POOLS):
            _stop_workers(pool)
        for job in list(_BACKGROUND):
            job.cancel()
        _run_exit_finalizers()
        for pool in list(_POOLS):
            end_pool(pool)
    finally:
        if locked:
            _LOCK.release()
    _run_exit_finalizers()
    time.sleep(0.05)  # let a finalizer another thread had already begun finish
    _end_helpers()


#: Seconds the resource tracker gets to exit on its own once its pipe is closed.
_TRACKER_GRACE = 1.0


def _end_helpers(grace: float = _TRACKER_GRACE) -> None:
    """End and reap the fork server and resource tracker this process started: neither ends with it,
    and the tracker ignores SIGINT and SIGTERM. After the workers are gone, the fork server is
    killed and the tracker's pipe closed so it releases what is registered and exits (killed after
    ``grace`` seconds). Relies on the private names Python 3.10 to 3.13 keep their pid and pipe
    under."""
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if server is not None and pid is not None:
        _close(getattr(server, "_forkserver_alive_fd", None))
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        _reap(pid, None)
        server._forkserver_alive_fd = server._forkserver_pid = None
    tracker = getattr(multiprocessing.resource_tracker, "_resource_tracker", None)
    pid = getattr(tracker, "_pid", None)
    if tracker is not None and pid is not None:
        _close(getattr(tracker, "_fd", None))
        tracker._fd = tracker._pid = None
        if not _reap(pid, grace):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            _reap(pid, None)


def _close(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def _reap(pid: int, within: float | None) -> bool:
    """Wait up to ``within`` seconds (None: forever) for child ``pid``, reap it; whether it
    ended."""
    deadline = None if within is None else time.monotonic() + within
    while True:
        try:
            done, _ = os.waitpid(pid, 0 if deadline is None else os.WNOHANG)
        except ChildProcessError:
            return True
        except InterruptedError:
            continue
        if done:
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(0.005)


def _processes(pool: ProcessPoolExecutor) -> list[multiprocessing.process.BaseProcess]:
    """The pool's worker processes (none once it has been shut down)."""
    return list((getattr(pool, "_processes", None) or {}).values())


def _stop_workers(pool: ProcessPoolExecutor, wait: float = 0.5) -> list[int]:
    """SIGSTOP every worker of ``pool`` and wait up to ``wait`` seconds for /proc to show them
    stopped (delivery is asynchronous); returns the pids signalled."""
    if not hasattr(signal, "SIGSTOP"):
        return []
    pids: list[int] = []
    for p in _processes(pool):
        with contextlib.suppress(Exception):
            if p.pid is not None:
                os.kill(p.pid, signal.SIGSTOP)
                pids.append(p.pid)
    deadline = time.monotonic() + wait
    running = list(pids)
    while running and time.monotonic() < deadline:
        running = [pid for pid in running if _running(pid)]
        if running:
            time.sleep(0.002)
    return pids


def _state(pid: int) -> bytes | None:
    """The state letter of ``pid`` in /proc (None where it is gone or cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _running(pid: int) -> bool:
    """Whether ``pid`` is neither stopped nor gone, by /proc (False where it cannot tell)."""
    state = _state(pid)
    return state is not None and state not in (b"T", b"t", b"Z", b"X")


def _run_exit_finalizers() -> None:
    with contextlib.suppress(Exception):
        multiprocessing.util._run_finalizers(0)  # type: ignore[attr-defined]
