#!/usr/bin/env python3
"""Generated data sets where the answer is known, to measure the checkers against it.

Usage:
    python scripts/hard_cases.py OUTDIR            # write NAME and NAME.t for each case
    python scripts/hard_cases.py OUTDIR --report   # also run the checkers, write the tables
        [--real FILE ...] [--seeds K] [--big] [-o scripts/results/rff_hard_cases.md]

The cases (all seeded, so the files are the same on every run):

* ``wavy5d``: 5 uniform features in [-1, 1]; the label is the sign of a linear trend in three
  features plus sin/cos waves in the other two. A linear SVM reaches about 88.5%, an RBF SVM
  95.7% (C = 100, gamma = 2, chosen by 3-fold CV on T), degree-2 and MultiLinear stay within
  1.5 points of linear on split seeds 0-2, so the paper's rule says "linear".
* ``spheres20d``: 20 Gaussian features; the label says whether |x|^2 lies above its median
  (nested spheres). Linear is at chance; degree-2 sees x_i^2 and solves it.
* ``xor10d``: 10 uniform features; the label is the parity of the signs of the first two.
* ``linear40d``: the control, 40 Gaussian features with labels from a noisy linear function
  (about 90% reachable, by a linear model as well as by any other).

``--report`` runs the check (linear, degree-2, MultiLinear) through :func:`kcheck.pipeline.run`
on every case and on the real sets (``--real``; by default german.numer, heart_scale,
svmguide1, fourclass from ``datasets/`` and a9a, dna.scale, ijcnn1 from ``../shared/datasets``),
runs the rff checker on the same T and V (the split reproduced exactly: max-abs scaling, then
``stratified_split``), and writes markdown tables of accuracies, gaps, verdicts with and without
rff, and time ratios to the linear baseline. On the linear controls and on wavy5d it repeats
this for split seeds 0..K-1 and counts the "kernel" verdicts (false ones on the controls).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kcheck.checkers import linear, rff  # noqa: E402
from kcheck.checkers.base import Dataset  # noqa: E402
from kcheck.config import CheckConfig  # noqa: E402
from kcheck.io.data import read_libsvm, write_libsvm  # noqa: E402
from kcheck.memory import default_memory_limit  # noqa: E402
from kcheck.pipeline import run  # noqa: E402
from kcheck.scaling.fitting import fit_scaler  # noqa: E402
from kcheck.split import stratified_split, stratified_subsample  # noqa: E402
from kcheck.verdict import Gap, decide, paired_gap  # noqa: E402

Case = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]


def _signs(score: np.ndarray) -> np.ndarray:
    return np.where(score > 0, 1.0, -1.0)


def wavy5d(rng: np.random.Generator, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """A wavy boundary: a linear trend in x2, x3, x4 plus waves of frequency 6.5 in x1 and x5.

    The waves are short next to the clusters MultiLinear can afford in 5-D and are not
    polynomial, so degree-2 and MultiLinear stay within 2 points of the linear model.
    """
    X = rng.uniform(-1.0, 1.0, size=(rows, 5))
    x1, x2, x3, x4, x5 = X.T
    f = x2 + 0.5 * x3 - 0.3 * x4 + 0.28 * (np.sin(6.5 * x1) + np.cos(6.5 * x5))
    return X, _signs(f - WAVY_OFFSET)


#: Median of the wavy score over 10^6 uniform points (seed 0), so that the classes balance.
WAVY_OFFSET = 0.0086


def spheres20d(rng: np.random.Generator, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Nested spheres: inside or outside the median radius of a 20-D standard normal."""
    X = rng.standard_normal((rows, 20))
    return X, _signs(np.einsum("ij,ij->i", X, X) - CHI2_20_MEDIAN)


#: Median of the chi-square distribution with 20 degrees of freedom.
CHI2_20_MEDIAN = 19.337429229428


