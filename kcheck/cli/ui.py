"""What the user sees on stderr while a command runs: nothing with -q, rich on a terminal,
plain lines elsewhere; and the worker thread that keeps Ctrl-C responsive."""

from __future__ import annotations

import io
import os
import re
import textwrap
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from rich.console import Console, RenderableType
from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, Task, TextColumn
from rich.table import Column
from rich.text import Text

from kcheck.defaults import Event, no_progress
from kcheck.defaults import Progress as Report

T = TypeVar("T")

#: Off a terminal (a log, CI) without COLUMNS, text is laid out for this width: the tables fit
#: it in full, and no line is padded.
LOG_WIDTH = 100

#: What the core's progress counts, by stage: a count is never shown without its unit.
UNITS = (
    ("MultiLinear", "clusters"),
    ("repeats on all rows", "repeats"),
    ("exact RBF comparison", "CV runs"),
    ("RBF SVM: training", "trainings"),
    ("grid search", "grid points"),
    ("comparing saved results", "results"),
)


def count_text(stage: str, done: int | None, total: int | None) -> str:
    """'3/12 clusters'; nothing where the core gives no total."""
    if total is None:
        return ""
    unit = next((u for key, u in UNITS if key in stage), "steps")
    return f"{done or 0}/{total} {unit}"


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class TimeColumn(ProgressColumn):
    """One labelled time column: the stage's elapsed time, and its ETA where one is known."""

    def render(self, task: Task) -> Text:
        text = f"elapsed {_clock(task.elapsed or 0.0)}"
        left = eta(task)
        if left is not None:
            text += f", ETA {_clock(left)}"
        return Text(text, style="progress.elapsed")


def eta(task: Task) -> float | None:
    """Seconds left, from the rate of the counts so far, counted down from the last count: a
    count that is late stops the ETA at 0 and then drops it (elapsed time alone), rather than
    showing the same "ETA 0:35" for minutes."""
    if task.total is None or not task.completed or task.time_remaining is None:
        return None
    samples = getattr(task, "_progress", None)
    since = task.get_time() - samples[-1].timestamp if samples else 0.0
    left = task.time_remaining - since
    return left if left > 0 else None


#: Cells of a progress line besides the name, the count and the time: the spinner, the
#: spaces between the five columns, and a bar of at least a few cells.
PROGRESS_RESERVED = 11


class DescriptionColumn(ProgressColumn):
    """The stage's name, cut with an ellipsis where the line would not fit the terminal: the
    count and the times are never cut, and the line never wraps (a wrapped live line leaves
    its pieces behind on the screen)."""

    def __init__(self, console: Console) -> None:
        super().__init__(table_column=Column(no_wrap=True))
        self.console = console

    def render(self, task: Task) -> Text:
        others = len(str(task.fields.get("count", ""))) + len(TimeColumn().render(task))
        text = Text(task.description)
        room = self.console.width - PROGRESS_RESERVED - others
        text.truncate(max(12, room), overflow="ellipsis")
        return text


def new_progress(console: Console, **kwargs: Any) -> Progress:
    return Progress(
        SpinnerColumn(),
        DescriptionColumn(console),
        BarColumn(bar_width=None, table_column=Column(ratio=1)),
        TextColumn("{task.fields[count]}", table_column=Column(no_wrap=True)),
        TimeColumn(table_column=Column(no_wrap=True)),
        console=console,
        transient=True,
        expand=True,
        **kwargs,
    )


#: Set by the command's Ui: with -q, main() prints no warnings (they are in the JSON).
state = {"quiet": False}


