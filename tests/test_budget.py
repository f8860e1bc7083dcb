"""Budgets from counted work: the same JSON under load, the floor for small data, cut-short
margins (kcheck/costs/budget.py and how the pipeline uses it)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from runner import run_kcheck

from kcheck import plan
from kcheck.checkers import degree2, registry
from kcheck.checkers.base import CheckerResult, Counts, Dataset
from kcheck.config import CheckConfig
from kcheck.costs import budget
from kcheck.io.data import write_libsvm
from kcheck.pipeline import run
from kcheck.verdict import without_timing


def interactions(rows: int = 1000, features: int = 40, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Dense uniform features; the label is the sign of a sum of pairwise products (no linear
    part): the pattern of the small dense sets where a floor-less budget skipped degree-2."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(rows, features))
    pairs = [(0, 1), (2, 3), (4, 5), (6, 7)]
    score = sum(X[:, i] * X[:, j] for i, j in pairs) + rng.normal(0.0, 0.1, rows)
    return np.where(score > 0, 1.0, -1.0), X


@pytest.fixture(scope="module")
def interaction_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    y, X = interactions()
    path = tmp_path_factory.mktemp("floor") / "interactions.svm"
    write_libsvm(str(path), y, X)
    return path


def test_counted_costs_are_monotone_and_model_counts() -> None:
    assert budget.n_models(2) == 1 and budget.n_models(3) == 3
    assert budget.linear_seconds(1000, 10) == 10 * budget.linear_seconds(1000, 2)
    assert budget.degree2_seconds(3_000_000, 2, 10_000) == pytest.approx(9.0)
    # Above 10,000 rows a value costs more, as the square root of the rows.
    assert budget.degree2_seconds(3_000_000, 2, 40_000) == pytest.approx(18.0)
    assert budget.degree2_seconds(3_000_000, 2, 500) == pytest.approx(9.0)
    floor = budget.FIRST_SHARE * budget.FLOOR_SECONDS  # the first measurement's, on small data
    assert budget.degree2_values_within(floor, rows=750, n_classes=2) == 3_333_333
    assert budget.degree2_values_within(floor, rows=750, n_classes=4) == 833_333
    # Poker's T (18,750 rows): at the cost per value of its rows, where labels overlap (as
    # degree-2 is sized: the row term from 2,000 rows too).
    assert budget.degree2_values_within(floor, rows=18_750, n_classes=2) == round(
        floor / (3.0e-6 * (18_750 / 10_000) ** 0.5 * (18_750 / 2_000) ** 0.15)
    )
    assert budget.degree2_values_within(0.0, rows=750, n_classes=2) == 0
    # The one budget: the floor, or the baseline's count where more; the first measurement's,
    # half the floor or the baseline's count.
    assert budget.methods_seconds(nnz=45_000, n_classes=2) == budget.FLOOR_SECONDS
    assert budget.first_seconds(nnz=45_000, n_classes=2) == floor
    assert budget.floor_sets_budget(nnz=45_000, n_classes=2)
    big = 10_000_000
    assert budget.methods_seconds(nnz=big, n_classes=2) == pytest.approx(
        budget.LINEAR_FACTOR * budget.linear_seconds(big, 2)
    )
    assert budget.first_seconds(nnz=big, n_classes=2) == budget.methods_seconds(
        nnz=big, n_classes=2
    )
    assert not budget.floor_sets_budget(nnz=big, n_classes=2)
    small = budget.exact_seconds(
        rows=500, nnz=5000, n_classes=2, tune_rows=500, grid_points=28, gammas=4, repeats=2, folds=5
    )
    large = budget.exact_seconds(
        rows=2000,
        nnz=20000,
        n_classes=2,
        tune_rows=600,
        grid_points=28,
        gammas=4,
        repeats=2,
        folds=5,
    )
    assert 0 < small < large
    assert budget.size_text(2**20) == "1.0 MiB" and budget.size_text(3 * 2**30) == "3.0 GiB"


@pytest.mark.slow
def test_the_floor_runs_degree2_in_full_on_small_dense_data(interaction_file: Path) -> None:
    """1,000 rows x 40 dense features: the relative budget alone (a third of T's values, at
    least 100k) fits 116 rows and skipped degree-2; the floor runs its full expansion (645k
    values, about 3 s here), and it finds the products. Exact mode is off so that it does not
    decide in degree-2's place."""
    v = run(CheckConfig(train=str(interaction_file), exact="never")).json
    d2 = v["checkers"]["degree2"]
    assert d2["status"] == "ok" and d2["fraction"] == 1.0, d2
    assert d2["gap"] > 0.1 and d2["gap_ci95"][0] > 0.02
    assert v["verdict"] == "kernel" and v["margin"] == "clear"
    assert v["deciding_checker"] == "degree2"


