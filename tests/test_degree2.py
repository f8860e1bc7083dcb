import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from kcheck.checkers import degree2
from kcheck.checkers.base import Dataset


def phi_direct(x: np.ndarray) -> np.ndarray:
    """The expansion written out term by term, as the formula reads."""
    n = x.size
    out = [math.sqrt(2) * x[i] for i in range(n)]
    for i in range(n):
        for j in range(i, n):
            out.append(x[i] * x[j] * (1.0 if i == j else math.sqrt(2)))
    return np.array(out)


def random_matrix(rng, rows, cols, density):
    D = rng.normal(size=(rows, cols))
    D[rng.random((rows, cols)) > density] = 0.0
    return D


@pytest.mark.parametrize("sparse", [False, True])
def test_expansion_matches_formula(rng, sparse):
    D = random_matrix(rng, 9, 6, 0.5)
    X = sp.csr_matrix(D) if sparse else D
    E = degree2.expand(X)
    assert E.shape == (9, degree2.expanded_dimension(6))
    np.testing.assert_allclose(E.toarray(), np.array([phi_direct(r) for r in D]), rtol=1e-12)


def test_expansion_reproduces_polynomial_kernel(rng):
    D = random_matrix(rng, 7, 5, 0.7)
    E = degree2.expand(sp.csr_matrix(D))
    np.testing.assert_allclose((E @ E.T).toarray() + 1.0, (1.0 + D @ D.T) ** 2, rtol=1e-10)


def test_expansion_independent_of_stored_index_order(rng):
    D = random_matrix(rng, 20, 8, 0.6)
    X = sp.csr_matrix(D)
    # Reverse the stored order inside every row; scipy's flag then says "unsorted".
    shuffled = X.copy()
    for r in range(X.shape[0]):
        a, b = X.indptr[r], X.indptr[r + 1]
        shuffled.indices[a:b] = X.indices[a:b][::-1]
        shuffled.data[a:b] = X.data[a:b][::-1]
    shuffled.has_sorted_indices = False
    E1, E2 = degree2.expand(X), degree2.expand(shuffled)
    assert (E1 != E2).nnz == 0
    # The caller's arrays are left as they were.
    assert np.array_equal(
        shuffled.indices[X.indptr[0] : X.indptr[1]], X.indices[X.indptr[0] : X.indptr[1]][::-1]
    )


def test_expansion_output_is_sorted_and_has_exact_nnz(rng):
    X = sp.csr_matrix(random_matrix(rng, 30, 12, 0.3))
    E = degree2.expand(X)
    assert E.nnz == int(degree2.row_expanded_nnz(X).sum())
    for r in range(E.shape[0]):
        cols = E.indices[E.indptr[r] : E.indptr[r + 1]]
        assert np.all(np.diff(cols) > 0)


def test_chunking_gives_same_result(rng):
    X = sp.csr_matrix(random_matrix(rng, 50, 10, 0.4))
    full = degree2.expand(X)
    chunked = degree2.expand(X, chunk_nnz=7)
    assert (full != chunked).nnz == 0


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40))
def test_dimension_formula(n):
    x = np.arange(1, n + 1, dtype=float)
    E = degree2.expand(x[None, :])
    assert E.shape[1] == degree2.expanded_dimension(n) == n + n * (n + 1) // 2
    assert E.nnz == n + n * (n + 1) // 2


def test_plan_skips_when_weights_cannot_fit():
    X = sp.csr_matrix((np.ones(3), ([0, 1, 2], [0, 1, 1_299_999])), shape=(3, 1_300_000))
    T = Dataset(X, np.array([1.0, -1.0, 1.0]))
    plan = degree2.plan_rows(T, 2, degree2.Degree2Options(memory_limit=8 * 2**30))
    assert plan.rows == 0 and plan.reason is not None and "weight" in plan.reason


