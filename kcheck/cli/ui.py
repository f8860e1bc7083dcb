"""What the user sees on stderr while a command runs: nothing with -q, rich on a terminal,
plain lines elsewhere; and the worker thread that keeps Ctrl-C responsive."""

from __future__ import annotations

import contextlib
import io
import os
import re
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from rich.console import Console, RenderableType
from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, Task, TextColumn
from rich.table import Column
from rich.text import Text

from kcheck.defaults import Event, no_progress
from kcheck.defaults import Progress as Report

T = TypeVar("T")

#: Off a terminal without COLUMNS, layout width: the tables fit it and no line is padded.
LOG_WIDTH = 100


#: What the core's progress counts, by stage: a count is never shown without its unit.
def count_text(done: int | None, total: int | None, unit: str | None) -> str:
    """'3/12 clusters', in the stage's unit (``Event.unit``); nothing without a total."""
    if total is None:
        return ""
    return f"{done or 0}/{total} {unit or 'steps'}"


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
    """Seconds left from the counts' rate, counted down from the last count: a late count stops the
    ETA at 0 and then drops it, rather than showing "ETA 0:35" for minutes."""
    if task.total is None or not task.completed or task.time_remaining is None:
        return None
    samples = getattr(task, "_progress", None)
    since = task.get_time() - samples[-1].timestamp if samples else 0.0
    left = task.time_remaining - since
    return left if left > 0 else None


#: Cells of a progress line besides name, count and time: spinner, column gaps, a minimal bar.
PROGRESS_RESERVED = 11


class DescriptionColumn(ProgressColumn):
    """The stage's name, cut with an ellipsis to fit the terminal: count and times are never cut,
    and the line never wraps (a wrapped live line leaves pieces behind)."""

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
        #: When a log line was last written (time.perf_counter()), for StageLog's PULSE_SECONDS.
        self.logged_at = time.perf_counter()

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
        self.logged_at = time.perf_counter()

    def note(self, message: str, style: str | None = None) -> None:
        """One line in a log (greppable); on a terminal wrapped at word boundaries."""
        if not self.quiet:
            self.console.print(
                message, markup=False, style=style, soft_wrap=not self.console.is_terminal
            )
            self.logged_at = time.perf_counter()

    def log_line(self, message: str) -> None:
        """A progress line in a log, laid out for its width (long paths folded, as tables do)."""
        if not self.quiet:
            text = textwrap.fill(
                message,
                self.width,
                subsequent_indent="  ",
                break_on_hyphens=False,
            )
            self.console.file.write(text + "\n")
            self.console.file.flush()
            self.logged_at = time.perf_counter()

    def batch_log(self) -> contextlib.AbstractContextManager[Report | None]:
        """A batch's progress in a log (:class:`BatchLog`): a line as each data set starts and one
        every PULSE_SECONDS while it runs; None with -q. The ``with`` block is the batch."""
        if self.quiet:
            return contextlib.nullcontext(None)
        return _logging_batch(BatchLog(self.log_line, last_line=lambda: self.logged_at))

    def info(self, message: str) -> None:
        self.note(message)

    def warn(self, message: str) -> None:
        """On a terminal wrapped at word boundaries; in a log laid out like a stage line."""
        if self.console.is_terminal:
            self.note(f"warning: {message}", style="yellow")
        else:
            self.log_line(f"warning: {message}")

    def run(self, fn: Callable[[Report], T]) -> T:
        """Run ``fn(progress)`` in a worker thread so Ctrl-C is seen at once (during LIBLINEAR in
        the main thread, ctypes swallows it in the print callback)."""
        box: dict[str, Any] = {}
        if self.quiet:
            return in_worker(lambda: fn(no_progress), box)
        if not self.interactive:
            # Off a terminal: a line as each stage starts and ends, one every PULSE_SECONDS; no bar,
            # carriage return or colour. No "done" after an error or Ctrl-C.
            log = StageLog(self.log_line, last_line=lambda: self.logged_at)
            with ticking(log.tick):
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
            count = count_text(done, total, event.unit)
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


#: In a log, a running stage writes a line after this much silence: one a minute at least.
PULSE_SECONDS = 30.0

#: How often the log checks the clock between events (one long LIBLINEAR call still gets lines).
TICK_SECONDS = 1.0


def running_text(count: str, elapsed: float, done: int | None, total: int | None) -> str:
    """A log's line for a running stage: ``still running, 40/110 grid points, ETA 7:00``."""
    parts = ["still running"] + ([count] if count else []) + [f"elapsed {_clock(elapsed)}"]
    if done and total and total > done and elapsed > 0:
        parts.append(f"ETA {_clock(elapsed / done * (total - done))}")
    return ", ".join(parts)