def xor10d(rng: np.random.Generator, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """XOR: the parity of the signs of features 1 and 2; features 3..10 are noise."""
    X = rng.uniform(-1.0, 1.0, size=(rows, 10))
    return X, _signs(X[:, 0] * X[:, 1])


def linear40d(rng: np.random.Generator, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The linear control: sign(w.x + noise) with noise at 0.3 |w| (Bayes rate about 91%)."""
    w = np.random.default_rng(4040).standard_normal(40)
    X = rng.standard_normal((rows, 40))
    noise = 0.3 * np.linalg.norm(w) * rng.standard_normal(rows)
    return X, _signs(X @ w + noise)


#: name -> (generator, train rows, test rows, seed)
CASES: dict[str, tuple[Case, int, int, int]] = {
    "wavy5d": (wavy5d, 12_000, 6_000, 501),
    "spheres20d": (spheres20d, 10_000, 5_000, 502),
    "xor10d": (xor10d, 8_000, 4_000, 503),
    "linear40d": (linear40d, 5_000, 5_000, 504),
}


def generate(outdir: Path) -> list[Path]:
    """Write NAME (train) and NAME.t (test) for every case; returns the train paths."""
    outdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, (make, n_train, n_test, seed) in CASES.items():
        rng = np.random.default_rng(seed)
        X, y = make(rng, n_train + n_test)
        write_libsvm(outdir / name, y[:n_train], X[:n_train])
        write_libsvm(outdir / f"{name}.t", y[n_train:], X[n_train:])
        paths.append(outdir / name)
    return paths


#: Real sets of the report: (path, expected answer). "linear" ones are the controls.
REAL_SETS = [
    (ROOT / "datasets" / "german.numer", "linear"),
    (ROOT / "datasets" / "heart_scale", "linear"),
    (ROOT / "datasets" / "svmguide1", "linear"),
    (ROOT.parent / "shared" / "datasets" / "a9a", "linear"),
    (ROOT.parent / "shared" / "datasets" / "dna.scale", "linear"),
    (ROOT / "datasets" / "fourclass", "kernel"),
    (ROOT.parent / "shared" / "datasets" / "ijcnn1.bz2", "kernel"),
]
#: Expected answer of each generated case.
CASE_ANSWER = {
    "wavy5d": "kernel",
    "spheres20d": "kernel",
    "xor10d": "kernel",
    "linear40d": "linear",
}
EPSILON = 0.02
OTHERS = ("degree2", "multilinear")


@dataclass
class Row:
    """One data set and split seed: the pipeline's JSON plus the rff run on the same T and V."""

    name: str
    seed: int
    answer: str
    check: dict[str, Any]
    rff: dict[str, Any]

    def gaps(self, with_rff: bool) -> dict[str, Gap]:
        out = {}
        for name in OTHERS:
            c = self.check["checkers"].get(name)
            if c and c["gap"] is not None:
                out[name] = Gap(c["gap"], *c["gap_ci95"])
        if with_rff and self.rff["gap"] is not None:
            out["rff"] = self.rff["gap"]
        return out

    def verdict(self, with_rff: bool) -> str:
        d = decide(self.gaps(with_rff), EPSILON)
        return f"{d.verdict} ({d.margin})"


def run_rff(path: str, seed: int, test: str | None) -> dict[str, Any]:
    """rff on the pipeline's T and V: same reading, max-abs scaling and stratified split."""
    y, X = read_libsvm(path)
    scaler = fit_scaler(X, method="maxabs")
    X = scaler.transform(X)
    tr, va = stratified_split(y, seed=seed)
    T, V = Dataset(X[tr], y[tr]), Dataset(X[va], y[va])
    base = linear.run(T, V, linear.LinearOptions(seed=seed))
    opts = rff.RffOptions(
        seed=seed, memory_limit=default_memory_limit(), linear_seconds=base.seconds
    )
    res = rff.run(T, V, opts, rff.plan_rows(T, opts))
    out: dict[str, Any] = {
        "status": res.status,
        "reason": res.reason,
        "info": res.info,
        "seconds": res.seconds,
        "linear_seconds": base.seconds,
        "linear_val": base.val_accuracy,
        "val": res.val_accuracy,
        "gap": None,
        "gap_same_rows": None,
        "test": None,
    }
    if res.correct is None or base.correct is None:
        return out
    out["gap"] = paired_gap(res.correct, base.correct)
    rows = int(res.info["rows"])
    if rows < T.rows:
        # The linear model on the rows rff trained on: what a same-rows reference would say.
        keep = stratified_subsample(T.y, rows, seed=seed)
        ref = linear.run(Dataset(T.X[keep], T.y[keep]), V, linear.LinearOptions(seed=seed))
        assert ref.correct is not None
        out["gap_same_rows"] = paired_gap(res.correct, ref.correct).value
    else:
        out["gap_same_rows"] = out["gap"].value
    if test is not None and res.predict is not None:
        yt, Xt = read_libsvm(test, n_features=X.shape[1])
        out["test"] = float(np.mean(res.predict(scaler.transform(Xt)) == yt))
    return out


def check_config(**kwargs: Any) -> CheckConfig:
    """The pipeline's config with its exact RBF comparison off, where it has one: this report
    measures the proxies, and the exact comparison would decide small sets on its own."""
    if "exact" in {f.name for f in dataclasses.fields(CheckConfig)}:
        kwargs["exact"] = "never"
    return CheckConfig(**kwargs)


def evaluate(path: Path, seed: int, answer: str, with_test: bool) -> Row:
    test = Path(str(path) + ".t")
    test_path = str(test) if with_test and test.is_file() else None
    check = run(check_config(train=str(path), test=test_path, seed=seed, checkers=OTHERS)).json
    r = run_rff(str(path), seed, test_path)
    if r["linear_val"] is not None:
        assert abs(r["linear_val"] - check["linear"]["val_accuracy"]) < 1e-6, (
            f"{path}: the reproduced split does not match the pipeline's"
        )
    return Row(path.name.split(".bz2")[0], seed, answer, check, r)


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"


def _ratio(seconds: float | None, base: float) -> str:
    return "-" if seconds is None else f"{seconds / max(base, 1e-9):.1f}x"


def _checker_cells(row: Row, name: str) -> tuple[str, str, str]:
    c = row.check["checkers"].get(name) or {}
    if c.get("status") == "skipped":
        return "skipped", "-", _ratio(c.get("seconds"), row.check["linear"]["seconds"])
    note = " (sub)" if c.get("status") == "subsampled" else ""
    return (
        _pct(c.get("val_accuracy")) + note,
        _pct(c.get("gap"), True),
        _ratio(c.get("seconds"), row.check["linear"]["seconds"]),
    )


def _rff_cells(row: Row) -> tuple[str, str, str]:
    r = row.rff
    if r["status"] == "skipped":
        return "skipped", "-", _ratio(r["seconds"], r["linear_seconds"])
    gap = r["gap"].value if r["gap"] is not None else None
    return _pct(r["val"]), _pct(gap, True), _ratio(r["seconds"], r["linear_seconds"])


def table(rows: list[Row], with_test: bool) -> list[str]:
    head = (
        "| data | answer | linear | degree-2 | gap | time | MultiLinear | gap | time | "
        "rff | gap | gap (same rows) | time | rff plan | verdict without rff | "
        "verdict with rff |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        d2 = _checker_cells(row, "degree2")
        ml = _checker_cells(row, "multilinear")
        rf = _rff_cells(row)
        info = row.rff["info"]
        plan = (
            f"{info['rows']:,} rows ({100 * info['fraction']:.0f}%), D={info['D']}, "
            f"gamma={info['gamma_multiple']:g}/med"
            if info
            else row.rff["reason"] or "-"
        )
        lines.append(
            f"| {row.name} | {row.answer} | {_pct(row.check['linear']['val_accuracy'])} "
            f"({row.check['linear']['seconds']:.2f}s) | {' | '.join(d2)} | {' | '.join(ml)} | "
            f"{rf[0]} | {rf[1]} | {_pct(row.rff['gap_same_rows'], True)} | {rf[2]} | {plan} | "
            f"{row.verdict(False)} | {row.verdict(True)} |"
        )
    if with_test:
        lines += [
            "",
            "Accuracy on the test files (models trained on T):",
            "",
            "| data | linear | degree-2 | MultiLinear | rff |",
            "|---|---|---|---|---|",
        ]
        for row in rows:
            t = (row.check.get("test") or {}).get("accuracy") or {}
            lines.append(
                f"| {row.name} | {_pct(t.get('linear'))} | {_pct(t.get('degree2'))} | "
                f"{_pct(t.get('multilinear'))} | {_pct(row.rff['test'])} |"
            )
    return lines


def seed_table(rows: list[Row]) -> list[str]:
    """Per data set: how many split seeds give a kernel verdict, without and with rff."""
    lines = [
        "| data | answer | seeds | kernel verdicts without rff | with rff | "
        "rff gaps (points) | rff / linear time (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    names = list(dict.fromkeys(r.name for r in rows))
    for name in names:
        rs = [r for r in rows if r.name == name]
        without = sum(r.verdict(False).startswith("kernel") for r in rs)
        with_ = sum(r.verdict(True).startswith("kernel") for r in rs)
        gaps = " ".join(_pct(r.rff["gap"].value if r.rff["gap"] else None, True) for r in rs)
        ratio = float(
            np.median([r.rff["seconds"] / max(r.rff["linear_seconds"], 1e-9) for r in rs])
        )
        lines.append(
            f"| {name} | {rs[0].answer} | {len(rs)} | {without} | {with_} | {gaps} | {ratio:.1f}x |"
        )
    return lines


#: Large versions of two cases, where nnz(T) (9M, 12M) is past the floor (6.4M) and the cost
#: rule sets rows and D.
BIG_CASES = [("wavy5d", 2_400_000), ("linear40d", 400_000)]


def big_table() -> list[str]:
    """rff against linear where the work budget, not the floor, sets rows and D."""
    import scipy.sparse as sp

    lines = [
        "| data | rows | nnz(T) | linear | time | rff | gap | time | ratio | rff plan |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rows in BIG_CASES:
        make = CASES[name][0]
        X, y = make(np.random.default_rng(9), rows)
        Xs = fit_scaler(sp.csr_matrix(X), method="maxabs").transform(sp.csr_matrix(X))
        tr, va = stratified_split(y, seed=0)
        T, V = Dataset(Xs[tr], y[tr]), Dataset(Xs[va], y[va])
        base = linear.run(T, V, linear.LinearOptions())
        res = rff.run(T, V, rff.RffOptions(), rff.plan_rows(T, rff.RffOptions()))
        assert base.val_accuracy is not None and res.val_accuracy is not None
        i = res.info
        lines.append(
            f"| {name} | {rows:,} | {T.X.nnz:,} | {_pct(base.val_accuracy)} | "
            f"{base.seconds:.1f}s | {_pct(res.val_accuracy)} | "
            f"{_pct(res.val_accuracy - base.val_accuracy, True)} | {res.seconds:.1f}s | "
            f"{res.seconds / base.seconds:.2f}x | {i['rows']:,} rows, D={i['D']}, "
            f"gamma={i['gamma_multiple']:g}/med |"
        )
        print(lines[-1], file=sys.stderr)
    return lines


def report(
    outdir: Path, real: list[tuple[Path, str]], seeds: int, out: Path, big: bool = False
) -> None:
    t0 = time.perf_counter()
    cases = [(outdir / name, CASE_ANSWER[name]) for name in CASES]
    generated = [evaluate(p, 0, a, with_test=True) for p, a in cases]
    for r in generated:
        print(f"{r.name}: {r.verdict(False)} -> {r.verdict(True)}", file=sys.stderr)
    real_rows = [evaluate(p, 0, a, with_test=False) for p, a in real]
    for r in real_rows:
        print(f"{r.name}: {r.verdict(False)} -> {r.verdict(True)}", file=sys.stderr)
    # Every linear control, and the one case only rff should catch, over more split seeds.
    repeated = [(outdir / "wavy5d", "kernel"), (outdir / "linear40d", "linear")]
    repeated += [(p, a) for p, a in real if a == "linear"]
    names = {p.name.split(".bz2")[0] for p, _ in repeated}
    seeded = [r for r in real_rows + generated if r.name in names]
    for p, a in repeated:
        for s in range(1, seeds):
            seeded.append(evaluate(p, s, a, with_test=False))
            print(f"{p.name} seed {s}: {seeded[-1].verdict(True)}", file=sys.stderr)
    seeded.sort(key=lambda r: (r.answer, r.name, r.seed))
    defaults = rff.RffOptions()
    lines = [
        "# rff checker: generated hard cases and real sets",
        "",
        f"Generated by `python scripts/hard_cases.py {outdir} --report --seeds {seeds}"
        f"{' --big' if big else ''}` on "
        f"{platform.node() or 'this machine'} ({os.cpu_count()} cores, Python "
        f"{platform.python_version()}), in {time.perf_counter() - t0:.0f} s.",
        "",
        "Accuracies are on V (a quarter of the training file, split seed 0, max-abs scaling), "
        "in percent; gaps are Val(checker) - Val(linear on all of T) in points. Times are "
        "each checker's seconds over the linear baseline's (for rff: the linear model timed "
        "right before it, in the same process). The verdict is `kernel` when any gap reaches "
        f"{100 * EPSILON:.0f} points (the proxies' rule; the pipeline's exact RBF "
        "comparison is off here). `gap (same rows)` compares rff with a linear model "
        "trained on the rows rff used; the pipeline does not use it. rff defaults: gamma "
        f"multiples {defaults.gamma_multiples} x 1/median, D {defaults.min_features}-"
        f"{defaults.max_features}, at least {defaults.min_rows:,} rows, work "
        f"{defaults.cost_ratio:g} x nnz(T) entries of z(T) over all candidates.",
        "",
        "## Generated cases",
        "",
        *table(generated, with_test=True),
        "",
        "## Real sets",
        "",
        *table(real_rows, with_test=False),
        "",
        f"## Verdicts over split seeds 0-{seeds - 1}: false kernels on the linear controls, "
        "and wavy5d",
        "",
        *seed_table(seeded),
        "",
    ]
    if big:
        lines += [
            "## Large generated sets (the cost rule instead of the floor)",
            "",
            "Generated in memory (seed 9), max-abs scaled, split seed 0; rff against the "
            "linear baseline only.",
            "",
            *big_table(),
            "",
        ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print(out, file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--report", action="store_true", help="run the checkers, write the tables")
    ap.add_argument(
        "--real",
        type=Path,
        nargs="*",
        default=None,
        help="real sets as linear controls (default: see above)",
    )
    ap.add_argument("--seeds", type=int, default=5, help="split seeds for the linear controls")
    ap.add_argument(
        "--big", action="store_true", help="also time rff on large generated sets (a few minutes)"
    )
    ap.add_argument(
        "-o", "--output", type=Path, default=ROOT / "scripts" / "results" / "rff_hard_cases.md"
    )
    args = ap.parse_args(argv)
    for p in generate(args.outdir):
        print(p)
    if args.report:
        if args.real is None:
            real = [(p, a) for p, a in REAL_SETS if p.is_file()]
        else:
            real = [(p, "linear") for p in args.real]
        report(args.outdir, real, max(1, args.seeds), args.output, args.big)
    return 0


if __name__ == "__main__":
    sys.exit(main())
