"""Exact mode (kcheck/checkers/exact.py): the real RBF-versus-linear comparison on small data."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import make_context, planned

from kcheck.bindings import engines
from kcheck.checkers import exact, linear
from kcheck.checkers.base import Allowance, CheckerResult, Counts, Dataset
from kcheck.costs import budget
from kcheck.errors import TimeLimitReached
from kcheck.tuning import linear_c as tuning
from kcheck.tuning import rbf_sample as rbf_tuning
from kcheck.verdict import decide, paired_gap

#: A 3 x 3 grid: enough to exercise the search, cheap to run.
SMALL = {"log2_C": (-1.0, 3.0, 7.0), "log2_gamma_factor": (-2.0, 0.0, 2.0)}


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


# --- size: counted work, never a clock ----------------------------------------------------------


GIB = 2**30
#: What exact mode counts as the check runs it: the linear model's C is the baseline's.
GIVEN = exact.ExactOptions(baseline_C=True)


def _decide(
    X: sp.csr_matrix,
    y: np.ndarray,
    *,
    budget_seconds: float,
    mode: str,
    memory_limit: int = GIB,
    seconds_left: float | None = None,
) -> exact.ExactSizing:
    """What the plan sizes exact mode to on all of X's rows (T and V together), within the
    counted budget, the memory limit and (``--time-limit``) the seconds left."""
    k = int(np.unique(y).size)
    counts = Counts(int(X.shape[0]), 0, int(X.nnz), 0, k, int(X.shape[1]), all_classes=k)
    allowed = Allowance(memory_limit, budget_seconds, seconds_left)
    return exact.size(counts, allowed, mode).sizing


def test_auto_runs_within_the_budget_and_not_over_it():
    X, y = circles(300)
    est = exact.estimated_seconds(X, 2, GIVEN)
    assert est > 0
    within = _decide(X, y, budget_seconds=est, mode="auto")
    assert within.run and "within" in within.reason
    assert within.estimated_seconds == pytest.approx(est, abs=1e-3)
    over = _decide(X, y, budget_seconds=est * 0.99, mode="auto")
    assert not over.run and "over" in over.reason


def test_the_decision_does_not_depend_on_load(monkeypatch):
    """A busy machine (every clock read far later) decides exactly as an idle one."""
    X, y = circles(300)
    before = _decide(X, y, budget_seconds=10.0, mode="auto")
    real = time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: real() + 1e6)
    after = _decide(X, y, budget_seconds=10.0, mode="auto")
    assert before == after


@pytest.mark.slow
def test_the_search_gets_the_most_rows_the_budget_affords():
    """600 rows at least; then 1,000, 1,500, 2,000 as the counted budget allows; never more rows
    than the data has. The sizing carries the choice, and ``run`` tunes on that many."""
    X, y = circles(1500)
    at = {
        t: exact.estimated_seconds(X, 2, dataclasses.replace(GIVEN, tune_rows=t))
        for t in (600, 1000)
    }
    assert at[600] < at[1000]
    assert _decide(X, y, budget_seconds=at[1000], mode="auto").tune_rows == 1000
    assert _decide(X, y, budget_seconds=at[1000] * 0.999, mode="auto").tune_rows == 600
    assert _decide(X, y, budget_seconds=1e9, mode="auto").tune_rows == 1500  # all rows
    d = _decide(X, y, budget_seconds=at[1000], mode="auto")
    assert d.run and d.tune_rows == 1000 and d.estimated_seconds == pytest.approx(at[1000], 1e-3)
    always = _decide(X, y, budget_seconds=0.0, mode="always")
    assert always.run and always.tune_rows == 600
    small = exact.ExactOptions(tune_rows=d.tune_rows, **SMALL, repeats=1)
    assert exact.run(X, y, small).info["tune_rows"] == 1000


def test_estimate_grows_with_rows_grid_and_repeats():
    X, y = circles(1200)
    small, _ = circles(300)
    opts = exact.ExactOptions()
    assert exact.estimated_seconds(X, 2, opts) > exact.estimated_seconds(small, 2, opts)
    fewer = exact.ExactOptions(log2_C=(1.0,), repeats=1)
    assert exact.estimated_seconds(X, 2, fewer) < exact.estimated_seconds(X, 2, opts)
    # Multiclass one-vs-one costs more than a binary problem of the same size.
    assert exact.estimated_seconds(X, 10, opts) > exact.estimated_seconds(X, 2, opts)


def test_always_and_never_ignore_the_estimate():
    X, y = circles(300)
    always = _decide(X, y, budget_seconds=0.0, memory_limit=GIB, mode="always")
    assert always.run
    never = _decide(X, y, budget_seconds=1e9, memory_limit=GIB, mode="never")
    assert not never.run and never.reason == "exact mode is off"
    with pytest.raises(ValueError):
        _decide(X, y, budget_seconds=1.0, memory_limit=GIB, mode="sometimes")


def test_too_costly_or_too_little_memory_refuse():
    X, y = circles(6_000)
    d = _decide(X, y, budget_seconds=10.0, memory_limit=64 * GIB, mode="auto")
    assert not d.run and d.reason.startswith("its counted cost is over")
    # No row count decides: a budget that pays for 6,000 rows runs them.
    d = _decide(X, y, budget_seconds=1e9, memory_limit=64 * GIB, mode="auto")
    assert d.run
    X, y = circles(500)
    tiny = exact.matrix_bytes(500) - 1
    for mode in ("auto", "always"):
        d = _decide(X, y, budget_seconds=1e9, memory_limit=tiny, mode=mode)
        assert not d.run and "memory limit" in d.reason


def test_auto_budget_is_capped_by_the_time_left():
    X, y = circles(300)
    est = exact.estimated_seconds(X, 2, GIVEN)
    d = _decide(X, y, budget_seconds=1e3, mode="auto", seconds_left=est / 2)
    assert not d.run and "time limit" in d.reason
    assert _decide(X, y, budget_seconds=1e3, mode="auto", seconds_left=1e4).run


def test_default_repeats_by_size():
    assert [exact.default_repeats(n) for n in (100, 999, 1000, 1999, 2000, 4999)] == [
        5,
        5,
        3,
        3,
        2,
        2,
    ]
    assert exact.ExactOptions(repeats=7).max_repeats(100) == 7
    assert exact.ExactOptions().grid_points() == len(rbf_tuning.LOG2_C) * len(
        rbf_tuning.LOG2_GAMMA_FACTOR
    )


def test_grid_is_placed_by_the_median_distance():
    X, y = circles(200)
    D = engines.squared_distances(X)
    med = exact.median_sq_distance(D)
    Xd = X.toarray()
    direct = ((Xd[:, None, :] - Xd[None, :, :]) ** 2).sum(axis=2)
    np.testing.assert_allclose(D, direct, atol=1e-12)
    assert med == pytest.approx(float(np.median(direct[np.triu_indices(200, 1)])))
    points = exact.grid_for(med, exact.ExactOptions())
    gammas = sorted({2.0**g for _, g in points})
    assert gammas == pytest.approx([2.0**f / med for f in rbf_tuning.LOG2_GAMMA_FACTOR])
    assert exact.median_sq_distance(np.zeros((3, 3))) == 1.0  # all rows equal


def test_precomputed_kernel_gives_libsvms_own_cv():
    """The precomputed kernel is exp(-gamma D): LIBSVM's CV counts match its own RBF kernel."""
    X, y = circles(200, seed=3)
    D = engines.squared_distances(X)
    rbf = engines.SvmProblem.from_data(X, y)
    for c, g in ((0.5, 1.0), (8.0, 16.0), (128.0, 0.25)):
        kp = engines.KernelProblem.from_kernel(np.exp(-g * D), y)
        assert engines.cv_kernel(kp, c, folds=5, seed=2) == engines.cv_rbf(
            rbf, c, g, folds=5, seed=2
        )


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


