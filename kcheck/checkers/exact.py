"""Exact mode: on small data, run the real RBF-versus-linear comparison instead of the proxies.

With a few hundred rows, V holds about a hundred points, a 2% gap is one or two of them, and
the proxies' verdict is close to a coin toss. An RBF grid search on that many rows takes
seconds, so there the comparison itself is cheaper than being wrong.

The comparison (:func:`run`), on all training rows (T and V together, scaled):

1. (C, gamma) of the RBF SVM: ``folds``-fold CV (LIBSVM) at every point of the grid; the
   highest count of correct predictions wins, ties to the smaller C, then the smaller gamma
   (:func:`kcheck.models.best_point`).
2. C of the linear model: LIBLINEAR's warm-start ``-C`` search (``-s 2 -B 1``), as the baseline.
3. Both models, with those parameters, in our own seeded, stratified ``folds``-fold split,
   repeated ``repeats`` times with different fold assignments: every row is predicted once per
   repeat by each model, trained without it.

The result's ``correct`` and ``reference_correct`` hold, per row, the fraction of repeats in
which the RBF and the linear model predicted that row right (floats in [0, 1], one entry per
row, in row order). The pipeline's paired interval (:func:`kcheck.verdict.paired_gap`) then
treats each row once: its mean is the gap averaged over repeats, and its spread comes from the
per-row differences. Concatenating the repeats instead would count each row ``repeats`` times
as if the copies were independent, and shrink the interval by about sqrt(repeats) for nothing.
How to read the interval: it is the usual normal interval for a CV accuracy difference. It
covers the variation from which rows the data set happens to hold; it ignores the variation
from training on different folds, which CV cannot estimate without bias (Bengio & Grandvalet,
JMLR 2004), so it is somewhat too narrow. ``info["repeat_gaps"]`` lists the gap of every repeat
so that the fold-assignment part of the spread is visible.

The parameters are chosen on the same rows the comparison then scores, so both models are
scored slightly optimistically; the RBF model (a maximum over the grid) more than the linear
one (one C). Step 3's folds differ from those of the selection, which halves that optimism: on
ten 300-row sets with a linear truth the gap averaged +0.005 (at most +0.018, never "kernel"),
where the grid's best CV accuracy minus the linear CV accuracy averaged +0.011 (see
``scripts/results/exact.md``).

When it is cheap (:func:`should_run`, mode ``auto``), with budget = max(``AUTO_SECONDS`` (5 s),
``LINEAR_FACTOR`` (3) x the linear baseline's seconds):

* never when the data is obviously too large, and then without probing: more than ``MAX_ROWS``
  (5,000) rows; rows x stored values above ``MAX_WORK`` (2e8); or a size-only estimate
  (``PRIOR_SECONDS_PER_WORK`` = 1e-6 s per row x stored value; measured runs took 0.15-2.7x
  that) over ``PRIOR_MARGIN`` (10) x the budget. With the 5 s floor that last rule already
  refuses rows x stored values above 5e7 (german.numer is 1.8e7 and takes 6-12 s);
* otherwise :func:`estimate_seconds` times a ``folds``-fold CV at five grid points (the middle
  one and an X around it, :func:`probe_points`) on the data, or on a stratified sample of
  ``PROBE_ROWS`` (1,000) rows scaled by (rows / 1,000)^2. Their mean, times (grid points +
  repeats), times ``PROBE_FACTOR`` (0.9), is the estimate; jobs > 1 divide it (only as far
  as cores are idle, :func:`idle_cores`) and add ``POOL_SECONDS``. On eleven measured sets
  the actual time was 0.5-1.2x the estimate. The probe costs about 5/69 of the run it
  decides on; when the middle point alone puts the estimate over ``EARLY_STOP`` (3) x the
  budget, the other four are not timed;
* it runs when the estimate is within the budget.

In practice: heart_scale (270 rows), 249-row digits tasks and fourclass (862) run, in 0.5-3 s;
german.numer (1,000 rows x 24 dense features, 6-12 s) and svmguide1 (3,089 rows, 12 s) do not,
unless asked for.

The measured estimates, actual times and verdicts are in ``scripts/results/exact.md``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck import engines, models
from kcheck.checkers.base import CheckerResult
from kcheck.errors import TimeLimitReached
from kcheck.split import stratified_subsample
from kcheck.workers import end_pool, process_pool

#: progress(stage, done, total), as in the pipeline.
Progress = Callable[[str, int | None, int | None], None]

NAME = "rbf"
MODES = ("auto", "always", "never")

#: The default grid: log2 C in -3..11 and log2 gamma in 3..-11, both in steps of 2 (64 points).
#: grid.py's grid (log2 C -5..15, log2 gamma 3..-15, 110 points) with the corners cut that never
#: won on the measured sets and cost the most: C = 2^13, 2^15 train up to 30x slower than the
#: middle of the grid, and C = 2^-5 or gamma below 2^-11 only ever tie a larger point. On
#: heart_scale, fourclass, german.numer and two digits tasks the best CV accuracy on this grid is
#: within one row of grid.py's (see scripts/results/exact.md).
DEFAULT_GRID = models.Grid(
    log2_C=tuple(float(v) for v in range(-3, 12, 2)),
    log2_gamma=tuple(float(v) for v in range(3, -12, -2)),
)
#: No probe, and no exact mode in ``auto``, above this many rows ...
MAX_ROWS = 5_000
#: ... or above this many rows x stored values.
MAX_WORK = 2e8
#: Seconds of the whole comparison (default grid, one repeat) per row x stored value; used only
#: without a probe. The measured runs took 0.15-2.7 times this.
PRIOR_SECONDS_PER_WORK = 1e-6
#: ``auto`` does not probe when that prior estimate exceeds this multiple of the budget: no
#: measured run was 10x faster than the prior.
PRIOR_MARGIN = 10.0
#: The probe runs on at most this many rows (a stratified sample) ...
PROBE_ROWS = 1_000
#: ... and its time is scaled by (rows / probe rows) ** SCALE_EXPONENT: kernel evaluations
#: grow as rows^2. From 1,000 to 2,000-5,000 rows a CV grew as rows^1.3 (letter) to rows^2.1
#: (dna), so above PROBE_ROWS the estimate errs long, by at most (5,000 / 1,000)^0.7 = 3x.
SCALE_EXPONENT = 2.0
#: A probe point's CV is repeated (median kept) while its runs total less than
#: PROBE_MIN_SECONDS, at most PROBE_RUNS times: a few milliseconds on a busy machine are noise.
PROBE_RUNS = 3
PROBE_MIN_SECONDS = 0.02
#: Seconds of the whole run per probed second (mean over the probe points, per grid point or
#: repeat): covers the grid points between the probed ones, the repeats and the linear C
#: search. Measured 0.45-1.09 on eleven sets (median 0.91), so the estimate is at most about
#: 20% short and up to 2x long.
PROBE_FACTOR = 0.9
#: The same from the middle point alone (it is cheaper than the grid's mean on most sets) ...
MIDDLE_FACTOR = 1.33
#: ... used only to stop probing when it puts the estimate over EARLY_STOP x the budget.
EARLY_STOP = 3.0
#: Seconds to start a worker pool (fork server, imports, one problem copy per worker): 0.46 s
#: measured for the first pool of a process, 0.04 s for later ones.
POOL_SECONDS = 0.5
#: ``auto`` runs the comparison when its estimate is within max(AUTO_SECONDS,
#: LINEAR_FACTOR x the linear baseline's seconds).
AUTO_SECONDS = 5.0
LINEAR_FACTOR = 3.0
#: Below this many rows x stored values, one process does the whole grid: starting workers
#: (about a second) would cost more than sharing the work saves.
MIN_PARALLEL_WORK = models.MIN_PARALLEL_WORK


def default_repeats(rows: int) -> int:
    """Repeats of the k-fold comparison: 5 below 1,000 rows, 3 below 2,000, 2 below 5,000, else 1.

    A repeat costs about one grid point (one k-fold training at the chosen parameters), so five
    add under a tenth to the 64-point grid. What they buy: the gap of one fold assignment has a
    standard deviation of 0.4-1.2 points on measured sets of 250-1,000 rows, 0.64-0.88 of the
    interval's own standard error (german.numer's 1,000 rows as much as 250; fourclass, whose
    gap is 21 points, was the exception), and 0.2-0.3 points at 2,000 rows (0.44-0.55 of it).
    Averaging r assignments divides it by sqrt(r). See scripts/results/exact.md.
    """
    if rows < 1_000:
        return 5
    if rows < 2_000:
        return 3
    if rows < 5_000:
        return 2
    return 1


@dataclass(frozen=True)
class ExactOptions:
    """``repeats`` None: :func:`default_repeats`; ``grid`` None: :data:`DEFAULT_GRID`.

    ``jobs`` > 1 shares the grid points and repeats among worker processes; the result does not
    depend on it.
    """

    seed: int = 0
    jobs: int = 1
    folds: int = 5
    repeats: int | None = None
    grid: models.Grid | None = None
    #: A ``time.perf_counter()`` value; past it, :func:`run` raises TimeLimitReached between
    #: grid points and repeats (as the pipeline's ``--time-limit`` expects of a checker).
    deadline: float | None = None

    def resolved_repeats(self, rows: int) -> int:
        return self.repeats if self.repeats is not None else default_repeats(rows)

    def resolved_grid(self) -> models.Grid:
        return self.grid if self.grid is not None else DEFAULT_GRID


def _noop(stage: str, done: int | None, total: int | None) -> None:
    return None


# --- cost ----------------------------------------------------------------------------------------


def _work(X: sp.spmatrix) -> float:
    return float(X.shape[0]) * float(X.nnz)


def too_large(X: sp.spmatrix) -> str | None:
    """Why the data is too large for exact mode without looking further, or None."""
    rows = int(X.shape[0])
    if rows > MAX_ROWS:
        return f"too large: {rows:,} rows (exact mode considers at most {MAX_ROWS:,})"
    if _work(X) > MAX_WORK:
        return (
            f"too large: {rows:,} rows x {int(X.nnz):,} stored values = {_work(X):.2g} "
            f"(exact mode considers at most {MAX_WORK:.0e})"
        )
    return None


def probe_points(grid: models.Grid) -> list[tuple[float, float]]:
    """The grid points the probe times: the middle one, then an X around it.

    With the sorted log2 C values c and log2 gamma values g (n of each): the middle point
    (c[n/2], g[n/2]), then (c[n/4] or c[3n/4], g[n/4] or g[3n/4]). On the default grid: (5, -3),
    then (1, -7), (1, 1), (9, -7), (9, 1). Their mean time, times 64, was within 0.87-1.28 of the
    whole grid's on eleven measured sets; the middle point alone was within 0.69-1.95.
    """
    cs, gs = sorted(set(grid.log2_C)), sorted(set(grid.log2_gamma))

    def at(v: list[float], f: float) -> float:
        return v[min(len(v) - 1, int(len(v) * f))]

    out = [(at(cs, 0.5), at(gs, 0.5))]
    for fc in (0.25, 0.75):
        for fg in (0.25, 0.75):
            p = (at(cs, fc), at(gs, fg))
            if p not in out:
                out.append(p)
    return out


def estimate_seconds(
    X: sp.spmatrix,
    y: np.ndarray,
    options: ExactOptions,
    *,
    probe: bool = True,
    stop_above: float | None = None,
) -> float:
    """Estimated seconds of :func:`run` on (X, y): grid search, C search and repeats.

    Without ``probe``: PRIOR_SECONDS_PER_WORK x rows x stored values, scaled to the grid size
    and repeats. With ``probe``: ``folds``-fold CV is timed at the :func:`probe_points`, on a
    stratified sample of at most PROBE_ROWS rows, and their mean time is scaled by
    (rows / sample)^SCALE_EXPONENT, the number of grid points plus repeats, and PROBE_FACTOR.
    When the middle point alone already puts the estimate over EARLY_STOP x ``stop_above``,
    the other points are not timed and that first estimate is returned.
    """
    rows = int(X.shape[0])
    grid = options.resolved_grid()
    points = grid.max_points
    repeats = options.resolved_repeats(rows)
    units = points + repeats  # runs of about one grid point's cost each
    jobs = min(_effective_jobs(X, options.jobs, points), idle_cores())

    def total(serial: float) -> float:
        return serial / jobs + POOL_SECONDS if jobs > 1 else serial

    if not probe or rows < options.folds:
        default_units = DEFAULT_GRID.max_points + 1
        return total(PRIOR_SECONDS_PER_WORK * _work(X) * units / default_units)
    Xb = engines.as_binding_csr(X)
    yb = np.asarray(y, dtype=np.float64)
    if rows > PROBE_ROWS:
        keep = stratified_subsample(yb, PROBE_ROWS, seed=options.seed)
        Xb, yb = Xb[keep], yb[keep]
    scale = (rows / yb.size) ** SCALE_EXPONENT * units
    first, *others = probe_points(grid)
    seconds = [_time_cv(Xb, yb, first, options)]
    if stop_above is not None:
        early = total(seconds[0] * scale * MIDDLE_FACTOR)
        if early > EARLY_STOP * stop_above:
            return early
    seconds += [_time_cv(Xb, yb, p, options) for p in others]
    return total(float(np.mean(seconds)) * scale * PROBE_FACTOR)


def _time_cv(
    X: sp.csr_matrix, y: np.ndarray, point: tuple[float, float], options: ExactOptions
) -> float:
    """Seconds of one k-fold CV at ``point``, problem building included.

    A run that takes well under PROBE_MIN_SECONDS is repeated (up to PROBE_RUNS times) and
    the median kept: on a loaded machine one run of a few milliseconds is mostly noise.
    """
    times: list[float] = []
    while len(times) < PROBE_RUNS and sum(times) < PROBE_MIN_SECONDS:
        t0 = time.perf_counter()
        problem = engines.SvmProblem.from_data(X, y)
        engines.cv_rbf(problem, 2.0 ** point[0], 2.0 ** point[1], folds=options.folds,
                       seed=options.seed)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def idle_cores() -> int:
    """Cores this process may use minus the 1-minute load average (at least 1).

    The estimate credits ``jobs`` only with cores that are idle: on a 2-core machine with a load
    of 2.5, two workers took longer than one process (german.numer: 11.4 s against 9.5 s).
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return max(1, int(cores - load + 0.5))


