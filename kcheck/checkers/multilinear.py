"""MultiLinear checker: k-means on T, one LIBLINEAR model per cluster, nearest-center prediction.

A piecewise-linear model approximates a Gaussian-kernel boundary where the data are locally
linear; Huang & Lin found it right on all 15 of their data sets, at about the linear model's cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from kcheck import engines
from kcheck.checkers import kmeans as km
from kcheck.checkers.base import CheckerResult, Context, Dataset, score
from kcheck.errors import TimeLimitReached
from kcheck.workers import end_pool, process_pool

#: A cluster with fewer rows than this is not worth a 5-fold C search; it uses the baseline's C.
MIN_CV_ROWS = 2 * engines.N_FOLDS
#: Below this many stored values in T, worker processes cost more than they save: starting a
#: pool (fork server, imports) takes about 0.4 s, and on a9a (340k values in T) all 50 clusters
#: train in 0.6 s in one process.
MIN_PARALLEL_NNZ = 1_000_000


@dataclass(frozen=True)
class MultiLinearOptions:
    seed: int = 0
    jobs: int = 1
    fallback_C: float = 1.0
    n_iter: int = km.N_ITER
    n_clusters: int | None = None
    #: time.perf_counter() value after which training stops (TimeLimitReached).
    deadline: float | None = None


@dataclass
class ClusterModel:
    """One cluster's classifier: a constant label, or linear weights (picklable, no ctypes)."""

    rows: int
    constant: float | None = None
    weights: np.ndarray | None = None
    bias_weights: np.ndarray | None = None
    labels: np.ndarray | None = None
    C: float | None = None
    tuned: bool = False
    columns: np.ndarray | None = None

    def predict(self, X: sp.csr_matrix) -> np.ndarray:
        if self.constant is not None:
            return np.full(X.shape[0], self.constant)
        assert self.weights is not None and self.bias_weights is not None
        assert self.labels is not None and self.C is not None
        model = engines.LinearModel(
            self.weights, self.bias_weights, self.labels, self.C, columns=self.columns
        )
        return model.predict(X)


def _cluster_seed(seed: int, cluster: int) -> int:
    return (seed * 1_000_003 + cluster * 7919 + 1) & 0x7FFFFFFF


def _fit_cluster(X: sp.csr_matrix, y: np.ndarray, seed: int, fallback_C: float) -> ClusterModel:
    """Train one cluster's model; seeded per cluster so results do not depend on scheduling."""
    classes = np.unique(y)
    if classes.size == 1:
        return ClusterModel(rows=int(y.size), constant=float(classes[0]))
    tune = y.size >= MIN_CV_ROWS
    model, _ = engines.fit_linear(X, y, seed=seed, C=None if tune else fallback_C)
    return ClusterModel(
        rows=int(y.size),
        weights=model.weights,
        bias_weights=model.bias_weights,
        labels=model.labels,
        C=model.C,
        tuned=tune,
        columns=model.columns,
    )


def _fit_all(
    T: Dataset,
    members: list[np.ndarray],
    options: MultiLinearOptions,
    on_done: Callable[[], None] | None,
) -> list[ClusterModel]:
    """Fit every cluster's model. A cluster's rows are copied out of T only when its turn
    comes (at most ``2 x jobs`` at a time in flight), so the copies never add up to T."""

    def task(c: int) -> tuple[sp.csr_matrix, np.ndarray, int, float]:
        rows = members[c]
        return T.X[rows], T.y[rows], _cluster_seed(options.seed, c), options.fallback_C

    results: list[ClusterModel | None] = [None] * len(members)
    if options.jobs > 1 and T.X.nnz >= MIN_PARALLEL_NNZ and len(members) > 1:
        # Processes, not threads: LIBLINEAR draws CV folds from the process-wide rand(), so
        # threads would make the chosen C depend on timing. Largest clusters first.
        order = sorted(range(len(members)), key=lambda c: -members[c].size)
        try:
            with process_pool(options.jobs, ["kcheck.engines"]) as pool:
                pending: dict[int, Future[ClusterModel]] = {}
                queue = list(order)
                while queue or pending:
                    while queue and len(pending) < 2 * options.jobs:
                        c = queue.pop(0)
                        pending[c] = pool.submit(_fit_cluster, *task(c))
                    done, _ = wait(pending.values(), return_when=FIRST_COMPLETED)
                    for c in [c for c, f in pending.items() if f in done]:
                        results[c] = pending.pop(c).result()
                        if on_done:
                            on_done()
                    if _past(options.deadline):
                        end_pool(pool)
                        raise TimeLimitReached()
        except BrokenProcessPool:
            # Workers could not start (e.g. a __main__ read from stdin cannot be re-imported)
            # or died; every cluster is seeded on its own, so finishing here gives the same
            # models.
            pass
    for c in range(len(members)):
        if results[c] is None:
            if _past(options.deadline):
                raise TimeLimitReached()
            results[c] = _fit_cluster(*task(c))
            if on_done:
                on_done()
    return [r for r in results if r is not None]


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.perf_counter() >= deadline


