#!/usr/bin/env python3
"""Does ``--max-rows`` change the verdict? Each set is checked whole and on stratified samples.

Usage:
    python scripts/stability.py DATA_DIR [--sets a9a,ijcnn1.bz2,cod-rna.xz]
                                [--sizes 5000,20000] [--seeds 0,1,2,3,4] [--jobs 2] [-o FILE]

For every seed, the whole file is checked with that seed (the reference), then each sample size
with the same seed, so a difference comes from the sample alone. The report gives, per set and
size, how many seeds kept the whole file's verdict, and how far each checker's gap moved
(sample minus whole file, in points: the largest and the mean absolute move over the seeds).
``covtype`` in --sets is generated as in scripts/bench.py (581,012 x 54, a nonlinear rule).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from kcheck.config import CheckConfig  # noqa: E402
from kcheck.io.data import write_libsvm  # noqa: E402
from kcheck.pipeline import run  # noqa: E402


def facts(v: dict) -> dict:
    gaps = {n: c.get("gap") for n, c in v["checkers"].items() if c.get("gap") is not None}
    return {
        "verdict": v["verdict"],
        "margin": v["margin"],
        "deciding": v["deciding_checker"],
        "rows": v["data"]["rows"],
        "gaps": gaps,
        "seconds": v["seconds"],
    }


def check(path: Path, seed: int, max_rows: int | None, jobs: int) -> dict:
    config = CheckConfig(train=str(path), seed=seed, jobs=jobs, max_rows=max_rows)
    return facts(run(config).json)


def covtype(scratch: Path) -> Path:
    from bench import covtype_like

    path = scratch / "covtype"
    if not path.exists():
        y, X = covtype_like(np.random.default_rng(0))
        write_libsvm(path, y, X)
    return path


def _verdicts(runs: dict, seeds: list[str]) -> str:
    return ", ".join(
        f"{runs[s]['verdict']}{'' if runs[s]['margin'] == 'clear' else '*'}" for s in seeds
    )


def table(raw: dict, seeds: list[str]) -> list[str]:
    """One row per set, size and checker; * marks a borderline verdict."""
    lines = [
        "| data set | rows | max-rows | same verdict | verdicts whole / sample | checker "
        "| gap whole (pts, mean) | gap sample (pts, mean) | largest move | mean move |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, runs in raw.items():
        whole = runs["whole"]
        for size, part in runs.items():
            if size == "whole":
                continue
            same = sum(part[s]["verdict"] == whole[s]["verdict"] for s in seeds)
            names = sorted(
                set().union(*(whole[s]["gaps"] for s in seeds), *(part[s]["gaps"] for s in seeds))
            )
            for i, checker in enumerate(names):
                both = [
                    s for s in seeds if checker in part[s]["gaps"] and checker in whole[s]["gaps"]
                ]
                moves = [100 * (part[s]["gaps"][checker] - whole[s]["gaps"][checker]) for s in both]
                ref = [
                    100 * whole[s]["gaps"][checker] for s in seeds if checker in whole[s]["gaps"]
                ]
                got = [100 * part[s]["gaps"][checker] for s in seeds if checker in part[s]["gaps"]]
                lead = (
                    [
                        name,
                        f"{whole[seeds[0]]['rows']:,}",
                        f"{int(size):,}",
                        f"{same}/{len(seeds)}",
                        f"{_verdicts(whole, seeds)} / {_verdicts(part, seeds)}",
                    ]
                    if i == 0
                    else ["", "", "", "", ""]
                )
                cells = [
                    checker,
                    f"{np.mean(ref):+.2f}" if ref else "not run",
                    f"{np.mean(got):+.2f}" if got else "not run",
                    f"{max(moves, key=abs):+.2f}" if moves else "-",
                    f"{np.mean(np.abs(moves)):.2f}" if moves else "-",
                ]
                lines.append("| " + " | ".join([*lead, *cells]) + " |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--sets", default="a9a,ijcnn1.bz2,cod-rna.xz")
    ap.add_argument("--sizes", default="5000,20000")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("-o", "--output", type=Path, default=None)
    ap.add_argument("--raw", type=Path, default=None, help="also write every run as JSON")
    ap.add_argument("--from-raw", type=Path, default=None, help="only render a --raw file")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    raw: dict = json.loads(args.from_raw.read_text()) if args.from_raw else {}
    if not args.from_raw:
        scratch = Path(tempfile.mkdtemp(prefix="kcheck-stability-"))
        for name in args.sets.split(","):
            path = covtype(scratch) if name == "covtype" else args.data_dir / name
            t0 = time.perf_counter()
            raw[name] = {"whole": {str(s): check(path, s, None, args.jobs) for s in seeds}}
            for size in sizes:
                raw[name][str(size)] = {str(s): check(path, s, size, args.jobs) for s in seeds}
            print(f"{name}: {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    lines = table(raw, [str(s) for s in seeds])
    text = "\n".join(lines) + "\n"
    if args.output:
        args.output.write_text(text)
    else:
        print(text)
    if args.raw and not args.from_raw:
        args.raw.write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
