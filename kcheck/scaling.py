"""Feature-wise scaling, compatible with LIBSVM's ``svm-scale``.

Two schemes, both stored as svm-scale range files so that ``svm-scale -r`` reproduces them:

* ``minmax`` (svm-scale's default) maps each feature's [min, max] to [lower, upper]. As in
  svm-scale, min and max include the implicit zeros of rows that do not store the feature, and
  the formula, including its ``value == min -> lower`` and ``value == max -> upper`` shortcuts,
  is evaluated in the same order, so values agree with svm-scale's to the last bit (apart from
  a clamp that keeps training values inside [lower, upper] where rounding would overshoot).
* ``maxabs`` divides each feature by its largest absolute value, so zeros stay zeros and
  sparse data stays sparse. Its range file is ``-1 1`` with ``-m m`` per feature.

A constant feature (min == max, implicit zeros included) or an absent one maps to 0 and is
dropped, as svm-scale does. Such features are stored as ``min == max == 0``, which is how a
range file that omits them reads back. Scaling is fitted on training data only.

Labels can be scaled too (svm-scale's ``-y``, a :class:`LabelScaling`), stored in the range
file's ``y`` section. :func:`scaled_text` prints scaled data the way svm-scale does, so that
the two outputs can be compared byte for byte.
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck.atomic import atomic_open
from kcheck.errors import DataFormatError, KcheckError
from kcheck.memory import check_width, line_too_long, max_line_bytes

__all__ = [
    "METHODS",
    "RANGE_SUFFIX",
    "LabelScaling",
    "Scaler",
    "densify_warning",
    "fit_label_scaling",
    "fit_scaler",
    "read_range_file",
    "scaled_text",
    "write_range_file",
]

#: Supported scaling schemes.
METHODS = ("minmax", "maxabs")
#: The largest feature index a LIBSVM file can hold (a C int).
MAX_INDEX = 2**31 - 1

#: A model's range file is the model's path plus this.
RANGE_SUFFIX = ".range"

# Stored values are scaled in chunks so temporaries stay small on large data.
_CHUNK = 1 << 20


def _check_options(method: str, lower: float, upper: float) -> tuple[float, float]:
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
    """svm-scale's ``-y y_lower y_upper``: labels mapped from [y_min, y_max] to [lower, upper].

    Labels equal to ``y_min`` or ``y_max`` map to the bounds exactly and the others by
    svm-scale's formula in its order of evaluation, so scaled labels agree to the last bit.
    A label is scaled by the training file's y_min and y_max, so a test label outside them
    maps outside [lower, upper], as svm-scale does.
    """

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


def fit_label_scaling(y: Any, lower: float, upper: float) -> LabelScaling:
    """svm-scale's ``-y``: the training labels' min and max, to map onto [lower, upper]."""
    y = np.asarray(y, dtype=np.float64)
    if y.size == 0:
        raise KcheckError("-y needs at least one row to find the label range")
    return LabelScaling(lower, upper, float(y.min()), float(y.max()))


@dataclass(frozen=True, eq=False)
class Scaler:
    """A fitted feature-wise scaling, applied unchanged to any data.

    ``feature_min``/``feature_max`` hold, per 0-based column, exactly what the range file
    holds for the 1-based index; ``min == max`` means the feature is dropped (maps to 0).
    For ``maxabs`` they are ``-m`` and ``m``. ``y_scaling`` is the range file's ``y`` section
    (svm-scale ``-y``), if any; features are scaled the same with or without it. Equality
    compares all fields exactly.
    """

    method: str
    lower: float
    upper: float
    feature_min: np.ndarray
    feature_max: np.ndarray
    y_scaling: LabelScaling | None = None

    def __post_init__(self) -> None:
        if self.y_scaling is not None and not isinstance(self.y_scaling, LabelScaling):
            raise ValueError("y_scaling must be a LabelScaling or None")
        lo, up = _check_options(self.method, self.lower, self.upper)
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

    @cached_property
    def _kept(self) -> np.ndarray:
        return np.asarray(self.feature_min != self.feature_max)

    @cached_property
    def _divisor(self) -> np.ndarray:
        # x / inf == 0 drops constant features without a separate mask.
        return np.where(self._kept, self.feature_max, np.inf)

    @cached_property
    def _zero_image(self) -> np.ndarray:
        """What a zero (stored or implicit) becomes, per column."""
        return self._scale_values(np.zeros(self.n_features), np.arange(self.n_features))

    @cached_property
    def _dense_columns(self) -> np.ndarray:
        """Columns where zero maps to non-zero: these are necessarily dense in the output."""
        return np.flatnonzero(self._zero_image != 0)

    def _scale_values(self, values: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Scale stored values of columns ``cols`` (all < n_features); returns a new array."""
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
        """Return scaled ``X`` as a new float64 ``csr_matrix`` (sorted, no explicit zeros).

        ``X`` (sparse or dense) is never modified. Columns beyond ``n_features`` are dropped
        and missing ones padded, so test data of another width scales like svm-scale -r.
        """
        A = _owned_csr(X, self.n_features)
        self._scale_data_inplace(A)
        dense = self._dense_columns
        if dense.size == 0:
            A.eliminate_zeros()
            return A
        return self._fill_dense_columns(A, dense)

    def _fill_dense_columns(self, A: sp.csr_matrix, dense: np.ndarray) -> sp.csr_matrix:
        """Add the non-zero images of the zeros in ``dense`` columns to scaled ``A``.

        The dense columns are built as one (rows x len(dense)) block, the rest stays sparse,
        and the two disjoint patterns are merged by a sparse addition (x + 0 is exact).
        """
        rows, n = A.shape
        in_dense = np.zeros(n, dtype=bool)
        in_dense[dense] = True
        pos = np.full(n, -1, dtype=np.intp)
        pos[dense] = np.arange(dense.size)
        stored_dense = in_dense[A.indices]
        row_of = np.repeat(np.arange(rows), np.diff(A.indptr))
        block = np.empty((rows, dense.size))
        block[:] = self._zero_image[dense]
        block[row_of[stored_dense], pos[A.indices[stored_dense]]] = A.data[stored_dense]
        block_csr = sp.csr_matrix(
            (block.ravel(), np.tile(dense, rows), np.arange(rows + 1) * dense.size),
            shape=(rows, n),
        )
        sparse_part = _select_entries(A, ~stored_dense)
        if sparse_part.data.any():
            out = sp.csr_matrix(sparse_part + block_csr)
        else:  # every kept feature is dense (svm-scale's default on most data)
            out = block_csr
        out.eliminate_zeros()
        out.sort_indices()
        return out

    def transform_inplace(self, X: Any) -> Any:
        """Scale a CSR matrix's stored values in place and return ``X`` itself.

        Saves a copy of large data. Only possible when every zero maps to zero (always for
        maxabs), otherwise ``ValueError``. ``X`` ends up float64, canonical (sorted, no
        duplicates or explicit zeros) and ``n_features`` wide. If scaling fails part way
        (``KcheckError`` on non-finite values), ``X``'s contents are unspecified.
        """
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
        _check_finite(X.data)
        self._scale_data_inplace(X)
        X.eliminate_zeros()
        if X.shape[1] != self.n_features:
            X.resize((X.shape[0], self.n_features))
        return X

    def nnz_after(self, X: Any) -> int:
        """Number of stored entries :meth:`transform` would produce, without producing it.

        Compare with ``X.nnz`` to warn, as svm-scale does, when scaling densifies the data.
        """
        A = _canonical_csr(X)
        data, cols, rows = A.data, A.indices, A.shape[0]
        n = self.n_features
        dense = self._dense_columns
        in_dense = np.zeros(n, dtype=bool)
        in_dense[dense] = True
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


