#!/usr/bin/env python3
"""Write a webspam-like LIBSVM file of any size straight to disk, with a nonlinear label rule.

Usage:
    python scripts/bigfile.py OUT --gib 30 [--seed 0]

Rows have 254 features at about 33% density, like webspam's trigram set. Each row is two
halves drawn (seeded) from two pools of 16,384 preformatted halves (features 1-127 and
128-254), so the file is written at disk speed rather than number-formatting speed and
repeats a row only by chance (16,384^2 = 2.7e8 combinations). The label is an XOR of the two
halves' sums of values: +1 when both are above their median or both below, else -1. No linear
model does better than chance on it (the classes are symmetric about the medians), while the
product of the sums is a degree-2 term and the four quadrants are four clusters: the right
verdict is "kernel". (An XOR of two single features among 252 noisy ones was tried first: the
check said linear, and rightly so for the checkers, since neither k-means nor a budgeted
degree-2 expansion sees two features among 254.)
Nothing here is ever committed; delete the file when done.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

POOL = 16_384
HALF = 127
DENSITY = 0.33
ROWS_PER_BLOCK = 20_000


def halves(rng: np.random.Generator, offset: int) -> tuple[list[bytes], np.ndarray]:
    """POOL preformatted halves, and whether each one's sum of values is above the median."""
    out: list[bytes] = []
    sums = np.empty(POOL)
    for i in range(POOL):
        cols = np.flatnonzero(rng.random(HALF) < DENSITY) + 1
        vals = np.round(rng.random(cols.size), 4)
        sums[i] = vals.sum()
        text = "".join(
            f" {offset + c}:{v:.4f}" for c, v in zip(cols.tolist(), vals.tolist(), strict=True)
        )
        out.append(text.encode())
    return out, sums > np.median(sums)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--gib", type=float, required=True, help="size to write, in GiB")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    left, a = halves(rng, 0)
    right, b = halves(rng, HALF)
    target = int(args.gib * 2**30)
    written = rows = 0
    t0 = time.perf_counter()
    with open(args.out, "wb") as f:
        while written < target:
            i = rng.integers(0, POOL, ROWS_PER_BLOCK)
            j = rng.integers(0, POOL, ROWS_PER_BLOCK)
            same = a[i] == b[j]
            labels = np.where(same, b"+1", b"-1")
            parts: list[bytes] = []
            for lab, x, y in zip(labels.tolist(), i.tolist(), j.tolist(), strict=True):
                parts += (lab, left[x], right[y], b"\n")
            block = b"".join(parts)
            f.write(block)
            written += len(block)
            rows += ROWS_PER_BLOCK
    seconds = time.perf_counter() - t0
    print(
        f"{args.out}: {rows:,} rows, {written / 2**30:.2f} GiB in {seconds:.0f}s "
        f"({written / 2**20 / seconds:.0f} MB/s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
