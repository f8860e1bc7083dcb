"""The mixlinear checker (kcheck/checkers/mixlinear.py): a mixture of linear SVMs fitted by hard
EM from MultiLinear's partition, on real LIBLINEAR."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import DATASETS, ROOT
from runner import run_kcheck

from kcheck.checkers import linear, registry
from kcheck.checkers import mixlinear as mx
from kcheck.checkers.base import Allowance, Counts, Dataset
from kcheck.errors import TimeLimitReached
from kcheck.split import stratified_split


def _xor(rows: int = 1600, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """Four quadrants, opposite ones sharing a label."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(rows, 2))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    return X, y


def _split(X: np.ndarray, y: np.ndarray, dense: bool = False) -> tuple[Dataset, Dataset]:
    train, val = stratified_split(y, seed=0)
    if dense:
        return Dataset(X[train], y[train]), Dataset(X[val], y[val])
    return Dataset(sp.csr_matrix(X[train]), y[train]), Dataset(sp.csr_matrix(X[val]), y[val])


@pytest.fixture(scope="module")
def xor() -> tuple[Dataset, Dataset]:
    return _split(*_xor())


def test_xor_quadrants_are_found_with_four_experts(xor) -> None:
    T, V = xor
    base = linear.run(T, V, linear.LinearOptions(seed=0))
    model, assign, _ = mx.fit(T, mx.MixLinearOptions(seed=0, n_experts=4))
    assert len(model.experts) == 4
    # One center in each quadrant, and each expert's rows almost all in its quadrant.
    quadrant = lambda Z: (np.asarray(Z)[:, 0] > 0) * 2 + (np.asarray(Z)[:, 1] > 0)  # noqa: E731
    assert sorted(quadrant(model.centers)) == [0, 1, 2, 3]
    rows_q = quadrant(T.X.toarray())
    for k in range(4):
        own = rows_q[assign == k]
        assert np.mean(own == np.bincount(own).argmax()) > 0.9
    r = mx.run(T, V, mx.MixLinearOptions(seed=0, n_experts=4))
    assert base.val_accuracy is not None and base.val_accuracy < 0.65
    assert r.val_accuracy is not None and r.val_accuracy > 0.95


def test_hard_em_reaches_a_fixed_point(xor) -> None:
    T, _ = xor
    _, _, trace = mx.fit(T, mx.MixLinearOptions(seed=0, n_experts=4, rounds=20))
    assert trace.changed[-1] == 0, trace.changed
    assert len(trace.changed) < 20


def test_each_expert_trains_on_the_rows_the_gate_sends_it(xor) -> None:
    # The final experts are trained on the gate's routing of T, as prediction routes rows.
    T, _ = xor
    model, assign, _ = mx.fit(T, mx.MixLinearOptions(seed=0, n_experts=4))
    np.testing.assert_array_equal(model.gate(T.X), assign)
    for k, expert in enumerate(model.experts):
        assert expert.rows == np.count_nonzero(assign == k)


def test_pruning_leaves_at_least_one_expert(xor, monkeypatch: pytest.MonkeyPatch) -> None:
    T, V = xor
    # A threshold above every share: all would go, the largest stays.
    monkeypatch.setattr(mx, "MIN_EXPERT_ROWS", 10 * T.rows)
    r = mx.run(T, V, mx.MixLinearOptions(seed=0, n_experts=4))
    assert r.info["experts"] == 1
    assert r.info["pruned"] == 3
    assert r.predicted is not None and set(np.unique(r.predicted)) <= {-1.0, 1.0}


