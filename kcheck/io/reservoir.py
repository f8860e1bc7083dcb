"""A stratified uniform sample of a file's rows, kept in one pass while the file streams.

Each row gets a key from the seeded generator in file order, so the sample depends only on file and
seed. Each class keeps its smallest keys (bottom-k: uniform within the class) in a reservoir
proportional to the class counts seen; at the end each class keeps exactly its share of ``max_rows``
(largest remainders, at least one per class). Between settles a class admits only rows beating its
k-th key, so memory stays at about ``max_rows`` rows (a quarter more between settles) plus one
chunk. A class whose share grows after dropping rows (a label-sorted file) refills from later rows,
so leans to them; with a steady class mix the sample is uniform.

``max_rows=None`` ("auto"): rows follow from ``max_bytes`` and the mean row size so far,
re-estimated at every settle; a file that fits is kept whole."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from kcheck import seeds
from kcheck.io._parse import _BYTES_PER_VALUE, _INT32_MAX, Part, TooLarge

Array = npt.NDArray[Any]

#: Bytes a kept row counts beyond its values: indptr, label, key, class code, count, margin.
ROW_OVERHEAD = 40
#: Pool growth, as a fraction of the target, before the pool is settled back to the target.
SLACK = 0.25
#: "auto" aims at this fraction of the byte budget, so a denser-than-mean sample still fits.
AUTO_FILL = 0.9
METHOD = "stratified-reservoir"
#: Kept pieces are merged into one block beyond this many, so the list stays short.
MAX_BLOCKS = 64
#: Trim the heap after a settle only once settles cut this many pool bytes since the last trim:
#: malloc_trim walks the heap (1.9x the read on a9a).
TRIM_BYTES = 16 << 20


def _find_malloc_trim() -> Any:
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None


_MALLOC_TRIM = _find_malloc_trim()


def release_free_memory() -> None:
    """Hand the heap's free pages back to the OS (glibc's malloc_trim; elsewhere nothing). Pool
    blocks are below glibc's raised mmap threshold (:func:`kcheck.io._parse.keep_scratch_memory`),
    so a settle's frees stay as heap holes (516 MB resident instead of 395 for a 149 MB budget)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


@dataclass
class _Block:
    """Rows in file order: class codes, keys, entries per row, entries (16 bytes a row beside)."""

    codes: Array
    keys: Array
    counts: Array
    cols: Array
    vals: Array

    @property
    def rows(self) -> int:
        return int(self.codes.size)

    def take(self, keep: Array) -> _Block:
        entry_keep = np.repeat(keep, self.counts)
        return _Block(
            self.codes[keep],
            self.keys[keep],
            self.counts[keep],
            self.cols[entry_keep],
            self.vals[entry_keep],
        )


def _merge(blocks: list[_Block]) -> _Block:
    """One block of ``blocks``' rows, emptying the list as it copies (peak: result plus a block)."""
    if len(blocks) == 1:
        return blocks.pop()
    rows = sum(b.rows for b in blocks)
    nnz = sum(int(b.cols.size) for b in blocks)
    out = _Block(
        *(
            np.empty(
                nnz if f in ("cols", "vals") else rows,
                dtype=np.result_type(*(getattr(b, f) for b in blocks)),
            )
            for f in _FIELDS
        )
    )
    r = e = 0
    while blocks:
        b = blocks.pop(0)
        for f in _FIELDS:
            src = getattr(b, f)
            at = e if f in ("cols", "vals") else r
            getattr(out, f)[at : at + src.size] = src
        r += b.rows
        e += int(b.cols.size)
        del b
    return out


_FIELDS = ("codes", "keys", "counts", "cols", "vals")


def allocate(n: int, seen: Array) -> Array:
    """Rows per class for a sample of ``n``: proportional to ``seen``, largest remainders, at least
    one per class where ``n`` allows, at most what a class has."""
    seen = np.asarray(seen, dtype=np.int64)
    total = int(seen.sum())
    if n >= total:
        return np.array(seen, dtype=np.int64)
    quota = n * seen / total
    caps = np.floor(quota).astype(np.int64)
    if n >= seen.size:
        caps = np.maximum(caps, np.minimum(seen, 1))
    left = n - int(caps.sum())
    if left > 0:
        order = np.argsort(-(quota - caps), kind="stable")
        room = order[caps[order] < seen[order]]
        caps[room[:left]] += 1
    elif left < 0:  # the at-least-one rule overshot: take back from the largest classes
        for c in np.argsort(-caps, kind="stable"):
            give = min(-left, int(caps[c]) - 1)
            caps[c] -= give
            left += give
            if left == 0:
                break
    return caps