@pytest.mark.slow
def test_linear_data_gives_a_small_gap(linear_result):
    r = linear_result
    gap = paired_gap(r.correct, r.reference_correct)
    assert gap.value < 0.02
    assert decide({"rbf": gap}, 0.02).verdict == "linear"
    assert r.info["linear_accuracy"] > 0.75


def test_per_row_arrays_and_info(circles_result):
    r = circles_result
    rows, repeats = 300, r.info["repeats"]
    # The gap (about 40 points) is clear of epsilon after the minimum number of repeats.
    assert repeats == exact.MIN_REPEATS and r.info["stopped_early"]
    for a in (r.correct, r.reference_correct):
        assert a is not None
        assert a.shape == (rows,) and a.dtype == np.float64
        assert np.all((a >= 0.0) & (a <= 1.0))
        # a fraction of repeats: a multiple of 1 / repeats
        assert np.allclose(a * repeats, np.round(a * repeats))
    assert r.val_accuracy == pytest.approx(float(r.correct.mean()))
    assert set(r.info) >= {
        "C",
        "gamma",
        "linear_C",
        "folds",
        "repeats",
        "rows",
        "grid_points",
        "linear_cv_accuracy",
        "linear_accuracy",
        "repeat_gaps",
    }
    assert r.info["rows"] == rows and r.info["folds"] == 5
    assert r.info["grid_points"] == exact.ExactOptions().grid_points()
    assert r.info["tune_rows"] == rows
    # The mean of the per-repeat gaps is the gap of the per-row means.
    gap = paired_gap(r.correct, r.reference_correct).value
    assert np.mean(r.info["repeat_gaps"]) == pytest.approx(gap, abs=1e-6)


def test_reference_is_the_linear_models_own_cv_result():
    """Redo the linear side by hand: -C search on all rows, then the documented folds."""
    X, y = noisy_linear(120, seed=3)
    opts = exact.ExactOptions(seed=4, **SMALL, repeats=2)
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
            model, _ = tuning.fit_linear(Xb[train], y[train], seed=4, C=C)
            right[test] = model.predict(Xb[test]) == y[test]
        per_repeat.append(right)
    assert r.reference_correct is not None
    np.testing.assert_array_equal(r.reference_correct, np.mean(per_repeat, axis=0))
    assert r.info["linear_accuracy"] == pytest.approx(float(np.mean(per_repeat)))


