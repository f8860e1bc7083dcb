#!/usr/bin/env python3
"""The check against its linear baseline, from the same JSON, with the baseline beside the
checkers from a given threshold of counted work: today's against an earlier one, in one run.

Usage:
    python scripts/beside_bench.py DATA_DIR [--sets a9a,ijcnn1,cod-rna] [--thresholds 2,0.5]
                                   [--repeats 3] [-o scripts/results/beside.md]

Each check runs as ``kcheck check FILE -q -j 2`` in a fresh interpreter with
``kcheck.plan.BESIDE_MIN_SECONDS`` set to each threshold in turn (interleaved, so that both
see the same machine). ``ratio`` is the JSON's ``seconds`` (the whole check, the read
included) over its plan's ``linear`` step ``seconds``: the issue's "from the same JSON". The
1-minute load average is recorded before each run.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kcheck.verdict import without_timing  # noqa: E402

FILES = {"a9a": "a9a", "ijcnn1": "ijcnn1.bz2", "cod-rna": "cod-rna.xz"}
CODE = r"""
import sys
import kcheck.plan as plan
plan.BESIDE_MIN_SECONDS = float(sys.argv[1])
from kcheck.__main__ import main
sys.argv = ["kcheck", *sys.argv[2:]]
main()
"""


def one(path: Path, threshold: float) -> dict[str, object]:
    load = os.getloadavg()[0]
    r = subprocess.run(
        [sys.executable, "-c", CODE, str(threshold), "check", str(path), "-q", "-j", "2"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )
    v = json.loads(r.stdout)
    linear = next(s for s in v["plan"]["steps"] if s["name"] == "linear")["seconds"]
    return {
        "seconds": v["seconds"],
        "linear": linear,
        "ratio": v["seconds"] / linear,
        "load": load,
        "verdict": f"{v['verdict']} ({v['margin']})",
        "json": json.dumps(without_timing(v), sort_keys=True),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--sets", default="a9a,ijcnn1,cod-rna")
    ap.add_argument("--thresholds", default="2,0.5")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "scripts/results/beside.md")
    args = ap.parse_args()
    thresholds = [float(t) for t in args.thresholds.split(",")]
    runs: dict[tuple[str, float], list[dict[str, object]]] = {}
    for _ in range(args.repeats):
        for name in args.sets.split(","):
            for t in thresholds:
                r = one(args.data_dir / FILES.get(name, name), t)
                runs.setdefault((name, t), []).append(r)
                print(name, t, f"{r['ratio']:.2f}", f"load {r['load']:.2f}", file=sys.stderr)
    out = [
        "# The check over its linear baseline, from the same JSON",
        "",
        f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores; `python scripts/beside_bench.py "
        f"DATA_DIR --sets {args.sets} --thresholds {args.thresholds} --repeats {args.repeats}`. "
        "`-j 2`; `ratio`: the JSON's `seconds` (read included) over its plan's `linear` "
        "`seconds`; the threshold is `kcheck.plan.BESIDE_MIN_SECONDS` (counted seconds each side "
        "of the overlap must reach; 2 was the old rule's counted linear work).",
        "",
        "| set | threshold | check s (median) | linear s (median) | ratio: median (each run) "
        "| load (1 min) | verdict | same JSON as the other threshold |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (name, t), rs in runs.items():
        other = [x for (n, u), xs in runs.items() if n == name and u != t for x in xs]
        same = all(r["json"] == o["json"] for r in rs for o in other)
        ratios = [float(str(r["ratio"])) for r in rs]
        loads = ", ".join(f"{float(str(r['load'])):.2f}" for r in rs)
        check = median(float(str(r["seconds"])) for r in rs)
        linear = median(float(str(r["linear"])) for r in rs)
        each = ", ".join(f"{x:.2f}" for x in ratios)
        out.append(
            f"| {name} | {t:g} | {check:.2f} | {linear:.2f} | {median(ratios):.2f} ({each}) | "
            f"{loads} | {rs[0]['verdict']} | {'yes' if same else 'NO'} |"
        )
    args.output.write_text("\n".join(out) + "\n")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
