#!/usr/bin/env python3
"""Peak resident memory of whole ``kcheck check`` runs, measured with ``/usr/bin/time -v``.

Usage:
    python scripts/bench_memory.py [--sets webspam,rcv1,wide] [--limits ,1G] [-o FILE]

The peak of each run minus that of a process that has only imported kcheck and its
dependencies is compared with the CSR bytes of the data (the target: at most 3x the CSR bytes
plus 64 MB) and, under ``--memory-limit M``, with M. Data sets are generated (seeded):
webspam-like 200,000 x 254 at 33% density (as in the memory issue), rcv1-like 20,242 x 47,236
(sparse text), and "wide": 40 rows with one feature index of 50,000,000.
"""

from __future__ import annotations

import argparse
import re
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

MB = 2**20
IMPORTS = (
    "import kcheck.cli, kcheck.pipeline, kcheck.modelfiles.export, kcheck.bindings.engines, "
    "kcheck.checkers.exact"
)


def webspam(rng: np.random.Generator) -> tuple[np.ndarray, sp.csr_matrix]:
    n, d, density = 200_000, 254, 0.33
    X = sp.random(
        n,
        d,
        density=density,
        format="csr",
        random_state=rng,
        data_rvs=lambda k: np.round(rng.random(k), 3) + 0.001,
    )
    w = rng.normal(size=d)
    y = np.where(X @ w + 0.3 * rng.normal(size=n) > np.median(X @ w), 1.0, -1.0)
    return y, X


def rcv1(rng: np.random.Generator) -> tuple[np.ndarray, sp.csr_matrix]:
    n, d, per_row = 20_242, 47_236, 71
    rows = np.repeat(np.arange(n), per_row)
    cols = (rng.zipf(1.3, size=n * per_row) % d).astype(np.int64)
    X = sp.csr_matrix((np.round(rng.random(n * per_row), 3) + 0.001, (rows, cols)), shape=(n, d))
    X.sum_duplicates()
    w = rng.normal(size=d)
    y = np.where(X @ w + 0.1 * rng.normal(size=n) > 0, 1.0, -1.0)
    return y, X


def wide(rng: np.random.Generator) -> tuple[np.ndarray, sp.csr_matrix]:
    X = sp.lil_matrix((40, 50_000_000))
    X[:, 0] = np.round(rng.random((40, 1)), 3)
    X[:, 1] = np.round(rng.random((40, 1)), 3)
    X[0, 49_999_999] = 1.0
    y = np.where(np.arange(40) % 2, 1.0, -1.0)
    return y, sp.csr_matrix(X)


SETS = {"webspam": webspam, "rcv1": rcv1, "wide": wide}


def peak_kb(args: list[str]) -> tuple[int, int, float, str]:
    """(maximum resident set in kB, exit code, seconds, last stderr line) of one run."""
    t0 = time.monotonic()
    r = subprocess.run(["/usr/bin/time", "-v", *args], capture_output=True, text=True)
    seconds = time.monotonic() - t0
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("kcheck")]
    return int(m.group(1)) if m else -1, r.returncode, seconds, lines[-1] if lines else ""


def parse_size(text: str) -> int:
    factor = {"k": 2**10, "m": 2**20, "g": 2**30}.get(text[-1].lower(), 1)
    return int(float(text.rstrip("kKmMgG")) * factor)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="webspam,rcv1,wide")
    ap.add_argument(
        "--limits", default=",1G", help="comma-separated --memory-limit values ('' for the default)"
    )
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("-o", "--output", type=Path, default=None)
    args = ap.parse_args()
    base_kb, _, _, _ = peak_kb([sys.executable, "-c", IMPORTS])
    rows = [
        f"Baseline (imports only): {base_kb / 1024:.0f} MB resident.",
        "",
        "| data set | CSR MB | --memory-limit | exit | seconds | peak MB | peak - baseline MB "
        "| / CSR | target 3x CSR + 64 MB | under the limit |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.sets.split(","):
            y, X = SETS[name](np.random.default_rng(0))
            csr = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes + y.nbytes
            path = Path(tmp) / f"{name}.svm"
            write_libsvm(str(path), y, X)
            del X, y
            for limit in args.limits.split(","):
                cmd = [
                    sys.executable,
                    "-m",
                    "kcheck",
                    "check",
                    str(path),
                    "-q",
                    "-j",
                    str(args.jobs),
                ]
                if limit:
                    cmd += ["--memory-limit", limit]
                kb, code, seconds, last = peak_kb(cmd)
                above = (kb - base_kb) * 1024
                target = 3 * csr + 64 * MB
                under = "-" if not limit else ("yes" if above <= parse_size(limit) else "**no**")
                rows.append(
                    f"| {name} | {csr / MB:.0f} | {limit or 'default'} | {code} | "
                    f"{seconds:.1f} | {kb / 1024:.0f} | {above / MB:.0f} | {above / csr:.2f} | "
                    f"{'met' if above <= target else '**not met**'} | {under} |"
                )
                if code:
                    rows.append(f"|  | {last} |")
                print(rows[-1], flush=True)
    text = "\n".join(rows) + "\n"
    if args.output:
        args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
