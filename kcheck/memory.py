"""How much memory kcheck may use, and the checks that keep it from asking for more."""

from __future__ import annotations

import os

from kcheck.errors import DataFormatError, KcheckError

#: Bytes a check holds per column of width: scaler arrays and mask, reader and scaler scratch, split
#: and checker column arrays (58 measured with one index of 5e7).
BYTES_PER_COLUMN = 64
#: A line costs about this many times its length while parsed (line, byte views, per-token arrays).
LINE_COST = 32
#: Lines are never capped below this, so that a small --memory-limit still reads wide rows.
MIN_LINE_CAP = 1 << 20


def _physical_memory() -> int:
    """Physical RAM, or the cgroup's memory limit where that is lower."""
    total = 0
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < (total or 2**62):
            total = int(text)
    return total or 8 * 2**30


def default_memory_limit() -> int:
    """Half of physical RAM (or the cgroup limit): fixed per machine, independent of load."""
    return _physical_memory() // 2


def max_line_bytes(memory_limit: int | None = None) -> int:
    """The longest input line the reader can parse within the limit (``/dev/zero`` has none)."""
    limit = memory_limit or default_memory_limit()
    return max(MIN_LINE_CAP, limit // LINE_COST)


def check_width(source: str, n_features: int, memory_limit: int | None = None) -> None:
    """Refuse a width whose per-feature arrays alone would not fit (index 2^31: 16 GiB each)."""
    limit = memory_limit or default_memory_limit()
    need = BYTES_PER_COLUMN * n_features
    if need > limit:
        raise KcheckError(
            f"{source}: the largest feature index is {n_features}, so per-feature arrays "
            f"would need {size_text(need)}, over the memory limit of "
            f"{size_text(limit)} (a stray huge index?)"
        )


def line_too_long(source: str, line: int | None, cap: int) -> DataFormatError:
    """The error for a line over :func:`max_line_bytes`."""
    return DataFormatError(
        source,
        line,
        f"line longer than {cap:,} bytes with no line end (the cap for this "
        "memory limit; is this a LIBSVM text file?)",
    )


#: A check's peak per CSR byte (scripts/bench_memory.py: 2.44), plus FIXED_BYTES: the target.
CHECK_BYTES_PER_CSR_BYTE = 3
FIXED_BYTES = 64 * 2**20
#: Under --time-limit each method trains in a stoppable worker beside this process, holding its copy
#: of T and V, LIBLINEAR's nodes and another interpreter (a 45 MB sample under 200M: 5.0x its CSR
#: plus 116 MB over the tree, against 3x plus FIXED_BYTES).
TIME_LIMITED_BYTES_PER_CSR_BYTE = CHECK_BYTES_PER_CSR_BYTE + 2
TIME_LIMITED_FIXED_BYTES = 2 * FIXED_BYTES


def csr_bytes(X: object) -> int:
    """Bytes of a CSR matrix's three arrays."""
    return int(sum(getattr(X, a).nbytes for a in ("data", "indices", "indptr")))


#: ... and ``kcheck verify``'s: rows, scaled copy, LIBSVM's copy (16 bytes a value) and solver
#: arrays, before the kernel cache takes the rest (kcheck.tuning.rbf_grid.search_memory).
VERIFY_BYTES_PER_CSR_BYTE = 4


def check_fits(
    source: str,
    data_bytes: int,
    memory_limit: int,
    per_csr_byte: int = CHECK_BYTES_PER_CSR_BYTE,
    what: str = "a check",
    fixed_bytes: int = FIXED_BYTES,
) -> None:
    """Refuse at once a run that cannot keep to the memory limit, rather than fail later."""
    need = per_csr_byte * data_bytes + fixed_bytes
    if need > memory_limit:
        raise KcheckError(
            f"{source}: {what} of this data needs about {size_text(need)} "
            f"({per_csr_byte}x its {size_text(data_bytes)} in memory plus "
            f"{size_text(fixed_bytes)}), over the memory limit of {size_text(memory_limit)}"
        )


def max_data_bytes(
    memory_limit: int,
    per_csr_byte: int = CHECK_BYTES_PER_CSR_BYTE,
    fixed_bytes: int = FIXED_BYTES,
) -> int:
    """The largest CSR :func:`check_fits` accepts under ``memory_limit``, where the reader stops, so
    too-large files are refused before read whole."""
    return (memory_limit - fixed_bytes) // per_csr_byte


def check_footprint(time_limited: bool) -> tuple[int, int]:
    """A check's bytes per CSR byte and fixed bytes, with a worker's share under --time-limit."""
    if time_limited:
        return TIME_LIMITED_BYTES_PER_CSR_BYTE, TIME_LIMITED_FIXED_BYTES
    return CHECK_BYTES_PER_CSR_BYTE, FIXED_BYTES


def checker_budget(memory_limit: int, data_bytes: int, time_limited: bool = False) -> int:
    """What a checker may allocate beyond the data in memory (T and V, the other steps' working set,
    and under --time-limit its worker's copy), so the run keeps to the limit."""
    per_csr_byte, fixed = check_footprint(time_limited)
    return max(0, memory_limit - (per_csr_byte - 1) * data_bytes - fixed)


def size_text(n_bytes: float) -> str:
    """Bytes in a unit that shows them: one decimal below 1,000, else whole ('15,493 GiB')."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= size:
            n = n_bytes / size
            return f"{n:,.0f} {unit}" if round(n, 1) >= 1000 else f"{n:.1f} {unit}"
    return f"{int(n_bytes):,} B"