def test_plan_subsamples_to_fit_memory(rng):
    D = random_matrix(rng, 4000, 40, 1.0)
    T = Dataset(sp.csr_matrix(D), np.tile([1.0, -1.0], 2000))
    per_row = 40 + 40 * 41 // 2
    weights = degree2.WEIGHT_VECTORS * 8 * (degree2.expanded_dimension(40) + 1)
    row_bytes = per_row * degree2.BYTES_PER_NNZ + degree2.BYTES_PER_ROW
    # 2,500 rows and a chunk of a quarter of what the weights leave: the rows take the rest.
    limit = weights + 2500 * row_bytes * 4 // 3 + 4 * degree2.CHUNK_BYTES_PER_NNZ
    plan = degree2.plan_rows(T, 2, degree2.Degree2Options(memory_limit=limit))
    assert plan.reason is None and plan.rows == 2500 and plan.limited_by == "memory"
    # The expansion's chunk comes out of the same limit, so the whole plan stays within it.
    assert plan.chunk_nnz == (limit - weights) // 4 // degree2.CHUNK_BYTES_PER_NNZ
    assert plan.bytes <= limit
    plan = degree2.plan_rows(T, 2, degree2.Degree2Options(memory_limit=weights + 10))
    assert plan.rows == 0 and "memory limit" in plan.reason


def test_plan_subsamples_to_fit_time_budget(rng):
    D = random_matrix(rng, 4000, 20, 1.0)
    T = Dataset(sp.csr_matrix(D), np.tile([1.0, -1.0], 2000))
    per_row = 20 + 20 * 21 // 2
    assert per_row * 4000 > degree2.FREE_NNZ
    # At 1 microsecond per linear nonzero, a degree-2 row costs RATIO * 230 microseconds.
    row_seconds = degree2.TIME_PER_NNZ_RATIO * 1e-6 * per_row
    opts = degree2.Degree2Options(time_budget=1500 * row_seconds * 1.0001, seconds_per_nnz=1e-6)
    plan = degree2.plan_rows(T, 2, opts)
    assert (plan.rows, plan.limited_by, plan.reason) == (1500, "time", None)
    opts = degree2.Degree2Options(time_budget=10 * row_seconds, seconds_per_nnz=1e-6)
    plan = degree2.plan_rows(T, 2, opts)
    assert plan.rows == 0 and "time left" in plan.reason
    # A budget that covers all rows leaves T whole.
    opts = degree2.Degree2Options(time_budget=1e6, seconds_per_nnz=1e-6)
    assert degree2.plan_rows(T, 2, opts) == degree2.Degree2Sizing(4000, None, None)


def test_plan_caps_rows_by_cost_deterministically(rng):
    D = random_matrix(rng, 4000, 20, 1.0)
    T = Dataset(sp.csr_matrix(D), np.tile([1.0, -1.0], 2000))
    per_row = 20 + 20 * 21 // 2
    plan = degree2.plan_rows(T, 2, degree2.Degree2Options(max_cost_nnz=1500 * per_row))
    assert (plan.rows, plan.limited_by) == (1500, "cost")
    plan = degree2.plan_rows(T, 2, degree2.Degree2Options(max_cost_nnz=10 * per_row))
    assert plan.rows == 0 and f"cost budget of {10 * per_row:,}" in plan.reason


def test_a_budget_the_methods_before_it_used_is_the_reason_it_gave(rng):
    """madelon: exact mode and MultiLinear used the first measurement's budget, and the skip
    read "only 0 rows of the expansion ... fit the cost budget of 0 expanded values"."""
    T = Dataset(sp.csr_matrix(random_matrix(rng, 4000, 20, 1.0)), np.tile([1.0, -1.0], 2000))
    plan = degree2.plan_rows(T, 2, degree2.Degree2Options(budget_seconds=0.0))
    assert (plan.rows, plan.limited_by) == (0, "cost")
    assert plan.reason == "the methods planned before it used all of their budget"
    # Some budget left, too little for the least sample: the count says so.
    plan = degree2.plan_rows(T, 2, degree2.Degree2Options(budget_seconds=1e-4))
    assert plan.rows == 0 and "fit the cost budget of" in plan.reason


