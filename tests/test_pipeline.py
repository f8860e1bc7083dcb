"""The check end to end on real (small) data with the real LIBLINEAR binding."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from runner import slowdown, wait_for

from kcheck.checkers import multilinear
from kcheck.config import CheckConfig
from kcheck.defaults import Event
from kcheck.errors import KcheckError
from kcheck.io.data import read_libsvm, write_libsvm
from kcheck.pipeline import run
from kcheck.verdict import without_timing as strip_timing


def test_fourclass_needs_a_kernel(datasets):
    v = run(CheckConfig(train=str(datasets / "fourclass"), exact="never")).json
    assert v["verdict"] == "kernel"
    assert v["checkers"]["multilinear"]["gap"] >= 0.1
    assert v["deciding_checker"] == "multilinear"
    assert "rbf" not in v["checkers"] and v["exact"]["ran"] is False


def test_exact_mode_decides_where_it_runs(datasets):
    v = run(CheckConfig(train=str(datasets / "fourclass"), exact="always")).json
    rbf = v["checkers"]["rbf"]
    assert rbf["status"] == "exact" and v["exact"]["ran"] is True
    assert v["deciding_checker"] == "rbf" and v["verdict"] == "kernel"
    # Exact mode scores all 862 rows by repeated CV: its interval lies far above epsilon.
    assert rbf["gap_ci95"][0] > 0.1 and rbf["rows"] == 862


def test_exact_mode_auto_skips_what_its_budget_cannot_pay_without_stacking(datasets, monkeypatch):
    from kcheck.checkers import exact
    from kcheck.costs import budget

    monkeypatch.setattr(budget, "FLOOR_SECONDS", 0.01)
    monkeypatch.setattr(exact, "run", lambda *a, **k: pytest.fail("exact mode ran"))
    v = run(CheckConfig(train=str(datasets / "fourclass"))).json
    block = v["exact"]
    assert block["ran"] is False and block["reason"] == "its counted cost is over the budget"
    assert block["estimated_seconds"] > block["budget_seconds"]
    assert "rbf" not in v["checkers"]


@pytest.mark.slow
def test_german_is_linear_enough(datasets):
    v = run(CheckConfig(train=str(datasets / "german.numer"))).json
    assert (v["verdict"], v["margin"]) == ("linear", "clear")
    # Exact mode decides, and no proxy's interval lies clear of epsilon to overrule it.
    assert v["checkers"]["rbf"]["gap"] < 0.02
    assert all(c["gap_ci95"][0] < 0.02 for c in v["checkers"].values())


def test_json_schema(datasets):
    v = run(CheckConfig(train=str(datasets / "heart_scale"))).json
    assert v["schema_version"] == 3
    assert set(v) >= {
        "kcheck_version",
        "verdict",
        "margin",
        "epsilon",
        "seed",
        "data",
        "scaling",
        "split",
        "linear",
        "checkers",
        "test",
        "model",
        "seconds",
    }
    assert v["verdict"] in ("linear", "kernel") and v["margin"] in ("clear", "borderline")
    sha256 = hashlib.sha256((datasets / "heart_scale").read_bytes()).hexdigest()
    assert v["data"] == {
        "path": str(datasets / "heart_scale"),
        "sha256": sha256,
        "rows": 270,
        "features": 13,
        "nnz": 3378,
        "density": pytest.approx(3378 / (270 * 13), abs=1e-6),
        "classes": [-1, 1],
    }
    assert v["split"] == {"train": 202, "validation": 68, "stratified": True}
    assert v["scaling"] == {"method": "maxabs", "lower": -1.0, "upper": 1.0}
    assert 0.5 < v["linear"]["val_accuracy"] <= 1 and v["linear"]["C"] > 0
    d2, ml = v["checkers"]["degree2"], v["checkers"]["multilinear"]
    assert d2["status"] == "ok" and d2["dimension"] == 13 + 13 * 14 // 2 and d2["fraction"] == 1.0
    assert ml["status"] == "ok" and ml["clusters"] == 4  # 202 rows: at most one per 50
    for c in (d2, ml):
        lo, hi = c["gap_ci95"]
        assert lo <= c["gap"] <= hi
        assert c["gap"] == pytest.approx(c["val_accuracy"] - v["linear"]["val_accuracy"], abs=2e-6)
    import json

    json.dumps(v)  # serialisable as is


@pytest.mark.slow
def test_deterministic_for_a_seed(datasets):
    """The same seed gives the same JSON (the goldens run each case again against its stored
    JSON); another seed gives another split and so another JSON."""
    a = run(CheckConfig(train=str(datasets / "svmguide1"), seed=3)).json
    c = run(CheckConfig(train=str(datasets / "svmguide1"), seed=4)).json
    assert strip_timing(a) != strip_timing(c)


@pytest.mark.slow
def test_parallel_clusters_give_the_same_json(datasets, monkeypatch):
    """-j 1 and -j 2 give the same JSON, and with -j 2 MultiLinear really trained its clusters
    in a pool of worker processes."""
    monkeypatch.setattr(multilinear, "MIN_PARALLEL_NNZ", 0)
    pools: list[int] = []
    real_pool = multilinear.process_pool

    def counted_pool(jobs, modules):
        pools.append(jobs)
        return real_pool(jobs, modules)

    monkeypatch.setattr(multilinear, "process_pool", counted_pool)
    path = str(datasets / "svmguide1")
    serial = run(CheckConfig(train=path, jobs=1, checkers=("multilinear",))).json
    assert pools == []
    parallel = run(CheckConfig(train=path, jobs=2, checkers=("multilinear",))).json
    assert pools == [2]
    assert strip_timing(serial) == strip_timing(parallel)


@pytest.mark.slow
def test_test_file_is_scored(datasets):
    v = run(CheckConfig(train=str(datasets / "svmguide1"), test=str(datasets / "svmguide1.t"))).json
    t = v["test"]
    assert t["rows"] == 4000
    t = t["accuracy"]
    # With a bias term the linear model is strong on svmguide1 (about 95% on the test file).
    assert t["linear"] > 0.9 and t["degree2"] > 0.9 and t["multilinear"] > 0.9


def _write_blobs(path, rng, labels, n_per=120, dim=4):
    centers = rng.normal(scale=4, size=(len(labels), dim))
    X = np.vstack([c + rng.normal(size=(n_per, dim)) for c in centers])
    y = np.repeat(np.array(labels, dtype=float), n_per)
    write_libsvm(str(path), y, X)


def test_multiclass(tmp_path, rng):
    path = tmp_path / "three"
    _write_blobs(path, rng, [1, 2, 3])
    v = run(CheckConfig(train=str(path))).json
    assert v["data"]["classes"] == [1, 2, 3]
    assert v["linear"]["val_accuracy"] > 0.9
    assert v["verdict"] == "linear"


def test_real_valued_labels_are_kept_apart(tmp_path, rng):
    # LIBLINEAR stores labels as C ints: 0.25 and 0.75 must not collapse into class 0.
    path = tmp_path / "real"
    _write_blobs(path, rng, [0.25, 0.75])
    v = run(CheckConfig(train=str(path))).json
    assert v["data"]["classes"] == [0.25, 0.75]
    assert v["linear"]["val_accuracy"] > 0.9


def test_single_class_is_refused(tmp_path):
    path = tmp_path / "one"
    write_libsvm(str(path), np.ones(30), np.eye(30))
    with pytest.raises(KcheckError, match="two classes"):
        run(CheckConfig(train=str(path)))


def test_too_few_rows(tmp_path):
    path = tmp_path / "tiny"
    write_libsvm(str(path), np.array([1.0, -1.0, 1.0]), np.eye(3))
    with pytest.raises(KcheckError, match="too few"):
        run(CheckConfig(train=str(path)))


@pytest.mark.parametrize(
    "bad",
    [dict(epsilon=-0.1), dict(checkers=("rbf",)), dict(scaling="zscore"), dict(jobs=0)],
)
def test_bad_config(datasets, bad):
    with pytest.raises(KcheckError):
        run(CheckConfig(train=str(datasets / "heart_scale"), **bad))


def test_degree2_skipped_under_tiny_memory_limit(datasets):
    # Enough for the check itself (3x the data plus 64 MB), leaving degree-2 about 2 MB.
    v = run(CheckConfig(train=str(datasets / "german.numer"), memory_limit=66 * 2**20)).json
    d2 = v["checkers"]["degree2"]
    assert d2["status"] == "skipped" and "memory limit" in d2["reason"]
    assert d2["gap"] is None
    # The verdict still stands on MultiLinear.
    assert v["checkers"]["multilinear"]["status"] == "ok"


def test_progress_is_reported(datasets):
    stages = []
    run(CheckConfig(train=str(datasets / "heart_scale")), progress=lambda e: stages.append(e.stage))
    assert any("linear" in s for s in stages) and any("MultiLinear" in s for s in stages)


def test_time_limit_skips_unfinished_checkers(datasets):
    # A limit that has passed before the read ends (it covers the read): nothing can be
    # compared, and the check says so.
    with pytest.raises(KcheckError, match="passed while reading the data"):
        run(CheckConfig(train=str(datasets / "svmguide1"), time_limit=1e-9))
    # Data given as arrays is read already: then the baseline is where the limit bites.
    from kcheck.prepare import prepare

    data = prepare(str(datasets / "svmguide1"), scaling="maxabs", memory_limit=2**30)
    with pytest.raises(KcheckError, match="before the linear baseline finished"):
        run(CheckConfig(train=str(datasets / "svmguide1"), time_limit=1e-9), prepared=data)


@pytest.mark.slow
@pytest.mark.timing
def test_time_limit_keeps_what_finished(datasets, monkeypatch):
    import time

    real = multilinear.run

    def slow_multilinear(T, V, options, *args, **kwargs):
        result = real(T, V, options, *args, **kwargs)
        wait_for(lambda: time.perf_counter() > options.deadline, "the deadline to pass")
        return result

    # MultiLinear runs first and finishes, but the limit passes before degree-2 can start:
    # degree-2 is skipped and the verdict stands on MultiLinear. The limit leaves the
    # baseline ample time however busy the machine is; MultiLinear then waits it out.
    monkeypatch.setattr(multilinear, "run", slow_multilinear)
    v = run(CheckConfig(train=str(datasets / "fourclass"), time_limit=5 * slowdown())).json
    assert v["checkers"]["multilinear"]["status"] == "ok"
    assert v["checkers"]["degree2"]["status"] == "skipped"
    assert v["checkers"]["degree2"]["reason"] == "time limit"
    assert v["verdict"] == "kernel"


@pytest.mark.slow
def test_rff_checker_is_opt_in(datasets):
    default = run(CheckConfig(train=str(datasets / "fourclass"), exact="never")).json
    assert "rff" not in default["checkers"]
    v = run(
        CheckConfig(
            train=str(datasets / "fourclass"), exact="never", checkers=("multilinear", "rff")
        )
    ).json
    r = v["checkers"]["rff"]
    assert r["status"] == "ok" and r["D"] >= 100 and r["gap"] > 0.1


def test_test_file_sharing_no_label_is_refused_before_training(tmp_path, datasets, monkeypatch):
    """A test file none of whose labels occur in training is refused at once (exit 2 from the
    CLI), before the baseline is trained."""
    from kcheck.checkers import linear

    y, X = read_libsvm(str(datasets / "heart_scale"))
    test = tmp_path / "other_labels.t"
    write_libsvm(str(test), np.where(y > 0, 7.0, 9.0), X)
    trained = []
    monkeypatch.setattr(linear, "run", lambda *a, **k: trained.append(1))
    with pytest.raises(KcheckError, match="none of its labels .* occurs in the training file"):
        run(CheckConfig(train=str(datasets / "heart_scale"), test=str(test), exact="never"))
    assert trained == []


def test_test_file_with_unseen_labels_and_wider_rows_is_scored_with_warnings(tmp_path, datasets):
    y, X = read_libsvm(str(datasets / "heart_scale"))
    y = y.copy()
    y[:10] = 5.0  # a label training never saw
    wide = sp.hstack([X, sp.csr_matrix(np.ones((X.shape[0], 1)))], format="csr")
    test = tmp_path / "mixed.t"
    write_libsvm(str(test), y, wide)
    v = run(CheckConfig(train=str(datasets / "heart_scale"), test=str(test), exact="never")).json
    acc = v["test"]["accuracy"]
    assert all(0.0 <= a <= 1.0 for a in acc.values() if a is not None)
    text = " ".join(v["warnings"])
    assert "10 of 270 rows have a label that never occurs" in text
    assert "dropped 270 value(s)" in text


def _second_fold_off(monkeypatch):
    from kcheck import pipeline

    monkeypatch.setattr(pipeline, "remeasure", lambda *a, **k: ())


@pytest.mark.slow
def test_a_borderline_verdict_is_measured_on_a_second_fold(datasets, monkeypatch):
    """german.numer without exact mode: degree-2 gains exactly epsilon on V (kernel,
    borderline); a second fold re-measures it and the mean of both folds decides."""
    from kcheck.verdict import Gap, decide, mean_gap

    v = run(CheckConfig(train=str(datasets / "german.numer"), exact="never")).json
    second = v["second_fold"]
    assert second["used"] is True and second["reason"] is None
    assert second["train"] + second["validation"] == 1000
    assert second["validation"] == v["split"]["validation"]
    # Only the checkers whose interval contained epsilon were trained again.
    assert list(second["checkers"]) == ["degree2"]
    assert "multilinear" not in second["checkers"]
    lin = second["linear"]
    assert (lin["val_accuracy"] * second["validation"]) == pytest.approx(
        round(lin["val_accuracy"] * second["validation"]), abs=1e-3
    )
    gaps = {}
    for name, c in v["checkers"].items():
        if name in second["checkers"]:
            s = second["checkers"][name]
            first = Gap(s["first_fold_gap"], *s["first_fold_gap_ci95"])
            other = Gap(s["gap"], *s["gap_ci95"])
            combined = mean_gap(first, other)
            assert c["gap"] == pytest.approx(combined.value, abs=1e-6)
            assert c["gap_ci95"] == pytest.approx([combined.low, combined.high], abs=1e-6)
            assert c["gap_ci95"][1] - c["gap_ci95"][0] < first.high - first.low
        gaps[name] = Gap(c["gap"], *c["gap_ci95"])
    d = decide(gaps, v["epsilon"])
    assert (v["verdict"], v["margin"], v["deciding_checker"]) == (d.verdict, d.margin, d.deciding)

    # The first fold is the check as it was without a second fold, to the last digit.
    _second_fold_off(monkeypatch)
    one = run(CheckConfig(train=str(datasets / "german.numer"), exact="never")).json
    assert one["second_fold"] is None
    s = second["checkers"]["degree2"]
    assert one["checkers"]["degree2"]["gap"] == s["first_fold_gap"]
    assert one["checkers"]["degree2"]["gap_ci95"] == s["first_fold_gap_ci95"]
    assert (one["verdict"], one["margin"]) == ("kernel", "borderline")
    assert v["verdict"] == "linear"
    # Everything else is the first fold's: models, scores, split.
    for key in ("linear", "split", "data"):
        assert strip_timing(one[key]) == strip_timing(v[key])


@pytest.mark.slow
def test_a_clear_verdict_and_exact_mode_get_no_second_fold(datasets):
    v = run(CheckConfig(train=str(datasets / "fourclass"), exact="never")).json
    assert v["margin"] == "clear" and v["second_fold"] is None
    # heart_scale is borderline at seed 1, but exact mode decided from repeated CV on all rows.
    v = run(CheckConfig(train=str(datasets / "heart_scale"), exact="always", seed=1)).json
    assert v["margin"] == "borderline" and v["exact"]["ran"] and v["second_fold"] is None


def test_the_second_fold_spends_what_the_first_measurement_left(datasets, monkeypatch):
    """One budget: the second fold is planned within the plan's ``second_fold_seconds`` (what
    the first measurement left of it), and where that does not hold its baseline there is none,
    the verdict staying the first fold's."""
    from kcheck import pipeline
    from kcheck import plan as plan_module

    asked: list[float] = []
    real = plan_module.second_fold_steps

    def recorded(counts, names, left_seconds, memory_limit):  # type: ignore[no-untyped-def]
        asked.append(left_seconds)
        return real(counts, names, left_seconds, memory_limit)

    monkeypatch.setattr(plan_module, "second_fold_steps", recorded)
    config = CheckConfig(train=str(datasets / "german.numer"), exact="never")
    events: list[Event] = []
    v = run(config, events.append).json
    assert v["second_fold"]["used"] is True
    assert asked == [pytest.approx(v["plan"]["second_fold_seconds"], abs=1e-3)]
    # A log names the stages it runs again, each announced with its prediction.
    stages = [e.stage for e in events if e.stage.startswith("second fold")]
    assert stages[0] == "second fold: linear baseline (C search)"
    assert "second fold: degree-2 checker" in stages
    announced = [e for e in events if e.stage == stages[0] and e.predicted_seconds is not None]
    assert announced and announced[0].predicted_seconds > 0
    spent = sum(
        s["estimated_seconds"] or 0.0
        for s in v["plan"]["steps"]
        if s["runs"] and s["name"] not in ("linear", "multilinear")
    )
    assert v["plan"]["second_fold_seconds"] < v["plan"]["budget_seconds"] - spent + 1e-3

    # Nothing left: the rule is told a second fold is not affordable, and none runs.
    made = plan_module.make
    monkeypatch.setattr(
        pipeline.plan,
        "make",
        lambda *a, **k: dataclasses.replace(made(*a, **k), second_fold_seconds=0.0),
    )
    asked.clear()
    one = run(config).json
    assert one["second_fold"] is None and asked == []
    assert (one["verdict"], one["margin"]) == ("kernel", "borderline")


