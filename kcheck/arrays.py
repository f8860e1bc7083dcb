"""Data held in Python made into what a check trains on: the :class:`~kcheck.prepare.Prepared`
that a LIBSVM file gives, without writing the file.

``kcheck.check(X, y)`` takes a dense numpy array, a scipy sparse matrix or array (CSR, CSC,
COO...) or a pandas DataFrame, and labels as any 1-D array-like. Everything is validated here,
at the boundary, with errors that name the offending entry; the caller's objects are only
read (every matrix below is a fresh copy), and pandas is recognised by its shape, never
imported, so it stays optional.
"""

from __future__ import annotations

import hashlib
import numbers
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck.errors import KcheckError
from kcheck.prepare import (
    Prepared,
    TestFile,
    _validate,
    data_summary,
    require_integer_labels,
    scaled,
)
from kcheck.verdict import label_value

#: How arrays are named in messages (a file is named by its path).
TRAIN_NAME = "<arrays>"
TEST_NAME = "<test arrays>"
#: What the content hash of arrays starts with, so that it never equals a file's hash.
_HASH_TAG = b"kcheck arrays v1\0"


def is_frame(X: Any) -> bool:
    """A pandas (or pandas-like) DataFrame, recognised without importing pandas: it has
    columns with a dtype each and converts itself to numpy."""
    return all(hasattr(X, a) for a in ("columns", "dtypes", "to_numpy")) and not sp.issparse(X)


def as_csr(X: Any, what: str = "X") -> sp.csr_matrix:
    """X as a new canonical float64 CSR matrix (sorted, duplicates summed, no stored zeros),
    as the LIBSVM reader gives; ValueError or TypeError naming what is wrong."""
    if sp.issparse(X):
        if len(X.shape) != 2:
            raise KcheckError(f"{what} must be 2-D (rows, features), got shape {X.shape}")
        if X.dtype.kind not in "biuf":
            raise TypeError(f"{what} must hold numbers, got a sparse matrix of {X.dtype}")
        A = sp.csr_matrix(X, dtype=np.float64, copy=True)
        A.sum_duplicates()
    else:
        A = sp.csr_matrix(_dense(X, what))
    _require_finite(A, what)
    A.eliminate_zeros()
    A.sort_indices()
    if A.nnz < 2**31 and max(A.shape) < 2**31:
        A.indices = A.indices.astype(np.int32, copy=False)
        A.indptr = A.indptr.astype(np.int32, copy=False)
    return A


def _dense(X: Any, what: str) -> np.ndarray:
    """A dense 2-D float64 copy of X (a frame's numeric columns, or any array-like)."""
    if is_frame(X):
        for name, dtype in zip(list(X.columns), list(X.dtypes), strict=True):
            if getattr(dtype, "kind", "O") not in "biuf":
                raise KcheckError(
                    f"{what}: column {name!r} is not numeric ({dtype}); kcheck needs numbers "
                    "in every column (encode it, or drop it)"
                )
        arr = np.array(X.to_numpy(dtype=np.float64), dtype=np.float64, copy=True)
    else:
        raw = np.asarray(X)
        if raw.dtype.kind not in "biuf":
            raise TypeError(
                f"{what} must hold numbers, got an array of {raw.dtype}"
                + (" (a string or object column?)" if raw.dtype.kind in "OUS" else "")
            )
        arr = np.array(raw, dtype=np.float64, copy=True)
    if arr.ndim != 2:
        hint = "; reshape(-1, 1) for a single feature" if arr.ndim == 1 else ""
        raise KcheckError(
            f"{what} must be 2-D (rows, features), got {arr.ndim}-D shape {arr.shape}{hint}"
        )
    return arr


def _require_finite(A: sp.csr_matrix, what: str) -> None:
    bad = ~np.isfinite(A.data)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        row = int(np.searchsorted(A.indptr, k, side="right") - 1)
        raise KcheckError(
            f"{what}[{row}, {int(A.indices[k])}] is {A.data[k]}; kcheck needs finite values "
            "(impute or drop the missing ones)"
        )


