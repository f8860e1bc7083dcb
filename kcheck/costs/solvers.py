"""Seconds of each solver kcheck runs, from counts: checkers revise their stage predictions with
these, and the plan charges :func:`multilinear_seconds`. Reference seconds, the same everywhere."""

from __future__ import annotations

import math
from collections.abc import Iterable

from kcheck.costs import budget

__all__ = [
    "CLUSTER_ONSET_ROWS",
    "KMEANS_SECONDS_PER_WORK",
    "ONSET_FROM",
    "ONSET_MOST",
    "clusters_seconds",
    "kmeans_seconds",
    "linear_reference_seconds",
    "multilinear_seconds",
    "liblinear_seconds",
    "rbf_trained_seconds",
    "width_onset_factor",
]

#: k-means: seconds per stored value, cluster and pass (sparse rows against dense centers).
KMEANS_SECONDS_PER_WORK = 2.0e-9

#: Cover's theorem: n rows in d dimensions are almost surely separable where n < 2d, and towards
#: there the baseline's C search runs on to its largest C. Cost per value grows from 1 at ONSET_FROM
#: x width rows to ONSET_MOST at width or fewer (text sets: 2.1-2.2x the prediction without it).
#: MultiLinear clusters pay it only from CLUSTER_ONSET_ROWS rows.
ONSET_FROM = 4.0
ONSET_MOST = 2.0


def width_onset_factor(width: int, rows: int) -> float:
    """1 from ONSET_FROM x ``width`` rows; ONSET_MOST at ``width`` or fewer; log-interpolated."""
    if rows <= 0 or width <= 0 or rows >= ONSET_FROM * width:
        return 1.0
    share = math.log(ONSET_FROM * width / rows) / math.log(ONSET_FROM)
    return 1.0 + (ONSET_MOST - 1.0) * min(share, 1.0)


#: Clusters from this many rows pay the width onset (sector's: 1.9-2.7x their count without);
#: smaller ones' steps are bounded by their rows (calibrate_clusters.md).
CLUSTER_ONSET_ROWS = 1_000


def liblinear_seconds(nnz: int, width: int, rows: int, models: float) -> float:
    """LIBLINEAR -s 2 with its -C search on ``rows`` rows of ``nnz`` values, ``width`` wide,
    ``models`` one-vs-rest models: per value, more on more rows (degree-2's row factor: cod-rna's
    44,651 rows cost 3.7x per value), and more when separable."""
    per_value = budget.LINEAR_SECONDS_PER_NNZ * budget.rows_factor(rows)
    return per_value * nnz * models * budget.separable_factor(width, rows)


def kmeans_seconds(nnz: int, rows: int, k: int, passes: int) -> float:
    """k-means' ``passes`` over ``rows`` rows of ``nnz`` stored values, against ``k`` centers."""
    return KMEANS_SECONDS_PER_WORK * passes * k * max(nnz, rows)


def multilinear_seconds(
    nnz: int, width: int, rows: int, n_classes: int, k: int, passes: int
) -> float:
    """MultiLinear's counted seconds before k-means (charged by the plan): k-means' ``passes`` over
    T and a C search on each of ``k`` mean-size clusters, whose one-vs-rest models grow with about
    the square root of the classes (letter: 5x, not 26x)."""
    models = budget.n_models(n_classes)
    per_cluster = math.sqrt(models) if models > 1 else 1.0
    trained = liblinear_seconds(nnz, width, max(rows // k, 1), per_cluster)
    return kmeans_seconds(nnz, rows, k, passes) + trained


def linear_reference_seconds(nnz: int, width: int, rows: int, n_classes: int) -> float:
    """A linear model tuned and trained on ``rows`` sampled rows (rbfsvm's reference): the
    baseline's shape with onset, without its factor (0.78-0.82 of it measured)."""
    models = budget.n_models(n_classes)
    return liblinear_seconds(nnz, width, rows, models) * width_onset_factor(width, rows)


def clusters_seconds(clusters: Iterable[tuple[int, int, int]], width: int, kmeans: float) -> float:
    """MultiLinear's prediction after k-means (``kmeans``: its shape), from each cluster's (rows,
    values, classes): its -C search, one-vs-rest over its classes, the width onset from
    CLUSTER_ONSET_ROWS. k-means leaves text in few large all-class clusters, where the earlier
    K-even-clusters count was 3.5x under on sector; this gives 0.64-1.25
    (scripts/results/calibrate_clusters.md)."""
    total = kmeans
    for rows, nnz, classes in clusters:
        if classes < 2:
            continue  # one class: a constant, nothing trained
        onset = width_onset_factor(width, rows) if rows >= CLUSTER_ONSET_ROWS else 1.0
        total += liblinear_seconds(nnz, width, rows, budget.n_models(classes)) * onset
    return total


#: LIBSVM's RBF kernel on raw rows per kernel entry: fixed, per stored value, and per value and
#: power of ten of sparsity (sparse dot products merge index lists). Fitted with the iterations'
#: cost on rbfsvm's 15 judged cases (log least squares, scripts/results/calibrate_rbfsvm.md):
#: 0.78-1.59 of prediction.
RBF_ENTRY_SECONDS = 1.04e-8
RBF_ENTRY_SECONDS_PER_VALUE = 1.15e-9
RBF_ENTRY_SECONDS_PER_SPARSE_VALUE = 5.0e-9
#: ... and per iteration and row of each one-vs-one sub-problem.
RBF_ITERATION_SECONDS_PER_ROW = 3.07e-9


def rbf_trained_seconds(
    *,
    support_vectors: float,
    rows: int,
    predict_rows: int,
    iterations: float,
    values_per_row: float,
    width: int,
    n_classes: int,
) -> float:
    """One LIBSVM training on ``rows`` rows keeping ``support_vectors`` in ``iterations``, then
    predicting ``predict_rows``: a kernel column per SV, an entry per row predicted."""
    sparse = math.log10(max(width / max(values_per_row, 1e-9), 1.0)) if width > 0 else 0.0
    entry = (
        RBF_ENTRY_SECONDS
        + RBF_ENTRY_SECONDS_PER_VALUE * values_per_row
        + RBF_ENTRY_SECONDS_PER_SPARSE_VALUE * values_per_row * sparse
    )
    pairs = 2.0 * (n_classes - 1) / n_classes if n_classes > 2 else 1.0
    pair_rows = rows * (2.0 / n_classes if n_classes > 2 else 1.0)
    entries = support_vectors * (rows * pairs + predict_rows)
    return entry * entries + RBF_ITERATION_SECONDS_PER_ROW * iterations * pair_rows
