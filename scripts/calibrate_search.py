#!/usr/bin/env python3
"""What exact mode's (C, gamma) search costs, against what kcheck counts for it.

Usage:
    python scripts/calibrate_search.py CORPUS [NAME ...] [-o scripts/results/calibrate_search.md]

For each case of a judged corpus (``scripts/judge.py make``; by default every case where
exact mode runs), run a check in this process, one job, as ``kcheck check FILE`` would, and
record around exact mode's search on its tuning rows: its CPU seconds, the grid points it
scored, LIBSVM's iterations and support vectors summed over every fold it trained (as the
search records them, kcheck.tuning.rbf_sample.Search), and kcheck.costs.budget's count of it
(``rbf_tuning_seconds``: kernel entries per grid point and fold, no iterations). Then fit,
with non-negative least squares, CPU seconds over this machine's pace (kcheck.costs.pace) as

    a x (support vectors x fold rows) + b x (iterations x fold rows)

and report both fits per case. LIBSVM computes a kernel column once per support vector (the
cache holds a fold's columns) and each iteration updates the gradient of every active row:
the count's per-entry term sees neither. Nothing here changes what kcheck computes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import nnls

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kcheck import __version__  # noqa: E402
from kcheck.checkers import exact  # noqa: E402
from kcheck.config import CheckConfig  # noqa: E402
from kcheck.costs import budget  # noqa: E402
from kcheck.costs import pace as probe  # noqa: E402
from kcheck.pipeline import run  # noqa: E402

FOLDS = 5


class _Recorder:
    """Hooks exact mode's search: what the current case's search did, from the support
    vectors and iterations it recorded at each point it scored (kcheck's own counts)."""

    def __init__(self) -> None:
        self.case: dict[str, Any] = {}
        search = exact._search_sample

        def timed(*args: Any, **kwargs: Any) -> Any:
            cpu = time.process_time()
            found, rows = search(*args, **kwargs)
            self.case = {
                "cpu": time.process_time() - cpu,
                "tune_rows": rows,
                "points": len(found.scores),
                "gammas": len({g for _, g in found.scores}),
                "iterations": sum(found.iterations.values()),
                "support_vectors": sum(found.support_vectors.values()),
            }
            return found, rows

        exact._search_sample = timed


def measure(corpus: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    recorder = _Recorder()
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        recorder.case = {}
        machine = probe.pace(probe.probe_seconds())
        result = run(CheckConfig(train=str(corpus / name), exact="auto", jobs=1)).json
        if not recorder.case:
            continue  # exact mode did not run
        case = dict(recorder.case, pace=machine)
        classes = len(result["data"]["classes"])
        case["counted"] = budget.rbf_tuning_seconds(
            tune_rows=case["tune_rows"],
            n_classes=classes,
            grid_points=case["points"],
            gammas=case["gammas"],
            folds=FOLDS,
        )
        out[name] = case
        print(f"{name}: {case['cpu']:.2f} s", file=sys.stderr, flush=True)
    return out


def report(cases: dict[str, dict[str, Any]], command: str) -> str:
    names = list(cases)
    y = np.array([cases[n]["cpu"] / cases[n]["pace"] for n in names])
    fold = np.array([cases[n]["tune_rows"] * (FOLDS - 1) / FOLDS for n in names])
    A = np.column_stack(
        [
            [cases[n]["support_vectors"] for n in names] * fold,
            [cases[n]["iterations"] for n in names] * fold,
        ]
    )
    (a, b), _ = nnls(A, y)
    fitted = A @ np.array([a, b])
    counted = np.array([cases[n]["counted"] for n in names])

    def spread(r: np.ndarray) -> str:
        return f"{r.min():.2f}-{r.max():.2f} (median {np.median(r):.2f})"

    paces = [cases[n]["pace"] for n in names]
    lines = [
        "# What exact mode's search costs",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; {date.today().isoformat()}; kcheck {__version__}; "
        f"`{command}`, one job, nothing else running. This machine's pace (kcheck.costs.pace, "
        f"before each case): {min(paces):.2f}-{max(paces):.2f}.",
        "",
        "`ref s`: the search's CPU seconds over the pace (reference seconds). `counted`: "
        "kcheck.costs.budget.rbf_tuning_seconds at the points it scored (kernel entries, no "
        "iterations). `fit`: a x support vectors x fold rows + b x iterations x fold rows, "
        f"summed over every fold trained, with a = {a:.3g} and b = {b:.3g} s (non-negative "
        "least squares over these cases).",
        "",
        f"ref s / counted: {spread(y / counted)}; ref s / fit: {spread(y / fitted)}.",
        "",
        "| case | tuning rows | points | iterations | support vectors | ref s | counted | "
        "ref / counted | fit | ref / fit |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, n in enumerate(names):
        c = cases[n]
        lines.append(
            f"| {n} | {c['tune_rows']:,} | {c['points']} | {c['iterations']:,} | "
            f"{c['support_vectors']:,} | {y[i]:.2f} | {counted[i]:.2f} | "
            f"{y[i] / counted[i]:.2f} | {fitted[i]:.2f} | {y[i] / fitted[i]:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("names", nargs="*", help="cases (default: all of the corpus's cases)")
    ap.add_argument(
        "-o", "--output", type=Path, default=ROOT / "scripts/results/calibrate_search.md"
    )
    args = ap.parse_args()
    names = args.names or [c["name"] for c in json.loads((args.corpus / "cases.json").read_text())]
    cases = measure(args.corpus, names)
    if not cases:
        print("exact mode ran on none of these cases", file=sys.stderr)
        return 1
    shown = " ".join(args.names) if args.names else ""
    command = f"python scripts/calibrate_search.py CORPUS {shown}".rstrip()
    args.output.write_text(report(cases, command))
    (args.output.with_suffix(".json")).write_text(json.dumps(cases, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
