#!/usr/bin/env python3
"""Time and peak memory of each step of a check, against the linear baseline, in one run.

Usage:
    python scripts/bench.py DATA_DIR [--sets a9a,ijcnn1,cod-rna,covtype,webspam]
                            [--jobs N] [--rbf a9a,ijcnn1] [--rbf-rows 5000] [-o FILE]

For each data set, every measurement runs in a fresh subprocess, so peak memory is per step:
* read: ``read_libsvm`` alone;
* linear: read, scale, split and the linear baseline alone (C search + training);
* check: the whole check; each checker's seconds come from its JSON;
* ML path: linear + MultiLinear only, for the memory target.
Peak memory of read is the resident-set high-water mark (VmHWM) minus the resident set
before it. For the check paths the mark is reset (through /proc/self/clear_refs) once the file
is read, and the memory the rest of the path needs is the high-water mark minus the resident
set at that point; the ML-path footprint is that plus the data already in memory (its CSR
bytes), and the target compares it with the CSR bytes.

Sets missing from DATA_DIR are generated (seeded) in a scratch directory with the shape of
the real ones and marked "synthetic": covtype 581,012 x 54 (10 dense + 44 one-hot columns,
labels from a nonlinear rule), webspam 350,000 x 254 at 33% density, real-sim 72,309 x 20,958
and rcv1 20,242 x 47,236 (sparse text-like, labels from a noisy linear rule).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kcheck.io.data import write_libsvm  # noqa: E402
from kcheck.plan import BESIDE_MIN_SECONDS  # noqa: E402

PRELUDE = r"""
import json, sys, time
sys.path.insert(0, {root!r})
def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0
def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
"""

READ = (
    PRELUDE
    + r"""
from kcheck.io.data import read_libsvm
before = status_kb("VmRSS")
t0 = time.perf_counter()
y, X = read_libsvm({path!r})
wall = time.perf_counter() - t0
csr = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
print(json.dumps({{"seconds": wall, "peak_mb": (status_kb("VmHWM") - before) / 1024,
                   "csr_mb": csr / 2**20, "rows": X.shape[0], "cols": X.shape[1],
                   "nnz": int(X.nnz)}}))
"""
)

CHECK = (
    PRELUDE
    + r"""
from kcheck.pipeline import run
from kcheck.config import CheckConfig
marks = {{"reset": status_kb("VmRSS")}}
def progress(event):
    # The first stage after reading (scaling while read) and splitting: what the path adds
    # from here is measured above the data then in memory (T and V, about the CSR).
    # "linear baseline (C search)" in this process, or "starting the linear baseline ... in
    # a worker process" beside the checkers (-j 2): either is the first stage after the split.
    if "linear baseline" in event.stage and "done" not in marks:
        reset_peak()
        marks["reset"] = status_kb("VmRSS")
        marks["done"] = True
t0 = time.perf_counter()
v = run(CheckConfig(train={path!r}, checkers={checkers!r}, jobs={jobs}), progress).json
print(json.dumps({{"seconds": time.perf_counter() - t0, "verdict": v,
                   "extra_mb": (status_kb("VmHWM") - marks["reset"]) / 1024}}))
"""
)

LINEAR = (
    PRELUDE
    + r"""
from kcheck.io.data import read_libsvm
from kcheck.scaling.fitting import fit_scaler
from kcheck.split import stratified_split
from kcheck.checkers import linear
from kcheck.checkers.base import Dataset
before = status_kb("VmRSS")
y, X = read_libsvm({path!r})
reset_peak()
X = fit_scaler(X, method="maxabs").transform_inplace(X)
tr, va = stratified_split(y, seed=0)
T, V = Dataset(X[tr], y[tr]), Dataset(X[va], y[va])
del X
r = linear.run(T, V, linear.LinearOptions(seed=0))
print(json.dumps({{"seconds": r.seconds, "acc": r.val_accuracy,
                   "peak_mb": (status_kb("VmHWM") - before) / 1024}}))
"""
)

RBF = (
    PRELUDE
    + r"""
