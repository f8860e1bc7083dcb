"""The option vocabulary: every choice and default the commands share, written once, so the CLI and
the core cannot disagree (epsilon's 0.02, scalings, exact-mode choices)."""

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
#: ``--checkers`` names in help order, and the defaults; kcheck.checkers.registry must match
#: (tests/test_registry.py). Here so the CLI skips the numeric stack.
CHECKER_NAMES = ("degree2", "multilinear", "rbfsvm", "rff", "mixlinear", "kfactory")
DEFAULT_CHECKERS = ("degree2", "multilinear", "rbfsvm")
#: The score: accuracy, balanced accuracy (mean recall; class-weighted models) or ROC AUC.
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
#: The largest ``--max-rows``: beyond any file, and exact in a float as the sampler needs.
MAX_ROWS = 2**53
#: Fewer rows per class than this leave most classes out of a split (0.03% for all methods).
MIN_ROWS_PER_CLASS = 5


@dataclass(frozen=True)
class Event:
    """One progress report, the one format of progress and logs: displays read its fields, logs
    write :attr:`text`.

    ``stage``: what is happening (``degree-2 checker``). ``done`` of ``total``: its steps (None:
    uncounted); ``unit`` names them where not the stage's own (``data sets``).
    ``predicted_seconds``: the counted prediction at this run's pace (kcheck.costs.pace). ``line``:
    the report as text where not the stage (``2/5 done; checking a, b``). ``ended``: how the stage
    ended without finishing (``skipped (time limit)``; a log says it instead of "done"). ``note``:
    why it did less than announced by design (``settled after 1 of 2 repeats``), added to the "done"
    line."""

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
