#!/usr/bin/env python3
"""Whether kcheck's pace probe moves as its stages do: two runs of the same cases compared.

Usage:
    python scripts/pace_compare.py BEFORE.json AFTER.json [-o OUT.md]
    python scripts/pace_compare.py --probe-sequence N

BEFORE and AFTER are ``--runs`` files of ``scripts/plan_bench.py`` (one ``kcheck check -j 1``
per case, its plan's steps and the probe's CPU seconds), made on the same cases at two times
or on two machines. A stage's prediction is the same in both (counted from the same rows), so
what moved between them is the machine: each stage's CPU seconds moved by ``stage x``, and
kcheck's probe (kcheck.costs.pace: LIBLINEAR and LIBSVM on a generated set that stays in the CPU's
cache) by ``probe x``. Where they move alike, the warning line's comparison at the probe's pace
holds on either machine; where a stage moved more than the probe, the warning blames the cost
model for what the machine did. Stages are grouped by the rows they trained on, as the
per-value cost of LIBLINEAR grows with them (kcheck.costs.budget.rows_factor). Only stages that took
0.1 CPU seconds or more in both runs: shorter ones are mostly timer noise.

``--probe-sequence N``: N single runs of the probe's trainings one after another, each in CPU
milliseconds, and the fastest of each three in a row (what kcheck.costs.pace keeps): how much the
reading a check takes moves with the moment it is taken.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import median
from typing import Any

#: Stages shorter than this (CPU seconds, in either run) are left out.
MIN_SECONDS = 0.1
#: Row groups of the summary: (label, fewest rows, most rows).
GROUPS = (
    ("under 10,000 rows", 0, 9_999),
    ("10,000-29,999 rows", 10_000, 29_999),
    ("30,000 rows or more", 30_000, 10**12),
)


def pairs(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """One record per stage that ran in both runs of a case, on the same rows."""
    out = []
    for case in after:
        if case not in before or not before[case].get("probe") or not after[case].get("probe"):
            continue
        probe = after[case]["probe"] / before[case]["probe"]
        old = {s["name"]: s for s in before[case]["steps"]}
        for step in after[case]["steps"]:
            was = old.get(step["name"])
            if not was or not step.get("runs") or not was.get("runs"):
                continue
            cpu0, cpu1 = was.get("cpu_seconds"), step.get("cpu_seconds")
            if cpu0 is None or cpu1 is None or min(cpu0, cpu1) < MIN_SECONDS:
                continue
            if step.get("rows") != was.get("rows"):
                continue  # a different plan: not the same work
            out.append(
                {
                    "case": case,
                    "stage": step["name"],
                    "rows": int(step.get("rows") or 0),
                    "before": cpu0,
                    "after": cpu1,
                    "stage_x": cpu1 / cpu0,
                    "probe_x": probe,
                }
            )
    return out


def report(records: list[dict[str, Any]], before: Path, after: Path) -> str:
    lines = [
        "# The pace probe against the stages, between two runs",
        "",
        f"`python scripts/pace_compare.py {before.name} {after.name}`. `stage x`: the stage's "
        "CPU seconds in the second run over the first (the same rows, the same prediction); "
        "`probe x`: kcheck.costs.pace's CPU seconds, the same way; `stage / probe`: how much more "
        "the stage moved than the probe. 1 where the probe follows the stage. Stages of "
        f"{MIN_SECONDS} CPU s or more in both runs.",
        "",
        "| rows the stage trained on | stages | stage / probe: min, median, max |",
        "|---|---|---|",
    ]
    for label, lo, hi in GROUPS:
        group = [r["stage_x"] / r["probe_x"] for r in records if lo <= r["rows"] <= hi]
        if group:
            lines.append(
                f"| {label} | {len(group)} | "
                f"{min(group):.2f}, {median(group):.2f}, {max(group):.2f} |"
            )
    lines += [
        "",
        "| case | stage | rows | CPU s before | CPU s after | stage x | probe x | stage / probe |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(records, key=lambda r: (r["rows"], r["case"], r["stage"])):
        lines.append(
            f"| {r['case']} | {r['stage']} | {r['rows']:,} | {r['before']:.2f} | "
            f"{r['after']:.2f} | {r['stage_x']:.2f} | {r['probe_x']:.2f} | "
            f"{r['stage_x'] / r['probe_x']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def probe_sequence(n: int) -> str:
    """N single probe runs in a row, and the fastest of each three (kcheck.costs.pace's reading)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from kcheck.costs import pace as probe

    runs = [1e3 * seconds for seconds in probe.probe_runs(n)]
    threes = [min(runs[i : i + 3]) for i in range(0, n - 2, 3)]
    return (
        "single runs, CPU ms: " + " ".join(f"{r:.1f}" for r in runs) + "\n"
        "fastest of each three: " + " ".join(f"{r:.1f}" for r in threes) + "\n"
        f"pace of those: {min(threes) / 1e3 / probe.REFERENCE_SECONDS:.2f}"
        f"-{max(threes) / 1e3 / probe.REFERENCE_SECONDS:.2f}\n"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path, nargs="?")
    ap.add_argument("after", type=Path, nargs="?")
    ap.add_argument("-o", "--output", type=Path, default=None)
    ap.add_argument("--probe-sequence", type=int, default=0, metavar="N")
    args = ap.parse_args()
    if args.probe_sequence:
        sys.stdout.write(probe_sequence(args.probe_sequence))
        return 0
    if args.before is None or args.after is None:
        ap.error("BEFORE and AFTER are needed without --probe-sequence")
    records = pairs(json.loads(args.before.read_text()), json.loads(args.after.read_text()))
    text = report(records, args.before, args.after)
    if args.output is None:
        sys.stdout.write(text)
    else:
        tmp = args.output.with_name(args.output.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
