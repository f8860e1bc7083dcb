"""Data held in Python made into the :class:`~kcheck.prepare.Prepared` a LIBSVM file gives, without
writing a file. ``kcheck.check(X, y)`` takes a dense array, a scipy sparse matrix or array, or a
pandas DataFrame, and 1-D array-like labels. All is validated here with errors naming the entry; the
caller's objects are only read (every matrix below is a fresh copy), and pandas is recognised by
shape, never imported."""

from __future__ import annotations

import hashlib
import numbers
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck.errors import KcheckError
from kcheck.memory import check_fits, csr_bytes
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
    """A pandas(-like) DataFrame, known without importing pandas: typed columns, to_numpy."""
    return all(hasattr(X, a) for a in ("columns", "dtypes", "to_numpy")) and not sp.issparse(X)


def as_csr(X: Any, what: str = "X") -> sp.csr_matrix:
    """X as a new canonical float64 CSR (sorted, duplicates summed, no stored zeros), as the reader
    gives; ValueError or TypeError naming the problem."""
    if sp.issparse(X):
        if len(X.shape) != 2:
            raise KcheckError(f"{what} must be 2-D (rows, features), got shape {X.shape}")
        if X.dtype.kind not in "biuf":
            raise TypeError(f"{what} must hold numbers, got a sparse matrix of {X.dtype}")
        if X.format not in _CHECKED_FORMATS:
            X = _coordinates(X, what)
        _require_structure(X, what)
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


#: Sparse formats whose indices :func:`_require_structure` checks (others become COO first): scipy's
#: C++ conversions use indices as unchecked offsets and can crash the interpreter.
_CHECKED_FORMATS = ("csr", "csc", "bsr", "coo")


def _coordinates(X: Any, what: str) -> Any:
    """A LIL, DOK or DIA matrix as a new COO one, built in numpy (no index used as an offset)."""
    try:
        return X.tocoo()
    except (ValueError, IndexError) as e:
        raise KcheckError(f"{what}: the sparse matrix's structure is invalid: {e}") from None


def _require_structure(X: Any, what: str) -> None:
    """A sparse matrix's index arrays checked as ``check_format(full_check=True)`` wants, caller's
    object untouched: integers, indptr from 0 non-decreasing, indices in range."""
    rows, cols = (int(n) for n in X.shape)
    if X.format == "coo":
        data = np.asarray(X.data)
        for axis, (index, limit) in enumerate(((X.row, rows), (X.col, cols))):
            _require_indices(np.asarray(index), int(data.shape[0]), limit, axis, what)
        return
    if X.format == "bsr":
        r, c = (int(n) for n in X.blocksize)
        if r < 1 or c < 1 or rows % r or cols % c:
            raise KcheckError(
                f"{what}: its blocks of {r} x {c} do not tile its shape {rows} x {cols}; the "
                "sparse matrix's structure is invalid"
            )
        major, minor, axis = rows // r, cols // c, 0
    elif X.format == "csr":
        major, minor, axis = rows, cols, 0
    else:
        major, minor, axis = cols, rows, 1
    indptr, indices = np.asarray(X.indptr), np.asarray(X.indices)
    stored = min(int(indices.size), int(np.asarray(X.data).shape[0]))
    nnz = _require_indptr(indptr, major, stored, axis, what)
    _require_indices(indices, nnz, minor, axis ^ 1, what)


_AXES = ("row", "column")


def _require_indptr(indptr: np.ndarray, major: int, stored: int, axis: int, what: str) -> int:
    """Stored values an index pointer over ``major`` rows (``axis`` 0) or columns (1) spans."""
    invalid = f"{what}: the sparse matrix's structure is invalid: its index pointer (indptr)"
    if indptr.dtype.kind not in "iu" or indptr.ndim != 1:
        raise KcheckError(f"{invalid} must be 1-D integers, got {indptr.ndim}-D {indptr.dtype}")
    if indptr.size != major + 1:
        raise KcheckError(
            f"{invalid} has {indptr.size:,} entries where {major:,} {_AXES[axis]}s need "
            f"{major + 1:,}"
        )
    if indptr[0] != 0:
        raise KcheckError(f"{invalid} starts at {indptr[0]}, not 0")
    steps = np.diff(indptr)
    if steps.size and steps.min() < 0:
        k = int(np.flatnonzero(steps < 0)[0])
        raise KcheckError(
            f"{invalid} decreases at {_AXES[axis]} {k} ({indptr[k]} then {indptr[k + 1]}); it "
            "must never decrease"
        )
    nnz = int(indptr[-1])
    if nnz > stored:
        raise KcheckError(f"{invalid} ends at {nnz:,}, past its {stored:,} stored values")
    return nnz