def densify_warning(nnz_before: int, nnz_after: int) -> str | None:
    """svm-scale's warning (LIBSVM 3.24 wording) when scaling adds non-zeros, else None."""
    if nnz_after <= nnz_before:
        return None
    return (
        f"WARNING: original #nonzeros {nnz_before}\n"
        f"       > new      #nonzeros {nnz_after}\n"
        "If feature values are non-negative and sparse, use -l 0 rather than the default -l -1"
    )


#: Rows formatted by one %-operation (a block of svm-scale output).
_ROWS_PER_BLOCK = 4096


def scaled_text(y: Any, X: Any, *, full_precision: bool = False) -> Iterator[str]:
    """Scaled data as svm-scale prints it, in blocks of rows: byte for byte the same text.

    svm-scale (LIBSVM 3.24) prints each label with ``%.17g`` and a space, each non-zero value
    as ``index:%g`` and a space, then a newline; ``%g`` keeps 6 significant digits.
    ``full_precision`` prints values with ``%.17g`` instead, which reads back exactly (the
    layout stays svm-scale's). ``X`` is the output of :meth:`Scaler.transform`.
    """
    yv = np.asarray(y, dtype=np.float64).reshape(-1)
    A = _canonical_csr(X)
    A = _select_entries(A, A.data != 0) if (A.data == 0).any() else A
    if A.shape[0] != yv.size:
        raise ValueError(f"y has {yv.size} entries but X has {A.shape[0]} rows")
    if not np.isfinite(yv).all():
        raise KcheckError("labels must be finite (found inf or nan)")
    pair = " %d:%.17g" if full_precision else " %d:%g"
    formats: dict[int, str] = {}
    indptr, indices, data = A.indptr, A.indices, A.data
    for r0 in range(0, A.shape[0], _ROWS_PER_BLOCK):
        r1 = min(r0 + _ROWS_PER_BLOCK, A.shape[0])
        p0, p1 = int(indptr[r0]), int(indptr[r1])
        pairs: list[Any] = [None] * (2 * (p1 - p0))
        pairs[0::2] = (indices[p0:p1] + 1).tolist()
        pairs[1::2] = data[p0:p1].tolist()
        ptr = indptr[r0 : r1 + 1].tolist()
        labels = yv[r0:r1].tolist()
        fmt: list[str] = []
        args: list[Any] = []
        for i in range(r1 - r0):
            k = ptr[i + 1] - ptr[i]
            f = formats.get(k)
            if f is None:
                # "label idx:v idx:v \n": svm-scale ends every item with a space.
                f = formats[k] = "%.17g" + pair * k + " \n"
            fmt.append(f)
            args.append(labels[i])
            a = 2 * (ptr[i] - p0)
            args.extend(pairs[a : a + 2 * k])
        yield "".join(fmt) % tuple(args)


