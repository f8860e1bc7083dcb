"""Benchmark kcheck's LIBSVM reader against scikit-learn's and LIBSVM's.

    python scripts/bench_read.py [FILE] [--rows 200000 --features 300 --nnz 20] [--repeat 3]

Without FILE, a seeded file of %g-formatted values (like typical LIBSVM data) is generated in a
temporary directory. Each reader runs in a fresh subprocess, ``--repeat`` times: the table shows
the best wall time, the best CPU time, and the peak memory the read added to the process: the
peak resident set size after the call minus the resident size before it, with the reader's
module already imported. Both come from /proc/self/status (VmHWM, VmRSS), because ru_maxrss
carries the parent's peak across fork and exec; where /proc is missing, ru_maxrss is used.
CPU time is shown because wall time suffers when other work shares the machine.
Before timing, the three readers' results are compared: they must give the same labels and
the same matrix (LIBSVM's reader drops explicit zeros and infers the width, so the comparison
does the same).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
READERS = ("kcheck", "sklearn", "libsvm")


def generate(path: Path, rows: int, features: int, nnz: int, seed: int = 0) -> None:
    """Write a random LIBSVM file: labels +1/-1, nnz sorted indices per row, %g values."""
    rng = np.random.default_rng(seed)
    nnz = min(nnz, features)
    fmt_row = "%s" + " %d:%g" * nnz + "\n"
    block = 10_000
    with open(path, "w", encoding="ascii") as f:
        for r0 in range(0, rows, block):
            n = min(block, rows - r0)
            idx = np.argsort(rng.random((n, features)), axis=1)[:, :nnz]
            idx.sort(axis=1)
            vals = rng.standard_normal((n, nnz))
            labels = np.where(rng.random(n) < 0.5, "+1", "-1")
            args: list[object] = []
            for i in range(n):
                args.append(labels[i])
                pairs: list[object] = [None] * (2 * nnz)
                pairs[0::2] = (idx[i] + 1).tolist()
                pairs[1::2] = vals[i].tolist()
                args.extend(pairs)
            f.write((fmt_row * n) % tuple(args))


def load(reader: str, path: str):  # noqa: ANN201 - returns whatever the reader returns
    """Import and call one reader; returns (y, X) as numpy/scipy objects."""
    if reader == "kcheck":
        sys.path.insert(0, str(ROOT))
        from kcheck.io.data import read_libsvm

        return read_libsvm(path)
    if reader == "sklearn":
        from sklearn.datasets import load_svmlight_file

        X, y = load_svmlight_file(path)
        return y, X
    from libsvm.svmutil import svm_read_problem

    y, X = svm_read_problem(path, return_scipy=True)
    return y, X


def importer(reader: str) -> None:
    if reader == "kcheck":
        sys.path.insert(0, str(ROOT))
        import kcheck.io.data  # noqa: F401
    elif reader == "sklearn":
        import sklearn.datasets  # noqa: F401
    else:
        import libsvm.svmutil  # noqa: F401


def memory_kb(field: str) -> int:
    """VmRSS or VmHWM of this process in kB (ru_maxrss if /proc is unavailable)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def worker(reader: str, path: str) -> None:
    """Run one read in this (fresh) process and print its cost as JSON."""
    importer(reader)
    before = memory_kb("VmRSS")
    t0, c0 = time.perf_counter(), time.process_time()
    y, X = load(reader, path)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    after = memory_kb("VmHWM")
    nbytes = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes + y.nbytes
    print(json.dumps({"wall": wall, "cpu": cpu, "peak_kb": after - before, "bytes": nbytes}))


def same_matrix(a, b) -> bool:  # noqa: ANN001
    """Equal labels and equal matrices, ignoring explicit zeros and trailing empty columns."""
    (ya, Xa), (yb, Xb) = a, b
    if not np.array_equal(ya, yb):
        return False
    Xa, Xb = Xa.tocsr(copy=True), Xb.tocsr(copy=True)
    for X in (Xa, Xb):
        X.eliminate_zeros()
        X.sort_indices()
    width = max(Xa.shape[1], Xb.shape[1])
    Xa.resize(Xa.shape[0], width)
    Xb.resize(Xb.shape[0], width)
    return (
        Xa.shape == Xb.shape
        and np.array_equal(Xa.indptr, Xb.indptr)
        and np.array_equal(Xa.indices, Xb.indices)
        and np.array_equal(Xa.data, Xb.data)
    )


def run(path: str, repeat: int) -> None:
    size = os.path.getsize(path)
    results = {name: load(name, path) for name in READERS}
    agree = {name: same_matrix(results["kcheck"], results[name]) for name in READERS[1:]}
    y, X = results["kcheck"]
    csr_bytes = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    del results

    stats: dict[str, dict[str, float]] = {}
    for name in READERS:
        runs = []
        for _ in range(repeat):
            out = subprocess.run(
                [sys.executable, __file__, "--worker", name, path],
                check=True,
                capture_output=True,
                text=True,
            )
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        stats[name] = {
            "wall": min(r["wall"] for r in runs),
            "cpu": min(r["cpu"] for r in runs),
            "peak_mb": min(r["peak_kb"] for r in runs) / 1024,
        }

    print(
        f"file: {path} ({size / 1e6:.1f} MB, {X.shape[0]} rows, {X.shape[1]} columns, "
        f"{X.nnz} values); best of {repeat} fresh processes per reader"
    )
    print(f"same matrix as kcheck: sklearn {agree['sklearn']}, libsvm {agree['libsvm']}")
    print()
    print(
        "| reader | wall s | CPU s | peak memory added (MB) | kcheck/reader wall | "
        "kcheck/reader CPU |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    k = stats["kcheck"]
    for name in READERS:
        s = stats[name]
        print(
            f"| {name} | {s['wall']:.3f} | {s['cpu']:.3f} | {s['peak_mb']:.0f} | "
            f"{k['wall'] / s['wall']:.2f} | {k['cpu'] / s['cpu']:.2f} |"
        )
    bound = (2 * csr_bytes + size) / 2**20
    print()
    print(
        f"kcheck memory: {k['peak_mb']:.0f} MB added; target 2 x CSR ({csr_bytes / 2**20:.0f} MB)"
        f" + file ({size / 2**20:.0f} MB) = {bound:.0f} MB"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file", nargs="?", help="LIBSVM file to read (default: generate one)")
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--features", type=int, default=300)
    p.add_argument("--nnz", type=int, default=20, help="nonzeros per row")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=3, help="fresh processes per reader")
    p.add_argument("--worker", choices=READERS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.file)
        return
    if args.file:
        run(args.file, args.repeat)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.svm"
        t0 = time.perf_counter()
        generate(path, args.rows, args.features, args.nnz, args.seed)
        print(f"generated {path.name} in {time.perf_counter() - t0:.1f} s")
        run(str(path), args.repeat)


if __name__ == "__main__":
    main()
