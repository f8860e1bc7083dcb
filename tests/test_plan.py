"""The plan (kcheck/plan.py): what runs, on which rows and budget, in which role, decided from
counts before anything trains, and what the check then does."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import DATASETS
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kcheck import plan
from kcheck.bindings import engines
from kcheck.checkers import degree2, exact, mixlinear, multilinear, rbfsvm, registry, rff
from kcheck.checkers.base import Counts, Dataset, Sized
from kcheck.cli import render
from kcheck.config import CheckConfig
from kcheck.costs import budget
from kcheck.costs import pace as probe
from kcheck.pipeline import run
from kcheck.verdict import without_timing

GIB = 2**30
DEFAULT = ("multilinear", "degree2", "rbfsvm")


def counts(rows: int, *, width: int = 10, per_row: int = 10, classes: int = 2) -> Counts:
    """The counts of T (``rows``) and V (a third of that) of ``per_row`` values a row."""
    val = rows // 3
    expanded = rows * (per_row + per_row * (per_row + 1) // 2)
    return Counts(
        rows=rows,
        val_rows=val,
        nnz=rows * per_row,
        val_nnz=val * per_row,
        n_classes=classes,
        features=width,
        expanded_nnz=expanded,
        data_bytes=12 * rows * per_row,
        val_bytes=12 * val * per_row,
        all_classes=classes,
    )


def make(c: Counts, **options: object) -> plan.Plan:
    return plan.make(c, plan.Options(checkers=DEFAULT, memory_limit=8 * GIB, **options))  # type: ignore[arg-type]


def test_small_data_runs_exact_mode_and_the_checkers_get_what_it_left_of_the_budget() -> None:
    p = make(counts(600))
    # A cheap linear model: the floor sets the one budget, and half of it the first
    # measurement's, where exact mode and the checkers are planned.
    assert budget.methods_seconds(nnz=600 * 10, n_classes=2) == budget.FLOOR_SECONDS
    whole = budget.first_seconds(nnz=600 * 10, n_classes=2)
    assert whole == budget.FIRST_SHARE * budget.FLOOR_SECONDS
    rbf = p.step(exact.NAME)
    assert rbf is not None and rbf.runs and rbf.role == "deciding" and rbf.rows == 800
    assert rbf.budget_seconds == whole and rbf.estimated_seconds is not None
    assert 0 < rbf.estimated_seconds <= whole
    left = whole - rbf.estimated_seconds
    assert [s.name for s in p.checkers] == ["multilinear", "degree2"]
    ml, d2 = p.checkers
    assert ml.budget_seconds == pytest.approx(left) and ml.floor_seconds == whole
    # MultiLinear is charged its shape, degree-2 gets the rest.
    assert d2.budget_seconds is not None and 0 < d2.budget_seconds < left
    # The stand-in does not run where exact mode runs, and the plan says why.
    svm = p.step("rbfsvm")
    assert svm is not None and not svm.runs and svm.rows == 0 and svm.role == "stand-in"
    assert svm.reason is not None and "exact mode runs" in svm.reason
    assert p.small_data and not p.beside
    # What the first measurement left is the second fold's (exact mode rules one out here).
    assert p.budget_seconds == budget.FLOOR_SECONDS
    spent = rbf.estimated_seconds + ml.charged_seconds + d2.charged_seconds
    assert p.second_fold_seconds == pytest.approx(budget.FLOOR_SECONDS - spent)


def test_where_exact_mode_does_not_fit_the_stand_in_runs_on_what_degree2_left() -> None:
    c = counts(4_500, width=5, per_row=5)
    p = make(c)
    rbf = p.step(exact.NAME)
    assert rbf is not None and not rbf.runs and rbf.reason is not None
    # No row count decides: its counted cost is over the budget.
    assert rbf.reason.startswith("its counted cost is over")
    first = budget.FIRST_SHARE * budget.FLOOR_SECONDS
    assert rbf.estimated_seconds is not None and rbf.estimated_seconds > first
    ml, d2, svm = p.step("multilinear"), p.step("degree2"), p.step("rbfsvm")
    assert ml is not None and d2 is not None and svm is not None and svm.runs
    assert svm.rows == c.rows
    assert ml.budget_seconds == first  # exact mode spent none of it
    spent = budget.degree2_seconds(c.expanded_nnz, 2, c.rows)
    assert d2.estimated_seconds == pytest.approx(spent)
    assert d2.budget_seconds is not None
    assert svm.budget_seconds == pytest.approx(d2.budget_seconds - spent)
    assert svm.estimated_seconds is not None and svm.estimated_seconds <= svm.budget_seconds


def test_exact_mode_runs_on_any_rows_its_cost_fits() -> None:
    """The same 2,000 rows of 500 dense values: exact mode runs (its kernels cost rows^2, not
    values); no stored-value threshold skips it."""
    c = counts(1_500, width=500, per_row=500)
    rbf = make(c).step(exact.NAME)
    assert rbf is not None and rbf.runs and rbf.rows == 2_000
    first = budget.first_seconds(nnz=c.nnz, n_classes=2, rows=c.rows)
    assert rbf.estimated_seconds is not None and rbf.estimated_seconds <= first


def test_exact_never_plans_no_rbf_svm_at_all() -> None:
    p = make(counts(600), exact="never")
    rbf, svm = p.step(exact.NAME), p.step("rbfsvm")
    assert rbf is not None and not rbf.runs and rbf.reason == "exact mode is off"
    assert svm is not None and not svm.runs and "exact mode is off" in (svm.reason or "")
    assert "rbfsvm" not in [s.name for s in p.checkers]


def test_a_second_fold_gets_what_the_first_measurement_left_of_the_one_budget() -> None:
    """One budget: the first measurement is planned within half the floor, and a second
    fold's checkers within what that left, not within a budget of their own; its baseline is
    not charged, but only what is left holding its count affords one."""
    c = counts(4_500, width=5, per_row=5)
    p = make(c, exact="never")
    spent = sum(s.charged_seconds for s in p.checkers)
    assert 0 < spent <= budget.FIRST_SHARE * budget.FLOOR_SECONDS
    assert p.second_fold_seconds == pytest.approx(budget.FLOOR_SECONDS - spent)
    # On small data that is at least the first measurement's share of the floor.
    assert p.second_fold_seconds >= budget.FIRST_SHARE * budget.FLOOR_SECONDS
    assert p.affords_second_fold
    steps = plan.second_fold_steps(c, ("degree2", "multilinear"), p.second_fold_seconds, 8 * GIB)
    assert steps is not None and [s.name for s in steps] == ["multilinear", "degree2"]
    assert steps[0].budget_seconds == pytest.approx(p.second_fold_seconds)
    assert steps[1].budget_seconds == pytest.approx(
        p.second_fold_seconds - steps[0].charged_seconds
    )
    # Less left than its baseline counts: no second fold at all.
    baseline = budget.linear_seconds(c.nnz, 2, c.rows)
    assert plan.second_fold_steps(c, ("degree2",), baseline * 0.99, 8 * GIB) is None
    # A budget spent to the last second affords none: the pipeline asks the rule with this.
    assert not dataclasses.replace(p, second_fold_seconds=baseline * 0.99).affords_second_fold


def test_an_unsettled_verdict_buys_the_stand_in_on_more_rows_with_what_the_first_left() -> None:
    """Where the first measurement gives the RBF SVM fewer rows than T, what it leaves buys the
    RBF SVM on all of T, sized by its own ``size``, in place of a second fold. Where its least
    run on all of T fits the whole budget but not what the first measurement would leave (68
    features of 34 values a row), the proxies are planned within what that run leaves. Where it
    fits only a larger sample (15,000 rows), or had all of T already, nothing: a second fold, as
    before."""
    whole = budget.FLOOR_SECONDS
    c = counts(6_300, width=68, per_row=34)
    p = make(c)
    first, bought, ml = p.step(rbfsvm.NAME), p.settling, p.step("multilinear")
    assert first is not None and first.runs and first.rows == 0 and first.limited_by == "cost"
    assert bought is not None and bought.name == rbfsvm.NAME and bought.role == "stand-in"
    assert bought.rows == c.rows and bought.estimated_seconds is not None
    assert ml is not None and ml.budget_seconds == pytest.approx(whole - bought.estimated_seconds)
    assert bought.budget_seconds == pytest.approx(p.second_fold_seconds)
    assert bought.estimated_seconds <= p.second_fold_seconds
    assert not p.affords_second_fold
    assert p.to_json()["settling"]["outcome"] == "not run"
    large = make(counts(15_000, width=20, per_row=20))
    svm = large.step(rbfsvm.NAME)
    assert svm is not None and 0 < svm.rows < 15_000
    assert large.settling is None and large.affords_second_fold
    # All of T in the first measurement: nothing more to buy, and the second fold stays.
    had_all = make(counts(4_500, width=5, per_row=5))
    svm = had_all.step(rbfsvm.NAME)
    assert svm is not None and svm.rows == 4_500
    assert had_all.settling is None and had_all.affords_second_fold
    # Where exact mode runs the stand-in does not, and is not bought either.
    small = make(counts(600))
    assert small.settling is None and small.to_json()["settling"] is None


def test_on_large_data_the_first_measurement_spends_the_budget_and_no_second_fold_fits() -> None:
    """Where the baseline's count sets the budget, the first measurement gets all of it and
    what it leaves cannot hold a second fold's baseline: no size threshold decides that."""
    for rows in (400_000, 2_000_000):
        c = counts(rows, width=20, per_row=10)
        p = make(c, exact="never")
        linear = budget.linear_seconds(c.nnz, 2, c.rows)
        assert p.budget_seconds == pytest.approx(linear)
        assert p.step("multilinear") is not None
        assert not p.affords_second_fold and not p.small_data


