"""The rbfsvm checker (kcheck/checkers/rbfsvm.py): the RBF SVM itself on small data where exact
mode did not run, planned from counted work, sharing small data's floor with degree-2."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import made_once, make_context, planned

from kcheck import plan
from kcheck.checkers import degree2, rbfsvm
from kcheck.checkers.base import Counts, Dataset
from kcheck.config import CheckConfig
from kcheck.costs import budget
from kcheck.costs import solvers as solver_costs
from kcheck.defaults import Event
from kcheck.errors import TimeLimitReached
from kcheck.io.data import write_libsvm
from kcheck.pipeline import run
from kcheck.tuning import rbf_sample as rbf_tuning


def wavy(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Five uniform features: a linear rule in three plus waves in two. A smooth boundary that
    neither degree-2 (no squares or products in it) nor k-means clusters follow."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(rows, 5))
    f = (
        X[:, 1]
        + 0.5 * X[:, 2]
        - 0.3 * X[:, 3]
        + 0.3 * (np.sin(6.5 * X[:, 0]) + np.cos(6.5 * X[:, 4]))
    )
    return np.where(f > np.median(f), 1.0, -1.0), X


def linear_rule(rows: int, features: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(rows, features))
    f = X @ np.linspace(1.0, 0.3, features) + rng.normal(0.0, 0.05, rows)
    return np.where(f > 0, 1.0, -1.0), X


@pytest.fixture(scope="module")
def wavy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 6,000 rows: exact mode's counted cost is over the check's budget, so it does not run.
    y, X = wavy(6000)
    path = tmp_path_factory.mktemp("rbfsvm") / "wavy.svm"
    write_libsvm(str(path), y, X)
    return path


@pytest.fixture(scope="module")
def wavy_check(wavy_file: Path, request: pytest.FixtureRequest) -> types.SimpleNamespace:
    """The check of wavy_file (its JSON and T), with 1,500 unseen rows of the same rule as its
    test file (scored after the checkers ran: the plan and the results are those without it).
    Made once in a run: the whole suite runs this module's fast and slow tests apart."""

    def check() -> types.SimpleNamespace:
        y, X = wavy(1500, seed=7)
        test = wavy_file.with_name("wavy.t")
        write_libsvm(str(test), y, X)
        report = run(CheckConfig(train=str(wavy_file), test=str(test)))
        return types.SimpleNamespace(json=report.json, T=report.T)

    return made_once(request.config, "rbfsvm-wavy-check", check)


@pytest.mark.slow
def test_it_finds_the_gain_that_degree2_misses(wavy_check) -> None:  # type: ignore[no-untyped-def]
    v = wavy_check.json
    assert v["exact"]["ran"] is False and "counted cost is over" in v["exact"]["reason"]
    svm = v["checkers"]["rbfsvm"]
    assert svm["status"] == "ok", svm["reason"]
    assert svm["rows"] == v["split"]["train"]
    assert svm["tune_rows"] in (600, 1_000, 1_500, 2_000)
    assert svm["gap_ci95"][0] >= v["epsilon"]
    assert v["checkers"]["degree2"]["gap"] < v["epsilon"]
    assert v["verdict"] == "kernel" and v["deciding_checker"] == "rbfsvm"
    # Its parameters are those it trained with, so svm-train -c/-g can repeat them.
    assert svm["C"] == 2.0 ** svm["log2_C"]
    assert svm["gamma"] == pytest.approx(2.0 ** svm["log2_gamma"], rel=1e-5)


