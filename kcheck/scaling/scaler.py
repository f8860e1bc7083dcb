"""A fitted feature-wise scaling, bit-equal to svm-scale's: :class:`Scaler` (``minmax``, ``maxabs``)
and :class:`LabelScaling` (``-y``); fitting is :mod:`kcheck.scaling.fitting`'s."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck.errors import KcheckError

#: Supported scaling schemes.
METHODS = ("minmax", "maxabs")


# Stored values are scaled in chunks so temporaries stay small on large data.
_CHUNK = 1 << 20


def check_options(method: str, lower: float, upper: float) -> tuple[float, float]:
    """Validate user-facing options; these are user errors, hence KcheckError."""
    if method not in METHODS:
        raise KcheckError(f"unknown scaling method {method!r}; expected one of: minmax, maxabs")
    try:
        lo, up = float(lower), float(upper)
    except (TypeError, ValueError) as exc:
        raise KcheckError(f"scaling bounds must be numbers, got {lower!r} and {upper!r}") from exc
    if not (math.isfinite(lo) and math.isfinite(up)):
        raise KcheckError(f"scaling bounds must be finite, got lower={lo:g}, upper={up:g}")
    if not lo < up:
        raise KcheckError(f"scaling needs lower < upper, got lower={lo:g}, upper={up:g}")
    if not math.isfinite(up - lo):
        raise KcheckError(f"scaling range [{lo:g}, {up:g}] is too wide")
    if method == "maxabs" and (lo, up) != (-1.0, 1.0):
        raise KcheckError("max-abs scaling always maps to [-1, 1]; lower/upper cannot be changed")
    return lo, up


def _frozen_vector(values: Any, name: str) -> np.ndarray:
    arr = np.array(values, dtype=np.float64, copy=True)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class LabelScaling:
    """svm-scale's ``-y y_lower y_upper``: labels mapped from [y_min, y_max] to [lower, upper],
    bounds exact and the rest in svm-scale's evaluation order (bit-equal). Test labels outside the
    training range map outside [lower, upper], as in svm-scale."""

    lower: float
    upper: float
    y_min: float
    y_max: float

    def __post_init__(self) -> None:
        try:
            lo, up, y_min, y_max = (
                float(v) for v in (self.lower, self.upper, self.y_min, self.y_max)
            )
        except (TypeError, ValueError) as exc:
            raise KcheckError("label scaling needs numbers for -y and the label range") from exc
        if not all(math.isfinite(v) for v in (lo, up, y_min, y_max)):
            raise KcheckError("label scaling needs finite numbers (-y and the label range)")
        if not lo < up:
            raise KcheckError(f"-y needs y_lower < y_upper, got {lo:g} {up:g}")
        if not (math.isfinite(up - lo) and math.isfinite(y_max - y_min)):
            raise KcheckError("label scaling: a range is too wide to scale")
        if not y_min <= y_max:
            raise KcheckError(f"label scaling needs y_min <= y_max, got {y_min:g} > {y_max:g}")
        for name, value in (("lower", lo), ("upper", up), ("y_min", y_min), ("y_max", y_max)):
            object.__setattr__(self, name, value)

    def apply(self, y: Any) -> np.ndarray:
        """The scaled labels, as a new float64 array."""
        y = np.asarray(y, dtype=np.float64)
        lo, up, y_min, y_max = self.lower, self.upper, self.y_min, self.y_max
        span = y_max - y_min
        with np.errstate(all="ignore"):
            out = lo + (up - lo) * (y - y_min) / (span if span else 1.0)
        out[y == y_max] = up
        out[y == y_min] = lo  # svm-scale tests y_min first
        if span == 0 and not ((y == y_min) | (y == y_max)).all():
            other = float(y[(y != y_min) & (y != y_max)][0])
            raise KcheckError(
                f"cannot scale label {other:g}: every training label was {y_min:g}, so the "
                "label range is empty"
            )
        if not np.isfinite(out).all():
            raise KcheckError("scaled labels overflow: labels are too large to scale")
        return np.asarray(out)


@dataclass(frozen=True, eq=False)
class Scaler:
    """A fitted feature-wise scaling, applied unchanged to any data. ``feature_min``/``feature_max``
    per 0-based column hold exactly the range file's values for the 1-based index (``-m`` and ``m``
    for ``maxabs``); ``min == max``: dropped (maps to 0). ``y_scaling``: the range file's ``y``
    section, if any. Equality compares all fields exactly."""

    method: str
    lower: float
    upper: float
    feature_min: np.ndarray
    feature_max: np.ndarray
    y_scaling: LabelScaling | None = None

    def __post_init__(self) -> None:
        if self.y_scaling is not None and not isinstance(self.y_scaling, LabelScaling):
            raise ValueError("y_scaling must be a LabelScaling or None")
        lo, up = check_options(self.method, self.lower, self.upper)
        fmin = _frozen_vector(self.feature_min, "feature_min")
        fmax = _frozen_vector(self.feature_max, "feature_max")
        if fmin.shape != fmax.shape:
            raise ValueError(f"feature_min {fmin.shape} and feature_max {fmax.shape} differ")
        if not (np.isfinite(fmin).all() and np.isfinite(fmax).all()):
            raise ValueError("feature_min and feature_max must be finite")
        if (fmin > fmax).any():
            j = int(np.flatnonzero(fmin > fmax)[0])
            raise ValueError(f"feature {j + 1}: min {fmin[j]!r} > max {fmax[j]!r}")
        # Max-abs divides by max |x|, which is finite; only min-max needs max - min to be.
        with np.errstate(over="ignore"):
            if self.method == "minmax" and not np.isfinite(fmax - fmin).all():
                j = int(np.flatnonzero(~np.isfinite(fmax - fmin))[0])
                raise KcheckError(f"feature {j + 1}: range [{fmin[j]:g}, {fmax[j]:g}] too wide")
        if self.method == "maxabs" and not np.array_equal(fmin, -fmax):
            raise ValueError("a max-abs scaler needs feature_min == -feature_max")
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", up)
        object.__setattr__(self, "feature_min", fmin)
        object.__setattr__(self, "feature_max", fmax)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Scaler):
            return NotImplemented
        return (
            self.method == other.method
            and self.lower == other.lower
            and self.upper == other.upper
            and np.array_equal(self.feature_min, other.feature_min)
            and np.array_equal(self.feature_max, other.feature_max)
            and self.y_scaling == other.y_scaling
        )

    __hash__ = None  # type: ignore[assignment]

    @property
    def n_features(self) -> int:
        """Width of the scaled output; wider input is cut, narrower input padded."""
        return int(self.feature_min.shape[0])

    @property
    def n_dense(self) -> int:
        """Columns where zero maps to a non-zero value: every scaled row stores them."""
        return int(self._dense_columns.size)

    @cached_property
    def _kept(self) -> np.ndarray:
        return np.asarray(self.feature_min != self.feature_max)

    @cached_property
    def _divisor(self) -> np.ndarray:
        # x / inf == 0 drops constant features without a separate mask.
        return np.where(self._kept, self.feature_max, np.inf)

    @cached_property
    def _zero_image(self) -> np.ndarray:
        """What a zero becomes per column, in column chunks (small temporaries on wide data)."""
        n = self.n_features
        out = np.empty(n)
        for start in range(0, n, _CHUNK):
            stop = min(n, start + _CHUNK)
            out[start:stop] = self._scale_values(np.zeros(stop - start), slice(start, stop))
        return out

    @cached_property
    def _dense_columns(self) -> np.ndarray:
        """Columns where zero maps to non-zero: these are necessarily dense in the output."""
        return np.flatnonzero(self._zero_image != 0)

    @cached_property
    def _in_dense(self) -> np.ndarray:
        """Per column, whether it is one of :attr:`_dense_columns`."""
        mask = np.zeros(self.n_features, dtype=bool)
        mask[self._dense_columns] = True
        return mask

    def _scale_values(self, values: np.ndarray, cols: np.ndarray | slice) -> np.ndarray:
        """Scale stored values of columns ``cols`` (all < n_features, or a slice); a new array."""
        if self.method == "maxabs":
            out = values / self._divisor[cols]
        else:
            mn = self.feature_min[cols]
            mx = self.feature_max[cols]
            span = mx - mn
            const = span == 0
            lo, up = self.lower, self.upper
            # Same evaluation order as svm-scale.c: lower + (upper-lower)*(v-min)/(max-min).
            with np.errstate(over="ignore", invalid="ignore"):
                out = lo + (up - lo) * (values - mn) / np.where(const, 1.0, span)
            inside = (values > mn) & (values < mx)
            out[inside] = np.clip(out[inside], lo, up)
            out[values == mx] = up
            out[values == mn] = lo
            out[const] = 0.0
        if not np.isfinite(out).all():
            raise KcheckError("scaled values overflow: feature values are too large to scale")
        return np.asarray(out)

    def _scale_data_inplace(self, X: Any) -> None:
        """Scale the stored values of a canonical CSR in place; columns >= n become 0."""
        n = self.n_features
        data, cols = X.data, X.indices
        for start in range(0, data.size, _CHUNK):
            sl = slice(start, start + _CHUNK)
            c = cols[sl]
            inside = c < n
            if inside.all():
                data[sl] = self._scale_values(data[sl], c)
            else:
                chunk = np.zeros(c.size)
                chunk[inside] = self._scale_values(data[sl][inside], c[inside])
                data[sl] = chunk

    def transform(self, X: Any) -> sp.csr_matrix:
        """Scaled ``X`` as a new float64 ``csr_matrix`` (sorted, no explicit zeros); ``X`` is not
        modified. Columns past ``n_features`` dropped, missing ones padded (as svm-scale -r)."""
        A = _owned_csr(X, self.n_features)
        self._scale_data_inplace(A)
        dense = self._dense_columns
        if dense.size == 0:
            A.eliminate_zeros()
            return A
        return self._fill_dense_columns(A, dense)

    def _fill_dense_columns(self, A: sp.csr_matrix, dense: np.ndarray) -> sp.csr_matrix:
        """Add the non-zero images of zeros in ``dense`` columns to scaled ``A``: one dense block,
        merged with the disjoint sparse rest by addition (x + 0 is exact)."""
        rows, n = A.shape
        stored_dense = self._in_dense[A.indices]
        row_of = np.repeat(np.arange(rows), np.diff(A.indptr))
        block = np.empty((rows, dense.size))
        block[:] = self._zero_image[dense]
        # dense is sorted: a stored column's place in the block is its rank in dense.
        pos = np.searchsorted(dense, A.indices[stored_dense])
        block[row_of[stored_dense], pos] = A.data[stored_dense]
        block_csr = sp.csr_matrix(
            (block.ravel(), np.tile(dense, rows), np.arange(rows + 1) * dense.size),
            shape=(rows, n),
        )
        sparse_part = select_entries(A, ~stored_dense)
        if sparse_part.data.any():
            out = sp.csr_matrix(sparse_part + block_csr)
        else:  # every kept feature is dense (svm-scale's default on most data)
            out = block_csr
        out.eliminate_zeros()
        out.sort_indices()
        return out

    def transform_inplace(self, X: Any) -> Any:
        """Scale a CSR matrix's stored values in place (saves a copy) and return ``X``. Only where
        every zero maps to zero (always for maxabs), else ``ValueError``. ``X`` ends float64,
        canonical and ``n_features`` wide; its contents are unspecified after a ``KcheckError``."""
        if not sp.issparse(X) or X.format != "csr":
            raise ValueError("transform_inplace needs a CSR matrix; use transform() otherwise")
        if self._dense_columns.size:
            raise ValueError(
                f"zero maps to a non-zero value in {self._dense_columns.size} feature(s), so "
                "the result is not sparse and cannot be computed in place; use transform()"
            )
        if X.dtype != np.float64:
            X.data = X.data.astype(np.float64)
        X.sum_duplicates()
        check_finite(X.data)
        self._scale_data_inplace(X)
        X.eliminate_zeros()
        if X.shape[1] != self.n_features:
            X.resize((X.shape[0], self.n_features))
        return X

    def nnz_after(self, X: Any) -> int:
        """Stored entries :meth:`transform` would produce (for svm-scale's densify warning)."""
        A = canonical_csr(X)
        data, cols, rows = A.data, A.indices, A.shape[0]
        n = self.n_features
        dense = self._dense_columns
        in_dense = self._in_dense
        count = rows * dense.size
        for start in range(0, data.size, _CHUNK):
            c = cols[start : start + _CHUNK]
            v = data[start : start + _CHUNK]
            keep = c < n
            c, v = c[keep], v[keep]
            nonzero = self._scale_values(v, c) != 0
            stored_dense = in_dense[c]
            count += int(np.count_nonzero(nonzero & ~stored_dense))
            count -= int(np.count_nonzero(~nonzero & stored_dense))
        return int(count)


def check_finite(data: np.ndarray) -> None:
    for start in range(0, data.size, _CHUNK):
        if not np.isfinite(data[start : start + _CHUNK]).all():
            raise KcheckError("feature values must be finite (found inf or nan)")


def _is_canonical(X: Any) -> bool:
    """Sorted, duplicate-free indices, checked without touching X's cached flags."""
    indices, indptr = X.indices, X.indptr
    if indices.size < 2:
        return True
    increasing = np.diff(indices) > 0
    # A decrease is fine where a new row starts.
    starts = indptr[1:-1]
    starts = starts[(starts > 0) & (starts < indices.size)]
    increasing[starts - 1] = True
    return bool(increasing.all())


def canonical_csr(X: Any) -> sp.csr_matrix:
    """X as a canonical float64 csr_matrix, sharing X's arrays where it already is one (callers only
    read it); copied only for another format, dtype, or unsorted/duplicate indices."""
    if not sp.issparse(X):
        return sp.csr_matrix(dense_2d(X))
    A = X if X.format == "csr" else X.tocsr()
    if A.dtype == np.float64 and _is_canonical(A):
        A = sp.csr_matrix((A.data, A.indices, A.indptr), shape=A.shape, copy=False)
    else:
        A = sp.csr_matrix(
            (np.array(A.data, dtype=np.float64), A.indices.copy(), A.indptr.copy()),
            shape=A.shape,
        )
        A.sum_duplicates()
    check_finite(A.data)
    return A


def dense_2d(X: Any) -> np.ndarray:
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"expected a 2-D matrix, got shape {arr.shape}")
    check_finite(arr.ravel())
    return arr


def _owned_csr(X: Any, n: int) -> sp.csr_matrix:
    """A fresh canonical float64 csr_matrix copy of X, exactly ``n`` columns wide."""
    if sp.issparse(X):
        src = X if X.format == "csr" else X.tocsr()
        A = sp.csr_matrix(
            (np.array(src.data, dtype=np.float64), src.indices.copy(), src.indptr.copy()),
            shape=src.shape,
        )
        A.sum_duplicates()
        check_finite(A.data)
    else:
        A = sp.csr_matrix(dense_2d(X))
    rows = A.shape[0]
    keep = A.indices < n
    if not keep.all():
        A = select_entries(A, keep)
    return sp.csr_matrix((A.data, A.indices, A.indptr), shape=(rows, n))


def select_entries(A: sp.csr_matrix, keep: np.ndarray) -> sp.csr_matrix:
    """The stored entries of A where ``keep`` holds, order preserved (no dense step)."""
    cum = np.concatenate(([0], np.cumsum(keep)))
    return sp.csr_matrix((A.data[keep], A.indices[keep], cum[A.indptr]), shape=A.shape)