def _check_finite(data: np.ndarray) -> None:
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


def _canonical_csr(X: Any) -> sp.csr_matrix:
    """X as a canonical float64 csr_matrix, sharing X's arrays when X already is one.

    Callers only read the result, so X is never modified; a copy is made only when X has
    another format or dtype, or unsorted or duplicate indices.
    """
    if not sp.issparse(X):
        return sp.csr_matrix(_dense_2d(X))
    A = X if X.format == "csr" else X.tocsr()
    if A.dtype == np.float64 and _is_canonical(A):
        A = sp.csr_matrix((A.data, A.indices, A.indptr), shape=A.shape, copy=False)
    else:
        A = sp.csr_matrix(
            (np.array(A.data, dtype=np.float64), A.indices.copy(), A.indptr.copy()),
            shape=A.shape,
        )
        A.sum_duplicates()
    _check_finite(A.data)
    return A


def _dense_2d(X: Any) -> np.ndarray:
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"expected a 2-D matrix, got shape {arr.shape}")
    _check_finite(arr.ravel())
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
        _check_finite(A.data)
    else:
        A = sp.csr_matrix(_dense_2d(X))
    rows = A.shape[0]
    keep = A.indices < n
    if not keep.all():
        A = _select_entries(A, keep)
    return sp.csr_matrix((A.data, A.indices, A.indptr), shape=(rows, n))


def _select_entries(A: sp.csr_matrix, keep: np.ndarray) -> sp.csr_matrix:
    """The stored entries of A where ``keep`` holds, order preserved (no dense step)."""
    cum = np.concatenate(([0], np.cumsum(keep)))
    return sp.csr_matrix((A.data[keep], A.indices[keep], cum[A.indptr]), shape=A.shape)