def test_on_large_data_the_budget_is_the_baselines_count_and_degree2_subsamples() -> None:
    c = counts(400_000, width=20, per_row=10)
    p = make(c)
    # T's 400,000 rows cost more per value than a few thousand (budget.rows_factor).
    linear = budget.linear_seconds(c.nnz, 2, c.rows)
    assert linear == pytest.approx(budget.linear_seconds(c.nnz, 2) * (c.rows / 10_000) ** 0.5)
    assert budget.methods_seconds(nnz=c.nnz, n_classes=2, rows=c.rows) == (
        budget.LINEAR_FACTOR * linear
    )
    assert not p.small_data
    ml, svm, d2 = p.step("multilinear"), p.step("rbfsvm"), p.step("degree2")
    assert ml is not None and ml.budget_seconds == pytest.approx(budget.LINEAR_FACTOR * linear)
    assert d2 is not None and 0 < d2.rows < c.rows and d2.limited_by == "cost"
    # rbfsvm takes what degree-2 left: a stratified sample of T, charged within the budget.
    assert svm is not None and svm.runs and 0 < svm.rows < c.rows and svm.limited_by == "cost"
    assert (svm.estimated_seconds or 0.0) <= (svm.budget_seconds or 0.0) + 1e-9


def test_wide_sparse_data_is_counted_in_the_separable_regime() -> None:
    """Degree-2's explicit expansion of text-like rows (8,000 words, 50 a row) costs ten times
    its values, where counting values alone ran it for minutes: the plan counts that, leaves it
    no rows, and trains on the hashed expansion instead, on a subsample its values afford."""
    c = counts(6_000, width=8_000, per_row=50)
    d2 = make(c).step("degree2")
    assert d2 is not None and d2.limited_by == "cost" and d2.sized is not None
    assert d2.sized.sizing.hashed_width is not None and degree2.MIN_ROWS <= d2.rows < c.rows
    dim = degree2.expanded_dimension(8_000)
    assert budget.degree2_seconds(1000, 2, 6_000, dim) > 9 * budget.degree2_seconds(1000, 2, 6_000)