class Ui:
    """What the user sees on stderr: nothing with -q, rich on a terminal, plain lines otherwise."""

    def __init__(self, quiet: bool) -> None:
        state["quiet"] = quiet  # main() reports the warnings left over only without -q
        self.quiet = quiet
        self.console = Console(stderr=True, highlight=False)
        self.interactive = self.console.is_terminal and not quiet

    @property
    def width(self) -> int:
        """The width to lay text out for: the terminal's, else COLUMNS, else LOG_WIDTH."""
        if self.console.is_terminal:
            return self.console.width
        columns = os.environ.get("COLUMNS", "")
        return int(columns) if columns.isdigit() and int(columns) > 0 else LOG_WIDTH

    def show(self, *items: RenderableType) -> None:
        """Print tables and text: styled on a terminal; plain and unpadded elsewhere."""
        if self.quiet:
            return
        if self.console.is_terminal:
            for item in items:
                self.console.print(item)
            return
        buffer = io.StringIO()
        plain = Console(file=buffer, width=self.width, color_system=None, highlight=False)
        for item in items:
            plain.print(item)
        text = re.sub(r"[ \t]+$", "", buffer.getvalue(), flags=re.MULTILINE)
        self.console.file.write(text)
        self.console.file.flush()

    def note(self, message: str, style: str | None = None) -> None:
        """One line in a log (greppable); wrapped at word boundaries on a terminal, where the
        terminal's own wrapping would cut words."""
        if not self.quiet:
            self.console.print(
                message, markup=False, style=style, soft_wrap=not self.console.is_terminal
            )

    def log_line(self, message: str) -> None:
        """A progress line in a log, laid out for the log's width (a path longer than it is
        folded, as the tables fold one)."""
        if not self.quiet:
            text = textwrap.fill(
                message,
                self.width,
                subsequent_indent="  ",
                break_on_hyphens=False,
            )
            self.console.file.write(text + "\n")
            self.console.file.flush()

    def info(self, message: str) -> None:
        self.note(message)

    def warn(self, message: str) -> None:
        """On a terminal, wrapped at word boundaries; in a log, laid out for the log's width
        like a stage line (a warning ran to 150-190 characters where the table wraps at 100)."""
        if self.console.is_terminal:
            self.note(f"warning: {message}", style="yellow")
        else:
            self.log_line(f"warning: {message}")

    def run(self, fn: Callable[[Report], T]) -> T:
        """Run ``fn(progress)`` in a worker thread, so Ctrl-C is seen at once.

        A SIGINT that arrives while LIBLINEAR runs in the main thread is raised inside the
        binding's print callback, where ctypes swallows it. With the solver in a worker, the
        main thread only waits, and the signal interrupts the wait.
        """
        box: dict[str, Any] = {}
        if self.quiet:
            return in_worker(lambda: fn(no_progress), box)
        if not self.interactive:
            # Off a terminal (logs, CI): a line when each stage starts and when it ends, so a
            # long run is never silent; no bar, no carriage return, no colour.
            # A stage that an error or Ctrl-C ends gets no "done" line: the error says it.
            log = StageLog(self.log_line)
            result = in_worker(lambda: fn(log.report), box)
            log.close()
            return result
        progress = new_progress(self.console)
        task = progress.add_task("starting", total=None, count="")
        last = [""]

        def report(event: Event) -> None:
            if event.ended is not None:
                return  # the next stage's start moves the bar on
            stage, done, total = event.stage, event.done, event.total
            count = count_text(stage, done, total)
            if stage != last[0]:
                # A new stage restarts the clock, so the ETA is not averaged over earlier ones.
                last[0] = stage
                progress.reset(
                    task, total=total, completed=done or 0, description=stage, count=count
                )
            else:
                progress.update(task, completed=done or 0, total=total, count=count)

        with progress:
            return in_worker(lambda: fn(report), box)


class StageLog:
    """Progress as log lines: ``kcheck: STAGE`` (with its predicted seconds where the plan has
    them) when a stage starts, ``kcheck: STAGE: done in N.Ns`` when the next one starts or the
    run ends (with the stage's ``note`` where an event gave one: ``done in 4.6s (settled
    after 1 of 2 repeats)``), or ``kcheck: STAGE: skipped (REASON) after N.Ns`` where it ended
    without doing its work (an event's ``ended``). Counts within a stage are left to the
    terminal's bar."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write
        self.stage: str | None = None
        self.started = 0.0
        self.note: str | None = None

    def report(self, event: Event) -> None:
        if event.ended is not None:
            if event.stage == self.stage:
                took = time.perf_counter() - self.started
                self.write(f"kcheck: {self.stage}: {event.ended} after {took:.1f}s")
                self.stage = None
            return
        if event.stage == self.stage:
            self.note = event.note or self.note
            return
        self.close()
        self.stage, self.started, self.note = event.stage, time.perf_counter(), event.note
        predicted = event.predicted_seconds
        about = f" (about {predicted:.0f}s predicted)" if predicted and predicted >= 1 else ""
        self.write(f"kcheck: {event.stage}{about}")

    def close(self) -> None:
        """The end of the stage under way, if any."""
        if self.stage is not None:
            took = time.perf_counter() - self.started
            note = f" ({self.note})" if self.note else ""
            self.write(f"kcheck: {self.stage}: done in {took:.1f}s{note}")
            self.stage = None


def in_worker(fn: Callable[[], T], box: dict[str, Any]) -> T:
    """Run ``fn`` in a daemon thread while the main thread waits in short, interruptible waits.

    It waits on an event the thread sets, not in ``Thread.join``: a KeyboardInterrupt inside
    join() marks a thread that still runs as ended (Python 3.11).
    """
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e
        finally:
            done.set()

    worker = threading.Thread(target=target, name="kcheck-worker", daemon=True)
    worker.start()
    while not done.wait(0.1):
        pass
    if "error" in box:
        raise box["error"]
    return cast(T, box["value"])
