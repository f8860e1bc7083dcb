"""What the C libraries share with the whole process: ``rand()``, OpenMP threads, stderr, and
the threads that run their calls side by side.

LIBLINEAR and LIBSVM draw CV folds from the C library's ``rand()``, LIBSVM's PyPI build runs
OpenMP loops, and both report some failures with ``fprintf(stderr)`` and others with a bare -1.
:mod:`kcheck.engines` calls these around the binding calls that need them.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kcheck.seeds import c_seed

__all__ = [
    "c_rand",
    "captured_stderr",
    "library_reason",
    "one_omp_thread",
    "save_failed",
    "seed_c_rand",
    "side_by_side",
    "weights_quiet",
]

_libc = ctypes.CDLL(None)
_libc.srand.argtypes = [ctypes.c_uint]
_libc.srand.restype = None
_libc.rand.argtypes = []
_libc.rand.restype = ctypes.c_int


def seed_c_rand(seed: int) -> None:
    """Seed the C ``rand()`` that LIBLINEAR/LIBSVM use for CV folds (process-wide state)."""
    _libc.srand(ctypes.c_uint(c_seed(seed)))


def c_rand() -> int:
    """The next C ``rand()``, the very draw LIBSVM would make next: kcheck.engines draws a
    CV's folds with it, in LIBSVM's order, to train the folds side by side."""
    return int(_libc.rand())


def _load_gomp() -> ctypes.CDLL | None:
    try:
        gomp = ctypes.CDLL("libgomp.so.1")
    except OSError:  # a build without OpenMP
        return None
    gomp.omp_set_num_threads.argtypes = [ctypes.c_int]
    gomp.omp_set_num_threads.restype = None
    return gomp


_gomp = _load_gomp()


def one_omp_thread() -> None:
    """Limit LIBSVM's OpenMP loops to the calling thread (the setting is per thread)."""
    if _gomp is not None:
        _gomp.omp_set_num_threads(1)


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
    one): the folds of a CV, whose C calls release the GIL (kcheck.engines, exact mode's
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