def test_the_baseline_goes_beside_only_with_two_jobs_where_both_pay() -> None:
    c = counts(200_000, width=40, per_row=40)  # 8M values: 20 counted seconds of baseline
    assert make(c, jobs=2).beside
    assert not make(c, jobs=1).beside
    assert not make(c, jobs=2, time_limit=True).beside
    assert not make(c, jobs=2, exact="always").beside
    assert not make(counts(6_000), jobs=2).beside  # the baseline is too cheap to move
    # Beside, the checkers that do not read the baseline run first.
    beside = make(c, jobs=2)
    assert [s.name for s in beside.checkers][:2] == ["multilinear", "degree2"]


def test_degree2_runs_in_a_worker_of_its_own_only_where_its_copy_of_the_data_fits() -> None:
    """Beside the baseline, degree-2 goes to a worker process of its own, so that it and
    MultiLinear share the cores with the baseline instead of taking turns; only where the memory
    limit holds another copy of T and V, and never without the baseline beside."""
    c = counts(200_000, width=40, per_row=40)
    roomy = make(c, jobs=2)
    assert roomy.beside and roomy.detached == ("degree2",)
    assert make(c, jobs=1).detached == ()
    assert make(c, jobs=2, time_limit=True).detached == ()
    # MultiLinear reads the baseline's C, rbfsvm's model does not pickle: both stay here.
    assert all(not registry.CHECKERS[n].in_worker for n in ("multilinear", "rbfsvm"))
    # The least limit with the baseline beside leaves no room for degree-2's own copy of the
    # data; one copy more does. (The counts plan the same steps at both limits.)
    early = sum(
        s.bytes or 0 for s in roomy.steps if s.role != "baseline" and s.rows > 0 and plan.early(s)
    )
    least = plan._beside_bytes(c) + early
    tight = plan.make(c, plan.Options(checkers=DEFAULT, jobs=2, memory_limit=least))
    wide = plan.make(
        c, plan.Options(checkers=DEFAULT, jobs=2, memory_limit=least + plan._beside_bytes(c))
    )
    assert tight.checkers == wide.checkers == roomy.checkers
    assert tight.beside and tight.detached == ()
    assert wide.beside and wide.detached == ("degree2",)
    # With nothing else to run in this process it would only wait: degree-2 stays here.
    alone = plan.make(c, plan.Options(checkers=("degree2",), jobs=2, memory_limit=8 * GIB))
    assert alone.detached == ()


def test_a_plan_reads_no_clock_and_trains_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    c = counts(3_000)
    before = make(c)

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the plan trained a model")

    for name in ("train_linear", "train_rbf", "search_C", "cv_kernel"):
        monkeypatch.setattr(engines, name, refused)
    real = time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: real() + 1e6)
    assert make(c) == before


