"""How much memory kcheck may use, and the checks that keep it from asking for more."""

from __future__ import annotations

import os

from kcheck.errors import KcheckError

#: Width-sized float64 arrays a check keeps at once (feature ranges, weights, work vectors).
WIDTH_ARRAYS = 4


def default_memory_limit() -> int:
    """Half of the memory available now (MemAvailable), as DESIGN.md fixes."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return 4 * 2**30


def check_width(source: str, n_features: int, memory_limit: int | None = None) -> None:
    """Refuse a width whose per-feature arrays alone would not fit: one stray index of 2^31
    would otherwise make every per-feature array 16 GiB."""
    limit = memory_limit or default_memory_limit()
    need = WIDTH_ARRAYS * 8 * n_features
    if need > limit:
        raise KcheckError(
            f"{source}: the largest feature index is {n_features}, so per-feature arrays "
            f"would need {need / 2**30:.1f} GiB, over the memory limit of "
            f"{limit / 2**30:.1f} GiB (a stray huge index?)"
        )
