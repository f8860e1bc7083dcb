"""Read and write LIBSVM-format data files: opening (plain, gzip, bzip2, xz, stdin), the reader,
content hashing and the writer.

The file is cut into chunks of whole lines; each goes first to the vectorised fast path
(:mod:`kcheck.io._parse`), which accepts only input it can prove well formed. Any other chunk is
re-read line by line by :mod:`kcheck.io.reference_parser`, the reference for the format's rules, so
results and error messages never depend on the path. Numbers parse to exactly Python's ``float()``.
Explicit zeros (``-0.0`` too) are kept as stored entries, as LIBSVM and scikit-learn do; the writer
omits them."""

from __future__ import annotations

import bz2
import contextlib
import contextvars
import gzip
import hashlib
import io
import lzma
import os
import sys
import time
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from kcheck.errors import DataFormatError, KcheckError, KcheckWarning, TimeLimitReached
from kcheck.io._parse import (
    _BYTES_PER_VALUE,
    CsrBuilder,
    Part,
    TooLarge,
    fast_chunk,
    keep_scratch_memory,
)
from kcheck.io.atomic import atomic_open
from kcheck.io.reference_parser import slow_chunk as _slow_chunk
from kcheck.io.reservoir import StratifiedReservoir
from kcheck.memory import line_too_long, max_line_bytes, size_text

__all__ = [
    "LibsvmBlocks",
    "Sample",
    "content_sha256",
    "dropped_warning",
    "label_repr",
    "read_libsvm",
    "sample_libsvm",
    "write_libsvm",
]

PathArg = str | os.PathLike[str]
Array = npt.NDArray[Any]

_CHUNK = 1 << 18  # bytes per chunk: big enough to amortise numpy call overhead, small for cache

_BOM = b"\xef\xbb\xbf"
_GZIP_MAGIC = b"\x1f\x8b"
_BZ2_MAGIC = b"BZh"
_XZ_MAGIC = b"\xfd7zXZ\x00"

#: What a command needs beside the data, as a refusal says it (kcheck.memory's footprints).
NEEDS = (
    "a check needs about 3x the data's size in memory plus 64 MB, 5x plus 128 MB under "
    "--time-limit, a verify 4x"
)


def _display_name(path: PathArg) -> str:
    return "<stdin>" if _is_stdin(path) else os.fspath(path)


def _is_stdin(path: PathArg) -> bool:
    return isinstance(path, str) and path == "-"


_CODEC_ERRORS = (EOFError, OSError, ValueError, lzma.LZMAError, zlib.error)


