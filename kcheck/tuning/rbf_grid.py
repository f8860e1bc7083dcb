"""The RBF grid search: grid.py's grid, its refinement, the tie-break and one process pool.

``kcheck verify`` runs grid.py's grid as the reference; ``--model-out --model kernel`` adds a
refinement around the best point, or climbs from the check's tuned (C, gamma) (:attr:`Grid.start`).
All go through :func:`rbf_grid_search` and share grid, seeds, tie-break and runner.
:func:`search_seconds` predicts a search's time from counts; progress events carry an estimate from
the points done."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck.bindings import engines
from kcheck.costs import budget
from kcheck.defaults import FOLDS, Event, Progress, no_progress
from kcheck.errors import KcheckError
from kcheck.memory import csr_bytes, size_text
from kcheck.metrics import balanced_accuracy
from kcheck.parallel.cluster import Session
from kcheck.parallel.workers import process_pool

#: Below this many rows x values (a point's flops), worker processes cost more than they save.
MIN_PARALLEL_WORK = 1_000_000
#: What a search's progress counts.
GRID_POINTS = "grid points"


@dataclass(frozen=True)
class Grid:
    """The (log2 C, log2 gamma) points of an RBF search.

    Default: grid.py's, log2 C from -5 to 15 and log2 gamma from 3 to -15, in steps of 2.
    ``refine``: a second pass over the best point +- ``radius`` in steps of ``step`` (clipped to the
    coarse bounds), as accuracy often peaks between the coarse points.

    With a ``start`` (a check's tuned point), climb instead: the start and its four neighbours
    ``climb[0]`` apart, then the best point's neighbours while one improves, then each smaller step
    of ``climb``; at most ``climb_limit`` points. Bounds: the coarse grid's, widened to hold the
    start and its first neighbours."""

    log2_C: tuple[float, ...] = tuple(float(v) for v in range(-5, 16, 2))
    log2_gamma: tuple[float, ...] = tuple(float(v) for v in range(3, -16, -2))
    refine: bool = False
    radius: float = 1.0
    step: float = 0.5
    start: tuple[float, float] | None = None
    climb: tuple[float, ...] = (2.0, 1.0, 0.5)
    climb_limit: int = 40

    @property
    def coarse(self) -> list[tuple[float, float]]:
        return [(c, g) for c in self.log2_C for g in self.log2_gamma]

    def refined(self, centre: tuple[float, float]) -> list[tuple[float, float]]:
        """Points around ``centre`` inside the coarse bounds (the centre included)."""
        k = int(round(self.radius / self.step))
        offsets = [i * self.step for i in range(-k, k + 1)]
        lo_c, hi_c = min(self.log2_C), max(self.log2_C)
        lo_g, hi_g = min(self.log2_gamma), max(self.log2_gamma)
        return [
            (centre[0] + dc, centre[1] + dg)
            for dc in offsets
            for dg in offsets
            if lo_c <= centre[0] + dc <= hi_c and lo_g <= centre[1] + dg <= hi_g
        ]

    def starting_at(self, point: tuple[float, float]) -> Grid:
        """This grid's bounds, climbing from ``point`` (log2 C, log2 gamma)."""
        c, g = (round(float(v), 6) for v in point)
        return dataclasses.replace(self, start=(c, g), refine=False)

    @property
    def bounds(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """((lowest, highest) log2 C, (lowest, highest) log2 gamma) that a climb stays within."""
        lo_c, hi_c = min(self.log2_C), max(self.log2_C)
        lo_g, hi_g = min(self.log2_gamma), max(self.log2_gamma)
        if self.start is not None:
            c, g = self.start
            first = self.climb[0] if self.climb else 0.0
            lo_c, hi_c = min(lo_c, c), max(hi_c, c)
            lo_g, hi_g = min(lo_g, g - first), max(hi_g, g + first)
        return (lo_c, hi_c), (lo_g, hi_g)

    def neighbours(self, centre: tuple[float, float], step: float) -> list[tuple[float, float]]:
        """The points ``step`` from ``centre`` in log2 C or log2 gamma, within the bounds."""
        (lo_c, hi_c), (lo_g, hi_g) = self.bounds
        c, g = centre
        points = [(c + step, g), (c - step, g), (c, g + step), (c, g - step)]
        return [
            (round(pc, 6), round(pg, 6))
            for pc, pg in points
            if lo_c <= pc <= hi_c and lo_g <= pg <= hi_g
        ]

    @property
    def first_points(self) -> list[tuple[float, float]]:
        """What the search scores first: the coarse grid, or the start and its neighbours."""
        if self.start is None:
            return self.coarse
        if not self.climb:
            return [self.start]
        return [self.start, *self.neighbours(self.start, self.climb[0])]

    @property
    def max_points(self) -> int:
        if self.start is not None:
            return self.climb_limit
        k = int(round(self.radius / self.step))
        return len(self.coarse) + ((2 * k + 1) ** 2 - 1 if self.refine else 0)

    @property
    def expected_points(self) -> int:
        """Points a search is predicted to score: all of a grid's; a climb's first five, four more
        per smaller step, and :data:`CLIMB_MOVES` moves of three."""
        if self.start is None:
            return self.max_points
        expected = 5 + 4 * (len(self.climb) - 1) + 3 * CLIMB_MOVES
        return min(expected, self.climb_limit)


#: Moves a climb is predicted to make (about three new points each); scripts/results/model.md.
CLIMB_MOVES = 1


#: grid.py's grid, as ``kcheck verify`` runs it.
GRID = Grid()
#: The export search: grid.py's grid, then a refinement around its best point.
EXPORT_GRID = Grid(refine=True)


@dataclass
class GridResult:
    """The chosen point and every point's CV result: rows right, or balanced accuracy."""

    log2_C: float
    log2_gamma: float
    correct: float
    rows: int
    scores: dict[tuple[float, float], float]
    balanced: bool = False

    @property
    def C(self) -> float:
        return float(2.0**self.log2_C)

    @property
    def gamma(self) -> float:
        return float(2.0**self.log2_gamma)

    @property
    def cv_accuracy(self) -> float:
        """The chosen point's CV score: accuracy, or balanced accuracy with ``balanced``."""
        return self.correct if self.balanced else self.correct / self.rows

    @property
    def points(self) -> int:
        return len(self.scores)


def best_point(scores: Mapping[tuple[float, float], float]) -> tuple[float, float]:
    """Highest CV count; ties to the smaller C, then the smaller gamma: the smoother model (and
    faster), by the scores alone, never by finishing order."""
    return min(scores, key=lambda p: (-scores[p], p[0], p[1]))


_WORKER: dict[str, Any] = {}
#: What a LIBSVM problem is built from (rows, labels, class weights, cache MB), sent once.
_Data = tuple[sp.csr_matrix, np.ndarray, engines.ClassWeight | None, float]
#: What is told each grid point's (log2 C, log2 gamma) and its CV score, as it comes.
_OnScore = Callable[[tuple[float, float], float], None]


def _init_worker(
    X: sp.csr_matrix,
    y: np.ndarray,
    class_weight: engines.ClassWeight | None = None,
    cache_mb: float = engines.SVM_CACHE_MB,
) -> None:
    """Build the LIBSVM problem once per worker process; every grid point reuses it."""
    _WORKER["problem"] = engines.SvmProblem.from_data(X, y, class_weight, cache_mb)


def _cv_point(
    log2_C: float, log2_gamma: float, cv_args: dict[str, Any]
) -> tuple[float, float, float]:
    return log2_C, log2_gamma, _cv_point_with(_WORKER["problem"], log2_C, log2_gamma, cv_args)


def _cluster_point(
    token: str,
    data: _Data,
    log2_C: float,
    log2_gamma: float,
    cv_args: dict[str, Any],
) -> tuple[float, float, float]:
    """A grid point on a cluster worker; the LIBSVM problem is built once per worker and run."""
    if _WORKER.get("token") != token:
        _WORKER.clear()
        _WORKER["problem"] = engines.SvmProblem.from_data(*data)
        _WORKER["token"] = token
    return _cv_point(log2_C, log2_gamma, cv_args)


def _cv_point_with(
    problem: engines.SvmProblem, log2_C: float, log2_gamma: float, cv_args: dict[str, Any]
) -> float:
    """A grid point's CV score: rows right, or balanced accuracy (rounded, so ties are exact)."""
    args = dict(cv_args)
    balanced = bool(args.pop("balanced", False))
    C, gamma = 2.0**log2_C, 2.0**log2_gamma
    if not balanced:
        return engines.cv_rbf(problem, C, gamma, **args)
    predicted = engines.cv_rbf_predictions(problem, C, gamma, **args)
    return round(balanced_accuracy(problem.y, predicted), 12)


def _slowest_first(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Large C and small gamma train slowest; starting them first balances the workers."""
    return sorted(points, key=lambda p: (-p[0], p[1]))


class _Evaluator:
    """Runs CV at grid points, in this process or a pool of worker processes (not threads: LIBSVM
    draws folds from the process-wide ``rand()``, which each task seeds, so scheduling never changes
    folds). ``cv_args``: :func:`engines.cv_rbf`'s keyword arguments."""

    def __init__(self, data: _Data, cv_args: dict[str, Any], jobs: int) -> None:
        self.cv_args = cv_args
        self.jobs = jobs
        self.pool: ProcessPoolExecutor | None = None
        if jobs > 1:
            modules = ["kcheck.bindings.engines", "kcheck.tuning.rbf_grid"]
            self.pool = process_pool(jobs, modules, _init_worker, data)
        else:
            self.problem = engines.SvmProblem.from_data(*data)

    def run(self, points: Iterable[tuple[float, float]], on_done: _OnScore) -> None:
        todo = _slowest_first(points)
        if self.pool is None:
            for c, g in todo:
                on_done((c, g), _cv_point_with(self.problem, c, g, self.cv_args))
            return
        futures: list[Future[tuple[float, float, float]]] = [
            self.pool.submit(_cv_point, c, g, self.cv_args) for c, g in todo
        ]
        try:
            for fut in as_completed(futures):
                c, g, correct = fut.result()
                on_done((c, g), correct)
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


class _ClusterEvaluator:
    """Runs CV at grid points on Dask (:mod:`kcheck.parallel.cluster`), a task a point: rows sent
    once, problems built once per worker; same points, seeds, scores as local."""

    def __init__(self, data: _Data, cv_args: dict[str, Any], scheduler: str) -> None:
        self.cv_args = cv_args
        self.session = Session(scheduler)
        try:
            self.data = self.session.scatter(data)
        except BaseException:
            self.session.close()
            raise
        self.token = self.session.run_id
        self.submitted = 0  # task numbers go on across runs (a refinement is a second run)

    def run(self, points: Iterable[tuple[float, float]], on_done: _OnScore) -> None:
        todo = _slowest_first(points)
        first, self.submitted = self.submitted, self.submitted + len(todo)
        futures = {
            self.session.submit(
                first + i, _cluster_point, self.token, self.data, c, g, self.cv_args
            ): i
            for i, (c, g) in enumerate(todo)
        }
        try:
            while futures:
                for i, value, error in self.session.finished(futures, timeout=0.5):
                    if error is not None:
                        c, g = todo[i]
                        raise KcheckError(
                            f"grid point log2 C {c:g}, log2 gamma {g:g} failed on the cluster: "
                            + " ".join((str(error) or type(error).__name__).split())
                        )
                    on_done((value[0], value[1]), value[2])
        finally:
            self.session.cancel(futures)

    def close(self) -> None:
        self.session.close()


def rbf_grid_search(
    X: sp.csr_matrix,
    y: np.ndarray,
    grid: Grid = GRID,
    *,
    seed: int = 0,
    jobs: int = 1,
    progress: Progress | None = None,
    stage: str = "RBF grid search",
    scheduler: str | None = None,
    class_weight: engines.ClassWeight | None = None,
    balanced: bool = False,
    memory: SearchMemory | None = None,
) -> GridResult:
    """5-fold CV of C-SVC with the RBF kernel at every grid point; returns the best point.

    ``class_weight``: LIBSVM's ``-wi``; ``balanced``: rank by CV balanced accuracy. ``scheduler``
    (``tcp://host:port`` or ``local:N``): run on a Dask cluster instead of ``jobs`` processes, same
    result. ``memory`` (:func:`search_memory`) bounds the local processes and each kernel cache.
    Progress counts points; after 1, 2, 4, 8, ... (from :data:`ESTIMATE_AFTER_SECONDS`) it carries
    and says the stage's predicted seconds (elapsed / done x points)."""
    report = progress or no_progress
    if y.size < FOLDS:
        raise KcheckError(f"{y.size} rows are too few for {FOLDS}-fold cross-validation")
    first = grid.first_points
    if not first:
        raise KcheckError("the RBF grid is empty")
    tally = _Tally(grid, stage, report)
    report(Event(stage, 0, tally.total, GRID_POINTS))
    Xb = engines.as_binding_csr(X)
    jobs, cache_mb = _processes(parallel_jobs(jobs, len(first), Xb), memory)
    evaluator = _evaluator(
        Xb,
        np.asarray(y, np.float64),
        _cv_args(seed, balanced),
        jobs=jobs,
        scheduler=scheduler,
        class_weight=class_weight,
        cache_mb=cache_mb,
    )
    try:
        evaluator.run(first, tally.done)
        if grid.start is not None:
            _climb(grid, tally.scores, evaluator.run, tally.done, tally.recount)
        elif grid.refine:
            fine = [p for p in grid.refined(best_point(tally.scores)) if p not in tally.scores]
            tally.recount(len(fine))
            evaluator.run(fine, tally.done)
    finally:
        evaluator.close()
    tally.finish()
    c, g = best_point(tally.scores)
    return GridResult(c, g, tally.scores[(c, g)], int(y.size), tally.scores, balanced)


class _Tally:
    """The points a search has scored, and the progress events that count them."""

    def __init__(self, grid: Grid, stage: str, report: Progress) -> None:
        self.grid = grid
        self.stage = stage
        self.report = report
        self.scores: dict[tuple[float, float], float] = {}
        self.total = grid.expected_points
        self.t0 = time.perf_counter()

    def done(self, point: tuple[float, float], correct: float) -> None:
        """A point scored: its score kept, and the progress (with an estimate) reported."""
        self.scores[point] = correct
        n = len(self.scores)
        self.total = max(self.total, n)
        self.report(_estimate(self.stage, n, self.total, time.perf_counter() - self.t0))

    def recount(self, pending: int) -> None:
        """The total once the points still to score are known."""
        scored = len(self.scores)
        self.total = (
            scored + pending if self.grid.start is None else max(self.total, scored + pending)
        )
        self.report(Event(self.stage, scored, self.total, GRID_POINTS))

    def finish(self) -> None:
        """A last event where the points scored were not the total last reported."""
        if self.total != len(self.scores):
            self.report(Event(self.stage, len(self.scores), len(self.scores), GRID_POINTS))


def _processes(jobs: int, memory: SearchMemory | None) -> tuple[int, float]:
    """The processes a search runs in and each one's kernel cache, within ``memory``."""
    cache_mb: float = engines.SVM_CACHE_MB
    if memory is not None:
        jobs = min(jobs, memory.jobs)
        cache_mb = memory.cache_mb if jobs > 1 else memory.alone_mb
    return jobs, cache_mb


def _cv_args(seed: int, balanced: bool) -> dict[str, Any]:
    """The CV's keyword arguments, the same at every grid point."""
    cv_args: dict[str, Any] = {"folds": FOLDS, "seed": seed}
    if balanced:
        cv_args["balanced"] = True
    return cv_args


def _evaluator(
    X: sp.csr_matrix,
    y: np.ndarray,
    cv_args: dict[str, Any],
    *,
    jobs: int,
    scheduler: str | None,
    class_weight: engines.ClassWeight | None,
    cache_mb: float,
) -> _Evaluator | _ClusterEvaluator:
    """What runs the points: local processes, or a Dask cluster where ``scheduler`` names one."""
    data = (X, y, class_weight, cache_mb)
    if scheduler is None:
        return _Evaluator(data, cv_args, jobs)
    return _ClusterEvaluator(data, cv_args, scheduler)


def _climb(
    grid: Grid,
    scores: dict[tuple[float, float], float],
    run: Callable[[Iterable[tuple[float, float]], _OnScore], None],
    done: _OnScore,
    recount: Callable[[int], None],
) -> None:
    """From the scored first points, at each step of ``grid.climb``: score the best point's
    neighbours until none is better, within ``grid.climb_limit`` points; depends on scores only."""
    for step in grid.climb:
        while len(scores) < grid.climb_limit:
            best = best_point(scores)
            todo = [p for p in grid.neighbours(best, step) if p not in scores]
            todo = todo[: grid.climb_limit - len(scores)]
            if not todo:
                break
            recount(len(todo))
            run(todo, done)
            if best_point(scores) == best:
                break


def _reported(n: int) -> bool:
    """Whether the estimate from the points done is reported after ``n`` points: 1, 2, 4, 8..."""
    return n >= 1 and n & (n - 1) == 0


#: Estimates start after this long: first points mostly time process start-up.
ESTIMATE_AFTER_SECONDS = 5.0


def _estimate(stage: str, done: int, total: int, elapsed: float) -> Event:
    """A progress event; after 1, 2, 4, 8, ... points (past :data:`ESTIMATE_AFTER_SECONDS`) with the
    stage's predicted seconds and a line saying what is left."""
    if not _reported(done) or done >= total or elapsed < ESTIMATE_AFTER_SECONDS:
        return Event(stage, done, total, GRID_POINTS)
    predicted = elapsed / done * total
    return Event(
        stage,
        done,
        total,
        GRID_POINTS,
        predicted_seconds=predicted,
        line=(
            f"{stage}: {done}/{total} grid points in {duration_text(elapsed)}; about "
            f"{duration_text(predicted - elapsed)} left at this pace"
        ),
    )


def duration_text(seconds: float) -> str:
    """``40 s``, ``3 min``, ``1.5 h``: a prediction's precision, no more."""
    if seconds < 90:
        return f"{max(1, round(seconds)):d} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60):d} min"
    return f"{seconds / 3600:.1f} h"


#: A grid worker's own memory beyond what it shares with its parent, 20-30 MB measured.
WORKER_BYTES = 32 * 2**20


@dataclass(frozen=True)
class SearchMemory:
    """What a search may use: ``jobs`` processes with ``cache_mb`` each, or ``alone_mb`` here."""

    jobs: int
    cache_mb: float
    alone_mb: float


def search_memory(
    source: str, X: sp.csr_matrix, memory_limit: int, held_bytes: int, jobs: int
) -> SearchMemory:
    """Workers and kernel caches of a search on ``X`` within ``memory_limit`` beside ``held_bytes``:
    the cache shrinks first, then workers; refused where one process cannot fit."""
    rows, nnz = int(X.shape[0]), int(X.nnz)
    problem = engines.svm_copy_bytes(nnz, rows)
    data = csr_bytes(X)
    left = memory_limit - held_bytes
    least_cache = int(engines.SVM_MIN_CACHE_MB * 2**20)
    least = problem + least_cache
    if least > left:
        raise KcheckError(
            f"{source}: the RBF grid search needs about {size_text(held_bytes + least)} "
            f"(LIBSVM's copy of {rows:,} rows, {size_text(problem)}, beside the "
            f"{size_text(held_bytes)} already held), over the memory limit of "
            f"{size_text(memory_limit)}; a smaller --max-rows or a larger --memory-limit "
            "would fit"
        )
    alone_mb = engines.cache_mb_within(left - problem)
    per_worker = WORKER_BYTES + data + problem
    n = max(1, min(jobs, left // (per_worker + least_cache)))
    cache_mb = min(float(engines.SVM_CACHE_MB), (left / n - per_worker) / 2**20)
    if n == 1 or cache_mb < engines.SVM_MIN_CACHE_MB:
        return SearchMemory(1, alone_mb, alone_mb)
    return SearchMemory(n, cache_mb, alone_mb)


def parallel_jobs(jobs: int, points: int, X: sp.csr_matrix) -> int:
    """Processes for ``points`` first points on ``X``: one below :data:`MIN_PARALLEL_WORK`."""
    if X.shape[0] * X.nnz < MIN_PARALLEL_WORK:
        return 1
    return max(1, min(jobs, points))


#: A grid point costs this many times :func:`kcheck.costs.budget.rbf_fit_seconds` per fold: the
#: corners train far longer (1.6x on heart_scale, 3.2x fourclass).
GRID_POINT_FACTOR = 2.0


def point_seconds(
    *, rows: int, nnz: int, n_classes: int, folds: int = FOLDS, features: int = 0
) -> float:
    """Counted seconds of one grid point: ``folds``-fold CV on ``rows`` rows, rbf_fit_seconds per
    fold times :data:`GRID_POINT_FACTOR` (sparse: sparse_merge_factor)."""
    train = rows * (folds - 1) // folds
    fold = budget.rbf_fit_seconds(
        rows=train,
        nnz=nnz * (folds - 1) // folds,
        predict_rows=rows - train,
        n_classes=n_classes,
        features=features,
    )
    return GRID_POINT_FACTOR * folds * fold


def search_seconds(
    grid: Grid, *, rows: int, nnz: int, n_classes: int, jobs: int = 1, features: int = 0
) -> float:
    """Predicted seconds: :attr:`Grid.expected_points` x :func:`point_seconds`, shared."""
    per_point = point_seconds(rows=rows, nnz=nnz, n_classes=n_classes, features=features)
    processes = jobs if rows * nnz >= MIN_PARALLEL_WORK else 1
    return grid.expected_points * per_point / max(1, min(processes, grid.expected_points))


def grid_text(grid: Grid) -> str:
    """The grid in words: ``110 points (log2 C -5..15, step 2; ...)``, its refinement or climb."""
    if grid.start is not None:
        steps = ", ".join(f"{s:g}" for s in grid.climb)
        return (
            f"a climb in log2 steps of {steps} (about {grid.expected_points} points, "
            f"at most {grid.climb_limit})"
        )

    def axis(values: tuple[float, ...]) -> str:
        steps = {abs(b - a) for a, b in zip(values, values[1:], strict=False)}
        step = f", step {steps.pop():g}" if len(steps) == 1 else ""
        return f"{values[0]:g}..{values[-1]:g}{step}" if len(values) > 1 else f"{values[0]:g}"

    text = (
        f"{len(grid.coarse)} points (log2 C {axis(grid.log2_C)}; "
        f"log2 gamma {axis(grid.log2_gamma)})"
    )
    if grid.refine:
        text += f", then up to {grid.max_points - len(grid.coarse)} around the best"
    return text