@dataclass
class MultiLinearModel:
    """Centers over ``columns`` of X (all columns when None): a column where every center is
    0 adds the same to a row's distance to each center, so leaving it out changes no
    nearest center, and K dense centers need not span a stray huge index."""

    centers: np.ndarray
    clusters: list[ClusterModel]
    columns: np.ndarray | None = None

    def predict(self, X: sp.csr_matrix) -> np.ndarray:
        Xc = X
        if self.columns is not None:
            Xc = X[:, self.columns[: int(np.searchsorted(self.columns, X.shape[1]))]]
            missing = self.centers.shape[1] - Xc.shape[1]
            if missing:  # X narrower than the training data: its absent columns are 0
                Xc = sp.hstack([Xc, sp.csr_matrix((X.shape[0], missing))], format="csr")
        assign = km.nearest_center(Xc, self.centers)
        out = np.empty(X.shape[0], dtype=np.float64)
        for c, idx in _groups(assign, len(self.clusters)):
            out[idx] = self.clusters[c].predict(X[idx])
        return out


def _groups(assign: np.ndarray, k: int) -> Iterator[tuple[int, np.ndarray]]:
    order = np.argsort(assign, kind="stable")
    bounds = np.searchsorted(assign[order], np.arange(k + 1))
    for c in range(k):
        if bounds[c + 1] > bounds[c]:
            yield c, order[bounds[c] : bounds[c + 1]]


def run(
    T: Dataset,
    V: Dataset,
    options: MultiLinearOptions,
    on_cluster_done: Callable[[], None] | None = None,
) -> CheckerResult:
    """Cluster T, fit one model per cluster (its own C), score nearest-center predictions on V."""
    t0 = time.perf_counter()
    k = options.n_clusters or km.n_clusters(T.rows)
    columns = None
    X_km = T.X
    if T.X.shape[1] >= engines.COMPACT_MIN_WIDTH:
        used = np.unique(T.X.indices)
        if used.size < T.X.shape[1] // 2:
            columns, X_km = used, T.X[:, used]
    result = km.kmeans(X_km, k, seed=options.seed, n_iter=options.n_iter)
    del X_km
    # The final reassignment can leave a center without rows; such a center is dropped.
    groups = list(_groups(result.labels, k))
    members = [idx for _, idx in groups]
    kept = [c for c, _ in groups]
    # Index (a copy of K x n) only when a center was dropped; on wide data centers are large.
    centers = result.centers if len(kept) == k else result.centers[kept]
    clusters = _fit_all(T, members, options, on_cluster_done)
    model = MultiLinearModel(centers, clusters, columns)
    # No scores: decision values of different clusters' models are not on one scale.
    s = score(model.predict, V)
    return CheckerResult(
        name="multilinear",
        status="ok",
        val_accuracy=s.accuracy,
        correct=s.correct,
        predicted=s.predicted,
        seconds=time.perf_counter() - t0,
        info={
            "clusters": len(clusters),
            "single_class_clusters": sum(c.constant is not None for c in clusters),
            "untuned_clusters": sum(c.constant is None and not c.tuned for c in clusters),
        },
        predict=model.predict,
    )


def check(T: Dataset, V: Dataset, ctx: Context) -> CheckerResult:
    """The checker as the pipeline runs it: K from T's size, the baseline's C as fallback."""
    k = km.n_clusters(T.rows)
    done = [0]
    stage = "MultiLinear checker"
    ctx.progress(stage, 0, k)

    def tick() -> None:
        done[0] += 1
        ctx.progress(stage, done[0], k)

    options = MultiLinearOptions(
        seed=ctx.seed, jobs=ctx.jobs, fallback_C=ctx.baseline_C, deadline=ctx.deadline
    )
    return run(T, V, options, tick)