def test_it_gets_what_degree2_left_of_the_budget(wavy_check) -> None:  # type: ignore[no-untyped-def]
    """The budget is for the whole check: MultiLinear and degree-2 ran first, and rbfsvm's
    budget is the first measurement's share of the floor (these 0.1 s linear models set none
    higher) less their charges."""
    T = wavy_check.T
    plan_steps = {s["name"]: s for s in wavy_check.json["plan"]["steps"]}
    svm = wavy_check.json["checkers"]["rbfsvm"]
    spent = budget.degree2_seconds(int(degree2.row_expanded_nnz(T.X).sum()), 2, T.rows)
    first = budget.FIRST_SHARE * budget.FLOOR_SECONDS
    assert budget.first_seconds(nnz=T.X.nnz, n_classes=2) == first
    d2_left = plan_steps["degree2"]["budget_seconds"]
    assert 0 < spent < d2_left < first
    assert svm["budget_seconds"] == pytest.approx(d2_left - spent, abs=2e-3)
    assert svm["estimated_seconds"] <= svm["budget_seconds"]


def _split(y: np.ndarray, X: np.ndarray) -> tuple[Dataset, Dataset]:
    t = y.size * 3 // 4
    A = sp.csr_matrix(X)
    return Dataset(A[:t], y[:t]), Dataset(A[t:], y[t:])


def test_the_plan_takes_the_most_tuning_rows_the_budget_affords() -> None:
    T, V = _split(*wavy(4000, seed=1))
    costs = [rbfsvm.estimated_seconds(T, V, 2, t) for t in (600, 1_000, 1_500, 2_000)]
    assert costs == sorted(costs) and len(set(costs)) == 4
    assert rbfsvm.plan_counts(Counts.of(T, V), costs[-1]).tune_rows == 2_000
    assert rbfsvm.plan_counts(Counts.of(T, V), (costs[1] + costs[2]) / 2).tune_rows == 1_000
    over = rbfsvm.plan_counts(Counts.of(T, V), costs[0] / 2)
    assert over.tune_rows is None and over.reason is not None and "over the budget" in over.reason
    # Fewer rows than the ladder's step: all of T, once.
    small_T, small_V = _split(*wavy(800, seed=1))
    assert rbfsvm.plan_counts(Counts.of(small_T, small_V), 1e9).tune_rows == small_T.rows


def test_no_row_count_skips_it_only_its_cost() -> None:
    """14,000 rows of few features: once, T above 10,000 rows gave it no budget at all; now
    what is left of the one budget decides, and the reason names the counted cost."""
    T, V = _split(*linear_rule(14_000))
    first = budget.first_seconds(nnz=T.X.nnz, n_classes=2, rows=T.rows)
    (step,) = plan.checker_steps(Counts.of(T, V), ("rbfsvm",), first, 2**33)
    assert step.budget_seconds == first
    p = rbfsvm.plan_counts(Counts.of(T, V), first)
    assert (p.tune_rows is None) == (step.rows == 0)
    if p.tune_rows is None:
        assert p.reason is not None and "over the budget" in p.reason
    roomy = rbfsvm.plan_counts(Counts.of(T, V), 1e6)
    assert roomy.tune_rows is not None