def test_without_a_budget_left_the_same_data_skips_degree2(interaction_file: Path) -> None:
    """What the budget left changes: with 0.1 counted seconds left (as where other methods
    spent the rest) too few rows fit; with the floor, all of them."""
    from kcheck.checkers.base import Dataset
    from kcheck.io.data import read_libsvm

    y, X = read_libsvm(str(interaction_file))
    T = Dataset(X[:750], y[:750])
    opts = degree2.Degree2Options(budget_seconds=0.1)
    assert degree2.plan_rows(T, 2, opts).rows == 0
    first = budget.FIRST_SHARE * budget.FLOOR_SECONDS  # the first measurement's, on small data
    floored = degree2.Degree2Options(budget_seconds=first)
    assert degree2.plan_rows(T, 2, floored).rows == 750
    # Where the full expansion is over the budget, a subsample of the budget's size runs.
    T2 = Dataset(sp.vstack([T.X] * 6, format="csr"), np.tile(T.y, 6))
    plan = degree2.plan_rows(T2, 2, floored)
    per_row = 40 + 40 * 41 // 2
    within = budget.degree2_values_within(first, rows=4500, n_classes=2)
    assert plan.rows == within // per_row
    assert 1000 <= plan.rows < 4500 and plan.limited_by == "cost"


@pytest.mark.slow
def test_degree2_gets_the_budget_above_ten_thousand_rows(tmp_path: Path) -> None:
    """No row count decides: on 14,000 rows of 10 dense features (T: 10,500 rows, 105,000
    values) the budget pays degree-2's whole 682,500-value expansion. Before, T above 10,000
    rows had no floor, and 20,000 rows of covtype-like data kept 1,111 rows and missed a
    +15-point gain."""
    from kcheck.checkers.base import Dataset

    y, X = interactions(rows=14_000, features=10, seed=1)
    T = Dataset(sp.csr_matrix(X[:10_500]), y[:10_500])
    floored = degree2.Degree2Options(budget_seconds=budget.FIRST_SHARE * budget.FLOOR_SECONDS)
    assert degree2.plan_rows(T, 2, floored).rows == T.rows
    # A budget of 1 s buys fewer values on these rows than on 10,000 (the cost per value grows).
    one = budget.degree2_values_within(1.0, rows=T.rows, n_classes=2)
    assert one < budget.degree2_values_within(1.0, rows=10_000, n_classes=2)
    sub = degree2.Degree2Options(budget_seconds=1.0)
    assert degree2.plan_rows(T, 2, sub).rows == one // 65

    path = tmp_path / "pairs14k.svm"
    write_libsvm(str(path), y, X)
    v = run(CheckConfig(train=str(path), checkers=("degree2", "rbfsvm"))).json
    d2 = v["checkers"]["degree2"]
    assert d2["status"] == "ok" and d2["fraction"] == 1.0, d2
    assert not v["exact"]["ran"]
    assert v["verdict"] == "kernel" and v["margin"] == "clear"


def test_multilinear_keeps_fifty_rows_a_cluster(datasets: Path) -> None:
    v = run(CheckConfig(train=str(datasets / "fourclass"), exact="never")).json
    # T holds 646 rows: the paper's K would be 32 clusters of 20 rows.
    assert v["split"]["train"] == 646
    assert v["checkers"]["multilinear"]["clusters"] == 12
    assert v["verdict"] == "kernel"


@pytest.mark.slow
def test_a_skipped_checker_leaves_a_linear_verdict_borderline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A linear rule on 3,000 rows: V's 750 points put every proxy's interval below epsilon.
    rng = np.random.default_rng(0)
    X = rng.uniform(-1.0, 1.0, (3000, 10))
    y = np.where(X @ np.linspace(1.0, 0.1, 10) + rng.normal(0, 0.3, 3000) > 0, 1.0, -1.0)
    path = tmp_path / "linear.svm"
    write_libsvm(str(path), y, X)
    clear = run(CheckConfig(train=str(path), exact="never")).json
    assert clear["verdict"] == "linear" and clear["margin"] == "clear"
    assert clear["warnings"] == []

    def skipped(*args: object, **kwargs: object) -> CheckerResult:
        return CheckerResult.skipped("degree2", "ran out of memory")

    monkeypatch.setattr(degree2, "run", skipped)
    cut = run(CheckConfig(train=str(path), exact="never")).json
    assert cut["verdict"] == "linear" and cut["margin"] == "borderline"
    assert cut["warnings"] == [
        "degree-2 did not run (ran out of memory), so it cannot confirm the linear verdict"
    ]