def _effective_jobs(X: sp.spmatrix, jobs: int, points: int) -> int:
    jobs = max(1, min(jobs, points))
    if _work(X) < MIN_PARALLEL_WORK:
        return 1
    return jobs


@dataclass(frozen=True)
class RunDecision:
    """Whether to run, why (a sentence without measured numbers, so the JSON stays the same
    from run to run), and the estimate and budget behind it (timing fields)."""

    run: bool
    reason: str
    estimated_seconds: float | None = None
    budget_seconds: float | None = None

    def text(self) -> str:
        if self.estimated_seconds is None or self.budget_seconds is None:
            return self.reason
        return (f"{self.reason}: estimated {self.estimated_seconds:.1f}s, budget "
                f"{self.budget_seconds:.1f}s")


def decide_run(
    X: sp.spmatrix,
    y: np.ndarray,
    options: ExactOptions,
    *,
    linear_seconds: float,
    mode: str,
) -> RunDecision:
    """Whether to run the exact comparison, and why.

    ``never`` and ``always`` decide alone. ``auto`` refuses obviously large data without a probe
    (:func:`too_large`), then runs when :func:`estimate_seconds` is within the budget,
    max(AUTO_SECONDS, LINEAR_FACTOR x ``linear_seconds``), or within the time left before
    ``options.deadline`` when that is less.
    """
    if mode not in MODES:
        raise ValueError(f"exact mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "never":
        return RunDecision(False, "exact mode is off")
    if mode == "always":
        return RunDecision(True, "exact mode requested")
    large = too_large(X)
    if large is not None:
        return RunDecision(False, large)
    budget = max(AUTO_SECONDS, LINEAR_FACTOR * linear_seconds)
    basis = f"the larger of {AUTO_SECONDS:g}s and {LINEAR_FACTOR:g}x the linear model's time"
    if options.deadline is not None:
        left = options.deadline - time.perf_counter()
        if left <= 0.0:
            return RunDecision(False, "time limit")
        if left < budget:
            budget, basis = left, "the time left before the time limit"
    prior = estimate_seconds(X, y, options, probe=False)
    if prior > PRIOR_MARGIN * budget:
        return RunDecision(
            False,
            f"too large: a size-based estimate is over {PRIOR_MARGIN:g}x the budget ({basis})",
            prior,
            budget,
        )
    estimate = estimate_seconds(X, y, options, probe=True, stop_above=budget)
    within = estimate <= budget
    return RunDecision(
        within,
        f"a timed probe puts it {'within' if within else 'over'} the budget ({basis})",
        estimate,
        budget,
    )


def should_run(
    X: sp.spmatrix,
    y: np.ndarray,
    options: ExactOptions,
    *,
    linear_seconds: float,
    mode: str,
) -> tuple[bool, str]:
    """:func:`decide_run` as (run?, a sentence with the numbers)."""
    d = decide_run(X, y, options, linear_seconds=linear_seconds, mode=mode)
    return d.run, d.text()


# --- the comparison ------------------------------------------------------------------------------


def stratified_folds(y: np.ndarray, folds: int, seed: int, repeat: int) -> np.ndarray:
    """Fold number (0..folds-1) of every row; each class is spread over the folds evenly.

    Rows are shuffled within each class, the classes are laid end to end, and folds are dealt
    round-robin along that order: fold sizes differ by at most one, and so do a class's counts
    in different folds. Repeat r of seed s draws from SeedSequence([s, r]).
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed & 0xFFFFFFFF, repeat]))
    _, inverse = np.unique(np.asarray(y), return_inverse=True)
    order = np.concatenate(
        [rng.permutation(np.flatnonzero(inverse == c)) for c in range(int(inverse.max()) + 1)]
    )
    fold = np.empty(order.size, dtype=np.intp)
    fold[order] = np.arange(order.size) % folds
    return fold


@dataclass(frozen=True)
class _Chosen:
    C: float
    gamma: float
    linear_C: float


def _repeat(
    X: sp.csr_matrix, y: np.ndarray, chosen: _Chosen, folds: int, seed: int, repeat: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row correctness of the RBF and the linear model in one k-fold assignment."""
    fold = stratified_folds(y, folds, seed, repeat)
    rbf = np.zeros(y.size, dtype=bool)
    lin = np.zeros(y.size, dtype=bool)
    for k in range(folds):
        test = np.flatnonzero(fold == k)
        if test.size == 0:
            continue
        train = np.flatnonzero(fold != k)
        Xtr, ytr, Xte = X[train], y[train], X[test]
        svm = engines.train_rbf(engines.SvmProblem.from_data(Xtr, ytr), chosen.C, chosen.gamma)
        rbf[test] = svm.predict(Xte) == y[test]
        lin_model, _ = engines.fit_linear(Xtr, ytr, seed=seed, C=chosen.linear_C)
        lin[test] = lin_model.predict(Xte) == y[test]
    return rbf, lin


_WORKER: dict[str, Any] = {}


def _init_worker(X: sp.csr_matrix, y: np.ndarray) -> None:
    _WORKER["X"] = X
    _WORKER["y"] = y
    _WORKER["problem"] = engines.SvmProblem.from_data(X, y)


def _worker_cv(log2_C: float, log2_gamma: float, folds: int, seed: int) -> int:
    return engines.cv_rbf(_WORKER["problem"], 2.0**log2_C, 2.0**log2_gamma, folds=folds, seed=seed)


def _worker_repeat(
    chosen: _Chosen, folds: int, seed: int, repeat: int
) -> tuple[np.ndarray, np.ndarray]:
    return _repeat(_WORKER["X"], _WORKER["y"], chosen, folds, seed, repeat)


class _Runner:
    """Grid points and repeats, in this process or in worker processes.

    Every task seeds what it draws from (LIBSVM's ``rand()`` through engines, the fold
    assignment through its SeedSequence), and results are kept by key, so the outcome does not
    depend on the number of jobs or on the order in which tasks finish.
    """

    def __init__(self, X: sp.csr_matrix, y: np.ndarray, jobs: int) -> None:
        self.X, self.y = X, y
        self.pool: ProcessPoolExecutor | None = None
        self.problem: engines.SvmProblem | None = None
        if jobs > 1:
            self.pool = process_pool(
                jobs, ["kcheck.engines", "kcheck.checkers.exact"], _init_worker, (X, y)
            )
        else:
            self.problem = engines.SvmProblem.from_data(X, y)

    def grid(
        self,
        points: list[tuple[float, float]],
        folds: int,
        seed: int,
        on_done: Callable[[tuple[float, float], int], None],
    ) -> None:
        # Large C and small gamma train slowest; starting them first balances the workers.
        todo = sorted(points, key=lambda p: (-p[0], p[1]))
        if self.pool is None:
            assert self.problem is not None
            for c, g in todo:
                on_done((c, g), engines.cv_rbf(self.problem, 2.0**c, 2.0**g, folds=folds,
                                               seed=seed))
            return
        futures = {self.pool.submit(_worker_cv, c, g, folds, seed): (c, g) for c, g in todo}
        for fut in as_completed(futures):
            on_done(futures[fut], fut.result())

    def repeats(
        self,
        chosen: _Chosen,
        folds: int,
        seed: int,
        repeats: int,
        on_done: Callable[[int, tuple[np.ndarray, np.ndarray]], None],
    ) -> None:
        if self.pool is None:
            for r in range(repeats):
                on_done(r, _repeat(self.X, self.y, chosen, folds, seed, r))
            return
        futures: dict[Future[tuple[np.ndarray, np.ndarray]], int] = {
            self.pool.submit(_worker_repeat, chosen, folds, seed, r): r for r in range(repeats)
        }
        for fut in as_completed(futures):
            on_done(futures[fut], fut.result())

    def close(self, *, abort: bool = False) -> None:
        if self.pool is not None:
            if abort:
                end_pool(self.pool)
            else:
                self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


def run(
    X: sp.spmatrix, y: np.ndarray, options: ExactOptions, progress: Progress | None = None
) -> CheckerResult:
    """The exact comparison on all training rows (scaled); a CheckerResult named ``rbf``.

    ``correct`` / ``reference_correct``: per row, the fraction of repeats in which the RBF /
    the linear model predicted it right (see the module docstring for how the pipeline's
    interval on them reads). ``val_accuracy`` is the RBF's mean, ``cv_accuracy`` its best grid
    CV accuracy. ``predict`` trains the RBF model on all rows on first use.
    """
    t0 = time.perf_counter()
    report = progress or _noop
    Xb = engines.as_binding_csr(X)
    yb = np.asarray(y, dtype=np.float64)
    rows = int(yb.size)
    folds = options.folds
    if folds < 2:
        raise ValueError("exact mode needs at least 2 folds")
    if rows < 2 * folds:
        return CheckerResult.skipped(
            NAME, f"{rows} rows are too few for {folds}-fold cross-validation",
            time.perf_counter() - t0,
        )
    grid = options.resolved_grid()
    coarse = grid.coarse
    if not coarse:
        raise ValueError("the RBF grid is empty")
    repeats = options.resolved_repeats(rows)
    if repeats < 1:
        raise ValueError("exact mode needs at least one repeat")
    seed = options.seed
    stage = "exact comparison"
    total = [grid.max_points + repeats]
    report(stage, 0, total[0])

    def check_time() -> None:
        if options.deadline is not None and time.perf_counter() >= options.deadline:
            raise TimeLimitReached("exact comparison")

    check_time()
    linear_model, linear_cv = engines.fit_linear(Xb, yb, seed=seed)
    linear_C = linear_model.C
    check_time()

    scores: dict[tuple[float, float], int] = {}

    def grid_done(point: tuple[float, float], correct: int) -> None:
        scores[point] = correct
        report(stage, len(scores), total[0])
        check_time()

    runner = _Runner(Xb, yb, _effective_jobs(Xb, options.jobs, len(coarse)))
    rbf_rows = np.zeros((repeats, rows), dtype=bool)
    lin_rows = np.zeros((repeats, rows), dtype=bool)
    try:
        runner.grid(coarse, folds, seed, grid_done)
        if grid.refine:
            fine = [p for p in grid.refined(models.best_point(scores)) if p not in scores]
            total[0] = len(scores) + len(fine) + repeats
            runner.grid(fine, folds, seed, grid_done)
        log2_C, log2_gamma = models.best_point(scores)
        chosen = _Chosen(float(2.0**log2_C), float(2.0**log2_gamma), linear_C)
        finished = [0]

        def repeat_done(r: int, result: tuple[np.ndarray, np.ndarray]) -> None:
            rbf_rows[r], lin_rows[r] = result
            finished[0] += 1
            report(stage, len(scores) + finished[0], total[0])
            check_time()

        runner.repeats(chosen, folds, seed, repeats, repeat_done)
    except BaseException:
        runner.close(abort=True)
        raise
    runner.close()

    correct = rbf_rows.mean(axis=0)
    reference = lin_rows.mean(axis=0)
    repeat_gaps = rbf_rows.mean(axis=1) - lin_rows.mean(axis=1)
    cache: dict[str, engines.RbfModel] = {}

    def predict(Xp: sp.spmatrix) -> np.ndarray:
        if "model" not in cache:
            cache["model"] = engines.train_rbf(
                engines.SvmProblem.from_data(Xb, yb), chosen.C, chosen.gamma
            )
        return cache["model"].predict(Xp)

    info: dict[str, Any] = {
        "C": chosen.C,
        "gamma": chosen.gamma,
        "linear_C": linear_C,
        "folds": folds,
        "repeats": repeats,
        "rows": rows,
        "grid_points": len(scores),
        "linear_cv_accuracy": linear_cv,
        "linear_accuracy": float(reference.mean()),
        "repeat_gaps": [round(float(g), 6) for g in repeat_gaps],
    }
    return CheckerResult(
        name=NAME,
        status="exact",
        val_accuracy=float(correct.mean()),
        correct=correct,
        seconds=time.perf_counter() - t0,
        info=info,
        predict=predict,
        cv_accuracy=scores[(log2_C, log2_gamma)] / rows,
        reference_correct=reference,
    )