@settings(max_examples=60, deadline=None)
@example(rows=2253, per_row=32, classes=4, exact_mode="auto", memory=8 * GIB)
@given(
    rows=st.integers(10, 60_000),
    per_row=st.integers(1, 60),
    classes=st.integers(2, 12),
    exact_mode=st.sampled_from(["auto", "always", "never"]),
    memory=st.sampled_from([2**24, 2**28, 8 * GIB]),
)
def test_every_plan_is_consistent(
    rows: int, per_row: int, classes: int, exact_mode: str, memory: int
) -> None:
    """Whatever the counts: what is left of the one budget only shrinks from step to step, a
    step that trains no rows says why, the stand-in runs only where exact mode is auto and
    does not, the second fold gets what the first measurement left of the one budget, and the
    JSON names every method once."""
    c = counts(rows, width=max(per_row, 1), per_row=per_row, classes=classes)
    p = plan.make(c, plan.Options(checkers=DEFAULT, exact=exact_mode, memory_limit=memory))
    sizes = {"nnz": c.nnz, "n_classes": classes, "rows": c.rows}
    whole, first = budget.methods_seconds(**sizes), budget.first_seconds(**sizes)
    assert first <= whole == p.budget_seconds
    left = [s.budget_seconds or 0.0 for s in p.checkers]
    assert left == sorted(left, reverse=True)
    assert all(0.0 <= f <= first for f in left)
    assert all(s.floor_seconds == first for s in p.checkers)
    spent = sum(s.charged_seconds for s in p.steps if s.runs)
    assert p.second_fold_seconds == pytest.approx(max(whole - spent, 0.0))
    if exact_mode == "auto":  # within its budget (``always`` runs whatever it counts)
        # but for MultiLinear, which runs on all of T whatever is left (multilinear.size) and
        # is charged its count (2,253 rows x 32 in 4 classes: 0.443 s where exact mode left
        # 0.424).
        over = sum(
            max(s.charged_seconds - (s.budget_seconds or 0.0), 0.0)
            for s in p.checkers
            if s.name == "multilinear"
        )
        assert spent <= first * (1 + 1e-9) + over
    for s in p.steps:
        if s.rows == 0:
            assert s.reason
        assert 0 <= s.rows <= c.all_rows
    rbf, svm = p.step(exact.NAME), p.step("rbfsvm")
    assert rbf is not None and svm is not None
    assert svm.runs == (exact_mode == "auto" and not rbf.runs)
    bought = p.settling
    if bought is not None:  # all of T, where the first gave it fewer, within what the first left
        assert svm.runs and svm.rows < bought.rows == c.rows
        assert (bought.estimated_seconds or 0.0) <= p.second_fold_seconds * (1 + 1e-9)
        assert not p.affords_second_fold
    names = [s["name"] for s in p.to_json()["steps"]]
    assert sorted(names) == sorted(["linear", exact.NAME, *DEFAULT])


# --- the plan is what the check does --------------------------------------------------------------


@pytest.mark.parametrize("mode", ["never", "auto"])
def test_the_check_does_what_its_plan_says(mode: str) -> None:
    v = run(CheckConfig(train=str(DATASETS / "heart_scale"), exact=mode)).json
    steps = {s["name"]: s for s in v["plan"]["steps"]}
    assert steps[exact.NAME]["runs"] == v["exact"]["ran"]
    assert steps[exact.NAME]["reason"] == v["exact"]["reason"]
    assert steps["linear"]["rows"] == v["split"]["train"]
    for name, step in steps.items():
        if name in ("linear", exact.NAME):
            continue
        ran = name in v["checkers"]
        assert step["runs"] == ran, name
        if ran and step["rows"] == 0:
            assert v["checkers"][name]["status"] == "skipped"
            assert v["checkers"][name]["reason"] == step["reason"]
    assert steps["degree2"]["rows"] == v["checkers"]["degree2"]["rows"]


Alter = Callable[[Counts, plan.Options, plan.Plan], plan.Plan]


def _only_the_plan_sizes(monkeypatch: pytest.MonkeyPatch, alter: Alter | None = None) -> None:
    """Every method's sizing (the registry's entries and the modules' own functions) raises
    unless kcheck.plan is making a plan (``make``, or a second fold's ``second_fold_steps``):
    a method that sized itself again at run time fails the check. ``alter``: what the test
    does to the plan ``make`` made, before the pipeline sees it."""
    planning = [False]

    def guard(real: Callable[..., Any]) -> Callable[..., Any]:
        def size(*args: Any, **kwargs: Any) -> Any:
            if not planning[0]:
                raise AssertionError(f"{real.__qualname__} sized a method outside the plan")
            return real(*args, **kwargs)

        return size

    def planner(real: Callable[..., Any], then: Alter | None = None) -> Callable[..., Any]:
        def plans(counts: Counts, *args: Any) -> Any:
            planning[0] = True
            try:
                made = real(counts, *args)
                return made if then is None else then(counts, args[0], made)
            finally:
                planning[0] = False

        return plans

    for name, spec in registry.CHECKERS.items():
        if spec.size is not None:
            monkeypatch.setitem(
                registry.CHECKERS, name, dataclasses.replace(spec, size=guard(spec.size))
            )
    monkeypatch.setattr(
        registry, "EXACT", dataclasses.replace(registry.EXACT, size=guard(registry.EXACT.size))
    )
    for module, names in (
        (degree2, ("size", "plan_counts", "plan_rows")),
        (rbfsvm, ("size", "_sized", "plan_counts")),
        (exact, ("size", "decide")),
        (multilinear, ("size",)),
        (mixlinear, ("size",)),
        (rff, ("size", "plan_counts", "plan_rows")),
    ):
        for attr in names:
            monkeypatch.setattr(module, attr, guard(getattr(module, attr)))
    monkeypatch.setattr(plan, "make", planner(plan.make, alter))
    monkeypatch.setattr(plan, "second_fold_steps", planner(plan.second_fold_steps))