@pytest.mark.slow
def test_a_skip_for_cost_leaves_a_clear_linear_verdict_clear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the budget pays for no RBF SVM (here a floor of 0.05 s), its absence is the
    normal case, as exact mode's is: it does not make a linear verdict borderline. A skipped
    degree-2 still would (its expansion of 3 features is small enough to run whatever)."""
    monkeypatch.setattr(budget, "FLOOR_SECONDS", 0.05)
    y, X = linear_rule(14_000)
    path = tmp_path / "linear14k.svm"
    write_libsvm(str(path), y, X)
    v = run(CheckConfig(train=str(path))).json
    svm = v["checkers"]["rbfsvm"]
    assert svm["status"] == "skipped" and svm["limited_by"] == "cost"
    assert v["verdict"] == "linear" and v["margin"] == "clear", v["warnings"]
    assert not any("rbfsvm" in w for w in v["warnings"])


@pytest.mark.slow
def test_stopped_by_the_time_limit_it_cannot_confirm_linear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    y, X = linear_rule(6_000)
    path = tmp_path / "linear6k.svm"
    write_libsvm(str(path), y, X)
    clear = run(CheckConfig(train=str(path))).json
    assert clear["checkers"]["rbfsvm"]["status"] == "ok"
    assert clear["verdict"] == "linear" and clear["margin"] == "clear"

    def stopped(*args: object, **kwargs: object) -> None:
        raise TimeLimitReached("RBF SVM")

    monkeypatch.setattr(rbfsvm, "run", stopped)
    cut = run(CheckConfig(train=str(path))).json
    assert cut["checkers"]["rbfsvm"]["status"] == "skipped"
    assert cut["verdict"] == "linear" and cut["margin"] == "borderline"
    assert cut["warnings"] == [
        "the RBF SVM on the training split did not run (time limit), so it cannot "
        "confirm the linear verdict"
    ]


@pytest.mark.slow
def test_not_run_where_exact_mode_ran_or_is_off(datasets: Path) -> None:
    """Where exact mode ran, it is the same model cross-validated on all rows; ``--exact
    never`` trains no RBF SVM. Either way rbfsvm is not in the JSON."""
    ran = run(CheckConfig(train=str(datasets / "fourclass"))).json
    assert ran["exact"]["ran"] is True
    assert "rbfsvm" not in ran["checkers"]
    off = run(CheckConfig(train=str(datasets / "fourclass"), exact="never")).json
    assert "rbfsvm" not in off["checkers"] and "rbf" not in off["checkers"]


@pytest.mark.slow
def test_its_model_scores_a_test_file(wavy_check) -> None:  # type: ignore[no-untyped-def]
    acc = wavy_check.json["test"]["accuracy"]
    # Trained on T, it beats the linear model on unseen rows of the same rule.
    assert acc["rbfsvm"] > acc["linear"] + 0.02


def test_the_larger_C_is_the_grids_next_and_none_at_its_top() -> None:
    """The step after choosing gamma tries one C of the grid above the sample's, never past the
    grid (LIBSVM can run for minutes at a C past it)."""
    grid = (-1.0, 1.0, 3.0, 5.0)
    assert rbfsvm._larger_C((1.0, 0.25), grid) == (3.0, 0.25)
    assert rbfsvm._larger_C((5.0, 0.25), grid) is None


def test_the_counted_fits_include_the_larger_C() -> None:
    """Each gamma and the larger C train on two thirds of T; the final model on all of it."""
    T, V = _split(*wavy(3000, seed=2))
    held = int(round(T.rows * rbfsvm.SELECT_FRACTION))
    part = budget.rbf_fit_seconds(
        rows=T.rows - held,
        nnz=int(int(T.X.nnz) * (1.0 - held / T.rows)),
        predict_rows=held,
        n_classes=2,
    )
    final = budget.rbf_fit_seconds(rows=T.rows, nnz=int(T.X.nnz), predict_rows=V.rows, n_classes=2)
    gammas = len(rbf_tuning.LOG2_GAMMA_FACTOR)
    assert rbfsvm._fit_seconds(Counts.of(T, V)) == pytest.approx((gammas + 1) * part + final)


# --- on a sample of T where all of it does not fit ------------------------------------------------


def test_where_all_of_t_does_not_fit_it_plans_the_largest_sample_that_does() -> None:
    T, V = _split(*wavy(16_000, seed=2))
    c = Counts.of(T, V)
    whole = rbfsvm.plan_counts(c, 1e6)
    assert whole.tune_rows is not None and whole.rows is None  # all of T fits a large budget
    # A budget that the whole of T's training is over, but a sample fits.
    budget_seconds = rbfsvm.counted_seconds(c, rbf_tuning.TUNE_ROWS) / 4
    p = rbfsvm.plan_counts(c, budget_seconds)
    assert p.tune_rows is not None and p.rows is not None
    assert rbfsvm.MIN_SAMPLE_ROWS <= p.rows < T.rows
    assert p.estimated_seconds <= budget_seconds + 1e-3  # rounded to 3 decimals
    # The most rows: one row more would be over the budget (bisection on counts).
    more = rbfsvm.sampled(c, p.rows + 1)
    over = rbfsvm.counted_seconds(more, rbf_tuning.TUNE_ROWS) + budget.linear_seconds(more.nnz, 2)
    assert over > budget_seconds
    # Below what 1,000 rows need, it is skipped for cost, with the reason.
    tiny = rbfsvm.plan_counts(c, 0.01)
    assert tiny.tune_rows is None and tiny.reason is not None and "over the budget" in tiny.reason
    (step,) = plan.checker_steps(c, ("rbfsvm",), budget_seconds, 2**33)
    assert step.rows == p.rows and step.limited_by == "cost"


def test_on_a_sample_its_gap_is_against_a_linear_model_on_the_same_sample() -> None:
    from kcheck.checkers.linear import LinearOptions
    from kcheck.checkers.linear import run as linear_run

    T, V = _split(*wavy(9_000, seed=4))
    c = Counts.of(T, V)
    budget_seconds = rbfsvm.counted_seconds(c, rbf_tuning.TUNE_ROWS) / 2
    p = rbfsvm.plan_counts(c, budget_seconds)
    assert p.rows is not None and p.rows < T.rows
    ctx = make_context(baseline=linear_run(T, V, LinearOptions(seed=0)))
    res = rbfsvm.check(T, V, ctx, planned("rbfsvm", T, V, budget_seconds))
    assert res.status == "subsampled", res.reason
    assert res.info["rows"] == p.rows and res.info["limited_by"] == "cost"
    assert res.info["fraction"] == pytest.approx(p.rows / T.rows)
    ref = res.info["reference"]
    assert ref["rows"] == p.rows and res.reference_correct is not None
    assert ref["val_accuracy"] == pytest.approx(float(res.reference_correct.mean()))
    # The waves: the RBF SVM on the sample beats the linear model on the same sample.
    assert res.val_accuracy - ref["val_accuracy"] > 0.02
    assert res.reason is not None and f"{p.rows:,} of {T.rows:,} rows" in res.reason


def test_its_kernel_cache_is_what_the_memory_allowance_leaves() -> None:
    """LIBSVM's 200 MB cache is outside the plan's count: under a tight allowance it shrinks
    to what is left beside LIBSVM's copy of T (at least 1 MB), and the models stay the same."""
    assert rbfsvm.cache_mb(8 * 2**30, 100_000, 5_000) == 200.0
    copy = 16 * (100_000 + 5_000) + 96 * 5_000  # LIBSVM's nodes and its solver's arrays
    assert rbfsvm.cache_mb(copy + 30 * 2**20, 100_000, 5_000) == pytest.approx(30.0)
    assert rbfsvm.cache_mb(copy, 100_000, 5_000) == 1.0


