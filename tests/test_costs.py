"""What a check counts and shows: kcheck.costs.budget's one cost per stage, kcheck.costs.solvers'
revisions, and the solver-shaped predictions of scripts/stage_predictions.py that the
benchmark still reports beside them."""

from __future__ import annotations

import math

import pytest
from conftest import DATASETS, load_script

from kcheck import plan
from kcheck.checkers import kmeans as km
from kcheck.checkers.base import Counts
from kcheck.config import CheckConfig
from kcheck.costs import budget
from kcheck.costs import solvers as solver_costs
from kcheck.defaults import DEFAULT_CHECKERS, Event
from kcheck.pipeline import _Pace, _predicted, run

#: The solver-shaped stage predictions kcheck showed before schema 3, which the benchmark
#: (scripts/plan_bench.py) still reports beside the counted cost.
costs = load_script("stage_predictions")


def _counts(**kw: int) -> Counts:
    base = dict(
        rows=1500,
        val_rows=500,
        nnz=15_000,
        val_nnz=5_000,
        n_classes=2,
        features=10,
        expanded_nnz=100_000,
        data_bytes=200_000,
        val_bytes=70_000,
    )
    base.update(kw)
    return Counts(**base)  # type: ignore[arg-type]


def test_the_separable_regime_raises_liblinears_cost_per_power_of_ten() -> None:
    assert costs.separable_factor(10, 1500) == 1.0
    assert costs.separable_factor(30, 1) == 1.0  # 10^1.48: just short of the knee
    assert costs.separable_factor(40, 1) > 1.0
    wide = [costs.separable_factor(w, 1700) for w in (125_750, 2_003_000, 32_012_000)]
    # Degree-2 on text of 500, 2,000 and 8,000 words measured 2.3x, 7.4x and 11.6x.
    for got, measured in zip(wide, (2.3, 7.4, 11.6), strict=True):
        assert got == pytest.approx(measured, rel=0.1)
    assert wide == sorted(wide)


def test_the_baselines_cost_grows_as_its_rows_approach_separability() -> None:
    """Cover: n rows in d dimensions are separable with high probability below n = 2d, where
    LIBLINEAR's C search runs on to its largest C. The factor rises from 1 at ONSET_FROM x the
    width in rows to ONSET_MOST at the width, and no further."""
    f = costs.width_onset_factor
    assert f(100, int(costs.ONSET_FROM * 100)) == 1.0
    assert f(100, 100) == costs.ONSET_MOST == f(100, 10) == f(55_197, 4_794)
    between = [f(100, r) for r in (390, 300, 200, 120)]
    assert between == sorted(between) and 1.0 < between[0] < between[-1] < costs.ONSET_MOST
    assert f(0, 100) == f(100, 0) == 1.0
    # The baseline's prediction carries it; MultiLinear's clusters, as narrow in rows, do not.
    narrow, wide = _counts(features=10), _counts(features=1_500, nnz=15_000)
    lin = [costs.shape_seconds("linear", c, c.rows, None) for c in (narrow, wide)]
    assert lin[1] == pytest.approx(lin[0] * costs.ONSET_MOST)
    ml = [costs.shape_seconds("multilinear", c, c.rows, None) for c in (narrow, wide)]
    assert ml[1] == pytest.approx(ml[0])