@pytest.mark.slow
def test_the_second_fold_is_dropped_when_the_time_limit_passes(datasets, monkeypatch):
    from kcheck import pipeline
    from kcheck.errors import TimeLimitReached

    calls = []
    real = pipeline.run_until

    def until(deadline, fn, *args):
        calls.append(fn)
        if len(calls) == 2:  # the second fold's baseline
            raise TimeLimitReached()
        return real(None, fn, *args)

    monkeypatch.setattr(pipeline, "run_until", until)
    v = run(CheckConfig(train=str(datasets / "german.numer"), exact="never", time_limit=600)).json
    second = v["second_fold"]
    assert second["used"] is False and "time limit" in second["reason"]
    assert second["linear"] is None and second["checkers"]["degree2"]["gap"] is None
    # The verdict rests on the first fold: degree-2's gap of exactly epsilon.
    assert v["checkers"]["degree2"]["gap"] == pytest.approx(0.02)
    assert (v["verdict"], v["margin"]) == ("kernel", "borderline")


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    labels=st.lists(st.integers(0, 3), min_size=8, max_size=200),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_second_split_swaps_a_stratified_part_of_T_for_V(labels, seed):
    from kcheck.checkers.base import Dataset
    from kcheck.second_fold import second_split
    from kcheck.split import stratified_split

    y = np.asarray(labels, dtype=np.float64)
    n = y.size
    # Each row's only value is its own index, so a row is known wherever it goes.
    X = sp.csr_matrix((np.arange(n, dtype=np.float64) + 1, (np.arange(n), np.zeros(n))), (n, 1))
    t, v = stratified_split(y, seed=seed)
    if v.size == 0:
        return
    T, V = Dataset(X[t], y[t]), Dataset(X[v], y[v])
    T2, V2 = second_split(T, V, (t, v), seed)
    rows = lambda D: (D.X.toarray()[:, 0] - 1).astype(int)  # noqa: E731
    t2, v2 = rows(T2), rows(V2)
    # A partition of all rows; V2 lies in T, all of V is trained on; file order kept.
    assert sorted([*t2, *v2]) == list(range(n))
    assert set(v2) <= set(t) and set(v) <= set(t2)
    assert list(t2) == sorted(t2) and list(v2) == sorted(v2)
    assert np.array_equal(T2.y, y[t2]) and np.array_equal(V2.y, y[v2])
    # About V's size, class by class (a class of one row in T stays in T2).
    for c in np.unique(y):
        in_t = int(np.sum(y[t] == c))
        expect = 0 if in_t < 2 else min(int(np.floor(in_t * v.size / t.size + 0.5)), in_t - 1)
        assert int(np.sum(y[v2] == c)) == expect
    # Seeded: the same seed, the same split; the first split's seed is not reused as is.
    again = second_split(T, V, (t, v), seed)[1]
    assert np.array_equal(rows(again), v2)