from kcheck.modelfiles.export import VerifyConfig, verify
t0 = time.perf_counter()
v = verify(VerifyConfig(train={path!r}, max_rows={rows}, jobs={jobs}))
print(json.dumps({{"seconds": time.perf_counter() - t0, "result": v}}))
"""
)


def child(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr else "failed")
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- synthetic stand-ins ------------------------------------------------------------------------


def covtype_like(
    rng: np.random.Generator, n: int = 581_012, noise: float = 0.3
) -> tuple[np.ndarray, sp.csr_matrix]:
    """covtype's shape: 10 dense features of very different scales on large offsets (scaling by
    max |x| leaves them in narrow bands), one-hot groups of 4 and 40; labels from a sine, a
    product and one-hot membership, which an RBF SVM learns only at a large C."""
    dense = rng.normal(size=(n, 10)) * rng.uniform(1, 1000, size=10) + rng.uniform(0, 3000, 10)
    wild = rng.integers(0, 4, size=n)
    soil = rng.integers(0, 40, size=n)
    rows = np.repeat(np.arange(n), 12)
    cols = np.column_stack([np.tile(np.arange(10), (n, 1)), 10 + wild, 14 + soil]).ravel()
    vals = np.column_stack([dense, np.ones(n), np.ones(n)]).ravel()
    X = sp.csr_matrix((vals, (rows, cols)), shape=(n, 54))
    z = (dense - dense.mean(0)) / dense.std(0)
    score = np.sin(2 * z[:, 0]) + z[:, 1] * z[:, 2] + 0.5 * (soil % 7 == 3) - 0.3
    y = np.where(score + noise * rng.normal(size=n) > 0, 1.0, -1.0)
    return y, X


def _sparse_linear(rng, n, d, nnz_per_row) -> tuple[np.ndarray, sp.csr_matrix]:
    # Zipf-like column popularity, tf-idf-like positive values, rows of unit length.
    k = rng.poisson(nnz_per_row, size=n).clip(1, d)
    indptr = np.concatenate([[0], np.cumsum(k)])
    p = 1.0 / np.arange(1, d + 1) ** 0.8
    cols = rng.choice(d, size=int(indptr[-1]), p=p / p.sum())
    vals = rng.exponential(size=cols.size)
    X = sp.csr_matrix((vals, cols, indptr), shape=(n, d))
    X.sum_duplicates()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.csr_matrix(sp.diags(1 / norms) @ X)
    w = rng.normal(size=d)
    score = X @ w
    y = np.where(score - np.median(score) + 0.05 * rng.normal(size=n) > 0, 1.0, -1.0)
    return y, X


def _webspam(rng: np.random.Generator) -> tuple[np.ndarray, sp.csr_matrix]:
    n, d = 350_000, 254
    mask = rng.random((n, d)) < 0.33
    vals = rng.exponential(size=(n, d)) * mask
    X = sp.csr_matrix(vals)
    score = np.sin(3 * vals[:, 0]) + vals[:, 1] * vals[:, 2] + vals[:, 3:20].sum(1) * 0.1 - 1.5
    y = np.where(score + 0.2 * rng.normal(size=n) > 0, 1.0, -1.0)
    return y, X


SYNTHETIC = {
    "covtype": covtype_like,
    "webspam": _webspam,
    "real-sim": lambda rng: _sparse_linear(rng, 72_309, 20_958, 51),
    "rcv1": lambda rng: _sparse_linear(rng, 20_242, 47_236, 74),
}


def find_or_make(data_dir: Path, name: str, scratch: Path) -> tuple[Path | None, bool]:
    for suffix in ("", ".bz2", ".xz", ".gz", ".binary", ".binary.bz2"):
        if (data_dir / (name + suffix)).is_file():
            return data_dir / (name + suffix), False
    if name not in SYNTHETIC:
        return None, False
    path = scratch / f"{name}-synthetic"
    if not path.exists():
        print(f"generating synthetic {name} ...", file=sys.stderr, flush=True)
        y, X = SYNTHETIC[name](np.random.default_rng(0))
        write_libsvm(str(path), y, X)
    return path, True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--sets", default="a9a,ijcnn1,cod-rna,covtype,real-sim,rcv1,webspam")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rbf", default="a9a,ijcnn1", help="sets to time an RBF grid search on")
    ap.add_argument("--rbf-rows", type=int, default=5000)
    ap.add_argument("--scratch", type=Path, default=None, help="where synthetic sets go")
    ap.add_argument("-o", "--output", type=Path, default=None)
    args = ap.parse_args()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="kcheck-bench-"))
    scratch.mkdir(parents=True, exist_ok=True)
    root = str(ROOT)

    lines = [
        "# kcheck benchmark",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}; "
        f"{time.strftime('%Y-%m-%d')}; `python scripts/bench.py DATA_DIR --jobs {args.jobs}`.",
        "",
        "Seconds are wall time. `ratio` = check / linear, where linear is the baseline's C "
        "search + training and check is the whole check after reading. Read peak MB is the "
        "reader's resident high-water mark above the process's start. ML-path MB is the data "
        "in memory after the read and split (CSR) plus the high-water mark the rest of the path "
        "adds (linear baseline + MultiLinear: LIBLINEAR's copies, k-means). With `--jobs` 2, "
        "where the linear model and the checkers beside it each count at least "
        f"{BESIDE_MIN_SECONDS:g} s (`kcheck.plan`, its `beside` and `detached`), the check "
        "trains the linear baseline, and degree-2, each in a worker process beside MultiLinear: "
        "their seconds overlap, and MultiLinear's include waiting for the baseline's C for its "
        "smallest clusters.",
        "",
        "| data set | rows | features | nnz | CSR MB | read s | read peak MB | linear s | "
        "MultiLinear s | degree-2 s (status) | check s | ratio | verdict | ML-path MB | "
        "ML-path / CSR |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rbf_lines = []
    for name in args.sets.split(","):
        path, synthetic = find_or_make(args.data_dir, name, scratch)
        if path is None:
            lines.append(f"| {name} | not found |")
            continue
        label = name + (" (synthetic)" if synthetic else "")
        try:
            rd = child(READ.format(root=root, path=str(path)))
            lin = child(LINEAR.format(root=root, path=str(path)))
            full = child(
                CHECK.format(
                    root=root, path=str(path), jobs=args.jobs, checkers=("degree2", "multilinear")
                )
            )
            mlp = child(
                CHECK.format(root=root, path=str(path), jobs=args.jobs, checkers=("multilinear",))
            )
        except RuntimeError as e:
            lines.append(f"| {label} | failed: {e} |")
            continue
        v = full["verdict"]
        d2 = v["checkers"]["degree2"]
        ml = v["checkers"]["multilinear"]
        check_s = v["seconds"] - v["read_seconds"] - (v["test"] or {}).get("seconds", 0.0)
        d2_status = d2["status"]
        if d2_status == "subsampled":
            d2_status += f" {100 * d2['fraction']:.1f}%"
        row = (
            f"| {label} | {rd['rows']:,} | {rd['cols']:,} | {rd['nnz']:,} | {rd['csr_mb']:.0f} | "
            f"{rd['seconds']:.2f} | {rd['peak_mb']:.0f} | {lin['seconds']:.2f} | "
            f"{ml['seconds']:.2f} | {d2['seconds']:.2f} ({d2_status}) | {check_s:.2f} | "
            f"{check_s / lin['seconds']:.2f} | {v['verdict']} ({v['margin']}) | "
            f"{mlp['extra_mb'] + rd['csr_mb']:.0f} | "
            f"{(mlp['extra_mb'] + rd['csr_mb']) / rd['csr_mb']:.2f} |"
        )
        lines.append(row)
        print(row, file=sys.stderr, flush=True)
        if name in args.rbf.split(","):
            try:
                r = child(RBF.format(root=root, path=str(path), rows=args.rbf_rows, jobs=args.jobs))
            except RuntimeError as e:
                rbf_lines.append(f"| {label} | failed: {e} |")
                continue
            res = r["result"]
            rbf_lines.append(
                f"| {label} | {args.rbf_rows:,} | {res['rbf']['grid_points']} | "
                f"{r['seconds']:.1f} | {check_s:.2f} | {r['seconds'] / check_s:.0f}x | "
                f"{100 * res['rbf']['cv_accuracy']:.2f} vs {100 * res['linear']['cv_accuracy']:.2f}"
                f" | {res['verdict']} |"
            )
    if rbf_lines:
        lines += [
            "",
            "RBF grid search (`kcheck verify`: grid.py's 110 points, 5-fold CV) on a stratified "
            "subsample; on all rows it costs more still (SVM training grows faster than "
            "linearly in the rows):",
            "",
            "| data set | rows searched | grid points | RBF grid s | check s (all rows) | "
            "saving | CV acc. RBF vs linear (%) | verify verdict |",
            "|---|---|---|---|---|---|---|---|",
            *rbf_lines,
        ]
    text = "\n".join(lines) + "\n"
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
