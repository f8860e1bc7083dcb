"""Worker processes, started one way everywhere.

Processes, not threads, wherever LIBLINEAR or LIBSVM cross-validate: both draw their folds from
the process-wide C ``rand()``, so threads would make results depend on timing. Workers come
from a fork server (never a plain fork: the parent runs threads, and forking those is unsafe),
ignore Ctrl-C (the parent handles it and ends them), and exit when the parent dies, since the
CLI ends an interrupted run with ``os._exit`` and a pool worker would otherwise wait forever.

An interrupted run must end cleanly with ``-j N`` too. Two things went wrong when it did not:
``os._exit`` while a worker was being started cut the pickled start-up data short (the new
worker printed an ``UnpicklingError`` traceback), and it skipped multiprocessing's exit handlers,
so the resource tracker warned about the pools' leaked semaphores. Every pool is therefore
registered, a worker is only ever started under one lock (workers start in ``submit``), and
:func:`end_all_pools` takes that lock, ends every pool and releases their semaphores. It then
ends the fork server and the resource tracker too (:func:`_end_helpers`): neither ends with this
process, and the tracker ignores SIGINT and SIGTERM by design, so a SIGTERM to the process group
left it running, adopted by init, for as long as any worker was.

A Ctrl-C in a terminal also reaches the fork server, the resource tracker and the workers
(the whole process group); a SIGTERM to the group ends the workers and the fork server at once
(a worker takes SIGTERM's default action, whatever the command's script it ran again as it
started had set). Each ignores SIGINT once it runs, but the fork server first imports
the preloaded modules (a second or more), and a SIGINT then printed a KeyboardInterrupt
traceback. So SIGINT is blocked in the thread that starts them, and a SIGINT held pending is
dropped when the process sets it to be ignored. multiprocessing starts its resource tracker
before the first process it spawns and then unblocks SIGINT in the calling thread (CPython
3.11's resource_tracker), so a fork server started by the same call ran with SIGINT unblocked
(SigBlk 0 in its /proc status): with ``-j 2`` on large data the baseline's worker starts the
fork server a second or two after the read, and a Ctrl-C then printed a KeyboardInterrupt
traceback from its import of numpy, and a worker being started printed a second "kcheck:
interrupted". So the tracker is started first and SIGINT blocked again
(:func:`_sigint_blocked`), as :mod:`kcheck.parallel.cluster` does for Dask's workers.
"""

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

#: Held while a task is submitted (which is when a pool starts its workers) and while pools are
#: ended, so that no worker is half started when the process exits.
_LOCK = threading.Lock()
_POOLS: weakref.WeakSet[ProcessPoolExecutor] = weakref.WeakSet()
_closing = False


#: CPU seconds that workers spent on this process's calls, as they sent them back with each
#: result: a fork server's workers are its children, not this process's, so RUSAGE_CHILDREN
#: never counts them, and a stage whose work ran in a pool showed a tenth of its CPU.
_worker_cpu = 0.0
_CPU_LOCK = threading.Lock()


def process_cpu_seconds() -> float:
    """CPU seconds of this process, of its children that have ended, and of the pool tasks
    and :func:`stoppable` calls it ran in workers. A :class:`Background` call's are not
    included: it runs beside this process's stages, so they are its own
    (:attr:`Background.cpu_seconds`)."""
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
    """``fn``'s value and the CPU seconds it took in this (worker) process, its own workers
    included."""
    c0 = process_cpu_seconds()
    value = fn(*args, **kwargs)
    return value, process_cpu_seconds() - c0


class _Measured(Future):  # type: ignore[type-arg]
    """A pool task's future as its caller sees it: the task's value, its CPU seconds added
    to :func:`process_cpu_seconds` as it arrives. Cancelling cancels the task itself."""

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
    """Block SIGINT in this thread: processes started here inherit the mask (see above).

    multiprocessing starts its resource tracker before the fork server and unblocks SIGINT
    in the calling thread after it (CPython 3.11's resource_tracker), so the fork server, started
    next by the same call, ran with SIGINT unblocked: a Ctrl-C while it imported numpy printed a
    KeyboardInterrupt traceback. So the tracker is started here first and SIGINT blocked again;
    once it runs, starting a process leaves the mask alone."""
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
    """The one way workers start: a fork server that imports ``preload`` once (spawn where
    there is none)."""
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        ctx.set_forkserver_preload(list(preload))
        _short_socket_dir()
    return ctx


#: The longest path of a Unix socket (sun_path holds 108 bytes, the last one a NUL), and what
#: multiprocessing adds to its folder for the fork server's: /pymp-XXXXXXXX/listener-XXXXXXXX.
SOCKET_PATH_MAX = 107
SOCKET_NAME_LEN = 40


