"""Limits: the memory guard under a real address-space limit, and --time-limit.

The memory runs happen in a subprocess whose address space is capped with RLIMIT_AS, so an
allocation the guard failed to foresee is a MemoryError (or a crash) here instead of an
OOM kill of the machine running the tests.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import runner
import scipy.sparse as sp
from runner import Run, slowdown, tree_peak

from kcheck.checkers import degree2
from kcheck.checkers.base import Dataset
from kcheck.io.data import write_libsvm

GiB = 2**30
#: The address-space cap of the memory-guard runs: far above what they use (under 200 MB
#: resident), a tenth of what the full degree-2 expansion would take.
ADDRESS_SPACE = 3 * GiB


def kcheck(*args: str, timeout: float = 600) -> Run:
    """Run ``python -m kcheck ARGS`` (address space capped); fail the test after ``timeout``."""
    return runner.kcheck(*args, timeout=timeout, address_space=ADDRESS_SPACE)


def assert_clean(run: Run) -> None:
    assert "Traceback" not in run.stderr and "MemoryError" not in run.stderr, run.describe()


# --- the degree-2 memory guard -------------------------------------------------------------


def dense_integers(rows: int, cols: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Dense data with values 1..9 (short to write and read), labels from the first columns."""
    rng = np.random.default_rng(seed)
    X = rng.integers(1, 10, size=(rows, cols)).astype(np.float64)
    y = np.where(X[:, :10].sum(axis=1) > 50, 1.0, -1.0)
    return y, X


@dataclass(frozen=True)
class Wide:
    rows: int
    cols: int
    #: What the guard must find, in its reason.
    reason: str

    def expansion_bytes(self) -> int:
        """What the full expansion of T (3/4 of the rows) would take, by degree2's own count."""
        per_row = self.cols + self.cols * (self.cols + 1) // 2
        return int(0.75 * self.rows) * (per_row * degree2.BYTES_PER_NNZ + degree2.BYTES_PER_ROW)

    def weight_bytes(self) -> int:
        return degree2.WEIGHT_VECTORS * 8 * (degree2.expanded_dimension(self.cols) + 1)


