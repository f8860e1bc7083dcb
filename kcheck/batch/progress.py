"""What a batch reports while it runs, as typed events (kcheck.defaults.Event)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kcheck.defaults import Event, Progress

#: The ``unit`` of a report whose ``done`` and ``total`` count data sets.
DATA_SETS = "data sets"
#: The stage shown while no check is running any more.
FINISHING = "finishing"


#: A batch's report is the one progress event (kcheck.defaults.Event): ``stage`` as displayed
#: (``[2/5] heart_scale: grid search``); ``unit``: :data:`DATA_SETS` where counts are data sets,
#: None for the stage's own steps; ``text``: a log's line (``2/5 done; checking a, b``).
BatchProgress = Event


#: Where a batch sends its reports.
BatchReport = Callable[[BatchProgress], None]


def step(
    stage: str, done: int | None = None, total: int | None = None, unit: str | None = None
) -> BatchProgress:
    """A stage that counts its own steps (``done`` of ``total``, in ``unit``), or nothing."""
    return Event(stage, done, total, unit)


def starting(label: str, index: int, n: int) -> BatchProgress:
    """The ``index``-th (from 0) of ``n`` sequential data sets begins; ``label``: ``[i/n] name``."""
    return Event(label, index, n, DATA_SETS)


def in_flight(names: Sequence[str], finished: int, n: int) -> BatchProgress:
    """Several checks at once: how many are done, and the names of those running."""
    if not names:
        return Event(FINISHING, finished, n, DATA_SETS, line=f"{finished}/{n} done")
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    stage = f"checking {', '.join(names[:3])}{more}"
    return Event(stage, finished, n, DATA_SETS, line=f"{finished}/{n} done; {stage}")


def all_done(n: int) -> BatchProgress:
    """Every one of ``n`` data sets has its line."""
    return Event(FINISHING, n, n, DATA_SETS, line="done")


def reporter(progress: Progress | None, events: BatchReport | None) -> BatchReport:
    """One report function that feeds both kinds of callback a caller may give."""

    def report(event: BatchProgress) -> None:
        if events is not None:
            events(event)
        if progress is not None:
            progress(event)

    return report


def no_report(event: BatchProgress) -> None:
    """The report function of a caller that shows no progress."""
    return None