def test_small_expansion_ignores_the_cost_budget(rng):
    T = Dataset(sp.csr_matrix(random_matrix(rng, 500, 10, 1.0)), np.tile([1.0, -1.0], 250))
    opts = degree2.Degree2Options(max_cost_nnz=1)
    assert degree2.plan_rows(T, 2, opts).rows == 500
    # ... but not when one-vs-rest multiplies it: 500 classes would train 500 models.
    assert degree2.plan_rows(T, 500, opts).rows == 0


def test_run_reports_subsample(rng):
    D = random_matrix(rng, 3000, 6, 1.0)
    y = np.where(D[:, 0] * D[:, 1] > 0, 1.0, -1.0)
    T, V = Dataset(sp.csr_matrix(D[:2400]), y[:2400]), Dataset(sp.csr_matrix(D[2400:]), y[2400:])
    per_row = 6 + 21
    opts = degree2.Degree2Options(max_nnz=1200 * per_row)
    res = degree2.run(T, V, opts, degree2.plan_rows(T, 2, opts))
    assert res.status == "subsampled"
    assert res.info["fraction"] == pytest.approx(0.5, abs=0.01)
    # x0*x1 is one feature of phi: the degree-2 model must find the XOR-like sign rule.
    assert res.val_accuracy > 0.9
    # The gap's reference is a linear model on the same rows, which cannot.
    ref = res.info["reference"]
    assert ref["rows"] == res.info["rows"] and ref["val_accuracy"] < 0.7
    assert res.reference_correct is not None and res.reference_correct.mean() == pytest.approx(
        ref["val_accuracy"]
    )
    # The JSON keeps the block's order (the writer does not sort): the reference comes second.
    assert list(res.info)[:3] == ["dimension", "reference", "shifted_features"]


# --- the shift of features stored in every row ---------------------------------------------------


def offset_data(rows: int, offset: float, seed: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """Eight dense features on an offset, divided by their max |x| (values offset-1..offset+1
    over offset+1); the label is the sign of a product of two of them plus a linear term."""
    rng = np.random.default_rng(seed)
    U = rng.uniform(-1.0, 1.0, (rows, 8))
    s = U[:, 0] * U[:, 1] + 0.5 * U[:, 2] + rng.normal(0.0, 0.1, rows)
    X = U + offset
    return sp.csr_matrix(X / np.abs(X).max(axis=0)), np.where(s > 0, 1.0, -1.0)


@pytest.mark.parametrize("sparse", [False, True])
def test_shift_moves_only_the_columns_stored_in_every_row_to_their_mean(rng, sparse):
    D = rng.uniform(0.5, 1.0, (30, 5))
    D[rng.random((30, 5)) < 0.3] = 0.0
    D[:, 1] = rng.uniform(0.5, 1.0, 30)  # stored in every row
    D[:, 3] = rng.uniform(-1.0, -0.2, 30)  # stored in every row
    D[4, 4] = 0.0
    shift = degree2.Shift.of(sp.csr_matrix(D) if sparse else D)
    assert shift.columns.tolist() == sorted({1, 3} | {j for j in (0, 2, 4) if np.all(D[:, j])})
    np.testing.assert_allclose(shift.offsets, D[:, shift.columns].mean(axis=0))
    out = shift.apply(sp.csr_matrix(D)).toarray()
    expected = D.copy()
    expected[:, shift.columns] -= shift.offsets
    np.testing.assert_allclose(out, expected)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 12),
    st.integers(1, 6),
    st.floats(0.0, 0.9),
    st.integers(0, 2**31 - 1),
)
def test_shift_on_other_rows_subtracts_the_offsets_and_counts_its_values(rows, cols, empty, seed):
    """A validation or test row may lack a shifted column: it gets -offset there, and
    ``row_nnz`` (which sizes the prediction chunks) never counts fewer values than it has."""
    r = np.random.default_rng(seed)
    train = r.uniform(0.1, 1.0, (8, cols))
    shift = degree2.Shift.of(sp.csr_matrix(train))
    assert shift.columns.tolist() == list(range(cols))
    other = r.uniform(-1.0, 1.0, (rows, cols))
    other[r.random((rows, cols)) < empty] = 0.0
    out = shift.apply(sp.csr_matrix(other))
    np.testing.assert_allclose(out.toarray(), other - shift.offsets)
    assert np.all(np.diff(out.indptr) <= shift.row_nnz(sp.csr_matrix(other)))
    assert out.has_sorted_indices


