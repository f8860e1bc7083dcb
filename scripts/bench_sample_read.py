#!/usr/bin/env python3
"""Reading speed while sampling (``--max-rows``) against the plain reader, in MB/s of text.

Usage:
    python scripts/bench_sample_read.py FILE [FILE...] [--rows 5000,20000] [--repeat 3]

Each measurement runs in a fresh subprocess (best of ``--repeat``), with the file in the page
cache after a first untimed read, so both readers see the same disk. The target: sampling at
no less than 1/1.2 of the plain reader's MB/s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CODE = """
import sys, time
sys.path.insert(0, {root!r})
from kcheck.io.data import read_libsvm, sample_libsvm
t = time.perf_counter()
if {rows} == 0:
    read_libsvm({path!r})
else:
    sample_libsvm({path!r}, {rows}, seed=0)
print(time.perf_counter() - t)
"""


def seconds(path: Path, rows: int, repeat: int) -> float:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    code = CODE.format(root=str(ROOT), path=str(path), rows=rows)
    return min(
        float(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
            ).stdout
        )
        for _ in range(repeat)
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--rows", default="5000,20000")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print("| file | MB | plain MB/s | --max-rows | sampling MB/s | plain / sampling |")
    print("|---|---|---|---|---|---|")
    for path in args.files:
        mb = path.stat().st_size / 2**20
        path.read_bytes()  # into the page cache
        plain = mb / seconds(path, 0, args.repeat)
        for rows in (int(r) for r in args.rows.split(",")):
            rate = mb / seconds(path, rows, args.repeat)
            print(
                f"| {path.name} | {mb:,.0f} | {plain:,.0f} | {rows:,} | {rate:,.0f} | "
                f"{plain / rate:.2f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
