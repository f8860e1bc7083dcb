"""The RBF grid search: grid.py's grid, its refinement, the tie-break and one process pool.

``kcheck verify`` runs grid.py's grid as the expensive reference; ``--model-out --model
kernel`` runs it with a refinement around the best point. Both go through
:func:`rbf_grid_search`, so they share the grid, the seeds, the tie-break and the runner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck import engines
from kcheck.cluster import Session
from kcheck.defaults import FOLDS, Event, Progress, no_progress
from kcheck.errors import KcheckError
from kcheck.metrics import balanced_accuracy
from kcheck.workers import process_pool

#: Below this many rows x stored values (a grid point costs about that many flops), starting
#: worker processes (about a second) costs more than sharing the grid saves.
MIN_PARALLEL_WORK = 1_000_000


@dataclass(frozen=True)
class Grid:
    """The (log2 C, log2 gamma) points of an RBF search.

    The default is grid.py's: log2 C from -5 to 15 and log2 gamma from 3 to -15, in steps of 2.
    With ``refine``, a second pass covers the best coarse point +- ``radius`` in steps of
    ``step`` (clipped to the coarse bounds): the coarse grid is 4x apart in C and gamma, and
    the accuracy surface often peaks in between.
    """

    log2_C: tuple[float, ...] = tuple(float(v) for v in range(-5, 16, 2))
    log2_gamma: tuple[float, ...] = tuple(float(v) for v in range(3, -16, -2))
    refine: bool = False
    radius: float = 1.0
    step: float = 0.5

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

    @property
    def max_points(self) -> int:
        k = int(round(self.radius / self.step))
        return len(self.coarse) + ((2 * k + 1) ** 2 - 1 if self.refine else 0)


#: grid.py's grid, as ``kcheck verify`` runs it.
GRID = Grid()
#: The export search: grid.py's grid, then a refinement around its best point.
EXPORT_GRID = Grid(refine=True)


@dataclass
class GridResult:
    """The chosen point and every point's CV result: the number of rows predicted right, or
    (``balanced``) the balanced accuracy."""

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
    """Highest CV count; ties go to the smaller C, then the smaller gamma.

    Both prefer the smoother, more regularised model (and smaller C trains faster), and the
    rule depends on the scores only, never on the order in which points finished.
    """
    return min(scores, key=lambda p: (-scores[p], p[0], p[1]))


_WORKER: dict[str, Any] = {}


def _init_worker(
    X: sp.csr_matrix, y: np.ndarray, class_weight: engines.ClassWeight | None = None
) -> None:
    """Build the LIBSVM problem once per worker process; every grid point reuses it."""
    _WORKER["problem"] = engines.SvmProblem.from_data(X, y, class_weight)


def _cv_point(
    log2_C: float, log2_gamma: float, cv_args: dict[str, Any]
) -> tuple[float, float, float]:
    return log2_C, log2_gamma, _cv_point_with(_WORKER["problem"], log2_C, log2_gamma, cv_args)


def _cluster_point(
    token: str,
    data: tuple[sp.csr_matrix, np.ndarray, engines.ClassWeight | None],
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
    """A grid point's CV score: rows right (an exact count), or with ``cv_args["balanced"]``
    the balanced accuracy (rounded, so that equal scores tie exactly)."""
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
    """Runs CV at grid points, in this process or in a pool of worker processes.

    Processes, not threads: LIBSVM draws its folds from the process-wide ``rand()``. Each task
    seeds it, so every point sees the same folds however the tasks are scheduled.
    ``cv_args`` are :func:`engines.cv_rbf`'s keyword arguments, the same at every point.
    """

    def __init__(
        self,
        X: sp.csr_matrix,
        y: np.ndarray,
        *,
        cv_args: dict[str, Any],
        jobs: int,
        class_weight: engines.ClassWeight | None = None,
    ) -> None:
        self.cv_args = cv_args
        self.jobs = jobs
        self.pool: ProcessPoolExecutor | None = None
        if jobs > 1:
            self.pool = process_pool(
                jobs,
                ["kcheck.engines", "kcheck.rbf_search"],
                _init_worker,
                (X, y, class_weight),
            )
        else:
            self.problem = engines.SvmProblem.from_data(X, y, class_weight)

    def run(
        self,
        points: Iterable[tuple[float, float]],
        on_done: Callable[[tuple[float, float], float], None],
    ) -> None:
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
    """Runs CV at grid points on a Dask cluster (:mod:`kcheck.cluster`), one task a point.

    The scaled rows are sent once; each worker builds the LIBSVM problem once. The points,
    seeds and ``cv_args`` are those of the local runner, so the scores are the same.
    """

    def __init__(
        self,
        X: sp.csr_matrix,
        y: np.ndarray,
        *,
        cv_args: dict[str, Any],
        scheduler: str,
        class_weight: engines.ClassWeight | None = None,
    ) -> None:
        self.cv_args = cv_args
        self.session = Session(scheduler)
        try:
            self.data = self.session.scatter((X, y, class_weight))
        except BaseException:
            self.session.close()
            raise
        self.token = self.session.run_id
        self.submitted = 0  # task numbers go on across runs (a refinement is a second run)

    def run(
        self,
        points: Iterable[tuple[float, float]],
        on_done: Callable[[tuple[float, float], float], None],
    ) -> None:
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
) -> GridResult:
    """5-fold CV of C-SVC with the RBF kernel at every grid point; returns the best point.

    ``class_weight``: LIBSVM's ``-wi`` for every training; ``balanced``: points are ranked by
    their CV balanced accuracy instead of the rows they predict right.

    With ``scheduler`` (``tcp://host:port`` or ``local:N``), the points run on a Dask cluster
    instead of ``jobs`` local processes; the result is the same.
    """
    report = progress or no_progress
    if y.size < FOLDS:
        raise KcheckError(f"{y.size} rows are too few for {FOLDS}-fold cross-validation")
    coarse = grid.coarse
    if not coarse:
        raise KcheckError("the RBF grid is empty")
    scores: dict[tuple[float, float], float] = {}
    total = [grid.max_points]
    report(Event(stage, 0, total[0]))

    def done(point: tuple[float, float], correct: float) -> None:
        scores[point] = correct
        report(Event(stage, len(scores), total[0]))

    Xb = engines.as_binding_csr(X)
    jobs = max(1, min(jobs, len(coarse)))
    if Xb.shape[0] * Xb.nnz < MIN_PARALLEL_WORK:
        jobs = 1
    cv_args: dict[str, Any] = {"folds": FOLDS, "seed": seed}
    if balanced:
        cv_args["balanced"] = True
    yb = np.asarray(y, np.float64)
    evaluator: _Evaluator | _ClusterEvaluator = (
        _Evaluator(Xb, yb, cv_args=cv_args, jobs=jobs, class_weight=class_weight)
        if scheduler is None
        else _ClusterEvaluator(
            Xb, yb, cv_args=cv_args, scheduler=scheduler, class_weight=class_weight
        )
    )
    try:
        evaluator.run(coarse, done)
        if grid.refine:
            fine = [p for p in grid.refined(best_point(scores)) if p not in scores]
            total[0] = len(scores) + len(fine)
            report(Event(stage, len(scores), total[0]))
            evaluator.run(fine, done)
    finally:
        evaluator.close()
    c, g = best_point(scores)
    return GridResult(c, g, scores[(c, g)], int(y.size), scores, balanced)