def test_the_check_obeys_a_plan_altered_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline hands each method what its step says and the method obeys it: exact mode
    and MultiLinear turned off, degree-2 on 120 rows, and the RBF SVM (which the plan left out
    where exact mode runs) on a sample of 150 rows tuned on 100, though no size would choose
    any of these. Nothing but the plan sizes a method."""

    def altered(counts: Counts, options: plan.Options, made: plan.Plan) -> plan.Plan:
        off = "turned off by hand"
        exact_off = Sized(0, off, sizing=exact.ExactSizing(False, off))
        d2 = Sized(120, None, "cost", 0, sizing=degree2.Degree2Sizing(120, None, "cost"))
        rbf = Sized(150, None, "cost", sizing=rbfsvm.RbfSvmSizing(100, 1.0, 1.0, None, 150))
        (stand_in,) = plan.checker_steps(counts, (rbfsvm.NAME,), 1e6, options.memory_limit)
        steps = []
        for s in made.steps:
            if s.name == exact.NAME:
                s = dataclasses.replace(s, runs=False, rows=0, reason=off, sized=exact_off)
            elif s.name == "multilinear":
                s = dataclasses.replace(s, runs=False, rows=0, reason=off)
            elif s.name == "degree2":
                s = dataclasses.replace(s, rows=120, sized=d2)
            elif s.name == rbfsvm.NAME:
                s = dataclasses.replace(stand_in, rows=150, sized=rbf)
            steps.append(s)
        return dataclasses.replace(made, steps=tuple(steps))

    _only_the_plan_sizes(monkeypatch, altered)
    v = run(CheckConfig(train=str(DATASETS / "heart_scale"), exact="auto")).json
    assert not v["exact"]["ran"] and v["exact"]["reason"] == "turned off by hand"
    assert set(v["checkers"]) == {"degree2", rbfsvm.NAME}
    d2_block = v["checkers"]["degree2"]
    assert (d2_block["status"], d2_block["rows"]) == ("subsampled", 120)
    assert d2_block["reference"]["rows"] == 120
    rbf_block = v["checkers"][rbfsvm.NAME]
    assert rbf_block["rows"] == 150 and rbf_block["tune_rows"] == 100
    assert rbf_block["reference"]["rows"] == 150


def _bought_on_all_rows(counts: Counts, options: plan.Options, made: plan.Plan) -> plan.Plan:
    """Exact mode off and the RBF SVM skipped in the first measurement, by hand; the plan's
    settling step buys it on all of T, tuned on 100 rows."""
    off = "turned off by hand"
    exact_off = Sized(0, off, sizing=exact.ExactSizing(False, off))
    skipped = Sized(0, off, "cost", sizing=rbfsvm.RbfSvmSizing(None, 1.0, 0.0, off))
    (stand_in,) = plan.checker_steps(counts, (rbfsvm.NAME,), 1e6, options.memory_limit)
    steps = []
    for s in made.steps:
        if s.name == exact.NAME:
            s = dataclasses.replace(s, runs=False, rows=0, reason=off, sized=exact_off)
        elif s.name == rbfsvm.NAME:
            s = dataclasses.replace(stand_in, rows=0, reason=off, sized=skipped)
        steps.append(s)
    on_all = Sized(counts.rows, sizing=rbfsvm.RbfSvmSizing(100, 1.0, 1.0))
    settling = dataclasses.replace(stand_in, rows=counts.rows, sized=on_all)
    return dataclasses.replace(made, steps=tuple(steps), settling=settling)


@pytest.mark.parametrize(
    "data, bought",
    [("heart_scale", True), ("fourclass", False)],  # borderline from intervals; kernel (clear)
)
def test_a_borderline_first_verdict_runs_the_plans_settling_step(
    monkeypatch: pytest.MonkeyPatch, data: str, bought: bool
) -> None:
    """The settling step runs only where the first measurement's verdict is borderline: its
    result is the checker's block, with the first run's in ``first_measurement``, and no second
    fold runs; a clear first verdict leaves it ``not run``."""
    _only_the_plan_sizes(monkeypatch, _bought_on_all_rows)
    v = run(CheckConfig(train=str(DATASETS / data), exact="auto")).json
    block, settling = v["checkers"][rbfsvm.NAME], v["plan"]["settling"]
    assert settling["rows"] == v["split"]["train"]
    assert v["second_fold"] is None
    said = f"trained on {settling['rows']:,} rows of T bought with what the first measurement left"
    assert (said in render.verdict_footnote(v)) == bought
    if bought:
        assert settling["outcome"] == "ran"
        assert (block["status"], block["rows"], block["tune_rows"]) == ("ok", settling["rows"], 100)
        first = block["first_measurement"]
        assert first == {"status": "skipped", "rows": 0, "gap": None, "gap_ci95": None}
        assert block["gap"] is not None and v["margin"] == "borderline"
    else:
        assert v["margin"] == "clear" and settling["outcome"] == "not run"
        assert block["status"] == "skipped" and "first_measurement" not in block


def test_only_the_plan_sizes_a_method(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --time-limit the plan's sizes are all there is: with every size raising
    outside kcheck.plan, the check's JSON is the one it gives unpatched (exact mode and
    every checker on heart_scale)."""
    config = CheckConfig(train=str(DATASETS / "heart_scale"), exact="auto", checkers=registry.NAMES)
    before = without_timing(run(config).json)
    _only_the_plan_sizes(monkeypatch)
    assert without_timing(run(config).json) == before