def _short_socket_dir() -> None:
    """Give multiprocessing a folder whose socket paths fit, where TMPDIR is too long for them.

    The fork server listens on a Unix socket in a folder it makes under TMPDIR; a TMPDIR of
    about 70 characters or more made every ``-j 2`` run that starts workers end with "cannot
    write or read: AF_UNIX path too long". The folder is made as multiprocessing makes its own
    (and removed as it removes it), under the first short system folder that can hold it.
    Nothing else of kcheck's moves out of TMPDIR: only the socket's folder."""
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
    # SIGTERM ends a worker at once, even inside a LIBLINEAR call: a Python handler (one a
    # module imported while the worker was prepared may have set) would wait for the call to
    # return, and the parent then stops the worker, which a stopped process never sees.
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
    # Stopped before the shutdown drops the pool's queues, whose semaphores are unlinked once
    # collected: a worker still reading its start-up data would print a traceback (below).
    stopped = _stop_workers(pool)
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        with contextlib.suppress(Exception):
            p.kill()  # stopped: SIGTERM would wait for a SIGCONT
    # Where the fork server has died (a SIGTERM to the process group), each worker's handle
    # takes it for ended (the server can no longer report its exit) and kill() sends nothing:
    # the stopped worker would stay, stopped, for ever. So each one still stopped is killed by
    # its pid (a process stopped here is not one that reused the pid of a worker).
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
    """``fn(*args)`` and its outcome sent back with the CPU seconds it took here: (True,
    value, cpu) or (False, the exception, cpu)."""
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
    """Run ``fn(*args)`` in a worker process and return its result, or raise :class:`Stopped`
    once ``time.perf_counter()`` passes ``deadline``, after killing the worker.

    A LIBLINEAR or LIBSVM call cannot be interrupted from Python; in its own process it can
    be ended. The worker gets its own copy of the arguments, sent as :class:`Background`
    sends them (the arrays' memory written to the pipe as it is), so it is meant for runs
    with a time limit only. Pickled as a process's arguments, they also stood in this process
    twice over (the pickle, and the bytes it was written from) while the worker started: with
    --time-limit and --max-rows auto the process tree went past --memory-limit by that. The
    worker ignores Ctrl-C (the parent handles it) and exits when the parent dies.
    """
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
    """``fn(*args)``, in a stoppable worker when there is a deadline (``--time-limit``), in
    this process otherwise (no copy of the data); TimeLimitReached when the deadline passes."""
    if deadline is None:
        return fn(*args)
    try:
        return cast(R, stoppable(fn, *args, deadline=deadline))
    except Stopped:
        raise TimeLimitReached() from None


class Background:
    """A call running in its own worker process while this process goes on; :meth:`result`
    waits for it and ends the worker.

    The arguments are sent before the constructor returns, their arrays' memory written to a
    pipe as it is (pickle protocol 5's out-of-band buffers), so no pickled copy of the data
    ever exists in this process: a pool's feeder thread pickled covtype-like data whole, 82 MB
    more while MultiLinear began. The worker keeps its own copy; callers start one only where
    memory has room for it.
    """

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
        """Whether the call has ended (or its worker died) within ``timeout`` seconds: then
        :meth:`result` returns or raises at once."""
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
    """Pickle ``obj`` with its arrays' memory sent as it is (protocol 5's out-of-band
    buffers), so that no pickled copy of the data exists in this process at all."""
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
    """End every pool of this process, release their semaphores, and end the fork server and
    the resource tracker; for a run about to exit.

    Waits (up to ``wait_for_start`` seconds) for a worker being started to finish starting and
    refuses new tasks from then on. Then it runs multiprocessing's exit finalizers of priority
    >= 0, which ``os._exit`` would skip: they unlink the pools' named semaphores and tell the
    resource tracker. That comes before the workers are ended, because ending them lets the
    pools' own threads drop their last references, and a finalizer that such a thread is half
    way through when the process exits leaves the tracker a semaphore to warn about.
    """
    global _closing
    # The process is exiting: say so to multiprocessing, so that a pool's queue feeder thread
    # that meets a pipe already closed by the clean-up drops the error, as it does during a
    # normal interpreter exit, instead of printing a traceback after "interrupted".
    multiprocessing.util._exiting = True  # type: ignore[attr-defined]
    locked = _LOCK.acquire(timeout=wait_for_start)
    try:
        _closing = True
        # A worker the fork server has just forked may still be reading its start-up data,
        # which names the pool's semaphores: once the finalizers below unlink them, it prints
        # a FileNotFoundError traceback (seen under load, about 1 Ctrl-C in 30). Stopped
        # first, it prints nothing; end_pool then kills it.
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
    """End the fork server and the resource tracker this process started, and reap both.

    Neither ends with this process: the fork server exits once it reads the end of its
    "alive" pipe, the tracker once every process that holds its pipe (this one, the fork
    server, each worker) has closed it, and the tracker ignores SIGINT and SIGTERM by design,
    so a terminal's Ctrl-C or SIGTERM to the process group cannot end it. After the workers
    are gone: the fork server (which holds nothing to clean up) is killed, and the tracker's
    pipe is closed so that it releases whatever is still registered with it and exits; it is
    killed if it has not within ``grace`` seconds. Python 3.10 to 3.13 keep both processes'
    pid and pipe under these names (their own ``_stop`` waits without a bound, and 3.10 and
    3.11 have none for the fork server).
    """
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
    """Wait for child ``pid`` to end (at most ``within`` seconds; None: until it does) and
    reap it; whether it has ended (also where it is no child of this process any more)."""
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
    """SIGSTOP every worker of ``pool`` (SIGKILL still ends a stopped process), and wait up
    to ``wait`` seconds until /proc shows them stopped: a signal is delivered asynchronously.
    The pids signalled."""
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
