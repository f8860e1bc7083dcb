"""Degree-2 checker: a linear model on the explicit expansion of the degree-2 polynomial kernel.

With gamma = r = 1, (1 + x.z)^2 = phi(x).phi(z) + 1 for
phi(x) = [sqrt2*x_i (i), x_i^2 (i), sqrt2*x_i*x_j (i<j)]; the constant is covered by the bias.
The expansion has n + n(n+1)/2 columns, so its exact size is computed before anything is built,
and T is subsampled (or the checker skipped) when it would not fit the memory budget.

Where that width puts the expansion deep in the separable regime (wide sparse text: 8,400 words
make 35 million columns, whose counted cost left 124 of 5,850 rows), the square and pair terms
can be hashed instead (:func:`expand_hashed`, Weinberger et al., ICML 2009) into D columns,
counted from the rows' values (:func:`hashed_width`): the plan takes it only where the explicit
expansion cannot run at all and the hashed one can (:func:`plan_counts`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from kcheck.bindings import engines
from kcheck.checkers.base import (
    Allowance,
    CheckerResult,
    Context,
    Counts,
    Dataset,
    Sized,
    sample_reference,
    score,
    sizing_of,
    stratified_sample,
)
from kcheck.costs import budget
from kcheck.defaults import Event
from kcheck.parallel.workers import run_until
from kcheck.tuning import linear_c

SQRT2 = math.sqrt(2.0)
#: Below this many rows a degree-2 model says too little to be worth reporting.
MIN_ROWS = 1000
#: Bytes per stored nonzero: CSR (8 value + 4 index) plus LIBLINEAR's node copy (16).
BYTES_PER_NNZ = 28
#: Bytes per row: CSR indptr plus LIBLINEAR's bias and terminator nodes and row pointer.
BYTES_PER_ROW = 8 + 32 + 8
#: Dense vectors of the expanded width that LIBLINEAR keeps (weights, Newton-CG work vectors,
#: one warm-start vector per CV fold), per one-vs-rest model.
WEIGHT_VECTORS = 8 + engines.N_FOLDS
#: Expanded values built at once (by :func:`expand` and for prediction) at most; under a
#: memory limit, fewer (:func:`chunk_nnz`). The expansion's temporaries are about 11 int64
#: arrays of this length (180 MB), on top of the output chunk.
EXPAND_CHUNK_NNZ = 2_000_000
#: Bytes a chunk takes per expanded value: the temporaries, the output's value and index and
#: the decision values' share (a 2,000,000-value chunk of 20 dense features added 158 MB).
CHUNK_BYTES_PER_NNZ = 96
#: The smallest chunk, whatever the limit (400 KB of temporaries): below it the per-chunk
#: overhead dominates.
MIN_CHUNK_NNZ = 4_096
#: Hard cap on the expanded nonzeros (about 1.7 GB with LIBLINEAR's copy), whatever the budget.
DEFAULT_MAX_NNZ = 60_000_000
#: Seconds per expanded nonzero of degree-2's C search and training, relative to the linear
#: baseline's seconds per nonzero of T. Measured with -s 2 -B 1: a9a 3.3, ijcnn1 2.4, cod-rna
#: 2.0, madelon's 20 useful features 1.4, dna 1.2, german.numer 0.9, poker 10 (the outlier:
#: at large C its Newton solves take many iterations). 3 covers all but the outlier.
TIME_PER_NNZ_RATIO = 3.0
#: An expansion this small runs in full whatever the budget: it takes well under a second, and
#: on small data the linear baseline's time is too short to scale a budget from.
FREE_NNZ = 300_000
#: Hashed columns per expanded value of a mean row (:func:`hashed_width`): a row's m values
#: then fall into at least 64m columns, where about m/128 pairs of them share one. Narrower
#: widths lose what the products carry, as every column then also holds many other rows'
#: terms: on 3,000 sparse rows (2,000 words, 21 a row) whose labels are an XOR of two words,
#: 16 columns a value lost 1.7 points to linear, 64 gained 4.8 and the explicit expansion 8.3.
HASH_SLOTS_PER_VALUE = 64
#: Fibonacci hashing's multiplier, 2^64 / the golden ratio: in uint64 arithmetic the high bits
#: of t x HASH_MULTIPLIER spread consecutive triangle indices t evenly over the columns.
HASH_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


def expanded_dimension(n: int) -> int:
    """Width of phi for n input features: n + n(n+1)/2."""
    return n + n * (n + 1) // 2


def trained_dimension(n: int, hashed_width: int | None) -> int:
    """Width of what degree-2 trains on: phi's (None), or n + ``hashed_width`` hashed."""
    return expanded_dimension(n) if hashed_width is None else n + hashed_width


