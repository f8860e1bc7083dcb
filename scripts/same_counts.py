#!/usr/bin/env python3
"""How far a prediction from counts alone can follow the baseline's C search: one data set's
T against rows with exactly its counts (rows, width, stored values, classes), which kcheck's
cost model (kcheck.costs.predicted) must predict the same.

Usage:
    python scripts/same_counts.py FILE [-o OUT.md] [--seed S]

FILE is read and scaled as kcheck does (max |x| per feature) and split 3:1 as a check splits
it; on T, in this process, the baseline's C search and training run
(kcheck.tuning.linear_c.fit_linear,
LIBLINEAR -s 2 -B 1) on:

- T as it is;
- T centred (each feature's mean taken out), then scaled again: the same counts where every
  value is stored (dense data), without the features' offsets;
- T with each feature's values shuffled among the rows: every feature's own distribution
  (offset and spread) kept, the features' joint structure gone;
- Gaussian rows with labels from a noisy linear rule (the same class shares), at offsets
  0, 3, 10 and 30 before scaling;
- Gaussian rows with each of T's features' mean and standard deviation, with T's own labels
  (which have nothing to do with these rows) and with a noisy linear rule's;
- Gaussian rows whose features' mean / SD is drawn log-uniform from a range, with a linear
  rule's labels: whether the spread of the scaled features' SDs (shown as the ratio of their
  90th to 10th percentile) orders the costs.

Printed and written (Markdown): the CPU seconds of each, the baseline's predicted seconds at
this machine's pace (kcheck.costs.pace, before and after) and their ratio. Where the ratios of rows
with the same counts span more than 4x, no prediction from counts keeps all of them within
[0.5, 2].
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kcheck.checkers.base import Counts  # noqa: E402
from kcheck.costs import pace as probe
from kcheck.costs import predicted as costs
from kcheck.io.atomic import write_text  # noqa: E402
from kcheck.io.data import read_libsvm  # noqa: E402
from kcheck.split import stratified_split  # noqa: E402
from kcheck.tuning import linear_c as tuning


def max_abs_scaled(X: np.ndarray) -> np.ndarray:
    """Each feature divided by its max |x| (kcheck's default scaling); a zero column stays."""
    top = np.abs(X).max(axis=0)
    return X / np.where(top > 0, top, 1.0)


def variants(
    X: np.ndarray, y: np.ndarray, seed: int
) -> list[tuple[str, Callable[[], tuple[np.ndarray, np.ndarray]]]]:
    """The rows to time, each built only when it runs (one dense copy at a time)."""
    rng = np.random.default_rng(seed)
    n, d = X.shape

    def as_is() -> tuple[np.ndarray, np.ndarray]:
        return X, y

    def centred() -> tuple[np.ndarray, np.ndarray]:
        return max_abs_scaled(X - X.mean(axis=0)), y

    def shuffled() -> tuple[np.ndarray, np.ndarray]:
        out = X.copy()
        for j in range(d):
            out[:, j] = out[rng.permutation(n), j]
        return out, y

    def linear_rule(G: np.ndarray) -> np.ndarray:
        """Labels from a noisy linear rule on G, in T's class shares (top scores first)."""
        w = np.zeros(d)
        w[: min(5, d)] = 1.0
        order = np.argsort(-(G @ w + 3.0 * rng.standard_normal(n)))
        out = np.empty(n, dtype=y.dtype)
        at = 0
        for c in np.unique(y):
            k = int((y == c).sum())
            out[order[at : at + k]] = c
            at += k
        return out

    def gaussian(offset: float) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
        def make() -> tuple[np.ndarray, np.ndarray]:
            G = rng.standard_normal((n, d))
            return max_abs_scaled(G + offset), linear_rule(G)

        return make

    def moments(own_labels: bool) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
        def make() -> tuple[np.ndarray, np.ndarray]:
            G = rng.standard_normal((n, d))
            rows = max_abs_scaled(X.mean(axis=0) + X.std(axis=0) * G)
            return rows, y if own_labels else linear_rule(G)

        return make

    def offset_range(lo: float, hi: float) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
        def make() -> tuple[np.ndarray, np.ndarray]:
            G = rng.standard_normal((n, d))
            offsets = np.exp(rng.uniform(np.log(lo), np.log(hi), d))
            return max_abs_scaled(G + offsets), linear_rule(G)

        return make

    rows: list[tuple[str, Callable[[], tuple[np.ndarray, np.ndarray]]]] = [
        ("T as it is", as_is),
        ("T centred", centred),
        ("T, each feature shuffled", shuffled),
    ]
    rows += [(f"Gaussian, offset {o:g}", gaussian(o)) for o in (0, 3, 10, 30)]
    rows += [
        ("Gaussian, T's feature means and SDs, T's labels", moments(True)),
        ("Gaussian, T's feature means and SDs, a linear rule's labels", moments(False)),
    ]
    for lo, hi in ((1, 100), (1, 1000), (10, 1000), (100, 1000)):
        label = f"Gaussian, each feature's mean / SD log-uniform in [{lo:g}, {hi:g}]"
        rows.append((label, offset_range(lo, hi)))
    return rows


def publish(lines: list[str], output: str | None) -> int:
    """Print the report's ``lines`` and, with ``output``, write them there atomically."""
    text = "\n".join(lines) + "\n"
    print(text)
    if output:
        write_text(output, text)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("-o", "--output", help="write the Markdown table here")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    y_all, X_all = read_libsvm(args.file)
    tr, _ = stratified_split(y_all, seed=args.seed)
    X = max_abs_scaled(np.asarray(X_all.toarray(), dtype=np.float64))[tr]
    y = y_all[tr]
    n, d = X.shape
    stored = int(np.count_nonzero(X))
    if stored < n * d:
        print(
            f"same_counts: {args.file}: T stores {stored:,} of its {n * d:,} values; centred and "
            "Gaussian rows store every value, so they would not share its counts (dense data only)",
            file=sys.stderr,
        )
        return 2
    pace_before = probe.pace(probe.probe_seconds())

    results = []
    for label, make in variants(X, y, args.seed):
        Xv, yv = make()
        csr = sp.csr_matrix(Xv)
        counts = Counts(
            rows=n,
            val_rows=0,
            nnz=int(csr.nnz),
            val_nnz=0,
            n_classes=int(np.unique(yv).size),
            features=d,
        )
        predicted = costs.predicted_seconds("linear", counts, n, None)
        assert predicted is not None
        c0 = time.process_time()
        model, _ = tuning.fit_linear(csr, yv, seed=args.seed)
        cpu = time.process_time() - c0
        del model
        sd = Xv.std(axis=0)
        q10, q90 = np.quantile(sd, [0.1, 0.9])
        results.append((label, csr.nnz, predicted, cpu, float(q90 / max(q10, 1e-300))))
        print(f"{label:60s} nnz {csr.nnz:9,d} predicted {predicted:6.2f} ref s  cpu {cpu:6.2f}")
        del Xv, csr

    pace_after = probe.pace(probe.probe_seconds())
    pace = (pace_before + pace_after) / 2
    ratios = [cpu / (pred * pace) for _, _, pred, cpu, _ in results]
    spread = max(ratios) / min(ratios)
    load = os.getloadavg()[0]
    lines = [
        "# The baseline's C search on rows with the same counts",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; {time.strftime('%Y-%m-%d')}; "
        f"`python scripts/same_counts.py {Path(args.file).name} --seed {args.seed}`; "
        f"load average at the end {load:.2f}; pace {pace_before:.2f} before, "
        f"{pace_after:.2f} after (their mean scales the predictions).",
        "",
        f"T: {n:,} rows x {d:,} features, {len(np.unique(y))} classes. Every row below has "
        "these counts, so kcheck's cost model predicts each the same.",
        "",
        "| rows | stored values | scaled SDs, 90th / 10th percentile | predicted (reference s) "
        "| CPU s | CPU / (predicted x pace) |",
        "|---|---|---|---|---|---|",
    ]
    for (label, nnz, pred, cpu, sds), ratio in zip(results, ratios, strict=True):
        lines.append(f"| {label} | {nnz:,} | {sds:.1f} | {pred:.2f} | {cpu:.2f} | {ratio:.2f} |")
    lines += [
        "",
        f"Spread of the ratio over rows with the same counts: {spread:.1f}x "
        f"({min(ratios):.2f}-{max(ratios):.2f}); a prediction from counts keeps all of them "
        f"within [0.5, 2] only where it is at most 4x.",
    ]
    return publish(lines, args.output)


if __name__ == "__main__":
    raise SystemExit(main())
