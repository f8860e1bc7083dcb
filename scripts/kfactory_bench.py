#!/usr/bin/env python3
"""Kernel Factory beside MultiLinear and the RBF SVM checker at the same allowance, over a corpus.

Usage:
    python scripts/kfactory_bench.py CORPUS [--seeds 0 1 ...] [--only NAME ...]
        [--skip NAME ...] [--reference scripts/results/judge_reference.json]
        [--runs scripts/results/kfactory_runs.json] [-o scripts/results/kfactory.md]

CORPUS is a directory made by ``python scripts/judge.py make``. For each case and seed the
file is read and split as a check does, the linear baseline trains, and each of the three
checkers is sized by its own ``size`` (kcheck.plan's contract) within the same allowance, the
first measurement's budget (kcheck.costs.budget.first_seconds) and the check's memory, then run
through the library: the command refuses rbfsvm where exact mode runs, so a benchmark of the
command would not see it on small data. Reported per checker: its gap over its linear
reference on V with the 95% interval, the rows it saw, its counted seconds and the CPU seconds
it took, beside the reference's true gap (``judge.py reference``). Results are cached per case
and seed in ``--runs``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kcheck.checkers import linear, registry  # noqa: E402
from kcheck.checkers.base import Allowance, Context, Counts, Dataset, cpu_seconds, guarded  # noqa: E402
from kcheck.costs import budget  # noqa: E402
from kcheck.memory import checker_budget, default_memory_limit  # noqa: E402
from kcheck.prepare import prepare  # noqa: E402
from kcheck.split import stratified_split  # noqa: E402
from kcheck.verdict import paired_gap  # noqa: E402

METHODS = ("multilinear", "rbfsvm", "kfactory")
EPSILON = 0.02


def run_case(path: Path, seed: int) -> dict[str, Any]:
    """The three checkers on one case at one seed, each within the same allowance."""
    limit = default_memory_limit()
    data = prepare(str(path), scaling="maxabs", memory_limit=limit, seed=seed)
    train, val = stratified_split(data.y, seed=seed)
    T, V = Dataset(data.X[train], data.y[train]), Dataset(data.X[val], data.y[val])
    base = linear.run(T, V, linear.LinearOptions(seed=seed))
    counts = Counts.of(T, V)
    allowance = budget.first_seconds(nnz=counts.nnz, n_classes=counts.n_classes, rows=T.rows)
    memory = checker_budget(limit, data.data_bytes)
    ctx = Context(seed, 1, EPSILON, memory, None, baseline=base)
    out: dict[str, Any] = {"rows": T.rows, "allowance": allowance}
    for name in METHODS:
        spec = registry.CHECKERS[name]
        assert spec.size is not None
        sized = spec.size(counts, Allowance(memory, allowance))
        c0 = cpu_seconds()
        r = guarded(name, None, lambda: spec.run(T, V, ctx, sized))  # noqa: B023
        block: dict[str, Any] = {
            "status": r.status,
            "reason": r.reason,
            "counted": sized.counted_seconds or sized.estimated_seconds or 0.0,
            "cpu": cpu_seconds() - c0,
            "rows": r.info.get("rows", T.rows if r.status == "ok" else 0),
        }
        if r.correct is not None and base.correct is not None:
            ref = r.reference_correct if r.reference_correct is not None else base.correct
            g = paired_gap(r.correct, ref)
            block.update(gap=g.value, low=g.low, high=g.high)
        for key in ("kernel", "partitions"):
            if key in r.info:
                block[key] = r.info[key]
        out[name] = block
    return out


def _side(low: float, high: float) -> str:
    """Where an interval stands against epsilon: above, below or straddling it."""
    if low >= EPSILON:
        return "kernel"
    if high < EPSILON:
        return "linear"
    return "borderline"


def report(runs: dict[str, Any], reference: dict[str, Any], seeds: list[int], how: str) -> str:
    truth = reference.get("cases", {})
    out = [
        "# Kernel Factory beside MultiLinear and the RBF SVM checker",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; {time.strftime('%Y-%m-%d')}; {how}.",
        "",
        "Each checker sized by its own `size` within the same allowance (the first "
        "measurement's budget, kcheck.costs.budget.first_seconds) and run through the library "
        "with one job. `gap [low, high]`: points over its linear reference on V (the baseline, "
        "or a linear model on the same rows where it saw a sample), with the 95% interval; "
        "`side`: kernel where the interval is above epsilon (2 points), linear where below, "
        "borderline where it holds epsilon. `truth`: the reference's RBF gain "
        "(scripts/judge.py reference). `rows`: rows of T it trained on; `s`: counted / CPU "
        "seconds.",
        "",
    ]
    tally: dict[str, dict[str, int]] = {m: {} for m in METHODS}
    agree: dict[str, int] = dict.fromkeys(METHODS, 0)
    judged = 0
    cost: dict[str, list[float]] = {m: [] for m in METHODS}
    lines = [
        "| case | seed | truth | " + " | ".join(METHODS) + " |",
        "|---|---|---|" + "---|" * len(METHODS),
    ]
    for key, r in runs.items():
        name, seed = key.rsplit("|", 1)
        if int(seed) not in seeds:
            continue
        t = truth.get(name, {})
        lo, hi = (t.get("ci95") or [None, None])[:2]
        true_side = _side(lo, hi) if lo is not None else None
        cells = []
        if true_side in ("kernel", "linear"):
            judged += 1
        for m in METHODS:
            b = r.get(m, {})
            if "gap" not in b:
                cells.append(f"skipped ({(b.get('reason') or '')[:40]})")
                tally[m]["skipped"] = tally[m].get("skipped", 0) + 1
                continue
            side = _side(b["low"], b["high"])
            tally[m][side] = tally[m].get(side, 0) + 1
            if true_side in ("kernel", "linear") and side == true_side:
                agree[m] += 1
            cost[m].append(b["cpu"])
            extra = f", {b['kernel']} x{b['partitions']}" if "kernel" in b else ""
            cells.append(
                f"{100 * b['gap']:+.1f} [{100 * b['low']:+.1f}, {100 * b['high']:+.1f}] {side}; "
                f"{b['rows']:,} rows{extra}; {b['counted']:.1f}/{b['cpu']:.1f} s"
            )
        shown = f"{100 * t['gap']:+.1f} ({true_side})" if "gap" in t else "-"
        lines.append(f"| {name} | {seed} | {shown} | " + " | ".join(cells) + " |")
    out += [
        "| checker | kernel | borderline | linear | skipped | agrees with a clear truth "
        f"(of {judged}) | CPU s: median, max |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in METHODS:
        c = tally[m]
        cpu = cost[m]
        spread = f"{median(cpu):.2f}, {max(cpu):.1f}" if cpu else "-"
        out.append(
            f"| {m} | {c.get('kernel', 0)} | {c.get('borderline', 0)} | {c.get('linear', 0)} | "
            f"{c.get('skipped', 0)} | {agree[m]} | {spread} |"
        )
    return "\n".join([*out, "", *lines, ""])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--seeds", type=int, nargs="*", default=[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--skip", nargs="*", default=[])
    ap.add_argument("--reference", type=Path, default=ROOT / "scripts/results/judge_reference.json")
    ap.add_argument("--runs", type=Path, default=ROOT / "scripts/results/kfactory_runs.json")
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "scripts/results/kfactory.md")
    args = ap.parse_args()
    cases = json.loads((args.corpus / "cases.json").read_text())
    runs: dict[str, Any] = json.loads(args.runs.read_text()) if args.runs.exists() else {}
    for case in cases:
        name = case["name"]
        if (args.only and name not in args.only) or name in args.skip:
            continue
        for seed in args.seeds:
            key = f"{name}|{seed}"
            if key in runs:
                continue
            t0 = time.perf_counter()
            runs[key] = run_case(args.corpus / name, seed)
            print(f"{key}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
            args.runs.write_text(json.dumps(runs, indent=1) + "\n")
    reference = json.loads(args.reference.read_text()) if args.reference.exists() else {}
    how = (
        f"`python scripts/kfactory_bench.py {args.corpus} --seeds {' '.join(map(str, args.seeds))}`"
    )
    if args.skip:
        how += f" (skipped: {', '.join(args.skip)})"
    args.output.write_text(report(runs, reference, args.seeds, how))
    return 0


if __name__ == "__main__":
    sys.exit(main())
