"""MultiLinear checker: k-means on T, one LIBLINEAR model per cluster, nearest-center prediction.
Piecewise-linear approximates a Gaussian-kernel boundary where data are locally linear (Huang & Lin:
right on 15 of 15 sets, at about linear cost)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import scipy.sparse as sp

from kcheck import seeds
from kcheck.bindings import engines
from kcheck.checkers import kmeans as km
from kcheck.checkers.base import Allowance, CheckerResult, Context, Counts, Dataset, Sized, past
from kcheck.costs import solvers
from kcheck.defaults import Event
from kcheck.errors import TimeLimitReached
from kcheck.metrics import platt_apply, platt_fit
from kcheck.parallel.workers import end_pool, process_pool
from kcheck.scoring import positive_scores
from kcheck.split import stratified_folds
from kcheck.tuning import linear_c

#: A cluster with fewer rows than this is not worth a 5-fold C search; it uses the baseline's C.
MIN_CV_ROWS = 2 * engines.N_FOLDS
#: Below this many stored values in T a pool (0.4 s to start) costs more than it saves.
MIN_PARALLEL_NNZ = 1_000_000


_Options = TypeVar("_Options", bound="ClusterOptions")


@dataclass(frozen=True)
class ClusterOptions:
    """How each cluster's linear model is trained: MultiLinear's, and mixlinear's first experts'."""

    seed: int = 0
    jobs: int = 1
    fallback_C: float = 1.0
    #: Asked for the fallback C at the first too-small cluster: the baseline may still run beside.
    fallback: Callable[[], float] | None = None
    #: time.perf_counter() value after which training stops (TimeLimitReached).
    deadline: float | None = None
    #: Class weights of the metric, the same in every cluster (from T's class frequencies).
    class_weight: engines.ClassWeight | None = None
    #: Larger-label probabilities (``--metric auc``): each cluster Platt-scaled on its CV values.
    calibrate: bool = False

    @classmethod
    def of(cls: type[_Options], ctx: Context) -> _Options:
        """The options of a check: its seed, jobs, deadline and metric, the baseline's C."""
        return cls(
            seed=ctx.seed,
            jobs=ctx.jobs,
            fallback=lambda: ctx.baseline_C,
            deadline=ctx.deadline,
            class_weight=ctx.class_weight,
            calibrate=ctx.scoring.needs_scores,
        )


@dataclass(frozen=True)
class MultiLinearOptions(ClusterOptions):
    n_iter: int = km.N_ITER
    n_clusters: int | None = None


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
    #: Platt's (A, B) for this cluster: P(larger label | f) = 1 / (1 + exp(A f + B)).
    platt: tuple[float, float] | None = None

    @classmethod
    def trained(cls, model: engines.LinearModel, rows: int, tuned: bool) -> ClusterModel:
        """A LIBLINEAR model's weights as a cluster's classifier."""
        return cls(
            rows=rows,
            weights=model.weights,
            bias_weights=model.bias_weights,
            labels=model.labels,
            C=model.C,
            tuned=tuned,
            columns=model.columns,
        )

    def predict(self, X: sp.csr_matrix) -> np.ndarray:
        return self.predict_scored(X)[0]

    def predict_scored(self, X: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray | None]:
        """Labels, and with Platt's fit each row's probability of the larger label."""
        if self.constant is not None:
            dec = np.zeros(X.shape[0])
            labels = np.full(X.shape[0], self.constant)
        else:
            assert self.weights is not None and self.bias_weights is not None
            assert self.labels is not None and self.C is not None
            model = engines.LinearModel(
                self.weights, self.bias_weights, self.labels, self.C, columns=self.columns
            )
            labels, raw = model.predict_scored(X)
            oriented = positive_scores(self.labels, raw)
            dec = oriented if oriented is not None else np.zeros(X.shape[0])
        if self.platt is None:
            return labels, None
        return labels, platt_apply(dec, *self.platt)


