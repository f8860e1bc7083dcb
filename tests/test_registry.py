"""The checker registry (kcheck/checkers/registry.py): one entry per checker, and every entry
obeys the contract of kcheck/checkers/base.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import DATASETS, make_context, planned

from kcheck import defaults, pipeline
from kcheck.checkers import linear, registry
from kcheck.checkers.base import CheckerResult, Context, Dataset
from kcheck.config import CHECKERS, DEFAULT_CHECKERS, CheckConfig
from kcheck.costs import budget
from kcheck.split import stratified_split
from kcheck.verdict import decide

#: Labels that are not -1/+1, so that predicting "the other label" cannot pass by accident.
LOW, HIGH = 2.0, 5.0


@pytest.fixture(scope="module")
def full_check() -> pipeline.CheckReport:
    """heart_scale with every checker and the exact comparison."""
    config = CheckConfig(
        train=str(DATASETS / "heart_scale"), checkers=registry.NAMES, exact="always"
    )
    return pipeline.run(config)


@pytest.fixture(scope="module")
def separable() -> tuple[Dataset, Dataset, Context, float]:
    """A linearly separable 5-feature set with a margin, split 3:1, a context for it and the
    counted budget its checkers are sized within."""
    rng = np.random.default_rng(12345)
    X = rng.normal(size=(400, 5))
    s = X @ np.array([1.0, -2.0, 0.5, 0.0, 1.0]) + 0.3
    keep = np.abs(s) > 0.5
    X, s = X[keep], s[keep]
    X /= np.abs(X).max(axis=0)
    y = np.where(s > 0, HIGH, LOW)
    train, val = stratified_split(y, seed=0)
    T = Dataset(sp.csr_matrix(X[train]), y[train])
    V = Dataset(sp.csr_matrix(X[val]), y[val])
    base = linear.run(T, V, linear.LinearOptions(seed=0))
    # Small data's floor of counted work, and the stand-in's budget from it, as the plan gives
    # them where exact mode does not run: without them rbfsvm (like degree-2 on a wider set)
    # may be over its relative budget.
    first = budget.FIRST_SHARE * budget.FLOOR_SECONDS
    return T, V, make_context(baseline=base), first


@pytest.fixture(scope="module")
def runs(separable) -> dict[str, tuple[CheckerResult, CheckerResult]]:
    """Each checker on V, and on V with every label flipped."""
    T, V, ctx, first = separable
    flipped = Dataset(V.X, np.where(V.y == HIGH, LOW, HIGH))
    sized = {name: planned(name, T, V, first) for name in registry.CHECKERS}
    return {
        name: (spec.run(T, V, ctx, sized[name]), spec.run(T, flipped, ctx, sized[name]))
        for name, spec in registry.CHECKERS.items()
    }


# --- the table ------------------------------------------------------------------------------------


def test_every_name_has_a_spec() -> None:
    assert set(registry.NAMES) == set(registry.CHECKERS)
    assert len(registry.NAMES) == len(set(registry.NAMES))
    for name, spec in registry.CHECKERS.items():
        assert spec.name == name
        assert callable(spec.run)
        assert spec.summary and "\n" not in spec.summary
        assert spec.table and all(isinstance(p, registry.Param) for p in spec.table)
        assert spec.words and spec.colour.startswith("#") and spec.blank


def test_defaults_are_degree2_multilinear_and_rbfsvm() -> None:
    assert registry.DEFAULT_NAMES == ("degree2", "multilinear", "rbfsvm")
    assert DEFAULT_CHECKERS == registry.DEFAULT_NAMES == defaults.DEFAULT_CHECKERS
    assert registry.NAMES == defaults.CHECKER_NAMES
    assert CHECKERS == registry.NAMES
    assert not registry.CHECKERS["rff"].default


def test_the_registry_gives_each_method_its_role_in_the_rule() -> None:
    assert registry.role(registry.EXACT.name) == "deciding"
    assert registry.role("rbfsvm") == "stand-in"
    assert {registry.role(n) for n in registry.CHECKERS if n != "rbfsvm"} == {"proxy"}
    assert registry.EXACT.name == "rbf"
    assert registry.EXACT.name not in registry.CHECKERS  # not a --checkers choice


def test_table_keys() -> None:
    for name, spec in registry.CHECKERS.items():
        assert registry.table_keys(name) == tuple((p.label, p.key) for p in spec.table)
    exact = registry.EXACT.table
    assert registry.table_keys(registry.EXACT.name) == tuple((p.label, p.key) for p in exact)
    assert registry.table_keys("no-such-checker") == ()


def test_table_keys_are_in_each_checkers_real_json(full_check) -> None:
    checkers = full_check.json["checkers"]
    # Where the exact comparison ran, rbfsvm (the same model on one split) does not.
    assert set(checkers) == {*registry.NAMES, registry.EXACT.name} - {"rbfsvm"}
    for name, block in checkers.items():
        assert block["status"] != "skipped", block["reason"]
        for label, key in registry.table_keys(name):
            assert label
            assert key in block, f"{name}: the table shows {key!r}, which its JSON lacks"
            assert block[key] is not None


def test_where_the_exact_comparison_ran_it_alone_decides(full_check) -> None:
    result = full_check.result
    assert result.exact["ran"] is True
    _, rbf_gap = result.checkers[registry.EXACT.name]
    assert rbf_gap is not None
    alone = decide({registry.EXACT.name: rbf_gap}, result.epsilon)
    assert result.verdict == alone.verdict
    assert result.decision.deciding in (None, registry.EXACT.name)


# --- the contract ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", registry.NAMES)
def test_run_returns_a_result_named_like_the_spec(runs, name: str) -> None:
    r, _ = runs[name]
    assert isinstance(r, CheckerResult)
    assert r.name == name
    assert r.status in ("ok", "subsampled"), r.reason


@pytest.mark.parametrize("name", registry.NAMES)
def test_one_result_per_row_of_V(runs, separable, name: str) -> None:
    _, V, _, _ = separable
    r, _ = runs[name]
    assert r.correct is not None and r.correct.shape == (V.rows,)
    assert r.predicted is not None and r.predicted.shape == (V.rows,)
    np.testing.assert_array_equal(r.correct, r.predicted == V.y)
    assert r.val_accuracy == pytest.approx(float(np.mean(r.correct)))
    if r.scores is not None:
        assert r.scores.shape[0] == V.rows


@pytest.mark.parametrize("name", registry.NAMES)
def test_predicted_labels_are_among_T_labels(runs, separable, name: str) -> None:
    T, V, _, _ = separable
    r, _ = runs[name]
    assert set(np.unique(r.predicted)) <= set(np.unique(T.y))
    # Its predictor does the same on any rows, V's labels unseen.
    assert r.predict is not None
    np.testing.assert_array_equal(r.predict(V.X), r.predicted)
    assert set(np.unique(r.predict(T.X))) <= {LOW, HIGH}


@pytest.mark.parametrize("name", registry.NAMES)
def test_trains_on_T_only(runs, name: str) -> None:
    # A separable set: trained on T, a checker is nearly always right on V; had it trained on
    # V's flipped labels, it would be right on the flipped V instead.
    r, flipped = runs[name]
    assert r.val_accuracy > 0.9
    assert flipped.val_accuracy < 0.5
    np.testing.assert_array_equal(flipped.predicted, r.predicted)


@pytest.mark.parametrize("name", registry.NAMES)
def test_unseen_labels_in_V_are_never_predicted(separable, name: str) -> None:
    T, V, ctx, first = separable
    unseen = Dataset(V.X, np.full(V.rows, 7.0))
    r = registry.CHECKERS[name].run(T, unseen, ctx, planned(name, T, V, first))
    assert r.val_accuracy == 0.0
    assert set(np.unique(r.predicted)) <= {LOW, HIGH}


def test_checkers_report_their_table_fields(runs) -> None:
    for name, (r, _) in runs.items():
        info: dict[str, Any] = r.info
        for _, key in registry.table_keys(name):
            assert key in info, f"{name} does not report {key!r}"


def test_the_words_colours_and_explained_checker_come_from_the_registry() -> None:
    """The table's words, the report's colours and --explain's checker are the registry's."""
    from kcheck.checkers import degree2
    from kcheck.cli import render
    from kcheck.reports import html as report
    from kcheck.terms import explain

    methods = registry.methods()
    assert methods == (*registry.NAMES, registry.EXACT.name)
    assert list(report.colours()) == list(methods)
    colours = [registry.spec(n).colour for n in methods]  # type: ignore[union-attr]
    assert len(set(colours)) == len(colours)
    assert list(render.NAMES) == ["linear", *methods]
    for name in methods:
        assert render.NAMES[name] == registry.words(name)
    assert render.NAMES["linear"] == "linear"
    assert registry.CHECKERS[registry.EXPLAINED].run is degree2.check
    assert explain.registry is registry


def test_the_parameter_cell_follows_the_table() -> None:
    from kcheck.cli.render import _param

    assert _param("multilinear", {"clusters": 12}) == "K=12"
    assert _param("multilinear", {"status": "skipped"}) == "K=-"
    assert _param("rff", {"D": 300, "gamma": 0.5}) == "D=300 g=2^-1"
    assert _param("rff", {"status": "skipped"}) == "-"
    assert _param("rbfsvm", {"C": 8.0, "gamma": 0.125}) == "C=2^3 g=2^-3"
    assert _param("rbf", {"C": 2.0, "gamma": None}) == "C=2^1"
    assert _param("degree2", {"C": 4.0}) == "C=2^2"
    assert _param("no-such-checker", {"C": 1.0}) == "C=2^0"
    assert _param("no-such-checker", {}) == "-"
