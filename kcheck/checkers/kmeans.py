"""Lloyd's k-means on sparse or dense rows with dense centers. Distances are ||x||^2 - 2 x.c +
||c||^2, so X is never densified: the only large product is X @ C.T (rows x K)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from kcheck import seeds

#: Lloyd iterations, as in the paper.
N_ITER = 15


#: Fewer rows per cluster make cluster models worse (clusters of ~20 rows: 4.8 points below).
MIN_CLUSTER_ROWS = 50


def n_clusters(n_rows: int) -> int:
    """K = max(4, floor(5 ln l)) (the paper's), at most l / MIN_CLUSTER_ROWS (at least 2)."""
    if n_rows <= 0:
        return 0
    paper = max(4, int(math.floor(5 * math.log(n_rows))))
    return min(n_rows, paper, max(2, n_rows // MIN_CLUSTER_ROWS))


@dataclass
class KMeansResult:
    centers: np.ndarray  # (K, n) float64
    labels: np.ndarray  # (rows,) cluster of each row
    iterations: int


def _row_sq_norms(X: sp.csr_matrix | np.ndarray) -> np.ndarray:
    if isinstance(X, np.ndarray):
        return np.asarray(np.einsum("ij,ij->i", X, X))
    return np.asarray(X.multiply(X).sum(axis=1)).ravel()


def sq_distances(
    X: sp.csr_matrix | np.ndarray, centers: np.ndarray, x_sq: np.ndarray | None = None
) -> np.ndarray:
    """Squared Euclidean distances (rows x K), clipped at 0 against rounding."""
    if x_sq is None:
        x_sq = _row_sq_norms(X)
    c_sq = np.einsum("ij,ij->i", centers, centers)
    d = np.asarray(X @ centers.T)
    d *= -2.0
    d += x_sq[:, None]
    d += c_sq[None, :]
    np.maximum(d, 0.0, out=d)
    return d


#: Rows per distance block: a full rows x K matrix outweighs sparse data (a9a: 400 vs 170 B).
BLOCK_ROWS = 8192


def assign(
    X: sp.csr_matrix | np.ndarray, centers: np.ndarray, x_sq: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Nearest center of every row and the squared distance to it, in blocks of rows."""
    n_rows = X.shape[0]
    if x_sq is None:
        x_sq = _row_sq_norms(X)
    labels = np.empty(n_rows, dtype=np.intp)
    own = np.empty(n_rows, dtype=np.float64)
    for start in range(0, n_rows, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, n_rows)
        d = sq_distances(X[start:stop], centers, x_sq[start:stop])
        labels[start:stop] = np.argmin(d, axis=1)
        own[start:stop] = d[np.arange(stop - start), labels[start:stop]]
    return labels, own


def nearest_center(X: sp.csr_matrix | np.ndarray, centers: np.ndarray) -> np.ndarray:
    return assign(X, centers)[0]


def kmeans(
    X: sp.csr_matrix | np.ndarray, k: int, *, seed: int, n_iter: int = N_ITER
) -> KMeansResult:
    """``n_iter`` Lloyd iterations from ``k`` distinct random rows; empty clusters get the farthest
    row."""
    n_rows = X.shape[0]
    if not 1 <= k <= n_rows:
        raise ValueError(f"k must lie in [1, {n_rows}], got {k}")
    rng = seeds.rng(seed)
    init = np.sort(rng.choice(n_rows, size=k, replace=False))
    centers = _rows_dense(X, init)
    x_sq = _row_sq_norms(X)
    labels = np.zeros(n_rows, dtype=np.intp)
    for _ in range(n_iter):
        labels, own = assign(X, centers, x_sq)
        counts = np.bincount(labels, minlength=k)
        empty = np.flatnonzero(counts == 0)
        if empty.size:
            # Take the farthest rows (one per empty cluster) from clusters that can spare one.
            order = np.argsort(-own, kind="stable")
            taken = 0
            for r in order:
                if taken == empty.size:
                    break
                if counts[labels[r]] > 1:
                    counts[labels[r]] -= 1
                    labels[r] = empty[taken]
                    counts[empty[taken]] += 1
                    taken += 1
        centers = _means(X, labels, k, centers)
    # Final assignment to the final centers, as prediction will do.
    labels = assign(X, centers, x_sq)[0]
    return KMeansResult(centers=centers, labels=labels, iterations=n_iter)


def _rows_dense(X: sp.csr_matrix | np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Rows of X as K x n centers, column-major, so X @ centers.T copies nothing."""
    sub = X[rows]
    dense = np.asarray(sub.toarray() if sp.issparse(sub) else sub, dtype=np.float64)
    out: np.ndarray = np.ascontiguousarray(dense.T).T
    return out


def _means(
    X: sp.csr_matrix | np.ndarray, labels: np.ndarray, k: int, old: np.ndarray
) -> np.ndarray:
    """Cluster means as K x n column-major (:func:`_rows_dense`); sparse X: one bincount."""
    n_rows, n = X.shape
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    sums_t: np.ndarray
    if not isinstance(X, np.ndarray):
        row_of = np.repeat(labels, np.diff(X.indptr))
        flat = X.indices.astype(np.int64) * k + row_of
        del row_of
        # (astype: with no stored values at all, bincount returns integers)
        sums_t = np.bincount(flat, weights=X.data, minlength=n * k).astype(np.float64, copy=False)
        sums_t = sums_t.reshape(n, k)
        del flat
    else:
        onehot = np.zeros((n_rows, k))
        onehot[np.arange(n_rows), labels] = 1.0
        sums_t = np.asarray(X.T @ onehot, dtype=np.float64)
    nz = counts > 0
    sums_t[:, nz] /= counts[nz]
    if not nz.all():  # kmeans() re-seeds empty clusters, so this is a safeguard
        sums_t[:, ~nz] = old.T[:, ~nz]
    means: np.ndarray = sums_t.T
    return means
