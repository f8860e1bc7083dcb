#!/usr/bin/env python3
"""Measure the per-unit costs behind kcheck/costs/budget.py, against its counted estimates.

Usage:
    python scripts/calibrate.py SHARED_DATASETS_DIR [-o scripts/results/calibrate.md]

For each set (subsampled where noted): the linear baseline (LIBLINEAR -C search and training on
T) in microseconds per stored value and model, degree-2 on the full expansion of T in
microseconds per expanded value and model, and the exact comparison's wall time next to
:func:`kcheck.checkers.exact.estimated_seconds`. The constants in kcheck/costs/budget.py come from
these tables; the machine's load when they were measured is printed with them. Nothing here
changes what kcheck computes: only the committed constants do.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kcheck.bindings import engines  # noqa: E402
from kcheck.checkers import degree2, exact  # noqa: E402
from kcheck.costs import budget  # noqa: E402
from kcheck.io.data import read_libsvm  # noqa: E402
from kcheck.scaling.fitting import fit_scaler  # noqa: E402
from kcheck.split import stratified_split, stratified_subsample  # noqa: E402
from kcheck.tuning import linear_c as tuning  # noqa: E402

BUNDLED = ROOT / "datasets"


def _generated(rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    X = rng.uniform(-1, 1, (1000, 60))
    Q = np.zeros((60, 60))
    for _ in range(10):
        i, j = rng.integers(0, 60, 2)
        Q[i, j] = rng.normal() * 3
    y = np.sign(
        X @ rng.normal(size=60) * 0.3 + np.einsum("ij,jk,ik->i", X, Q, X) + rng.normal(0, 0.3, 1000)
    )
    B = (rng.uniform(size=(8400, 68)) < 0.3).astype(float)
    yb = np.sign(
        B @ rng.normal(size=68)
        + 2 * B[:, 0] * B[:, 1]
        - 2 * B[:, 2] * B[:, 3]
        - 1
        + rng.normal(0, 0.5, 8400)
    )
    return {"dense60 (generated)": (y, X), "binary68 (generated)": (yb, B)}


def _load(path: Path, binary_poker: bool = False) -> tuple[np.ndarray, object]:
    y, X = read_libsvm(str(path))
    if binary_poker:
        y = np.where(y == 0, 1.0, -1.0)
    return y, fit_scaler(X, method="maxabs").transform(X)


def _subsample(y: np.ndarray, X: object, n: int | None) -> tuple[np.ndarray, object]:
    if n is None or n >= y.size:
        return y, X
    keep = np.sort(stratified_subsample(y, n, seed=0))
    return y[keep], X[keep]  # type: ignore[index]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("shared", type=Path)
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "scripts/results/calibrate.md")
    a = ap.parse_args()
    S = a.shared
    sets: list[tuple[str, Path | None, list[int | None], list[int | None]]] = [
        # name, file, T sizes for linear/degree-2, row counts for exact
        ("heart_scale", BUNDLED / "heart_scale", [None], [None]),
        ("fourclass", BUNDLED / "fourclass", [None], [None]),
        ("german.numer", BUNDLED / "german.numer", [None], [None]),
        ("svmguide1", BUNDLED / "svmguide1", [None], [None]),
        ("dna.scale", S / "dna.scale", [None], [None]),
        ("a9a", S / "a9a", [3000, 10000, None], [4000]),
        ("ijcnn1", S / "ijcnn1.bz2", [5000, 20000], [3000]),
        ("cod-rna", S / "cod-rna.xz", [10000], [3000]),
        ("letter", S / "letter.scale.xz", [4000], [3000]),
        ("poker 0 vs rest", S / "poker", [6000], [3000]),
        ("madelon", S / "madelon.xz", [], [None]),
    ]
    gen = _generated(np.random.default_rng(0))
    lines = [
        "# Calibration of the counted-work model (`kcheck/costs/budget.py`)",
        "",
        f"Machine: {os.cpu_count()} cores; 1-minute load at the start "
        f"{os.getloadavg()[0]:.1f}. Max-abs scaling, seed 0, one process.",
        "",
        "## Linear baseline and degree-2 (T of a 3:1 split, subsampled to the rows shown)",
        "",
        "| set | rows | models | stored values | linear s | us / value | expanded values "
        "| degree-2 s | us / value | counted degree-2 s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    exact_rows = [
        "",
        "## Exact comparison (all rows of the subsample)",
        "",
        "| set | rows | classes | stored values | counted s | measured s | measured / counted |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    data: list[tuple[str, np.ndarray, object, list[int | None], list[int | None]]] = []
    for name, path, t_sizes, e_sizes in sets:
        if path is None or not path.exists():
            print(f"skipping {name}: {path} not found", file=sys.stderr)
            continue
        y, X = _load(path, binary_poker=name.startswith("poker"))
        data.append((name, y, X, t_sizes, e_sizes))
    for name, (y, X) in gen.items():
        from scipy import sparse

        data.append((name, y, sparse.csr_matrix(X), [None], [1000]))
    for name, y, X, t_sizes, e_sizes in data:
        tr, _ = stratified_split(y, seed=0)
        yT, XT = y[tr], engines.as_binding_csr(X[tr])  # type: ignore[index]
        for n in t_sizes:
            ys, Xs = _subsample(yT, XT, n)
            k = int(np.unique(ys).size)
            nw = budget.n_models(k)
            t0 = time.perf_counter()
            tuning.fit_linear(Xs, ys, seed=0)
            tl = time.perf_counter() - t0
            en = int(degree2.row_expanded_nnz(Xs).sum())
            if en * nw > 30e6:
                continue
            P = degree2.expand(Xs)
            t0 = time.perf_counter()
            tuning.fit_linear(P, ys, seed=0)
            td = time.perf_counter() - t0
            del P
            lines.append(
                f"| {name} | {Xs.shape[0]:,} | {nw} | {Xs.nnz:,} | {tl:.2f} | "
                f"{1e6 * tl / Xs.nnz / nw:.2f} | {en:,} | {td:.2f} | {1e6 * td / en / nw:.2f} | "
                f"{budget.degree2_seconds(en, k, Xs.shape[0]):.2f} |"
            )
            print(lines[-1], flush=True)
        for n in e_sizes:
            ys, Xs = _subsample(y, X, n)
            k = int(np.unique(ys).size)
            opts = exact.ExactOptions(seed=0)
            est = exact.estimated_seconds(Xs, k, opts)  # type: ignore[arg-type]
            t0 = time.perf_counter()
            exact.run(Xs, ys, opts)  # type: ignore[arg-type]
            te = time.perf_counter() - t0
            exact_rows.append(
                f"| {name} | {ys.size:,} | {k} | {Xs.nnz:,} | {est:.1f} | {te:.1f} | "  # type: ignore[attr-defined]
                f"{te / est:.2f} |"
            )
            print(exact_rows[-1], flush=True)
    a.output.write_text("\n".join(lines + exact_rows) + "\n")
    print(f"wrote {a.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
