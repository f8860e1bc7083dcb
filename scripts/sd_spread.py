#!/usr/bin/env python3
"""Whether the spread of the scaled features' SDs, which orders the costs of rows with
madelon's counts (scripts/results/same_counts.md), orders the baseline's cost across the judged
corpus too: a pass over the values could then give the cost model a term no count has.

Usage:
    python scripts/sd_spread.py CORPUS RUNS.json [RUNS.json ...] [-o OUT.md] [--seed S]
        [--names NAME ...]

CORPUS: scripts/judge.py make's directory. RUNS: scripts/plan_bench.py's runs files
(scripts/results/plan_runs*.json), each one machine's run of the corpus. For each case in the
first RUNS, T is read, scaled (max |x| per feature) and split 3:1 as a check does it, and the
ratio of its features' SDs at the 90th and 10th percentiles (features of SD 0 left out) is set
beside the baseline stage's CPU seconds over its prediction at that run's pace (as plan.md
computes it). Printed and written (Markdown), with the rank correlation of the two over the
stages of MIN_SECONDS or more.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import plan_bench  # noqa: E402
from same_counts import publish  # noqa: E402

from kcheck.costs.pace import pace  # noqa: E402
from kcheck.io.data import read_libsvm  # noqa: E402
from kcheck.scaling.fitting import fit_scaler  # noqa: E402
from kcheck.split import stratified_split  # noqa: E402


def sd_spread(X: sp.spmatrix | np.ndarray) -> float:
    """The 90th over the 10th percentile of the features' SDs, after max |x| scaling (zeros
    counted as values, as LIBLINEAR sees them), features of SD 0 left out; 1.0 where fewer
    than two features vary. Dense and sparse ``X`` give the same number."""
    M = sp.csr_matrix(X, dtype=np.float64)
    M = fit_scaler(M, "maxabs").transform(M)
    mean = np.asarray(M.mean(axis=0)).ravel()
    square = np.asarray(M.multiply(M).mean(axis=0)).ravel()
    sd = np.sqrt(np.maximum(square - mean**2, 0.0))
    # Scaled values lie in [-1, 1]: an SD under 1e-6 is a constant feature's rounding.
    sd = sd[sd > 1e-6]
    if sd.size < 2:
        return 1.0
    q10, q90 = np.quantile(sd, [0.1, 0.9])
    return float(q90 / q10)


def baseline_ratio(run: dict[str, Any]) -> tuple[float, float] | None:
    """The baseline stage's CPU seconds over its prediction at the run's pace, and its CPU
    seconds (None where it has no prediction)."""
    machine = pace(run.get("probe"))
    for step in run.get("steps", []):
        if step["name"] == "linear":
            ratio = plan_bench._ratio(step, machine)
            return None if ratio is None else (ratio, float(step["cpu_seconds"]))
    return None


def ranks(values: list[float]) -> np.ndarray:
    """Ranks from 0, ties given their mean rank."""
    a = np.asarray(values, dtype=np.float64)
    order = np.argsort(a, kind="stable")
    r = np.empty(a.size)
    r[order] = np.arange(a.size)
    for v in np.unique(a):
        tied = a == v
        r[tied] = r[tied].mean()
    return r


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation (nan under three pairs)."""
    if len(x) < 3:
        return float("nan")
    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


def top_of_the_spread(
    rows: list[tuple[float, str, float, list[tuple[float, float] | None]]], names: list[str]
) -> list[str]:
    """For each run, its stage of MIN_SECONDS or more furthest over its prediction, and the
    ratios of every case whose spread is at least that case's: a term in the spread would
    raise their predictions as much."""
    out = []
    for i, run in enumerate(names):
        marked = [
            (r[i][0], spread, name)
            for spread, name, _, r in rows
            if r[i] is not None and r[i][1] >= plan_bench.MIN_SECONDS
        ]
        if not marked:
            continue
        ratio, spread, name = max(marked)
        others = [
            f"{n} {r[i][0]:.2f} (spread {s:.1f})"
            for s, n, _, r in rows
            if s >= spread and n != name and r[i] is not None
        ]
        out.append(
            f"- {run}: the stage furthest over its prediction is {name}'s, {ratio:.2f} at a "
            f"spread of {spread:.1f}; the other cases of that spread or more ran at "
            + ("; ".join(others) if others else "none")
            + "."
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("-o", "--output", help="write the Markdown table here")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--names", nargs="+", help="what each RUNS was (its host, its version), in their order"
    )
    args = ap.parse_args(argv)
    names = args.names or [p.name for p in args.runs]
    if len(names) != len(args.runs):
        print("sd_spread: --names needs one name for each RUNS", file=sys.stderr)
        return 2

    runs = [json.loads(p.read_text()) for p in args.runs]
    rows = []
    for name in sorted(runs[0]):
        path = args.corpus / name
        if not path.exists():
            print(f"sd_spread: {path}: not in the corpus", file=sys.stderr)
            return 2
        y, X = read_libsvm(path)
        tr, _ = stratified_split(y, seed=args.seed)
        T = sp.csr_matrix(X)[tr]
        density = T.nnz / max(T.shape[0] * T.shape[1], 1)
        rows.append((sd_spread(T), name, density, [baseline_ratio(r.get(name, {})) for r in runs]))
        print(f"{name:30s} spread {rows[-1][0]:7.1f}", file=sys.stderr)
    rows.sort()

    head = " | ".join(f"baseline cpu / predicted, {name}" for name in names)
    lines = [
        "# The scaled features' SD spread against the baseline's cost, over the judged corpus",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; {time.strftime('%Y-%m-%d')}; `python "
        f"scripts/sd_spread.py CORPUS {' '.join(str(p) for p in args.runs)} --seed {args.seed}`"
        + (f" with --names {' '.join(repr(n) for n in names)}." if args.names else "."),
        "",
        "`spread`: the 90th over the 10th percentile of T's features' SDs after max |x| "
        "scaling. The ratios are plan.md's (CPU seconds over the prediction at the run's pace); "
        f"`*`: a stage of {plan_bench.MIN_SECONDS:g} s or more.",
        "",
        f"| case | T's density | spread | {head} |",
        "|---|---|---|" + "---|" * len(args.runs),
    ]
    for spread, name, density, ratios in rows:
        shown = [
            "-" if r is None else f"{r[0]:.2f}{'*' if r[1] >= plan_bench.MIN_SECONDS else ''}"
            for r in ratios
        ]
        lines.append(f"| {name} | {density:.2f} | {spread:.1f} | {' | '.join(shown)} |")
    lines.append("")
    for i, run in enumerate(names):
        for label, least in (("every stage", 0.0), ("the stages marked *", plan_bench.MIN_SECONDS)):
            pairs = [(s, r[i][0]) for s, _, _, r in rows if r[i] is not None and r[i][1] >= least]
            rho = spearman([a for a, _ in pairs], [b for _, b in pairs])
            lines.append(
                f"- {run}, {label}: Spearman's rank correlation of spread and ratio "
                f"{rho:+.2f} over {len(pairs)} cases."
            )
    lines += ["", *top_of_the_spread(rows, names)]
    return publish(lines, args.output)


if __name__ == "__main__":
    raise SystemExit(main())
