"""Feature-wise scaling compatible with LIBSVM's ``svm-scale``, stored as svm-scale range files so
``svm-scale -r`` reproduces it:

* ``minmax`` (svm-scale's default) maps each feature's [min, max], implicit zeros included, to
  [lower, upper], evaluated in svm-scale's order with its shortcuts so values agree to the bit
  (apart from a clamp keeping training values inside [lower, upper]);
* ``maxabs`` divides by the largest absolute value, keeping sparse data sparse (range file
  ``-1 1`` with ``-m m`` per feature).

Constant or absent features map to 0 and are dropped, stored as ``min == max == 0`` (as an omitting
range file reads back). Fitted on training data only, on a matrix (:func:`fit_scaler`) or streaming
(:class:`ColumnRanges`, to the same bits); the :class:`Scaler` is in :mod:`kcheck.scaling.scaler`.
Labels scale too (``-y``, :class:`LabelScaling`). :func:`scaled_text` prints as svm-scale does, byte
for byte."""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck.errors import DataFormatError, KcheckError
from kcheck.io.atomic import atomic_open

# _text_blocks: write_libsvm's text, here in svm-scale's layout.
from kcheck.io.data import _text_blocks
from kcheck.memory import check_width, line_too_long, max_line_bytes
from kcheck.scaling.scaler import (
    METHODS,
    LabelScaling,
    Scaler,
    canonical_csr,
    check_finite,
    check_options,
    dense_2d,
    select_entries,
)

__all__ = [
    "METHODS",
    "RANGE_SUFFIX",
    "ColumnRanges",
    "LabelScaling",
    "Scaler",
    "densify_warning",
    "fit_label_scaling",
    "fit_scaler",
    "read_range_file",
    "scaled_text",
    "write_range_file",
]

#: The largest feature index a LIBSVM file can hold (a C int).
MAX_INDEX = 2**31 - 1

#: A model's range file is the model's path plus this.
RANGE_SUFFIX = ".range"


def fit_label_scaling(y: Any, lower: float, upper: float) -> LabelScaling:
    """svm-scale's ``-y``: the training labels' min and max, to map onto [lower, upper]."""
    y = np.asarray(y, dtype=np.float64)
    if y.size == 0:
        raise KcheckError("-y needs at least one row to find the label range")
    return LabelScaling(lower, upper, float(y.min()) + 0.0, float(y.max()) + 0.0)


def densify_warning(nnz_before: int, nnz_after: int) -> str | None:
    """svm-scale's warning (LIBSVM 3.24 wording) when scaling adds non-zeros, else None."""
    if nnz_after <= nnz_before:
        return None
    return (
        f"WARNING: original #nonzeros {nnz_before}\n"
        f"       > new      #nonzeros {nnz_after}\n"
        "If feature values are non-negative and sparse, use -l 0 rather than the default -l -1"
    )


def scaled_text(y: Any, X: Any, *, full_precision: bool = False) -> Iterator[str]:
    """Scaled data as svm-scale (LIBSVM 3.24) prints it, in blocks of rows: label ``%.17g`` and a
    space, each non-zero ``index:%g`` and a space, a newline. ``full_precision``: values with
    ``%.17g`` (reads back exactly). ``X`` is :meth:`Scaler.transform`'s output."""
    yv = np.asarray(y, dtype=np.float64).reshape(-1)
    A = canonical_csr(X)
    A = select_entries(A, A.data != 0) if (A.data == 0).any() else A
    if A.shape[0] != yv.size:
        raise ValueError(f"y has {yv.size} entries but X has {A.shape[0]} rows")
    if not np.isfinite(yv).all():
        raise KcheckError("labels must be finite (found inf or nan)")
    # "label idx:v idx:v \n": svm-scale ends every item with a space.
    pair = " %d:%.17g" if full_precision else " %d:%g"
    yield from _text_blocks(yv, A, label=_g17, pair=pair, end=" \n")