def test_shift_keeps_the_training_rows_expanded_values_as_planned(rng):
    """Only columns without zeros move, so the training rows' expansion is no larger than the
    count the plan and the budget were made from."""
    X, _ = offset_data(300, 4.0, 0)
    D = X.toarray()
    D[rng.random(D.shape) < 0.2] *= 0.0
    D[:, 0] = X.toarray()[:, 0]
    X = sp.csr_matrix(D)
    shifted = degree2.Shift.of(X).apply(X)
    assert degree2.expand(shifted).nnz <= int(degree2.row_expanded_nnz(X).sum())


@pytest.mark.slow
def test_shift_finds_a_product_of_features_on_an_offset(monkeypatch):
    """Features in [0.94, 1] (an offset 32 times their spread): the product x0*x1 that decides
    the label is nearly collinear with x0, x1 and their squares, and without the shift the
    C search's largest C (1024) does not separate them: gap -0.2 points. With it degree-2
    finds the product, clear of epsilon (+8.6 measured)."""
    X, y = offset_data(2000, 32.0, 0)
    T, V = Dataset(X[:1500], y[:1500]), Dataset(X[1500:], y[1500:])
    from kcheck.checkers.base import score
    from kcheck.tuning import linear_c as tuning
    from kcheck.verdict import paired_gap

    lin, _ = tuning.fit_linear(T.X, T.y, seed=0)
    base = score(lin, V).correct
    opts = degree2.Degree2Options(budget_seconds=10.0)
    shifted = degree2.run(T, V, opts, degree2.plan_rows(T, 2, opts))
    assert shifted.status == "ok" and shifted.info["shifted_features"] == 8
    gap = paired_gap(shifted.correct, base)
    assert gap.low >= 0.02, gap

    empty = degree2.Shift(np.empty(0, dtype=np.int64), np.empty(0))
    monkeypatch.setattr(degree2.Shift, "of", classmethod(lambda cls, X: empty))
    plain = degree2.run(T, V, opts, degree2.plan_rows(T, 2, opts))
    assert plain.info["shifted_features"] == 0
    assert paired_gap(plain.correct, base).value < 0.02
    # The shifted model predicts V through the same shift it trained with.
    assert shifted.predict is not None
    np.testing.assert_array_equal(shifted.predict(V.X), shifted.predicted)


def test_where_t_rate_prices_out_the_least_subsample_its_own_rate_decides():
    """24,000 x 50 dense rows (the golden wide24000): at the cost per value of all 18,000 rows
    of T, fewer than MIN_ROWS fit 6.5 counted seconds and degree-2 would be skipped at a
    threshold; a subsample costs less per value, and the most rows whose own count fits
    train. Never more than their own count allows, and none where even the least does not
    fit."""
    from kcheck.costs import budget

    rows, features, seconds = 18_000, 50, 6.5
    per_row = degree2.expanded_dimension(features)
    options = degree2.Degree2Options(budget_seconds=seconds)
    at_t_rate = budget.degree2_values_within(seconds, rows=rows, n_classes=2) // per_row
    assert at_t_rate < degree2.MIN_ROWS
    p = degree2.plan_counts(rows, features, rows * features, rows * per_row, 2, options)
    assert p.rows >= degree2.MIN_ROWS and p.limited_by == "cost"
    assert budget.degree2_sizing_seconds(p.rows * per_row, 2, p.rows) <= seconds
    assert budget.degree2_sizing_seconds((p.rows + 1) * per_row, 2, p.rows + 1) > seconds
    tight = degree2.Degree2Options(budget_seconds=0.5)
    q = degree2.plan_counts(rows, features, rows * features, rows * per_row, 2, tight)
    assert q.rows == 0 and q.limited_by == "cost"
