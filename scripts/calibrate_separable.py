#!/usr/bin/env python3
"""Degree-2's cost per expanded value as the width outgrows the rows: kcheck.costs.budget's
separable
regime (SEPARABLE_FROM, SEPARABLE_SLOPE).

Usage:
    python scripts/calibrate_separable.py [ROWS,WORDS,PER_ROW ...]

Text-like rows (Zipf-popular words, about PER_ROW a row, labels from a noisy linear rule) of
WORDS features are expanded as degree-2 expands them, and LIBLINEAR's C search and training
(kcheck.tuning.linear_c.fit_linear) run on the expansion, in this process. Printed: the expanded
values, the width, the CPU seconds, kcheck.costs.budget's counted seconds (per value only) and their
ratio, beside kcheck.costs.budget.separable_factor for the same width and rows. Defaults: 1,700 rows
(the subsample degree-2 ran on sparse text of 7,770 rows) of 500, 2,000 and 8,000 words.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kcheck.checkers.degree2 import expand, expanded_dimension  # noqa: E402
from kcheck.costs import budget
from kcheck.costs import predicted as costs
from kcheck.tuning import linear_c as tuning


def text(
    rng: np.random.Generator, n: int, d: int, per_row: int
) -> tuple[sp.csr_matrix, np.ndarray]:
    pop = 1.0 / np.arange(1, d + 1) ** 0.8
    pop /= pop.sum()
    k = rng.poisson(per_row, n) + 1
    rows = np.repeat(np.arange(n), k)
    cols = rng.choice(d, k.sum(), p=pop)
    vals = np.log1p(rng.exponential(1.0, k.sum()) + 1.0)
    X = sp.csr_matrix((vals, (rows, cols)), shape=(n, d))
    X.sum_duplicates()
    X.data /= X.data.max()
    w = rng.standard_normal(d) * (rng.random(d) < 0.3)
    f = X @ w
    y = np.where(f + 0.3 * f.std() * rng.standard_normal(n) > np.median(f), 1.0, -1.0)
    return X, y


def main() -> int:
    shapes = sys.argv[1:] or ["1700,500,44", "1700,2000,44", "1700,8000,44"]
    rng = np.random.default_rng(0)
    print("| rows | words | expanded values | width | CPU s | counted s | ratio | factor |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in shapes:
        n, d, per = (int(a) for a in shape.split(","))
        X, y = text(rng, n, d, per)
        P = expand(X)
        t = time.process_time()
        tuning.fit_linear(P, y, seed=0)
        cpu = time.process_time() - t
        counted = budget.degree2_seconds(int(P.nnz), 2, n)
        dim = expanded_dimension(d)
        print(
            f"| {n:,} | {d:,} | {P.nnz:,} | {dim:,} | {cpu:.2f} | {counted:.2f} | "
            f"{cpu / counted:.2f} | {costs.separable_factor(dim, n):.2f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