@pytest.mark.slow
def test_degree2s_plan_is_the_rows_it_trains_on_a_subsample() -> None:
    """Where the floor affords part of the expansion: the plan's rows and limit are what
    degree-2 trains on, and its counted seconds are the plan's estimate."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, (3_000, 30))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    T = Dataset(sp.csr_matrix(X[:2_250]), y[:2_250])
    V = Dataset(sp.csr_matrix(X[2_250:]), y[2_250:])
    c = Counts.of(T, V)
    (step,) = plan.checker_steps(c, ("degree2",), 2.0, 8 * GIB)
    assert 1_000 <= step.rows < T.rows and step.limited_by == "cost"
    assert step.sized is not None
    assert step.sized.sizing == degree2.Degree2Sizing(step.rows, None, "cost")
    result = degree2.run(T, V, degree2.Degree2Options(seed=0), step.sized.sizing)
    assert result.status == "subsampled" and result.info["rows"] == step.rows
    assert step.estimated_seconds is not None
    assert result.counted_seconds == pytest.approx(step.estimated_seconds, rel=0.01)


def test_checker_steps_follow_the_registry_order() -> None:
    steps = plan.checker_steps(counts(600), ("rbfsvm", "degree2", "multilinear"), 10.0, GIB)
    assert [s.name for s in steps] == [n for n in registry.CHECKERS if n in DEFAULT]


# --- predictions beside what happened ------------------------------------------------------------


def _step(
    name: str, predicted: float | None, cpu: float | None, runs: bool = True, rows: int = 500
) -> dict:
    return {
        "name": name,
        "runs": runs,
        "rows": rows,
        "estimated_seconds": predicted,
        "cpu_seconds": cpu,
    }


def test_a_stage_far_from_its_prediction_is_named_and_one_near_it_is_not() -> None:
    steps = [
        _step("degree2", 10.0, 85.0),  # 8.5x: the sparse-text case
        _step("rbf", 4.0, 1.0),  # 0.25x
        _step("linear", 2.0, 3.9),  # within 2x
        _step("multilinear", None, 30.0),  # no prediction
        _step("rbfsvm", 5.0, None, runs=False),
        _step("tiny", 0.01, 0.2),  # both under half a second
        # On 0 rows its checker reports the skip (a9a's rbfsvm): nothing ran to compare.
        _step("skipped", 104.5, 0.0, rows=0),
    ]
    # The settling run (the RBF SVM bought on all of T) is compared like any step.
    settling = _step("rbfsvm", 17.2, 66.0)
    lines = plan.off_prediction({"steps": steps, "settling": settling})
    assert len(lines) == 3
    assert lines[0].startswith("degree2 took 85.0 CPU seconds against 10.0 predicted (8.5x)")
    assert lines[1].startswith("rbf took 1.0 CPU seconds against 4.0 predicted (0.2x)")
    assert lines[2].startswith("rbfsvm took 66.0 CPU seconds against 17.2 predicted (3.8x)")
    assert len(plan.off_prediction({"steps": steps, "settling": None})) == 2
    # The probe cannot tell a wrong count from a machine whose speed moved
    # (docs/method.md, "Predicted against taken"): the line blames neither alone.
    assert all(
        line.endswith("the cost model is off for this data or this machine") for line in lines
    )


@pytest.mark.parametrize(
    ("predicted", "cpu", "shown"),
    [
        (2.8, 1.3, "0.46x"),  # madelon's MultiLinear: "0.5x" read as within the band
        (3.9, 7.85, "2.01x"),  # and "2.0x" as its edge
        (10.0, 4.99, "0.499x"),
        (10.0, 85.0, "8.5x"),  # one decimal where it shows the stage outside
        (4.0, 1.0, "0.2x"),
    ],
)
def test_the_warning_shows_a_ratio_outside_the_band_as_outside(
    predicted: float, cpu: float, shown: str
) -> None:
    (line,) = plan.off_prediction({"steps": [_step("multilinear", predicted, cpu)]})
    assert f"predicted ({shown}):" in line


def test_a_stage_is_compared_with_its_prediction_at_this_machines_pace() -> None:
    """On a day when the machine ran at half the reference's seconds, exact mode took 0.84 CPU
    seconds of a 2.83 s prediction (0.3x), and the check warned that the cost model was off.
    At the probe's pace it is 0.6x: not named. A stage over twice its prediction at that pace
    is still named, with the pace."""
    half = probe.REFERENCE_SECONDS / 2
    fast = [_step("rbf", 2.83, 0.84)]
    (line,) = plan.off_prediction({"steps": fast})
    assert line.startswith("rbf took 0.8 CPU seconds against 2.8 predicted (0.3x)")
    assert plan.off_prediction({"steps": fast, "probe_cpu_seconds": half}) == []
    far = [_step("degree2", 10.0, 12.0)]  # 1.2x of the reference, 2.4x at this pace
    assert plan.off_prediction({"steps": far}) == []
    (line,) = plan.off_prediction({"steps": far, "probe_cpu_seconds": half})
    assert line.startswith(
        "degree2 took 12.0 CPU seconds against 5.0 predicted (2.4x, at this machine's pace of 0.50)"
    )


def test_a_checker_skipped_at_run_time_is_not_compared() -> None:
    """Planned to run, then skipped by the --time-limit: its 0 CPU seconds against its
    prediction say nothing about the cost model (a check with --time-limit 6 said 0.0x)."""
    steps = [_step("degree2", 9.4, 0.0), _step("multilinear", 0.4, 1.2)]
    skipped = {"status": "skipped", "reason": "the time limit"}
    ran = {"status": "ok", "reason": None}
    lines = plan.off_prediction({"steps": steps}, {"degree2": skipped, "multilinear": ran})
    assert [line.split()[0] for line in lines] == ["multilinear"]
    # Had it run, the same numbers would be named.
    lines = plan.off_prediction({"steps": steps}, {"degree2": ran, "multilinear": ran})
    assert [line.split()[0] for line in lines] == ["degree2", "multilinear"]


def test_a_stage_that_stopped_early_is_compared_with_the_work_it_did() -> None:
    """Exact mode's prediction counts every repeat it may run; settled after 2 of 5 on 569
    rows (breast_cancer), it took 0.3x of that, and the cost model was not off."""
    data = {"rows": 569, "nnz": 569 * 30, "classes": [1, 2]}
    block = {"repeats": 2, "stopped_early": True, "rows": 569, "folds": 5, "tune_rows": 569}
    nested = {**block, "nested": True}
    share, did = plan.done_share(nested, data)
    assert did == " for the 2 of 5 repeats it ran"
    # More than 2/5: the search on all rows and the distances are counted whatever it ran.
    assert 0.4 < share < 0.6
    # Not nested, a repeat is a small part of the count: the search is most of it.
    assert plan.done_share(block, data)[0] > share
    steps = [_step("rbf", 9.45, 2.86, rows=569)]
    assert plan.off_prediction({"steps": steps}, {"rbf": nested}, data) == []
    # Still named where the work it did ran far from its share of the prediction.
    far = [_step("rbf", 9.45, 9.0, rows=569)]
    (line,) = plan.off_prediction({"steps": far}, {"rbf": nested}, data)
    assert line.startswith(
        f"rbf took 9.0 CPU seconds against {9.45 * share:.1f} predicted for the 2 of 5 "
        "repeats it ran ("
    )
    # Run to the end, or with its repeats fixed (never stopped early): the whole prediction.
    for whole in ({**nested, "stopped_early": False}, {**nested, "repeats": 5}):
        assert plan.done_share(whole, data) == (1.0, "")
        assert len(plan.off_prediction({"steps": steps}, {"rbf": whole}, data)) == 1


def test_a_stage_is_compared_with_its_count_revised_by_the_searchs_iterations() -> None:
    """Once the search has counted LIBSVM's iterations, exact mode's repeats and the RBF SVM
    checker's trainings are predicted from them (``revised_seconds``): 5,000 noisy rows at
    C = 2^7, where the plan, counting no iterations, predicted 4.6 s and the stage took 11.1
    (2.4x, a warning)."""
    data = {"rows": 5000, "nnz": 60000, "classes": [-1, 1]}
    block = {"repeats": 2, "stopped_early": False, "rows": 5000, "folds": 5, "tune_rows": 600}
    # As the check runs it: the linear model's C is the baseline's, not searched again.
    options = exact.ExactOptions(tune_rows=600, baseline_C=True)

    def cost(repeats: int) -> float:
        return exact.counted_seconds(5000, 60000, 2, dataclasses.replace(options, repeats=repeats))

    # Without the field (a JSON of kcheck 0.6.1), the plan's prediction as it was.
    assert plan.done_share(block, data) == (1.0, "")
    ran = {**block, "revised_seconds": cost(0) + 3 * (cost(2) - cost(0))}
    share, did = plan.done_share(ran, data)
    # The search counts 1.29 of 8.61 and the repeats three times their 7.32: predicted at
    # 4.64 x 2.70 = 12.5, of which 11.06 is 0.88x.
    assert did == "" and share == pytest.approx(2.70, abs=0.01)
    steps = [_step("rbf", 4.64, 11.06, rows=5000)]
    assert len(plan.off_prediction({"steps": steps}, {"rbf": block}, data)) == 1
    assert plan.off_prediction({"steps": steps}, {"rbf": ran}, data) == []
    # Far under it is named, with the prediction of what it did.
    under = [_step("rbf", 4.64, 5.0, rows=5000)]
    (line,) = plan.off_prediction({"steps": under}, {"rbf": ran}, data)
    assert line.startswith("rbf took 5.0 CPU seconds against 12.5 predicted (0.4x")
    # Stopped after one of two: that one repeat's prediction, and the words say so.
    one = {**ran, "repeats": 1, "stopped_early": True, "revised_seconds": cost(0) + 1.0}
    share1, did1 = plan.done_share(one, data)
    assert did1 == " for the 1 of 2 repeats it ran"
    assert share1 == pytest.approx((cost(0) + 1.0) / cost(2))
    # The RBF SVM checker's block has no repeats: its revised prediction over the step's
    # (over its own estimate where the step's is not given, as kcheck 0.6.4's).
    rbfsvm = {"status": "ok", "estimated_seconds": 6.195, "revised_seconds": 7.979}
    assert plan.done_share(rbfsvm, data, 5.0) == (pytest.approx(7.979 / 5.0), "")
    assert plan.done_share(rbfsvm, data) == (pytest.approx(7.979 / 6.195), "")
    poker0 = [_step("rbfsvm", 2.35, 5.96, rows=14068)]
    assert len(plan.off_prediction({"steps": poker0}, {})) == 1
    assert plan.off_prediction({"steps": poker0}, {"rbfsvm": rbfsvm}, data) == []
    # So is MultiLinear's, once its k-means has run: one cluster holding every class of
    # sector took 3.2x the prediction before it, and is within 2x of the revised one.
    sector = [_step("multilinear", 72.05, 230.0, rows=4794)]
    (line,) = plan.off_prediction({"steps": sector}, {})
    assert line.startswith("multilinear took 230.0 CPU seconds against 72.0 predicted")
    clusters = {"status": "ok", "revised_seconds": 257.0}
    assert plan.off_prediction({"steps": sector}, {"multilinear": clusters}, data) == []


def test_the_plan_carries_what_each_step_took_beside_its_prediction() -> None:
    v = run(CheckConfig(train=str(DATASETS / "heart_scale"), exact="auto")).json
    steps = {s["name"]: s for s in v["plan"]["steps"]}
    for name in ("linear", exact.NAME, "multilinear", "degree2"):
        assert steps[name]["seconds"] is not None and steps[name]["seconds"] >= 0
        assert steps[name]["cpu_seconds"] is not None and steps[name]["cpu_seconds"] >= 0
    assert steps["degree2"]["seconds"] == pytest.approx(
        v["checkers"]["degree2"]["seconds"], abs=1e-3
    )
    assert steps["rbfsvm"]["seconds"] is None and steps["rbfsvm"]["cpu_seconds"] is None


@pytest.mark.parametrize("quiet", [False, True])
def test_the_command_warns_of_a_stage_off_its_prediction_unless_quiet(
    quiet: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from kcheck.cli.app import main

    line = "degree2 took 85.0 CPU seconds against 10.0 predicted (8.5x)"
    monkeypatch.setattr(plan, "off_prediction", lambda p, *_: [line] if p.get("steps") else [])
    out = tmp_path / "v.json"
    args = ["check", str(DATASETS / "heart_scale"), "--exact", "never", "-o", str(out)]
    with pytest.raises(SystemExit) as ended:
        main([*args, "-q"] if quiet else args)
    assert ended.value.code == 0
    err = capfd.readouterr().err
    assert (f"warning: {line}" in err) is not quiet
    assert line not in out.read_text()  # the JSON stays the same on every machine


def test_a_warning_in_a_log_is_laid_out_for_the_logs_width(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Off a terminal, a warning wraps at the log's width like a stage line, its words whole."""
    from kcheck.cli.app import main

    line = "degree2 took 85.0 CPU seconds against 10.0 predicted (8.5x): the cost model is off"
    monkeypatch.setattr(plan, "off_prediction", lambda p, *_: [line] if p.get("steps") else [])
    monkeypatch.setenv("COLUMNS", "60")
    out = tmp_path / "v.json"
    with pytest.raises(SystemExit) as ended:
        main(["check", str(DATASETS / "heart_scale"), "--exact", "never", "-o", str(out)])
    assert ended.value.code == 0
    err = capfd.readouterr().err.splitlines()
    start = next(i for i, x in enumerate(err) if x.startswith("warning: degree2 took"))
    assert all(len(x) <= 60 for x in err[start : start + 3])
    assert " ".join(x.strip() for x in err[start : start + 2]) == f"warning: {line}"