def _column_min_max(X: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-column min and max over all rows, implicit zeros included (as svm-scale does)."""
    if not sp.issparse(X):
        arr = _dense_2d(X)
        if arr.shape[0] == 0:
            return np.zeros(arr.shape[1]), np.zeros(arr.shape[1])
        return arr.min(axis=0), arr.max(axis=0)
    rows, n = X.shape
    csc = _canonical_csr(X).tocsc()
    counts = np.diff(csc.indptr)
    fmin = np.zeros(n)
    fmax = np.zeros(n)
    has = counts > 0
    if has.any():
        starts = csc.indptr[:-1][has]
        fmin[has] = np.minimum.reduceat(csc.data, starts)
        fmax[has] = np.maximum.reduceat(csc.data, starts)
    partial = counts < rows
    fmin[partial] = np.minimum(fmin[partial], 0.0)
    fmax[partial] = np.maximum(fmax[partial], 0.0)
    return fmin, fmax


def fit_scaler(
    X: Any,
    method: str = "minmax",
    lower: float = -1.0,
    upper: float = 1.0,
    source: str | None = None,
    memory_limit: int | None = None,
) -> Scaler:
    """Fit a scaling on training data ``X`` (sparse or dense, rows x features).

    Min and max include implicit zeros, so on sparse data the fitted range matches what
    svm-scale computes from the same file. Constant and absent features get min == max == 0.
    ``source`` (the file X came from) prefixes the message of a data problem. The width is
    checked against ``memory_limit`` (the default limit when None) first.
    """
    _check_options(method, lower, upper)
    check_width(source or "the data", int(X.shape[1]), memory_limit)
    try:
        return _fit(X, method, lower, upper)
    except KcheckError as e:
        if source is None:
            raise
        raise KcheckError(f"{source}: {e}") from None


def _fit(X: Any, method: str, lower: float, upper: float) -> Scaler:
    fmin, fmax = _column_min_max(X)
    const = fmin == fmax
    if method == "maxabs":
        m = np.maximum(np.abs(fmin), np.abs(fmax))
        m[const] = 0.0
        return Scaler(method, lower, upper, 0.0 - m, m)  # 0.0 - m: no -0.0 entries
    fmin[const] = 0.0
    fmax[const] = 0.0
    return Scaler(method, lower, upper, fmin, fmax)


def _g17(value: float) -> str:
    """C's ``%.17g``, which round-trips every double (svm-scale's range-file format)."""
    return format(value, ".17g")


def write_range_file(path: str | os.PathLike[str], scaler: Scaler) -> None:
    """Write ``scaler`` in svm-scale's range-file format, atomically.

    Dropped features are omitted, as svm-scale does; a label scaling comes first as the ``y``
    section, as ``svm-scale -y ... -s`` writes it. A temporary file in the target's directory
    is renamed over the target, so readers never see a half-written file.
    """
    target = os.fspath(path)
    parts = []
    ys = scaler.y_scaling
    if ys is not None:
        parts += [
            "y\n",
            f"{_g17(ys.lower)} {_g17(ys.upper)}\n",
            f"{_g17(ys.y_min)} {_g17(ys.y_max)}\n",
        ]
    parts += ["x\n", f"{_g17(scaler.lower)} {_g17(scaler.upper)}\n"]
    fmin, fmax = scaler.feature_min, scaler.feature_max
    for j in np.flatnonzero(fmin != fmax).tolist():
        parts.append(f"{j + 1} {_g17(float(fmin[j]))} {_g17(float(fmax[j]))}\n")
    with atomic_open(target, "w", "range file", encoding="ascii", newline="\n") as f:
        f.write("".join(parts))


def _numbered_lines(path: str, f: Any, max_line: int) -> Iterator[tuple[int, str]]:
    lineno = 0
    while raw := f.readline(max_line + 1):
        lineno += 1
        if len(raw) > max_line and not raw.endswith(b"\n"):
            raise line_too_long(path, lineno, max_line)
        try:
            yield lineno, raw.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise DataFormatError(path, lineno, "not text (invalid UTF-8)") from exc


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _floats(path: str, lineno: int, text: str, what: str) -> tuple[float, float]:
    fields = text.split()
    try:
        if len(fields) != 2 or "_" in text:  # Python's float() accepts "1_0"; C does not
            raise ValueError
        a, b = float(fields[0]), float(fields[1])
    except ValueError:
        raise DataFormatError(path, lineno, f"expected '{what}', found {_shown(text)}") from None
    if not (math.isfinite(a) and math.isfinite(b)):
        raise DataFormatError(path, lineno, f"expected finite numbers for '{what}'")
    return a, b


def read_range_file(
    path: str | os.PathLike[str],
    n_features: int | None = None,
    *,
    method: str | None = None,
    memory_limit: int | None = None,
    max_features: int | None = None,
) -> Scaler:
    """Read an svm-scale range file (ours or ``svm-scale -s``'s, with or without a ``y`` section).

    Features not listed map to 0. The width is the largest listed index or ``n_features``,
    whichever is larger. By default the method is inferred: ``maxabs`` when lower/upper are
    -1/1 and every listed feature has min == -max, otherwise ``minmax``. Both describe the
    same mapping then and differ only in rounding, so ``method="minmax"`` can force
    svm-scale's own arithmetic (data already scaled to [-1, 1] reads as maxabs otherwise).

    A range file may come from anywhere: its indices get the same width guard as a data
    file's (:func:`kcheck.memory.check_width`, against ``memory_limit``), and its lines the
    same length cap, before anything is allocated for them. With ``max_features`` (the
    width of the model the file belongs to), a larger index is refused at its line.
    """
    if n_features is not None:
        n_features = operator.index(n_features)
        if n_features < 0:
            raise ValueError(f"n_features must be non-negative, got {n_features}")
    if method is not None and method not in METHODS:
        raise KcheckError(f"unknown scaling method {method!r}; expected one of: minmax, maxabs")
    where = os.fspath(path)
    try:
        with open(where, "rb") as f:
            lines = _numbered_lines(where, f, max_line_bytes(memory_limit))
            return _parse_range_file(where, lines, n_features, method, memory_limit, max_features)
    except OSError as exc:
        raise DataFormatError(
            where, None, f"cannot read range file: {exc.strerror or exc}"
        ) from exc


def _parse_range_file(
    path: str,
    lines: Iterator[tuple[int, str]],
    n_features: int | None,
    method: str | None,
    memory_limit: int | None = None,
    max_features: int | None = None,
) -> Scaler:
    lineno = 0

    def header(expected: str) -> str:
        nonlocal lineno
        item = next(lines, None)
        if item is None:
            raise DataFormatError(path, lineno + 1, f"expected {expected}, found end of file")
        lineno, text = item
        return text

    text = header("'x' or 'y' (svm-scale range file)")
    y_scaling = None
    if text == "y":
        text = header("'y_lower y_upper'")
        y_lower, y_upper = _floats(path, lineno, text, "y_lower y_upper")
        if not y_lower < y_upper:
            raise DataFormatError(
                path, lineno, f"expected y_lower < y_upper, found {y_lower:g} {y_upper:g}"
            )
        if not math.isfinite(y_upper - y_lower):
            raise DataFormatError(path, lineno, "the label range is too wide to scale")
        text = header("'y_min y_max'")
        y_min, y_max = _floats(path, lineno, text, "y_min y_max")
        if not y_min <= y_max:
            raise DataFormatError(
                path, lineno, f"expected y_min <= y_max, found {y_min:g} > {y_max:g}"
            )
        try:
            y_scaling = LabelScaling(y_lower, y_upper, y_min, y_max)
        except KcheckError as e:
            raise DataFormatError(path, lineno, str(e)) from None
        text = header("'x'")
        if text != "x":
            raise DataFormatError(path, lineno, f"expected 'x', found {_shown(text)}")
    elif text != "x":
        raise DataFormatError(
            path, lineno, f"expected 'x' or 'y' (svm-scale range file), found {_shown(text)}"
        )
    text = header("'lower upper'")
    lower, upper = _floats(path, lineno, text, "lower upper")
    if not lower < upper:
        raise DataFormatError(path, lineno, f"expected lower < upper, found {lower:g} {upper:g}")
    indices: list[int] = []
    mins: list[float] = []
    maxs: list[float] = []
    last = 0
    width_ok = n_features or 0
    for lineno, text in lines:
        if not text:
            continue
        fields = text.split()
        try:
            if len(fields) != 3 or "_" in text:
                raise ValueError
            idx, lo, hi = int(fields[0]), float(fields[1]), float(fields[2])
        except ValueError:
            raise DataFormatError(
                path, lineno, f"expected 'index min max', found {_shown(text)}"
            ) from None
        if idx <= last:
            raise DataFormatError(
                path, lineno, f"expected an index greater than {last}, found {idx}"
            )
        if idx > MAX_INDEX:
            raise DataFormatError(
                path,
                lineno,
                f"expected an index of at most {MAX_INDEX} (a C int), found {_shown(fields[0])}",
            )
        if max_features is not None and idx > max_features:
            raise DataFormatError(
                path,
                lineno,
                f"feature {idx} is beyond the model's {max_features} features "
                "(is this the model's range file?)",
            )
        if idx > width_ok:
            check_width(f"{path}:{lineno}", idx, memory_limit)
            width_ok = idx
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise DataFormatError(path, lineno, "expected finite min and max")
        if lo > hi:
            raise DataFormatError(path, lineno, f"expected min <= max, found {lo:g} > {hi:g}")
        if not math.isfinite(hi - lo):
            raise DataFormatError(path, lineno, f"range [{lo:g}, {hi:g}] is too wide to scale")
        indices.append(idx)
        mins.append(lo)
        maxs.append(hi)
        last = idx
    width = max(last, n_features or 0)
    fmin = np.zeros(width)
    fmax = np.zeros(width)
    cols = np.asarray(indices, dtype=np.intp) - 1
    fmin[cols] = mins
    fmax[cols] = maxs
    is_maxabs = (lower, upper) == (-1.0, 1.0) and bool(np.array_equal(fmin, -fmax))
    if method == "maxabs" and not is_maxabs:
        raise DataFormatError(
            path, None, "not a max-abs range file: expected '-1 1' and 'index -m m' lines"
        )
    if method is None:
        method = "maxabs" if is_maxabs else "minmax"
    return Scaler(method, lower, upper, fmin, fmax, y_scaling)