def counted_width(n: int, hashed_width: int | None) -> int:
    """The width the cost count sees (kcheck.costs.budget.separable_factor): phi's, or 0 for the
    hashed expansion, whose shared columns keep its rows out of the separable regime the factor
    was measured in: on 1,000 rows of 8,400 words it took 4.1 CPU s, counted 3.9 without the
    factor and 13.8 with it (the explicit one took 16.9, counted 50.8)."""
    return expanded_dimension(n) if hashed_width is None else 0


def hashed_width(mean_nnz: float) -> int:
    """D: the power of two at or above HASH_SLOTS_PER_VALUE x ``mean_nnz``, the mean expanded
    values of a row (at least 2)."""
    return 1 << max(1, math.ceil(math.log2(max(HASH_SLOTS_PER_VALUE * mean_nnz, 2.0))))


def row_expanded_nnz(X: sp.csr_matrix) -> np.ndarray:
    """Nonzeros of phi(x) for each row with k nonzeros: k + k(k+1)/2 (as int64)."""
    return expanded_counts(np.diff(X.indptr).astype(np.int64))


def expanded_counts(k: np.ndarray) -> np.ndarray:
    """Nonzeros of phi(x) for rows of ``k`` nonzeros each (int64): k + k(k+1)/2."""
    out: np.ndarray = k + k * (k + 1) // 2
    return out


def expand(X: sp.csr_matrix | np.ndarray, *, chunk_nnz: int | None = None) -> sp.csr_matrix:
    """Build phi(X) as a CSR matrix with sorted indices, vectorised over rows.

    Rows are processed in chunks of about ``chunk_nnz`` output nonzeros to bound temporaries.
    The result does not depend on the order in which X stores its indices: X is sorted first
    (on a copy), because the pair-index arithmetic assumes i < j within a row.
    """
    chunk_nnz = chunk_nnz or EXPAND_CHUNK_NNZ
    X = engines.as_binding_csr(X)
    if X.nnz and not np.all(X.data != 0):
        X = X.copy()
        X.eliminate_zeros()
    n_rows, n = X.shape
    dim = expanded_dimension(n)
    per_row = row_expanded_nnz(X)
    out_indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(per_row, out=out_indptr[1:])
    total = int(out_indptr[-1])
    idx_dtype = np.int32 if max(dim, total) < 2**31 else np.int64
    out_ind = np.empty(total, dtype=idx_dtype)
    out_val = np.empty(total, dtype=np.float64)
    start = 0
    while start < n_rows:
        # Largest stop such that the chunk's output stays near chunk_nnz (at least one row).
        stop = int(np.searchsorted(out_indptr, out_indptr[start] + chunk_nnz, side="right")) - 1
        stop = min(max(stop, start + 1), n_rows)
        _expand_rows(X, start, stop, n, out_indptr, out_ind, out_val)
        start = stop
    return sp.csr_matrix((out_val, out_ind, out_indptr.astype(idx_dtype)), shape=(n_rows, dim))


