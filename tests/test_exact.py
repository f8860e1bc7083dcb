"""Exact mode (kcheck/checkers/exact.py): the real RBF-versus-linear comparison on small data."""

from __future__ import annotations

import time

import numpy as np
import pytest
import scipy.sparse as sp

from kcheck import engines, models
from kcheck.checkers import exact
from kcheck.checkers.base import CheckerResult
from kcheck.errors import TimeLimitReached
from kcheck.verdict import decide, paired_gap
from kcheck.workers import process_pool

#: A 3 x 3 grid: enough to exercise the search, cheap to run.
SMALL = models.Grid(log2_C=(-1.0, 3.0, 7.0), log2_gamma=(3.0, -1.0, -5.0))


def circles(rows: int = 300, seed: int = 0) -> tuple[sp.csr_matrix, np.ndarray]:
    """Two noisy concentric rings in 2-D: no line separates them, an RBF SVM does."""
    rng = np.random.default_rng(seed)
    y = np.where(np.arange(rows) % 2 == 0, 1.0, -1.0)
    radius = np.where(y > 0, 0.3, 0.8) + rng.normal(0.0, 0.07, rows)
    angle = rng.uniform(0.0, 2 * np.pi, rows)
    X = np.column_stack([radius * np.cos(angle), radius * np.sin(angle)])
    return sp.csr_matrix(X), y