def _fit_cluster(
    X: sp.csr_matrix,
    y: np.ndarray,
    seed: int,
    fallback_C: float,
    class_weight: engines.ClassWeight | None = None,
    positive: float | None = None,
) -> ClusterModel:
    """Train one cluster's model, seeded per cluster (scheduling-independent). ``positive``: AUC's
    positive label (the data's larger), also fit Platt's sigmoid."""
    classes = np.unique(y)
    if classes.size == 1:
        out = ClusterModel(rows=int(y.size), constant=float(classes[0]))
        if positive is not None:
            # No decision values: Platt on constants gives the cluster's Laplace-corrected share.
            out.platt = platt_fit(np.zeros(y.size), y == positive)
        return out
    tune = y.size >= MIN_CV_ROWS
    C = None if tune else fallback_C
    model, _ = linear_c.fit_linear(X, y, seed=seed, C=C, class_weight=class_weight)
    out = ClusterModel.trained(model, int(y.size), tune)
    if positive is not None:
        dec = _cv_decision_values(X, y, seed, model.C, class_weight)
        out.platt = platt_fit(dec, y == positive)
        if out.platt[0] >= 0:
            # Held-out values ranking the larger label lower (A >= 0) carry no usable order: score
            # the cluster by its Laplace-corrected share, as for one class.
            out.platt = platt_fit(np.zeros(y.size), y == positive)
    return out


def _cv_decision_values(
    X: sp.csr_matrix,
    y: np.ndarray,
    seed: int,
    C: float,
    class_weight: engines.ClassWeight | None,
) -> np.ndarray:
    """Each row's decision value from a model trained without it at the cluster's C (Platt on
    training values would be overconfident); a one-class training fold gives its rows 0."""
    folds = min(engines.N_FOLDS, int(y.size))
    fold = stratified_folds(y, folds, seed, 0)
    out = np.zeros(y.size)
    for k in range(folds):
        test = np.flatnonzero(fold == k)
        train = np.flatnonzero(fold != k)
        if test.size == 0 or np.unique(y[train]).size < 2:
            continue
        m, _ = linear_c.fit_linear(X[train], y[train], seed=seed, C=C, class_weight=class_weight)
        oriented = positive_scores(m.labels, m.decision_function(X[test]))
        if oriented is not None:
            out[test] = oriented
    return out


def _fit_all(
    T: Dataset,
    members: list[np.ndarray],
    options: ClusterOptions,
    on_done: Callable[[], None] | None,
) -> list[ClusterModel]:
    """Fit every cluster's model, copying a cluster's rows out of T only on its turn (at most ``2 x
    jobs`` in flight), so copies never add up to T."""

    positive = float(np.max(T.y)) if options.calibrate else None

    def task(
        c: int,
    ) -> tuple[sp.csr_matrix, np.ndarray, int, float, engines.ClassWeight | None, float | None]:
        rows = members[c]
        seed = seeds.c_seed(options.seed, c)
        untuned = rows.size < MIN_CV_ROWS and options.fallback is not None
        fallback_C = fallback() if untuned else options.fallback_C
        return T.X[rows], T.y[rows], seed, fallback_C, options.class_weight, positive

    asked: list[float] = []

    def fallback() -> float:
        if not asked and options.fallback is not None:
            asked.append(options.fallback())
        return asked[0]

    results: list[ClusterModel | None] = [None] * len(members)
    if options.jobs > 1 and T.X.nnz >= MIN_PARALLEL_NNZ and len(members) > 1:
        # Processes, not threads: LIBLINEAR's CV draws from process-wide rand(). Largest first.
        order = sorted(range(len(members)), key=lambda c: -members[c].size)
        try:
            with process_pool(options.jobs, ["kcheck.bindings.engines"]) as pool:
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
                    if past(options.deadline):
                        end_pool(pool)
                        raise TimeLimitReached()
        except BrokenProcessPool:
            # Workers failed; each cluster is seeded alone, so finishing here gives the same models.
            pass
    for c in range(len(members)):
        if results[c] is None:
            if past(options.deadline):
                raise TimeLimitReached()
            results[c] = _fit_cluster(*task(c))
            if on_done:
                on_done()
    return [r for r in results if r is not None]


@dataclass
class MultiLinearModel:
    """Centers over ``columns`` (None: all): a column where every center is 0 changes no nearest
    center, and K dense centers need not span a stray huge index."""

    centers: np.ndarray
    clusters: list[ClusterModel]
    columns: np.ndarray | None = None

    def predict(self, X: sp.csr_matrix) -> np.ndarray:
        return self.predict_scored(X)[0]

    def predict_scored(self, X: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray | None]:
        """Nearest-center labels and, when calibrated, Platt probabilities (comparable)."""
        Xc = X
        if self.columns is not None:
            Xc = X[:, self.columns[: int(np.searchsorted(self.columns, X.shape[1]))]]
            missing = self.centers.shape[1] - Xc.shape[1]
            if missing:  # X narrower than the training data: its absent columns are 0
                Xc = sp.hstack([Xc, sp.csr_matrix((X.shape[0], missing))], format="csr")
        assign = km.nearest_center(Xc, self.centers)
        out = np.empty(X.shape[0], dtype=np.float64)
        calibrated = all(c.platt is not None for c in self.clusters)
        probs = np.empty(X.shape[0], dtype=np.float64) if calibrated else None
        for c, idx in _groups(assign, len(self.clusters)):
            labels, p = self.clusters[c].predict_scored(X[idx])
            out[idx] = labels
            if probs is not None and p is not None:
                probs[idx] = p
        return out, probs


