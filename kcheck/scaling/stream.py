"""``kcheck scale``: a LIBSVM file scaled as svm-scale does, to the byte, while it streams
(arithmetic, range files and text from :mod:`kcheck.scaling.fitting`).

Two passes as svm-scale: fit (or, with a range file, check every line), then scale and yield text a
chunk of rows at a time. Memory is the per-feature arrays and one chunk, never the file or its text
(``-l -1`` densifies: 1M values become 315M). Stdin and pipes are kept in memory between passes,
within the limit. :func:`plan` refuses a run that cannot fit before it starts. Nothing prints:
svm-scale's warning goes to ``warn`` after the last row, text to the caller."""

from __future__ import annotations

import os
import stat
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from kcheck.errors import KcheckError, KcheckWarning
from kcheck.io.data import LibsvmBlocks, dropped_warning
from kcheck.memory import BYTES_PER_COLUMN, default_memory_limit, size_text
from kcheck.scaling.fitting import (
    MAX_INDEX,
    ColumnRanges,
    Scaler,
    densify_warning,
    read_range_file,
    scaled_text,
    write_range_file,
)
from kcheck.scaling.scaler import check_options

__all__ = [
    "Budget",
    "ScaleConfig",
    "Scaled",
    "fit_file",
    "plan",
    "row_chunks",
    "rows_of",
    "scale",
    "scaled",
]

#: Held before data: interpreter, numpy, scipy (62 MiB measured), one chunk's scratch.
PROGRAM_BYTES = 80 * 2**20
#: Peak bytes per value of an output chunk (scaled rows and printed text), measured over one chunk
#: on tests/test_scale_memory.py's wide file: 164 for scale (%g), 187 for expand (%.17g).
BYTES_PER_OUTPUT_VALUE = 256
#: Output values in one chunk at most: larger chunks are no faster.
MAX_CHUNK_VALUES = 1 << 20
#: The reader's blocks hold at most this many CSR bytes (less under a small limit).
MAX_BLOCK_BYTES = 16 * 2**20
MIN_BLOCK_BYTES = 2**20
#: The width a first pass reads at when the width is not known yet: every 1-based index.
_ANY_WIDTH = MAX_INDEX


@dataclass(frozen=True)
class ScaleConfig:
    """svm-scale's options: ``-l``, ``-u`` (None: -1, 1), ``-y``, ``-s``, ``-r``, and ``maxabs``."""

    file: str
    lower: float | None = None
    upper: float | None = None
    y_bounds: tuple[float, float] | None = None
    maxabs: bool = False
    save_range: str | None = None
    restore_range: str | None = None
    #: Values with 17 significant digits instead of svm-scale's 6.
    full_precision: bool = False
    zero_based: bool = False
    #: The run's memory budget in bytes (None: :func:`kcheck.memory.default_memory_limit`).
    memory_limit: int | None = None


@dataclass(frozen=True)
class Scaled:
    """The scaling and text, in blocks, before writing: text and ``-s`` file commit together."""

    scaler: Scaler
    blocks: Iterator[str]


@dataclass(frozen=True)
class Budget:
    """How a run spends its memory limit: reader blocks (CSR bytes) and output chunks (values)."""

    block_bytes: int
    chunk_values: int