class StratifiedReservoir:
    """Collects a stratified sample of what it is fed (module docstring). ``max_rows`` None: "auto",
    what ``max_bytes`` of CSR holds; fixed: :class:`TooLarge` past it."""

    def __init__(self, max_rows: int | None, seed: int, max_bytes: int | None = None) -> None:
        if max_rows is None and max_bytes is None:
            raise ValueError("an automatic sample size needs a byte budget")
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.rng = seeds.rng(seed)
        self.codes: dict[float, int] = {}
        self.seen = np.zeros(0, np.int64)
        self.tau = np.ones(0)
        self.blocks: list[_Block] = []
        self.pool_rows = 0
        self.pool_nnz = 0
        self.rows_read = 0
        self.nnz_read = 0
        self.width = 0
        self.settles = 0
        self.untrimmed = 0  # bytes of pool cut since the last trim

    # -- sizes ----------------------------------------------------------------------------

    def _row_bytes(self) -> float:
        """Mean CSR bytes of a row read so far (values, indices and its indptr entry)."""
        return (_BYTES_PER_VALUE * self.nnz_read + 8 * self.rows_read) / max(1, self.rows_read)

    def target(self) -> int:
        """The sample size now: ``max_rows``, or what the byte budget holds at today's mean."""
        if self.max_rows is not None:
            return self.max_rows
        assert self.max_bytes is not None
        return max(1, int(AUTO_FILL * self.max_bytes / self._row_bytes()))

    def _pool_bytes(self) -> int:
        return _BYTES_PER_VALUE * self.pool_nnz + ROW_OVERHEAD * self.pool_rows

    def _over(self) -> bool:
        """Whether the pool has grown SLACK past the sample and is to be settled. "auto" counts rows
        against its target, not bytes: short rows hold less in CSR than ROW_OVERHEAD estimates, and
        a byte bound settled at every chunk and broke the memory limit."""
        if self.max_rows is None:
            return self.pool_rows > self.target() * (1 + SLACK) + 64
        if self.max_bytes is not None and self._pool_bytes() > (1 + SLACK) * self.max_bytes:
            return True
        return self.pool_rows > self.max_rows * (1 + SLACK) + 64

    # -- feeding --------------------------------------------------------------------------

    def _class_codes(self, labels: Array) -> Array:
        uniq, inverse = np.unique(labels, return_inverse=True)
        fresh = [float(u) for u in uniq if float(u) not in self.codes]
        for u in fresh:
            self.codes[u] = len(self.codes)
        if fresh:
            self.seen = np.concatenate([self.seen, np.zeros(len(fresh), np.int64)])
            self.tau = np.concatenate([self.tau, np.ones(len(fresh))])
        lookup = np.array([self.codes[float(u)] for u in uniq], dtype=np.int32)
        return lookup[inverse.reshape(-1)]

    def add(self, part: Part) -> None:
        """Feed one parsed chunk; keeps the rows that may end in the sample."""
        n = int(part.labels.size)
        if n == 0:
            return
        keys = self.rng.random(n)
        codes = self._class_codes(part.labels)
        self.seen += np.bincount(codes, minlength=self.seen.size)
        self.rows_read += n
        self.nnz_read += int(part.cols.size)
        if part.cols.size:
            self.width = max(self.width, int(part.cols.max()) + 1)
        counts = part.counts.astype(np.int32)
        block = _Block(codes, keys, counts, part.cols, part.vals)
        keep = keys < self.tau[codes]
        if not keep.all():
            if not keep.any():
                return
            block = block.take(keep)
        if block.cols.dtype != np.int32 and self.width <= _INT32_MAX:
            block.cols = block.cols.astype(np.int32)  # as the plain reader stores them
        self.blocks.append(block)
        self.pool_rows += block.rows
        self.pool_nnz += int(block.cols.size)
        if self._over():
            self._settle(final=False)
            if self.max_rows is not None and self.max_bytes is not None:
                if self._pool_bytes() > self.max_bytes:
                    raise TooLarge()

    def _settle(self, *, final: bool) -> None:
        """Cut the pool back to each class's share: the rows with the smallest keys."""
        self.settles += 1
        if not self.blocks:
            return
        before = self._pool_bytes()
        # The choice needs only keys and codes; rows are cut block by block, never the whole pool.
        keys = np.concatenate([b.keys for b in self.blocks])
        codes = np.concatenate([b.codes for b in self.blocks])
        n = self.target()
        if (
            final
            and self.max_rows is None
            and self._row_bytes() * self.rows_read <= (self.max_bytes or 0)
        ):
            n = self.rows_read  # auto, and the whole file fits: no sampling
        if final:
            caps = allocate(n, self.seen)
        else:
            caps = np.ceil(n * self.seen / max(1, self.rows_read)).astype(np.int64)
        keep, self.tau = _smallest_keys(keys, codes, caps)
        del keys, codes
        kept: list[_Block] = []
        start = 0
        while self.blocks:
            block = self.blocks.pop(0)
            mask = keep[start : start + block.rows]
            start += block.rows
            if mask.all():
                kept.append(block)
            elif mask.any():
                kept.append(block.take(mask))
            del block
        if len(kept) > MAX_BLOCKS:
            kept = [_merge(kept)]
        self.blocks = kept
        self.pool_rows = sum(b.rows for b in self.blocks)
        self.pool_nnz = sum(int(b.cols.size) for b in self.blocks)
        self.untrimmed += max(before - self._pool_bytes(), 0)
        if self.untrimmed >= TRIM_BYTES:
            release_free_memory()
            self.untrimmed = 0

    def finish(self) -> tuple[Array, sp.csr_matrix]:
        """The sample's labels and CSR rows, in file order, at the whole file's width."""
        self._settle(final=True)
        if len(self.blocks) > 1:  # merged into one below: the pieces are freed
            self.untrimmed += self._pool_bytes()
        pool = _merge(self.blocks) if self.blocks else None
        if pool is None:
            return np.empty(0), sp.csr_matrix((0, self.width))
        nnz, rows = int(pool.cols.size), pool.rows
        itype = np.int64 if max(nnz, self.width, rows) > _INT32_MAX else np.int32
        indptr = np.zeros(rows + 1, dtype=itype)
        np.cumsum(pool.counts, out=indptr[1:])
        X = sp.csr_matrix(
            (pool.vals, pool.cols.astype(itype, copy=False), indptr), shape=(rows, self.width)
        )
        X.has_canonical_format = True
        labels = np.array(list(self.codes), dtype=np.float64)  # in code order
        y = labels[pool.codes]
        del pool
        # The pool's freed pieces are heap holes: handed back where many.
        if self.untrimmed >= TRIM_BYTES:
            release_free_memory()
            self.untrimmed = 0
        return y, X