def test_chosen_point_is_the_grid_searchs():
    """Redo the search by hand: LIBSVM's own RBF CV at every grid point, ties to smaller C."""
    X, y = circles(150, seed=2)
    opts = exact.ExactOptions(seed=1, repeats=1, **SMALL)
    r = exact.run(X, y, opts)
    med = exact.median_sq_distance(engines.squared_distances(X))
    problem = engines.SvmProblem.from_data(X, y)
    scores = {
        (c, g): engines.cv_rbf(problem, 2.0**c, 2.0**g, folds=5, seed=1)
        for c, g in exact.grid_for(med, opts)
    }
    c, g = exact.best_point(scores)
    assert r.info["C"] == 2.0**c and r.info["gamma"] == pytest.approx(2.0**g)
    assert r.cv_accuracy == pytest.approx(scores[(c, g)] / 150)


def test_tuning_uses_a_stratified_sample_above_tune_rows():
    X, y = circles(300, seed=4)
    r = exact.run(X, y, exact.ExactOptions(seed=0, repeats=1, tune_rows=100, **SMALL))
    assert r.info["tune_rows"] == 100 and r.info["rows"] == 300
    assert r.correct is not None and r.correct.shape == (300,)


@pytest.mark.slow
def test_repeats_stop_early_only_when_the_interval_is_clear():
    X, y = noisy_linear(300, seed=1)
    # epsilon far above any gap: clear after the minimum; epsilon at the gap: never clear.
    far = exact.run(X, y, exact.ExactOptions(seed=0, epsilon=0.5, **SMALL))
    assert far.info["repeats"] == exact.MIN_REPEATS and far.info["stopped_early"]
    gap = paired_gap(far.correct, far.reference_correct).value
    near = exact.run(X, y, exact.ExactOptions(seed=0, epsilon=gap, **SMALL))
    assert near.info["repeats"] == exact.default_repeats(300) and not near.info["stopped_early"]
    fixed = exact.run(X, y, exact.ExactOptions(seed=0, epsilon=0.5, repeats=3, **SMALL))
    assert fixed.info["repeats"] == 3


def test_deterministic_for_a_seed_and_across_jobs():
    X, y = circles(120, seed=5)
    opts = exact.ExactOptions(seed=7, repeats=2, **SMALL)
    a = exact.run(X, y, opts)
    b = exact.run(X, y, opts)
    c = exact.run(X, y, exact.ExactOptions(seed=7, repeats=2, jobs=2, **SMALL))
    for other in (b, c):
        np.testing.assert_array_equal(a.correct, other.correct)
        np.testing.assert_array_equal(a.reference_correct, other.reference_correct)
        assert a.info == other.info
        assert a.cv_accuracy == other.cv_accuracy
    d = exact.run(X, y, exact.ExactOptions(seed=8, repeats=2, **SMALL))
    assert d.info["repeat_gaps"] != a.info["repeat_gaps"] or not np.array_equal(
        d.correct, a.correct
    )


def test_with_two_jobs_the_folds_train_side_by_side_with_the_same_result(monkeypatch):
    """From SIDE_BY_SIDE_MIN_ROWS rows, two jobs train the search's CV folds and the repeats'
    folds in two threads; every number is that of one job."""
    from kcheck.defaults import Event

    X, y = circles(engines.SIDE_BY_SIDE_MIN_ROWS + 20, seed=2)
    alone_events: list[Event] = []
    alone = exact.run(X, y, exact.ExactOptions(seed=3, repeats=2, **SMALL), alone_events.append)
    alone_shown = [e.predicted_seconds for e in alone_events if e.stage == exact.REPEATS_STAGE]
    assert alone_shown[0] is not None and alone_shown[0] > 0
    side_by_side_cv, side_by_side = engines._side_by_side_cv, exact.side_by_side
    searched: list[int] = []
    repeats: list[tuple[int, int]] = []

    def counted_cv(*args):  # type: ignore[no-untyped-def]
        searched.append(1)
        return side_by_side_cv(*args)

    def counted_repeat(fn, count, workers):  # type: ignore[no-untyped-def]
        repeats.append((count, workers))
        return side_by_side(fn, count, workers)

    monkeypatch.setattr(engines, "_side_by_side_cv", counted_cv)
    monkeypatch.setattr(exact, "side_by_side", counted_repeat)
    events: list[Event] = []
    side = exact.run(X, y, exact.ExactOptions(seed=3, repeats=2, jobs=2, **SMALL), events.append)
    assert len(searched) == 9  # every point of the 3 x 3 grid
    assert repeats == [(5, 2)] * 2  # each repeat's five folds, two at a time
    # The repeats are announced as they take: the three folds of five that one thread trains.
    shown = [e.predicted_seconds for e in events if e.stage == exact.REPEATS_STAGE]
    assert shown[0] == pytest.approx(alone_shown[0] * 0.6, abs=1e-3)
    np.testing.assert_array_equal(side.correct, alone.correct)
    np.testing.assert_array_equal(side.reference_correct, alone.reference_correct)
    np.testing.assert_array_equal(side.scores, alone.scores)
    assert side.info == alone.info and side.cv_accuracy == alone.cv_accuracy


