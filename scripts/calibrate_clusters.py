#!/usr/bin/env python3
"""MultiLinear's cluster trainings: each cluster's rows, classes and CPU seconds against its
share of scripts/stage_predictions.py's prediction.

Usage:
    python scripts/calibrate_clusters.py FILE [FILE ...] [--json OUT.json]

For each LIBSVM training file: read, scale and split (seed 0) as a check does, then run the
MultiLinear checker itself (kcheck.checkers.multilinear.run, one job), timing its k-means and
each cluster's training (its -C search) where it calls them. Printed per file: the k-means
CPU seconds, the trainings' CPU seconds, the classes a cluster holds (median and most,
weighted by its stored values), and the prediction's assumption (the square root of the
one-vs-rest models) beside the models the clusters trained; the prediction before k-means
(scripts/stage_predictions.py.predicted_seconds) and once it has run (``revised``: the checker's
``revised_seconds``, kcheck.costs.solvers.clusters_seconds of its clusters' rows, values and
classes), at this machine's pace (kcheck.costs.pace), against the CPU seconds. Nothing here
changes what kcheck computes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "scripts"))

import stage_predictions as costs  # noqa: E402
from calibrate_rbfsvm import split  # noqa: E402

from kcheck.checkers import kmeans as km  # noqa: E402
from kcheck.checkers import multilinear  # noqa: E402
from kcheck.checkers.base import Counts, cpu_seconds  # noqa: E402
from kcheck.costs import budget  # noqa: E402
from kcheck.costs import pace as probe  # noqa: E402


def measure(path: Path) -> dict[str, Any]:
    """MultiLinear's own run (kcheck.checkers.multilinear.run, one job), its k-means and each
    cluster's training timed where the checker calls them."""
    T, V = split(path)
    counts = Counts.of(T, V)
    k = km.n_clusters(T.rows)
    kmeans_cpu = [0.0]
    clusters: list[dict[str, Any]] = []
    kmeans, fit_cluster = km.kmeans, multilinear._fit_cluster

    def timed_kmeans(*a: Any, **kw: Any) -> Any:
        c0 = cpu_seconds()
        out = kmeans(*a, **kw)
        kmeans_cpu[0] += cpu_seconds() - c0
        return out

    def timed_fit(X: Any, y: np.ndarray, *a: Any, **kw: Any) -> Any:
        c0 = cpu_seconds()
        out = fit_cluster(X, y, *a, **kw)
        clusters.append(
            {
                "rows": int(y.size),
                "nnz": int(X.nnz),
                "classes": int(np.unique(y).size),
                "cpu": cpu_seconds() - c0,
            }
        )
        return out

    km.kmeans, multilinear._fit_cluster = timed_kmeans, timed_fit
    try:
        r = multilinear.run(T, V, multilinear.MultiLinearOptions(seed=0))
    finally:
        km.kmeans, multilinear._fit_cluster = kmeans, fit_cluster
    return {
        "revised": r.info["revised_seconds"],
        "set": path.name,
        "rows": T.rows,
        "nnz": int(T.X.nnz),
        "features": int(T.X.shape[1]),
        "classes": counts.n_classes,
        "k": k,
        "kmeans_cpu": kmeans_cpu[0],
        "predicted": costs.predicted_seconds("multilinear", counts, T.rows, None),
        "clusters": clusters,
    }


def line(r: dict[str, Any], pace: float) -> str:
    cl = r["clusters"]
    trained = sum(c["cpu"] for c in cl)
    # Classes a cluster's values sit in: each cluster weighted by its stored values.
    weights = np.array([c["nnz"] for c in cl], dtype=float)
    classes = np.array([c["classes"] for c in cl], dtype=float)
    models = np.array([budget.n_models(int(c)) for c in classes], dtype=float)
    held = float(np.average(models, weights=weights)) if weights.sum() else 0.0
    assumed = math.sqrt(budget.n_models(r["classes"])) if r["classes"] > 2 else 1.0
    cpu = r["kmeans_cpu"] + trained
    predicted = (r["predicted"] or 0.0) * pace
    revised = r["revised"] * pace
    return (
        f"| {r['set']} | {r['rows']:,} x {r['features']:,} ({r['classes']}) | {r['k']} | "
        f"{r['kmeans_cpu']:.2f} | {trained:.2f} | {np.median(classes):.0f} | "
        f"{classes.max():.0f} | {held:.1f} | {assumed:.1f} | {predicted:.2f} | "
        f"{cpu / predicted if predicted else float('nan'):.2f} | {revised:.2f} | "
        f"{cpu / revised if revised else float('nan'):.2f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    pace = probe.pace(probe.probe_seconds())
    print(f"pace {pace:.2f} (CPU seconds per reference second, kcheck.costs.pace)")
    print(
        "| set | T (classes) | K | k-means CPU s | trainings CPU s | classes a cluster: "
        "median | most | models a cluster, by values | assumed | predicted s | "
        "CPU / predicted | revised s | CPU / revised |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    records = []
    for path in a.files:
        records.append(measure(path))
        print(line(records[-1], pace), flush=True)
    if a.json is not None:
        a.json.write_text(json.dumps({"pace": pace, "cases": records}, indent=1) + "\n")


if __name__ == "__main__":
    main()