@pytest.mark.parametrize("dense", [True, False], ids=["dense", "sparse"])
def test_the_least_allowance_the_plan_accepts_gives_the_same_result(dense: bool) -> None:
    from kcheck.checkers.linear import LinearOptions
    from kcheck.checkers.linear import run as linear_run

    y, X = wavy(1_600, seed=2)
    if not dense:
        X = sp.csr_matrix(np.where(np.abs(X) < 0.3, 0.0, X))
    T, V = _split(y, X)

    def run(memory_limit: int) -> tuple[float, float, float]:
        ctx = make_context(
            memory_limit=memory_limit, baseline=linear_run(T, V, LinearOptions(seed=0))
        )
        r = rbfsvm.check(T, V, ctx, planned("rbfsvm", T, V, 1e6, memory_limit))
        assert r.status == "ok", r.reason
        return r.val_accuracy, r.info["C"], r.info["gamma"]

    roomy = run(2**30)
    # The least the plan accepts: the search's kernel matrices and LIBSVM's copy of T. The
    # cache then gets what the matrices leave once freed: far below its 200 MB default.
    c = Counts.of(T, V)
    tune = rbfsvm.plan_counts(c, 1e6).tune_rows
    assert tune is not None
    least = rbfsvm.memory_bytes(c, tune)
    assert rbfsvm.cache_mb(least, int(T.X.nnz), T.rows) < 100.0
    assert run(least) == roomy


