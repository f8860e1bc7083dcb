#!/usr/bin/env python3
"""Measure the rbfsvm checker's CPU seconds against its counted estimate (kcheck/costs/budget.py).

Usage:
    python scripts/calibrate_rbfsvm.py FILE [FILE ...] [--rows N] [-o OUT.md]
    python scripts/calibrate_rbfsvm.py --kernel-cost FILE [FILE ...]

For each LIBSVM training file: read, scale and split (seed 0) as a check does, plan the check
with the default checkers (kcheck.plan.make) and run :func:`kcheck.checkers.rbfsvm.check` with
the budget the plan leaves it, so that it trains on the rows the plan gives it (``--rows N``:
on a stratified sample of N rows of T instead, with the fewest tuning rows, whatever the
budget). Reported: the counted
seconds (the plan's estimate; ``predicted`` is scripts/stage_predictions.py's prediction from
it), the CPU
seconds (this process and its children), of which the grid search on the tuning sample and the
LIBSVM trainings; the rest is mostly the trainings' predictions and, on a sample, its linear
reference. ``revised``: the stage's prediction once its search has run (the JSON's
``revised_seconds``), set against the CPU seconds at this machine's pace (kcheck.costs.pace).
Per training: rows, support vectors and LIBSVM's iterations (kcheck.bindings.engines counts them
from
the lines LIBSVM prints).
``--json OUT``: each case's search, trainings and predictions, CPU seconds and counts.

``--kernel-cost``: LIBSVM's cost of one RBF kernel evaluation on each file's rows: a model
trained at C = 2^-8 on 1,500 rows (nearly every row a support vector) predicts 1,500 more;
CPU seconds / (rows predicted x support vectors), per evaluation and per (stored values of a
row + 1), the unit of ``budget.RBF_SECONDS_PER_WORK``. Nothing here changes what kcheck computes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import stage_predictions as costs  # noqa: E402

from kcheck import plan  # noqa: E402
from kcheck.bindings import engines  # noqa: E402
from kcheck.checkers import rbfsvm  # noqa: E402
from kcheck.checkers.base import Allowance, Context, Counts, Dataset, cpu_seconds  # noqa: E402
from kcheck.costs import budget  # noqa: E402
from kcheck.costs import pace as probe  # noqa: E402
from kcheck.defaults import DEFAULT_CHECKERS  # noqa: E402
from kcheck.memory import default_memory_limit  # noqa: E402
from kcheck.prepare import prepare  # noqa: E402
from kcheck.split import stratified_split, stratified_subsample  # noqa: E402
from kcheck.tuning import rbf_sample as rbf_tuning  # noqa: E402

#: One record a case for ``--json``: the search's and each LIBSVM call's CPU seconds and counts.
_records: list[dict[str, Any]] = []


class _Trainings:
    """Wraps engines.train_rbf: CPU seconds, rows, support vectors, iterations of each call."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self._train = engines.train_rbf

    def __call__(self, problem: Any, C: float, gamma: float, **kw: Any) -> Any:
        i0 = engines.svm_iterations()
        c0 = cpu_seconds()
        m = self._train(problem, C, gamma, **kw)
        took = cpu_seconds() - c0
        iters = engines.svm_iterations() - i0
        self.calls.append(
            {
                "rows": problem.n_rows,
                "C": C,
                "gamma": gamma,
                "sv": m.n_sv,
                "iters": iters,
                "cpu": took,
            }
        )
        return m


def split(path: Path) -> tuple[Dataset, Dataset]:
    data = prepare(str(path), scaling="maxabs", memory_limit=default_memory_limit())
    tr, va = stratified_split(data.y, seed=0)
    return Dataset(data.X[tr], data.y[tr]), Dataset(data.X[va], data.y[va])