def _read_stdin(name: str, max_line: int) -> bytes:
    """All of standard input, refused as soon as one line outgrows ``max_line``."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        return sys.stdin.read().encode("utf-8")
    blocks: list[bytes] = []
    lines = tail = 0
    while block := stream.read(_CHUNK):
        blocks.append(block)
        newlines = block.count(b"\n")
        tail = len(block) - block.rfind(b"\n") - 1 if newlines else tail + len(block)
        lines += newlines
        if tail > max_line:
            raise line_too_long(name, lines + 1, max_line)
    return b"".join(blocks)


def _open(
    path: PathArg, name: str, stack: contextlib.ExitStack, max_line: int
) -> tuple[BinaryIO, int]:
    """A binary stream of the decompressed bytes and a size hint. Compression is recognised by magic
    bytes; stdin is read whole first (it cannot be peeked). ``stack`` closes what is opened."""
    raw: BinaryIO
    try:
        if _is_stdin(path):
            data = _read_stdin(name, max_line)
            raw = io.BytesIO(data)
            size = len(data)
            head = data[:6]
        else:
            reader = stack.enter_context(open(path, "rb"))
            size = os.fstat(reader.fileno()).st_size
            head = reader.peek(6)[:6]
            raw = reader
    except OSError as e:
        raise DataFormatError(name, None, f"cannot read the file: {e.strerror or e}") from None
    codec: Any = None
    if head.startswith(_GZIP_MAGIC):
        codec = gzip.GzipFile(fileobj=raw, mode="rb")
    elif head.startswith(_XZ_MAGIC):
        codec = lzma.LZMAFile(raw, mode="rb")
    elif head.startswith(_BZ2_MAGIC):
        codec = bz2.BZ2File(raw, mode="rb")
    if codec is None:
        return raw, size
    return stack.enter_context(codec), 4 * size


def _codec_name(f: BinaryIO) -> str:
    if isinstance(f, gzip.GzipFile):
        return "gzip"
    if isinstance(f, lzma.LZMAFile):
        return "xz"
    if isinstance(f, bz2.BZ2File):
        return "bzip2"
    return "the"


class _LineTooLong(Exception):
    """A line outgrew the cap; the caller knows its number."""


#: perf_counter() past which a read raises TimeLimitReached (--time-limit covers reading).
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "kcheck_read_deadline", default=None
)


@contextlib.contextmanager
def read_until(deadline: float | None) -> Iterator[None]:
    """Every read in this block stops at ``deadline`` (None: never), between two chunks."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _line_chunks(f: BinaryIO, name: str, max_line: int, digest: Any = None) -> Iterator[bytes]:
    """Pieces of about _CHUNK bytes ending at line ends. A BOM is dropped, lone CRs become LF, a
    line over ``max_line`` raises _LineTooLong; ``digest`` sees every block."""
    pending: list[bytes] = []
    pending_bytes = 0
    first = True
    cr_only = False
    deadline = _DEADLINE.get()
    while True:
        if deadline is not None and time.perf_counter() > deadline:
            raise TimeLimitReached(f"reading {name}")
        try:
            block = f.read(_CHUNK)
        except _CODEC_ERRORS as e:
            raise DataFormatError(
                name, None, f"{_codec_name(f)} data is truncated or corrupt ({e})"
            ) from None
        if digest is not None:
            digest.update(block)
        if first:
            first = False
            if block.startswith(_BOM):
                block = block[len(_BOM) :]
            cr_only = b"\r" in block and b"\n" not in block
        if cr_only:
            block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if not block:
            if pending:
                yield b"".join(pending)
            return
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            pending.append(block)
            pending_bytes += len(block)
            if pending_bytes > max_line:
                raise _LineTooLong()
            continue
        if pending:
            pending.append(block[:cut])
            yield b"".join(pending)
            pending = []
        else:
            yield block[:cut] if cut < len(block) else block
        pending_bytes = len(block) - cut
        if cut < len(block):
            pending.append(block[cut:])


def _check_stream(f: BinaryIO, name: str) -> None:
    """Read a compressed stream to its end; a codec failure becomes DataFormatError. A damaged
    archive can decode to plausible text before its checksum fails, so where the text is rejected
    the rest is checked first ("corrupt" is the better message)."""
    if not isinstance(f, (gzip.GzipFile, lzma.LZMAFile, bz2.BZ2File)):
        return
    try:
        while f.read(_CHUNK):
            pass
    except _CODEC_ERRORS as e:
        raise DataFormatError(
            name, None, f"{_codec_name(f)} data is truncated or corrupt ({e})"
        ) from None


def read_libsvm(
    path: PathArg,
    *,
    n_features: int | None = None,
    zero_based: bool = False,
    memory_limit: int | None = None,
    digest: Any = None,
    max_csr_bytes: int | None = None,
) -> tuple[np.ndarray, sp.csr_matrix]:
    """Read a LIBSVM/svmlight file into (y, X).

    ``path``: plain, gzip, bzip2 or xz (by magic bytes), or ``"-"`` for stdin. Indices are 1-based;
    ``zero_based=True`` reads 0-based ones. ``n_features`` fixes the width (larger indices dropped
    with a :class:`KcheckWarning`). X is a ``csr_matrix`` (LIBLINEAR's binding rejects
    ``csr_array``) with sorted indices, int32 indices where they fit, float64 values; y float64. Bad
    input, including a line longer than ``memory_limit`` allows, raises :class:`DataFormatError`.

    ``digest`` (e.g. ``hashlib.sha256()``) is fed the decompressed content as read
    (:func:`content_sha256` without a second pass). ``max_csr_bytes`` stops with a
    :class:`KcheckError` as soon as the CSR would exceed it, before the file is in memory."""
    if n_features is not None and (
        isinstance(n_features, bool)
        or not isinstance(n_features, (int, np.integer))
        or n_features < 0
    ):
        raise ValueError(f"n_features must be a non-negative integer or None, got {n_features!r}")
    name = _display_name(path)
    out: CsrBuilder | None = None

    def sink(size_hint: int) -> CsrBuilder:
        nonlocal out
        out = CsrBuilder(size_hint, None if n_features is None else int(n_features), max_csr_bytes)
        return out

    _stream(path, name, sink, zero_based, memory_limit, digest, max_csr_bytes, None)
    assert out is not None
    if out.rows == 0:
        raise DataFormatError(name, None, "expected data rows, got none (empty file?)")
    if out.dropped:
        warnings.warn(dropped_warning(name, out.dropped, n_features), KcheckWarning, stacklevel=2)
    return out.finish()


