import math

import numpy as np
import pytest
import scipy.sparse as sp

from kcheck.checkers import linear, rff
from kcheck.checkers.base import CheckerResult, Dataset
from kcheck.split import stratified_split


def _run(T: Dataset, V: Dataset, options: rff.RffOptions) -> CheckerResult:
    """The checker on what its options size it to (:func:`kcheck.checkers.rff.plan_rows`)."""
    return rff.run(T, V, options, rff.plan_rows(T, options))


def rbf(A: np.ndarray, B: np.ndarray, gamma: float) -> np.ndarray:
    d = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    return np.exp(-gamma * d)


def split(X, y, seed=0):
    tr, va = stratified_split(y, seed=seed)
    X = sp.csr_matrix(X)
    return Dataset(X[tr], y[tr]), Dataset(X[va], y[va])


# The map


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("kind", ["orthogonal", "iid"])
def test_map_approximates_rbf_kernel(rng, monkeypatch, sparse, kind):
    if kind == "iid":
        monkeypatch.setattr(rff, "MAX_QR_FLOPS", 0)
    n = 40 if sparse else 6
    D = 20_000
    X = rng.normal(size=(30, n)) * 0.4
    if sparse:
        X[rng.random(X.shape) > 0.3] = 0.0
    gamma = 1.0 / rff.median_sq_distance(sp.csr_matrix(X), seed=0)
    fmap = rff.FourierMap.draw(n, D, gamma, seed=3)
    assert fmap.kind == kind
    Z = fmap.transform(sp.csr_matrix(X) if sparse else X)
    K = rbf(X, X, gamma)
    # Each entry is a mean of D bounded terms: error about 1/sqrt(D) = 0.007.
    assert np.max(np.abs(Z @ Z.T - K)) < 0.04
    assert np.mean(np.abs(Z @ Z.T - K)) < 0.01
    # The kernel values span a real range, so this is not a test of constants.
    assert K[np.triu_indices(30, 1)].min() < 0.3 < K[np.triu_indices(30, 1)].max()


def test_orthogonal_directions_have_gaussian_marginals(rng):
    n, D = 8, 4000
    G, b, kind = rff.draw_directions(n, D, seed=1)
    assert kind == "orthogonal" and G.shape == (n, D) and b.shape == (D,)
    # Within each block of n columns the directions are orthogonal.
    block = G[:, :n]
    gram = block.T @ block
    np.testing.assert_allclose(gram - np.diag(np.diag(gram)), 0.0, atol=1e-10)
    # Column lengths follow chi(n): squared lengths average n; entries are N(0, 1).
    assert abs(np.mean((G**2).sum(0)) - n) < 0.3
    assert abs(G.std() - 1.0) < 0.03
    assert 0.0 <= b.min() and b.max() < 2 * math.pi
    # Wider than D: one thin QR, columns still orthogonal.
    G2, _, _ = rff.draw_directions(50, 20, seed=1)
    gram2 = G2.T @ G2
    np.testing.assert_allclose(gram2 - np.diag(np.diag(gram2)), 0.0, atol=1e-10)


def test_block_generation_equals_one_shot(rng, monkeypatch):
    X = rng.normal(size=(53, 7))
    X[rng.random(X.shape) > 0.5] = 0.0
    Xs = sp.csr_matrix(X)
    fmap = rff.FourierMap.draw(7, 24, 0.3, seed=5)
    whole = fmap.transform(Xs)
    monkeypatch.setattr(rff, "BLOCK_BYTES", 8 * 24 * 5)  # blocks of 5 rows
    assert fmap.block_rows() == 5
    Z = fmap.transform_csr(Xs)
    assert Z.has_sorted_indices and Z.shape == (53, 24)
    assert np.array_equal(Z.toarray(), whole)
    # Dense and CSR input give the same map.
    assert np.array_equal(fmap.transform(X), whole)
    # A row's features do not depend on the order its indices are stored in.
    shuffled = Xs.copy()
    for r in range(Xs.shape[0]):
        a, c = Xs.indptr[r], Xs.indptr[r + 1]
        shuffled.indices[a:c] = Xs.indices[a:c][::-1]
        shuffled.data[a:c] = Xs.data[a:c][::-1]
    shuffled.has_sorted_indices = False
    np.testing.assert_allclose(fmap.transform(shuffled), whole, rtol=0, atol=1e-12)


