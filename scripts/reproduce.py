#!/usr/bin/env python3
"""Reproduce Huang & Lin (SDM 2016) Table 3 with kcheck, side by side with the published numbers.

Usage: python scripts/reproduce.py DATA_DIR [-o scripts/results/reproduce.md] [--scaling both]

Runs the check as a library call on every paper data set found in DATA_DIR (see its
MANIFEST.tsv), under max-abs and min-max scaling, and writes a markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kcheck.config import CheckConfig
from kcheck.io.data import read_libsvm, write_libsvm  # noqa: E402
from kcheck.pipeline import run  # noqa: E402

# name -> (train file candidates, test file candidates, paper row)
PAPER = {
    "ijcnn1": ("92.4", "97.5 Y", "98.3 Y (K=52)", "98.6", "Y"),
    "madelon": ("58.6", "56.6 N", "68.4 Y (K=36)", "67.2", "Y"),
    "madelon(s)": ("62.4", "68.0 Y", "77.4 Y (K=36)", "78.7", "Y"),
    "poker": ("50.0", "59.5 Y", "55.1 Y (K=49)", "61.3", "Y"),
    "svmguide1": ("82.9", "95.4 Y", "95.4 Y (K=38)", "96.4", "Y"),
    "fourclass": ("75.0", "77.5 Y", "97.3 Y (K=32)", "100.0", "Y"),
    "a9a": ("85.1", "85.3 N", "84.7 N (K=50)", "84.9", "N"),
    "german.numer": ("77.2", "75.9 N", "68.5 N (K=33)", "77.3", "N"),
    "cod-rna": ("93.2", "94.8 U", "95.0 U (K=53)", "95.9", "U"),
}
SUFFIXES = ("", ".bz2", ".xz", ".gz")
NOTES = (
    "svmguide1: the paper says kernel, kcheck says linear. The paper's linear model had no bias "
    "term and scored 82.9% on V (78.9% on the test file); with `-B 1` it scores 95.6% (95.5% "
    "on svmguide1.t), and no checker gains 2 points on it. An RBF grid search confirms: "
    "`kcheck verify` gives 96.96% CV for RBF against 95.34% for linear (gap 1.6 points), and "
    "96.65% against 95.48% on svmguide1.t. With epsilon 0.02 the right answer is linear.",
    "cod-rna: the paper calls it undecided (U); kcheck says linear, since the best gap "
    "(MultiLinear, about 1.3 points) is under epsilon. The paper's own test accuracies "
    "(linear 95.0%, Gaussian 96.4%) put the real gap at 1.4 points, under 2.",
    "degree-2 runs in full, on a subsample, or is skipped, as its counted cost fits what the "
    "check's one budget (max(10 s, 1x the linear baseline's counted cost)) leaves after "
    "MultiLinear; on a subsample its gap is taken against a linear model trained on the same "
    "rows. On madelon it is skipped (500 dense features: 125,750 expanded values a row), "
    "where the paper found it wrong anyway.",
)
TEST_NAMES = {
    "svmguide1": "svmguide1.t",
    "a9a": "a9a.t",
    "ijcnn1": "ijcnn1.t",
    "madelon": "madelon.t",
    "cod-rna": "cod-rna.t",
}


def find(data_dir: Path, name: str) -> Path | None:
    for s in SUFFIXES:
        p = data_dir / (name + s)
        if p.is_file():
            return p
    return None


def poker_binary(path: Path, tmp: str) -> str:
    """The paper's poker task: class 0 against the rest (about 50/50)."""
    y, X = read_libsvm(str(path))
    out = os.path.join(tmp, "poker-0-vs-rest")
    write_libsvm(out, np.where(y == 0, 1.0, -1.0), X)
    return out