def test_the_repeats_folds_side_by_side_fit_the_memory_limit():
    """Two folds side by side hold more than one (repeat_bytes, as measured on 5,000 rows):
    where the memory limit holds only one, they train in turn; below SIDE_BY_SIDE_MIN_ROWS
    always in turn, and never more than --jobs."""
    rows = 4_000
    one, two = exact.repeat_bytes(rows, 1), exact.repeat_bytes(rows, 2)
    assert one < two
    assert exact.repeat_workers(rows, 2, two) == 2
    assert exact.repeat_workers(rows, 2, None) == 2
    assert exact.repeat_workers(rows, 8, two) == exact.REPEAT_WORKERS == 2
    assert exact.repeat_workers(rows, 2, two - 1) == 1
    assert exact.repeat_workers(rows, 1, two) == 1
    assert exact.repeat_workers(engines.SIDE_BY_SIDE_MIN_ROWS - 1, 2, None) == 1
    # The memory check's own count lies between them: where exact mode just fits, in turn.
    assert one < rbf_tuning.matrix_bytes(rows) < two


def _baseline(T: Dataset, V: Dataset) -> CheckerResult:
    """The real linear baseline on T, as the check runs it before exact mode."""
    return linear.run(T, V, linear.LinearOptions(seed=0))


def test_the_check_compares_with_the_baselines_C_and_counts_no_search_of_its_own(
    monkeypatch,
) -> None:
    """In the check, exact mode's linear model is the baseline's (its C from T's search): it
    searches no C of its own on all rows, and its count leaves that search out, by exactly
    LIBLINEAR's count on all rows. A direct call still searches, and counts it."""
    X, y = circles(400, seed=4)
    T, V = Dataset(X[:300], y[:300]), Dataset(X[300:], y[300:])
    base = _baseline(T, V)
    base.info["C"] = 2.0**-3  # not what a search on all rows would choose (checked below)
    searched: list[int] = []
    fit_linear = tuning.fit_linear

    def spy(X, y, seed, C=None, class_weight=None):  # type: ignore[no-untyped-def]
        if C is None:
            searched.append(int(y.size))
        return fit_linear(X, y, seed=seed, C=C, class_weight=class_weight)

    monkeypatch.setattr(tuning, "fit_linear", spy)
    always = planned(exact.NAME, T, V, mode="always")
    block, result = exact.check_all(T, V, make_context(baseline=base), always)
    assert result is not None and result.status == "exact"
    assert result.info["linear_C"] == 2.0**-3
    assert result.info["linear_cv_accuracy"] == base.cv_accuracy
    assert not result.info["nested"] and searched == []  # the folds train at the given C
    alone = exact.run(X, y, exact.ExactOptions(seed=0, repeats=1, **SMALL))
    assert 400 in searched and alone.info["linear_C"] != 2.0**-3
    given, own = exact.ExactOptions(baseline_C=True), exact.ExactOptions()
    counted = budget.linear_seconds(int(X.nnz), 2)
    assert exact.counted_seconds(400, int(X.nnz), 2, own) - exact.counted_seconds(
        400, int(X.nnz), 2, given
    ) == pytest.approx(counted)
    # Given exactly where the options say so: a mismatch is a caller's error.
    with pytest.raises(ValueError, match="baseline's C"):
        exact.run(X, y, given)
    with pytest.raises(ValueError, match="baseline's C"):
        exact.run(X, y, own, linear=exact.Linear(1.0, None))


@pytest.mark.parametrize("roomy", [True, False], ids=["roomy", "tight"])
def test_the_check_gives_the_repeats_its_memory_limit(roomy: bool, monkeypatch) -> None:
    """check_all passes the run's memory limit and jobs on: under a limit that holds exact
    mode's count but not two folds side by side, the repeats' folds train in turn."""
    from kcheck.checkers.base import Context

    X, y = circles(engines.SIDE_BY_SIDE_MIN_ROWS + 100, seed=4)
    rows = int(y.size)
    limit = exact.repeat_bytes(rows, 2) if roomy else rbf_tuning.matrix_bytes(rows)
    repeats: list[int] = []
    side_by_side = exact.side_by_side

    def counted_repeat(fn, count, workers):  # type: ignore[no-untyped-def]
        repeats.append(workers)
        return side_by_side(fn, count, workers)

    monkeypatch.setattr(exact, "side_by_side", counted_repeat)
    t = rows * 3 // 4
    T, V = Dataset(X[:t], y[:t]), Dataset(X[t:], y[t:])
    ctx = Context(
        seed=0, jobs=2, epsilon=0.02, memory_limit=limit, deadline=None, baseline=_baseline(T, V)
    )
    block, result = exact.check_all(T, V, ctx, planned(exact.NAME, T, V, None, limit, "always"))
    assert block["ran"] and result is not None and result.status == "exact"
    assert repeats == [2 if roomy else 1] * result.info["repeats"]