WIDE = {
    # 1,500 x 1,500 dense (a 14 MB file): the expansion has 1,127,250 columns, all of them
    # nonzero in every row; T's 1,125 rows would need 35 GB. The guard must not build it.
    "expansion_35GB": Wide(1500, 1500, reason="rows of the expansion"),
    # 150 x 5,000: 12.5 million expanded columns; the weight vectors alone need 1.2 GiB,
    # more than the 1 GiB budget, whatever the rows.
    "weights_1.2GiB": Wide(150, 5000, reason="weight vectors"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(WIDE))
def test_memory_guard_under_an_address_space_limit(name: str, tmp_path: Path) -> None:
    wide = WIDE[name]
    assert wide.expansion_bytes() > 10 * ADDRESS_SPACE or wide.weight_bytes() > GiB
    y, X = dense_integers(wide.rows, wide.cols)
    # The memory plan alone (no time budget) already refuses to expand all of T.
    t = int(0.75 * wide.rows)
    plan = degree2.plan_rows(
        Dataset(sp.csr_matrix(X[:t]), y[:t]), 2, degree2.Degree2Options(memory_limit=GiB)
    )
    assert plan.rows < t and plan.limited_by == "memory", plan
    path = tmp_path / f"{name}.svm"
    write_libsvm(str(path), y, X)
    r = kcheck(
        "check",
        str(path),
        "--checkers",
        "degree2,multilinear",
        "--memory-limit",
        "1G",
        "-q",
        "-j",
        "1",
        "--exact",
        "never",
    )
    assert_clean(r)
    assert r.code == 0, r.describe()
    v = r.json
    d2 = v["checkers"]["degree2"]
    assert d2["status"] in ("skipped", "subsampled"), d2
    assert d2["reason"], d2
    assert wide.reason in d2["reason"], d2
    assert v["checkers"]["multilinear"]["status"] == "ok"
    assert v["verdict"] in ("linear", "kernel")


# --- a feature space that is wide and almost empty -----------------------------------------


@pytest.mark.slow
@pytest.mark.timing
def test_a_stray_large_index_costs_little(tmp_path: Path) -> None:
    """One index of 3,000,000 in a 40-row file: LIBLINEAR and k-means see only the columns
    that hold values (it took 39 s and 1.8 GB when they spanned the full width)."""
    rng = random.Random(0)
    lines = [f"{1 if k % 2 else -1} 1:{rng.random():.3f} 2:{rng.random():.3f}" for k in range(40)]
    lines[0] += " 3000000:1"
    path = tmp_path / "stray.svm"
    path.write_text("\n".join(lines) + "\n")
    r = kcheck("check", str(path), "--checkers", "multilinear", "-q")
    assert_clean(r)
    assert r.code in (0, 2), r.describe()
    assert r.seconds < 5 * slowdown(), r.describe()


# --- --time-limit --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mid_size(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4,500 x 40 dense: every step takes a fraction of a second but degree-2, whose 3,375 rows
    x 860 expanded values fit its cost budget and take about 12 s on an idle machine."""
    rng = np.random.default_rng(0)
    X = np.round(rng.normal(size=(4500, 40)), 4)
    y = np.where(X[:, 0] * X[:, 1] + 0.3 * X[:, 2] > 0, 1.0, -1.0)
    path = tmp_path_factory.mktemp("mid") / "mid.svm"
    write_libsvm(str(path), y, X)
    return path


@pytest.mark.slow
def test_a_tiny_time_limit_skips_every_checker(mid_size: Path) -> None:
    r = kcheck("check", str(mid_size), "--time-limit", "1e-6", "-q", "-j", "1")
    assert_clean(r)
    assert r.code == 2, r.describe()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.describe()
    # Not even the read finishes (the limit covers it): nothing is compared with anything.
    assert lines[0] == (
        f"kcheck: error: {mid_size}: the time limit (--time-limit 1e-06) passed while reading "
        "the data, so nothing was decided"
    )


@pytest.mark.slow
@pytest.mark.timing
def test_a_time_limit_keeps_the_verdict_of_the_checkers_that_finished(mid_size: Path) -> None:
    """MultiLinear (first, about 0.4 s) finishes; degree-2 is cut by the time left, with a
    reason, and the whole check keeps to the limit: 3 s on an idle machine, as many times more
    as the machine is slower now, but never more than 9 s, which stays below degree-2's 12 s
    even where the slowdown was measured high at a moment the machine then left behind.
    Degree-2 is sized to the time left, or, where the machine grew busier after the slowdown
    was measured (seen once beside a whole suite), stopped by the limit as it trained."""
    limit = 3 * min(slowdown(), 3.0)
    r = kcheck(
        "check", str(mid_size), "--time-limit", f"{limit:g}", "-q", "-j", "1", "--exact", "never"
    )
    assert_clean(r)
    assert r.code == 0, r.describe()
    v = r.json
    assert v["verdict"] in ("linear", "kernel")
    assert v["checkers"]["multilinear"]["status"] == "ok"
    d2 = v["checkers"]["degree2"]
    assert d2["status"] in ("skipped", "subsampled"), d2
    assert d2["reason"].endswith("fit the time left before the time limit") or (
        d2["status"],
        d2["reason"],
    ) == ("skipped", "time limit"), d2
    assert v["seconds"] < limit
    # The plan had it on all of T; its step says what the time limit made of that.
    step = next(s for s in v["plan"]["steps"] if s["name"] == "degree2")
    assert step["runs"] and step["rows"] > d2.get("rows", 0)
    assert step["outcome"] == ("skipped" if d2["status"] == "skipped" else "cut short"), step


def test_a_time_limit_sizes_the_check_for_the_worker_it_runs_its_methods_in() -> None:
    """heart_scale fits 100M on its own (3x its rows plus 64 MB), not beside the stoppable
    worker and fork server a --time-limit runs its methods in (5x plus 128 MB): refused at
    once, in one line that says why, where the process tree used to go past the limit."""
    heart = runner.ROOT / "datasets" / "heart_scale"
    args = ("check", heart, "-q", "--memory-limit", "100M")
    runner.kcheck(*args, code=0)
    refused = runner.kcheck(*args, "--time-limit", "60", code=2)
    line = runner.one_error_line(refused)
    assert "the memory limit leaves no room for the data" in line, line
    assert "5x plus 128 MB under --time-limit" in line, line


def test_a_step_the_time_limit_turned_off_says_so() -> None:
    """svmguide1's plan runs exact mode (counted within the budget); under --time-limit 2,
    less than its least count, it is sized again just before it runs and does not: its step
    keeps the plan's decision (``runs``) and says what happened (``outcome``), as the exact
    block does (tests/golden/svmguide1.exact-auto.json: without the limit, the step ran)."""
    svmguide1 = runner.ROOT / "datasets" / "svmguide1"
    v = runner.kcheck("check", svmguide1, "--time-limit", "2", "-q", "--json", code=None).json
    step = next(s for s in v["plan"]["steps"] if s["name"] == "rbf")
    assert step["runs"] and step["outcome"] == "skipped", step
    assert not v["exact"]["ran"] and "time limit" in v["exact"]["reason"]


@pytest.mark.slow
def test_a_baseline_predicted_past_the_time_limit_is_said_at_once(tmp_path: Path) -> None:
    """6,000 rows in 200 classes read in a blink, and their one-vs-rest baseline counts about
    70 s: with --time-limit 3 the log says at once that it will likely run past the limit (the
    run then ends there, exit 2); it waited out the limit in silence. Under a limit it fits, the
    stage line is the plain one."""
    rng = np.random.default_rng(0)
    many = tmp_path / "many.svm"
    write_libsvm(
        str(many), (np.arange(6000) % 200).astype(float), np.round(rng.normal(size=(6000, 20)), 3)
    )
    r = runner.kcheck("check", many, "--time-limit", "3", "--checkers", "multilinear", code=2)
    lines = r.stderr.splitlines()
    said = [line for line in lines if line.startswith("kcheck: linear baseline")]
    assert said and said[0].startswith(
        "kcheck: linear baseline (C search), likely past --time-limit 3 (about "
    ), r.describe()
    assert lines[-1].startswith(f"kcheck: error: {many}: the time limit (--time-limit 3) passed"), (
        r.describe()
    )
    heart = runner.ROOT / "datasets" / "heart_scale"
    fits = runner.kcheck("check", heart, "--time-limit", "600", "--checkers", "multilinear", code=0)
    assert "kcheck: linear baseline (C search)" in fits.stderr.splitlines(), fits.describe()


def test_batch_time_limit(mid_size: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    r = kcheck("batch", str(mid_size), "--time-limit", "1e-6", "-q", "-o", str(out))
    assert_clean(r)
    assert r.code == 3, r.describe()  # no data set could be checked
    (line,) = map(json.loads, out.read_text().splitlines())
    assert line["status"] == "error" and "time limit" in line["error"]


def _classes(path: Path, classes: int, rows: int, features: int = 3) -> Path:
    rng = random.Random(1)
    with open(path, "w") as f:
        for k in range(rows):
            c = k % classes
            extra = "".join(f" {4 + j}:{rng.random():.4f}" for j in range(features - 3))
            f.write(f"{c} 1:{rng.random():.4f} 2:{rng.random():.4f} 3:{c / classes:.4f}{extra}\n")
    return path


#: What the whole run may take beyond --time-limit (interpreter start, killing a worker) on an
#: idle machine; a busy one gets as many times more as it is slower (runner.slowdown).
TIME_LIMIT_SLACK = 2.0


@pytest.mark.slow
@pytest.mark.timing
def test_a_time_limit_stops_a_baseline_that_cannot_finish(tmp_path: Path) -> None:
    """1,000 classes in 5,000 rows (5 a class, so the check trains): LIBLINEAR's C search
    for the baseline takes about a minute and cannot be interrupted in-process. It runs in a
    worker that is killed at the deadline, and the run ends with exit 2 and that reason."""
    path = _classes(tmp_path / "classes.svm", 1000, 5000)
    limit = 2.0
    slack = TIME_LIMIT_SLACK * slowdown()
    r = kcheck("check", str(path), "--time-limit", str(limit), "-q", "-j", "1")
    assert_clean(r)
    assert r.code == 2, r.describe()
    (line,) = r.stderr.splitlines()
    assert line.startswith(
        f"kcheck: error: {path}: the time limit (--time-limit 2) passed "
        "before the linear baseline finished"
    ), line
    assert r.seconds < limit + slack, r.describe()


@pytest.mark.slow
@pytest.mark.timing
def test_a_time_limit_bounds_a_check_that_trains(tmp_path: Path) -> None:
    """50 classes in 5,000 rows: the baseline finishes (about 2.5 s idle) and MultiLinear
    (about 1 s); degree-2 alone would take 9 s more. The run keeps to the limit, reports what
    finished and says why the rest did not run. A machine busy enough to leave no checker time
    gets the other clean stop: exit 2, each checker named with its reason."""
    path = _classes(tmp_path / "classes.svm", 50, 5000, features=4)
    factor = slowdown()
    limit, slack = 9.0 * factor, TIME_LIMIT_SLACK * factor
    r = kcheck(
        "check", str(path), "--time-limit", f"{limit:g}", "-q", "-j", "1", "--exact", "never"
    )
    assert_clean(r)
    assert r.seconds < limit + slack, r.describe()
    if r.code == 2:
        (line,) = r.stderr.splitlines()
        assert line.startswith(f"kcheck: error: {path}: no checker finished ("), line
        for name in ("degree2", "multilinear"):
            assert re.search(rf"\b{name}: (time limit|not run)", line), line
        return
    assert r.code == 0, r.describe()
    v = r.json
    assert v["linear"]["val_accuracy"] is not None
    assert v["seconds"] < limit + 0.5 * factor
    statuses = {name: c["status"] for name, c in v["checkers"].items()}
    assert "ok" in statuses.values(), statuses
    for c in v["checkers"].values():
        assert c["status"] in ("ok", "subsampled", "skipped")
        if c["status"] != "ok":
            assert c["reason"], c


def test_an_infinite_time_limit_is_no_limit() -> None:
    r = kcheck("check", "datasets/heart_scale", "--time-limit", "inf", "-q", "--exact", "never")
    assert_clean(r)
    assert r.code == 0, r.describe()
    assert r.json["checkers"]["multilinear"]["status"] == "ok"


@pytest.mark.slow
@pytest.mark.timing
def test_a_time_limit_stops_the_model_export(tmp_path: Path) -> None:
    """The check fits, the kernel model's grid search does not: exit 2, no model, no temporary
    file, within the limit. The limit leaves the check twice what it took just before, and a
    second more: a fixed one failed where the machine was slow enough that the check itself
    ran into it, and the kernel model's search (tens of seconds) fits in neither."""
    out = tmp_path / "out"
    out.mkdir()
    check = ("check", "datasets/svmguide1", "-q", "-j", "1", "--checkers", "multilinear")
    check += ("--exact", "never")
    probe = kcheck(*check)
    assert probe.code == 0, probe.describe()
    factor = slowdown()
    limit, slack = max(3.0, 2.0 * probe.seconds + 1.0), TIME_LIMIT_SLACK * factor
    r = kcheck(
        *check,
        "--time-limit",
        f"{limit:g}",
        "--model-out",
        str(out / "m"),
        "--model",
        "kernel",
    )
    assert_clean(r)
    assert r.code == 2, r.describe()
    assert r.seconds < limit + slack, r.describe()
    assert "--time-limit reached while training the kernel model" in r.stderr, r.describe()
    assert list(out.iterdir()) == []


# --- --memory-limit bounds the process ----------------------------------------------------


def _peak_rss(args: list[str], timeout: float = 600) -> tuple[int, int, str]:
    """(exit code, peak resident bytes, stderr) of ``python ARGS``, by ``/usr/bin/time``.

    Measured by a small launcher: Linux carries a process's peak across fork and exec, so a
    child of the test process would report at least the test process's own size.
    """
    import subprocess
    import sys

    from conftest import require_tool

    timer = require_tool("time") if not Path("/usr/bin/time").exists() else "/usr/bin/time"
    r = subprocess.run(
        [timer, "-f", "kcheck-peak-kb %M", sys.executable, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=timeout,
        text=True,
    )
    lines = r.stderr.splitlines()
    peak = [ln for ln in lines if ln.startswith("kcheck-peak-kb ")]
    assert peak, r.stderr
    err = "\n".join(ln for ln in lines if not ln.startswith(("kcheck-peak-kb ", "Command ")))
    return r.returncode, int(peak[-1].split()[1]) * 1024, err


@pytest.fixture(scope="module")
def medium_dense(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20,000 x 60 dense: 14 MB of CSR; degree-2's full expansion would be 38 million values."""
    y, X = dense_integers(20_000, 60, seed=3)
    path = tmp_path_factory.mktemp("medium") / "medium.svm"
    write_libsvm(str(path), y, X)
    return path


@pytest.fixture(scope="module")
def import_baseline() -> int:
    code, peak, err = _peak_rss(
        [
            "-c",
            "import kcheck.cli, kcheck.pipeline, kcheck.modelfiles.export, kcheck.checkers.exact",
        ]
    )
    assert code == 0, err
    return peak


@pytest.mark.slow
def test_a_check_keeps_to_a_small_memory_limit(medium_dense: Path, import_baseline: int):
    limit = 200 * 2**20
    code, peak, err = _peak_rss(
        [
            "-m",
            "kcheck",
            "check",
            str(medium_dense),
            "-q",
            "-j",
            "1",
            "--memory-limit",
            "200M",
            "--exact",
            "never",
        ]
    )
    assert code == 0, err
    assert peak - import_baseline <= limit, (peak - import_baseline) / 2**20


@pytest.mark.slow
def test_a_memory_limit_the_check_cannot_keep_is_refused_at_once(
    medium_dense: Path, import_baseline: int
):
    # The reader stops as soon as the values read need more than the limit allows a check
    # (3x the CSR plus 64 MB): with 64M nothing may be read, with 80M about 5 MB of the file's
    # 14 MB of CSR. The refusal holds the limit while it reads.
    for limit_mb in (64, 80, 40):
        limit = limit_mb * 2**20
        code, peak, err = _peak_rss(
            [
                "-m",
                "kcheck",
                "check",
                str(medium_dense),
                "-q",
                "-j",
                "1",
                "--memory-limit",
                f"{limit_mb}M",
            ]
        )
        assert code == 2, err
        (line,) = err.splitlines()
        assert "memory limit" in line, line
        assert peak - import_baseline <= limit, (limit_mb, (peak - import_baseline) / 2**20)


@pytest.fixture(scope="module")
def big_dense(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """100,000 x 20 dense reals (a 23 MB file, 24 MB of CSR), labels from a noisy linear rule:
    degree-2's predictions on V once built 2,000,000 expanded values at a time, 190 MB of
    temporaries, whatever the limit."""
    rng = np.random.default_rng(7)
    X = np.round(rng.normal(size=(100_000, 20)), 5)
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=100_000) > 0, 1.0, -1.0)
    path = tmp_path_factory.mktemp("big") / "big.svm"
    write_libsvm(str(path), y, X)
    return path


@pytest.fixture(scope="module")
def big_dense_gz(big_dense: Path) -> Path:
    """The same rows three times over, gzipped: compressed input of 72 MB of CSR, more than
    200M holds, which --max-rows auto samples as it streams."""
    path = big_dense.with_name("big3.svm.gz")
    rows = big_dense.read_bytes()
    with gzip.open(path, "wb", compresslevel=1) as f:
        for _ in range(3):
            f.write(rows)
    return path


@pytest.fixture(scope="module")
def import_tree_baseline() -> int:
    code, peak, err = tree_peak(
        [
            "-c",
            "import kcheck.cli, kcheck.pipeline, kcheck.modelfiles.export, kcheck.checkers.exact",
        ]
    )
    assert code == 0, err
    return peak


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        # Two jobs: the baseline's worker beside this process. One process alone is held to
        # its limit by test_a_check_keeps_to_a_small_memory_limit and the two cases below.
        ("-j", "2", "--memory-limit", "200M"),
        ("-j", "1", "--max-rows", "auto", "--memory-limit", "150M"),
        ("-j", "1", "--max-rows", "auto", "--time-limit", "120", "--memory-limit", "200M"),
    ],
    ids=["j2-200M", "auto-rows-150M", "gz-auto-rows-timed-200M"],
)
def test_a_whole_check_keeps_its_process_tree_to_the_memory_limit(
    big_dense: Path,
    big_dense_gz: Path,
    import_tree_baseline: int,
    args: tuple[str, ...],
) -> None:
    """Every checker the plan runs (exact mode's choice included), every worker counted. Under
    --time-limit each method trains in a worker of its own beside this process, with its copy
    of the rows: --max-rows auto on compressed input went to 342 MB under 200M before the
    sample left room for it (kcheck.memory.check_footprint)."""
    limit = int(args[-1].rstrip("M")) * 2**20
    data = big_dense_gz if "--time-limit" in args else big_dense
    code, peak, err = tree_peak(["-m", "kcheck", "check", str(data), "-q", *args])
    assert code == 0, err
    assert "Traceback" not in err, err
    assert peak - import_tree_baseline <= limit, (peak - import_tree_baseline) / 2**20