def _smallest_keys(keys: Array, codes: Array, caps: Array) -> tuple[Array, Array]:
    """Which rows stay: in each class ``c`` the ``caps[c]`` smallest keys (ties in file order); and
    each class's admission bound from now on, its largest kept key where it kept ``caps[c]`` rows
    (else 1.0). One sort by class then key; scratch is the order and a byte a row."""
    classes = caps.size
    order = np.lexsort((keys, codes))
    held = np.bincount(codes, minlength=classes)
    first = np.zeros(classes, dtype=np.int64)
    np.cumsum(held[:-1], out=first[1:])
    take = np.minimum(caps, held)
    # 1 from each class's first row in order to its last kept, else 0: +1/-1 at runs, summed.
    bounds = np.zeros(order.size + 1, dtype=np.int8)
    np.add.at(bounds, first[take > 0], 1)
    np.add.at(bounds, (first + take)[take > 0], -1)
    kept_sorted = np.cumsum(bounds[:-1], dtype=np.int8).view(bool)
    del bounds
    keep = np.zeros(keys.size, dtype=bool)
    keep[order[kept_sorted]] = True
    # A full class admits from now on only keys below its largest kept key.
    full = (take >= caps) & (caps > 0)
    kth = np.ones(classes)
    kth[full] = keys[order[first[full] + caps[full] - 1]]
    return keep, np.where(take >= caps, kth, 1.0)