def _require_indices(index: np.ndarray, stored: int, limit: int, axis: int, what: str) -> None:
    """``stored`` values' ``axis`` indices (0: rows, 1: columns), each in 0 to ``limit`` - 1."""
    invalid = f"{what}: the sparse matrix's structure is invalid:"
    name = _AXES[axis]
    if index.dtype.kind not in "iu" or index.ndim != 1:
        raise KcheckError(f"{invalid} its {name} indices must be 1-D integers, got {index.dtype}")
    if index.size < stored:
        raise KcheckError(
            f"{invalid} it has {index.size:,} {name} indices for {stored:,} stored values"
        )
    index = index[:stored]
    bad = (index < 0) | (index >= limit)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise KcheckError(
            f"{invalid} stored value {k:,} has {name} index {index[k]}, outside 0 to "
            f"{limit - 1:,} ({limit:,} {name}s)"
        )


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
    _require_distinct_as_doubles(raw, what)
    labels = np.array(raw, dtype=np.float64, copy=True)
    bad = ~np.isfinite(labels)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise KcheckError(f"{what}[{i}] is {labels[i]}; labels must be finite numbers")
    if labels.size != rows:
        raise KcheckError(f"X has {rows:,} rows but {what} has {labels.size:,} labels")
    return labels


def _require_distinct_as_doubles(raw: np.ndarray, what: str) -> None:
    """Refuse two distinct labels that are one double: LIBLINEAR, LIBSVM and their files keep
    doubles, exact only up to 2^53 (2^53 + 1 and 2^53 would merge)."""
    if raw.dtype.kind == "b" or raw.dtype.kind == "f" and raw.dtype.itemsize <= 8:
        return  # booleans, float16/32/64: every value is a double of its own
    if raw.dtype.kind in "iuf":
        values: Any = np.unique(raw)
        doubles = values.astype(np.float64)
    else:  # Python numbers (object arrays): compared exactly, as Python compares them
        values = sorted(set(raw.tolist()))
        doubles = np.array([_double(v, what) for v in values], dtype=np.float64)
    # Rounding keeps the order, so sorted values that became one double are neighbours.
    merged = np.flatnonzero(doubles[1:] == doubles[:-1])
    if merged.size:
        k = int(merged[0])
        raise KcheckError(
            f"{what}: labels {_exact(values[k + 1])} and {_exact(values[k])} are the same as a "
            f"double ({float(doubles[k])!r}); LIBLINEAR and LIBSVM keep labels as doubles, so "
            "they would be one class (map each class to a smaller number first)"
        )


def _double(value: Any, what: str) -> float:
    try:
        return float(value)
    except OverflowError:
        raise KcheckError(
            f"{what}: label {_exact(value)} is too large for a double; LIBLINEAR and LIBSVM "
            "keep labels as doubles"
        ) from None


def _exact(value: Any) -> str:
    """A label as written: an integer's every digit, a float's shortest repr."""
    if isinstance(value, (numbers.Integral, np.integer)):
        return str(int(value))
    return str(value)


def content_hash(X: sp.csr_matrix, y: np.ndarray) -> str:
    """SHA-256 of the canonical CSR and labels: the same data hashes alike in any form."""
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
    """:func:`kcheck.prepare.prepare`'s result made of arrays: validated, coded, scaled;
    ``data.path`` None, ``data.sha256`` :func:`content_hash`."""
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
    check_fits(name, csr_bytes(A), memory_limit)
    return scaled(name, A, y_raw, classes, summary, scaling, memory_limit, read_seconds)


class ArrayTest(TestFile):
    """``test=(X, y)``: arrays to score models on, checked as a test file is (training's width)."""

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