HOG = "import time\nt = time.time()\nwhile time.time() - t < 600: pass\n"
MEMORY_HOG = (
    "import sys, time\nb = bytearray(4 << 30)\nb[::4096] = b'x' * len(b[::4096])\n"
    "sys.stdout.write('ready\\n'); sys.stdout.flush()\ntime.sleep(600)\n"
)


def _check(path: Path, *extra: str) -> dict[str, object]:
    r = run_kcheck(["check", str(path), "--json", "-q", *extra], timeout=600)
    assert r.code == 0, r.describe()
    return without_timing(json.loads(r.stdout))  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.serial
def test_same_json_under_load_with_any_jobs_and_free_memory(datasets: Path) -> None:
    """fourclass runs exact mode (its old timed probe flipped between runs); svmguide1 lies
    just over the exact budget. Neither may change with a CPU hog on every core and 4 GiB
    less free memory, both at once: the plan is counted, so neither may move it. (-j 2 gives
    one job's JSON: test_golden's test_exact_mode_with_two_jobs_gives_the_json_of_one, and
    test_pipeline's test_parallel_clusters_give_the_same_json.) Each is checked alone on the
    quiet machine; under the load the two run side by side, which loads each the more, and
    the load is set up once for both."""
    paths = [datasets / "fourclass", datasets / "svmguide1"]
    quiet = [_check(path) for path in paths]
    mem = subprocess.Popen([sys.executable, "-c", MEMORY_HOG], stdout=subprocess.PIPE)
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(2)]
    try:
        assert mem.stdout is not None and mem.stdout.readline() == b"ready\n"
        with ThreadPoolExecutor(len(paths)) as both:
            loaded = list(both.map(_check, paths))
    finally:
        for h in [*hogs, mem]:
            h.kill()
            h.wait()
    assert loaded[0] == quiet[0]
    assert loaded[1] == quiet[1]


def test_exact_mode_gets_the_one_budget_at_every_size() -> None:
    """Madelon-like T (750,000 dense values) no longer loses exact mode to a stored-value
    threshold: its budget is the check's, the floor where the linear model is cheap and the
    baseline's count above."""
    rng = np.random.default_rng(0)

    def split(rows: int, features: int) -> tuple[Dataset, Dataset]:
        X = sp.csr_matrix(rng.uniform(0.1, 1.0, (rows, features)))
        y = np.where(np.arange(rows) % 2 == 0, 1.0, -1.0)
        t = rows * 3 // 4
        return Dataset(X[:t], y[:t]), Dataset(X[t:], y[t:])

    first = budget.FIRST_SHARE * budget.FLOOR_SECONDS
    T, V = split(800, 40)
    assert _exact_budget(T, V) == first
    T, V = split(1600, 300)
    assert _exact_budget(T, V) == budget.first_seconds(nnz=T.X.nnz, n_classes=2)
    T, V = split(1600, 4000)  # 4.8M values: the baseline sets the budget
    assert _exact_budget(T, V) == pytest.approx(
        budget.LINEAR_FACTOR * budget.linear_seconds(T.X.nnz, 2)
    )
    assert _exact_budget(T, V) > first


def _exact_budget(T: Dataset, V: Dataset) -> float | None:
    """Exact mode's counted budget, as the plan gives it."""
    step = plan.make(Counts.of(T, V), plan.Options(checkers=())).step(registry.EXACT.name)
    assert step is not None
    return step.budget_seconds


