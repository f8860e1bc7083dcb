"""What the C libraries share with the process: ``rand()`` (CV folds), OpenMP threads, stderr
(``fprintf`` failures), and the threads running their calls side by side or off the main thread."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

from kcheck.seeds import c_seed

__all__ = [
    "c_rand",
    "captured_stderr",
    "interruptible",
    "library_reason",
    "one_omp_thread",
    "save_failed",
    "seed_c_rand",
    "side_by_side",
    "wait_for_left_calls",
    "weights_quiet",
]

R = TypeVar("R")

_libc = ctypes.CDLL(None)
_libc.srand.argtypes = [ctypes.c_uint]
_libc.srand.restype = None
_libc.rand.argtypes = []
_libc.rand.restype = ctypes.c_int


def seed_c_rand(seed: int) -> None:
    """Seed the process-wide C ``rand()`` (CV folds), once no interrupted call can draw from it."""
    wait_for_left_calls()
    _libc.srand(ctypes.c_uint(c_seed(seed)))


def c_rand() -> int:
    """The next C ``rand()``, LIBSVM's next draw: engines draws CV folds with it to split them."""
    return int(_libc.rand())


def _load_gomp() -> ctypes.CDLL | None:
    try:
        gomp = ctypes.CDLL("libgomp.so.1")
    except OSError:  # a build without OpenMP
        return None
    gomp.omp_set_num_threads.argtypes = [ctypes.c_int]
    gomp.omp_set_num_threads.restype = None
    gomp.omp_get_max_threads.argtypes = []
    gomp.omp_get_max_threads.restype = ctypes.c_int
    return gomp


_gomp = _load_gomp()


def one_omp_thread() -> None:
    """Limit LIBSVM's OpenMP loops to the calling thread (the setting is per thread)."""
    if _gomp is not None:
        _gomp.omp_set_num_threads(1)


# --- a binding call apart from the main thread, so that Ctrl-C is seen at once ---------------

#: How often the main thread checks for signals while a call runs in another thread.
_WAIT_SECONDS = 0.05
#: Calls an interrupt left running (:func:`interruptible`); each event is set when its call returns.
_left_running: set[threading.Event] = set()
_left_lock = threading.Lock()


def interruptible(call: Callable[[], R]) -> R:
    """``call()``, one LIBLINEAR or LIBSVM call that runs to its end once begun, made interruptible
    where Ctrl-C is Python's to handle (main thread, Python SIGINT handler: ``kcheck.check`` in a
    script or notebook).

    Python handles signals between bytecodes of the main thread, so a Ctrl-C inside a C call waited
    for it (up to 20 s). So the call runs in its own thread (the GIL is released) while the main
    thread waits in short waits. The call cannot be stopped: it runs to its end, and later binding
    calls and ``rand()`` seedings wait for it (:func:`wait_for_left_calls`), so it never draws from
    ``rand()`` or adds iterations beside them. Elsewhere (the CLI's pipeline thread, workers
    ignoring SIGINT), ``call()`` runs in the calling thread. The thread gets the caller's OpenMP
    thread count."""
    wait_for_left_calls()
    if threading.current_thread() is not threading.main_thread() or not callable(
        signal.getsignal(signal.SIGINT)
    ):
        return call()
    threads = None if _gomp is None else int(_gomp.omp_get_max_threads())
    box: dict[str, Any] = {}
    done = threading.Event()
    # Under _left_lock: whether the thread began the call, or the caller left first.
    begun, dropped = [False], [False]

    def run() -> None:
        with _left_lock:
            if dropped[0]:
                return
            begun[0] = True
        try:
            if _gomp is not None and threads is not None:
                _gomp.omp_set_num_threads(threads)
            box["value"] = call()
        except BaseException as e:  # noqa: BLE001 - raised again in the calling thread
            box["error"] = e
        finally:
            with _left_lock:
                done.set()
                _left_running.discard(done)

    try:
        threading.Thread(target=run, name="kcheck-binding-call", daemon=True).start()
        while not done.wait(_WAIT_SECONDS):
            pass
    except BaseException:  # an interrupt (or no thread could start)
        with _left_lock:
            if not begun[0]:
                dropped[0] = True
            elif not done.is_set():
                _left_running.add(done)
        raise
    if "error" in box:
        raise box["error"]
    return cast(R, box["value"])


def wait_for_left_calls() -> None:
    """Wait until every call an interrupt left running has returned; nothing may run beside it."""
    while True:
        with _left_lock:
            pending = next(iter(_left_running), None)
        if pending is None:
            return
        while not pending.wait(_WAIT_SECONDS):
            pass
        with _left_lock:
            _left_running.discard(pending)


_stderr_lock = threading.Lock()


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """Send file descriptor 2 to a temporary file; the yielded list gets its text afterwards. The
    loaders ``fprintf(stderr)`` below ``sys.stderr``, so only the descriptor can be redirected."""
    text: list[str] = []
    with _stderr_lock, tempfile.TemporaryFile() as tmp:
        try:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            saved = os.dup(2)
        except OSError:  # no usable stderr: nothing to protect
            yield text
            return
        try:
            os.dup2(tmp.fileno(), 2)
            yield text
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text.append(tmp.read(4096).decode("utf-8", "replace"))


def library_reason(captured: list[str]) -> str:
    """The first two lines a library printed, as `` (reason)`` for an error message."""
    lines = [ln.strip() for ln in "".join(captured).splitlines() if ln.strip()]
    return f" ({'; '.join(lines[:2])})" if lines else ""


def weights_quiet(weights: str) -> contextlib.AbstractContextManager[Any]:
    """With class weights a fold lacking a weighted class warns on stderr: keep it off screen."""
    return captured_stderr() if weights else contextlib.nullcontext()


def save_failed(path: str, library: str) -> OSError:
    """The save's bare -1 is usually a full disk: check; an OSError names the real file."""
    try:
        full = os.statvfs(os.path.dirname(os.path.abspath(path))).f_bavail == 0
    except OSError:
        full = False
    if full:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return OSError(errno.EIO, f"{library} could not write the model")


def side_by_side(fn: Callable[[int], None], count: int, workers: int) -> None:
    """``fn(0)`` ... ``fn(count - 1)`` in ``workers`` threads (in turn where one): a CV's folds,
    whose C calls release the GIL. The first exception is raised here; an interrupted caller does
    not wait (each call holds what it reads; the CLI ends the process)."""
    if workers < 2:
        for i in range(count):
            fn(i)
        return
    pool = ThreadPoolExecutor(max_workers=min(workers, count))
    try:
        for done in [pool.submit(fn, i) for i in range(count)]:
            done.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