@pytest.mark.parametrize("mode", ["auto", "always"])
def test_the_check_gives_the_repeats_its_budget_under_auto(mode: str, monkeypatch) -> None:
    """Under ``auto`` the repeats must fit the plan's counted budget
    (:func:`exact.repeats_within_budget`); ``always`` runs past the budget by request and may
    run the adaptive maximum."""

    # More rows than the search's sample: not nested, so the repeats choose their point.
    X, y = circles(800, seed=4)
    seen: list[float | None] = []
    within = exact.repeats_within_budget

    def spy(search, tune_rows, rows, nnz, classes, options):  # type: ignore[no-untyped-def]
        seen.append(options.budget_seconds)
        return within(search, tune_rows, rows, nnz, classes, options)

    monkeypatch.setattr(exact, "repeats_within_budget", spy)
    T, V = Dataset(X[:600], y[:600]), Dataset(X[600:], y[600:])
    ctx = make_context(baseline=_baseline(T, V))
    block, result = exact.check_all(T, V, ctx, planned(exact.NAME, T, V, 10.0, mode=mode))
    assert block["ran"] and result is not None and result.status == "exact"
    assert seen == ([10.0] if mode == "auto" else [None])
    assert result.info["repeats"] <= result.info["repeats_budgeted"] <= exact.default_repeats(800)


def test_the_time_shown_follows_the_folds_side_by_side() -> None:
    """Display only: five folds on two threads take about three folds' time; one job, all."""
    assert rbf_tuning.side_by_side_share(5, 1) == 1.0
    assert rbf_tuning.side_by_side_share(5, 2) == pytest.approx(0.6)
    assert rbf_tuning.side_by_side_share(3, 2) == pytest.approx(2 / 3)
    assert exact.wall_share(2_000, 2, 2**30) == pytest.approx(0.6)
    assert exact.wall_share(2_000, 1, 2**30) == 1.0
    assert exact.wall_share(engines.SIDE_BY_SIDE_MIN_ROWS - 1, 2, 2**30) == 1.0


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
    r = exact.run(X, y, exact.ExactOptions(**SMALL))
    assert r.status == "skipped" and r.reason and "too few" in r.reason


def test_deadline_stops_the_comparison():
    X, y = circles(60)
    past = time.perf_counter() - 1.0
    with pytest.raises(TimeLimitReached):
        exact.run(X, y, exact.ExactOptions(**SMALL, deadline=past))


# --- nested where the search's sample is all the rows ---------------------------------------------


def test_tiny_data_is_nested_where_the_nested_comparison_fits_the_budget():
    """270 rows: the search's sample is all of them, and the nested comparison fits the 10 s
    budget, so it is nested; 1,000 rows fit only the plain one, which runs as before."""
    X, y = circles(270)
    d = _decide(X, y, budget_seconds=10.0, memory_limit=GIB, mode="auto")
    assert d.run and d.nest and d.tune_rows is not None and d.tune_rows >= 270
    nested = dataclasses.replace(GIVEN, tune_rows=d.tune_rows, nest=True)
    plain = dataclasses.replace(GIVEN, tune_rows=d.tune_rows)
    assert nested.nested(270) and not plain.nested(270)
    # Its counted cost has the searches inside the folds, and the decision says so.
    cost = exact.estimated_seconds(X, 2, nested)
    assert cost > 3 * exact.estimated_seconds(X, 2, plain)
    assert d.estimated_seconds == pytest.approx(cost, abs=1e-3)
    X, y = circles(1000)
    d = _decide(X, y, budget_seconds=10.0, memory_limit=GIB, mode="auto")
    assert d.run and not d.nest
    # A sample smaller than the rows is never nested, whatever the flag says.
    assert not exact.ExactOptions(tune_rows=600, nest=True).nested(1000)


def test_nested_comparison_tunes_both_models_inside_every_training_fold(monkeypatch):
    X, y = circles(120, seed=3)
    searches: list[int] = []
    real_search = exact.search_grid

    def counted_search(D, yy, *args, **kwargs):  # type: ignore[no-untyped-def]
        searches.append(int(yy.size))
        return real_search(D, yy, *args, **kwargs)

    linear_Cs: list[float | None] = []
    real_fit = tuning.fit_linear

    def counted_fit(*args, **kwargs):  # type: ignore[no-untyped-def]
        linear_Cs.append(kwargs.get("C"))
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(exact, "search_grid", counted_search)
    monkeypatch.setattr(tuning, "fit_linear", counted_fit)
    opts = exact.ExactOptions(tune_rows=600, nest=True, repeats=2)
    res = exact.run(X, y, opts)
    assert res.status == "exact" and res.info["nested"] is True
    # One search on all 120 rows (the point reported), then one per training fold: 2 x 5.
    assert searches[0] == 120 and len(searches) == 1 + 2 * 5
    assert all(90 <= n <= 100 for n in searches[1:])
    # The linear model's C is searched again in every training fold (C=None), not fixed.
    assert linear_Cs[0] is None and linear_Cs[1:].count(None) == 2 * 5
    plain = exact.run(X, y, exact.ExactOptions(tune_rows=600, repeats=2))
    assert plain.info["nested"] is False
    # Both are per-row results of the same fold assignments.
    assert res.correct.shape == plain.correct.shape == (120,)


