#!/usr/bin/env python3
"""LIBLINEAR's cost per value as T grows: the linear baseline and degree-2 (shifted, as the
checker trains it) at several row counts of the larger sets, against kcheck/costs/budget.py's
counts.

Usage:
    python scripts/calibrate_rows.py SHARED_DATASETS_DIR [--scratch DIR] [-o FILE]

``--scratch`` is bench.py's directory of generated stand-ins (covtype-synthetic,
webspam-synthetic), used where present. CPU seconds of this process, one measurement at a
time; the load is printed with the table. Nothing here changes what kcheck computes: only the
committed constants do.
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
from kcheck.checkers import degree2  # noqa: E402
from kcheck.costs import budget  # noqa: E402
from kcheck.io.data import read_libsvm  # noqa: E402
from kcheck.scaling.fitting import fit_scaler  # noqa: E402
from kcheck.split import stratified_split, stratified_subsample  # noqa: E402
from kcheck.tuning import linear_c as tuning  # noqa: E402

#: Expanded values (times models) above which degree-2 is not measured: minutes each.
MAX_EXPANDED = 12_000_000


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("shared", type=Path)
    ap.add_argument("--scratch", type=Path, default=None)
    ap.add_argument("--sets", default="")
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "scripts/results/calibrate_rows.md")
    a = ap.parse_args()
    S, G = a.shared, a.scratch
    sets: list[tuple[str, Path | None, list[int], list[int]]] = [
        # name, file, rows of T for linear, rows of T for degree-2
        ("a9a", S / "a9a", [5000, 12000, 24420], [5000, 12000, 24420]),
        ("ijcnn1", S / "ijcnn1.bz2", [5000, 12000, 24000, 37492], [5000, 12000, 24000]),
        ("cod-rna", S / "cod-rna.xz", [5000, 12000, 24000, 44651], [5000, 12000, 24000, 44651]),
        ("letter", S / "letter.scale.xz", [4000, 11250], [2000, 4000]),
        (
            "covtype-synthetic",
            G / "covtype-synthetic" if G else None,
            [12000, 48000, 192000, 435759],
            [12000, 48000, 96000],
        ),
        (
            "webspam-synthetic",
            G / "webspam-synthetic" if G else None,
            [12000, 48000, 96000],
            [4000, 12000],
        ),
    ]
    only = {s for s in a.sets.split(",") if s}
    lines = [
        "# LIBLINEAR's cost per value as T grows (`scripts/calibrate_rows.py`)",
        "",
        f"Machine: {os.cpu_count()} cores; 1-minute load at the start {os.getloadavg()[0]:.1f}. "
        "Max-abs scaling, T of a seeded 3:1 split, stratified subsamples, "
        "CPU seconds of one process.",
        "`counted` is kcheck/costs/budget.py's count of the same work.",
        "",
        _row(
            "set",
            "what",
            "rows",
            "models",
            "values",
            "CPU s",
            "us / value",
            "C",
            "counted s",
            "CPU / counted",
        ),
        _row(*["---"] * 10),
    ]
    print("\n".join(lines), flush=True)
    for name, path, lin_rows, d2_rows in sets:
        if only and name not in only:
            continue
        if path is None or not path.exists():
            print(f"skipping {name}: {path} not found", file=sys.stderr)
            continue
        y, X = read_libsvm(str(path))
        X = fit_scaler(X, method="maxabs").transform(X)
        tr, _ = stratified_split(y, seed=0)
        yT, XT = y[tr], engines.as_binding_csr(X[tr])
        del X
        nw = budget.n_models(int(np.unique(yT).size))
        dim = degree2.expanded_dimension(int(XT.shape[1]))
        for what, sizes in (("linear", lin_rows), ("degree-2", d2_rows)):
            for n in sizes:
                keep = stratified_subsample(yT, n, seed=0) if n < yT.size else np.arange(yT.size)
                ys, Xs = yT[keep], XT[keep]
                rows = int(ys.size)
                if what == "linear":
                    values = int(Xs.nnz)
                    counted = budget.linear_seconds(values, int(np.unique(ys).size), rows)
                    t0 = time.process_time()
                    model, _ = tuning.fit_linear(Xs, ys, seed=0)
                else:
                    values = int(degree2.row_expanded_nnz(Xs).sum())
                    if values * nw > MAX_EXPANDED:
                        continue
                    counted = budget.degree2_seconds(values, int(np.unique(ys).size), rows, dim)
                    shift = degree2.Shift.of(Xs)
                    P = degree2.expand(shift.apply(Xs))
                    t0 = time.process_time()
                    model, _ = tuning.fit_linear(P, ys, seed=0)
                    del P
                cpu = time.process_time() - t0
                line = _row(
                    name,
                    what,
                    f"{rows:,}",
                    nw,
                    f"{values:,}",
                    f"{cpu:.2f}",
                    f"{cpu / values / nw * 1e6:.2f}",
                    f"{model.C:g}",
                    f"{counted:.2f}",
                    f"{cpu / counted:.2f}",
                )
                print(line, flush=True)
                lines.append(line)
    lines += ["", f"1-minute load at the end {os.getloadavg()[0]:.1f}."]
    a.output.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
