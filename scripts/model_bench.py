#!/usr/bin/env python3
"""The ``--model-out`` kernel model: its time against the check's, and its held-out accuracy
against the full grid's (grid.py's grid and a refinement, as before the search started at the
check's tuned point).

Usage:
    python scripts/model_bench.py [--sets fourclass,svmguide1,...] [--no-grid disc3000]
                                  [--jobs N] [-o scripts/results/model.md]

For each set, three runs on the same training file:

* ``kcheck check TRAIN`` (a subprocess, timed): the check alone;
* ``kcheck check TRAIN --model-out M --model kernel`` (a subprocess, timed): the whole run and
  the model's own ``model.seconds``, ``model.start``, its points and the predicted time it
  printed before training (a log: stderr is a pipe);
* the check again in this process with the start forced to the full grid (the model as it was
  trained before), unless ``--no-grid`` names the set.

Both models label the held-out file with ``kcheck predict``. Held-out files: ``svmguide1.t``;
for the other bundled sets (no ``.t`` file) a stratified quarter of the rows is held out
(seeded) and the rest is the training file; the generated sets have their own test rows.

Generated kernel cases (seeded): ``disc3000``, 3,000 x 5 (a disc in the first two features,
three noise features, 3% of labels flipped; the case of issue 33), and ``ring2000``, 2,000 x 4
(a ring between two radii, two noise features).

The machine's load average (1 minute) is recorded before and after each set: the times are
wall seconds on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kcheck.config import CheckConfig  # noqa: E402
from kcheck.io.data import read_libsvm, write_libsvm  # noqa: E402
from kcheck.modelfiles import export as models  # noqa: E402
from kcheck.pipeline import run  # noqa: E402
from kcheck.split import stratified_subsample  # noqa: E402

BUNDLED = ("fourclass", "svmguide1", "german.numer", "heart_scale")
GENERATED = ("disc3000", "ring2000")


def _kcheck(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "kcheck", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode not in (0, 1):
        raise SystemExit(f"kcheck {' '.join(args)} failed:\n{r.stderr}")
    return r, time.perf_counter() - t0


def _disc(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(rows, 5))
    y = np.where(X[:, 0] ** 2 + X[:, 1] ** 2 < 0.5, 1.0, -1.0)
    flip = rng.random(rows) < 0.03
    y[flip] = -y[flip]
    return X, y


def _ring(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(rows, 4))
    r2 = X[:, 0] ** 2 + X[:, 1] ** 2
    y = np.where((r2 > 0.2) & (r2 < 0.6), 1.0, -1.0)
    return X, y


def _write(path: Path, X: np.ndarray, y: np.ndarray) -> None:
    import scipy.sparse as sp

    write_libsvm(str(path), y, sp.csr_matrix(X))


def files(name: str, scratch: Path) -> tuple[Path, Path, str]:
    """(training file, held-out file, where the held-out rows come from)."""
    if name in GENERATED:
        make, rows = (_disc, 3000) if name == "disc3000" else (_ring, 2000)
        train, test = scratch / name, scratch / f"{name}.t"
        _write(train, *make(rows, seed=1))
        _write(test, *make(rows, seed=2))
        return train, test, f"{rows:,} generated rows"
    source = ROOT / "datasets" / name
    if (ROOT / "datasets" / f"{name}.t").exists():
        return source, ROOT / "datasets" / f"{name}.t", f"{name}.t"
    y, X = read_libsvm(str(source))
    held = np.zeros(y.size, dtype=bool)
    held[stratified_subsample(y, y.size // 4, seed=7)] = True
    train, test = scratch / f"{name}.train", scratch / f"{name}.t"
    write_libsvm(str(train), y[~held], X[~held])
    write_libsvm(str(test), y[held], X[held])
    return train, test, f"a stratified quarter ({int(held.sum()):,} rows)"


def held_out(model: Path, test: Path) -> float:
    r, _ = _kcheck("predict", str(model), str(test), "-q")
    predicted = np.array([float(v) for v in r.stdout.split()])
    y, _ = read_libsvm(str(test))
    return float(np.mean(predicted == y))


def grid_model(train: Path, out: Path, jobs: int) -> tuple[dict[str, object], float]:
    """The model as the full grid trains it: the same check, its start forced to the grid."""
    config = CheckConfig(train=str(train), model_out=str(out), model_kind="kernel", jobs=jobs)
    report = run(config)
    tuned = models.tuned_start
    models.tuned_start = lambda checkers: models.GRID_START
    try:
        t0 = time.perf_counter()
        models.train_model(report, config)
        seconds = time.perf_counter() - t0
    finally:
        models.tuned_start = tuned
    model = report.json["model"]
    assert model is not None and model["start"] == "grid"
    return model, seconds


def bench(name: str, scratch: Path, jobs: int, grid: bool) -> dict[str, object]:
    load_before = os.getloadavg()[0]
    train, test, source = files(name, scratch)
    j = ["-j", str(jobs)]
    check, check_s = _kcheck("check", str(train), "-q", "--json", *j)
    verdict = json.loads(check.stdout)
    out = scratch / f"{name}.model"
    both, both_s = _kcheck(
        "check", str(train), "--json", *j, "--model-out", str(out), "--model", "kernel"
    )
    model = json.loads(both.stdout)["model"]
    said = re.search(r"^kernel model: .*predicted about (.+)$", both.stderr, flags=re.M)
    row: dict[str, object] = {
        "name": name,
        "rows": verdict["data"]["rows"],
        "verdict": verdict["verdict"],
        "held_out_from": source,
        "check_s": check_s,
        "with_model_s": both_s,
        "ratio": both_s / check_s,
        "model_s": model["seconds"],
        "start": model["start"],
        "points": model["grid_points"],
        "predicted": said.group(1) if said else None,
        "params": model["params"],
        "cv": model["cv_accuracy"],
        "held_out": held_out(out, test),
    }
    if grid:
        gout = scratch / f"{name}.grid.model"
        gmodel, _ = grid_model(train, gout, jobs)
        row.update(
            grid_s=gmodel["seconds"],
            grid_points=gmodel["grid_points"],
            grid_params=gmodel["params"],
            grid_cv=gmodel["cv_accuracy"],
            grid_held_out=held_out(gout, test),
        )
    row["load"] = (load_before, os.getloadavg()[0])
    return row


def _log2(params: object) -> str:
    assert isinstance(params, dict)
    return f"2^{np.log2(params['C']):.3g}, 2^{np.log2(params['gamma']):.3g}"


def _pct(value: object) -> str:
    return f"{100 * float(value):.2f}%"  # type: ignore[arg-type]


def table(rows: list[dict[str, object]], jobs: int) -> str:
    out = [
        "# `--model-out` kernel model: time and held-out accuracy",
        "",
        f"`python scripts/model_bench.py` on {os.cpu_count()} cores, `-j {jobs}`, "
        f"{time.strftime('%Y-%m-%d')}, Python {platform.python_version()}. Wall seconds on a "
        "shared machine: the load average (1 min) before and after each set is in the table.",
        "",
        "*check*: `kcheck check TRAIN` alone; *with model*: the same with `--model-out M --model "
        "kernel`, the whole run; *ratio*: with model / check (target: at most 3); *model*: "
        "`model.seconds` of that run, its search's start (`model.start`) and points, and the "
        "time it predicted before training. *grid*: the model the full grid (grid.py's and a "
        "refinement) trains on the same rows, as before; *CV*: each model's `cv_accuracy`; "
        "*held-out*: each model's accuracy on the held-out file (`kcheck predict`); *diff*: "
        "new minus grid, in points (target: -0.5 or above).",
        "",
        "| set | rows | verdict | check s | with model s | ratio | model s | start | points "
        "| predicted | C, gamma | CV | held-out | grid s | grid points | grid C, gamma | grid CV "
        "| grid held-out | diff, pts | load |",
        "|---|---:|---|---:|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---|---:|---:"
        "|---:|---|",
    ]
    for r in rows:
        load = r["load"]
        assert isinstance(load, tuple)
        cells = [
            r["name"],
            f"{r['rows']:,}",
            r["verdict"],
            f"{r['check_s']:.1f}",
            f"{r['with_model_s']:.1f}",
            f"{r['ratio']:.2f}",
            f"{r['model_s']:.1f}",
            r["start"],
            r["points"],
            r["predicted"],
            _log2(r["params"]),
            _pct(r["cv"]),
            _pct(r["held_out"]),
        ]
        if "grid_s" in r:
            diff = 100 * (float(r["held_out"]) - float(r["grid_held_out"]))  # type: ignore[arg-type]
            cells += [
                f"{r['grid_s']:.1f}",
                r["grid_points"],
                _log2(r["grid_params"]),
                _pct(r["grid_cv"]),
                _pct(r["grid_held_out"]),
                f"{diff:+.2f}",
            ]
        else:
            cells += ["not run", "", "", "", "", ""]
        cells.append(f"{load[0]:.1f} / {load[1]:.1f}")
        out.append("| " + " | ".join(str(c) for c in cells) + " |")
    sources = "; ".join(f"{r['name']}: {r['held_out_from']}" for r in rows)
    out += ["", f"Held-out files: {sources}."]
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=",".join(BUNDLED + GENERATED))
    parser.add_argument("--no-grid", default="", help="sets whose full-grid model is not trained")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("-o", "--output", default=str(ROOT / "scripts/results/model.md"))
    args = parser.parse_args()
    skip = set(filter(None, args.no_grid.split(",")))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in filter(None, args.sets.split(",")):
            row = bench(name, Path(tmp), args.jobs, name not in skip)
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    text = table(rows, args.jobs)
    Path(args.output).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