def measure(path: Path, rows: int | None, pace: float = 1.0) -> str:
    T, V = split(path)
    counts = Counts.of(T, V)
    step = plan.make(counts, plan.Options(checkers=DEFAULT_CHECKERS)).step(rbfsvm.NAME)
    assert step is not None
    allowed = step.budget_seconds or 0.0
    if rows is not None and rows < T.rows:
        keep = stratified_subsample(T.y, rows, seed=0)
        T = Dataset(T.X[keep], T.y[keep])
        counts = Counts.of(T, V)
        # The ladder's first rung of tuning rows, as on a sample the plan chose.
        allowed = rbfsvm.counted_seconds(counts, rbf_tuning.TUNE_ROWS) + 1e-6
    ctx = Context(
        seed=0,
        jobs=1,
        epsilon=0.02,
        memory_limit=8 << 30,
        deadline=None,
        baseline=None,
    )
    sized = rbfsvm.size(counts, Allowance(8 << 30, allowed))
    trainings = _Trainings()
    search: dict[str, Any] = {"cpu": 0.0}
    search_sample = rbfsvm._search_sample
    predictions: list[dict[str, Any]] = []
    reference = rbfsvm.sample_reference
    predict = engines.RbfModel.predict

    def timed_search(*a: Any, **k: Any) -> Any:
        c0 = cpu_seconds()
        out = search_sample(*a, **k)
        search["cpu"] += cpu_seconds() - c0
        found, tune_rows = out
        search["revised"] = rbfsvm._search_seconds(counts, tune_rows) + rbf_tuning.beyond_count(
            found, tune_rows, counts.n_classes, a[3]
        )
        search["points"] = [
            [c, g, found.support_vectors.get((c, g)), found.iterations.get((c, g))]
            for c, g in found.scores
        ]
        search["best"] = [found.log2_C, found.log2_gamma]
        return out

    def timed_reference(*a: Any, **k: Any) -> Any:
        c0 = cpu_seconds()
        out = reference(*a, **k)
        search["reference_cpu"] = cpu_seconds() - c0
        search["reference_rows"] = a[0].rows
        return out

    def timed_predict(model: Any, X: Any) -> Any:
        c0 = cpu_seconds()
        out = predict(model, X)
        predictions.append({"rows": X.shape[0], "sv": model.n_sv, "cpu": cpu_seconds() - c0})
        return out

    engines.train_rbf = trainings
    rbfsvm._search_sample = timed_search
    rbfsvm.sample_reference = timed_reference
    engines.RbfModel.predict = timed_predict  # type: ignore[method-assign]
    try:
        c0 = cpu_seconds()
        r = rbfsvm.check(T, V, ctx, sized)
        cpu = cpu_seconds() - c0
    finally:
        engines.train_rbf = trainings._train
        rbfsvm._search_sample = search_sample
        rbfsvm.sample_reference = reference
        engines.RbfModel.predict = predict  # type: ignore[method-assign]
    if r.status == "skipped":
        return f"| {path.name} | {counts.rows:,} | skipped: {r.reason} |"
    trained = int(r.info["rows"])
    sc = rbfsvm.sampled(counts, trained)
    counted = float(r.counted_seconds or 0.0)
    predicted = costs.predicted_seconds(rbfsvm.NAME, counts, trained, counted) or 0.0
    fits = sum(c["cpu"] for c in trainings.calls)
    per_row = max(c["iters"] / c["rows"] for c in trainings.calls)
    sv = max(c["sv"] / c["rows"] for c in trainings.calls)
    top_C = max(c["C"] for c in trainings.calls)
    merge = budget.sparse_merge_factor(sc.features, sc.nnz, sc.rows)
    revised = float(r.info["revised_seconds"])
    _records.append(
        {
            "set": path.name,
            "rows": counts.rows,
            "val_rows": counts.val_rows,
            "nnz": counts.nnz,
            "features": counts.features,
            "classes": counts.n_classes,
            "trained_rows": trained,
            "tune_rows": r.info["tune_rows"],
            "counted": counted,
            "revised": r.info.get("revised_seconds"),
            "cpu": cpu,
            "search_cpu": search["cpu"],
            "search_revised": search.get("revised"),
            "search_points": search.get("points"),
            "search_best": search.get("best"),
            "reference_cpu": search.get("reference_cpu"),
            "reference_rows": search.get("reference_rows"),
            "trainings": trainings.calls,
            "predictions": predictions,
        }
    )
    return (
        f"| {path.name} | {counts.rows:,} x {counts.features:,} ({counts.n_classes}) | "
        f"{trained:,} | {r.info['tune_rows']:,} | {merge:.2f} | 2^{np.log2(top_C):g} | "
        f"{sv:.2f} | {per_row:.0f} | {counted:.2f} | {predicted:.2f} | {cpu:.2f} | "
        f"{cpu / counted:.2f} | {cpu / predicted:.2f} | {search['cpu']:.2f} | {fits:.2f} | "
        f"{revised:.2f} | {cpu / (revised * pace):.2f} |"
    )


def kernel_cost(path: Path) -> str:
    data = prepare(str(path), scaling="maxabs", memory_limit=default_memory_limit())
    n = data.X.shape[0]
    m = min(1_500, n // 2)
    idx = np.random.default_rng(0).permutation(stratified_subsample(data.y, 2 * m, seed=0))
    a, b = np.sort(idx[:m]), np.sort(idx[m:])
    Xa = engines.as_binding_csr(data.X[a])
    sq = np.asarray(Xa.multiply(Xa).sum(axis=1)).ravel()
    gamma = 1.0 / max(2.0 * float(np.median(sq)), 1e-9)
    model = engines.train_rbf(
        engines.SvmProblem.from_data(Xa, np.asarray(data.y[a], dtype=np.float64), None),
        2.0**-8,
        gamma,
    )
    c0 = cpu_seconds()
    model.predict(data.X[b])
    ns = (cpu_seconds() - c0) / (b.size * model.n_sv) * 1e9
    k = data.X.nnz / n
    F = data.X.shape[1]
    return (
        f"| {path.name} | {k:.1f} | {F:,} | {k / F:.4f} | "
        f"{budget.sparse_merge_factor(F, data.X.nnz, n):.2f} | {ns:.0f} | {ns / (k + 1):.1f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--rows", type=int, default=None, help="train on N rows of T")
    ap.add_argument("--kernel-cost", action="store_true", help="cost per kernel evaluation")
    ap.add_argument("-o", "--output", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None, help="per-case records, each call's")
    a = ap.parse_args()
    load = os.getloadavg()[0]
    if a.kernel_cost:
        head = [
            "| set | values a row | features | density | merge factor | ns / evaluation | "
            "ns / (values + 1) |",
            "|---|---|---|---|---|---|---|",
        ]
    else:
        head = [
            "| set | T (classes) | rows trained | tune rows | merge factor | top C | "
            "most SVs / rows | most iterations / row | counted s | predicted s | CPU s | "
            "CPU / counted | CPU / predicted | search CPU s | trainings CPU s | revised s | "
            "CPU / (revised x pace) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    pace = probe.pace(probe.probe_seconds())
    lines = [
        f"load average {load:.1f} at the start; pace {pace:.2f} (CPU seconds per reference "
        "second, kcheck.costs.pace)",
        "",
        *head,
    ]
    for path in a.files:
        lines.append(kernel_cost(path) if a.kernel_cost else measure(path, a.rows, pace))
        print(lines[-1], flush=True)
    if a.output is not None:
        a.output.write_text("\n".join(lines) + "\n")
    if a.json is not None:
        a.json.write_text(json.dumps(_records, indent=1) + "\n")


if __name__ == "__main__":
    main()
