"""The RBF SVM's (C, gamma) search on a sample, shared by exact mode and the rbfsvm checker.

Both tune on a stratified sample of 600 to 2,000 rows (:data:`TUNE_LADDER`, the most the budget
affords) with one matrix of squared distances (a BLAS product); every kernel is exp(-gamma D) of it,
given to LIBSVM precomputed (LIBSVM's own kernel: an estimated 153 s on 1,000 digits of 776
features). The grid (:func:`grid_for`): gamma at 2^-3, 2^-1, 2 and 8 times 1 / (median squared
distance), C from 2^-1 to 2^11 in steps of 4x; ``folds``-fold CV at every point a bounded search
does not pass over (:func:`search_grid`); ties to the smaller C, then gamma
(:func:`kcheck.tuning.rbf_grid.best_point`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from kcheck.bindings import engines
from kcheck.costs import budget
from kcheck.metrics import balanced_accuracy
from kcheck.scoring import ACCURACY, Scoring
from kcheck.split import stratified_subsample
from kcheck.tuning.rbf_grid import best_point

#: log2 C of the search, 2^-1 .. 2^11 by 4x: smaller only tied; larger rarely won.
LOG2_C = (-1.0, 1.0, 3.0, 5.0, 7.0, 9.0, 11.0)
#: log2 of gamma x (median squared distance): the kernel's width around the data's own scale.
LOG2_GAMMA_FACTOR = (-3.0, -1.0, 1.0, 3.0)
#: Tuning sample sizes, the most the budget affords (a point costs about rows^2): 600 rows let the
#: choice flip the verdict at one seed of five; madelon's best gamma needs 2,000.
TUNE_ROWS = 600
TUNE_LADDER = (600, 1_000, 1_500, 2_000)
#: The search may spend this many times its count (kcheck.costs.budget.rbf_tuning_seconds), the band
#: predictions are held to: at a large C iterations, not kernel entries, set the cost (C = 2^11: 6 s
#: vs 0.5 s at 2^5). See :func:`search_grid`.
SEARCH_ALLOWANCE = 2.0
#: Bytes per rows x rows entry: distances 8, a kernel 8, LIBSVM's problem 28, a fold's share.
BYTES_PER_ENTRY = 56


def matrix_bytes(rows: int) -> int:
    """Bytes of the kernel matrices on ``rows`` rows (:data:`BYTES_PER_ENTRY` per entry)."""
    return BYTES_PER_ENTRY * rows * rows


class GridOptions(Protocol):
    """What the search reads from its caller's options (exact mode's or :class:`Tuning`)."""

    @property
    def seed(self) -> int: ...

    @property
    def folds(self) -> int: ...

    @property
    def scoring(self) -> Scoring: ...

    @property
    def jobs(self) -> int: ...

    def resolved_C(self) -> tuple[float, ...]: ...

    def resolved_gamma_factor(self) -> tuple[float, ...]: ...


@dataclass(frozen=True)
class Tuning:
    """The search's settings where no other options carry them (the rbfsvm checker). ``log2_C`` /
    ``log2_gamma_factor`` None: the default grid. ``deadline``: ``time.perf_counter()`` past which
    the caller stops between steps. ``scoring``: class weights for training and the CV score
    (balanced accuracy also for AUC: LIBSVM's CV gives labels only). ``jobs``: threads for a CV's
    folds; results are the same at any value."""

    seed: int = 0
    folds: int = 5
    log2_C: tuple[float, ...] | None = None
    log2_gamma_factor: tuple[float, ...] | None = None
    deadline: float | None = None
    scoring: Scoring = ACCURACY
    jobs: int = 1

    def resolved_C(self) -> tuple[float, ...]:
        return self.log2_C if self.log2_C is not None else LOG2_C

    def resolved_gamma_factor(self) -> tuple[float, ...]:
        return self.log2_gamma_factor if self.log2_gamma_factor is not None else LOG2_GAMMA_FACTOR

    def grid_points(self) -> int:
        return len(self.resolved_C()) * len(self.resolved_gamma_factor())


def tuning_sample(y: np.ndarray, tune_rows: int, seed: int) -> np.ndarray | None:
    """Sorted indices of a stratified sample of ``tune_rows`` rows; None where all fit (no copy)."""
    if y.size <= tune_rows:
        return None
    return np.sort(stratified_subsample(y, tune_rows, seed=seed))


def median_sq_distance(D: np.ndarray) -> float:
    """Median of the off-diagonal squared distances; duplicates ignored when they dominate."""
    n = D.shape[0]
    if n < 2:
        return 1.0
    vals = D[np.triu_indices(n, 1)]
    med = float(np.median(vals))
    if med > 0:
        return med
    pos = vals[vals > 0]
    return float(np.median(pos)) if pos.size else 1.0


def grid_for(median: float, options: GridOptions) -> list[tuple[float, float]]:
    """(log2 C, log2 gamma) points: gamma scaled by 1 / ``median``."""
    base = -math.log2(median)
    return [
        (c, round(base + f, 12))
        for c in options.resolved_C()
        for f in options.resolved_gamma_factor()
    ]


def kernel(D: np.ndarray, gamma: float) -> np.ndarray:
    """The RBF kernel of squared distances ``D``."""
    return np.exp(-gamma * D)


def _tuning_score(
    problem: engines.KernelProblem, C: float, options: GridOptions
) -> tuple[float, int]:
    """One grid point's CV score (rows right or balanced accuracy) and its rows right."""
    folds, seed, workers = options.folds, options.seed, options.jobs
    if options.scoring.metric == "accuracy":
        right = engines.cv_kernel(problem, C, folds=folds, seed=seed, workers=workers)
        return right, right
    predicted = engines.cv_kernel_predictions(problem, C, folds=folds, seed=seed, workers=workers)
    return prediction_score(problem.y, predicted, options.scoring)


def prediction_score(y: np.ndarray, predicted: np.ndarray, scoring: Scoring) -> tuple[float, int]:
    """Predicted labels' score as the search ranks them (rows right, or balanced accuracy: no
    decision values for AUC), and the count of rows right."""
    right = int(np.count_nonzero(predicted == y))
    if scoring.metric == "accuracy":
        return right, right
    return round(balanced_accuracy(y, predicted), 12), right


@dataclass(frozen=True)
class Search:
    """The grid search's outcome: every point's score and count of rows right, and the best."""

    scores: dict[tuple[float, float], float]
    right: dict[tuple[float, float], int]
    log2_C: float
    log2_gamma: float
    #: LIBSVM's iterations at each point over its folds: their growth with C (costs.solvers).
    iterations: dict[tuple[float, float], int] = field(default_factory=dict)
    #: Points passed over (predicted past the allowance): log2 C, log2 gamma, predicted seconds.
    passed_over: tuple[dict[str, float], ...] = ()
    #: Their predicted iterations, so such a point is never taken as free.
    passed_iterations: dict[tuple[float, float], float] = field(default_factory=dict)
    #: LIBSVM's support vectors at each scored point over its folds: with the iterations, what the
    #: search cost (kcheck.costs.budget.svm_trained_seconds).
    support_vectors: dict[tuple[float, float], int] = field(default_factory=dict)

    def predicted_iterations(self) -> dict[tuple[float, float], float]:
        """Every point's iterations over the folds: counted where scored, else predicted."""
        return {**self.passed_iterations, **{p: float(i) for p, i in self.iterations.items()}}


def search_seconds(rows: int, n_classes: int, options: GridOptions) -> float:
    """Counted seconds of the search on ``rows`` rows (kcheck.costs.budget.rbf_tuning_seconds)."""
    return budget.rbf_tuning_seconds(
        tune_rows=rows,
        n_classes=n_classes,
        grid_points=len(options.resolved_C()) * len(options.resolved_gamma_factor()),
        gammas=len(options.resolved_gamma_factor()),
        folds=options.folds,
    )


def beyond_count(search: Search, rows: int, n_classes: int, options: GridOptions) -> float:
    """What ``search`` on ``rows`` rows took beyond :func:`search_seconds`, in counted seconds: its
    trainings from support vectors and iterations (kcheck.costs.budget.svm_trained_seconds) less the
    count's kernels. The count gave 0.41-1.86 of exact searches' seconds, this 0.67-1.23. For a
    revised count only; 0 without support vectors."""
    if not search.support_vectors:
        return 0.0
    fold_rows = rows * (options.folds - 1) / options.folds
    ran = budget.svm_trained_seconds(
        sum(search.support_vectors.values()), sum(search.iterations.values()), fold_rows
    )
    return ran - search_seconds(rows, n_classes, options)


def side_by_side_share(folds: int, workers: int) -> float:
    """Share of their one-core time that ``folds`` folds take on ``workers`` threads (most folds per
    thread: 3 of 5 on two). For display only; counts stay one core's."""
    return math.ceil(folds / max(1, workers)) / folds


def search_share(rows: int, options: GridOptions) -> float:
    """About the share of its one-core time that a search's CVs on ``rows`` rows take on
    ``options.jobs`` threads (from engines.SIDE_BY_SIDE_MIN_ROWS rows). For display only."""
    workers = options.jobs if rows >= engines.SIDE_BY_SIDE_MIN_ROWS else 1
    return side_by_side_share(options.folds, workers)


def search_allowance(y: np.ndarray, options: GridOptions) -> float:
    """What a search on ``y``'s rows may spend: SEARCH_ALLOWANCE times its count."""
    return SEARCH_ALLOWANCE * search_seconds(int(y.size), int(np.unique(y).size), options)


@dataclass
class _Allowance:
    """What the search may still spend (counted seconds), and each point's prediction. A point costs
    its kernel entries and LIBSVM's iterations; the next C's iterations are predicted as the last
    C's times their growth from the one before (parity3: 1.04 million predicted, 1.06 measured).
    Gammas share what is left evenly, narrowest first, so what they leave goes to wider ones."""

    left: float
    rows: int
    n_classes: int
    folds: int

    def point(self, iterations: float) -> float:
        fold_rows = int(self.rows * (self.folds - 1) / self.folds)
        nominal = budget.rbf_tuning_seconds(
            tune_rows=self.rows,
            n_classes=self.n_classes,
            grid_points=1,
            gammas=0,
            folds=self.folds,
        )
        return nominal + budget.svm_iteration_seconds(
            iterations, fold_rows, self.n_classes, precomputed=True
        )

    def build(self) -> float:
        return budget.BUILD_SECONDS_PER_ENTRY * float(self.rows) ** 2


def _next_iterations(done: list[int] | list[float]) -> float:
    """The next C's predicted iterations from those of the smaller C at the same gamma."""
    if not done:
        return 0.0
    if len(done) == 1:
        return float(done[-1])
    return done[-1] * max(1.0, done[-1] / max(done[-2], 1))


def _passed_over(
    bound: _Allowance,
    at_gamma: list[int],
    Cs: list[float],
    g: float,
    iterations: dict[tuple[float, float], float],
) -> list[dict[str, float]]:
    """Points of ``Cs`` at gamma ``g`` passed over, with predicted seconds and ``iterations``."""
    grown = [float(v) for v in at_gamma]
    out = []
    for c in Cs:
        grown.append(_next_iterations(grown))
        iterations[(c, g)] = grown[-1]
        out.append(
            {
                "log2_C": c,
                "log2_gamma": round(g, 6),
                "predicted_seconds": round(bound.point(grown[-1]), 3),
            }
        )
    return out


def search_grid(
    D: np.ndarray,
    y: np.ndarray,
    median: float,
    options: GridOptions,
    done: Callable[[int], None],
    check_time: Callable[[], None],
    allowance: float | None = None,
) -> Search:
    """(C, gamma) by LIBSVM's CV at every grid point on the rows ``D`` holds distances of, one
    precomputed problem per gamma. ``done`` reports progress; ``check_time`` raises
    TimeLimitReached between points. With an ``allowance`` (counted seconds), a point predicted
    past its gamma's share is passed over with the larger C at that gamma; the smallest C of each
    gamma always runs."""
    points = grid_for(median, options)
    scores: dict[tuple[float, float], float] = {}
    right: dict[tuple[float, float], int] = {}
    iterations: dict[tuple[float, float], int] = {}
    support_vectors: dict[tuple[float, float], int] = {}
    passed: list[dict[str, float]] = []
    passed_iterations: dict[tuple[float, float], float] = {}
    weight = options.scoring.class_weight
    classes = int(np.unique(y).size)
    bound = None
    if allowance is not None:
        bound = _Allowance(allowance, int(y.size), max(classes, 2), options.folds)
    gammas = sorted({p[1] for p in points}, reverse=bound is not None)
    for i, g in enumerate(gammas):
        problem = engines.KernelProblem.from_kernel(kernel(D, 2.0**g), y, weight)
        share = 0.0
        if bound is not None:
            bound.left -= bound.build()
            share = bound.left / (len(gammas) - i)
        at_gamma: list[int] = []
        Cs = sorted(p[0] for p in points if p[1] == g)
        for j, c in enumerate(Cs):
            if bound is not None and at_gamma:
                predicted = bound.point(_next_iterations(at_gamma))
                if predicted > share:
                    passed.extend(_passed_over(bound, at_gamma, Cs[j:], g, passed_iterations))
                    done(len(scores) + len(passed))
                    break
            before, svs = engines.svm_iterations(), engines.svm_support_vectors()
            scores[(c, g)], right[(c, g)] = _tuning_score(problem, 2.0**c, options)
            iterations[(c, g)] = engines.svm_iterations() - before
            support_vectors[(c, g)] = engines.svm_support_vectors() - svs
            at_gamma.append(iterations[(c, g)])
            if bound is not None:
                spent = bound.point(iterations[(c, g)])
                bound.left -= spent
                share -= spent
            done(len(scores) + len(passed))
            check_time()
        del problem
    log2_C, log2_gamma = best_point(scores)
    return Search(
        scores,
        right,
        log2_C,
        log2_gamma,
        iterations,
        tuple(passed),
        passed_iterations,
        support_vectors,
    )
