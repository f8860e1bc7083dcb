"""Seconds of each solver kcheck runs, from the counts it runs on: what the checkers revise a
stage's prediction with once its first part has run (the RBF SVM's search, MultiLinear's
k-means), for the user to read, and MultiLinear's counted cost, which the plan charges it
(:func:`multilinear_seconds`). Reference seconds, the same on every machine.
"""

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

#: Cover's theorem: n rows in general position in d dimensions are linearly separable with
#: high probability where n < 2d. Towards there the baseline's C search no longer settles: it
#: runs on to its largest C, where LIBLINEAR's Newton-CG steps multiply. Its cost per value
#: grows from 1 where T has ONSET_FROM x its width in rows to ONSET_MOST where it has the
#: width or fewer (text of 8,400 words on 5,850 rows and 20,000 on 15,000: 2.2 and 2.1 times
#: the prediction without it; 1,000 on 1,125 rows: 1.3; sector's 55,197 on 4,794: 1.45).
#: A MultiLinear cluster pays it only from CLUSTER_ONSET_ROWS rows: a smaller one is as narrow
#: in rows, but its problem is small (madelon's clusters of 90-125 rows on 500 features took
#: 0.6-0.7 of their count without it).
ONSET_FROM = 4.0
ONSET_MOST = 2.0


def width_onset_factor(width: int, rows: int) -> float:
    """1 where ``rows`` are at least ONSET_FROM x ``width``; ONSET_MOST at ``width`` or fewer,
    in between as the log of the ratio."""
    if rows <= 0 or width <= 0 or rows >= ONSET_FROM * width:
        return 1.0
    share = math.log(ONSET_FROM * width / rows) / math.log(ONSET_FROM)
    return 1.0 + (ONSET_MOST - 1.0) * min(share, 1.0)


#: A MultiLinear cluster of at least this many rows pays the width onset as the baseline does
#: (:func:`clusters_seconds`); a smaller one does not, as LIBLINEAR's Newton-CG steps on it are
#: bounded by its few rows: sector's two clusters of 2,135-2,191 rows (all 105 classes, 55,197
#: features) took 1.9-2.7 times their count without it, where mix10's of 220-279 rows on 720
#: features and madelon's of 90-125 on 500 took 0.6-0.7 (scripts/results/calibrate_clusters.md).
CLUSTER_ONSET_ROWS = 1_000


def liblinear_seconds(nnz: int, width: int, rows: int, models: float) -> float:
    """LIBLINEAR -s 2 with its -C search on ``rows`` rows of ``nnz`` values, ``width`` wide,
    ``models`` one-vs-rest models: per value, more on more rows (degree-2's row factor, which
    the baseline follows too: cod-rna's 44,651 rows took 3.7x the per-value cost of a few
    thousand), and more in the separable regime."""
    per_value = budget.LINEAR_SECONDS_PER_NNZ * budget.rows_factor(rows)
    return per_value * nnz * models * budget.separable_factor(width, rows)


def kmeans_seconds(nnz: int, rows: int, k: int, passes: int) -> float:
    """k-means' ``passes`` over ``rows`` rows of ``nnz`` stored values, against ``k`` centers."""
    return KMEANS_SECONDS_PER_WORK * passes * k * max(nnz, rows)


def multilinear_seconds(
    nnz: int, width: int, rows: int, n_classes: int, k: int, passes: int
) -> float:
    """MultiLinear's counted seconds before k-means has run, which the plan charges it: k-means'
    ``passes`` over T and a C search on each of ``k`` clusters of the mean size. A cluster
    holds a few of many classes: its one-vs-rest models grow with about the square root of
    the classes (letter's 26 classes in 46 clusters cost 5x, not 26x)."""
    models = budget.n_models(n_classes)
    per_cluster = math.sqrt(models) if models > 1 else 1.0
    trained = liblinear_seconds(nnz, width, max(rows // k, 1), per_cluster)
    return kmeans_seconds(nnz, rows, k, passes) + trained


def linear_reference_seconds(nnz: int, width: int, rows: int, n_classes: int) -> float:
    """A linear model tuned and trained on a sample of ``rows`` rows (the RBF SVM checker's
    reference on its sample): the baseline's shape on those rows, its onset included. Without
    the baseline's factor: sector's reference on 1,256 rows took 0.78 of it, mix10's on 1,676
    0.82 (scripts/results/calibrate_rbfsvm.md)."""
    models = budget.n_models(n_classes)
    return liblinear_seconds(nnz, width, rows, models) * width_onset_factor(width, rows)


def clusters_seconds(clusters: Iterable[tuple[int, int, int]], width: int, kmeans: float) -> float:
    """MultiLinear's prediction once its k-means has run (``kmeans``: the k-means shape), from
    each cluster's (rows, stored values, classes): its -C search, one-vs-rest over the classes
    it holds, with the width onset on a cluster of CLUSTER_ONSET_ROWS or more. k-means leaves
    text in a few large clusters that hold every class (sector: two of 42 clusters hold 4,326
    of 4,794 rows, each all 105 classes), where the prediction before it assumes K even
    clusters of the square root of the classes: 3.5x under on sector; this 1.25. No factor:
    on the six sets of scripts/results/calibrate_clusters.md it gives 0.64-1.25."""
    total = kmeans
    for rows, nnz, classes in clusters:
        if classes < 2:
            continue  # one class: a constant, nothing trained
        onset = width_onset_factor(width, rows) if rows >= CLUSTER_ONSET_ROWS else 1.0
        total += liblinear_seconds(nnz, width, rows, budget.n_models(classes)) * onset
    return total


#: LIBSVM's RBF kernel on raw rows, per kernel entry: a fixed part, a part per stored value of
#: a row, and a part per value and power of ten by which the rows are sparser than their width
#: (a sparse dot product merges two index lists, branch by branch). With the iterations' cost
#: beside it, fitted to the RBF SVM checker's trainings and predictions on the 15 judged cases
#: where it runs (log least squares, scripts/results/calibrate_rbfsvm.md): its stage then took
#: 0.78-1.59 of its prediction, where all rows counted as support vectors gave 0.44-2.02.
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
    """One LIBSVM training on ``rows`` rows that keeps ``support_vectors`` and takes
    ``iterations`` (summed over one-vs-one's pairs), then predicting ``predict_rows``: each
    support vector's kernel column over its pairs' rows, and its entry for every row predicted.
    The RBF SVM checker predicts its trainings so once its search has run, from the support
    vectors and iterations the search's folds had at the same point."""
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