def test_a_candidate_whose_training_is_predicted_past_the_plan_is_passed_over() -> None:
    """LIBSVM's iterations on the sample predict each candidate's training on two thirds of T.
    A candidate predicted at over four times what the plan counted for one training is passed
    over; the search's best point always trains, however costly. A passed-over candidate is
    named with its prediction (checker4_n50000: two at C = 2^11, predicted 10.5 and 16.2 s,
    took 35 s of a 6 s plan and lost)."""

    T, V = _split(*wavy(1500, seed=3))
    Xb = sp.csr_matrix(T.X)
    options = rbf_tuning.Tuning(seed=0)
    steps = rbfsvm._steps(make_context(), options)
    # Three gammas' best points and their scores on a 600-row sample.
    first, second, third = (1.0, -2.0), (11.0, 1.0), (3.0, 0.0)
    scores = {first: 0.9, second: 0.8, third: 0.7}
    many, few = 10**8, 1_000

    def held(iterations: dict[tuple[float, float], int]) -> rbfsvm._Held:
        search = rbf_tuning.Search(scores, {}, *first, iterations)
        h = rbfsvm._Held(Xb, T.y, options, steps, 200.0)
        h.predict_from(search, 600, Counts.of(T, V))
        h.choose([second, third, first])
        return h

    # The second is costly: passed over, named with its prediction; the third still trains.
    h = held({first: few, second: many, third: few, (5.0, 0.0): few, (3.0, -2.0): few})
    assert set(h.scores) >= {first, third} and second not in h.scores
    (over,) = h.passed_over
    assert (over["log2_C"], over["log2_gamma"]) == second
    fit_rows = T.rows - int(round(T.rows * rbfsvm.SELECT_FRACTION))
    on_fit = budget.svm_iterations_on(many, 600, options.folds, fit_rows)
    assert over["predicted_seconds"] > budget.svm_iteration_seconds(on_fit, fit_rows, 2)
    # The search's best trains however costly, and the cheap ones beside it.
    h = held({first: many, second: few, third: few, (3.0, -2.0): few, (5.0, 0.0): few})
    assert {first, second, third} <= set(h.scores) and h.passed_over == []
    # A costly larger C is passed over too.
    h = held({first: few, second: few, third: few, (3.0, -2.0): many, (5.0, 0.0): many})
    assert {first, second, third} <= set(h.scores)
    assert all(o["predicted_seconds"] > 1.0 for o in h.passed_over)
    assert {(o["log2_C"], o["log2_gamma"]) for o in h.passed_over} <= {(3.0, -2.0), (5.0, 0.0)}
    # With iterations that cost little, every candidate trains and none is passed over.
    h = held({k: few for k in (first, second, third, (3.0, -2.0), (5.0, 0.0))})
    assert h.passed_over == [] and {first, second, third} <= set(h.scores)


def test_a_larger_C_the_search_passed_over_is_predicted_not_taken_as_free() -> None:
    """The larger-C step at the best gamma may land on a point the search passed over as too
    costly: it has no iterations of its own, and was trained however costly (poker0: C = 2^11
    on two thirds of T, 490,000 iterations and 3.1 s where the plan counted 0.5 s for a
    training). Its prediction now comes from the search's predicted iterations."""
    T, V = _split(*wavy(1500, seed=3))
    Xb = sp.csr_matrix(T.X)
    options = rbf_tuning.Tuning(seed=0)
    steps = rbfsvm._steps(make_context(), options)
    best = (1.0, -2.0)
    larger = rbfsvm._larger_C(best, options.resolved_C())
    assert larger is not None

    def held(passed: float) -> rbfsvm._Held:
        search = rbf_tuning.Search(
            {best: 0.9}, {}, *best, {best: 1_000}, passed_iterations={larger: passed}
        )
        h = rbfsvm._Held(Xb, T.y, options, steps, 200.0)
        h.predict_from(search, 600, Counts.of(T, V))
        h.choose([best])
        return h

    costly = held(1e8)
    assert larger not in costly.scores
    (over,) = costly.passed_over
    assert (over["log2_C"], over["log2_gamma"]) == larger and over["predicted_seconds"] > 1.0
    cheap = held(1_000.0)
    assert larger in cheap.scores and cheap.passed_over == []


