"""Worker processes, started one way everywhere.

Processes, not threads, wherever LIBLINEAR or LIBSVM cross-validate: both draw their folds from
the process-wide C ``rand()``, so threads would make results depend on timing. Workers come
from a fork server (never a plain fork: the parent runs threads, and forking those is unsafe),
ignore Ctrl-C (the parent handles it and ends them), and exit when the parent dies, since the
CLI ends an interrupted run with ``os._exit`` and a pool worker would otherwise wait forever.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def process_pool(
    workers: int,
    preload: Sequence[str],
    initializer: Callable[..., None] | None = None,
    initargs: tuple[Any, ...] = (),
) -> ProcessPoolExecutor:
    """A pool whose workers import ``preload`` once (in the fork server) and run ``initializer``."""
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        ctx.set_forkserver_preload(list(preload))
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(initializer, initargs),
    )


def _init_worker(initializer: Callable[..., None] | None, initargs: tuple[Any, ...]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
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
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        with contextlib.suppress(Exception):
            p.terminate()
    deadline = time.monotonic() + grace
    for p in processes:
        with contextlib.suppress(Exception):
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