class StageLog:
    """Progress as log lines: ``kcheck: STAGE`` (with predicted seconds where planned) as a stage
    starts; ``kcheck: STAGE: done in N.Ns`` (plus an event's ``note``) when the next starts or the
    run ends; ``kcheck: STAGE: skipped (REASON) after N.Ns`` where an event says it ``ended``.
    Counts are the terminal's, except a ``still running`` line after :data:`PULSE_SECONDS` of
    silence (checked at each event and :meth:`tick`).

    ``last_line``: when any line was last written to the log (default: this one's lines). Events and
    ticks may come from different threads."""

    def __init__(
        self, write: Callable[[str], None], last_line: Callable[[], float] | None = None
    ) -> None:
        self.write = write
        self.stage: str | None = None
        self.started = 0.0
        self.note: str | None = None
        self.done: int | None = None
        self.total: int | None = None
        self.unit: str | None = None
        self.written = time.perf_counter()
        self.last_line = last_line
        self.lock = threading.RLock()

    def _line(self, text: str) -> None:
        self.write(text)
        self.written = time.perf_counter()

    def report(self, event: Event) -> None:
        with self.lock:
            self._report(event)

    def _report(self, event: Event) -> None:
        if event.ended is not None:
            if event.stage == self.stage:
                took = time.perf_counter() - self.started
                self._line(f"kcheck: {self.stage}: {event.ended} after {took:.1f}s")
                self.stage = None
            return
        if event.stage == self.stage:
            self.note = event.note or self.note
            self.done, self.total, self.unit = event.done, event.total, event.unit
            if event.line is None:
                # An event's own line may be written beside this log; the next event or tick says
                # the stage.
                self._pulse()
            return
        self._close()
        self.stage, self.started, self.note = event.stage, time.perf_counter(), event.note
        self.done, self.total, self.unit = event.done, event.total, event.unit
        predicted = event.predicted_seconds
        about = f" (about {predicted:.0f}s predicted)" if predicted and predicted >= 1 else ""
        self._line(f"kcheck: {event.stage}{about}")

    def tick(self) -> None:
        """A look at the clock between events: the line of a stage that runs on, if due."""
        with self.lock:
            self._pulse()

    def _pulse(self) -> None:
        if self.stage is None:
            return
        now = time.perf_counter()
        last = max(self.written, self.last_line()) if self.last_line else self.written
        if now - last < PULSE_SECONDS:
            return
        count = count_text(self.done, self.total, self.unit)
        running = running_text(count, now - self.started, self.done, self.total)
        self._line(f"kcheck: {self.stage}: {running}")

    def close(self) -> None:
        """The end of the stage under way, if any."""
        with self.lock:
            self._close()

    def _close(self) -> None:
        if self.stage is not None:
            took = time.perf_counter() - self.started
            note = f" ({self.note})" if self.note else ""
            self._line(f"kcheck: {self.stage}: done in {took:.1f}s{note}")
            self.stage = None


class BatchLog:
    """A batch's progress as log lines: ``kcheck: [2/5] heart_scale: checking`` as a data set starts
    (one at a time), ``kcheck: 1/5 done; checking a, b`` as those in flight change, a line per batch
    step (``connecting to tcp://...``), and after :data:`PULSE_SECONDS` of silence what runs now
    with its time since the data set started. A check's own stages are not written. ``last_line``:
    as :class:`StageLog`."""

    def __init__(
        self, write: Callable[[str], None], last_line: Callable[[], float] | None = None
    ) -> None:
        self.log = StageLog(write, last_line)
        self.lock = self.log.lock
        #: The last line said of the batch, and the data set being checked (one at a time).
        self.said: str | None = None
        self.checking: str | None = None

    def report(self, event: Event) -> None:
        with self.lock:
            self._report(event)

    def _say(self, text: str, stage: str) -> None:
        """A new line of the batch; the pulse counts from here."""
        log = self.log
        if text != self.said:
            self.said = text
            log.stage, log.started, log.done, log.total = stage, time.perf_counter(), None, None
            log._line(f"kcheck: {text}")

    def _report(self, event: Event) -> None:
        from kcheck.batch.progress import DATA_SETS, FINISHING

        log = self.log
        if event.unit == DATA_SETS:
            if event.stage == FINISHING:
                log.stage, self.checking = None, None  # the table follows
            elif event.line is None:  # one data set starts
                self.checking = event.stage
                self._say(f"{event.stage}: checking", event.stage)
            else:  # the data sets in flight, reported again and again while they run
                self._say(event.line, event.stage)
                log._pulse()
            return
        if self.checking is not None and event.stage.startswith(self.checking + ": "):
            # A stage of the data set being checked: the pulse says the latest.
            log.stage, log.done, log.total, log.unit = (
                event.stage,
                event.done,
                event.total,
                event.unit,
            )
        else:
            # A batch step: "comparing saved results with the data: NAME" is one line per data set.
            self._say(event.stage.split(": ", 1)[0], event.stage)
            log.stage, log.done, log.total, log.unit = (
                event.stage,
                event.done,
                event.total,
                event.unit,
            )
        log._pulse()

    def tick(self) -> None:
        self.log.tick()


class _Ticker:
    """Calls ``tick`` every :data:`TICK_SECONDS` in a daemon thread until stopped."""

    def __init__(self, tick: Callable[[], None]) -> None:
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(tick,), daemon=True)

    def _run(self, tick: Callable[[], None]) -> None:
        while not self.stopped.wait(TICK_SECONDS):
            tick()

    def __enter__(self) -> _Ticker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(TICK_SECONDS)


def ticking(tick: Callable[[], None]) -> _Ticker:
    """``with ticking(log.tick):`` the log looks at the clock while the block runs."""
    return _Ticker(tick)


@contextlib.contextmanager
def _logging_batch(log: BatchLog) -> Iterator[Report]:
    with ticking(log.tick):
        yield log.report


def in_worker(fn: Callable[[], T], box: dict[str, Any]) -> T:
    """Run ``fn`` in a daemon thread while the main thread waits on an event in short, interruptible
    waits (not ``Thread.join``: an interrupted join marks a running thread ended, Python 3.11)."""
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