def test_the_trainings_on_t_are_announced_with_their_prediction() -> None:
    """After the search, the trainings are a stage of their own whose first event carries
    their predicted seconds (from the search's iterations), so a log announces them; its
    steps count the trainings, not the grid's points."""

    T, V = _split(*wavy(1600, seed=5))
    events: list[Event] = []
    ctx = make_context(progress=events.append)
    options = rbf_tuning.Tuning(seed=0)
    res = rbfsvm.run(T, V, options, 600, ctx)
    assert res.status == "ok"
    stages = [e.stage for e in events]
    first = stages.index(rbfsvm.TRAINING_STAGE)
    assert set(stages[:first]) == {rbfsvm.STAGE}
    assert set(stages[first:]) == {rbfsvm.TRAINING_STAGE}
    search_end, start, end = events[first - 1], events[first], events[-1]
    assert search_end.done == search_end.total == options.grid_points()
    assert start.done == 0 and start.predicted_seconds is not None
    assert start.predicted_seconds > 0
    assert end.done == end.total == len(options.resolved_gamma_factor()) + 2
    # The search before them is announced with its own count, not the whole checker's.
    assert events[0].predicted_seconds == pytest.approx(
        rbfsvm._search_seconds(Counts.of(T, V), 600), abs=1e-3
    )
    assert events[0].predicted_seconds < rbfsvm.estimated_seconds(T, V, 2, 600)
    # On a sample of T, the stage names it: its rows and T's.
    assert rbfsvm.training_stage(1_600, None) == rbfsvm.training_stage(1_600, 1_600)
    assert rbfsvm.training_stage(5_993, 14_068) == (
        "RBF SVM: training on a sample of 5,993 of T's 14,068 rows"
    )


def test_its_prediction_is_revised_with_the_trainings_predicted_from_the_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``revised_seconds``: the search's count and what it took beyond
    (rbf_tuning.beyond_count, from its support vectors), the trainings that ran as predicted
    from the search's support vectors and iterations at their points, and on a sample the
    linear reference on it (kcheck.plan.done_share compares the stage with it). The final
    training is predicted at the point chosen, not the sample's best."""
    finals: list[tuple[float, float]] = []
    real = rbfsvm._trainings_predicted

    def trainings(*args):  # type: ignore[no-untyped-def]
        finals.append(args[-1])
        return real(*args)

    monkeypatch.setattr(rbfsvm, "_trainings_predicted", trainings)
    beyond: list[float] = []
    real_beyond = rbf_tuning.beyond_count

    def beyond_count(*args):  # type: ignore[no-untyped-def]
        beyond.append(real_beyond(*args))
        return beyond[-1]

    monkeypatch.setattr(rbf_tuning, "beyond_count", beyond_count)
    T, V = _split(*wavy(1600, seed=5))
    res = rbfsvm.run(T, V, rbf_tuning.Tuning(seed=0), 600, make_context())
    c = rbfsvm._counts(T, V, 2)
    point = finals[-1]
    assert point[0] == res.info["log2_C"]
    assert point[1] == pytest.approx(res.info["log2_gamma"], abs=1e-6)
    monkeypatch.setattr(rbfsvm, "_trainings_predicted", lambda *a: 3.5)
    res = rbfsvm.run(T, V, rbf_tuning.Tuning(seed=0), 600, make_context())
    assert beyond[-1] != 0.0
    expected = rbfsvm._search_seconds(c, 600) + beyond[-1] + 3.5
    assert res.info["revised_seconds"] == pytest.approx(expected, abs=1e-3)
    # On a sample, the linear reference on it too.
    T, V = _split(*wavy(9_000, seed=4))
    c = Counts.of(T, V)
    budget_seconds = rbfsvm.counted_seconds(c, rbf_tuning.TUNE_ROWS) / 2
    p = rbfsvm.plan_counts(c, budget_seconds)
    assert p.rows is not None and p.tune_rows is not None
    events: list[Event] = []
    ctx = make_context(progress=events.append)
    res = rbfsvm.check(T, V, ctx, planned("rbfsvm", T, V, budget_seconds))
    assert res.status == "subsampled"
    # Its trainings' stage says they are on the sample, and its prediction holds the linear
    # reference that trains after them.
    stages = [e.stage for e in events]
    assert rbfsvm.TRAINING_STAGE not in stages
    announced = next(e for e in events if e.stage == rbfsvm.training_stage(p.rows, T.rows))
    sc = rbfsvm.sampled(rbfsvm._counts(T, V, 2), p.rows)
    ref = solver_costs.linear_reference_seconds(sc.nnz, sc.features, sc.rows, sc.n_classes)
    assert announced.predicted_seconds == pytest.approx(ref + 3.5, abs=2e-3)
    search = rbfsvm._search_seconds(sc, p.tune_rows)
    assert res.info["revised_seconds"] == pytest.approx(search + beyond[-1] + 3.5 + ref, abs=2e-3)