def test_a_stage_grows_with_its_classes_rows_and_width() -> None:
    c = _counts()
    lin = costs.predicted_seconds("linear", c, c.rows, None)
    assert lin is not None and lin > 0
    more_classes = _counts(n_classes=10)
    assert costs.predicted_seconds("linear", more_classes, c.rows, None) == pytest.approx(10 * lin)
    # MultiLinear's clusters hold a few of the classes: about the square root of them.
    ml = costs.shape_seconds("multilinear", c, c.rows, None)
    ml10 = costs.shape_seconds("multilinear", more_classes, c.rows, None)
    assert ml is not None and ml10 is not None
    kmeans = costs.KMEANS_SECONDS_PER_WORK * km.N_ITER * km.n_clusters(c.rows) * c.nnz
    assert ml10 - kmeans == pytest.approx((ml - kmeans) * math.sqrt(10))
    # Past DEGREE2_ROWS_KNEE rows, a value costs more (more Newton steps).
    many = _counts(rows=40_000, nnz=400_000)
    per_value = costs.shape_seconds("linear", many, many.rows, None) / many.nnz  # type: ignore[operator]
    assert per_value == pytest.approx(budget.LINEAR_SECONDS_PER_NNZ * 2.0)
    # Degree-2 on a subsample adds its reference: a linear model on the same rows.
    full = costs.shape_seconds("degree2", c, c.rows, None)
    half = costs.shape_seconds("degree2", c, c.rows // 2, None)
    assert full is not None and half is not None and half > full / 2
    assert costs.predicted_seconds("degree2", c, 0, None) is None


def test_degree2_is_sized_and_predicted_at_more_per_value_on_more_rows() -> None:
    """Up to DEGREE2_ROWS_FROM rows a value costs the same; above, it grows as a power of the
    rows where labels overlap (a9a's 15,743 rows took 2.2x a count without it). Degree-2 is
    sized, and predicted, with it; charged without it (clean data costs the count alone)."""

    def per_value(rows: int) -> float:
        return budget.degree2_sizing_seconds(100 * rows, 2, rows) / (100 * rows)

    assert per_value(1_000) == pytest.approx(per_value(2_000))
    ratio = (8_000 / budget.DEGREE2_ROWS_FROM) ** budget.DEGREE2_ROWS_EXPONENT
    assert per_value(8_000) == pytest.approx(per_value(2_000) * ratio)
    assert per_value(8_000) > per_value(4_000) > per_value(2_000)
    # Below DEGREE2_ROWS_KNEE the charge is the same per value at any rows.
    assert budget.degree2_seconds(800_000, 2, 8_000) == pytest.approx(
        budget.degree2_seconds(200_000, 2, 2_000) * 4
    )
    c = _counts(rows=8_000, nnz=80_000, expanded_nnz=800_000)
    sized = budget.degree2_sizing_seconds(c.expanded_nnz, c.n_classes, c.rows)
    # Beside its training, the expansion of its rows and of V.
    val = c.expanded_nnz * c.val_rows / c.rows
    expand = costs.EXPAND_SECONDS_PER_VALUE * (c.expanded_nnz + val)
    assert costs.shape_seconds("degree2", c, c.rows, None) == pytest.approx(sized + expand)
    # Sized within 10 counted seconds, a subsample is charged its count, under what it got.
    many = _counts(rows=30_000, nnz=300_000, expanded_nnz=30_000 * 500)
    (step,) = plan.checker_steps(many, ("degree2",), 10.0, 8 * 2**30)
    assert 0 < step.rows < many.rows
    expanded = round(step.rows * many.expanded_nnz / many.rows)
    assert step.estimated_seconds == pytest.approx(budget.degree2_seconds(expanded, 2, step.rows))
    assert budget.degree2_sizing_seconds(expanded, 2, step.rows) <= 10.0 * 1.001


def test_the_plan_gives_each_step_that_runs_one_cost_from_counts_alone() -> None:
    """Schema 3: one number per step, its counted cost (kcheck.costs.budget), the same at any
    jobs; the baseline's is the budget's count of its C search."""
    v = run(CheckConfig(train=str(DATASETS / "heart_scale"), exact="auto")).json
    again = run(CheckConfig(train=str(DATASETS / "heart_scale"), exact="auto", jobs=2)).json
    for s, t in zip(v["plan"]["steps"], again["plan"]["steps"], strict=True):
        assert "predicted_seconds" not in s
        assert s["estimated_seconds"] == t["estimated_seconds"]
        if s["runs"] and s["rows"] > 0 and s["name"] in ("linear", "rbf", *DEFAULT_CHECKERS):
            assert s["estimated_seconds"] is not None and s["estimated_seconds"] > 0, s
    step = {s["name"]: s for s in v["plan"]["steps"]}
    rows = v["split"]["train"]
    assert step["linear"]["estimated_seconds"] == pytest.approx(
        budget.linear_seconds(_nnz(v), 2, rows), abs=1e-3
    )


def _nnz(v: dict) -> int:
    """T's stored values, from the JSON: the data's, in T's share of the rows."""
    return round(v["data"]["nnz"] * v["split"]["train"] / v["data"]["rows"])


def test_a_stage_a_checker_announces_is_shown_at_the_runs_pace() -> None:
    """A checker's own announcement within its step (exact mode's repeats, the RBF SVM's
    trainings) carries reference seconds: shown at the run's pace, as the step's own
    prediction is; an event without one gets the step's."""
    seen: list[Event] = []
    pace = _Pace(machine=0.5)
    report = _predicted(seen.append, 6.0, pace)
    report(Event("RBF SVM checker", 0, 10))
    report(Event("RBF SVM trainings", 0, 6, predicted_seconds=4.0))
    assert [e.predicted_seconds for e in seen] == [3.0, 2.0]
    # Without a prediction of the step's own, the announcement is still paced.
    seen.clear()
    _predicted(seen.append, None, pace)(Event("repeats", 0, 2, predicted_seconds=8.0))
    assert seen[0].predicted_seconds == 4.0


def test_a_shown_prediction_follows_the_runs_pace_and_not_before_it_says_anything() -> None:
    pace = _Pace()
    assert pace.shown(10.0) == 10.0
    pace.add(0.05, 0.5)  # a few milliseconds predicted: too little to judge the machine by
    assert pace.shown(10.0) == 10.0
    pace.add(1.0, 3.0)
    assert pace.shown(10.0) == pytest.approx(10.0 * 3.5 / 1.05)
    pace.add(None, 100.0)  # a stage with no prediction says nothing of the pace
    assert pace.shown(10.0) == pytest.approx(10.0 * 3.5 / 1.05)


def test_off_prediction_reads_the_count_or_a_schema_2_prediction() -> None:
    """A schema-3 step has one cost, its count; a schema-2 block (``kcheck report`` on an
    older file) is judged by the prediction it carried, as it was then."""
    step = {"name": "degree2", "runs": True, "rows": 100, "cpu_seconds": 4.0}
    assert plan.off_prediction({"steps": [{**step, "estimated_seconds": 3.0}]}) == []
    (line,) = plan.off_prediction({"steps": [{**step, "estimated_seconds": 0.5}]})
    assert line.startswith("degree2 took 4.0 CPU seconds against 0.5 predicted (8.0x)")
    near = {**step, "estimated_seconds": 0.5, "predicted_seconds": 3.0}
    assert plan.off_prediction({"steps": [near]}) == []
    far = {**step, "estimated_seconds": 3.0, "predicted_seconds": 0.5}
    (line,) = plan.off_prediction({"steps": [far]})
    assert line.startswith("degree2 took 4.0 CPU seconds against 0.5 predicted (8.0x)")


def test_degree2_on_a_subsample_is_predicted_with_the_expansion_of_all_of_V() -> None:
    """Degree-2 scores all of V, which it expands: on a 1,229-row subsample of 75,000 rows of
    20 features, V's 25,000 rows hold 20 times the training rows' values (0.65 s of the
    stage's 1.7 s on lin_d20_n100000), so most of the stage's shape."""
    per_row = 20 + 20 * 21 // 2
    c = _counts(
        rows=75_000,
        val_rows=25_000,
        nnz=1_500_000,
        val_nnz=500_000,
        features=20,
        expanded_nnz=75_000 * per_row,
    )
    shape = costs.shape_seconds("degree2", c, 1_229, None)
    assert shape is not None
    val = costs.EXPAND_SECONDS_PER_VALUE * 25_000 * per_row
    assert 0.4 * shape < val < shape
    # V's share is the same whatever the rows trained on: less of a larger subsample's.
    larger = costs.shape_seconds("degree2", c, 12_290, None)
    assert larger is not None and larger - val > 5 * (shape - val)


def test_multilinears_clusters_are_predicted_from_the_classes_each_holds() -> None:
    """Once k-means has run: each cluster's one-vs-rest models over the classes it holds, the
    width onset only on a cluster of CLUSTER_ONSET_ROWS or more, nothing for one class. Text
    left in one large cluster of every class costs more than K even clusters of a few."""
    width = 55_197
    one_big = [(4_000, 660_000, 105)] + [(20, 3_300, 1)] * 40
    even = [(100, 16_500, 10)] * 40 + [(20, 3_300, 1)]
    big = solver_costs.clusters_seconds(one_big, width, 1.0)
    spread = solver_costs.clusters_seconds(even, width, 1.0)
    assert big > 3 * spread
    # Single-class clusters train nothing: only k-means is left.
    assert solver_costs.clusters_seconds([(50, 500, 1)] * 9, width, 1.0) == 1.0
    # One-vs-rest: as the classes, from three on.
    two, three, six = (
        solver_costs.clusters_seconds([(500, 5_000, k)], 100, 0.0) for k in (2, 3, 6)
    )
    assert three == pytest.approx(3 * two) and six == pytest.approx(2 * three)
    # The onset from CLUSTER_ONSET_ROWS: a narrow cluster's cost per value jumps there.
    rows = solver_costs.CLUSTER_ONSET_ROWS

    def per_value(r: int) -> float:
        return solver_costs.clusters_seconds([(r, 100 * r, 2)], width, 0.0) / (100 * r)

    onset = solver_costs.width_onset_factor(width, rows)
    assert per_value(rows) == pytest.approx(per_value(rows - 1) * onset, rel=0.01)


def test_an_rbf_training_costs_per_support_vector_and_more_per_value_on_sparse_rows() -> None:
    """kcheck.costs.solvers.rbf_trained_seconds: linear in the support vectors (their kernel columns
    and their entries for the rows predicted) and in the iterations; a value of a sparse row
    costs more than one of a dense row (index lists merged)."""

    def cost(
        sv: float,
        it: float = 0.0,
        values: float = 20.0,
        width: int = 20,
        classes: int = 2,
        predict_rows: int = 1_000,
    ) -> float:
        return solver_costs.rbf_trained_seconds(
            support_vectors=sv,
            rows=4_000,
            predict_rows=predict_rows,
            iterations=it,
            values_per_row=values,
            width=width,
            n_classes=classes,
        )

    assert cost(0.0) == 0.0
    assert cost(800.0) == pytest.approx(2 * cost(400.0))
    assert cost(400.0, 1e6) - cost(400.0) == pytest.approx(
        solver_costs.RBF_ITERATION_SECONDS_PER_ROW * 1e6 * 4_000
    )
    assert cost(400.0, width=20_000) > 2 * cost(400.0)
    # One-vs-one over k classes: each pair's rows, about 2(k-1)/k times a binary problem's.
    many = cost(400.0, classes=10, predict_rows=0)
    binary = cost(400.0, predict_rows=0)
    assert many == pytest.approx(1.8 * binary)
