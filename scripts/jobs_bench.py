#!/usr/bin/env python3
"""The check at ``--jobs 1`` against ``--jobs 2``, over a corpus, in one run: what the second core
buys, and that it buys it without changing a number.

Usage:
    python scripts/jobs_bench.py CORPUS [--only NAME ...] [--skip NAME ...] [--repeats 1]
                                 [-o scripts/results/jobs.md]

CORPUS is a directory made by ``python scripts/judge.py make`` (its ``cases.json`` lists the
cases). Each case runs ``kcheck check FILE -q`` with ``-j 1`` and then ``-j 2`` in fresh
interpreters, one after the other, so that both see the same machine. ``ratio`` is the check's
seconds (the JSON's ``seconds``) at two jobs over those at one; ``bound`` is max(FLOOR_SECONDS,
3 x the linear step's seconds) in the same run at two jobs (the whole check's promise). The
JSON without its timing fields must be the same at both: a case where it is not is marked NO.

At two jobs, exact mode's and rbfsvm's CVs train their folds side by side (from
``engines.SIDE_BY_SIDE_MIN_ROWS`` rows), and on larger data the baseline and degree-2 train in
worker processes beside the rest (kcheck.plan); at one job nothing runs beside anything.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kcheck.costs.budget import FLOOR_SECONDS  # noqa: E402
from kcheck.verdict import without_timing  # noqa: E402

#: Stages whose seconds the report shows beside the whole check's.
SHOWN = ("linear", "rbf", "rbfsvm", "degree2", "multilinear")


def one(path: Path, jobs: int) -> dict[str, Any]:
    """One check's seconds, its stages' seconds, its verdict and its JSON without timing."""
    load = os.getloadavg()[0]
    r = subprocess.run(
        [sys.executable, "-m", "kcheck", "check", str(path), "-q", "-j", str(jobs)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
        check=False,
    )
    if r.returncode not in (0, 1):
        return {"error": r.stderr.strip()[-300:], "load": load}
    v = json.loads(r.stdout)
    stages = {s["name"]: s["seconds"] for s in v["plan"]["steps"] if s.get("seconds")}
    return {
        "seconds": float(v["seconds"]),
        "stages": stages,
        "load": load,
        "verdict": f"{v['verdict']} ({v['margin']})",
        "json": json.dumps(without_timing(v), sort_keys=True),
    }


def report(
    runs: dict[str, dict[int, list[dict[str, Any]]]], command: str, repeats: int
) -> list[str]:
    out = [
        "# The check at one job and at two",
        "",
        f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores; `{command}`. Each case at `-j 1`, "
        "then `-j 2`, in fresh interpreters"
        + (f", {repeats} times (medians)" if repeats > 1 else "")
        + ". `ratio`: the check's seconds at two jobs over one. `bound`: max("
        f"{FLOOR_SECONDS:g} s, 3 x the linear step's seconds) at two jobs. `same JSON`: the "
        "JSON without its timing fields at both.",
        "",
    ]
    rows: list[str] = []
    loads = [r["load"] for by_jobs in runs.values() for rs in by_jobs.values() for r in rs]
    ratios: list[float] = []
    within = checked = 0
    one_s: list[float] = []
    two_s: list[float] = []
    for name, by_jobs in runs.items():
        if any("error" in r for rs in by_jobs.values() for r in rs):
            rows.append(f"| {name} | error | | | | | | |")
            continue
        a = median(r["seconds"] for r in by_jobs[1])
        b = median(r["seconds"] for r in by_jobs[2])
        linear = median(r["stages"].get("linear", 0.0) for r in by_jobs[2])
        bound = max(FLOOR_SECONDS, 3 * linear)
        same = len({r["json"] for rs in by_jobs.values() for r in rs}) == 1
        stages = ", ".join(
            f"{s} {by_jobs[1][0]['stages'][s]:.1f} / {by_jobs[2][0]['stages'][s]:.1f}"
            for s in SHOWN
            if s in by_jobs[1][0]["stages"] and s in by_jobs[2][0]["stages"]
        )
        ratios.append(b / a)
        one_s.append(a)
        two_s.append(b)
        checked += 1
        within += b <= bound
        over = "" if b <= bound else " **over**"
        rows.append(
            f"| {name} | {a:.1f} | {b:.1f} | {b / a:.2f} | {bound:.1f}{over} | {stages} "
            f"| {by_jobs[2][0]['verdict']} | {'yes' if same else '**NO**'} |"
        )
    if ratios:
        out += [
            f"Over {checked} cases: median check {median(one_s):.1f} s at one job and "
            f"{median(two_s):.1f} s at two; ratio two / one median {median(ratios):.2f} "
            f"({min(ratios):.2f}-{max(ratios):.2f}); within the bound at two jobs: {within} "
            f"of {checked}. Load average (1 min) before each run: {min(loads):.2f}-"
            f"{max(loads):.2f}, median {median(loads):.2f}.",
            "",
        ]
    out += [
        "| case | s at -j 1 | s at -j 2 | ratio | bound s | stages, s at -j 1 / -j 2 | verdict "
        "| same JSON |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--skip", nargs="*", default=[])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "scripts/results/jobs.md")
    args = ap.parse_args()
    cases = [c["name"] for c in json.loads((args.corpus / "cases.json").read_text())]
    names = [n for n in cases if (args.only is None or n in args.only) and n not in args.skip]
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for _ in range(args.repeats):
        for name in names:
            for jobs in (1, 2):
                r = one(args.corpus / name, jobs)
                runs.setdefault(name, {}).setdefault(jobs, []).append(r)
                print(name, jobs, r.get("seconds", r.get("error")), file=sys.stderr)
    command = "python scripts/jobs_bench.py CORPUS" + "".join(
        f" --{k} {' '.join(v)}" for k, v in (("only", args.only), ("skip", args.skip)) if v
    )
    if args.repeats > 1:
        command += f" --repeats {args.repeats}"
    out = report(runs, command, args.repeats)
    args.output.write_text("\n".join(out) + "\n")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
