#!/usr/bin/env python3
"""Measure the rbfsvm checker's cost against its counted estimate (kcheck/budget.py).

Usage:
    python scripts/calibrate_rbfsvm.py FILE [FILE ...] [-o scripts/results/calibrate_rbfsvm.md]

For each LIBSVM file (T of at most about 10,000 rows, where the checker's cost fits): scale
by max |x|, split 3:1 with seed 0, and run the checker's search and training with the most
tuning rows (2,000). Reported: the wall time of the whole checker next to
:func:`kcheck.checkers.rbfsvm.estimated_seconds`, and of its trainings (one per gamma on two
thirds of T, scored on the rest, one more at the larger C, and the final one on T, scored on
V: the whole time less that of the search run again alone) per unit of counted work (rows
trained x rows trained and predicted x stored values a row), the figure behind
``budget.RBF_SECONDS_PER_WORK``.
Nothing here changes what kcheck computes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kcheck import budget, engines  # noqa: E402
from kcheck.checkers import exact, linear, rbfsvm  # noqa: E402
from kcheck.checkers.base import Context, Dataset  # noqa: E402
from kcheck.data import read_libsvm  # noqa: E402
from kcheck.scaling import fit_scaler  # noqa: E402
from kcheck.split import stratified_split, stratified_subsample  # noqa: E402


def measure(path: Path) -> str:
    y, raw = read_libsvm(str(path))
    X = fit_scaler(raw, method="maxabs").transform(raw)
    tr, va = stratified_split(y, seed=0)
    T, V = Dataset(X[tr], y[tr]), Dataset(X[va], y[va])
    k = int(np.unique(T.y).size)
    base = linear.run(T, V, linear.LinearOptions(seed=0))
    ctx = Context(seed=0, jobs=1, epsilon=0.02, memory_limit=8 << 30, deadline=None, baseline=base)
    tune = min(2_000, T.rows)
    estimate = rbfsvm.estimated_seconds(T, V, k, tune)
    t0 = time.perf_counter()
    r = rbfsvm.run(T, V, exact.ExactOptions(seed=0), tune, ctx)
    whole = time.perf_counter() - t0
    # The search alone, on the same sample, to leave the trainings' share of the time.
    sample = np.sort(stratified_subsample(T.y, tune, seed=0)) if T.rows > tune else None
    Xs, ys = (T.X, T.y) if sample is None else (T.X[sample], T.y[sample])
    t0 = time.perf_counter()
    D = engines.squared_distances(Xs)
    exact.search_grid(
        D, ys, exact.median_sq_distance(D), exact.ExactOptions(seed=0), lambda d: None, lambda: None
    )
    search = time.perf_counter() - t0
    fits = max(whole - search, 0.0)
    fit_estimate = rbfsvm.fit_seconds(T, V, k)
    per_work = fits / fit_estimate * budget.RBF_SECONDS_PER_WORK
    return (
        f"| {path.name} | {T.rows:,} x {X.shape[1]:,} ({k}) | {tune:,} | "
        f"2^{r.info['log2_C']:g} | {r.info['support_vectors']:,} | {estimate:.2f} | {whole:.2f} | "
        f"{whole / estimate:.2f} | {fit_estimate:.2f} | {fits:.2f} | {per_work * 1e9:.2f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("-o", "--output", type=Path, default=None)
    a = ap.parse_args()
    load = os.getloadavg()[0]
    lines = [
        "# rbfsvm: counted against measured seconds",
        "",
        f"Run with `python scripts/calibrate_rbfsvm.py FILES`; load average {load:.1f} at the "
        f"start; budget.RBF_SECONDS_PER_WORK = {budget.RBF_SECONDS_PER_WORK * 1e9:g} ns.",
        "",
        "| set | T (classes) | tune rows | C | SVs | counted s | measured s | ratio | "
        "fit counted s | fit measured s | fit ns / work |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in a.files:
        lines.append(measure(path))
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if a.output is not None:
        a.output.write_text(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
