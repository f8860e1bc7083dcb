"""The option vocabulary: every choice and default the commands share, written once.

The CLI builds its options from these, and the core validates against them, so a default
(epsilon's 0.02, the scalings, the exact-mode choices) cannot differ between commands.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kcheck.errors import KcheckError

#: The gap (a fraction: 0.02 is 2 accuracy points) at which a checker means "kernel".
EPSILON = 0.02
#: Feature scalings: divide by max |x| (zeros stay zeros, the default) or svm-scale's min-max.
SCALINGS = ("maxabs", "minmax")
DEFAULT_SCALING = "maxabs"
#: The exact RBF comparison: ``auto`` runs it where its counted cost is small.
EXACT_MODES = ("auto", "always", "never")
DEFAULT_EXACT = "auto"
#: The names ``--checkers`` takes, in the order the help lists them, and those that run by
#: default: the one list of names. The checkers themselves are in kcheck.checkers.registry,
#: which must list exactly these (tests/test_registry.py); the names live here so that the
#: command line can show them without importing the numeric stack.
CHECKER_NAMES = ("degree2", "multilinear", "rbfsvm", "rff", "mixlinear", "kfactory")
DEFAULT_CHECKERS = ("degree2", "multilinear", "rbfsvm")
#: What a score is: plain accuracy, balanced accuracy (the mean of per-class recall; every model
#: then trains with class weights) or the area under the ROC curve (two classes).
METRICS = ("accuracy", "balanced", "auc")
DEFAULT_METRIC = "accuracy"
#: Each metric in a sentence ("+3.0 points of balanced accuracy"), for the table and the report.
METRIC_NAMES = {"accuracy": "accuracy", "balanced": "balanced accuracy", "auc": "AUC"}
#: Models ``--model-out`` can train.
MODEL_KINDS = ("linear", "kernel")
#: ``--model linear+K``: the linear model with the top K product terms of ``--explain``.
PRODUCTS_PREFIX = "linear+"


def products_of(kind: str | None) -> int | None:
    """K of a ``linear+K`` model kind (K >= 1); None for any other kind."""
    if kind is None or not kind.startswith(PRODUCTS_PREFIX):
        return None
    k = kind[len(PRODUCTS_PREFIX) :]
    return int(k) if k.isdigit() and k.isascii() and 1 <= int(k) <= 10_000 else None


#: Folds of every cross-validation (grid.py's and LIBLINEAR's ``-C`` default).
FOLDS = 5
#: What LIBLINEAR's and LIBSVM's srand take: an unsigned 32-bit integer.
MAX_SEED = 2**32 - 1
#: Fewer rows than this leave too few in the validation split for a comparison to mean anything.
MIN_ROWS = 10
#: The largest ``--max-rows``: more rows than any file holds (petabytes of them), and a count
#: that a float holds exactly, as the sampler's arithmetic needs.
MAX_ROWS = 2**53
#: Fewer rows per class than this (on average) leave most classes absent from one split: 3,000
#: classes in 6,000 rows took minutes and scored 0.03% for every method.
MIN_ROWS_PER_CLASS = 5


@dataclass(frozen=True)
class Event:
    """One progress report, the one format of progress and logs: a display reads its fields,
    and a log writes :attr:`text`.

    ``stage`` is what is happening (``degree-2 checker``), as a display shows it. ``done`` of
    ``total`` count its steps (None: it counts none); ``unit`` names them where they are not
    the stage's own steps (``data sets``). ``predicted_seconds`` is what the stage is predicted
    to take here where the plan has a prediction: its counted reference seconds
    (kcheck.costs.budget, or a checker's own revision) at this run's pace (the probe's,
    kcheck.costs.pace, then that of the stages done so far). ``line`` is the report as one
    line of text where that is not the stage (a batch's ``2/5 done; checking a,
    b``). ``ended`` says how the stage under way ended where it did not finish its work
    (``skipped (time limit)``): a log then says that, not "done"; a display that shows stages
    as they start ignores it. ``note`` says how the stage under way finished where it did less
    than it announced by design (``settled after 1 of 2 repeats``): a log adds it to its
    "done" line, so that a stage done in half its announced time says why.
    """

    stage: str
    done: int | None = None
    total: int | None = None
    unit: str | None = None
    predicted_seconds: float | None = None
    line: str | None = None
    ended: str | None = None
    note: str | None = None

    @property
    def text(self) -> str:
        return self.line if self.line is not None else self.stage


#: Where progress goes: a function of each :class:`Event`.
Progress = Callable[[Event], None]


def no_progress(event: Event) -> None:
    """The progress callback of a caller that shows none."""
    return None


def check_common(
    *, epsilon: float | None, scaling: str | None, jobs: int, memory_limit: int | None
) -> None:
    """The options check and verify share, validated alike (None: not given, the default)."""
    if epsilon is not None and not 0.0 <= epsilon < 1.0:
        raise KcheckError(f"--epsilon must lie in [0, 1), got {epsilon}")
    if scaling is not None and scaling not in SCALINGS:
        raise KcheckError(f"--scaling must be one of {', '.join(SCALINGS)}")
    if jobs < 1:
        raise KcheckError("--jobs must be at least 1")
    if memory_limit is not None and memory_limit <= 0:
        raise KcheckError("--memory-limit must be positive")