def noisy_linear(rows: int = 300, seed: int = 0) -> tuple[sp.csr_matrix, np.ndarray]:
    """10 uniform features; labels from a linear function with noise (about 85% reachable)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(rows, 10))
    w = rng.normal(size=10)
    score = X @ w + rng.normal(0.0, 0.35 * np.linalg.norm(w), rows)
    return sp.csr_matrix(X), np.where(score > 0, 1.0, -1.0)


@pytest.fixture(scope="module")
def circles_result() -> CheckerResult:
    X, y = circles()
    return exact.run(X, y, exact.ExactOptions(seed=0))


@pytest.fixture(scope="module")
def linear_result() -> CheckerResult:
    X, y = noisy_linear()
    return exact.run(X, y, exact.ExactOptions(seed=0))


# --- should_run ----------------------------------------------------------------------------------


def _fixed_estimate(monkeypatch: pytest.MonkeyPatch, seconds: float) -> list[bool]:
    calls: list[bool] = []

    def fake(X, y, options, *, probe=True, stop_above=None):
        calls.append(probe)
        return seconds if probe else 0.0

    monkeypatch.setattr(exact, "estimate_seconds", fake)
    return calls


@pytest.mark.parametrize(
    ("estimate", "linear_seconds", "expected"),
    [
        (4.9, 0.01, True),  # within the 5 s floor
        (5.0, 0.01, True),  # the floor is inclusive
        (5.1, 0.01, False),  # over it, and 3x linear is tiny
        (8.9, 3.0, True),  # over 5 s but within 3x the linear model's 3 s
        (9.1, 3.0, False),
    ],
)
def test_auto_threshold(monkeypatch, estimate, linear_seconds, expected):
    calls = _fixed_estimate(monkeypatch, estimate)
    X, y = circles(60)
    run, reason = exact.should_run(
        X, y, exact.ExactOptions(), linear_seconds=linear_seconds, mode="auto"
    )
    assert run is expected
    assert f"estimated {estimate:.1f}s" in reason
    assert ("within" if expected else "over") in reason
    assert True in calls  # auto probes when the data is not obviously too large


def test_always_and_never_ignore_the_estimate(monkeypatch):
    calls = _fixed_estimate(monkeypatch, 1e6)
    X, y = circles(60)
    opts = exact.ExactOptions()
    assert exact.should_run(X, y, opts, linear_seconds=0.01, mode="always")[0] is True
    calls_before = len(calls)
    _fixed_estimate(monkeypatch, 0.0)
    run, reason = exact.should_run(X, y, opts, linear_seconds=0.01, mode="never")
    assert run is False and reason
    assert calls_before == 0  # "always" does not even estimate
    with pytest.raises(ValueError):
        exact.should_run(X, y, opts, linear_seconds=0.01, mode="sometimes")


def _no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args, **kwargs):
        raise AssertionError("probed data that is obviously too large")

    monkeypatch.setattr(exact, "_time_cv", fail)
    monkeypatch.setattr(engines, "cv_rbf", fail)


def test_too_many_rows_skip_without_probe(monkeypatch):
    _no_probe(monkeypatch)
    rows = exact.MAX_ROWS + 1
    X = sp.csr_matrix(np.ones((rows, 1)))
    y = np.where(np.arange(rows) % 2 == 0, 1.0, -1.0)
    run, reason = exact.should_run(X, y, exact.ExactOptions(), linear_seconds=100.0, mode="auto")
    assert run is False
    assert reason.startswith("too large") and f"{rows:,} rows" in reason


def test_too_much_work_skips_without_probe(monkeypatch):
    _no_probe(monkeypatch)
    # 2,000 dense rows of 200 features: rows x stored values = 8e8, over MAX_WORK.
    X = sp.csr_matrix(np.ones((2000, 200)))
    y = np.where(np.arange(2000) % 2 == 0, 1.0, -1.0)
    assert exact._work(X) > exact.MAX_WORK
    run, reason = exact.should_run(X, y, exact.ExactOptions(), linear_seconds=100.0, mode="auto")
    assert run is False and reason.startswith("too large")


def test_prior_far_over_the_budget_skips_without_probe(monkeypatch):
    _no_probe(monkeypatch)
    # Under MAX_WORK, but the size-only estimate is over PRIOR_MARGIN x the 5 s budget.
    X = sp.csr_matrix(np.ones((1000, 100)))
    y = np.where(np.arange(1000) % 2 == 0, 1.0, -1.0)
    assert exact._work(X) <= exact.MAX_WORK
    prior = exact.estimate_seconds(X, y, exact.ExactOptions(), probe=False)
    assert prior > exact.PRIOR_MARGIN * exact.AUTO_SECONDS
    run, reason = exact.should_run(X, y, exact.ExactOptions(), linear_seconds=0.01, mode="auto")
    assert run is False and reason.startswith("too large")


def test_estimate_with_a_real_probe_is_positive_and_scales_with_the_grid():
    X, y = circles(200)
    small = exact.estimate_seconds(X, y, exact.ExactOptions(grid=SMALL, repeats=1))
    assert 0.0 < small < 5.0
    prior_small = exact.estimate_seconds(X, y, exact.ExactOptions(grid=SMALL, repeats=1),
                                         probe=False)
    prior_full = exact.estimate_seconds(X, y, exact.ExactOptions(repeats=1), probe=False)
    assert prior_full == pytest.approx(prior_small * (64 + 1) / (9 + 1))


def test_default_repeats_by_size():
    assert [exact.default_repeats(n) for n in (100, 999, 1000, 1999, 2000, 4999, 5000)] == [
        5, 5, 3, 3, 2, 2, 1,
    ]
    assert exact.ExactOptions(repeats=7).resolved_repeats(100) == 7
    assert exact.ExactOptions().resolved_grid() is exact.DEFAULT_GRID
    assert len(exact.DEFAULT_GRID.coarse) == 64


# --- the comparison ------------------------------------------------------------------------------


def test_nonlinear_data_gives_a_large_clear_gap(circles_result):
    r = circles_result
    assert r.name == "rbf" and r.status == "exact"
    gap = paired_gap(r.correct, r.reference_correct)
    assert gap.value > 0.2
    assert gap.low > 0.02
    assert decide({"rbf": gap}, 0.02).verdict == "kernel"
    assert decide({"rbf": gap}, 0.02).margin == "clear"
    assert r.val_accuracy > 0.9
    assert r.cv_accuracy is not None and r.cv_accuracy > 0.9


def test_linear_data_gives_a_small_gap(linear_result):
    r = linear_result
    gap = paired_gap(r.correct, r.reference_correct)
    assert gap.value < 0.02
    assert decide({"rbf": gap}, 0.02).verdict == "linear"
    assert r.info["linear_accuracy"] > 0.75


def test_per_row_arrays_and_info(circles_result):
    r = circles_result
    rows, repeats = 300, r.info["repeats"]
    assert repeats == exact.default_repeats(rows) == 5
    for a in (r.correct, r.reference_correct):
        assert a is not None
        assert a.shape == (rows,) and a.dtype == np.float64
        assert np.all((a >= 0.0) & (a <= 1.0))
        # a fraction of repeats: a multiple of 1 / repeats
        assert np.allclose(a * repeats, np.round(a * repeats))
    assert r.val_accuracy == pytest.approx(float(r.correct.mean()))
    assert set(r.info) >= {"C", "gamma", "linear_C", "folds", "repeats", "rows", "grid_points",
                           "linear_cv_accuracy", "linear_accuracy", "repeat_gaps"}
    assert r.info["rows"] == rows and r.info["folds"] == 5 and r.info["grid_points"] == 64
    # The mean of the per-repeat gaps is the gap of the per-row means.
    gap = paired_gap(r.correct, r.reference_correct).value
    assert np.mean(r.info["repeat_gaps"]) == pytest.approx(gap, abs=1e-6)


def test_reference_is_the_linear_models_own_cv_result():
    """Redo the linear side by hand: -C search on all rows, then the documented folds."""
    X, y = noisy_linear(120, seed=3)
    opts = exact.ExactOptions(seed=4, grid=SMALL, repeats=2)
    r = exact.run(X, y, opts)
    Xb = engines.as_binding_csr(X)
    C, cv = engines.search_C(engines.Problem.from_data(Xb, y), seed=4)
    assert r.info["linear_C"] == C and r.info["linear_cv_accuracy"] == cv
    per_repeat = []
    for repeat in range(2):
        fold = exact.stratified_folds(y, 5, 4, repeat)
        right = np.zeros(y.size)
        for k in range(5):
            test, train = fold == k, fold != k
            model, _ = engines.fit_linear(Xb[train], y[train], seed=4, C=C)
            right[test] = model.predict(Xb[test]) == y[test]
        per_repeat.append(right)
    assert r.reference_correct is not None
    np.testing.assert_array_equal(r.reference_correct, np.mean(per_repeat, axis=0))
    assert r.info["linear_accuracy"] == pytest.approx(float(np.mean(per_repeat)))


def test_chosen_point_is_the_grid_searchs(monkeypatch):
    X, y = circles(150, seed=2)
    r = exact.run(X, y, exact.ExactOptions(seed=1, grid=SMALL, repeats=1))
    found = models.rbf_grid_search(X, y, SMALL, seed=1)
    assert (r.info["C"], r.info["gamma"]) == (found.C, found.gamma)
    assert r.cv_accuracy == pytest.approx(found.cv_accuracy)


def test_deterministic_for_a_seed_and_across_jobs(monkeypatch):
    X, y = circles(120, seed=5)
    opts = exact.ExactOptions(seed=7, grid=SMALL, repeats=2)
    a = exact.run(X, y, opts)
    b = exact.run(X, y, opts)
    monkeypatch.setattr(exact, "MIN_PARALLEL_WORK", 0)  # use worker processes even here
    pools = []

    def counting_pool(*args, **kwargs):
        pools.append(args[0])
        return process_pool(*args, **kwargs)

    monkeypatch.setattr(exact, "process_pool", counting_pool)
    c = exact.run(X, y, exact.ExactOptions(seed=7, grid=SMALL, repeats=2, jobs=2))
    assert pools == [2]
    for other in (b, c):
        np.testing.assert_array_equal(a.correct, other.correct)
        np.testing.assert_array_equal(a.reference_correct, other.reference_correct)
        assert a.info == other.info
        assert a.cv_accuracy == other.cv_accuracy
    d = exact.run(X, y, exact.ExactOptions(seed=8, grid=SMALL, repeats=2))
    assert d.info["repeat_gaps"] != a.info["repeat_gaps"] or not np.array_equal(
        d.correct, a.correct
    )


def test_stratified_folds_are_balanced_and_seeded():
    y = np.array([0.0] * 23 + [1.0] * 7 + [2.0] * 3)
    fold = exact.stratified_folds(y, 5, 0, 0)
    assert set(fold.tolist()) == set(range(5))
    sizes = np.bincount(fold)
    assert sizes.max() - sizes.min() <= 1
    for c in (0.0, 1.0, 2.0):
        counts = np.bincount(fold[y == c], minlength=5)
        assert counts.max() - counts.min() <= 1
    np.testing.assert_array_equal(fold, exact.stratified_folds(y, 5, 0, 0))
    assert not np.array_equal(fold, exact.stratified_folds(y, 5, 0, 1))


def test_predict_trains_on_all_rows(circles_result):
    X, y = circles(200, seed=9)  # fresh rows from the same rings
    assert circles_result.predict is not None
    assert np.mean(circles_result.predict(X) == y) > 0.9


def test_too_few_rows_are_skipped():
    X, y = circles(8)
    r = exact.run(X, y, exact.ExactOptions(grid=SMALL))
    assert r.status == "skipped" and r.reason and "too few" in r.reason


def test_deadline_stops_the_comparison():
    X, y = circles(60)
    past = time.perf_counter() - 1.0
    with pytest.raises(TimeLimitReached):
        exact.run(X, y, exact.ExactOptions(grid=SMALL, deadline=past))


def test_estimate_credits_jobs_only_with_idle_cores(monkeypatch):
    X, y = circles(200)
    monkeypatch.setattr(exact, "MIN_PARALLEL_WORK", 0)
    serial = exact.estimate_seconds(X, y, exact.ExactOptions(jobs=1), probe=False)
    monkeypatch.setattr(exact, "idle_cores", lambda: 2)
    two = exact.estimate_seconds(X, y, exact.ExactOptions(jobs=2), probe=False)
    assert two == pytest.approx(serial / 2 + exact.POOL_SECONDS)
    monkeypatch.setattr(exact, "idle_cores", lambda: 1)  # a busy machine: no credit
    assert exact.estimate_seconds(X, y, exact.ExactOptions(jobs=2), probe=False) == serial


def test_auto_budget_is_capped_by_the_time_left(monkeypatch):
    _fixed_estimate(monkeypatch, 3.0)
    X, y = circles(60)
    soon = exact.ExactOptions(deadline=time.perf_counter() + 2.0)
    run, reason = exact.should_run(X, y, soon, linear_seconds=0.01, mode="auto")
    assert run is False and "time left" in reason
    later = exact.ExactOptions(deadline=time.perf_counter() + 60.0)
    assert exact.should_run(X, y, later, linear_seconds=0.01, mode="auto")[0] is True
    gone = exact.ExactOptions(deadline=time.perf_counter() - 1.0)
    assert exact.should_run(X, y, gone, linear_seconds=0.01, mode="auto") == (False, "time limit")
