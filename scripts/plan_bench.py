#!/usr/bin/env python3
"""Each stage's counted cost against the CPU seconds it took, over a corpus, in one run.

Usage:
    python scripts/plan_bench.py CORPUS [--only NAME ...] [-o scripts/results/plan.md]
                                 [--runs scripts/results/plan_runs.json]
                                 [--from-judge CORPUS/judge_runs.json]

CORPUS is a directory made by ``python scripts/judge.py make`` (its ``cases.json`` lists the
cases). Each case runs ``kcheck check FILE -q --json -j 1`` in a fresh subprocess (one job, so
every stage's CPU seconds are this process's and its workers'), and its JSON's ``plan`` block
gives, per stage, ``estimated_seconds`` (its one cost: counted on the reference machine, the
same on every machine) and ``cpu_seconds`` (what it took here). The report lists the ratio CPU
/ cost at the run's pace for every stage that ran, and flags those of 0.5 s or more outside
[0.5, 2]; beside it, how many stages the solver-shaped prediction kcheck showed up to schema 2
(scripts/stage_predictions.py, computed here from the case's counts) held within that band;
the whole check's seconds against the linear baseline's are beside them. Results are cached
per case in ``--runs`` (a re-run skips the cases done; ``--fresh`` runs them all again).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kcheck.costs.budget import FLOOR_SECONDS  # noqa: E402
from kcheck.costs.pace import pace  # noqa: E402
from kcheck.plan import done_share  # noqa: E402

LOW, HIGH, MIN_SECONDS = 0.5, 2.0, 0.5
#: The whole check's bound: max(FLOOR, TIMES x the baseline's seconds), FLOOR being the
#: budget's own floor, so the bound follows it.
FLOOR, TIMES = FLOOR_SECONDS, 3.0


def run_case(path: Path) -> dict[str, Any]:
    """One check's plan steps, the whole check's seconds and the machine's load beside it."""
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "kcheck", "check", str(path), "-q", "--json", "-j", "1"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
        check=False,
    )
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        return {"error": r.stderr.strip()[-300:], "wall": wall, "load": load}
    return summary(json.loads(r.stdout), wall, load)


def from_judge(path: Path, seed: int) -> dict[str, dict[str, Any]]:
    """The runs of ``scripts/judge.py judge`` (its OUTDIR/judge_runs.json) at ``seed``, as this
    script's: the same ``kcheck check FILE --json --seed S --jobs 1``, so one run of the judged
    corpus gives both reports (the load where the judge recorded it)."""
    out: dict[str, dict[str, Any]] = {}
    for key, v in json.loads(path.read_text()).items():
        _, name, s, _ = key.split("|")
        if int(s) == seed and "plan" in v:
            out[name] = summary(v, v.get("wall", v["seconds"]), v.get("load"))
    return out


def summary(v: dict[str, Any], wall: float, load: float | None) -> dict[str, Any]:
    """What the report reads of one check's JSON."""
    return {
        "wall": wall,
        "load": load,
        "seconds": v["seconds"],
        "verdict": f"{v['verdict']} ({v['margin']})",
        "rows": v["data"]["rows"],
        "nnz": v["data"]["nnz"],
        "features": v["data"]["features"],
        "train_rows": v["split"]["train"],
        "classes": len(v["data"]["classes"]),
        "steps": [
            {
                k: s.get(k)
                for k in (
                    "name",
                    "runs",
                    "rows",
                    "estimated_seconds",
                    "seconds",
                    "cpu_seconds",
                )
            }
            | {"done": _done(v.get("checkers", {}).get(s["name"]), v["data"])}
            for s in v["plan"]["steps"]
        ],
        # This machine's pace when the check ran (kcheck.costs.pace); absent before the probe.
        "probe": v["plan"].get("probe_cpu_seconds"),
    }