def _column_min_max(X: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-column min and max over all rows, implicit zeros included (as svm-scale does)."""
    if not sp.issparse(X):
        arr = dense_2d(X)
        if arr.shape[0] == 0:
            return np.zeros(arr.shape[1]), np.zeros(arr.shape[1])
        return arr.min(axis=0), arr.max(axis=0)
    rows, n = X.shape
    csc = canonical_csr(X).tocsc()
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
    """Fit a scaling on training data ``X`` (sparse or dense). Min and max include implicit zeros,
    matching svm-scale on sparse data; constant and absent features get min == max == 0. ``source``
    prefixes data-problem messages; the width is checked against ``memory_limit`` first."""
    check_options(method, lower, upper)
    check_width(source or "the data", int(X.shape[1]), memory_limit)
    try:
        return _fit(X, method, lower, upper)
    except KcheckError as e:
        if source is None:
            raise
        raise KcheckError(f"{source}: {e}") from None


def _fit(X: Any, method: str, lower: float, upper: float) -> Scaler:
    fmin, fmax = _column_min_max(X)
    return _scaler_of(fmin, fmax, method, lower, upper)


def _scaler_of(
    fmin: np.ndarray, fmax: np.ndarray, method: str, lower: float, upper: float
) -> Scaler:
    """The fitted scaling of columns with these min and max (implicit zeros included). A zero min or
    max is +0.0 whatever its sign: numpy picks among tied zeros in its own order, so the sign would
    depend on block cuts (only the range file's text would change)."""
    fmin += 0.0  # -0.0 + 0.0 is +0.0
    fmax += 0.0
    const = fmin == fmax
    if method == "maxabs":
        m = np.maximum(np.abs(fmin), np.abs(fmax))
        m[const] = 0.0
        return Scaler(method, lower, upper, 0.0 - m, m)  # 0.0 - m: no -0.0 entries
    fmin[const] = 0.0
    fmax[const] = 0.0
    return Scaler(method, lower, upper, fmin, fmax)


class ColumnRanges:
    """svm-scale's first pass, fed block by block in file order (:meth:`add`) so a file is fitted
    while it streams (memory: the width). :meth:`scaler` equals :func:`fit_scaler` on all rows to
    the bit, wherever blocks are cut. Each growth to a larger index is checked against
    ``memory_limit`` first (:func:`kcheck.memory.check_width`, naming ``source``). Label min and max
    are kept for ``-y``."""

    def __init__(self, source: str, memory_limit: int | None = None) -> None:
        self.source = source
        self.memory_limit = memory_limit
        self.rows = 0
        self.nnz = 0
        self.width = 0
        self.y_min = math.inf
        self.y_max = -math.inf
        self._min = np.empty(0)
        self._max = np.empty(0)
        self._count = np.empty(0, dtype=np.int64)

    def add(self, y: np.ndarray, X: sp.csr_matrix) -> None:
        """Rows ``(y, X)``, a canonical CSR block (as kcheck.io.data.LibsvmBlocks yields)."""
        rows = int(X.shape[0])
        if rows == 0:
            return
        yv = np.asarray(y, dtype=np.float64)
        self.y_min = float(np.minimum(self.y_min, yv.min()))
        self.y_max = float(np.maximum(self.y_max, yv.max()))
        self.rows += rows
        cols, data = X.indices, X.data
        if cols.size == 0:
            return
        check_finite(data)
        self.nnz += int(cols.size)
        self._grow(int(cols.max()) + 1)
        # Columns in order, values in row order: _column_min_max folded over CSC, block by block.
        order = np.argsort(cols, kind="stable")
        c = cols[order]
        starts = np.flatnonzero(np.concatenate(([True], c[1:] != c[:-1])))
        present = c[starts]
        v = data[order]
        del order, c
        self._min[present] = np.minimum(self._min[present], np.minimum.reduceat(v, starts))
        self._max[present] = np.maximum(self._max[present], np.maximum.reduceat(v, starts))
        self._count[present] += np.diff(np.append(starts, v.size))

    def _grow(self, width: int) -> None:
        if width <= self.width:
            return
        check_width(self.source, width, self.memory_limit)
        if width > self._min.size:
            size = min(max(width, self._min.size + self._min.size // 2), MAX_INDEX + 1)
            self._min = _grown(self._min, size, np.inf)
            self._max = _grown(self._max, size, -np.inf)
            self._count = _grown(self._count, size, 0)
        self.width = width

    def scaler(self, method: str = "minmax", lower: float = -1.0, upper: float = 1.0) -> Scaler:
        """The fitted scaling (as :func:`fit_scaler`); ends the accumulation, reusing its arrays."""
        check_options(method, lower, upper)
        n = self.width
        fmin, fmax, counts = self._min[:n], self._max[:n], self._count[:n]
        self._min = self._max = np.empty(0)
        self._count = np.empty(0, dtype=np.int64)
        self.width = 0
        partial = counts < self.rows
        del counts
        # Absent columns (+-inf still) are partial: min(inf, 0) and max(-inf, 0) are 0.
        np.minimum(fmin, 0.0, out=fmin, where=partial)
        np.maximum(fmax, 0.0, out=fmax, where=partial)
        del partial
        try:
            return _scaler_of(fmin, fmax, method, lower, upper)
        except KcheckError as e:
            raise KcheckError(f"{self.source}: {e}") from None

    def label_scaling(self, lower: float, upper: float) -> LabelScaling:
        """svm-scale's ``-y``, as :func:`fit_label_scaling` fits it on the labels added."""
        if self.rows == 0:
            raise KcheckError("-y needs at least one row to find the label range")
        return LabelScaling(lower, upper, self.y_min + 0.0, self.y_max + 0.0)


def _grown(arr: np.ndarray, size: int, fill: float) -> np.ndarray:
    out = np.full(size, fill, dtype=arr.dtype)
    out[: arr.size] = arr
    return out


def _g17(value: float) -> str:
    """C's ``%.17g``, which round-trips every double (svm-scale's range-file format)."""
    return format(value, ".17g")


def write_range_file(path: str | os.PathLike[str], scaler: Scaler) -> None:
    """Write ``scaler`` as an svm-scale range file, atomically: dropped features omitted, a label
    scaling first as the ``y`` section (as ``svm-scale -y ... -s``)."""
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
    """Read an svm-scale range file (ours or ``svm-scale -s``'s, with or without ``y``).

    Unlisted features map to 0; the width is the larger of the largest index and ``n_features``. The
    method is inferred: ``maxabs`` where lower/upper are -1/1 and every feature has min == -max,
    else ``minmax`` (the same mapping then, differing only in rounding; ``method="minmax"`` forces
    svm-scale's arithmetic). Indices get the data file's width guard
    (:func:`kcheck.memory.check_width`) and lines its length cap before allocation; with
    ``max_features`` (the model's width) a larger index is refused at its line."""
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


def _parse_range_file(  # noqa: C901 - hostile input, checked line by line
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