def test_fewer_columns_than_training_are_padded(rng):
    fmap = rff.FourierMap.draw(6, 16, 0.5, seed=0)
    X = rng.normal(size=(4, 4))
    padded = np.hstack([X, np.zeros((4, 2))])
    np.testing.assert_allclose(fmap.transform(sp.csr_matrix(X)), fmap.transform(padded), atol=1e-12)


def test_median_heuristic_matches_brute_force_and_handles_duplicates(rng):
    X = rng.normal(size=(60, 9))
    X[rng.random(X.shape) > 0.4] = 0.0
    d = ((X[:, None] - X[None]) ** 2).sum(-1)[np.triu_indices(60, 1)]
    assert rff.median_sq_distance(sp.csr_matrix(X), seed=0) == pytest.approx(np.median(d))
    # A seeded sample of a larger X: same seed, same value.
    big = sp.random(5000, 30, density=0.1, format="csr", random_state=1)
    assert rff.median_sq_distance(big, seed=4) == rff.median_sq_distance(big, seed=4)
    # Mostly duplicate rows: the median of the positive distances.
    dup = np.zeros((20, 3))
    dup[-3:] = [1.0, 0, 0]
    assert rff.median_sq_distance(sp.csr_matrix(dup), seed=0) == pytest.approx(1.0)
    assert rff.median_sq_distance(sp.csr_matrix(np.ones((5, 2))), seed=0) == 1.0


# Planning


def test_plan_floor_for_small_data():
    opts = rff.RffOptions()
    p = rff.plan_counts(202, 13, 2_500, opts)
    assert (p.rows, p.features, p.reason, p.limited_by) == (202, rff.MIN_FEATURES, None, None)
    p = rff.plan_counts(9000, 5, 45_000, opts)  # wavy5d: the floor, 3,000 rows x 300
    assert (p.rows, p.features, p.limited_by) == (rff.MIN_ROWS, rff.MIN_FEATURES, "cost")