def _done(block: dict[str, Any] | None, data: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments of kcheck.plan.done_share for a checker whose prediction is revised as
    it runs (exact mode's repeats, which may stop early; the RBF SVM checker's trainings,
    predicted from what its search found; MultiLinear's clusters, once k-means has made them):
    its JSON block and the JSON's ``data``."""
    if not block or ("repeats" not in block and "revised_seconds" not in block):
        return None
    return {"block": block, "data": data}


def fill_predictions(runs: dict[str, dict[str, Any]], corpus: Path, again: bool = False) -> int:
    """Give the steps of runs without ``predicted_seconds`` (schema 3's, and those made before
    0.5.0; every run's, ``again``: after a refit of scripts/stage_predictions.py) the solver-
    shaped prediction kcheck showed up to schema 2: scripts/stage_predictions.py's
    ``predicted_seconds`` of the case's counts (read, scaled and split as a check does). The
    number of cases filled."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import stage_predictions as costs
    from calibrate_plan import counts_of

    filled = 0
    for name, r in runs.items():
        steps = r.get("steps", [])
        if not steps or (not again and all("predicted_seconds" in s for s in steps)):
            continue
        counts = counts_of(corpus / name)
        for s in steps:
            s["predicted_seconds"] = (
                costs.predicted_seconds(s["name"], counts, s["rows"], s["estimated_seconds"])
                if s.get("runs") and s.get("rows")
                else None
            )
        filled += 1
    return filled


#: The step field a stage is judged against: its one cost (schema 3) ...
COST = "estimated_seconds"
#: ... or the solver-shaped prediction kcheck showed up to schema 2, reported beside it.
SHOWN_BEFORE = "predicted_seconds"


def _predicted(s: dict[str, Any], machine: float = 1.0, key: str = COST) -> float | None:
    """A stage's count (``key``) of the work it did (kcheck.plan.done_share), at the
    ``machine``'s pace (kcheck.costs.pace): exact mode's count covers every repeat, and it
    stops once the verdict is settled."""
    p = s.get(key)
    return None if p is None else p * _share(s, key)[0] * machine


def _share(s: dict[str, Any], key: str = COST) -> tuple[float, str]:
    return done_share(**(s.get("done") or {}), predicted=s.get(key))


def _ratio(s: dict[str, Any], machine: float = 1.0, key: str = COST) -> float | None:
    p, c = _predicted(s, machine, key), s.get("cpu_seconds")
    if p is None or c is None or not s.get("runs") or not s.get("rows"):
        return None
    return c / p if p > 0 else float("inf")


def flagged(s: dict[str, Any], machine: float = 1.0, key: str = COST) -> bool:
    """A stage of MIN_SECONDS or more (counted at the ``machine``'s pace, or taken) outside
    [LOW, HIGH]: as the check's own warning line judges it (kcheck.plan.off_prediction)."""
    r = _ratio(s, machine, key)
    if r is None:
        return False
    big = max(_predicted(s, machine, key) or 0.0, s["cpu_seconds"]) >= MIN_SECONDS
    return big and not LOW <= r <= HIGH


def _held(runs: dict[str, dict[str, Any]], key: str) -> tuple[int, int]:
    """Of the stages of MIN_SECONDS or more CPU seconds that have a ``key``, how many fell
    within [LOW, HIGH] of it at their run's pace, and how many there were."""
    within = judged = 0
    for r in runs.values():
        machine = pace(r.get("probe"))
        for s in r.get("steps", []):
            ratio = _ratio(s, machine, key)
            if ratio is None or (s.get("cpu_seconds") or 0.0) < MIN_SECONDS:
                continue
            judged += 1
            within += LOW <= ratio <= HIGH
    return within, judged


def report(runs: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    loads = [r["load"] for r in runs.values() if r.get("load") is not None]
    how = f"`python scripts/plan_bench.py {args.corpus}`"
    if args.from_judge is not None:
        how = (
            f"`python scripts/plan_bench.py {args.corpus} --from-judge {args.from_judge}` "
            "(the judged corpus's runs at seed 0)"
        )
    if args.repredict:
        how += f" on the runs in `{args.runs.name}`"
        how += (
            "; `--repredict`: every stage's earlier prediction is today's "
            "scripts/stage_predictions.py's, not the one its run's plan carried"
        )
    load = (
        f"load average at the cases' starts {min(loads):.2f}-{max(loads):.2f} "
        f"(median {median(loads):.2f})"
        if loads
        else "load not recorded (other work shared the 2 cores)"
    )
    out = [
        "# Counted cost against actual seconds, per stage",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; {time.strftime('%Y-%m-%d')}; {how}; {load}.",
        "",
        "`cost`: the step's `estimated_seconds`, its one cost (kcheck/costs/budget.py, counted "
        "on the reference machine from counts alone: what decides, and what the log shows), "
        "of the work it did (`kcheck.plan.done_share`), times this machine's pace when the case "
        "ran (`plan.probe_cpu_seconds` over kcheck.costs.pace's REFERENCE_SECONDS; 1 for a run "
        "without a probe), as the check's own warning line compares them; `cpu`: the stage's "
        "CPU seconds here (`cpu_seconds`), with one job. "
        f"Flagged (**bold**): a stage of {MIN_SECONDS} s or more whose cpu / cost falls "
        f"outside [{LOW}, {HIGH}]. `raw`: cpu over the cost in reference seconds (the "
        "pace left out). `-`: no cost, or the stage did not run.",
        "",
    ]
    held, judged = _held(runs, COST)
    held_before, judged_before = _held(runs, SHOWN_BEFORE)
    out += [
        f"Stages of {MIN_SECONDS} CPU s or more within [{LOW}, {HIGH}] of their count at the "
        f"run's pace: **{held} of {judged}** by the counted cost; {held_before} of "
        f"{judged_before} by the solver-shaped prediction kcheck showed up to schema 2 "
        "(scripts/stage_predictions.py, from the case's counts).",
        "",
    ]
    paces = [pace(r["probe"]) for r in runs.values() if r.get("probe")]
    if paces:
        out += [
            f"This machine's pace (CPU seconds per reference second, from the probe): "
            f"{min(paces):.2f}-{max(paces):.2f}, median {median(paces):.2f}, over "
            f"{len(paces)} of {len(runs)} checks (the others had no stage predicted at "
            f"{MIN_SECONDS} s or more, or ran without the probe).",
            "",
        ]
    stages: dict[str, list[float]] = {}
    raw: dict[str, list[float]] = {}
    bad: list[str] = []
    over: list[str] = []
    over_paced: list[str] = []
    checks: list[float] = []
    rows = []
    for name, r in runs.items():
        if "error" in r:
            rows.append(f"| {name} | error: {r['error'][:80]} | | | |")
            continue
        cells = []
        machine = pace(r.get("probe"))
        for s in r["steps"]:
            ratio = _ratio(s, machine)
            if ratio is None:
                continue
            stages.setdefault(s["name"], []).append(ratio)
            raw.setdefault(s["name"], []).append(_ratio(s) or 0.0)
            text = f"{s['name']} {_predicted(s, machine):.2f}/{s['cpu_seconds']:.2f} ({ratio:.2f}"
            did = _share(s)[1]  # " for the 2 of 5 repeats it ran", or ""
            text += f";{did})" if did else ")"
            if flagged(s, machine):
                bad.append(f"{name} {s['name']}")
                text = f"**{text}**"
            cells.append(text)
        linear: dict[str, Any] = next((s for s in r["steps"] if s["name"] == "linear"), {})
        lin = float(linear.get("seconds") or 0.0)
        times = f"{r['seconds'] / lin:.1f}x linear" if lin else "-"
        checks.append(r["seconds"])
        bound = max(FLOOR, TIMES * lin)
        if r["seconds"] > bound:
            over.append(f"{name} {r['seconds']:.1f} s > {bound:.1f}")
            times += f"; **over max({FLOOR:g} s, {TIMES:g}x linear)**"
        # The floor is counted in reference seconds: at this machine's pace it takes that
        # many times as long (a machine slower than the reference has a longer floor).
        paced = max(FLOOR * machine, TIMES * lin)
        if r["seconds"] > paced:
            over_paced.append(f"{name} {r['seconds']:.1f} s > {paced:.1f}")
            times += f"; **over max({FLOOR:g} s x pace, {TIMES:g}x linear)**"
        shape = f"{r['rows']:,} x {r['features']:,} ({r['classes']})"
        rows.append(
            f"| {name} | {shape} | {r['verdict']} | {r['seconds']:.1f} ({times}) | "
            f"{'; '.join(cells)} |"
        )
    out += [
        "| stage | stages with a cost | cpu / cost: min, median, max | flagged | "
        "raw: min, median, max |",
        "|---|---|---|---|---|",
    ]
    for name, ratios in sorted(stages.items()):
        n_bad = sum(1 for b in bad if b.endswith(" " + name))
        r0 = raw[name]
        out.append(
            f"| {name} | {len(ratios)} | {min(ratios):.2f}, {median(ratios):.2f}, "
            f"{max(ratios):.2f} | {n_bad} | {min(r0):.2f}, {median(r0):.2f}, {max(r0):.2f} |"
        )
    out += [
        "",
        f"Flagged: {len(bad)} stage(s)" + (": " + ", ".join(bad) if bad else "") + ".",
        "",
        f"Whole check (the JSON's `seconds`) against max({FLOOR:g} s, {TIMES:g}x the baseline "
        f"stage's seconds in the same check): {len(checks) - len(over)} of {len(checks)} "
        f"within; median check {median(checks) if checks else 0:.1f} s."
        + (" Over: " + "; ".join(over) + "." if over else ""),
        "",
        f"The same with the floor at this machine's pace, as the budget counts it (max({FLOOR:g} "
        f"reference seconds x the check's pace, {TIMES:g}x linear)): "
        f"{len(checks) - len(over_paced)} of {len(checks)} within."
        + (" Over: " + "; ".join(over_paced) + "." if over_paced else ""),
        "",
        "| case | rows x features (classes) | verdict | check s | stage cost/cpu (ratio) |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "scripts/results/plan.md")
    ap.add_argument("--runs", type=Path, default=ROOT / "scripts/results/plan_runs.json")
    ap.add_argument("--fresh", action="store_true", help="run every case again")
    ap.add_argument(
        "--from-judge",
        type=Path,
        default=None,
        help="take the runs from scripts/judge.py's OUTDIR/judge_runs.json (seed 0) instead",
    )
    ap.add_argument(
        "--repredict",
        action="store_true",
        help="predict every stage again with today's scripts/stage_predictions.py (after a "
        "refit of its factors), not as the runs' plans did",
    )
    args = ap.parse_args()
    cases = json.loads((args.corpus / "cases.json").read_text())
    runs: dict[str, dict[str, Any]] = {}
    if args.from_judge is not None:
        runs = from_judge(args.from_judge, 0)
    elif args.runs.exists() and not args.fresh:
        runs = json.loads(args.runs.read_text())
    for case in cases:
        name = case["name"]
        if args.only and name not in args.only:
            continue
        if (name in runs and not args.only) or args.from_judge is not None or args.repredict:
            continue  # done, or the judge's runs (or those predicted again) are all there is
        runs[name] = run_case(args.corpus / name)
        r = runs[name]
        print(f"{name}: {r.get('seconds', r.get('error'))}", file=sys.stderr, flush=True)
        args.runs.write_text(json.dumps(runs, indent=1) + "\n")
    if args.repredict:
        fill_predictions(runs, args.corpus, again=True)
    if args.from_judge is not None or args.repredict:
        args.runs.write_text(json.dumps(runs, indent=1) + "\n")
    elif fill_predictions(runs, args.corpus):
        args.runs.write_text(json.dumps(runs, indent=1) + "\n")
    ordered = {c["name"]: runs[c["name"]] for c in cases if c["name"] in runs}
    args.output.write_text(report(ordered, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
