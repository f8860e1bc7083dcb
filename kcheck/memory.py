"""How much memory kcheck may use, and the checks that keep it from asking for more."""

from __future__ import annotations

import os

from kcheck.errors import DataFormatError, KcheckError

#: Bytes a check holds per column of the data's width, measured: the scaler's min, max and
#: divisor and its kept mask, the reader's and the scaler's column scratch, and the column
#: arrays of the split and the checkers (58 bytes measured on a file with one index of 5e7).
BYTES_PER_COLUMN = 64
#: A line of the input costs about this many times its length while the reader parses it
#: (the line, numpy views of its bytes and the per-token arrays of the fast parser).
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
    """Half of physical RAM (or of the cgroup limit): the same on every run of one machine,
    so that what a check subsamples or skips never depends on what else runs right then."""
    return _physical_memory() // 2


def max_line_bytes(memory_limit: int | None = None) -> int:
    """The longest input line accepted: one that the reader can parse within the limit.

    A stream without a newline (``/dev/zero``) would otherwise be buffered until memory ran
    out.
    """
    limit = memory_limit or default_memory_limit()
    return max(MIN_LINE_CAP, limit // LINE_COST)


def check_width(source: str, n_features: int, memory_limit: int | None = None) -> None:
    """Refuse a width whose per-feature arrays alone would not fit: one stray index of 2^31
    would otherwise make every per-feature array 16 GiB."""
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


#: What a whole check holds at its peak, per byte of the data's CSR arrays, measured with
#: scripts/bench_memory.py (webspam-like: 2.44), plus FIXED_BYTES: the design's target.
CHECK_BYTES_PER_CSR_BYTE = 3
FIXED_BYTES = 64 * 2**20
#: Under --time-limit each method trains in a worker process that can be stopped
#: (kcheck.parallel.workers.stoppable), beside this one: the process tree then also holds the
#: worker's copy of T and V and LIBLINEAR's nodes of them, and a second interpreter beside the
#: fork server's. A 45 MB --max-rows auto sample under --memory-limit 200M held 5.0x its CSR
#: plus 116 MB over the tree (342 MB: this process 169, the baseline's worker 145, the fork
#: server 21, the resource tracker 7), where a check is sized for 3x plus FIXED_BYTES.
TIME_LIMITED_BYTES_PER_CSR_BYTE = CHECK_BYTES_PER_CSR_BYTE + 2
TIME_LIMITED_FIXED_BYTES = 2 * FIXED_BYTES


def csr_bytes(X: object) -> int:
    """Bytes of a CSR matrix's three arrays."""
    return int(sum(getattr(X, a).nbytes for a in ("data", "indices", "indptr")))


#: ... and what ``kcheck verify`` holds: the rows, their scaled copy, LIBSVM's copy of them
#: (16 bytes a value against the CSR's 12) and its solver's per-row arrays, before the kernel
#: cache, which takes what is left (kcheck.tuning.rbf_grid.search_memory).
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
    """The largest CSR that :func:`check_fits` accepts under ``memory_limit``: the reader stops
    there, so that a file too large for the limit is refused before it is read whole."""
    return (memory_limit - fixed_bytes) // per_csr_byte


def check_footprint(time_limited: bool) -> tuple[int, int]:
    """A check's bytes per byte of the data's CSR and its fixed bytes: under --time-limit
    with a worker process's share (TIME_LIMITED_BYTES_PER_CSR_BYTE)."""
    if time_limited:
        return TIME_LIMITED_BYTES_PER_CSR_BYTE, TIME_LIMITED_FIXED_BYTES
    return CHECK_BYTES_PER_CSR_BYTE, FIXED_BYTES


def checker_budget(memory_limit: int, data_bytes: int, time_limited: bool = False) -> int:
    """What a checker may allocate on top of the data in memory (T and V, about the CSR
    bytes, and the working set of the other steps; under --time-limit, the worker process it
    runs in and its copy of them too), so that the run keeps to the limit."""
    per_csr_byte, fixed = check_footprint(time_limited)
    return max(0, memory_limit - (per_csr_byte - 1) * data_bytes - fixed)


def size_text(n_bytes: float) -> str:
    """A byte count in a unit that shows it (1M is not '0.0 GiB'): one decimal below 1,000 of
    the unit, whole units with thousands separators above ('15,493 GiB', not '15493.4 GiB')."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= size:
            n = n_bytes / size
            return f"{n:,.0f} {unit}" if round(n, 1) >= 1000 else f"{n:.1f} {unit}"
    return f"{int(n_bytes):,} B"
