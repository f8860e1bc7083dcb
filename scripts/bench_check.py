#!/usr/bin/env python3
"""Time and memory of a full check against the linear baseline alone, in one run.

Usage: python scripts/bench_check.py DATA_DIR [--sets a9a,ijcnn1,cod-rna] [--jobs N]

For each data set, in fresh subprocesses (so peak memory is per run):
* ``linear``: read, scale, split and the linear baseline alone (its C search and training);
* ``check``: the whole check (linear, degree-2, MultiLinear);
* ``ml path``: linear + MultiLinear only, for the memory target.
Peak memory is the resident-set high-water mark after reading (reset through
/proc/self/clear_refs once the file is parsed), minus the resident set before reading; it thus
includes the data held in memory but not the reader's own transient peak.
Reports the ratios check / linear (time) and peak / CSR bytes (memory).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from kcheck.pipeline import CheckConfig, run

def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0

before = status_kb("VmRSS")
marks = {{}}
def progress(stage, done, total):
    if stage == "scaling" and "reset" not in marks:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            marks["reset"] = True
        except OSError:
            marks["reset"] = False
cfg = CheckConfig(train={path!r}, checkers={checkers!r}, jobs={jobs})
t0 = time.perf_counter()
v = run(cfg, progress).json
wall = time.perf_counter() - t0
peak = status_kb("VmHWM")
print(json.dumps({{"wall": wall, "verdict": v, "peak_kb": peak - before,
                   "reset": marks.get("reset", False)}}))
"""

LINEAR_ONLY = r"""
import json, sys, time
sys.path.insert(0, {root!r})
import numpy as np
from kcheck.data import read_libsvm
from kcheck.scaling import fit_scaler
from kcheck.split import stratified_split
from kcheck.checkers import linear
from kcheck.checkers.base import Dataset
t0 = time.perf_counter()
y, X = read_libsvm({path!r})
t_read = time.perf_counter() - t0
X = fit_scaler(X, method="maxabs").transform_inplace(X)
tr, va = stratified_split(y, seed=0)
T, V = Dataset(X[tr], y[tr]), Dataset(X[va], y[va])
r = linear.run(T, V, linear.LinearOptions(seed=0))
print(json.dumps({{"wall": time.perf_counter() - t0, "read": t_read, "linear": r.seconds,
                   "acc": r.val_accuracy, "rows": X.shape[0], "nnz": int(X.nnz)}}))
"""


def child(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def find(data_dir: Path, name: str) -> Path | None:
    for suffix in ("", ".bz2", ".xz", ".gz"):
        if (data_dir / (name + suffix)).is_file():
            return data_dir / (name + suffix)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--sets", default="a9a,ijcnn1,cod-rna")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    root = str(Path(__file__).resolve().parent.parent)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; --jobs {args.jobs}\n")
    print("| data set | rows | nnz | linear s | check s | ratio | deg-2 s | ML s | verdict | "
          "ML-path peak MB | CSR MB | peak / CSR |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.sets.split(","):
        path = find(args.data_dir, name)
        if path is None:
            print(f"| {name} | not found |")
            continue
        lin = child(LINEAR_ONLY.format(root=root, path=str(path)))
        full = child(CHILD.format(root=root, path=str(path), jobs=args.jobs,
                                  checkers=("degree2", "multilinear")))
        ml = child(CHILD.format(root=root, path=str(path), jobs=args.jobs,
                                checkers=("multilinear",)))
        v = full["verdict"]
        csr_mb = (lin["nnz"] * 12 + (lin["rows"] + 1) * 8) / 2**20
        lin_s = lin["wall"]
        print(
            f"| {name} | {lin['rows']:,} | {lin['nnz']:,} | {lin_s:.2f} | {full['wall']:.2f} | "
            f"{full['wall'] / lin_s:.2f} | {v['checkers']['degree2']['seconds']:.2f} | "
            f"{v['checkers']['multilinear']['seconds']:.2f} | {v['verdict']} ({v['margin']}) | "
            f"{ml['peak_kb'] / 1024:.0f} | {csr_mb:.0f} | {ml['peak_kb'] / 1024 / csr_mb:.2f} |",
            flush=True,
        )
    print("\nlinear s and check s are wall times including reading the file; "
          "ratio = check / linear.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