def test_a_separable_subsample_is_charged_no_more_than_it_was_given() -> None:
    """Text-like rows (8,400 words, 44 a row): a subsample is more separable than all of T,
    so it costs more per value; the rows planned are those whose own count fits."""
    c = counts(20_000, width=8_400, per_row=44)
    for seconds in (20.0, 60.0, 200.0):
        (d2,) = plan.checker_steps(c, ("degree2",), seconds, 8 * GIB)
        assert d2.estimated_seconds is None or d2.estimated_seconds <= seconds * 1.001
        if d2.rows:
            assert d2.estimated_seconds is not None and d2.estimated_seconds > 0.5 * seconds


def test_the_readme_states_the_budget_rule_the_plan_uses() -> None:
    """The README's cost sentence names the rule's two constants as the code has them."""
    readme = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text().split())
    rule = f"max({budget.FLOOR_SECONDS:g} s, {budget.LINEAR_FACTOR:g}x"
    assert readme.count(rule) >= 2, rule  # "What a check costs" and "How it decides"
    c = counts(3_000)
    whole = budget.methods_seconds(nnz=c.nnz, n_classes=2)
    assert whole == max(
        budget.FLOOR_SECONDS, budget.LINEAR_FACTOR * budget.linear_seconds(c.nnz, 2)
    )