def dropped_warning(name: str, dropped: int, n_features: int | None) -> str:
    """The warning for values beyond ``n_features`` that a reader dropped."""
    return f"{name}: dropped {dropped} value(s) with an index above n_features={n_features}"


class _Sink(Protocol):
    def add(self, part: Part) -> None: ...


def _stream(
    path: PathArg,
    name: str,
    make_sink: Callable[[int], _Sink],
    zero_based: bool,
    memory_limit: int | None,
    digest: Any,
    max_csr_bytes: int | None,
    sample_rows: int | None,
) -> None:
    """Parse the file chunk by chunk into ``make_sink(size_hint)``; ``sample_rows`` only words the
    message when the sink outgrows ``max_csr_bytes``."""
    keep_scratch_memory()
    max_line = max_line_bytes(memory_limit)
    with contextlib.ExitStack() as stack:
        f, size_hint = _open(path, name, stack, max_line)
        out = make_sink(size_hint)
        line = 1
        try:
            for part in _parts(f, name, zero_based, max_line, digest):
                out.add(part)
                line += part.nlines
        except TooLarge:
            assert max_csr_bytes is not None
            if max_csr_bytes <= 0:
                raise KcheckError(
                    f"{name}: the memory limit leaves no room for the data ({NEEDS}; see "
                    "--memory-limit)"
                ) from None
            if sample_rows is not None:
                raise KcheckError(
                    f"{name}: a sample of {sample_rows:,} rows needs more than "
                    f"{max_csr_bytes / 2**20:,.1f} MB in memory (by line {line:,}), more than "
                    "the memory limit allows a check; give a smaller --max-rows, or "
                    "--max-rows auto"
                ) from None
            raise KcheckError(
                f"{name}: by line {line:,} the data already needs more than "
                f"{size_text(max_csr_bytes)} in memory, more than the memory limit allows a "
                "check (about 3x the data's size plus 64 MB); give a larger --memory-limit, or "
                "--max-rows auto to check a sample that fits"
            ) from None


def _parts(f: BinaryIO, name: str, zero_based: bool, max_line: int, digest: Any) -> Iterator[Part]:
    """The parsed chunks of an open file, in order; a bad line raises DataFormatError."""
    line = 1
    try:
        for text in _line_chunks(f, name, max_line, digest):
            part = fast_chunk(text, zero_based)
            if part is None:
                part = _slow_chunk(text, line, name, zero_based)
            yield part
            line += part.nlines
    except _LineTooLong:
        raise line_too_long(name, line, max_line) from None
    except DataFormatError:
        _check_stream(f, name)  # garbage from a corrupt archive: say that instead
        raise