def _expand_rows(
    X: sp.csr_matrix,
    start: int,
    stop: int,
    n: int,
    out_indptr: np.ndarray,
    out_ind: np.ndarray,
    out_val: np.ndarray,
) -> None:
    """Fill rows [start, stop) of phi(X): linear part first, then pairs in (i, j) order.

    For sorted i <= j the triangle index tri(i, j) = i*n - i(i-1)/2 + (j - i) grows with (i, j)
    in lexicographic order, so every output row comes out sorted without a sort.
    """
    lo, hi = int(X.indptr[start]), int(X.indptr[stop])
    ind = X.indices[lo:hi].astype(np.int64)
    val = X.data[lo:hi]
    rowptr = X.indptr[start : stop + 1].astype(np.int64) - lo
    k = np.diff(rowptr)
    row_of = np.repeat(np.arange(stop - start), k)
    pos = np.arange(hi - lo) - rowptr[row_of]  # position of each entry within its row
    out_base = out_indptr[start:stop] - out_indptr[start]
    base = int(out_indptr[start])

    # Linear part: positions 0..k-1 of each output row.
    lin_at = base + out_base[row_of] + pos
    out_ind[lin_at] = ind
    out_val[lin_at] = SQRT2 * val

    # Pair part: entry e at position p pairs with positions p..k-1 of its row.
    reps = (k[row_of] - pos).astype(np.int64)
    n_pairs = int(reps.sum())
    if n_pairs == 0:
        return
    first = np.repeat(np.arange(hi - lo, dtype=np.int64), reps)
    group_start = np.repeat(np.cumsum(reps) - reps, reps)
    offset = np.arange(n_pairs, dtype=np.int64) - group_start
    second = first + offset
    i = ind[first]
    j = ind[second]
    tri = i * n - (i * (i - 1)) // 2 + (j - i)
    vals = val[first] * val[second]
    vals[offset > 0] *= SQRT2
    # Pair rank within its row = pairs before it in the row; rows are contiguous in `first`.
    pair_row = row_of[first]
    row_pair_start = np.cumsum(k * (k + 1) // 2) - k * (k + 1) // 2
    pair_pos = np.arange(n_pairs, dtype=np.int64) - row_pair_start[pair_row]
    at = base + out_base[pair_row] + k[pair_row] + pair_pos
    out_ind[at] = n + tri
    out_val[at] = vals


def hash_slots(tri: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The column in [0, ``width``) and the sign (+1.0 or -1.0) of each triangle index: the
    top log2(width) bits of tri x HASH_MULTIPLIER (mod 2^64), and the bit below them."""
    bits = int(width).bit_length() - 1
    if width != 1 << bits or not 1 <= bits <= 62:
        raise ValueError(f"the hashed width must be a power of two from 2 to 2^62, not {width}")
    h = tri.astype(np.uint64) * HASH_MULTIPLIER
    slot = (h >> np.uint64(64 - bits)).astype(np.int64)
    sign = 1.0 - 2.0 * ((h >> np.uint64(63 - bits)) & np.uint64(1)).astype(np.float64)
    return slot, sign


def expand_hashed(
    X: sp.csr_matrix | np.ndarray, width: int, *, chunk_nnz: int | None = None
) -> sp.csr_matrix:
    """phi(X) with its square and pair terms hashed into ``width`` columns: the linear terms
    sqrt2*x_i stay in columns [0, n), term t (its triangle index) goes to column n + h(t) with
    the sign s(t) (:func:`hash_slots`), and the terms of a row that share a column are summed.
    A CSR matrix of n + ``width`` columns with sorted indices, built from :func:`expand`'s
    chunks of about ``chunk_nnz`` values, so that the explicit expansion never exists whole."""
    chunk_nnz = chunk_nnz or EXPAND_CHUNK_NNZ
    X = engines.as_binding_csr(X)
    n_rows, n = X.shape
    parts = [
        _fold(expand(X[start:stop], chunk_nnz=chunk_nnz), n, width)
        for start, stop in row_chunks(row_expanded_nnz(X), chunk_nnz)
    ]
    if not parts:
        return sp.csr_matrix((n_rows, n + width), dtype=np.float64)
    return engines.as_binding_csr(sp.vstack(parts, format="csr"))


def _fold(P: sp.csr_matrix, n: int, width: int) -> sp.csr_matrix:
    """The explicit expansion ``P`` of some rows with its columns from n on hashed into
    ``width``, duplicates within a row summed (and a sum of exactly 0 dropped)."""
    cols = P.indices.astype(np.int64)
    data = P.data.copy()
    pair = cols >= n
    slot, sign = hash_slots(cols[pair] - n, width)
    cols[pair] = n + slot
    data[pair] *= sign
    idx = np.int32 if max(n + width, P.nnz) < 2**31 else np.int64
    Q = sp.csr_matrix((data, cols.astype(idx), P.indptr.astype(idx)), shape=(P.shape[0], n + width))
    Q.sum_duplicates()
    Q.eliminate_zeros()
    return Q


def row_chunks(per_row: np.ndarray, chunk_nnz: int) -> Iterator[tuple[int, int]]:
    """Consecutive row ranges [start, stop) whose expanded values (``per_row``) add up to about
    ``chunk_nnz`` each, at least one row a range: what the expansion builds at once."""
    ends = np.cumsum(per_row)
    start = 0
    while start < len(ends):
        done = int(ends[start - 1]) if start else 0
        stop = int(np.searchsorted(ends, done + chunk_nnz, side="right"))
        stop = min(max(stop, start + 1), len(ends))
        yield start, stop
        start = stop


def expand_as(
    X: sp.csr_matrix | np.ndarray, hashed: int | None, *, chunk_nnz: int | None = None
) -> sp.csr_matrix:
    """The expansion degree-2 trains on: explicit (``hashed`` None) or hashed into ``hashed``."""
    if hashed is None:
        return expand(X, chunk_nnz=chunk_nnz)
    return expand_hashed(X, hashed, chunk_nnz=chunk_nnz)


@dataclass(frozen=True)
class Degree2Options:
    """``budget_seconds`` (counted, kcheck.costs.budget: what the plan left of the check's budget)
    and
    ``max_cost_nnz`` cap the expanded nonzeros by cost, deterministically (a count, not a
    clock). ``time_budget`` (seconds) with ``seconds_per_nnz`` (the linear baseline's measured
    seconds per stored value of T) caps it by the time left under ``--time-limit``."""

    seed: int = 0
    memory_limit: int = 8 * 2**30
    max_nnz: int = DEFAULT_MAX_NNZ
    min_rows: int = MIN_ROWS
    max_cost_nnz: int | None = None
    time_budget: float | None = None
    seconds_per_nnz: float | None = None
    budget_seconds: float | None = None
    #: Class weights of the metric (``-wi``), for the model and its subsample's reference.
    class_weight: engines.ClassWeight | None = None


@dataclass(frozen=True)
class Degree2Sizing:
    """What degree-2 trains on, as the plan decided it (:func:`size`): the rows of T (0:
    skipped, with the reason), what cut them, the expansion (explicit, or hashed into
    ``hashed_width`` columns) and its chunk."""

    rows: int
    reason: str | None = None
    limited_by: str | None = None  # "memory" | "cost" | "time" | None (all rows)
    #: Columns the square and pair terms are hashed into (:func:`expand_hashed`); None: the
    #: explicit expansion.
    hashed_width: int | None = None
    #: What the rows' expansion, the weight vectors and one chunk's temporaries take (0 where
    #: it is skipped); derived from the rows, so plans compare by rows, reason and limit.
    bytes: int = field(default=0, compare=False)
    #: Expanded values built at once (:func:`chunk_nnz`).
    chunk_nnz: int = field(default=EXPAND_CHUNK_NNZ, compare=False)


def chunk_nnz(memory_limit: int) -> int:
    """Expanded values built at once within ``memory_limit``: a quarter of it, between
    MIN_CHUNK_NNZ and EXPAND_CHUNK_NNZ. A fixed chunk of 2,000,000 values takes 190 MB of
    temporaries, so under a limit of 200 MB a check's degree-2 predictions alone overran it."""
    return max(MIN_CHUNK_NNZ, min(EXPAND_CHUNK_NNZ, memory_limit // 4 // CHUNK_BYTES_PER_NNZ))


def plan_rows(T: Dataset, n_classes: int, options: Degree2Options) -> Degree2Sizing:
    """How many rows of T to expand: all, a subsample, or none (with the reason)."""
    expanded = int(row_expanded_nnz(T.X).sum())
    return plan_counts(T.rows, int(T.X.shape[1]), int(T.X.nnz), expanded, n_classes, options)


def plan_counts(
    rows: int, features: int, nnz: int, expanded: int, n_classes: int, options: Degree2Options
) -> Degree2Sizing:
    """:func:`plan_rows` of T from its counts: ``rows`` rows, ``features`` wide, ``nnz``
    stored values and ``expanded`` values of their expansion (kcheck.plan reads it so).

    The explicit expansion, or the hashed one (:func:`hashed_width` columns for the square and
    pair terms) where the explicit one cannot run at all (its counted cost, its weight vectors
    or the time left leave it too few rows), the hashed width is narrower than the n(n+1)/2 pair
    columns, and the hashed one, sized within the same limits at its own width, trains on at
    least ``min_rows`` rows: on wide sparse rows, where the explicit width's separable factor
    (kcheck.costs.budget) prices out all but a few rows. Dense or narrow data, and data whose
    explicit expansion runs, on however few rows, keep the explicit one: its columns are
    exact and its terms can be named (kcheck.terms.explain)."""
    explicit = _plan_at(rows, features, expanded, n_classes, options, None)
    if explicit.rows or rows < options.min_rows or not expanded:
        return explicit
    width = hashed_width(expanded / rows)
    if width >= features * (features + 1) // 2:
        return explicit
    hashed = _plan_at(rows, features, expanded, n_classes, options, width)
    if hashed.rows:
        return hashed
    if hashed.reason == explicit.reason:
        return explicit
    why = f"{explicit.reason}; hashed into {width:,} columns, {hashed.reason}"
    return dataclasses.replace(explicit, reason=why)


def _plan_at(
    rows: int,
    features: int,
    expanded: int,
    n_classes: int,
    options: Degree2Options,
    hashed: int | None,
) -> Degree2Sizing:
    """:func:`plan_counts` of one expansion: explicit (``hashed`` None) or hashed into
    ``hashed`` columns, whose values are counted as the explicit one's (collisions only
    merge them), at :func:`counted_width`."""
    dim = trained_dimension(features, hashed)
    n_w = 1 if n_classes <= 2 else n_classes
    weight_bytes = WEIGHT_VECTORS * 8 * (dim + 1) * n_w
    if weight_bytes > options.memory_limit:
        return Degree2Sizing(
            0,
            (
                f"the weight vectors of {dim:,} expanded features need "
                f"{budget.size_text(weight_bytes)}, over the memory limit of "
                f"{budget.size_text(options.memory_limit)}"
            ),
            "memory",
        )
    mean_nnz = max(expanded / rows if rows else 0.0, 1.0)
    chunk = chunk_nnz(options.memory_limit - weight_bytes)
    # expand() builds at least one row at a time, and never more than the whole expansion.
    built = min(max(chunk, math.ceil(mean_nnz)), max(expanded, 1))
    chunk_bytes = built * CHUNK_BYTES_PER_NNZ
    budget_bytes = max(0, options.memory_limit - weight_bytes - chunk_bytes)
    row_cost = mean_nnz * BYTES_PER_NNZ + BYTES_PER_ROW
    limits = {
        "memory": min(int(budget_bytes // row_cost), int(options.max_nnz // mean_nnz)),
        "cost": rows,
        "time": _time_rows(rows, mean_nnz, options),
    }
    counted = counted_width(features, hashed)
    cost_budget = _cost_budget(rows, n_classes, counted, options)
    least = min(options.min_rows, rows)
    # One-vs-rest trains n_w models, so a small expansion is small in all of them together, and
    # runs in full whatever the budget.
    if cost_budget is not None and expanded * n_w > FREE_NNZ and expanded > cost_budget:
        limits["cost"] = _cost_rows(cost_budget, least, rows, mean_nnz, n_classes, counted, options)
    limited_by, fit = _binding_limit(limits, rows, least)
    if fit < least:
        return _too_few(fit, limited_by, mean_nnz, cost_budget, options)
    return Degree2Sizing(
        fit,
        None,
        limited_by if fit < rows else None,
        hashed,
        int(fit * row_cost) + weight_bytes + chunk_bytes,
        chunk,
    )


def _cost_budget(rows: int, n_classes: int, dim: int, options: Degree2Options) -> int | None:
    """The expanded values the cost caps allow (None: no cap): the least of ``max_cost_nnz``
    and what ``budget_seconds`` affords."""
    caps = [options.max_cost_nnz] if options.max_cost_nnz is not None else []
    if options.budget_seconds is not None:
        caps.append(
            budget.degree2_values_within(
                options.budget_seconds, rows=rows, n_classes=n_classes, dimension=dim
            )
        )
    return min(caps) if caps else None


def _cost_rows(
    cost_budget: int,
    least: int,
    rows: int,
    mean_nnz: float,
    n_classes: int,
    dim: int,
    options: Degree2Options,
) -> int:
    """The rows the cost budget affords, priced at T's cost per value unless that would leave
    fewer than ``least``, where the subsample's own cost decides."""
    fit = _separable_rows(
        int(cost_budget // mean_nnz), mean_nnz, n_classes, dim, options.budget_seconds
    )
    if fit < least and options.budget_seconds is not None:
        # T's cost per value overstates a subsample's (fewer rows, fewer Newton steps):
        # where it would price out even the least subsample, the subsample's own decides,
        # so that a set just past the budget keeps degree-2 (24,000 x 50: 871 rows at T's
        # rate, about 1,600 at their own) instead of losing it at a threshold.
        own = _own_rows(options.budget_seconds, rows, mean_nnz, n_classes, dim)
        if options.max_cost_nnz is not None:
            own = min(own, int(options.max_cost_nnz // mean_nnz))
        fit = max(fit, own)
    return fit


def _time_rows(rows: int, mean_nnz: float, options: Degree2Options) -> int:
    """The rows that the time left under ``--time-limit`` affords (all of them without one)."""
    if options.time_budget is None or options.seconds_per_nnz is None:
        return rows
    seconds_per_row = TIME_PER_NNZ_RATIO * options.seconds_per_nnz * mean_nnz
    return int(options.time_budget / max(seconds_per_row, 1e-12))


def _binding_limit(limits: dict[str, int], rows: int, least: int) -> tuple[str, int]:
    """Which limit binds and the rows it leaves, so that a skip names the limit that causes it."""
    limited_by = min(limits, key=lambda k: limits[k])
    fit = min(rows, limits[limited_by])
    counted = [k for k in ("memory", "cost") if limits[k] < least]
    if fit < least and counted:
        # A count alone skips it: that is the reason, whatever time is left (the time limit
        # is then not why, and a larger one would not help).
        limited_by = min(counted, key=lambda k: limits[k])
        fit = limits[limited_by]
    return limited_by, fit


def _too_few(
    fit: int, limited_by: str, mean_nnz: float, cost_budget: int | None, options: Degree2Options
) -> Degree2Sizing:
    """The skip where fewer rows than the least fit: the plan that says which limit and why."""
    if limited_by == "memory":
        what = f"the memory limit of {budget.size_text(options.memory_limit)}"
    elif limited_by == "cost" and options.budget_seconds is not None and not cost_budget:
        # "0 rows fit the cost budget of 0 expanded values" said nothing of why.
        return Degree2Sizing(0, "the methods planned before it used all of their budget", "cost")
    elif limited_by == "cost":
        what = f"the cost budget of {cost_budget or 0:,} expanded values"
    else:
        what = "the time left before the time limit"
    return Degree2Sizing(
        0,
        (
            f"only {fit:,} {'row' if fit == 1 else 'rows'} of the expansion "
            f"({mean_nnz:,.0f} nonzeros a row) fit {what}"
        ),
        limited_by,
    )


def _separable_rows(
    fit: int, mean_nnz: float, n_classes: int, dim: int, seconds: float | None
) -> int:
    """``fit`` rows, fewer where their own count is over ``seconds``: in the separable regime
    a subsample costs more per value than all of T (its rows are fewer for the same width),
    so the rows that T's cost per value affords may not fit. Shrinks to a fixed point."""
    if seconds is None:
        return fit
    for _ in range(16):
        spent = budget.degree2_sizing_seconds(int(fit * mean_nnz), n_classes, fit, dim)
        if fit <= 0 or spent <= seconds:
            break
        fit = int(fit * seconds / spent)
    return fit


def _own_rows(seconds: float, rows: int, mean_nnz: float, n_classes: int, dim: int) -> int:
    """The most of ``rows`` rows whose own count, as degree-2 is sized
    (kcheck.costs.budget.degree2_sizing_seconds at their rows), is within ``seconds``, by bisection:
    the count grows with the rows, except in a narrow band where the separable regime starts
    (its factor falls as the rows grow), where the rows found may stop short of the most. They
    always fit: the bisection keeps only rows whose count it checked."""
    lo, hi = 0, rows
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if budget.degree2_sizing_seconds(int(mid * mean_nnz), n_classes, mid, dim) <= seconds:
            lo = mid
        else:
            hi = mid - 1
    return lo


_LIMITS = {
    "memory": "the memory limit",
    "cost": "the cost budget",
    "time": "the time left before the time limit",
}


def run(T: Dataset, V: Dataset, options: Degree2Options, sizing: Degree2Sizing) -> CheckerResult:
    """Tune C on phi(T), or on the stratified subsample ``sizing`` says, train, and score on
    phi(V); the sizing is obeyed, never made again here (of ``options`` only the seed and
    the class weights are read).

    On a subsample, a linear model is tuned and trained on the same rows and becomes the
    reference of the gap: a degree-2 model on 5% of T against a linear one on all of T would
    measure the data it lacks, not the nonlinearity it sees.
    """
    t0 = time.perf_counter()
    n = T.X.shape[1]
    n_classes = int(np.unique(T.y).size)
    plan = sizing
    info: dict[str, object] = {"dimension": expanded_dimension(n)}
    if plan.hashed_width is not None:
        info.update({"expansion": "hashed", "hashed_width": plan.hashed_width})
    if plan.reason is not None:
        res = CheckerResult.skipped("degree2", plan.reason, time.perf_counter() - t0)
        res.info.update(info)
        return res
    reference = None
    if plan.rows < T.rows:
        S = stratified_sample(T, plan.rows, seed=options.seed)
        reference = sample_reference(S, V, seed=options.seed, class_weight=options.class_weight)
        info["reference"] = reference.info  # second in the JSON's block, as it always was
        XT, yT = S.X, S.y
    else:
        XT, yT = T.X, T.y
    shift = Shift.of(XT)
    PT = expand_as(shift.apply(XT), plan.hashed_width, chunk_nnz=plan.chunk_nnz)
    info["shifted_features"] = int(shift.columns.size)
    model, cv = linear_c.fit_linear(PT, yT, seed=options.seed, class_weight=options.class_weight)
    counted = budget.degree2_seconds(
        int(PT.nnz), n_classes, int(PT.shape[0]), counted_width(n, plan.hashed_width)
    )
    del PT

    # Not a closure: it pickles, so the checker can run in a worker process.
    expanded = ExpandedModel(model, plan.chunk_nnz, shift, plan.hashed_width)
    s = score(expanded, V)
    fraction = XT.shape[0] / T.rows
    info.update({"C": model.C, "fraction": fraction, "rows": int(XT.shape[0])})
    reason = None
    if plan.limited_by:
        info["limited_by"] = plan.limited_by
        reason = f"{XT.shape[0]:,} of {T.rows:,} rows fit {_LIMITS[plan.limited_by]}"
    result = CheckerResult.scored(
        "degree2",
        s,
        t0,
        expanded.predict,
        status="ok" if fraction == 1.0 else "subsampled",
        reason=reason,
        info=info,
        cv_accuracy=cv,
        model=model,
        counted_seconds=counted,
    )
    return result if reference is None else reference.fill(result)


@dataclass
class ExpandedModel:
    """A linear model on phi(x) that expands rows in chunks of about ``chunk_nnz`` expanded
    values, so that phi(V) never exists in full. Chunks of 20,000 rows were 73 million values
    on webspam-like data (84 values a row): 2.9 GB with the expansion's temporaries, 14x the
    data."""

    model: engines.LinearModel
    chunk_nnz: int | None = None
    #: The training rows' :class:`Shift`, applied before every expansion; None: none.
    shift: Shift | None = None
    #: The hashed expansion's width (:func:`expand_hashed`); None: the explicit expansion.
    hashed_width: int | None = None

    @property
    def labels(self) -> np.ndarray:
        return self.model.labels

    def predict(self, X: sp.csr_matrix) -> np.ndarray:
        return self.predict_scored(X)[0]

    def predict_scored(self, X: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
        X = engines.as_binding_csr(X)
        chunk_nnz = self.chunk_nnz or EXPAND_CHUNK_NNZ
        shift = self.shift
        per_row = row_expanded_nnz(X) if shift is None else expanded_counts(shift.row_nnz(X))
        out = []
        for start, stop in row_chunks(per_row, chunk_nnz):
            part = X[start:stop] if shift is None else shift.apply(X[start:stop])
            out.append(self.model.decision_function(expand_as(part, self.hashed_width)))
        width = max(1, self.model.weights.shape[1])
        dec = np.concatenate(out) if out else np.empty((0, width))
        return self.model.labels_from(dec), dec


@dataclass(frozen=True)
class Shift:
    """The features stored in every row of the rows degree-2 trains on, moved to their mean
    there before the expansion, in training and prediction alike.

    A polynomial of degree 2 in x, with a bias, is also one in x - c, so the shift changes
    none of the functions degree-2 can fit, only what they cost under the C penalty. The RBF
    kernel it stands in for sees only differences of rows and ignores offsets; the expansion
    did not. After max |x| scaling a feature on an offset (values 0.6 to 1.0, say) makes x_i,
    x_i^2 and x_i x_j nearly collinear, and the large weights that tell them apart lie beyond
    the C that LIBLINEAR's search reaches: on 5,000 rows of covtype-like data the full
    expansion gained +0.2 points over linear unshifted and +11.6 shifted, against an RBF
    reference of +12.6. Only features stored in every row move: they have no zeros to keep,
    so the expansion's stored values, and the plan counted from them, stay as they were.
    """

    columns: np.ndarray
    offsets: np.ndarray

    @classmethod
    def of(cls, X: sp.csr_matrix) -> Shift:
        """The shift for rows X: each column nonzero in every row, and its mean."""
        X = engines.as_binding_csr(X)
        rows = int(X.shape[0])
        stored = np.bincount(X.indices[X.data != 0], minlength=X.shape[1])
        columns = np.flatnonzero(stored == rows) if rows else np.empty(0, dtype=np.int64)
        offsets = np.asarray(X[:, columns].sum(axis=0), dtype=np.float64).ravel() / max(rows, 1)
        return cls(columns, offsets)

    def row_nnz(self, X: sp.csr_matrix) -> np.ndarray:
        """Stored values of each row of ``apply(X)`` at most: a row without a shifted column
        gains its -offset (rows of a validation or test file may lack one)."""
        k: np.ndarray = np.diff(X.indptr).astype(np.int64)
        if self.columns.size == 0 or X.nnz == 0:
            return k + self.columns.size
        shifted = np.zeros(X.shape[1], dtype=np.int64)
        shifted[self.columns[self.columns < X.shape[1]]] = 1
        present = np.add.reduceat(shifted[X.indices], X.indptr[:-1].clip(max=X.nnz - 1))
        present[k == 0] = 0
        out: np.ndarray = k - present + self.columns.size
        return out

    def apply(self, X: sp.csr_matrix) -> sp.csr_matrix:
        """X with each shifted column minus its offset (a row that lacks it gets -offset)."""
        if self.columns.size == 0:
            return X
        X = engines.as_binding_csr(X)
        rows, width = X.shape
        columns = self.columns[self.columns < width]
        offsets = self.offsets[self.columns < width]
        moved = np.zeros(width, dtype=bool)
        moved[columns] = True
        keep = ~moved[X.indices]
        rest = sp.csr_matrix(
            (X.data[keep], X.indices[keep], np.r_[0, np.cumsum(keep)][X.indptr]), shape=X.shape
        )
        block = X[:, columns].toarray() - offsets
        s = columns.size
        dense = sp.csr_matrix(
            (block.ravel(), np.tile(columns, rows), np.arange(0, rows * s + 1, s)), shape=X.shape
        )
        out = (rest + dense).tocsr()
        out.eliminate_zeros()
        out.sort_indices()
        return engines.as_binding_csr(out)


def _allowed(allowed: Allowance, nnz: int) -> Degree2Options:
    """The options of what the plan allows: the memory, what is left of the check's budget
    in counted seconds, and under ``--time-limit`` the time left, priced at the linear
    baseline's seconds per stored value of T (``nnz`` of them)."""
    per_nnz = None if allowed.linear_seconds is None else allowed.linear_seconds / max(nnz, 1)
    return Degree2Options(
        memory_limit=allowed.memory_limit,
        budget_seconds=allowed.budget_seconds,
        time_budget=allowed.seconds_left,
        seconds_per_nnz=per_nnz,
    )


def size(counts: Counts, allowed: Allowance) -> Sized:
    """What :func:`check` will do, from counts (kcheck.plan asks before anything trains): its
    rows (:func:`plan_counts`), what it allocates beyond the data (the expanded rows, CSR and
    LIBLINEAR's copy, the weight vectors and one prediction chunk's temporaries) and its
    counted seconds, which the check's budget pays."""
    n = counts.n_classes
    p = plan_counts(
        counts.rows,
        counts.features,
        counts.nnz,
        counts.expanded_nnz,
        n,
        _allowed(allowed, counts.nnz),
    )
    if p.rows == 0:
        return Sized(0, p.reason, p.limited_by, 0, sizing=p)
    expanded = (
        counts.expanded_nnz
        if p.rows == counts.rows
        else round(p.rows * counts.expanded_nnz / counts.rows)
    )
    counted = budget.degree2_seconds(
        expanded, n, p.rows, counted_width(counts.features, p.hashed_width)
    )
    return Sized(p.rows, p.reason, p.limited_by, p.bytes, counted, counted, sizing=p)


def check(T: Dataset, V: Dataset, ctx: Context, sized: Sized) -> CheckerResult:
    """The checker as the pipeline runs it: on what the plan sized (:func:`size`), in a
    worker process that the deadline can stop."""
    ctx.progress(Event("degree-2 checker"))
    options = Degree2Options(seed=ctx.seed, class_weight=ctx.class_weight)
    return run_until(ctx.deadline, run, T, V, options, sizing_of(sized, Degree2Sizing))
