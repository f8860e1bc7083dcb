#!/usr/bin/env python3
"""The extra cost of ``kcheck check --explain`` against the linear baseline, on bench.md's sets.

Usage:
    python scripts/bench_explain.py DATA_DIR [--sets covtype,webspam,ijcnn1,cod-rna,a9a]
                                    [--webspam-rows 200000] [--paired] [--scratch DIR] [-o FILE]

Each set runs one check with ``--explain --exact never --checkers degree2 -j 1`` in a fresh
process (the linear baseline always runs; explain needs degree-2 and nothing else). The extra
cost is ``explain.seconds`` (ranking the terms, the products and the linear + k models) over
``linear.seconds`` (the baseline's C search and training); with ``--paired`` the same check also
runs without ``--explain`` and the table adds the difference of the two checks' times, which
load on a shared machine makes noisier. Sets missing from DATA_DIR are generated as in
scripts/bench.py (covtype: 581,012 x 54), except webspam, whose row count ``--webspam-rows``
sets (bench.py's is 350,000): the same rule and density, fewer rows. Below about 175,000 rows
degree-2's cost budget fits fewer than its minimum of 1,000 rows and it is skipped there.

For a before/after comparison run it against another checkout, from a directory outside this
one (the current directory comes first on the path): ``cd /tmp && PYTHONPATH=OLD_TREE python
.../scripts/bench_explain.py ...``; the table names the kcheck the checks imported.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import find_or_make  # noqa: E402

from kcheck.io.data import write_libsvm  # noqa: E402

CHECK = r"""
import json, sys, time
import kcheck
from kcheck.pipeline import run
from kcheck.config import CheckConfig
t0 = time.perf_counter()
v = run(CheckConfig(train={path!r}, exact="never", checkers={checkers!r}, jobs=1,
                    explain={explain!r})).json
print(json.dumps({{"seconds": time.perf_counter() - t0, "verdict": v, "kcheck": kcheck.__file__}}))
"""


def webspam_like(rows: int, scratch: Path) -> Path:
    """scripts/bench.py's webspam rule (254 features, 33% dense) with ``rows`` rows."""
    path = scratch / f"webspam-synthetic-{rows}"
    if path.exists():
        return path
    print(f"generating synthetic webspam ({rows:,} rows) ...", file=sys.stderr, flush=True)
    rng = np.random.default_rng(0)
    d = 254
    mask = rng.random((rows, d)) < 0.33
    vals = rng.exponential(size=(rows, d)) * mask
    X = sp.csr_matrix(vals)
    score = np.sin(3 * vals[:, 0]) + vals[:, 1] * vals[:, 2] + vals[:, 3:20].sum(1) * 0.1 - 1.5
    y = np.where(score + 0.2 * rng.normal(size=rows) > 0, 1.0, -1.0)
    write_libsvm(str(path), y, X)
    return path


def check(path: Path, explain: bool, checkers: tuple[str, ...] = ("degree2",)) -> dict:
    """One check in a fresh process, so that no set's memory or caches carry over. Where
    degree-2 is skipped, a check with no other checker fails: MultiLinear then runs too (its
    time is not part of the explanation's)."""
    code = CHECK.format(path=str(path), explain=explain, checkers=checkers)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode != 0:
        last = out.stderr.strip().splitlines()[-1] if out.stderr else "failed"
        if "no checker finished" in last and "multilinear" not in checkers:
            return check(path, explain, (*checkers, "multilinear"))
        raise RuntimeError(last)
    result: dict = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def line(label: str, with_ex: dict, without: dict | None) -> str:
    v = with_ex["verdict"]
    lin, d2, ex = v["linear"], v["checkers"]["degree2"], v["explain"]
    status = d2["status"] + (
        f" {100 * d2['fraction']:.1f}%" if d2["status"] == "subsampled" else ""
    )
    head = (
        f"| {label} | {v['split']['train']:,} | {lin['seconds']:.2f} | {pct(lin['val_accuracy'])} "
    )
    if not ex["available"]:
        return (
            head
            + f"| — ({status}) | — | {ex['seconds']:.2f} | — | — | no explanation: {ex['reason']} |"
        )
    rec = ", ".join(f"k={r['k']}: {pct(r['val_accuracy'])}" for r in ex["recovered"])
    ratio = ex["seconds"] / lin["seconds"]
    paired = ""
    if without is not None:
        extra = with_ex["seconds"] - without["seconds"]
        paired = f"; paired {extra:.2f} s = {extra / lin['seconds']:.2f}x"
    train_rows = ex.get("train_rows", v["split"]["train"])
    return (
        head + f"| {pct(d2['val_accuracy'])} ({status}) | {ex['rows']:,} / {train_rows:,} | "
        f"{ex['seconds']:.2f} | **{ratio:.2f}x**{paired} | {rec} | "
        + ", ".join(
            f"x{a}·x{b}" if a != b else f"x{a}²"
            for a, b in (t["features"] for t in ex["terms"][:3])
        )
        + " |"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--sets", default="covtype,webspam,ijcnn1,cod-rna,a9a")
    ap.add_argument("--webspam-rows", type=int, default=200_000)
    ap.add_argument("--paired", action="store_true", help="also run each check without --explain")
    ap.add_argument("--scratch", type=Path, default=None, help="where generated sets go")
    ap.add_argument("-o", "--output", type=Path, default=None)
    args = ap.parse_args()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="kcheck-explain-"))
    scratch.mkdir(parents=True, exist_ok=True)
    where = ""
    lines = [
        "| data | rows of T | linear s | linear % | degree-2 % (status) | rows: importances / "
        "k models | explain s | explain / linear | linear + top-k products % | top terms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in args.sets.split(","):
        if name == "webspam" and not (args.data_dir / name).exists():
            path, label = webspam_like(args.webspam_rows, scratch), "webspam (synthetic, "
            label += f"{args.webspam_rows:,} rows)"
        else:
            found, synthetic = find_or_make(args.data_dir, name, scratch)
            if found is None:
                lines.append(f"| {name} | not found |")
                continue
            path, label = found, name + (" (synthetic)" if synthetic else "")
        try:
            with_ex = check(path, explain=True)
            without = check(path, explain=False) if args.paired else None
        except RuntimeError as e:
            lines.append(f"| {label} | failed: {e} |")
            continue
        where = where or str(Path(with_ex["kcheck"]).parent)
        lines.append(line(label, with_ex, without))
        print(lines[-1], file=sys.stderr, flush=True)
    machine = (
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M')}; kcheck from `{where}`."
    )
    text = "\n".join([machine, "", *lines]) + "\n"
    print(text)
    if args.output:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