class LibsvmBlocks:
    """A LIBSVM file read as successive blocks of whole rows, each ``(y, X)`` in file order, so a
    file too big for memory can be scored. A block holds about ``block_bytes`` of CSR (one chunk
    more at most) and at most ``block_rows`` rows; X is ``n_features`` wide (larger indices dropped
    and counted in ``dropped``). Each iteration rereads the file; after one, ``rows``, ``dropped``
    and ``sha256`` describe it. Stdin can be read once."""

    def __init__(
        self,
        path: PathArg,
        *,
        n_features: int,
        zero_based: bool = False,
        memory_limit: int | None = None,
        block_bytes: int = 16 << 20,
        block_rows: int = 1 << 16,
    ) -> None:
        self.path = path
        self.name = _display_name(path)
        self.n_features = int(n_features)
        self.zero_based = zero_based
        self.memory_limit = memory_limit
        self.block_bytes = max(1, block_bytes)
        self.block_rows = max(1, block_rows)
        self.rows = 0
        self.dropped = 0
        self.sha256: str | None = None

    def __iter__(self) -> Iterator[tuple[np.ndarray, sp.csr_matrix]]:
        self.sha256 = None
        digest = hashlib.sha256()
        keep_scratch_memory()
        max_line = max_line_bytes(self.memory_limit)
        rows = dropped = 0
        with contextlib.ExitStack() as stack:
            f, _ = _open(self.path, self.name, stack, max_line)
            block = self._builder()
            for part in _parts(f, self.name, self.zero_based, max_line, digest):
                block.add(part)
                if (
                    block.nnz * _BYTES_PER_VALUE >= self.block_bytes
                    or block.rows >= self.block_rows
                ):
                    rows += block.rows
                    dropped += block.dropped
                    yield block.finish()
                    block = self._builder()
            if block.rows:
                rows += block.rows
                dropped += block.dropped
                yield block.finish()
        if rows == 0:
            raise DataFormatError(self.name, None, "expected data rows, got none (empty file?)")
        self.rows, self.dropped, self.sha256 = rows, dropped, digest.hexdigest()

    def _builder(self) -> CsrBuilder:
        return CsrBuilder(self.block_bytes, self.n_features)


@dataclass
class Sample:
    """A stratified sample read by :func:`sample_libsvm` and what it was drawn from; ``max_rows``:
    the size asked for, or for "auto" the one the budget gave."""

    y: np.ndarray
    X: sp.csr_matrix
    rows_read: int
    max_rows: int
    auto: bool

    @property
    def sampled(self) -> bool:
        return int(self.X.shape[0]) < self.rows_read


def sample_libsvm(
    path: PathArg,
    max_rows: int | None,
    *,
    seed: int,
    zero_based: bool = False,
    memory_limit: int | None = None,
    digest: Any = None,
    max_csr_bytes: int | None = None,
) -> Sample:
    """Read a stratified uniform sample of ``max_rows`` rows in one streaming pass: memory about the
    sample plus one chunk (:mod:`kcheck.io.reservoir`); the same file and seed give the same sample.
    ``max_rows=None`` ("auto"): as many as ``max_csr_bytes`` holds (the whole file where it fits).
    ``digest`` sees every byte; the matrix has the whole file's width."""
    name = _display_name(path)
    if max_rows is None and max_csr_bytes is None:
        raise ValueError("max_rows=None (auto) needs max_csr_bytes")
    budget = None if max_csr_bytes is None else max(0, max_csr_bytes)
    if max_rows is None and not budget:
        raise KcheckError(
            f"{name}: the memory limit leaves no room for the data ({NEEDS}; see --memory-limit)"
        )
    reservoir = StratifiedReservoir(max_rows, seed, budget)
    _stream(
        path,
        name,
        lambda _hint: reservoir,
        zero_based,
        memory_limit,
        digest,
        max_csr_bytes,
        max_rows,
    )
    if reservoir.rows_read == 0:
        raise DataFormatError(name, None, "expected data rows, got none (empty file?)")
    target = reservoir.target() if max_rows is None else max_rows
    y, X = reservoir.finish()
    return Sample(y, X, reservoir.rows_read, min(target, reservoir.rows_read), max_rows is None)