def test_small_experts_are_pruned(xor, monkeypatch: pytest.MonkeyPatch) -> None:
    T, V = xor
    monkeypatch.setattr(mx, "MIN_EXPERT_ROWS", T.rows // 3)  # about a third of T
    r = mx.run(T, V, mx.MixLinearOptions(seed=0, n_experts=8))
    assert 1 <= r.info["experts"] < 8
    assert r.info["pruned"] == r.info["initial_experts"] - r.info["experts"]


def test_dense_and_sparse_input_agree() -> None:
    X, y = _xor(600, seed=3)
    Ts, Vs = _split(X, y)
    Td, Vd = _split(X, y, dense=True)
    a = mx.run(Ts, Vs, mx.MixLinearOptions(seed=1, n_experts=4))
    b = mx.run(Td, Vd, mx.MixLinearOptions(seed=1, n_experts=4))
    np.testing.assert_array_equal(a.predicted, b.predicted)
    assert a.info == b.info


def test_deterministic_for_a_seed(xor) -> None:
    T, V = xor
    a = mx.run(T, V, mx.MixLinearOptions(seed=5))
    b = mx.run(T, V, mx.MixLinearOptions(seed=5))
    np.testing.assert_array_equal(a.predicted, b.predicted)
    assert a.info == b.info
    assert a.predict is not None
    np.testing.assert_array_equal(a.predict(V.X), a.predicted)


def test_several_classes_and_calibrated_scores() -> None:
    rng = np.random.default_rng(2)
    means = np.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.5]])
    y = rng.integers(0, 3, size=900).astype(float)
    X = means[y.astype(int)] + rng.normal(size=(900, 2))
    X /= np.abs(X).max(axis=0)
    T, V = _split(X, y)
    r = mx.run(T, V, mx.MixLinearOptions(seed=0))
    assert r.val_accuracy is not None and r.val_accuracy > 0.85
    Tb, Vb = _split(*_xor(600, seed=4))
    c = mx.run(Tb, Vb, mx.MixLinearOptions(seed=0, n_experts=4, calibrate=True))
    assert c.scores is not None and c.scores.shape == (Vb.rows,)
    assert np.all((c.scores >= 0) & (c.scores <= 1))


def test_a_passed_deadline_stops_training(xor) -> None:
    T, V = xor
    with pytest.raises(TimeLimitReached):
        mx.run(T, V, mx.MixLinearOptions(deadline=time.perf_counter() - 1.0))


def test_rounds_and_size_come_from_counts() -> None:
    assert mx.n_rounds(1000) == mx.N_ROUNDS
    assert mx.n_rounds(mx.ROUNDS_MAX_NNZ + 1) == mx.N_ROUNDS_LARGE
    counts = Counts(
        rows=1000, val_rows=330, nnz=20_000, val_nnz=6600, n_classes=2, features=20,
        data_bytes=300_000,
    )  # fmt: skip
    sized = mx.size(counts, Allowance(2**30))
    assert sized.rows == 1000 and sized.reason is None
    assert sized.bytes is not None and sized.bytes > 0
    assert sized.estimated_seconds is not None and sized.estimated_seconds > 0
    assert sized.counted_seconds == 0.0


def test_registered_opt_in_as_a_proxy() -> None:
    spec = registry.CHECKERS["mixlinear"]
    assert spec.run is mx.check and spec.size is mx.size
    assert not spec.default and spec.role == "proxy"
    assert "mixlinear" in registry.NAMES and "mixlinear" not in registry.DEFAULT_NAMES


def test_the_command_shows_it_in_json_and_table() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    args = ["check", str(DATASETS / "heart_scale"), "--checkers", "multilinear,mixlinear"]
    r = run_kcheck([*args, "--exact", "never"], timeout=300)
    assert r.code == 0, r.describe()
    out = r.json
    block = out["checkers"]["mixlinear"]
    assert block["status"] == "ok", block
    assert block["experts"] >= 1 and block["gap"] is not None
    assert set(out["checkers"]) == {"multilinear", "mixlinear"}
    schema = json.loads((ROOT / "kcheck" / "schema" / "check.schema.json").read_text())
    jsonschema.validate(out, schema)
    # Off a terminal the table goes to stderr, the JSON to stdout.
    row = [x for x in r.stderr.splitlines() if x.startswith("mixlinear ")]
    assert row and f"K={block['experts']}" in row[0], r.stderr