def plan(
    source: str,
    memory_limit: int,
    width: int,
    per_row: int,
    *,
    held: int = 0,
    what: str = "scaling",
) -> Budget:
    """The blocks and chunks keeping a run within ``memory_limit``, or a KcheckError with the
    figures where one row cannot fit. ``width`` features cost :data:`kcheck.memory.BYTES_PER_COLUMN`
    each, each row at least ``per_row`` values, ``held`` bytes already used (a pipe's rows)."""
    features = BYTES_PER_COLUMN * width
    row = BYTES_PER_OUTPUT_VALUE * (per_row + 1)
    need = PROGRAM_BYTES + held + features + MIN_BLOCK_BYTES + row
    if need > memory_limit:
        parts = [f"{size_text(PROGRAM_BYTES)} for the program"]
        if held:
            parts.append(f"{size_text(held)} for the rows read from a pipe")
        if width:
            parts.append(f"{size_text(features)} for the arrays of {width:,} features")
        rows = f"one row of {per_row:,} values" if per_row else "a block of rows"
        parts.append(f"{size_text(MIN_BLOCK_BYTES + row)} for {rows}")
        raise KcheckError(
            f"{source}: {what} needs at least {size_text(need)} ({', '.join(parts)}), over "
            f"the memory limit of {size_text(memory_limit)}"
        )
    spare = memory_limit - PROGRAM_BYTES - held - features
    block = min(MAX_BLOCK_BYTES, max(MIN_BLOCK_BYTES, spare // 8))
    values = min(MAX_CHUNK_VALUES, (spare - block) // BYTES_PER_OUTPUT_VALUE)
    return Budget(block, max(values, per_row + 1))


def row_chunks(X: sp.csr_matrix, per_row: int, max_values: int) -> Iterator[tuple[int, int]]:
    """Consecutive row ranges ``(start, stop)`` of X whose output holds at most ``max_values``
    values (stored values, ``per_row`` more and a label per row); a larger row is its own chunk."""
    rows = int(X.shape[0])
    if rows == 0:
        return
    cum = np.cumsum(np.diff(X.indptr).astype(np.int64) + (per_row + 1))
    start = 0
    while start < rows:
        base = int(cum[start - 1]) if start else 0
        stop = int(np.searchsorted(cum, base + max_values, side="right"))
        stop = min(rows, max(stop, start + 1))
        yield start, stop
        start = stop


def rows_of(X: sp.csr_matrix, start: int, stop: int) -> sp.csr_matrix:
    """Rows ``start:stop`` of a canonical CSR, sharing its arrays (no copy)."""
    p0, p1 = int(X.indptr[start]), int(X.indptr[stop])
    part = sp.csr_matrix(
        (X.data[p0:p1], X.indices[p0:p1], X.indptr[start : stop + 1] - p0),
        shape=(stop - start, X.shape[1]),
    )
    part.has_canonical_format = True
    return part


def scaled(config: ScaleConfig, warn: Callable[[str], None] | None = None) -> Scaled:
    """The scaling of ``config.file`` (first pass done here) and its scaled text as read;
    ``config.save_range`` is not written here. svm-scale's warning on added non-zeros goes to
    ``warn`` after the last block, in its wording (scripts grep for it)."""
    limit = config.memory_limit or default_memory_limit()
    plan(config.file, limit, 0, 0)  # a limit too small for any file: refused before reading
    first = _FirstPass(config.file, config.zero_based, limit)
    if config.restore_range:
        # svm-scale's own arithmetic for any range file, so the output is svm-scale -r's.
        scaler = read_range_file(config.restore_range, method="minmax", memory_limit=limit)
        # Refused before the data is read when the range file's width and a row cannot fit.
        plan(config.restore_range, limit, scaler.n_features, scaler.n_dense)
        first.check(scaler)
    else:
        lower = -1.0 if config.lower is None else config.lower
        upper = 1.0 if config.upper is None else config.upper
        method = "maxabs" if config.maxabs else "minmax"
        check_options(method, lower, upper)
        ranges = first.fit()
        scaler = ranges.scaler(method, lower, upper)
        if config.y_bounds:
            scaler = replace(scaler, y_scaling=ranges.label_scaling(*config.y_bounds))
    budget = plan(config.file, limit, scaler.n_features, scaler.n_dense, held=first.held)
    blocks = first.again(scaler.n_features, budget.block_bytes)
    return Scaled(scaler, _text(blocks, scaler, budget, config.full_precision, warn))


def scale(config: ScaleConfig, warn: Callable[[str], None] | None = None) -> Iterator[str]:
    """The scaled text of ``config.file`` in blocks, ``-s``'s range file written first."""
    out = scaled(config, warn)
    if config.save_range:
        write_range_file(config.save_range, out.scaler)
    return out.blocks


def fit_file(
    path: str,
    *,
    method: str,
    lower: float,
    upper: float,
    zero_based: bool = False,
    memory_limit: int,
) -> Scaler:
    """The scaling of ``path`` as :func:`kcheck.scaling.fitting.fit_scaler` fits it, streaming."""
    check_options(method, lower, upper)
    plan(path, memory_limit, 0, 0, what="fitting the scaling")
    first = _FirstPass(path, zero_based, memory_limit, keep=False)
    return first.fit().scaler(method, lower, upper)


def _text(
    blocks: Iterable[tuple[np.ndarray, sp.csr_matrix]],
    scaler: Scaler,
    budget: Budget,
    full_precision: bool,
    warn: Callable[[str], None] | None,
) -> Iterator[str]:
    """The second pass: blocks scaled and printed a chunk at a time, then svm-scale's warning."""
    nnz_before = nnz_after = 0
    per_row = scaler.n_dense
    for y, X in blocks:
        labels = y if scaler.y_scaling is None else scaler.y_scaling.apply(y)
        for start, stop in row_chunks(X, per_row, budget.chunk_values):
            part = rows_of(X, start, stop)
            Xs = scaler.transform(part)
            nnz_before += part.nnz
            nnz_after += Xs.nnz
            yield from scaled_text(labels[start:stop], Xs, full_precision=full_precision)
            del Xs
    warning = densify_warning(nnz_before, nnz_after)
    if warning and warn is not None:
        warn(warning)


def _is_regular(path: str) -> bool:
    """Whether ``path`` can be read twice: a regular (or missing) file, not a stream or device."""
    if path == "-":
        return False
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return True


class _FirstPass:
    """The first pass over a data file and the blocks of the second: a regular file is reread
    (SHA-256 must match); a stream is kept, within half the data's limit."""

    def __init__(self, path: str, zero_based: bool, limit: int, *, keep: bool = True) -> None:
        self.path = path
        self.name = "<stdin>" if path == "-" else path
        self.zero_based = zero_based
        self.limit = limit
        self.keep = keep and not _is_regular(path)
        self.kept: deque[tuple[np.ndarray, sp.csr_matrix]] = deque()
        self.held = 0
        self.dropped = 0
        self.sha256: str | None = None
        self.block_bytes = min(MAX_BLOCK_BYTES, max(MIN_BLOCK_BYTES, (limit - PROGRAM_BYTES) // 8))

    def _blocks(self, n_features: int) -> Iterator[tuple[np.ndarray, sp.csr_matrix]]:
        reader = LibsvmBlocks(
            self.path,
            n_features=n_features,
            zero_based=self.zero_based,
            memory_limit=self.limit,
            block_bytes=self.block_bytes,
        )
        cap = max(0, (self.limit - PROGRAM_BYTES) // 2)
        rows = 0
        for y, X in reader:
            rows += int(X.shape[0])
            if self.keep:
                self.held += y.nbytes + X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
                if self.held > cap:
                    raise KcheckError(
                        f"{self.name}: not a regular file, so it is read once and kept in "
                        f"memory, and by row {rows:,} its rows need more than "
                        f"{size_text(cap)}, what the memory limit of {size_text(self.limit)} "
                        "leaves them; give a regular file (read twice, as svm-scale reads "
                        "it) or a larger --memory-limit"
                    )
                self.kept.append((y, X))
            yield y, X
        self.sha256 = reader.sha256
        self.dropped = reader.dropped

    def fit(self) -> ColumnRanges:
        """svm-scale's first pass: each feature's min and max."""
        ranges = ColumnRanges(self.name, self.limit)
        for y, X in self._blocks(_ANY_WIDTH):
            ranges.add(y, X)
        if self.dropped:  # index 2^31 - 1, 0-based: 2^31 features
            raise KcheckError(
                f"{self.name}: a feature index of {MAX_INDEX} with --zero-based makes "
                f"{MAX_INDEX + 1:,} features, more than any range file can hold"
            )
        return ranges

    def check(self, scaler: Scaler) -> None:
        """The first pass with a range file: every value scaled (far out of range overflows) so no
        error comes mid-text; values past its width are dropped with read_libsvm's warning."""
        n = scaler.n_features
        for y, X in self._blocks(n):
            if scaler.y_scaling is not None:
                scaler.y_scaling.apply(y)
            scaler.nnz_after(X)
        if self.dropped:
            warning = dropped_warning(self.name, self.dropped, n)
            warnings.warn(warning, KcheckWarning, stacklevel=2)

    def again(self, width: int, block_bytes: int) -> Iterator[tuple[np.ndarray, sp.csr_matrix]]:
        """The second pass's blocks, ``width`` wide."""
        if self.keep:
            while self.kept:
                y, X = self.kept.popleft()
                yield y, sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], width))
            return
        self.block_bytes = block_bytes
        first = self.sha256
        for y, X in self._blocks(width):
            yield y, X
        if self.sha256 != first:
            raise KcheckError(
                f"{self.name}: the file changed while it was read: the second pass over it "
                "(svm-scale's, which writes the rows) read other data than the first"
            )