@pytest.mark.slow
def test_exact_mode_tunes_on_the_rows_its_budget_affords(tmp_path: Path) -> None:
    """On 1,200 rows of 5 dense features the floor affords the search on every row (not 600),
    and the JSON says so; deciding it took counts only (see the test under load above)."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-1.0, 1.0, size=(1200, 5))
    y = np.where(X[:, 0] * X[:, 1] + 0.1 * rng.normal(size=1200) > 0, 1.0, -1.0)
    path = tmp_path / "xor1200.svm"
    write_libsvm(str(path), y, X)
    v = run(CheckConfig(train=str(path), checkers=("multilinear",))).json
    assert v["exact"]["ran"] and v["exact"]["estimated_seconds"] <= budget.FLOOR_SECONDS
    assert v["checkers"]["rbf"]["tune_rows"] == 1200
    assert v["verdict"] == "kernel" and v["deciding_checker"] == "rbf"


@pytest.mark.slow
def test_where_exact_mode_ran_degree2_gets_what_it_left_of_the_floor(
    interaction_file: Path,
) -> None:
    """The floor is for the whole check. Exact mode's counted cost here is well under it, and
    degree-2's full expansion fits what is left, so it runs in full (before, where exact mode
    ran, degree-2 kept only its relative budget: 116 rows, skipped)."""
    v = run(CheckConfig(train=str(interaction_file))).json
    assert v["exact"]["ran"]
    d2 = v["checkers"]["degree2"]
    full = budget.degree2_seconds(d2["rows"] * (40 + 40 * 41 // 2), 2, d2["rows"])
    assert v["exact"]["estimated_seconds"] + full <= budget.FLOOR_SECONDS
    assert d2["status"] == "ok" and d2["fraction"] == 1.0, d2
    assert d2["gap_ci95"][0] > 0.02


@pytest.mark.slow
def test_a_clear_proxy_overrules_an_undertuned_exact_comparison(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exact mode's RBF held to C = 2^-7 (as a sample's search can hold it too low) finds no
    gain on a product of features; degree-2 finds it, clear of epsilon, so the verdict is
    kernel, decided by degree-2, and the warnings say why exact mode was overruled."""
    from kcheck.tuning import rbf_sample as rbf_tuning

    rng = np.random.default_rng(5)
    U = rng.uniform(-1.0, 1.0, (2000, 8))
    y = np.where(U[:, 0] * U[:, 1] + 0.5 * U[:, 2] + rng.normal(0, 0.1, 2000) > 0, 1.0, -1.0)
    path = tmp_path / "product.svm"
    write_libsvm(str(path), y, U + 2.0)
    monkeypatch.setattr(rbf_tuning, "LOG2_C", (-7.0,))
    v = run(CheckConfig(train=str(path), checkers=("degree2",))).json
    rbf, d2 = v["checkers"]["rbf"], v["checkers"]["degree2"]
    assert v["exact"]["ran"] and rbf["log2_C"] == -7.0 and rbf["gap"] < 0.02
    assert d2["gap_ci95"][0] >= 0.02
    assert (v["verdict"], v["margin"], v["deciding_checker"]) == ("kernel", "clear", "degree2")
    assert any("the exact comparison's RBF gained" in w for w in v["warnings"]), v["warnings"]
    # Without the override the same gaps would have given linear: exact mode alone says so.
    from kcheck.verdict import Gap, decide

    alone = decide({"rbf": Gap(rbf["gap"], *rbf["gap_ci95"])}, v["epsilon"])
    assert alone.verdict == "linear"


def test_a_degree2_the_cost_budget_skips_says_so_under_a_time_limit_too() -> None:
    """Both the cost budget and the time left fit too few rows: the count is the reason (a
    larger --time-limit would not help), as without the limit."""
    costly = degree2.Degree2Options(max_cost_nnz=10 * 31_625, memory_limit=2 * 2**30)
    rows, features, nnz, expanded = 1200, 250, 300_000, 1200 * 31_625
    alone = degree2.plan_counts(rows, features, nnz, expanded, 2, costly)
    timed = dataclasses.replace(costly, time_budget=0.001, seconds_per_nnz=1e-6)
    under = degree2.plan_counts(rows, features, nnz, expanded, 2, timed)
    assert alone.rows == under.rows == 0
    assert alone.limited_by == under.limited_by == "cost"
    assert alone.reason == under.reason and "cost budget" in (under.reason or "")
    # Where the cost budget alone fits enough rows, the time left is the reason.
    roomy = dataclasses.replace(timed, max_cost_nnz=10**9)
    cut = degree2.plan_counts(rows, features, nnz, expanded, 2, roomy)
    assert cut.rows == 0 and cut.limited_by == "time" and "time limit" in (cut.reason or "")
