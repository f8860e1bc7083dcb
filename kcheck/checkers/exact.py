"""Exact mode: on small data, run the real RBF-versus-linear comparison instead of the proxies.

With a few hundred rows a 2% gap is one or two validation points and the proxies' verdict is close
to a coin toss, while an RBF SVM trains in milliseconds.

The comparison (:func:`run`), on all training rows (T and V together, scaled):

1. C of the linear model: the linear baseline's (LIBLINEAR ``-C`` search on T, ``-s 2 -B 1``),
   so the RBF SVM is compared with the model the check hands over.
2. One matrix of squared distances (a BLAS product); every RBF kernel of the search is
   exp(-gamma D) of it, given to LIBSVM precomputed (its own kernel is far too slow on wide data).
3. (C, gamma) by ``folds``-fold CV over the grid of :mod:`kcheck.tuning.rbf_sample`, on a
   stratified sample of 600 to 2,000 rows (:func:`_tune_rows_within`); most correct wins, ties
   to the smaller C, then the smaller gamma.
4. Both models in our own seeded, stratified ``folds``-fold split, repeated until the gap's
   interval clears epsilon (at most :func:`default_repeats`; after the first, widened for the
   fold assignment's variance, :func:`kcheck.verdict.settled`).

``correct`` / ``reference_correct`` hold per row the fraction of repeats predicting it right, so the
paired interval (:func:`kcheck.verdict.paired_gap`) counts each row once. It ignores fold-to-fold
variation, so it is somewhat too narrow (Bengio & Grandvalet, JMLR 2004); ``info["repeat_gaps"]``
shows that part.

Whether ``auto`` runs it is decided from counted work (:func:`estimated_seconds`), never a clock, so
the JSON is the same on any machine and load."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck.bindings import engines
from kcheck.bindings.c_runtime import side_by_side
from kcheck.checkers import base
from kcheck.checkers.base import Allowance, CheckerResult, Context, Counts, Dataset, Sized
from kcheck.costs import budget
from kcheck.defaults import EXACT_MODES, Progress, no_progress
from kcheck.scoring import PointResults, positive_scores
from kcheck.split import stratified_folds
from kcheck.tuning import linear_c, rbf_sample
from kcheck.tuning.rbf_grid import best_point as best_point
from kcheck.tuning.rbf_sample import (
    TUNE_LADDER,
    TUNE_ROWS,
    Search,
    Tuning,
    kernel,
    matrix_bytes,
    median_sq_distance,
    search_allowance,
    search_grid,
    side_by_side_share,
    tuning_sample,
)
from kcheck.tuning.rbf_sample import grid_for as grid_for
from kcheck.verdict import settled

NAME = "rbf"
#: Repeats may stop after this many (:func:`kcheck.verdict.settled`); a 2nd cost 4.7 s of 13.
MIN_REPEATS = 1
#: Folds of the nested search: 3, as the judged reference's, at under half the cost of 5.
INNER_FOLDS = 3
#: The progress stage's name, and that of its repeats (not nested).
STAGE = "exact RBF comparison"
REPEATS_STAGE = "exact RBF comparison: repeats on all rows"
#: Folds of a repeat trained side by side at most (``--jobs`` 2 or more).
REPEAT_WORKERS = 2
#: Bytes per kernel entry that folds side by side hold beside the kernel itself (8): the building
#: fold's training block, CSR, LIBSVM nodes and temporaries. Measured on 5,000 rows: about 33 at one
#: job, 57.5 at two (exact's memory check uses 56); see :func:`repeat_workers`.
REPEAT_BUILDING_BYTES_PER_ENTRY = 32
REPEAT_TRAINING_BYTES_PER_ENTRY = 20


def wall_share(rows: int, jobs: int, memory_limit: int) -> float:
    """About the share of its one-core time the comparison takes at ``jobs`` (folds side by side
    from engines.SIDE_BY_SIDE_MIN_ROWS rows); display and pacing only."""
    return side_by_side_share(Tuning().folds, repeat_workers(rows, jobs, memory_limit))


def repeat_bytes(rows: int, workers: int) -> int:
    """Bytes that the repeats on ``rows`` rows hold with ``workers`` folds side by side."""
    per_entry = 8 + REPEAT_BUILDING_BYTES_PER_ENTRY
    per_entry += (workers - 1) * REPEAT_TRAINING_BYTES_PER_ENTRY
    return per_entry * rows * rows


def repeat_workers(rows: int, jobs: int, memory_limit: int | None) -> int:
    """Folds of a repeat side by side: up to ``jobs`` and REPEAT_WORKERS within the memory limit,
    one below engines.SIDE_BY_SIDE_MIN_ROWS. Never changes a result."""
    if rows < engines.SIDE_BY_SIDE_MIN_ROWS:
        return 1
    workers = max(1, min(jobs, REPEAT_WORKERS))
    while workers > 1 and memory_limit is not None and repeat_bytes(rows, workers) > memory_limit:
        workers -= 1
    return workers


def default_repeats(rows: int) -> int:
    """At most 5 repeats below 1,000 rows, 3 below 2,000, else 2: one fold assignment's gap varies
    by 0.4-1.2 points at 250-1,000 rows, 0.2-0.3 at 2,000 (scripts/results/exact.md)."""
    if rows < 1_000:
        return 5
    if rows < 2_000:
        return 3
    return 2


@dataclass(frozen=True)
class ExactOptions(Tuning):
    """The grid's settings (:class:`kcheck.tuning.rbf_sample.Tuning`) and the comparison's.

    ``repeats`` None: adaptive, up to :func:`default_repeats`. ``jobs``: threads training CV folds
    side by side over a shared kernel; each fold trains as alone, so results do not depend on it.
    ``deadline``: past it, :func:`run` raises TimeLimitReached between grid points and repeats."""

    repeats: int | None = None
    epsilon: float = 0.02
    tune_rows: int = TUNE_ROWS
    #: Nested where the search's sample is all rows: (C, gamma) and linear C retuned per fold.
    nest: bool = False
    #: Folds of the search inside each training fold, where the comparison is nested.
    inner_folds: int = INNER_FOLDS
    #: Bytes the repeats' folds side by side may hold (:func:`repeat_workers`); None: no bound.
    memory_limit: int | None = None
    #: The plan's counted budget (``auto``) bounding the repeats; None: the adaptive maximum.
    budget_seconds: float | None = None
    #: True: the linear C is the baseline's, handed to :func:`run`, which searches and counts none.
    #: False (a direct call): :func:`run` searches C on all rows and counts it.
    baseline_C: bool = False

    def max_repeats(self, rows: int) -> int:
        return self.repeats if self.repeats is not None else default_repeats(rows)

    def nested(self, rows: int) -> bool:
        """Whether the comparison of ``rows`` rows is nested: asked for, and the search's sample is
        all of them. Tuned on the rows it is scored on, the RBF is favoured (a 124-row set with a
        +0.6 [-0.2, +1.3] gain was called kernel at every seed)."""
        return self.nest and self.tune_rows >= rows


# --- cost ----------------------------------------------------------------------------------------


def estimated_seconds(X: sp.spmatrix, n_classes: int, options: ExactOptions) -> float:
    """Seconds of :func:`run` on the reference machine, from counts alone (kcheck.costs.budget)."""
    return counted_seconds(int(X.shape[0]), int(X.nnz), n_classes, options)


def counted_seconds(rows: int, nnz: int, n_classes: int, options: ExactOptions) -> float:
    """:func:`estimated_seconds` of ``rows`` rows holding ``nnz`` stored values."""
    return budget.exact_seconds(
        rows=rows,
        nnz=nnz,
        n_classes=n_classes,
        tune_rows=min(rows, options.tune_rows),
        grid_points=options.grid_points(),
        gammas=len(options.resolved_gamma_factor()),
        repeats=options.max_repeats(rows),
        folds=options.folds,
        nested_folds=options.inner_folds if options.nested(rows) else 0,
        linear_search=not options.baseline_C,
    )


@dataclass(frozen=True)
class ExactSizing:
    """What exact mode does as the plan decided (:func:`size`): whether and why, counted estimate
    and budget, the search's rows, nesting, and its repeats' budget."""

    run: bool
    reason: str
    estimated_seconds: float | None = None
    budget_seconds: float | None = None
    #: Rows the (C, gamma) search runs on (:func:`_tune_rows_within`); None: the options' own.
    tune_rows: int | None = None
    #: Whether the comparison is nested (:meth:`ExactOptions.nested`).
    nest: bool = False
    mode: str = "auto"
    #: The plan's counted budget that bounds the repeats where ``auto`` runs it (not the time left,
    #: so the same on every machine). None: the adaptive maximum.
    repeat_budget: float | None = None
    #: What it spends of the check's budget, as counted, where it runs.
    counted_seconds: float | None = None


def decide(
    rows: int,
    nnz: int,
    n_classes: int,
    options: ExactOptions,
    *,
    budget_seconds: float,
    memory_limit: int,
    mode: str,
    basis: str = "the budget",
) -> ExactSizing:
    """Whether to run the exact comparison on ``rows`` rows holding ``nnz`` stored values, and why;
    from counts only, so the plan decides before training.

    ``never`` and ``always`` decide alone (``always`` still refuses what cannot fit memory).
    ``auto`` runs where :func:`counted_seconds` is within ``budget_seconds``
    (kcheck.costs.budget.first_seconds; ``basis`` names it); the search's rows are then the most
    that budget affords."""
    if mode not in EXACT_MODES:
        raise ValueError(f"exact mode must be one of {', '.join(EXACT_MODES)}, got {mode!r}")
    if mode == "never":
        return ExactSizing(False, "exact mode is off", mode=mode)
    need = matrix_bytes(rows)
    if need > memory_limit:
        return ExactSizing(
            False,
            f"too large: its {rows:,} x {rows:,} kernel matrices need {budget.size_text(need)}, "
            f"over the memory limit of {budget.size_text(memory_limit)}",
            mode=mode,
        )
    tune = _tune_rows_within(rows, nnz, n_classes, options, budget_seconds)
    chosen = dataclasses.replace(options, tune_rows=tune)
    # Nested where the search's sample is all the rows and the nested comparison fits too.
    nest = dataclasses.replace(chosen, nest=True)
    if nest.nested(rows) and counted_seconds(rows, nnz, n_classes, nest) <= budget_seconds:
        chosen = nest
    if mode == "always":
        return ExactSizing(
            True, "exact mode requested", tune_rows=tune, nest=chosen.nest, mode=mode
        )
    estimate = counted_seconds(rows, nnz, n_classes, chosen)
    within = estimate <= budget_seconds
    return ExactSizing(
        within,
        "its counted cost is " + ("within " if within else "over ") + basis,
        round(estimate, 3),
        round(budget_seconds, 3),
        tune if within else None,
        chosen.nest and within,
        mode,
    )


def _tune_rows_within(
    rows: int, nnz: int, n_classes: int, options: ExactOptions, budget_seconds: float
) -> int:
    chosen = options.tune_rows
    for t in TUNE_LADDER:
        if t <= chosen:
            continue
        trial = dataclasses.replace(options, tune_rows=t)
        if counted_seconds(rows, nnz, n_classes, trial) > budget_seconds:
            break
        chosen = t
        if t >= rows:
            break
    return min(chosen, rows)


# --- the comparison ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Chosen:
    C: float
    gamma: float
    linear_C: float


@dataclass
class _Fold:
    """One k-fold assignment's per-row results: correctness, and decision values for the
    larger label (two classes; each row's value comes from the model trained without it)."""

    rbf: np.ndarray
    lin: np.ndarray
    rbf_scores: np.ndarray | None
    lin_scores: np.ndarray | None


@dataclass(frozen=True)
class _Inner:
    """The nested search: (C, gamma) on a training fold's distances by ``options.inner_folds``-fold
    CV over the same grid (gamma from all rows' median, label-free)."""

    median: float
    options: ExactOptions
    check_time: Callable[[], None]

    def tune(self, D: np.ndarray, y: np.ndarray) -> _Chosen:
        grid = dataclasses.replace(self.options, folds=self.options.inner_folds)
        allowance = search_allowance(y, grid)
        found = search_grid(D, y, self.median, grid, lambda _: None, self.check_time, allowance)
        return _Chosen(float(2.0**found.log2_C), float(2.0**found.log2_gamma), 0.0)


def _repeat(
    X: sp.csr_matrix,
    y: np.ndarray,
    K: np.ndarray,
    chosen: _Chosen,
    folds: int,
    seed: int,
    repeat: int,
    class_weight: engines.ClassWeight | None = None,
    inner: _Inner | None = None,
    workers: int = 1,
) -> _Fold:
    """Per-row results of both models in one k-fold assignment; ``inner``: nested (``K`` then holds
    the distances).

    Not nested, ``workers`` threads train folds side by side: no fold draws from ``rand()``, so each
    gives what it would alone. Nested, folds run in turn (their inner CVs draw from ``rand()``), and
    those CVs' folds go side by side."""
    fold = stratified_folds(y, folds, seed, repeat)
    two = np.unique(y).size == 2
    out = _Fold(
        np.zeros(y.size, dtype=bool),
        np.zeros(y.size, dtype=bool),
        np.zeros(y.size) if two else None,
        np.zeros(y.size) if two else None,
    )

    building = threading.Lock()

    def one(k: int) -> None:
        test = np.flatnonzero(fold == k)
        if test.size:
            _one_fold(X, y, K, chosen, seed, class_weight, inner, test, fold != k, out, building)

    side_by_side(one, folds, 1 if inner is not None else workers)
    return out


def _one_fold(
    X: sp.csr_matrix,
    y: np.ndarray,
    K: np.ndarray,
    chosen: _Chosen,
    seed: int,
    class_weight: engines.ClassWeight | None,
    inner: _Inner | None,
    test: np.ndarray,
    in_train: np.ndarray,
    out: _Fold,
    building: threading.Lock,
) -> None:
    """Both models trained on the rows ``in_train`` marks, results on ``test`` written into ``out``.
    Side-by-side folds build their LIBSVM problems one at a time (``building``); the kernel's
    training block is freed once LIBSVM has its copy."""
    train = np.flatnonzero(in_train)
    on_fold = chosen if inner is None else inner.tune(K[np.ix_(train, train)], y[train])
    with building:
        K_train, K_test = K[np.ix_(train, train)], K[np.ix_(test, train)]
        if inner is not None:  # distances: the kernel at this fold's gamma
            K_train, K_test = kernel(K_train, on_fold.gamma), kernel(K_test, on_fold.gamma)
        problem = engines.KernelProblem.from_kernel(K_train, y[train], class_weight)
        del K_train
    labels, values = engines.fit_predict_kernel(problem, on_fold.C, K_test)
    del problem, K_test
    out.rbf[test] = labels == y[test]
    if out.rbf_scores is not None:
        out.rbf_scores[test] = values if values is not None else 0.0
    lin_model, _ = linear_c.fit_linear(
        X[train],
        y[train],
        seed=seed,
        C=None if inner is not None else chosen.linear_C,
        class_weight=class_weight,
    )
    predicted, dec = lin_model.predict_scored(X[test])
    out.lin[test] = predicted == y[test]
    if out.lin_scores is not None:
        oriented = positive_scores(lin_model.labels, dec)
        out.lin_scores[test] = oriented if oriented is not None else 0.0


def run(
    X: sp.spmatrix,
    y: np.ndarray,
    options: ExactOptions,
    progress: Progress | None = None,
    linear: Linear | None = None,
) -> CheckerResult:
    """The exact comparison on all training rows (scaled); a CheckerResult named ``rbf``.

    ``linear``: the baseline's C and CV accuracy, where ``options.baseline_C``. ``correct`` /
    ``reference_correct``: per-row fraction of repeats predicting right. ``val_accuracy``: the RBF's
    mean; ``cv_accuracy``: its best grid CV accuracy. ``predict`` trains the RBF on all rows on
    first use."""
    if options.baseline_C != (linear is not None):
        raise ValueError("the baseline's C is given exactly where options.baseline_C is set")
    t0 = time.perf_counter()
    Xb = engines.as_binding_csr(X)
    yb = np.asarray(y, dtype=np.float64)
    rows = int(yb.size)
    too_few = _too_few_rows(options, rows)
    if too_few is not None:
        return CheckerResult.skipped(NAME, too_few, time.perf_counter() - t0)
    steps = base.SearchThenStage(
        progress or no_progress,
        options.deadline,
        "exact comparison",
        STAGE,
        options.grid_points() + options.max_repeats(rows),
        None if options.nested(rows) else options.grid_points(),
        "CV runs",
    )
    if not options.nested(rows):
        # The search is a stage with its own count (folds side by side at two jobs or more).
        classes = int(np.unique(yb).size)
        search = dataclasses.replace(options, repeats=0)
        share = rbf_sample.search_share(min(rows, options.tune_rows), options)
        steps.predicted = round(counted_seconds(rows, int(Xb.nnz), classes, search) * share, 3)
    steps.tick(0)
    steps.check_time()
    tuned, K = _tune(Xb, yb, options, steps, linear)
    runs, stopped_early = _repeat_until_settled(Xb, yb, K, tuned, options, steps)
    del K
    return _result(Xb, yb, tuned, runs, stopped_early, options, t0)


def _too_few_rows(options: ExactOptions, rows: int) -> str | None:
    """Why ``rows`` are too few to compare (a skip, not an error: the data's doing), or None;
    options that cannot run raise ValueError, as a caller's mistake."""
    folds = options.folds
    if folds < 2:
        raise ValueError("exact mode needs at least 2 folds")
    if rows < 2 * folds:
        return f"{rows} rows are too few for {folds}-fold cross-validation"
    if options.max_repeats(rows) < 1:
        raise ValueError("exact mode needs at least one repeat")
    if options.grid_points() == 0:
        raise ValueError("the RBF grid is empty")
    return None


@dataclass(frozen=True)
class Linear:
    """The linear model's C, and the CV accuracy of the search that chose it."""

    C: float
    cv_accuracy: float | None


@dataclass(frozen=True)
class _Tuned:
    """The parameters chosen for both models, and the search and data facts the JSON shows."""

    chosen: _Chosen
    search: Search
    tune_rows: int
    median: float
    linear_cv: float | None
    #: Points the search scored higher whose repeats were predicted past their allowance.
    passed_over: tuple[dict[str, float], ...] = ()
    #: The most repeats that may run (:func:`repeats_within_budget`; None: adaptive maximum).
    most_repeats: int | None = None


def _affordable(
    search: Search, tune_rows: int, rows: int, nnz: int, classes: int, options: ExactOptions
) -> tuple[Search, tuple[dict[str, float], ...]]:
    """The search with the point the repeats compare: the best whose repeats are predicted within
    SEARCH_ALLOWANCE times their count (else the cheapest), and those passed over."""
    ranked = sorted(search.scores, key=lambda p: (-search.scores[p], p[0], p[1]))
    repeats = options.max_repeats(rows)
    counted = _repeat_count(tune_rows, rows, nnz, classes, options)
    allowance = rbf_sample.SEARCH_ALLOWANCE * repeats * counted
    passed: list[dict[str, float]] = []
    costs: dict[tuple[float, float], float] = {}
    for point in ranked:
        at = dataclasses.replace(search, log2_C=point[0], log2_gamma=point[1])
        iterations = _iteration_seconds(search, point, tune_rows, rows, classes, options)
        costs[point] = repeats * (counted + iterations)
        if costs[point] <= allowance:
            return at, tuple(passed)
        passed.append(
            {
                "log2_C": point[0],
                "log2_gamma": round(point[1], 6),
                "predicted_seconds": round(costs[point], 3),
            }
        )
    cheapest = min(ranked, key=lambda p: costs[p])
    kept = tuple(
        d for d in passed if d["log2_C"] != cheapest[0] or d["log2_gamma"] != round(cheapest[1], 6)
    )
    return dataclasses.replace(search, log2_C=cheapest[0], log2_gamma=cheapest[1]), kept


def repeats_within_budget(
    search: Search, tune_rows: int, rows: int, nnz: int, classes: int, options: ExactOptions
) -> int:
    """The most repeats (1 to the adaptive maximum) whose prediction at the compared point fits the
    budget left (the maximum without one). The point never changes to fit more repeats (that moved a
    gap from +9.7 to +0.7)."""
    most = options.max_repeats(rows)
    if options.budget_seconds is None or options.repeats is not None:
        return most
    rest = _rest_seconds(tune_rows, rows, nnz, classes, options)
    each = _searched_repeat_seconds(search, tune_rows, rows, nnz, classes, options)
    fit = int((options.budget_seconds - rest) // each) if each > 0 else most
    return max(1, min(most, fit))


def _tune(
    X: sp.csr_matrix,
    y: np.ndarray,
    options: ExactOptions,
    steps: base.SearchThenStage,
    linear: Linear | None,
) -> tuple[_Tuned, np.ndarray]:
    """The linear C (the baseline's where given), then the RBF's (C, gamma) on the tuning rows, with
    all rows' kernel at that gamma (the distances freed, unless nested)."""
    if linear is None:
        weight = options.scoring.class_weight
        model, cv = linear_c.fit_linear(X, y, seed=options.seed, class_weight=weight)
        linear = Linear(model.C, cv)
        steps.check_time()
    D = engines.squared_distances(X)
    median = median_sq_distance(D)
    search, tune_rows = _search_sample(D, y, median, options, steps)
    passed: tuple[dict[str, float], ...] = ()
    most: int | None = None
    if not options.nested(int(y.size)):
        classes = int(np.unique(y).size)
        search, passed = _affordable(search, tune_rows, int(y.size), int(X.nnz), classes, options)
        most = repeats_within_budget(search, tune_rows, int(y.size), int(X.nnz), classes, options)
    chosen = _Chosen(float(2.0**search.log2_C), float(2.0**search.log2_gamma), linear.C)
    tuned = _Tuned(chosen, search, tune_rows, median, linear.cv_accuracy, passed, most)
    # Nested, each fold makes its own kernel from the distances.
    return tuned, D if options.nested(int(y.size)) else kernel(D, chosen.gamma)


def _search_sample(
    D: np.ndarray, y: np.ndarray, median: float, options: ExactOptions, steps: base.SearchThenStage
) -> tuple[Search, int]:
    """The grid search on ``options.tune_rows`` rows (distances freed on return), and its rows."""
    sample = tuning_sample(y, options.tune_rows, options.seed)
    if sample is not None:
        D, y = D[np.ix_(sample, sample)], y[sample]
    allowance = search_allowance(y, options)
    search = search_grid(D, y, median, options, steps.tick, steps.check_time, allowance)
    return search, int(y.size)


def _repeat_until_settled(
    X: sp.csr_matrix,
    y: np.ndarray,
    K: np.ndarray,
    tuned: _Tuned,
    options: ExactOptions,
    steps: base.SearchThenStage,
) -> tuple[list[_Fold], bool]:
    """The repeats, and whether they stopped early: adaptive repeats stop once the gap's
    interval lies on one side of epsilon, as more would not change the verdict."""
    runs: list[_Fold] = []
    adaptive = options.max_repeats(int(y.size))
    max_repeats = tuned.most_repeats or adaptive
    weight = options.scoring.class_weight
    inner = _Inner(tuned.median, options, steps.check_time) if options.nested(int(y.size)) else None
    # The grid's points, scored or passed over: where the repeats' progress starts.
    searched = len(tuned.search.scores) + len(tuned.search.passed_over)
    workers = repeat_workers(int(y.size), options.jobs, options.memory_limit)
    if inner is None:
        classes = int(np.unique(y).size)
        repeat = repeat_seconds(tuned, int(y.size), int(X.nnz), classes, options)
        # Announced as the time it takes: the folds side by side take their share of it.
        shown = max_repeats * repeat * side_by_side_share(options.folds, workers)
        steps.then(REPEATS_STAGE, searched, shown, "repeats")
    for r in range(max_repeats):
        runs.append(
            _repeat(X, y, K, tuned.chosen, options.folds, options.seed, r, weight, inner, workers)
        )
        stop = False
        if options.repeats is None and r + 1 >= MIN_REPEATS and r + 1 < max_repeats:
            rbf_pts, lin_pts = _averaged(runs)
            stop = settled(options.scoring.gap(y, rbf_pts, lin_pts), options.epsilon, r + 1)
        # Announced for all its repeats; a log says why where it stops early or the budget cut them.
        note = f"settled after {r + 1} of {max_repeats} repeats" if stop else None
        if r + 1 == max_repeats < adaptive:
            note = f"{max_repeats} of {adaptive} repeats: the budget affords {max_repeats}"
        steps.tick(searched + r + 1, note)
        steps.check_time()
        if stop:
            return runs, True
    return runs, False


def _repeat_count(
    tune_rows: int, rows: int, nnz: int, classes: int, options: ExactOptions
) -> float:
    """Counted seconds of one repeat, not nested: its folds' kernel copies and linear fits
    (kcheck.costs.budget.exact_seconds' share of a repeat)."""

    def counted(repeats: int) -> float:
        return budget.exact_seconds(
            rows=rows,
            nnz=nnz,
            n_classes=classes,
            tune_rows=tune_rows,
            grid_points=0,
            gammas=0,
            repeats=repeats,
            folds=options.folds,
        )

    return counted(1) - counted(0)


def repeat_seconds(
    tuned: _Tuned, rows: int, nnz: int, classes: int, options: ExactOptions
) -> float:
    """Predicted seconds of one non-nested repeat at the chosen point (_iteration_seconds)."""
    return _searched_repeat_seconds(tuned.search, tuned.tune_rows, rows, nnz, classes, options)


def _searched_repeat_seconds(
    search: Search, tune_rows: int, rows: int, nnz: int, classes: int, options: ExactOptions
) -> float:
    """:func:`repeat_seconds` at the point ``search`` holds, searched on ``tune_rows`` rows."""
    point = (search.log2_C, search.log2_gamma)
    iterations = _iteration_seconds(search, point, tune_rows, rows, classes, options)
    return _repeat_count(tune_rows, rows, nnz, classes, options) + iterations


def _rest_seconds(
    tune_rows: int, rows: int, nnz: int, classes: int, options: ExactOptions
) -> float:
    """Counted seconds of the comparison but its repeats: search, linear C, distances."""
    return counted_seconds(
        rows, nnz, classes, dataclasses.replace(options, tune_rows=tune_rows, repeats=0)
    )


def _revised_seconds(
    tuned: _Tuned, rows: int, nnz: int, classes: int, repeats: int, options: ExactOptions
) -> float:
    """Its counted seconds with the repeats that ran re-predicted from LIBSVM's iterations in the
    search (:func:`repeat_seconds` each; the plan could count none, and a noisy repeat took 2.5x its
    share). The search counts what it did (:func:`kcheck.tuning.rbf_sample.beyond_count`).
    kcheck.plan compares the stage with this (done_share)."""
    searched = rbf_sample.beyond_count(tuned.search, tuned.tune_rows, classes, options)
    if options.nested(rows):
        chosen = dataclasses.replace(options, tune_rows=tuned.tune_rows, repeats=repeats)
        return counted_seconds(rows, nnz, classes, chosen) + searched
    rest = _rest_seconds(tuned.tune_rows, rows, nnz, classes, options) + searched
    return rest + repeats * repeat_seconds(tuned, rows, nnz, classes, options)


def _iteration_seconds(
    search: Search,
    point: tuple[float, float],
    tune_rows: int,
    rows: int,
    classes: int,
    options: ExactOptions,
) -> float:
    """A repeat's LIBSVM iterations at ``point`` in counted seconds: the search's, scaled."""
    fold_rows = int(rows * (options.folds - 1) / options.folds)
    sample = search.iterations.get(point, 0)
    per_fold = budget.svm_iterations_on(sample, tune_rows, options.folds, fold_rows)
    return budget.svm_iteration_seconds(
        options.folds * per_fold, fold_rows, classes, precomputed=True
    )


def _result(
    X: sp.csr_matrix,
    y: np.ndarray,
    tuned: _Tuned,
    runs: list[_Fold],
    stopped_early: bool,
    options: ExactOptions,
    t0: float,
) -> CheckerResult:
    """The repeats averaged per row into a CheckerResult, with the JSON's facts in ``info``."""
    scoring = options.scoring
    rbf_pts, lin_pts = _averaged(runs)
    correct, reference = rbf_pts.correct, lin_pts.correct
    repeat_gaps = [
        scoring.gap(y, *_averaged([f])).value
        if scoring.metric != "accuracy"
        # Plain accuracy keeps its exact per-repeat difference of means.
        else float(f.rbf.mean() - f.lin.mean())
        for f in runs
    ]
    chosen, search = tuned.chosen, tuned.search
    classes = int(np.unique(y).size)
    on_all_rows = _OnFirstUse(X, y, scoring.class_weight, chosen.C, chosen.gamma)
    best = search.scores[(search.log2_C, search.log2_gamma)]
    info: dict[str, Any] = {
        "C": chosen.C,
        "gamma": chosen.gamma,
        "log2_C": search.log2_C,
        "log2_gamma": round(search.log2_gamma, 6),
        "linear_C": chosen.linear_C,
        "folds": options.folds,
        "nested": options.nested(int(y.size)),
        "repeats": len(runs),
        "repeats_budgeted": tuned.most_repeats or options.max_repeats(int(y.size)),
        "stopped_early": stopped_early,
        "rows": int(y.size),
        "tune_rows": tuned.tune_rows,
        "grid_points": len(search.scores),
        "grid_passed_over": list(search.passed_over),
        "passed_over": list(tuned.passed_over),
        "median_sq_distance": tuned.median,
        "linear_cv_accuracy": tuned.linear_cv,
        "linear_accuracy": float(reference.mean()),
        "repeat_gaps": [round(float(g), 6) for g in repeat_gaps],
        "revised_seconds": round(
            _revised_seconds(tuned, int(y.size), int(X.nnz), classes, len(runs), options), 3
        ),
        # The tuning CV's score in the metric (balanced accuracy for balanced and auc).
        "cv_score": best / tuned.tune_rows if scoring.metric == "accuracy" else best,
    }
    return CheckerResult(
        name=NAME,
        status="exact",
        val_accuracy=float(correct.mean()),
        correct=correct,
        scores=rbf_pts.scores,
        seconds=time.perf_counter() - t0,
        info=info,
        predict=on_all_rows.predict,
        cv_accuracy=search.right[(search.log2_C, search.log2_gamma)] / tuned.tune_rows,
        reference_correct=reference,
        reference_scores=lin_pts.scores,
        truth=y,
    )


class _OnFirstUse:
    """The RBF model on all rows at the chosen (C, gamma), trained on first use (``--test``);
    answers as :class:`kcheck.bindings.engines.RbfModel`, with decision values for AUC."""

    def __init__(
        self,
        X: sp.csr_matrix,
        y: np.ndarray,
        weight: engines.ClassWeight | None,
        C: float,
        gamma: float,
    ) -> None:
        self._args = (X, y, weight, C, gamma)
        self._model: engines.RbfModel | None = None

    def model(self) -> engines.RbfModel:
        if self._model is None:
            X, y, weight, C, gamma = self._args
            self._model = engines.train_rbf(engines.SvmProblem.from_data(X, y, weight), C, gamma)
        return self._model

    @property
    def labels(self) -> np.ndarray:
        return self.model().labels

    def predict(self, X: sp.spmatrix) -> np.ndarray:
        return self.model().predict(X)

    def predict_scored(self, X: sp.spmatrix) -> tuple[np.ndarray, np.ndarray]:
        return self.model().predict_scored(X)


def _averaged(runs: list[_Fold]) -> tuple[PointResults, PointResults]:
    """Per-row results over repeats: the fraction right and the mean decision value."""

    def mean(parts: list[np.ndarray | None]) -> np.ndarray | None:
        return None if any(p is None for p in parts) else np.mean(np.asarray(parts), axis=0)

    return (
        PointResults(np.mean([f.rbf for f in runs], axis=0), mean([f.rbf_scores for f in runs])),
        PointResults(np.mean([f.lin for f in runs], axis=0), mean([f.lin_scores for f in runs])),
    )


def size(counts: Counts, allowed: Allowance, mode: str) -> Sized:
    """What exact mode will do on all rows in ``mode``, within the first measurement's counted
    budget (or the time left under ``--time-limit``, where less) and the memory limit."""
    budget_seconds, basis = allowed.bound()
    rows, nnz = counts.all_rows, counts.all_nnz
    classes = counts.all_classes or counts.n_classes
    options = ExactOptions(baseline_C=True)
    d = decide(
        rows,
        nnz,
        classes,
        options,
        budget_seconds=budget_seconds,
        memory_limit=allowed.memory_limit,
        mode=mode,
        basis=basis,
    )
    if not d.run:
        return Sized(0, d.reason, estimated_seconds=d.estimated_seconds, sizing=d)
    tune = d.tune_rows if d.tune_rows is not None else options.tune_rows
    chosen = dataclasses.replace(options, tune_rows=tune, nest=d.nest)
    spent = counted_seconds(rows, nnz, classes, chosen)
    repeat_budget = allowed.budget_seconds if mode == "auto" else None
    sizing = dataclasses.replace(d, repeat_budget=repeat_budget, counted_seconds=spent)
    return Sized(rows, d.reason, None, None, spent, spent, sizing=sizing)


def check_all(
    T: Dataset, V: Dataset, ctx: Context, sized: Sized
) -> tuple[dict[str, Any], CheckerResult | None]:
    """Run the exact comparison as the plan sized it: the JSON ``exact`` block and the result (or
    None)."""
    d = base.sizing_of(sized, ExactSizing)
    out: dict[str, Any] = {
        "mode": d.mode,
        "ran": d.run,
        "reason": d.reason,
        # Counted reference seconds (kcheck.costs.budget), the same on every machine.
        "estimated_seconds": d.estimated_seconds,
        "budget_seconds": d.budget_seconds,
    }
    if not d.run:
        return out, None
    opts = ExactOptions(
        baseline_C=True,
        seed=ctx.seed,
        jobs=ctx.jobs,
        memory_limit=ctx.memory_limit,
        deadline=ctx.deadline,
        epsilon=ctx.epsilon,
        scoring=ctx.scoring,
        budget_seconds=d.repeat_budget,
    )
    if d.tune_rows is not None:
        opts = dataclasses.replace(opts, tune_rows=d.tune_rows, nest=d.nest)
    # Stacked only where it runs: it copies all of the data.
    Xa = sp.vstack([T.X, V.X], format="csr")
    ya = np.concatenate([T.y, V.y])
    linear = Linear(ctx.baseline_C, ctx.linear().cv_accuracy)
    result = base.guarded(NAME, ctx.deadline, lambda: run(Xa, ya, opts, ctx.progress, linear))
    # What it spent of the check's budget, as the plan counted it (also ``always``).
    result.counted_seconds = d.counted_seconds or 0.0
    if result.status != "exact":
        out.update(ran=False, reason=f"{d.reason}; then {result.reason}")
    return out, result