@pytest.mark.parametrize("nest", [False, True])
def test_the_repeats_are_announced_with_their_prediction(nest: bool) -> None:
    """Not nested, the repeats on all rows follow the search as a stage of their own whose
    first event carries their predicted seconds (from the search's iterations at the chosen
    point): at a large C they can take many times the search. Nested, each repeat searches
    again, and the stage stays one."""
    from kcheck.defaults import Event

    X, y = circles(300, seed=3)
    events: list[Event] = []
    opts = exact.ExactOptions(seed=0, repeats=2, nest=nest, **SMALL)
    r = exact.run(X, y, opts, events.append)
    assert r.val_accuracy is not None and len(r.info["repeat_gaps"]) == 2
    stages = [e.stage for e in events]
    if nest:
        assert set(stages) == {exact.STAGE}
        assert events[0].predicted_seconds is None  # all one stage: the step's prediction
        return
    # The search, before the repeats, is announced with its own count (the repeats' left out).
    search = exact.counted_seconds(300, int(X.nnz), 2, dataclasses.replace(opts, repeats=0))
    assert events[0].predicted_seconds == pytest.approx(search, abs=1e-3)
    assert search < exact.counted_seconds(300, int(X.nnz), 2, opts)
    first = stages.index(exact.REPEATS_STAGE)
    assert set(stages[:first]) == {exact.STAGE} and set(stages[first:]) == {exact.REPEATS_STAGE}
    start, end = events[first], events[-1]
    assert events[first - 1].done == events[first - 1].total == 9
    assert start.done == 0 and start.predicted_seconds is not None and start.predicted_seconds > 0
    assert end.done == end.total == 2


def test_a_repeats_prediction_follows_the_searchs_iterations_at_the_chosen_point() -> None:
    """One repeat: its counted kernel copies and linear fits, plus LIBSVM's iterations at the
    chosen point scaled from the search's CV on the tuning rows to a CV on all rows
    (offsets_onehot_n5000: predicted 35 s for two repeats at C = 2^11 that took 40 s)."""
    point = (11.0, -5.0)

    def tuned(iterations: int) -> exact._Tuned:
        search = rbf_tuning.Search({point: 0.9}, {point: 540}, *point, {point: iterations})
        return exact._Tuned(exact._Chosen(2.0**11, 2.0**-5, 1.0), search, 600, 1.0, None)

    opts = exact.ExactOptions(seed=0)
    few = exact.repeat_seconds(tuned(1_000), 5_000, 5_000 * 54, 2, opts)
    many = exact.repeat_seconds(tuned(110_000), 5_000, 5_000 * 54, 2, opts)
    # 110,000 iterations on 600 rows: about 917,000 in a CV on 5,000, each over 4,000 rows.
    extra = 109_000 * 5_000 / 600 * 4_000 * exact.budget.SVM_PRECOMPUTED_SECONDS_PER_ITERATION_ROW
    assert many - few == pytest.approx(extra, rel=1e-6)
    assert few > 0


