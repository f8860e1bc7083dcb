#!/usr/bin/env python3
"""What ``kcheck check --explain`` finds, and what it costs, on real and generated data.

Usage:
    python scripts/explain.py DATA_DIR [--sets a9a,ijcnn1,...] [-o scripts/results/explain.md]

For each data set one check runs in this process with ``--explain`` and ``--exact never``
(the proxies decide, as on large data). The table gives the baseline's and degree-2's accuracy
on V, linear + top-k products for every k reported, the top three terms, and the extra time of
the explanation (``explain.seconds``) as a multiple of the linear baseline's
(``linear.seconds``: its C search and training). Generated sets (fixed seeds) have a known
answer: circles (x1^2 + x2^2), xor in 10-D (x1*x2) and a linear control.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from kcheck.config import CheckConfig
from kcheck.pipeline import run
from kcheck.terms.explain import term_text

DEFAULT_SETS = "fourclass,svmguide1,german.numer,dna.scale,a9a,ijcnn1.bz2,cod-rna.xz,madelon.xz"


def generated(directory: Path) -> dict[str, Path]:
    """Sets with a known answer, seeded: 4,000 rows each."""
    rng = np.random.default_rng(2016)
    out = {}
    n = 4000
    X = rng.uniform(-1, 1, size=(n, 2))
    out["circles (2-D)"] = (X, np.where((X**2).sum(1) < 0.5, 1, -1))
    X = rng.uniform(-1, 1, size=(n, 10))
    out["xor in 10-D"] = (X, np.where(X[:, 0] * X[:, 1] > 0, 1, -1))
    X = rng.normal(size=(n, 8))
    score = X @ np.arange(1, 9) + 3 * rng.normal(size=n)
    out["linear control (8-D)"] = (X, np.where(score > 0, 1, -1))
    paths = {}
    for name, (X, y) in out.items():
        path = directory / (name.split()[0] + ".svm")
        with path.open("w") as f:
            for row, label in zip(X, y, strict=True):
                f.write(f"{label} " + " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(row)))
                f.write("\n")
        paths[name] = path
    return paths


def measure(name: str, path: Path) -> str:
    t0 = time.perf_counter()
    v = run(CheckConfig(train=str(path), exact="never", explain=True, jobs=1)).json
    lin = v["linear"]
    d2 = v["checkers"]["degree2"]
    ex = v["explain"]
    status = d2["status"] + (
        f" {100 * d2['fraction']:.1f}%" if d2["status"] == "subsampled" else ""
    )
    if not ex["available"]:
        return (
            f"| {name} | {v['data']['rows']:,} | {100 * lin['val_accuracy']:.1f} | — ({status}) "
            f"| no explanation: {ex['reason']} | — | — | {v['verdict']} |"
        )
    rec = ", ".join(f"k={r['k']}: {100 * r['val_accuracy']:.1f}" for r in ex["recovered"])
    terms = ", ".join(term_text(t["features"]) for t in ex["terms"][:3])
    ratio = ex["seconds"] / lin["seconds"]
    print(f"{name}: {time.perf_counter() - t0:.1f}s", flush=True)
    return (
        f"| {name} | {v['data']['rows']:,} | {100 * lin['val_accuracy']:.1f} | "
        f"{100 * d2['val_accuracy']:.1f} ({status}) | {rec} | {terms} | "
        f"{ex['seconds']:.2f} / {lin['seconds']:.2f} = {ratio:.2f}x | {v['verdict']} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--sets", default=DEFAULT_SETS)
    ap.add_argument("-o", "--output", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in generated(Path(tmp)).items():
            rows.append(measure(name, path))
        for name in args.sets.split(","):
            path = args.data_dir / name
            if path.exists():
                rows.append(measure(name.split(".bz2")[0].split(".xz")[0], path))
    head = [
        "| data | rows | linear % | degree-2 % (status) | linear + top-k products % | "
        "top terms | explain s / linear s | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    text = "\n".join([f"Machine: {machine}.", "", *head, *rows, ""])
    print(text)
    if args.output:
        args.output.write_text(text)


if __name__ == "__main__":
    main()
