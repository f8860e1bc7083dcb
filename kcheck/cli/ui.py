"""What the user sees on stderr while a command runs: nothing with -q, rich on a terminal,
plain lines elsewhere; and the worker thread that keeps Ctrl-C responsive."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

T = TypeVar("T")

#: Set by the command's Ui: with -q, main() prints no warnings (they are in the JSON).
state = {"quiet": False}


class Ui:
    """What the user sees on stderr: nothing with -q, rich on a terminal, plain lines otherwise."""

    def __init__(self, quiet: bool) -> None:
        state["quiet"] = quiet  # main() reports the warnings left over only without -q
        self.quiet = quiet
        self.console = Console(stderr=True, highlight=False)
        self.interactive = self.console.is_terminal and not quiet

    def info(self, message: str) -> None:
        if not self.quiet:
            self.console.print(message, markup=False, soft_wrap=True)

    def warn(self, message: str) -> None:
        if not self.quiet:
            self.console.print(f"warning: {message}", markup=False, style="yellow",
                               soft_wrap=True)

    def run(self, fn: Callable[[Callable[[str, int | None, int | None], None]], T]) -> T:
        """Run ``fn(progress)`` in a worker thread, so Ctrl-C is seen at once.

        A SIGINT that arrives while LIBLINEAR runs in the main thread is raised inside the
        binding's print callback, where ctypes swallows it. With the solver in a worker, the
        main thread only waits, and the signal interrupts the wait.
        """
        box: dict[str, Any] = {}
        if not self.interactive:
            # Off a terminal (logs, CI), progress would only be noise; the result says it all.
            return in_worker(lambda: fn(lambda stage, done, total: None), box)
        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        task = progress.add_task("starting", total=None, count="")
        last = [""]

        def report(stage: str, done: int | None, total: int | None) -> None:
            count = "" if total is None else f"{done or 0}/{total}"
            if stage != last[0]:
                # A new stage restarts the clock, so the ETA is not averaged over earlier ones.
                last[0] = stage
                progress.reset(task, total=total, completed=done or 0, description=stage,
                               count=count)
            else:
                progress.update(task, completed=done or 0, total=total, count=count)

        with progress:
            return in_worker(lambda: fn(report), box)


def in_worker(fn: Callable[[], T], box: dict[str, Any]) -> T:
    """Run ``fn`` in a daemon thread while the main thread waits in short, interruptible joins."""

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    worker = threading.Thread(target=target, name="kcheck-worker", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    if "error" in box:
        raise box["error"]
    return box["value"]
