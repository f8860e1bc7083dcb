#!/usr/bin/env python3
"""Fit scripts/stage_predictions.py's per-stage factors to the CPU seconds that
scripts/plan_bench.py measured.

Usage:
    python scripts/calibrate_plan.py CORPUS --runs scripts/results/plan_runs.json
                                     [-o scripts/results/calibrate_plan.md]

For every case of the runs (made by ``scripts/plan_bench.py CORPUS``), the data are read,
scaled and split as a check does, and each stage's shape
(:func:`scripts/stage_predictions.py.shape_seconds`,
from counts and the rows the plan gave it) is set against the CPU seconds it took. A stage's
factor is the median of CPU / shape over its stages of at least MIN_CPU seconds (shorter ones
are mostly fixed costs). A run that carries the probe (``plan.probe_cpu_seconds``) has its
CPU seconds divided by that day's pace (kcheck.costs.pace), so the factors stay in seconds of the
reference machine whatever day the runs were made. The table is written to the output; the
factors go into
``scripts/stage_predictions.py.FACTORS`` by hand, rounded, so that a re-run shows what moved.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import stage_predictions as costs  # noqa: E402

from kcheck.checkers.base import Counts, Dataset  # noqa: E402
from kcheck.costs.pace import pace  # noqa: E402
from kcheck.memory import default_memory_limit  # noqa: E402
from kcheck.plan import done_share  # noqa: E402
from kcheck.prepare import prepare  # noqa: E402
from kcheck.split import stratified_split  # noqa: E402

MIN_CPU = 0.3


def counts_of(path: Path) -> Counts:
    data = prepare(str(path), scaling="maxabs", memory_limit=default_memory_limit())
    tr, va = stratified_split(data.y, seed=0)
    return Counts.of(Dataset(data.X[tr], data.y[tr]), Dataset(data.X[va], data.y[va]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--runs", type=Path, default=ROOT / "scripts/results/plan_runs.json")
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "scripts/results/calibrate_plan.md")
    args = ap.parse_args()
    runs: dict[str, dict[str, Any]] = json.loads(args.runs.read_text())
    ratios: dict[str, list[tuple[float, str]]] = {}
    rows = []
    for name, r in runs.items():
        if "steps" not in r:
            continue
        counts = counts_of(args.corpus / name)
        machine = pace(r.get("probe"))
        for s in r["steps"]:
            cpu = s.get("cpu_seconds")
            if not s.get("runs") or not s.get("rows") or cpu is None:
                continue
            cpu /= machine  # in reference seconds
            shape = costs.shape_seconds(s["name"], counts, s["rows"], s["estimated_seconds"])
            if not shape:
                continue
            # Exact mode's shape counts every repeat; where it stopped early, those it ran.
            # (The RBF SVM's and MultiLinear's revised predictions are their own, fitted
            # apart: the factors here scale the plan's prediction before a stage runs.)
            done = s.get("done") or {}
            if (done.get("block") or {}).get("repeats"):
                shape *= done_share(**done)[0]
            rows.append(
                f"| {name} | {s['name']} | {s['rows']:,} | {shape:.3f} | {cpu:.2f} | "
                f"{cpu / shape:.2f} |"
            )
            if cpu >= MIN_CPU:
                ratios.setdefault(s["name"], []).append((cpu / shape, name))
    loads = [r["load"] for r in runs.values() if "load" in r]
    out = [
        "# Per-stage factors of the predicted seconds (`kcheck/costs/predicted.py`)",
        "",
        f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores; runs from `{args.runs.name}` "
        f"(load average at the cases' starts {min(loads):.2f}-{max(loads):.2f}); "
        f"`python scripts/calibrate_plan.py {args.corpus}`. Factor: the median of CPU / shape "
        f"over the stages of at least {MIN_CPU} CPU seconds. "
        "The factor now in scripts/stage_predictions.py is, of "
        "the factors that leave the fewest stages of 0.5 s or more outside [0.5, 2] of CPU over "
        "predicted (scripts/plan_bench.py's flag), the one nearest that median: a spread-out "
        "stage's median alone left its small and its large cases on either side of the band.",
        "",
        "| stage | stages | CPU / shape: min, median, max | factor now |",
        "|---|---|---|---|",
    ]
    for stage, rs in sorted(ratios.items()):
        vals = sorted(v for v, _ in rs)
        out.append(
            f"| {stage} | {len(vals)} | {vals[0]:.2f} ({min(rs)[1]}), {median(vals):.2f}, "
            f"{vals[-1]:.2f} ({max(rs)[1]}) | {costs.FACTORS.get(stage, 1.0):g} |"
        )
    out += [
        "",
        "| case | stage | rows | shape s | CPU s (over the pace) | CPU / shape |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    args.output.write_text("\n".join(out))
    print("\n".join(out[: 12 + len(ratios)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