def test_its_trainings_are_predicted_from_the_support_vectors_the_search_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Separated classes keep few support vectors and overlapping ones many: the trainings'
    prediction follows the search's count of them (clean data cost a tenth of what counting
    every row as a support vector predicted, on ijcnn1), and a search that recorded none
    counts every row."""
    predicted: dict[str, float] = {}
    calls: list[float] = []
    real = rbfsvm._trainings_predicted

    def trainings(*args):  # type: ignore[no-untyped-def]
        calls.append(real(*args))
        return calls[-1]

    monkeypatch.setattr(rbfsvm, "_trainings_predicted", trainings)
    for name, gap in (("apart", 6.0), ("overlapping", 0.3)):
        rng = np.random.default_rng(3)
        X = rng.normal(size=(900, 4))
        y = np.where(rng.random(900) < 0.5, 1.0, -1.0)
        X[:, 0] += gap * y
        T, V = _split(y, X)
        rbfsvm.run(T, V, rbf_tuning.Tuning(seed=0), 600, make_context())
        predicted[name] = calls[-1]
    assert 0 < predicted["apart"] < 0.5 * predicted["overlapping"]
    # No support vectors recorded: every row counts as one.
    search = rbf_tuning.Search(
        scores={(1.0, -1.0): 0.5}, right={(1.0, -1.0): 150}, log2_C=1.0, log2_gamma=-1.0
    )
    c = Counts(rows=300, val_rows=100, nnz=1200, val_nnz=400, n_classes=2, features=4)
    held = types.SimpleNamespace(scores={}, fit_rows=200, rows=100)
    every = rbfsvm._trainings_predicted(search, 300, 5, c, [], held, (1.0, -1.0))  # type: ignore[arg-type]
    full = solver_costs.rbf_trained_seconds(
        support_vectors=300,
        rows=300,
        predict_rows=100,
        iterations=0.0,
        values_per_row=4.0,
        width=4,
        n_classes=2,
    )
    assert every == pytest.approx(full)


def test_its_search_keeps_within_its_allowance(monkeypatch: pytest.MonkeyPatch) -> None:
    """The search shares exact mode's allowance rule (kcheck.tuning.rbf_sample.search_grid):
    the JSON names the grid points not scored, more of them on a tighter allowance and none
    on a boundless one."""
    from kcheck.checkers.linear import LinearOptions
    from kcheck.checkers.linear import run as linear_run

    y, X = wavy(1_600, seed=2)
    T, V = _split(y, X)
    ctx = make_context(baseline=linear_run(T, V, LinearOptions(seed=0)))

    def passed_over(allowance: float) -> list[tuple[float, float]]:
        monkeypatch.setattr(rbf_tuning, "SEARCH_ALLOWANCE", allowance)
        r = rbfsvm.check(T, V, ctx, planned("rbfsvm", T, V, 1e6))
        assert r.status == "ok", r.reason
        assert all(p["predicted_seconds"] > 0 for p in r.info["grid_passed_over"])
        return [(p["log2_C"], p["log2_gamma"]) for p in r.info["grid_passed_over"]]

    assert passed_over(1e6) == []
    default = passed_over(2.0)
    tight = passed_over(0.3)
    assert set(default) < set(tight)
    assert len(tight) < rbf_tuning.Tuning().grid_points()


def test_with_two_jobs_its_search_trains_the_folds_side_by_side_with_the_same_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The context's jobs reach the search: its CVs train their folds in two threads
    (engines._side_by_side_cv), and the choice and the score are those of one job."""
    from kcheck.bindings import engines
    from kcheck.checkers.linear import LinearOptions
    from kcheck.checkers.linear import run as linear_run

    T, V = _split(*wavy(900, seed=3))
    baseline = linear_run(T, V, LinearOptions(seed=0))

    def check(jobs: int) -> tuple[object, ...]:
        r = rbfsvm.check(
            T, V, make_context(jobs=jobs, baseline=baseline), planned("rbfsvm", T, V, 1e6)
        )
        assert r.status == "ok", r.reason
        return r.val_accuracy, r.info["C"], r.info["gamma"], r.cv_accuracy

    alone = check(1)
    side_by_side = engines._side_by_side_cv
    calls: list[int] = []

    def counted(*args):  # type: ignore[no-untyped-def]
        calls.append(1)
        return side_by_side(*args)

    monkeypatch.setattr(engines, "_side_by_side_cv", counted)
    assert check(2) == alone
    assert calls  # T's 675 rows are over SIDE_BY_SIDE_MIN_ROWS