def content_sha256(path: PathArg) -> str:
    """SHA-256 of a file's decompressed content (``a9a`` and ``a9a.xz`` hash alike): it names the
    data a verdict was made on (``data.sha256``). :func:`read_libsvm` computes it while reading;
    this reads for the hash alone. ``"-"`` is refused (stdin cannot be read twice)."""
    if _is_stdin(path):
        raise ValueError("the content hash of standard input is known only after reading it")
    name = _display_name(path)
    digest = hashlib.sha256()
    with contextlib.ExitStack() as stack:
        f, _ = _open(path, name, stack, max_line_bytes())  # not stdin: no line cap applies
        while True:
            try:
                block = f.read(1 << 20)
            except _CODEC_ERRORS as e:
                raise DataFormatError(
                    name, None, f"{_codec_name(f)} data is truncated or corrupt ({e})"
                ) from None
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


def label_repr(v: float) -> str:
    """A label's text: integers without '.0' (as LIBSVM prints), others with 17 digits (exact)."""
    f = float(v)
    if f.is_integer() and abs(f) < 1e16:
        return str(int(f))
    return f"{f:.17g}"


_ROWS_PER_BLOCK = 4096


def _text_blocks(
    y: Array,
    X: sp.csr_matrix,
    *,
    label: Callable[[Any], str] = label_repr,
    pair: str = " %d:%.17g",
    end: str = "\n",
) -> Iterator[str]:
    """Labels and canonical CSR rows as text in blocks, one %-operation a block: ``label``, ``pair``
    per value, ``end`` (svm-scale's: fitting.scaled_text)."""
    indptr, indices, data = X.indptr, X.indices, X.data
    formats: dict[int, str] = {}
    for r0 in range(0, X.shape[0], _ROWS_PER_BLOCK):
        r1 = min(r0 + _ROWS_PER_BLOCK, X.shape[0])
        p0, p1 = int(indptr[r0]), int(indptr[r1])
        pairs: list[Any] = [None] * (2 * (p1 - p0))
        pairs[0::2] = (indices[p0:p1] + 1).tolist()
        pairs[1::2] = data[p0:p1].tolist()
        fmt: list[str] = []
        args: list[Any] = []
        ptr = indptr[r0 : r1 + 1].tolist()
        for i in range(r1 - r0):
            k = ptr[i + 1] - ptr[i]
            f = formats.get(k)
            if f is None:
                f = formats[k] = "%s" + pair * k + end
            fmt.append(f)
            args.append(label(y[r0 + i]))
            a = 2 * (ptr[i] - p0)
            args.extend(pairs[a : a + 2 * k])
        yield "".join(fmt) % tuple(args)


def _as_csr(X: Any) -> sp.csr_matrix:
    """A canonical CSR copy of X (never the caller's arrays) with explicit zeros removed."""
    if sp.issparse(X):
        M = sp.csr_matrix(X, dtype=np.float64, copy=True)
    else:
        A = np.asarray(X, dtype=np.float64)
        if A.ndim != 2:
            raise ValueError(f"X must be 2-dimensional, got shape {A.shape}")
        M = sp.csr_matrix(A)
    M.sum_duplicates()
    M.eliminate_zeros()
    M.sort_indices()
    return M


def write_libsvm(path: PathArg, y: np.ndarray, X: Any) -> None:
    """Write (y, X) as a LIBSVM file: 1-based sorted indices, zeros omitted, values with %.17g;
    ``"-"``: stdout. Atomic (temporary file renamed over the target). ValueError for mismatched
    shapes or non-finite values (unreadable back); DataFormatError if it cannot be written."""
    yv = np.asarray(y, dtype=np.float64).reshape(-1)
    M = _as_csr(X)
    if M.shape[0] != len(yv):
        raise ValueError(f"y has {len(yv)} entries but X has {M.shape[0]} rows")
    if not (np.isfinite(yv).all() and np.isfinite(M.data).all()):
        raise ValueError("cannot write NaN or infinite values in LIBSVM format")

    if _is_stdin(path):
        for block in _text_blocks(yv, M):
            sys.stdout.write(block)
        sys.stdout.flush()
        return
    _write_atomic(os.fspath(path), _text_blocks(yv, M))


def _write_atomic(name: str, blocks: Iterator[str]) -> None:
    with atomic_open(name, "w", "the file", encoding="ascii", newline="\n") as f:
        for block in blocks:
            f.write(block)