def test_the_result_revises_its_count_with_the_repeats_predicted_from_the_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``revised_seconds``: the count of the distances, the search as it ran (its support
    vectors and iterations in place of its count) and each repeat that ran at
    :func:`exact.repeat_seconds`, from the search's iterations at the chosen point
    (kcheck.plan.done_share compares the stage with it); counts only, the same everywhere."""
    seen: list[exact._Tuned] = []
    real = exact._revised_seconds

    def recording(tuned: exact._Tuned, *args: int | exact.ExactOptions) -> float:
        seen.append(tuned)
        return real(tuned, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(exact, "_revised_seconds", recording)
    X, y = circles()
    r = exact.run(X, y, exact.ExactOptions(seed=0))
    (tuned,) = seen
    point = (tuned.search.log2_C, tuned.search.log2_gamma)
    assert tuned.search.iterations[point] > 0 and not r.info["nested"]
    opts = exact.ExactOptions(seed=0, tune_rows=300)
    one = exact.repeat_seconds(tuned, 300, int(X.nnz), 2, opts)
    search = exact.counted_seconds(300, int(X.nnz), 2, dataclasses.replace(opts, repeats=0))
    # LIBSVM's support vectors at every scored point, over its 5 folds of 240 rows each.
    svs = tuned.search.support_vectors
    assert set(svs) == set(tuned.search.scores)
    assert all(0 < n <= 5 * 240 for n in svs.values())
    ran = exact.budget.svm_trained_seconds(
        sum(svs.values()), sum(tuned.search.iterations.values()), 240
    )
    counted = exact.budget.rbf_tuning_seconds(
        tune_rows=300,
        n_classes=2,
        grid_points=opts.grid_points(),
        gammas=len(opts.resolved_gamma_factor()),
        folds=5,
    )
    assert exact.rbf_sample.beyond_count(tuned.search, 300, 2, opts) == pytest.approx(ran - counted)
    revised = search - counted + ran + r.info["repeats"] * one
    assert r.info["revised_seconds"] == pytest.approx(revised, abs=1e-3)
    # A search that recorded no support vectors keeps its count.
    unrecorded = dataclasses.replace(tuned.search, support_vectors={})
    assert exact.rbf_sample.beyond_count(unrecorded, 300, 2, opts) == 0.0
    # Without the search's iterations a repeat is predicted at its count alone: less.
    bare = dataclasses.replace(tuned.search, iterations={point: 0})
    count = exact.repeat_seconds(dataclasses.replace(tuned, search=bare), 300, int(X.nnz), 2, opts)
    assert 0 < count < one


# --- the search and the repeats keep within their allowance --------------------------------------


def checkerboard(rows: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A 4 x 4 checkerboard in 2-D: a wide kernel at a large C keeps LIBSVM iterating."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 1.0, size=(rows, 2))
    y = np.where((np.floor(X[:, 0] * 4) + np.floor(X[:, 1] * 4)) % 2 == 0, 1.0, -1.0)
    return X, y


def _search(allowance: float | None) -> rbf_tuning.Search:
    X, y = checkerboard()
    D = engines.squared_distances(sp.csr_matrix(X))
    median = rbf_tuning.median_sq_distance(D)
    opts = rbf_tuning.Tuning(seed=0, folds=5)
    return rbf_tuning.search_grid(D, y, median, opts, lambda _: None, lambda: None, allowance)


@pytest.fixture(scope="module")
def unbounded() -> rbf_tuning.Search:
    return _search(None)


def test_a_search_within_its_allowance_passes_over_the_costly_large_C(unbounded) -> None:
    """Twice the counted seconds on a checkerboard: the wide gammas' large C are predicted past
    their share and passed over with the larger C at their gamma; every gamma's smallest C
    runs, and a point scored gets the score it gets without the bound."""
    opts = rbf_tuning.Tuning(seed=0, folds=5)
    counted = rbf_tuning.search_seconds(400, 2, opts)
    bounded = _search(rbf_tuning.SEARCH_ALLOWANCE * counted)
    passed = {(p["log2_C"], p["log2_gamma"]) for p in bounded.passed_over}
    scored = {(c, round(g, 6)) for c, g in bounded.scores}
    assert passed, "a checkerboard's large C at a wide gamma is costly"
    assert len(scored) + len(passed) == opts.grid_points()
    assert scored.isdisjoint(passed)
    for c, g in passed:  # the larger C at the same gamma go too
        assert all((c2, g) in passed for c2 in opts.resolved_C() if c2 > c)
        assert (min(opts.resolved_C()), g) in scored
    assert all(bounded.scores[p] == unbounded.scores[p] for p in bounded.scores)
    assert all(p["predicted_seconds"] > 0 for p in bounded.passed_over)
    # What it spent, counted from the iterations it ran, is within the allowance.
    spent = sum(
        rbf_tuning.budget.svm_iteration_seconds(n, 320, 2, precomputed=True)
        for n in bounded.iterations.values()
    )
    assert spent < rbf_tuning.SEARCH_ALLOWANCE * counted
    assert spent < sum(
        rbf_tuning.budget.svm_iteration_seconds(n, 320, 2, precomputed=True)
        for n in unbounded.iterations.values()
    )


def test_the_points_passed_over_carry_their_predicted_iterations() -> None:
    """A training at a point the search passed over (rbfsvm's larger-C step) is predicted from
    these: each passed point's iterations carry its gamma's growth on from the C scored."""
    opts = rbf_tuning.Tuning(seed=0, folds=5)
    bounded = _search(rbf_tuning.SEARCH_ALLOWANCE * rbf_tuning.search_seconds(400, 2, opts))
    passed = {(p["log2_C"], p["log2_gamma"]) for p in bounded.passed_over}
    assert {(c, round(g, 6)) for c, g in bounded.passed_iterations} == passed
    predicted = bounded.predicted_iterations()
    assert set(predicted) == set(bounded.scores) | set(bounded.passed_iterations)
    for g in {g for _, g in bounded.passed_iterations}:
        ladder = [predicted[(c, g)] for c in sorted(c for c, h in predicted if h == g)]
        scored = [float(n) for (c, h), n in sorted(bounded.iterations.items()) if h == g]
        assert ladder[: len(scored)] == scored
        for i in range(len(scored), len(ladder)):
            assert ladder[i] == rbf_tuning._next_iterations(ladder[:i]) > 0


def test_a_search_bounded_the_same_way_passes_over_the_same_points(unbounded) -> None:
    """Counts only: the same rows and allowance pass over the same points, and a generous
    allowance passes over none."""
    opts = rbf_tuning.Tuning(seed=0, folds=5)
    counted = rbf_tuning.search_seconds(400, 2, opts)
    assert _search(2 * counted).passed_over == _search(2 * counted).passed_over
    generous = _search(1e6)
    assert generous.passed_over == () and generous.scores == unbounded.scores


def test_next_iterations_carry_the_growth_from_the_smaller_C() -> None:
    assert rbf_tuning._next_iterations([]) == 0.0
    assert rbf_tuning._next_iterations([500]) == 500.0
    assert rbf_tuning._next_iterations([1_000, 4_000]) == 16_000.0
    # Iterations that fell predict no fewer than the last.
    assert rbf_tuning._next_iterations([4_000, 1_000]) == 1_000.0


def _ranked_search(iterations: dict[tuple[float, float], int]) -> rbf_tuning.Search:
    scores = {(11.0, -5.0): 0.9, (9.0, -5.0): 0.88, (3.0, -3.0): 0.8}
    return rbf_tuning.Search(scores, {p: 1 for p in scores}, 11.0, -5.0, iterations)


def test_the_repeats_compare_the_best_point_whose_repeats_fit() -> None:
    """offsets_onehot_n5000: two repeats at C = 2^11 were predicted at 35 s where 7 were
    counted; the next best point, cheap, is compared, and the better one is named."""
    opts = exact.ExactOptions(seed=0)
    costly = {(11.0, -5.0): 2_000_000, (9.0, -5.0): 2_000, (3.0, -3.0): 1_000}
    search, passed = exact._affordable(_ranked_search(costly), 600, 5_000, 5_000 * 54, 2, opts)
    assert (search.log2_C, search.log2_gamma) == (9.0, -5.0)
    assert [(p["log2_C"], p["log2_gamma"]) for p in passed] == [(11.0, -5.0)]
    cheap = {p: 2_000 for p in costly}
    search, passed = exact._affordable(_ranked_search(cheap), 600, 5_000, 5_000 * 54, 2, opts)
    assert (search.log2_C, search.log2_gamma) == (11.0, -5.0) and passed == ()


def test_under_auto_no_more_repeats_run_than_fit_the_budget() -> None:
    """Two repeats within twice their count can still take the check past its budget (5,000
    covtype-like rows at C = 2^7): the point stays, and fewer repeats run, never none."""
    costly = {(11.0, -5.0): 20_000, (9.0, -5.0): 2_000, (3.0, -3.0): 1_000}
    search = _ranked_search(costly)
    args = (600, 5_000, 5_000 * 54, 2)
    unbounded = exact.ExactOptions(seed=0)
    chosen, passed = exact._affordable(search, *args, unbounded)
    assert (chosen.log2_C, chosen.log2_gamma) == (11.0, -5.0) and passed == ()
    assert exact.repeats_within_budget(chosen, *args, unbounded) == 2
    rest = exact.counted_seconds(5_000, 5_000 * 54, 2, exact.ExactOptions(tune_rows=600, repeats=0))
    each = exact.repeat_seconds(
        exact._Tuned(exact._Chosen(1.0, 1.0, 1.0), chosen, 600, 1.0, None), *args[1:], unbounded
    )

    def within(seconds: float) -> int:
        options = dataclasses.replace(unbounded, budget_seconds=seconds)
        return exact.repeats_within_budget(chosen, *args, options)

    assert within(rest + 2 * each) == 2
    assert within(rest + 2 * each - 0.01) == 1
    assert within(rest) == 1  # at least one, whatever the budget
    # A fixed --repeats is the user's, never cut.
    fixed = dataclasses.replace(unbounded, budget_seconds=rest, repeats=3)
    assert exact.repeats_within_budget(chosen, *args, fixed) == 3


def test_where_no_point_fits_the_repeats_compare_the_cheapest() -> None:
    opts = exact.ExactOptions(seed=0)
    costly = {(11.0, -5.0): 3_000_000, (9.0, -5.0): 2_000_000, (3.0, -3.0): 1_000_000}
    search, passed = exact._affordable(_ranked_search(costly), 600, 5_000, 5_000 * 54, 2, opts)
    assert (search.log2_C, search.log2_gamma) == (3.0, -3.0)
    assert [(p["log2_C"], p["log2_gamma"]) for p in passed] == [(11.0, -5.0), (9.0, -5.0)]


@pytest.mark.parametrize("dense", [True, False])
def test_the_json_names_what_the_comparison_passed_over(dense: bool, monkeypatch) -> None:
    """A tight allowance on a checkerboard: the result names the grid points not scored and
    counts only the scored ones; dense or sparse rows give the same."""
    X, y = checkerboard(300, seed=1)
    monkeypatch.setattr(rbf_tuning, "SEARCH_ALLOWANCE", 1.0)
    rows = X if dense else sp.csr_matrix(X)
    r = exact.run(sp.csr_matrix(rows), y, exact.ExactOptions(seed=0, tune_rows=200, repeats=2))
    assert r.info["grid_passed_over"]
    assert r.info["grid_points"] + len(r.info["grid_passed_over"]) == 28
    assert isinstance(r.info["passed_over"], list)


def test_progress_counts_the_points_passed_over_and_then_the_repeats(monkeypatch) -> None:
    """A search that passes over points still reaches its grid's total, and the repeats then
    count from 0 to their number (not from the points scored)."""
    from kcheck.defaults import Event

    X, y = checkerboard(300, seed=1)
    monkeypatch.setattr(rbf_tuning, "SEARCH_ALLOWANCE", 1.0)
    events: list[Event] = []
    opts = exact.ExactOptions(seed=0, tune_rows=200, repeats=2)
    r = exact.run(sp.csr_matrix(X), y, opts, events.append)
    assert r.info["grid_passed_over"]
    search = [e for e in events if e.stage == exact.STAGE]
    repeats = [e for e in events if e.stage == exact.REPEATS_STAGE]
    assert search[-1].done == search[-1].total == opts.grid_points()
    assert [(e.done, e.total) for e in repeats] == [(0, 2), (1, 2), (2, 2)]
