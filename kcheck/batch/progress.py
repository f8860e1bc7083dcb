"""What a batch reports while it runs, as typed events: a display reads their fields, and a
plain ``progress(stage, done, total)`` callback gets the same report as one line of text."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kcheck.defaults import Progress

#: The ``unit`` of a report whose ``done`` and ``total`` count data sets.
DATA_SETS = "data sets"
#: The stage shown while no check is running any more.
FINISHING = "finishing"


@dataclass(frozen=True)
class BatchProgress:
    """One progress report of a batch.

    ``stage`` is what is happening, as a display shows it (``[2/5] heart_scale: grid search``,
    ``checking a, b``, ``finishing``). ``unit`` names what ``done`` of ``total`` count:
    :data:`DATA_SETS`, or None where they count the stage's own steps (a check's clusters or
    grid points, named as for a single check). ``text`` is the report as one line for a plain
    :data:`~kcheck.defaults.Progress` callback (``2/5 done; checking a, b``, ``done``).
    """

    stage: str
    unit: str | None
    done: int | None
    total: int | None
    text: str


#: Where a batch sends its reports.
BatchReport = Callable[[BatchProgress], None]


def step(stage: str, done: int | None = None, total: int | None = None) -> BatchProgress:
    """A stage that counts its own steps (``done`` of ``total``), or nothing (None)."""
    return BatchProgress(stage, None, done, total, stage)


def starting(label: str, index: int, n: int) -> BatchProgress:
    """The ``index``-th (from 0) of ``n`` data sets checked one at a time begins; ``label`` is
    its ``[i/n] name``."""
    return BatchProgress(label, DATA_SETS, index, n, label)


def in_flight(names: Sequence[str], finished: int, n: int) -> BatchProgress:
    """Several checks at once: how many are done, and the names of those running."""
    if not names:
        return BatchProgress(FINISHING, DATA_SETS, finished, n, f"{finished}/{n} done")
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    stage = f"checking {', '.join(names[:3])}{more}"
    return BatchProgress(stage, DATA_SETS, finished, n, f"{finished}/{n} done; {stage}")


def all_done(n: int) -> BatchProgress:
    """Every one of ``n`` data sets has its line."""
    return BatchProgress(FINISHING, DATA_SETS, n, n, "done")


def reporter(progress: Progress | None, events: BatchReport | None) -> BatchReport:
    """One report function that feeds both kinds of callback a caller may give."""

    def report(event: BatchProgress) -> None:
        if events is not None:
            events(event)
        if progress is not None:
            progress(event.text, event.done, event.total)

    return report


def no_report(event: BatchProgress) -> None:
    """The report function of a caller that shows no progress."""
    return None