def test_a_trainings_support_vectors_are_the_searchs_share_of_its_fold_rows() -> None:
    """A point the search scored keeps, on a training of n rows, n times the share of its fold
    rows its folds kept as support vectors (summed over the folds); its iterations grow with
    the rows (kcheck.costs.budget.svm_iterations_on). Each candidate trains on the two thirds and
    predicts the held-out third; the final training is on T and predicts V."""
    point, other = (3.0, -1.0), (5.0, -1.0)
    # 300 tuning rows in 5 folds: 240 fold rows each, 1,200 over the folds; 480 kept: 0.4.
    search = rbf_tuning.Search(
        scores={point: 0.8, other: 0.7},
        right={point: 240, other: 210},
        log2_C=3.0,
        log2_gamma=-1.0,
        iterations={point: 5_000, other: 9_000},
        support_vectors={point: 480, other: 1_200},
    )
    c = Counts(rows=3_000, val_rows=1_000, nnz=30_000, val_nnz=10_000, n_classes=2, features=10)
    held = types.SimpleNamespace(fit_rows=2_000, rows=1_000)

    def trained(p: tuple[float, float], rows: int, predict_rows: int, share: float) -> float:
        return solver_costs.rbf_trained_seconds(
            support_vectors=share * rows,
            rows=rows,
            predict_rows=predict_rows,
            iterations=budget.svm_iterations_on(search.iterations[p], 300, 5, rows),
            values_per_row=10.0,
            width=10,
            n_classes=2,
        )

    got = rbfsvm._trainings_predicted(search, 300, 5, c, [point, other], held, point)  # type: ignore[arg-type]
    expected = (
        trained(point, 2_000, 1_000, 0.4)
        + trained(other, 2_000, 1_000, 1.0)
        + trained(point, 3_000, 1_000, 0.4)
    )
    assert got == pytest.approx(expected)
    # Fewer support vectors at the point, less predicted; none trained but the final one.
    fewer = dataclasses.replace(search, support_vectors={point: 240, other: 1_200})
    assert rbfsvm._trainings_predicted(fewer, 300, 5, c, [], held, point) == pytest.approx(  # type: ignore[arg-type]
        trained(point, 3_000, 1_000, 0.2)
    )