def madelon_useful(path: Path, test: Path | None, tmp: str) -> tuple[str, str | None, list[int]]:
    """madelon(s): madelon's 20 useful features, found from the training file alone.

    Five informative features and 15 linear combinations of them: each useful feature is
    strongly correlated with another (max |r| about 0.7-0.99), while the 480 noise features are
    independent (max |r| below 0.1 on 2,000 rows). The threshold 0.5 sits in that wide gap.
    """
    y, X = read_libsvm(str(path))
    D = X.toarray()
    C = np.corrcoef(D, rowvar=False)
    np.fill_diagonal(C, 0.0)
    keep = np.flatnonzero(np.nanmax(np.abs(C), axis=0) > 0.5)
    out = os.path.join(tmp, "madelon-s")
    write_libsvm(out, y, X[:, keep])
    out_t = None
    if test is not None:
        yt, Xt = read_libsvm(str(test), n_features=X.shape[1])
        out_t = os.path.join(tmp, "madelon-s.t")
        write_libsvm(out_t, yt, Xt[:, keep])
    return out, out_t, (keep + 1).tolist()


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("-o", "--output", type=Path, default=Path("scripts/results/reproduce.md"))
    ap.add_argument("--scaling", choices=["maxabs", "minmax", "both"], default="both")
    ap.add_argument("--only", default=None, help="comma-separated subset of data sets")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument(
        "--no-rff",
        dest="rff",
        action="store_false",
        help="leave out the table of the opt-in rff checker",
    )
    args = ap.parse_args()
    scalings = ["maxabs", "minmax"] if args.scaling == "both" else [args.scaling]
    names = args.only.split(",") if args.only else list(PAPER)

    rows = []
    rff_rows: list[tuple[str, dict[str, Any]]] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            base = "madelon" if name == "madelon(s)" else name
            path = find(args.data_dir, base)
            if path is None:
                print(f"skip {name}: not in {args.data_dir}", file=sys.stderr)
                continue
            train = poker_binary(path, tmp) if name == "poker" else str(path)
            test_path = find(args.data_dir, TEST_NAMES[base]) if base in TEST_NAMES else None
            if name == "madelon(s)":
                train, test_s, useful = madelon_useful(path, test_path, tmp)
                test_path = Path(test_s) if test_s else None
                notes.append(
                    f"madelon(s): the {len(useful)} features found useful (by "
                    f"correlation, on the training file) are {useful}."
                )
            for scaling in scalings:
                t0 = time.perf_counter()
                cfg = CheckConfig(
                    train=train,
                    test=str(test_path) if test_path else None,
                    scaling=scaling,
                    jobs=args.jobs,
                )
                v = run(cfg).json
                print(
                    f"{name} [{scaling}]: {v['verdict']} ({v['margin']}) "
                    f"in {time.perf_counter() - t0:.1f}s",
                    file=sys.stderr,
                    flush=True,
                )
                rows.append((name, scaling, v))
            if args.rff:
                cfg = CheckConfig(train=train, checkers=("rff",), exact="never", jobs=args.jobs)
                rff_rows.append((name, run(cfg).json))

    lines = [
        "# kcheck vs. Huang & Lin (2016), Table 3",
        "",
        f"Machine: {platform.node() or 'unknown'}, {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}; "
        f"run {time.strftime('%Y-%m-%d')} with `python scripts/reproduce.py DATA_DIR` "
        f"(--jobs {args.jobs}).",
        "",
        "Validation accuracy (%) on the seeded 3:1 split (seed 0); kcheck uses `-s 2 -B 1` "
        "(with a bias term), the paper trained without one. Seconds are wall time; `check` is "
        "the whole check after reading the file (reading is shared with the linear model and "
        "shown apart; scoring the test file is left out), `ratio` = check / linear baseline "
        "(C search + training). Where its counted cost fits the first measurement's budget "
        "(max(10 s, 1x the linear baseline's counted cost): half the one budget on small data), "
        "the exact RBF comparison runs and decides, which is what makes the ratio large on "
        "small data (fourclass, svmguide1, german.numer).",
        "",
        "| data set | scaling | linear | degree-2 (status) | MultiLinear (K) | exact RBF | "
        "verdict | s: read / linear / deg-2 / ML / exact / check | ratio | "
        "paper: linear / deg-2 / ML / Gaussian / dec. |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, scaling, v in rows:
        d2 = v["checkers"].get("degree2", {})
        ml = v["checkers"].get("multilinear", {})
        rbf = v["checkers"].get("rbf", {})
        lin_s = v["linear"]["seconds"]
        test_s = (v["test"] or {}).get("seconds", 0.0)
        check_s = v["seconds"] - v["read_seconds"] - test_s
        ratio = check_s / lin_s if lin_s > 0 else float("nan")
        p = PAPER[name]
        d2_txt = f"{pct(d2.get('val_accuracy'))} ({d2.get('status')}"
        if d2.get("status") == "subsampled":
            d2_txt += f" {100 * d2['fraction']:.0f}%"
        d2_txt += ")"
        lines.append(
            f"| {name} | {scaling} | {pct(v['linear']['val_accuracy'])} | {d2_txt} | "
            f"{pct(ml.get('val_accuracy'))} ({ml.get('clusters')}) | "
            f"{pct(rbf.get('val_accuracy')) if rbf else '-'} | "
            f"**{v['verdict']}** ({v['margin']}) | "
            f"{v['read_seconds']:.2f} / {lin_s:.2f} / {d2.get('seconds', 0):.2f} / "
            f"{ml.get('seconds', 0):.2f} / {rbf.get('seconds', 0):.2f} / {check_s:.2f} | "
            f"{ratio:.2f} | {' / '.join(p)} |"
        )
    tests = [(n, s, v) for n, s, v in rows if v.get("test")]
    if tests:
        lines += [
            "",
            "Test-file accuracy (%) of the models trained on T:",
            "",
            "| data set | scaling | linear | degree-2 | MultiLinear | exact RBF |",
            "|---|---|---|---|---|---|",
        ]
        for name, scaling, v in tests:
            t = v["test"]["accuracy"]
            lines.append(
                f"| {name} | {scaling} | {pct(t.get('linear'))} | "
                f"{pct(t.get('degree2'))} | {pct(t.get('multilinear'))} | "
                f"{pct(t.get('rbf'))} |"
            )
    if rff_rows:
        default = {n: v for n, s, v in rows if s == "maxabs"}
        lines += [
            "",
            "The opt-in rff checker (`--checkers ...,rff`; max-abs scaling, same split): its gap "
            "against the same linear baseline, and the verdict with it added to the default "
            "checkers (exact mode, where it ran, decides unless a proxy is clear of epsilon).",
            "",
            "| data set | rff val. | rff gap [95% CI] | D / rows | rff s | rff / linear | "
            "verdict: default -> with rff |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, r in rff_rows:
            c = r["checkers"]["rff"]
            base = default.get(name)
            before = base["verdict"] if base else "-"
            after = before
            exact_ran = bool(base and base["exact"]["ran"])
            if base and not exact_ran and c.get("gap") is not None and c["gap"] >= base["epsilon"]:
                after = "kernel"
            gap = (
                "-"
                if c.get("gap") is None
                else (
                    f"{100 * c['gap']:+.1f} [{100 * c['gap_ci95'][0]:+.1f}, "
                    f"{100 * c['gap_ci95'][1]:+.1f}]"
                )
            )
            lin_s = r["linear"]["seconds"]
            lines.append(
                f"| {name} | {pct(c.get('val_accuracy'))} | {gap} | "
                f"{c.get('D', '-')} / {c.get('rows', '-')} | {c['seconds']:.2f} | "
                f"{c['seconds'] / lin_s if lin_s > 0 else float('nan'):.1f} | "
                f"{before} -> {after} |"
            )
    lines += ["", "Notes:", "", *[f"- {n}" for n in (*NOTES, *_scaling_notes(rows), *notes)]]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def _scaling_notes(rows: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    """What this run says of min-max against max-abs scaling, from its own verdicts."""
    by = {(name, scaling): v for name, scaling, v in rows}
    names = [n for n in dict.fromkeys(name for name, _, _ in rows)]
    both = [n for n in names if (n, "maxabs") in by and (n, "minmax") in by]
    if not both:
        return []

    def said(v: dict[str, Any]) -> str:
        return f"{v['verdict']} ({v['margin']})"

    moved = [n for n in both if by[n, "maxabs"]["verdict"] != by[n, "minmax"]["verdict"]]
    if not moved:
        text = "min-max scaling: every verdict is the same as with max-abs."
    else:
        text = (
            "min-max scaling: the verdict differs from max-abs on "
            + "; ".join(
                f"{n} (max-abs {said(by[n, 'maxabs'])}, min-max {said(by[n, 'minmax'])})"
                for n in moved
            )
            + "."
        )
    notes = [text]
    mad = by.get(("madelon", "minmax"))
    rbf = (mad or {}).get("checkers", {}).get("rbf", {})
    if mad is not None and mad["verdict"] == "linear" and rbf.get("status") == "exact":
        notes.append(
            "madelon under min-max: exact mode tuned (C, gamma) on "
            f"{rbf.get('tune_rows')} of its {rbf.get('rows')} rows (gamma x the median squared "
            f"distance = {rbf['gamma'] * rbf['median_sq_distance']:.1f}), and in the repeated CV "
            f"on all rows that kernel gained {100 * rbf['gap']:+.1f} points over linear, so "
            "exact mode says linear, against the paper's kernel. The tuning sample chose a "
            "narrower kernel than the one that gains on this data, whose features are 96% noise: "
            "exact mode's margin does not count the tuning's own noise. A known limit."
        )
    a9a = {s: by[("a9a", s)] for s in ("maxabs", "minmax") if ("a9a", s) in by}
    if len(a9a) == 2:
        secs = {
            s: v["seconds"] - v["read_seconds"] - (v["test"] or {}).get("seconds", 0.0)
            for s, v in a9a.items()
        }
        notes.append(
            "max-abs stays the default: it keeps sparse data sparse (a9a's linear baseline took "
            f"{a9a['minmax']['linear']['seconds']:.1f} s under min-max and "
            f"{a9a['maxabs']['linear']['seconds']:.1f} s under max-abs; its check "
            f"{secs['minmax']:.1f} s and {secs['maxabs']:.1f} s)."
        )
    return notes


if __name__ == "__main__":
    raise SystemExit(main())