def _row_values(X: sp.spmatrix | np.ndarray) -> np.ndarray:
    """Each row's stored values, of sparse or dense rows (run takes both)."""
    if sp.issparse(X):
        return np.asarray(sp.csr_matrix(X).getnnz(axis=1))
    values: np.ndarray = np.count_nonzero(np.asarray(X), axis=1)
    return values


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
    on_clustered: Callable[[int, float], None] | None = None,
) -> CheckerResult:
    """Cluster T, fit a model per cluster (own C), score nearest-center predictions on V.
    ``on_clustered``: told the clusters and the trainings' prediction before they train."""
    t0 = time.perf_counter()
    k = options.n_clusters or km.n_clusters(T.rows)
    columns = None
    X_km = T.X
    if T.X.shape[1] >= linear_c.COMPACT_MIN_WIDTH:
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
    # The stage's prediction, now that the clusters are known (kcheck.plan.done_share).
    row_nnz = _row_values(T.X)
    kmeans = solvers.kmeans_seconds(int(row_nnz.sum()), T.rows, k, options.n_iter)
    revised = solvers.clusters_seconds(
        (
            (int(idx.size), int(row_nnz[idx].sum()), int(np.unique(T.y[idx]).size))
            for idx in members
        ),
        int(T.X.shape[1]),
        kmeans,
    )
    if on_clustered is not None:
        on_clustered(len(members), revised - kmeans)
    clusters = _fit_all(T, members, options, on_cluster_done)
    model = MultiLinearModel(centers, clusters, columns)
    return CheckerResult.of_pieces(
        "multilinear",
        model,
        V,
        t0,
        info={
            "clusters": len(clusters),
            "single_class_clusters": sum(c.constant is not None for c in clusters),
            "untuned_clusters": sum(c.constant is None and not c.tuned for c in clusters),
            "revised_seconds": round(revised, 3),
        },
    )


#: Its stages: k-means, then trainings predicted from the clusters (clusters_seconds).
KMEANS_STAGE = "MultiLinear checker: k-means"
#: What its trainings' progress counts.
CLUSTERS = "clusters"


def training_stage(clusters: int) -> str:
    return f"MultiLinear checker: training {clusters} clusters"


def check(T: Dataset, V: Dataset, ctx: Context, sized: Sized) -> CheckerResult:
    """The checker as the pipeline runs it: K from T's size, the baseline's C as fallback."""
    k = km.n_clusters(T.rows)
    nnz = int(_row_values(T.X).sum())
    # Each stage's events carry its own prediction, not the plan's for the whole checker.
    stage = [KMEANS_STAGE]
    predicted = [solvers.kmeans_seconds(nnz, T.rows, k, km.N_ITER)]
    done, total = [0], [k]
    ctx.progress(Event(KMEANS_STAGE, predicted_seconds=predicted[0]))

    def clustered(clusters: int, trainings: float) -> None:
        stage[0], predicted[0], total[0] = training_stage(clusters), trainings, clusters
        ctx.progress(Event(stage[0], 0, clusters, CLUSTERS, predicted_seconds=trainings))

    def tick() -> None:
        done[0] += 1
        ctx.progress(Event(stage[0], done[0], total[0], CLUSTERS, predicted_seconds=predicted[0]))

    return run(T, V, MultiLinearOptions.of(ctx), tick, clustered)


def size(counts: Counts, allowed: Allowance) -> Sized:
    """All of T, and a bound on what :func:`check` allocates: k-means' dense centers (old and new, K
    x width doubles), a block of row distances, and clusters in flight (within 3x T's CSR bytes at 2
    x jobs). The plan reads it before letting the baseline run beside. Its counted seconds
    (kcheck.costs.solvers.multilinear_seconds) are charged whatever is left: it runs on all of T."""
    k = km.n_clusters(counts.rows)
    rows = counts.rows
    counted = solvers.multilinear_seconds(
        counts.nnz, counts.features, rows, counts.n_classes, k, km.N_ITER
    )
    return Sized(
        rows,
        bytes=16 * k * counts.features + 8 * k * min(rows, 65_536) + 3 * counts.data_bytes,
        counted_seconds=counted,
        estimated_seconds=counted,
    )
