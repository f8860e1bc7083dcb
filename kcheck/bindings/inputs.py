"""Data in the form the LIBLINEAR and LIBSVM bindings take, prepared without them: float64
``csr_matrix`` (not ``csr_array``) with sorted indices (else they sort the caller's in place),
float64 labels, ``-w`` class weights, and precomputed kernels as rows LIBSVM reads by position."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from kcheck.errors import EngineError

__all__ = [
    "ClassWeight",
    "as_binding_csr",
    "binding_data",
    "indices_sorted",
    "kernel_data",
    "kernel_rows",
    "squared_distances",
    "weight_options",
]

#: Per-class C multipliers (``-wi``), ((label, weight), ...) by label, or None; pickles, hashes.
ClassWeight = tuple[tuple[float, float], ...]


def weight_options(class_weight: ClassWeight | None, y: np.ndarray) -> str:
    """``-wLABEL W`` for each weighted class present in ``y`` (absent ones warn on stderr)."""
    if not class_weight:
        return ""
    present = set(np.unique(y).tolist())
    return "".join(f" -w{int(lab)} {w!r}" for lab, w in class_weight if lab in present)


def as_binding_csr(X: sp.spmatrix | np.ndarray) -> sp.csr_matrix:
    """``X`` as float64 ``csr_matrix`` with sorted indices, copied only if needed."""
    if isinstance(X, np.ndarray):
        return sp.csr_matrix(X, dtype=np.float64)
    if not isinstance(X, sp.csr_matrix) or X.dtype != np.float64:
        X = sp.csr_matrix(X, dtype=np.float64)
    if not indices_sorted(X):
        X = X.copy()
        X.has_sorted_indices = False
        X.sort_indices()
    return X


def indices_sorted(X: sp.csr_matrix) -> bool:
    """Check sortedness from the arrays themselves; scipy's cached flag can be stale."""
    ind = X.indices
    if ind.size < 2:
        return True
    inc = np.diff(ind.astype(np.int64)) > 0
    # A decrease is allowed only across a row boundary.
    starts = X.indptr[1:-1]
    starts = starts[(starts > 0) & (starts < ind.size)]
    inc[starts - 1] = True
    return bool(inc.all())


def binding_data(X: sp.spmatrix | np.ndarray, y: np.ndarray) -> tuple[sp.csr_matrix, np.ndarray]:
    """X and y as both bindings take them, checked: sorted float64 CSR, contiguous float64."""
    Xb = as_binding_csr(X)
    yb = np.ascontiguousarray(y, dtype=np.float64)
    if Xb.shape[0] != yb.shape[0]:
        raise EngineError(f"{Xb.shape[0]} rows but {yb.shape[0]} labels")
    if Xb.shape[0] == 0:
        raise EngineError("cannot train on zero rows")
    return Xb, yb


# --- precomputed kernels (-t 4) ------------------------------------------------------------------


def squared_distances(
    X: sp.spmatrix | np.ndarray, Z: sp.spmatrix | np.ndarray | None = None
) -> np.ndarray:
    """Dense |x_i - z_j|^2 from one BLAS product, clipped at 0: each gamma's kernel is exp(-gamma *
    D) (LIBSVM's own kernel was 10x slower on 2,000 DNA rows)."""
    A = as_binding_csr(X)
    B = A if Z is None else as_binding_csr(Z)
    a2 = np.asarray(A.multiply(A).sum(axis=1)).ravel()
    b2 = a2 if Z is None else np.asarray(B.multiply(B).sum(axis=1)).ravel()
    G = A @ B.T
    D = np.asarray(G.toarray() if sp.issparse(G) else G, dtype=np.float64)
    D *= -2.0
    D += a2[:, None]
    D += b2[None, :]
    np.maximum(D, 0.0, out=D)
    if Z is None:
        np.fill_diagonal(D, 0.0)
    return D


def kernel_data(K: np.ndarray, y: np.ndarray) -> tuple[sp.csr_matrix, np.ndarray]:
    """A kernel matrix of the training rows and their labels as LIBSVM's ``-t 4`` takes them,
    checked: :func:`kernel_rows` with serial numbers, contiguous float64 labels."""
    yb = np.ascontiguousarray(y, dtype=np.float64)
    if K.ndim != 2 or K.shape[0] != K.shape[1] or K.shape[0] != yb.shape[0]:
        raise EngineError(f"a kernel matrix of shape {K.shape} for {yb.shape[0]} labels")
    if yb.shape[0] == 0:
        raise EngineError("cannot train on zero rows")
    return kernel_rows(K, serial=True), yb


def kernel_rows(K: np.ndarray, serial: bool) -> sp.csr_matrix:
    """LIBSVM's precomputed-kernel rows: ``0:serial`` (0 for test rows), then every K entry. LIBSVM
    reads by position, so the CSR keeps explicit zeros."""
    n, m = K.shape
    data = np.empty((n, m + 1), dtype=np.float64)
    data[:, 0] = np.arange(1, n + 1) if serial else 0.0
    data[:, 1:] = K
    indices = np.tile(np.arange(m + 1, dtype=np.int32), n)
    indptr = np.arange(0, n * (m + 1) + 1, m + 1, dtype=np.int64)
    out = sp.csr_matrix((data.ravel(), indices, indptr), shape=(n, m + 1))
    out.has_sorted_indices = True
    return out
