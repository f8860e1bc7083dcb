"""Kernel Factory (kcheck/checkers/kfactory.py): burn-in's kernel, the partitions, the plan's
sizing obeyed, and the same block for the same seed, on real LIBLINEAR."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import make_context, planned

from kcheck.checkers import kfactory
from kcheck.checkers.base import Counts, Dataset
from kcheck.split import stratified_split


def _split(X: np.ndarray, y: np.ndarray, *, sparse: bool = False) -> tuple[Dataset, Dataset]:
    train, val = stratified_split(y, seed=0)
    A = sp.csr_matrix(X)
    if sparse:
        A.eliminate_zeros()
    return Dataset(A[train], y[train]), Dataset(A[val], y[val])


def _disc(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 2))
    return X, np.where((X**2).sum(axis=1) < 0.5, 1.0, -1.0)


def _checkerboard(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 2))
    return X, np.where(np.floor(2 * X[:, 0]) % 2 == np.floor(2 * X[:, 1]) % 2, 1.0, -1.0)


def _linear(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 5))
    return X, np.where(X @ np.array([1.0, -1.0, 0.5, 0.0, 0.3]) > 0, 1.0, -1.0)


def _burn_in(X: np.ndarray, y: np.ndarray) -> str:
    P = sp.csr_matrix(X)
    gamma = kfactory._gamma(P)
    kernel, accuracy = kfactory.burn_in(P, y, gamma, seed=0)
    assert set(accuracy) == set(kfactory.KERNELS)
    return kernel


def test_burn_in_picks_a_nonlinear_kernel_on_a_disc_rbf_on_a_checkerboard_linear_on_a_line():
    assert _burn_in(*_disc(600)) in ("poly2", "rbf")
    assert _burn_in(*_checkerboard(900)) == "rbf"
    assert _burn_in(*_linear(600)) == "linear"


def test_partitions_are_disjoint_stratified_and_cover_the_rows():
    y = np.repeat([1.0, 2.0, 3.0], [50, 70, 31])
    parts = kfactory.partitions(y, 3, seed=4)
    rows = np.concatenate(parts)
    assert np.array_equal(np.sort(rows), np.arange(y.size))
    for p in parts:
        assert set(np.unique(y[p])) == {1.0, 2.0, 3.0}
    assert max(p.size for p in parts) - min(p.size for p in parts) <= 1


def test_a_disc_is_kernel_and_the_check_obeys_the_plans_partitions():
    T, V = _split(*_disc(2_000))
    sized = planned(kfactory.NAME, T, V, budget_seconds=1e6)
    p = sized.sizing
    assert isinstance(p, kfactory.KFactorySizing) and p.limited_by is None
    assert p.partitions == kfactory.n_partitions(T.rows) == 3
    r = kfactory.check(T, V, make_context(), sized)
    assert r.status == "ok" and r.info["partitions"] == 3 and r.info["rows"] == T.rows
    assert r.info["kernel"] in ("poly2", "rbf")
    assert r.val_accuracy is not None and r.val_accuracy > 0.9
    # What the plan says, it trains on: two partitions of 200 rows, against a linear model on
    # the same 400 rows.
    cut = kfactory.KFactorySizing(2, 200, None, "cost")
    small = kfactory.run(T, V, cut, seed=0)
    assert small.status == "subsampled" and small.info["partitions"] == 2
    assert small.info["rows"] == 400 and small.info["reference"]["rows"] == 400


def test_dense_and_sparse_rows_give_the_same_block_and_the_same_seed_the_same_again():
    X, y = _checkerboard(800, seed=2)
    X[np.abs(X) < 0.2] = 0.0
    dense_T, dense_V = _split(X, y)
    sparse_T, sparse_V = _split(X, y, sparse=True)
    assert sparse_T.X.nnz < dense_T.X.shape[0] * dense_T.X.shape[1]
    sizing = kfactory.KFactorySizing(2, 300, None, None)
    a = kfactory.run(dense_T, dense_V, sizing, seed=3)
    b = kfactory.run(sparse_T, sparse_V, sizing, seed=3)
    again = kfactory.run(dense_T, dense_V, sizing, seed=3)
    assert a.info == b.info == again.info
    np.testing.assert_array_equal(a.predicted, b.predicted)
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(a.predicted, again.predicted)


def test_three_classes_are_scored_in_one_order_whatever_order_a_partition_met_them():
    rng = np.random.default_rng(5)
    centers = np.array([[0.0, 0.8], [-0.7, -0.4], [0.7, -0.4]])
    y = np.repeat([3.0, 1.0, 2.0], 200)
    X = centers[(y - 1).astype(int)] + 0.25 * rng.normal(size=(600, 2))
    T, V = _split(X, y)
    r = kfactory.run(T, V, kfactory.KFactorySizing(3, T.rows // 3, None, None), seed=0)
    assert set(np.unique(r.predicted)) <= {1.0, 2.0, 3.0}
    assert r.val_accuracy is not None and r.val_accuracy > 0.9
    assert r.scores is None  # per-point scores are for two classes only


def test_a_memory_limit_below_one_partition_skips_it_with_the_reason_before_allocating():
    T, V = _split(*_disc(1_000))
    tiny = kfactory.memory_bytes(kfactory.MIN_PARTITION_ROWS, V.rows) - 1
    sized = planned(kfactory.NAME, T, V, budget_seconds=1e6, memory_limit=tiny)
    assert sized.rows == 0 and sized.limited_by == "memory"
    assert sized.reason is not None and "memory limit" in sized.reason
    r = kfactory.check(T, V, make_context(memory_limit=tiny), sized)
    assert r.status == "skipped" and r.reason == sized.reason


def test_its_rows_shrink_to_the_budget_and_its_count_follows_them():
    c = Counts(rows=60_000, val_rows=20_000, nnz=600_000, val_nnz=200_000, n_classes=2, features=10)
    roomy = kfactory.plan_counts(c, 1e9, 8 * 2**30)
    assert roomy.partitions == 5 and roomy.rows == kfactory.MAX_PARTITION_ROWS
    assert roomy.limited_by == "cost"
    seconds = kfactory.counted_seconds(5, 600, c.val_rows, 2, 10.0)
    tight = kfactory.plan_counts(c, seconds, 8 * 2**30)
    assert tight.rows == 600 or (
        kfactory.counted_seconds(5, tight.rows, c.val_rows, 2, 10.0)
        <= seconds
        < kfactory.counted_seconds(5, tight.rows + 1, c.val_rows, 2, 10.0)
    )
    none = kfactory.plan_counts(c, 1e-6, 8 * 2**30)
    assert none.partitions == 0 and none.limited_by == "cost" and none.reason


@pytest.mark.parametrize("n", [10, 99, 100, 5_000, 10**6])
def test_the_partitions_are_the_r_packages_round_log10_n(n: int) -> None:
    assert kfactory.n_partitions(n) == max(1, round(np.log10(n)))


@pytest.mark.parametrize("classes", [2, 3])
def test_members_that_met_the_labels_in_another_order_score_in_one_order(classes: int) -> None:
    """LIBLINEAR orders a model's labels as its rows first showed them: the same rows in
    another order give the same model with its labels (and decision columns) swapped. An
    ensemble of the two must predict as either alone, not cancel out."""
    rng = np.random.default_rng(1)
    centers = np.array([[0.0, 0.9], [-0.8, -0.5], [0.8, -0.5]])[:classes]
    y = np.repeat(np.arange(1.0, classes + 1), 150)
    X = sp.csr_matrix(centers[(y - 1).astype(int)] + 0.3 * rng.normal(size=(y.size, 2)))
    first, last = np.argsort(y, kind="stable"), np.argsort(-y, kind="stable")
    a = kfactory._member(X[first], y[first], "rbf", 1.0, 0, None)
    b = kfactory._member(X[last], y[last], "rbf", 1.0, 0, None)
    assert not np.array_equal(a.model.labels, b.model.labels)
    alone = kfactory.Ensemble([a], np.unique(y)).predict(X)
    both = kfactory.Ensemble([a, b], np.unique(y)).predict(X)
    np.testing.assert_array_equal(both, alone)
    assert np.mean(alone == y) > 0.9
