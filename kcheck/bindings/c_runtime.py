"""What the C libraries share with the whole process: ``rand()``, OpenMP threads, stderr, and
the threads that run their calls side by side or apart from the main thread.

LIBLINEAR and LIBSVM draw CV folds from the C library's ``rand()``, LIBSVM's PyPI build runs
OpenMP loops, and both report some failures with ``fprintf(stderr)`` and others with a bare -1.
:mod:`kcheck.bindings.engines` calls these around the binding calls that need them.
"""

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
    """Seed the C ``rand()`` that LIBLINEAR/LIBSVM use for CV folds (process-wide state),
    once no call an interrupt left running can draw from it (:func:`interruptible`)."""
    wait_for_left_calls()
    _libc.srand(ctypes.c_uint(c_seed(seed)))


def c_rand() -> int:
    """The next C ``rand()``, the very draw LIBSVM would make next: kcheck.bindings.engines draws a
    CV's folds with it, in LIBSVM's order, to train the folds side by side."""
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

#: How often the main thread looks for a signal while a binding call runs apart from it (a
#: signal delivered to the call's thread wakes no wait in the main thread).
_WAIT_SECONDS = 0.05
#: The binding calls an interrupt left running (:func:`interruptible`): each one's event is
#: set once its call has returned.
_left_running: set[threading.Event] = set()
_left_lock = threading.Lock()


def interruptible(call: Callable[[], R]) -> R:
    """``call()``, one LIBLINEAR or LIBSVM call that runs to its end once begun, made
    interruptible where a Ctrl-C is Python's to handle: in the main thread, with a Python
    SIGINT handler (``kcheck.check`` in a script or a notebook).

    Python runs a signal handler in the main thread only, between two bytecodes, so a Ctrl-C
    that came while the main thread was inside such a call took effect once the call
    returned: a LIBLINEAR C search on 20,000 rows, up to 20 s later. So the call runs in a
    thread of its own (the bindings release the GIL) while the main thread waits in short
    waits, where the KeyboardInterrupt is raised at once. The call itself cannot be stopped:
    it goes on to its end in its thread (``call`` holds what it reads), and every binding
    call after it, and every seeding of ``rand()``, waits until it has returned
    (:func:`wait_for_left_calls`), so that it never draws from ``rand()`` or adds to LIBSVM's
    iteration count beside them. Elsewhere (the command line runs its pipeline in a thread of
    its own; a worker process ignores SIGINT), ``call()`` runs in the calling thread. The
    thread gets the caller's OpenMP thread count (a per-thread setting).
    """
    wait_for_left_calls()
    if threading.current_thread() is not threading.main_thread() or not callable(
        signal.getsignal(signal.SIGINT)
    ):
        return call()
    threads = None if _gomp is None else int(_gomp.omp_get_max_threads())
    box: dict[str, Any] = {}
    done = threading.Event()
    # Under _left_lock: whether the thread has begun the call, or the caller has left before
    # it did (then it never will).
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
    """Wait until every binding call an interrupt left running has returned (at once where
    none is): what comes next must not run beside it."""
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
    """Send file descriptor 2 to a temporary file; the yielded list gets its text afterwards.

    The model loaders report problems with C's ``fprintf(stderr, ...)``, below Python's
    ``sys.stderr``, so only redirecting the descriptor keeps that text off the terminal.
    """
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
    """With class weights, a CV fold (or a C search's fold) that lacks a weighted class makes
    both libraries print a warning with ``fprintf(stderr)``: keep it off the user's terminal."""
    return captured_stderr() if weights else contextlib.nullcontext()


def save_failed(path: str, library: str) -> OSError:
    """The C libraries' save returns -1 without a reason; a full disk is the usual one, so
    look for it. An OSError lets the caller name the real file, not a temporary one."""
    try:
        full = os.statvfs(os.path.dirname(os.path.abspath(path))).f_bavail == 0
    except OSError:
        full = False
    if full:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return OSError(errno.EIO, f"{library} could not write the model")


def side_by_side(fn: Callable[[int], None], count: int, workers: int) -> None:
    """``fn(0)`` ... ``fn(count - 1)`` in ``workers`` threads of this process (in turn where
    one): the folds of a CV, whose C calls release the GIL (kcheck.bindings.engines, exact mode's
    repeats). The first exception is raised here. An interrupted caller does not wait for the
    calls under way: each holds what it reads, and the CLI ends the process."""
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