def as_labels(y: Any, rows: int, what: str = "y") -> np.ndarray:
    """The labels as a new 1-D float64 array, one per row of X; every label a finite number."""
    raw = np.asarray(y.to_numpy() if hasattr(y, "to_numpy") and not sp.issparse(y) else y)
    if raw.ndim != 1:
        raise KcheckError(f"{what} must be 1-D (one label a row), got shape {raw.shape}")
    if raw.dtype.kind not in "biuf":
        for i, v in enumerate(raw.tolist()):
            if not isinstance(v, numbers.Real):
                raise KcheckError(
                    f"{what}[{i}] is {v!r}; labels must be numbers (as in a LIBSVM file): "
                    "map each class to a number first"
                )
    labels = np.array(raw, dtype=np.float64, copy=True)
    bad = ~np.isfinite(labels)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise KcheckError(f"{what}[{i}] is {labels[i]}; labels must be finite numbers")
    if labels.size != rows:
        raise KcheckError(f"X has {rows:,} rows but {what} has {labels.size:,} labels")
    return labels


def content_hash(X: sp.csr_matrix, y: np.ndarray) -> str:
    """SHA-256 of the canonical CSR and the labels: the same data gives the same hash, whatever
    form (dense, CSC, a frame) it came in; it ties a verdict to its data as a file's does."""
    h = hashlib.sha256(_HASH_TAG)
    h.update(np.asarray(X.shape, dtype="<i8").tobytes())
    for part, dtype in ((X.indptr, "<i8"), (X.indices, "<i8"), (X.data, "<f8"), (y, "<f8")):
        h.update(np.ascontiguousarray(part, dtype=dtype).tobytes())
    return h.hexdigest()


def prepare_arrays(
    X: Any,
    y: Any,
    *,
    scaling: str,
    memory_limit: int,
    integer_labels: bool = False,
    name: str = TRAIN_NAME,
) -> Prepared:
    """What :func:`kcheck.prepare.prepare` makes of a file, made of arrays: validated, labels
    coded, scaled. ``data.path`` is None and ``data.sha256`` is :func:`content_hash`."""
    t0 = time.perf_counter()
    A = as_csr(X)
    y_raw = as_labels(y, A.shape[0])
    read_seconds = time.perf_counter() - t0
    if integer_labels:
        require_integer_labels(y_raw)
    classes = np.unique(y_raw)
    _validate(name, A.shape[0], classes)
    summary = data_summary(name, A, classes, content_hash(A, y_raw))
    summary["path"] = None
    return scaled(name, A, y_raw, classes, summary, scaling, memory_limit, read_seconds)


class ArrayTest(TestFile):
    """``test=(X, y)``: arrays to score the trained models on, checked now as a test file is.

    Held whole (it is in memory already); its rows must be as wide as the training data's.
    """

    def __init__(self, X: Any, y: Any, prepared: Prepared, name: str = TEST_NAME) -> None:
        A = as_csr(X, "test X")
        labels = as_labels(y, A.shape[0], "test y")
        if A.shape[1] != prepared.n_features:
            raise KcheckError(
                f"test X has {A.shape[1]:,} features, the training X {prepared.n_features:,}"
            )
        self.path = name
        self.classes = prepared.classes
        self.train_path = prepared.path
        self.scaler = prepared.scaler
        self.kept = [(labels, A)]
        self.y = self.class_index(labels)
        self.sha256 = content_hash(A, labels)
        self.unseen = int(np.count_nonzero(self.y < 0))
        if self.unseen == self.rows:
            shown = ", ".join(str(label_value(v)) for v in np.unique(labels)[:5])
            raise KcheckError(
                f"test y: none of its labels ({shown}) occurs in the training labels, so no "
                "model can be scored on it"
            )