def test_plan_grows_with_the_work_of_the_linear_model():
    opts = rff.RffOptions()
    nnz = 16_000_000  # covtype-sized
    work = int(rff.COST_RATIO * nnz / 2)  # per candidate
    p = rff.plan_counts(400_000, 54, nnz, opts)
    assert work > rff.MIN_ROWS * rff.MIN_FEATURES
    assert p.features == math.isqrt(work // rff.ROWS_PER_FEATURE)
    assert p.rows * p.features <= work < (p.rows + 1) * p.features
    assert p.limited_by == "cost"
    huge = rff.RffOptions(memory_limit=2**50)
    p = rff.plan_counts(10**7, 50, 10**10, huge)  # D stops at the cap, rows keep growing
    assert p.features == rff.MAX_FEATURES
    assert p.rows == int(rff.COST_RATIO * 10**10 / 2) // rff.MAX_FEATURES
    p = rff.plan_counts(5_000, 2_000, 10**8, opts)  # all rows fit the work: D takes the rest
    assert p.rows == 5_000 and p.features == rff.MAX_FEATURES and p.limited_by is None


def test_plan_subsamples_or_skips_under_tiny_memory():
    D = rff.MIN_FEATURES
    fixed = 8 * 10 * D + rff.BLOCK_BYTES
    # Room for 2,000 rows of z(T): subsampled, by memory.
    opts = rff.RffOptions(memory_limit=fixed + 2_000 * D * rff.BYTES_PER_ENTRY)
    p = rff.plan_counts(9_000, 10, 90_000, opts)
    assert (p.rows, p.features, p.limited_by) == (2_000, D, "memory")
    # Room for 500 rows only: skipped with the reason.
    opts = rff.RffOptions(memory_limit=fixed + 500 * D * rff.BYTES_PER_ENTRY)
    p = rff.plan_counts(9_000, 10, 90_000, opts)
    assert p.rows == 0 and p.limited_by == "memory" and "fit the memory limit" in p.reason
    # ...but a T of 400 rows that all fit runs.
    p = rff.plan_counts(400, 10, 4_000, opts)
    assert p.reason is None and p.rows == 400


def test_plan_skips_when_the_directions_do_not_fit():
    # 2,000,000 features x 400 directions: 18 GiB while drawing; the limit is 8 GiB.
    p = rff.plan_counts(50_000, 2_000_000, 5_000_000, rff.RffOptions())
    assert p.rows == 0 and "random directions for 2,000,000 features" in p.reason
    # 200,000 features: D shrinks to fit a quarter of the limit, still above the floor.
    p = rff.plan_counts(50_000, 200_000, 20_000_000, rff.RffOptions())
    assert p.reason is None and p.limited_by == "memory"
    assert rff.MIN_FEATURES <= p.features < 500
    assert rff.direction_bytes(200_000, p.features) <= 2 * 2**30


def test_run_reports_skip_reason():
    X = np.random.default_rng(0).normal(size=(200, 4))
    T, V = split(X, np.where(X[:, 0] > 0, 1.0, -1.0))
    res = _run(T, V, rff.RffOptions(memory_limit=1000))
    assert res.status == "skipped" and res.name == "rff" and res.val_accuracy is None
    assert "memory limit" in res.reason


# The checker


def wavy(rng, rows):
    X = rng.uniform(-1, 1, size=(rows, 2))
    return X, np.where(X[:, 1] - 0.5 * np.sin(4 * X[:, 0]) > 0, 1.0, -1.0)


@pytest.mark.slow
def test_beats_linear_on_a_wavy_boundary():
    X, y = wavy(np.random.default_rng(7), 1600)
    T, V = split(X, y)
    base = linear.run(T, V, linear.LinearOptions())
    res = _run(T, V, rff.RffOptions())
    assert res.status == "ok" and res.info["rows"] == T.rows and res.info["fraction"] == 1.0
    assert res.val_accuracy - base.val_accuracy > 0.08
    assert res.val_accuracy > 0.95
    assert res.info["D"] == rff.MIN_FEATURES
    assert res.info["gamma"] == pytest.approx(
        res.info["gamma_multiple"] / res.info["median_sq_distance"]
    )
    assert set(res.info["cv_by_multiple"]) == {"1", "4"}
    assert res.cv_accuracy == max(res.info["cv_by_multiple"].values())
    # The predictor scores other data the same way (as --test does).
    assert np.array_equal(res.predict(V.X) == V.y, res.correct)


@pytest.mark.slow
def test_no_gap_on_linear_data():
    rng = np.random.default_rng(11)
    w = rng.normal(size=40)
    X = rng.normal(size=(2000, 40))
    y = np.where(X @ w + 0.3 * np.linalg.norm(w) * rng.normal(size=2000) > 0, 1.0, -1.0)
    T, V = split(X, y)
    base = linear.run(T, V, linear.LinearOptions())
    res = _run(T, V, rff.RffOptions())
    assert res.val_accuracy - base.val_accuracy < 0.02


def test_deterministic_and_seeded():
    X, y = wavy(np.random.default_rng(3), 400)
    T, V = split(X, y)
    opts = rff.RffOptions(min_features=60, min_rows=200)
    a, b = _run(T, V, opts), _run(T, V, opts)
    assert a.info == b.info and np.array_equal(a.correct, b.correct)
    assert a.status == "subsampled" and a.info["rows"] == 200
    c = _run(T, V, rff.RffOptions(seed=1, min_features=60, min_rows=200))
    assert c.info["median_sq_distance"] == a.info["median_sq_distance"]  # < 1,000 rows: all
    g0, _, _ = rff.draw_directions(2, 60, seed=0)
    g1, _, _ = rff.draw_directions(2, 60, seed=1)
    assert not np.array_equal(g0, g1)


def test_multiclass_and_unsorted_input():
    rng = np.random.default_rng(5)
    centers = np.array([[0.0, 0.0], [1.0, 1.0], [1.0, -1.0]])
    y = np.repeat([1.0, 2.0, 3.0], 150)
    X = centers[(y - 1).astype(int)] + 0.3 * rng.normal(size=(450, 2))
    T, V = split(X, y)
    # Reverse the stored order of each of V's rows; the caller's arrays must stay as given.
    Vx = V.X.copy()
    for r in range(Vx.shape[0]):
        a, c = Vx.indptr[r], Vx.indptr[r + 1]
        Vx.indices[a:c] = Vx.indices[a:c][::-1]
        Vx.data[a:c] = Vx.data[a:c][::-1]
    Vx.has_sorted_indices = False
    before = Vx.indices.copy()
    res = _run(T, Dataset(Vx, V.y), rff.RffOptions(min_features=100, min_rows=400))
    assert np.array_equal(Vx.indices, before)
    assert res.val_accuracy > 0.9
    assert set(np.unique(res.predict(V.X))) <= {1.0, 2.0, 3.0}
