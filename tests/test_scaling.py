"""Feature-wise scaling: values, sparsity, immutability and range files."""

from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from kcheck.errors import DataFormatError, KcheckError
from kcheck.scaling.fitting import (
    ColumnRanges,
    LabelScaling,
    Scaler,
    densify_warning,
    fit_label_scaling,
    fit_scaler,
    read_range_file,
    scaled_text,
    write_range_file,
)

# Columns: sparse non-negative, mixed sign, stored in every row (no implicit zero),
# constant non-zero in every row, only explicit zeros, absent, a single stored value.
TRAIN = np.array(
    [
        [2.0, 0.0, 5.0, 3.0, 0.0, 0.0, 0.0],
        [0.0, 3.0, 7.0, 3.0, 0.0, 0.0, 0.0],
        [4.0, -1.0, 6.0, 3.0, 0.0, 0.0, 0.0],
        [3.0, 2.0, 5.0, 3.0, 0.0, 0.0, -0.25],
        [0.5, 0.0, 6.5, 3.0, 0.0, 0.0, 0.0],
    ]
)
CONSTANT_OR_ABSENT = [3, 4, 5]
# Test rows with values outside the training range and zeros in the dense column.
TEST = np.array(
    [
        [5.0, -2.0, 0.0, 1.0, 9.0, 4.0, 1.0],
        [0.0, 0.0, 8.0, 3.0, 0.0, 0.0, 0.0],
        [1.0, 1.0, 5.5, 0.0, 0.0, 0.0, -0.5],
    ]
)


def as_sparse(dense: np.ndarray) -> sp.csr_matrix:
    """CSR with one explicit zero kept, as a reader might produce."""
    coo = sp.coo_matrix(dense)
    zeros = np.argwhere(dense == 0)[:1]
    rows = np.concatenate([coo.row, zeros[:, 0]])
    cols = np.concatenate([coo.col, zeros[:, 1]])
    vals = np.concatenate([coo.data, np.zeros(len(zeros))])
    X = sp.csr_matrix((vals, (rows, cols)), shape=dense.shape)
    assert X.nnz == np.count_nonzero(dense) + len(zeros)  # the explicit zero is stored
    return X


KINDS = {"dense": lambda a: a.copy(), "sparse": as_sparse}


def ref_minmax(train: np.ndarray, data: np.ndarray, lower: float, upper: float) -> np.ndarray:
    """svm-scale's formula, written out element by element."""
    out = np.zeros(data.shape)
    for j in range(train.shape[1]):
        mn, mx = train[:, j].min(), train[:, j].max()
        if mn == mx:
            continue
        for i, v in enumerate(data[:, j]):
            if v == mn:
                out[i, j] = lower
            elif v == mx:
                out[i, j] = upper
            else:
                out[i, j] = lower + (upper - lower) * (v - mn) / (mx - mn)
    return out


def ref_maxabs(train: np.ndarray, data: np.ndarray) -> np.ndarray:
    out = np.zeros(data.shape)
    for j in range(train.shape[1]):
        col = train[:, j]
        if col.min() != col.max():
            out[:, j] = data[:, j] / np.abs(col).max()
    return out


def assert_canonical(Y: sp.csr_matrix, shape: tuple[int, int]) -> None:
    assert type(Y) is sp.csr_matrix
    assert Y.dtype == np.float64
    assert Y.shape == shape
    assert np.all(Y.data != 0)
    for i in range(shape[0]):
        row = Y.indices[Y.indptr[i] : Y.indptr[i + 1]]
        assert np.all(np.diff(row) > 0)


def csr_parts(X: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return X.data.copy(), X.indices.copy(), X.indptr.copy()


# ---------------------------------------------------------------- values


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bounds", [(-1.0, 1.0), (0.0, 1.0), (-2.0, 3.5)])
def test_minmax_matches_formula(kind: str, bounds: tuple[float, float]) -> None:
    lower, upper = bounds
    scaler = fit_scaler(KINDS[kind](TRAIN), "minmax", lower, upper)
    for data in (TRAIN, TEST):
        Y = scaler.transform(KINDS[kind](data))
        assert_canonical(Y, data.shape)
        np.testing.assert_array_equal(Y.toarray(), ref_minmax(TRAIN, data, lower, upper))


@pytest.mark.parametrize("kind", KINDS)
def test_maxabs_matches_formula(kind: str) -> None:
    scaler = fit_scaler(KINDS[kind](TRAIN), "maxabs")
    for data in (TRAIN, TEST):
        Y = scaler.transform(KINDS[kind](data))
        assert_canonical(Y, data.shape)
        np.testing.assert_array_equal(Y.toarray(), ref_maxabs(TRAIN, data))


def test_min_and_max_include_implicit_zeros() -> None:
    scaler = fit_scaler(as_sparse(TRAIN))
    # Column 0 stores 2, 4, 3, 0.5 and lacks row 1: svm-scale counts that row as 0.
    assert scaler.feature_min[0] == 0.0 and scaler.feature_max[0] == 4.0
    assert scaler.feature_min[1] == -1.0 and scaler.feature_max[1] == 3.0
    # Column 2 is stored in every row, so no zero enters its range.
    assert scaler.feature_min[2] == 5.0 and scaler.feature_max[2] == 7.0
    # A single stored value: the range runs between it and the implicit zeros.
    assert scaler.feature_min[6] == -0.25 and scaler.feature_max[6] == 0.0


@pytest.mark.parametrize("method", ["minmax", "maxabs"])
@pytest.mark.parametrize("kind", KINDS)
def test_constant_and_absent_features_map_to_zero(method: str, kind: str) -> None:
    scaler = fit_scaler(KINDS[kind](TRAIN), method)
    assert np.all(scaler.feature_min[CONSTANT_OR_ABSENT] == 0)
    assert np.all(scaler.feature_max[CONSTANT_OR_ABSENT] == 0)
    for data in (TRAIN, TEST):
        Y = scaler.transform(KINDS[kind](data)).toarray()
        assert np.all(Y[:, CONSTANT_OR_ABSENT] == 0)


@pytest.mark.parametrize("method", ["minmax", "maxabs"])
def test_width_is_the_fitted_width(method: str) -> None:
    scaler = fit_scaler(TRAIN, method)
    wide = sp.hstack([sp.csr_matrix(TEST), sp.csr_matrix(np.full((3, 2), 7.0))]).tocsr()
    np.testing.assert_array_equal(
        scaler.transform(wide).toarray(), scaler.transform(TEST).toarray()
    )
    narrow = TEST[:, :2]
    padded = np.zeros_like(TEST)
    padded[:, :2] = narrow
    Y = scaler.transform(sp.csr_matrix(narrow))
    assert Y.shape == TEST.shape
    np.testing.assert_array_equal(Y.toarray(), scaler.transform(padded).toarray())
    assert scaler.nnz_after(wide) == scaler.transform(wide).nnz
    assert scaler.nnz_after(narrow) == Y.nnz


def test_rounding_never_leaves_the_bounds() -> None:
    # svm-scale's formula gives 3.0000000000000004 for the value just below max here.
    mx = 7.199999999999999
    below = np.nextafter(mx, -np.inf)
    assert 0.0 + (3.0 - 0.0) * (below - 1.4) / (mx - 1.4) > 3.0
    Y = fit_scaler(np.array([[1.4], [below], [mx]]), "minmax", 0.0, 3.0).transform(
        np.array([[below], [mx], [1.4], [8.0]])
    )
    assert Y[0, 0] == 3.0 and Y[1, 0] == 3.0 and Y[2, 0] == 0.0
    assert Y[3, 0] > 3.0  # outside the training range the formula applies unclamped


def test_zero_rows_and_empty_data() -> None:
    scaler = fit_scaler(sp.csr_matrix((0, 3)))
    assert scaler.n_features == 3
    assert np.all(scaler.feature_min == 0) and np.all(scaler.feature_max == 0)
    assert scaler.transform(np.ones((2, 3))).nnz == 0
    fitted = fit_scaler(TRAIN)
    assert fitted.transform(sp.csr_matrix((0, 7))).shape == (0, 7)


# ---------------------------------------------------------- immutability


def messy_csr() -> sp.csr_matrix:
    """TEST as CSR with unsorted indices, a duplicate entry and an explicit zero."""
    coo = sp.coo_matrix(TEST)
    rows = np.concatenate([coo.row, [1, 2]])
    cols = np.concatenate([coo.col, [0, 1]])
    vals = np.concatenate([coo.data, [0.0, 0.5]])
    order = np.lexsort((-cols, rows))  # by row, columns descending within a row
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=TEST.shape[0]))])
    X = sp.csr_matrix((vals[order], cols[order], indptr), shape=TEST.shape)
    assert not X.has_sorted_indices
    return X


def expected_messy_dense() -> np.ndarray:
    dense = TEST.copy()
    dense[2, 1] += 0.5  # the duplicate is summed, as scipy does
    return dense


@pytest.mark.parametrize("method", ["minmax", "maxabs"])
def test_transform_does_not_modify_input(method: str) -> None:
    scaler = fit_scaler(TRAIN, method)
    X = messy_csr()
    before = csr_parts(X)
    Y = scaler.transform(X)
    scaler.nnz_after(X)
    for a, b in zip(before, csr_parts(X), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.shares_memory(Y.data, X.data)
    np.testing.assert_array_equal(Y.toarray(), scaler.transform(expected_messy_dense()).toarray())
    dense = TEST.copy()
    scaler.transform(dense)
    np.testing.assert_array_equal(dense, TEST)


def test_fit_does_not_modify_input() -> None:
    X = messy_csr()
    before = csr_parts(X)
    fit_scaler(X)
    fit_scaler(X.tocsc(), "maxabs")
    for a, b in zip(before, csr_parts(X), strict=True):
        np.testing.assert_array_equal(a, b)


def test_fit_accepts_any_sparse_format_and_dtype() -> None:
    reference = fit_scaler(TRAIN)
    assert fit_scaler(sp.csc_matrix(TRAIN)) == reference
    assert fit_scaler(sp.coo_matrix(TRAIN)) == reference
    assert fit_scaler(sp.csr_array(TRAIN)) == reference
    ints = sp.csr_matrix(np.array([[1, 0], [3, -2]], dtype=np.int32))
    assert fit_scaler(ints) == fit_scaler(ints.toarray().astype(float))


# --------------------------------------------------------------- in place


@pytest.mark.parametrize(
    ("method", "lower"), [("maxabs", -1.0), ("minmax", 0.0)], ids=["maxabs", "minmax-l0"]
)
def test_transform_inplace_matches_transform(method: str, lower: float) -> None:
    train = np.abs(TRAIN)  # non-negative and with a zero in every column,
    train[1, 2] = 0.0  # so -l 0 keeps zeros at zero
    scaler = fit_scaler(as_sparse(train), method, lower, 1.0)
    data = np.abs(TEST)
    expected = scaler.transform(as_sparse(data))
    X = as_sparse(data)
    data_buffer = X.data
    out = scaler.transform_inplace(X)
    assert out is X
    assert_canonical(out, data.shape)
    np.testing.assert_array_equal(out.toarray(), expected.toarray())
    assert np.shares_memory(out.data, data_buffer)  # scaled where it lay, not copied
    messy = messy_csr()
    messy.data = np.abs(messy.data)
    expected = scaler.transform(messy)
    np.testing.assert_array_equal(scaler.transform_inplace(messy).toarray(), expected.toarray())


def test_transform_inplace_refuses_to_densify() -> None:
    scaler = fit_scaler(TRAIN, "minmax", -1.0, 1.0)
    X = as_sparse(TEST)
    before = csr_parts(X)
    with pytest.raises(ValueError, match="non-zero"):
        scaler.transform_inplace(X)
    for a, b in zip(before, csr_parts(X), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="CSR"):
        fit_scaler(TRAIN, "maxabs").transform_inplace(TEST.copy())


# -------------------------------------------------------------- sparsity


def test_maxabs_never_densifies() -> None:
    rng = np.random.default_rng(1)
    X = sp.random(200, 300, density=0.02, format="csr", random_state=rng) - 0.5 * sp.random(
        200, 300, density=0.02, format="csr", random_state=rng
    )
    X = sp.csr_matrix(X)
    X.eliminate_zeros()
    scaler = fit_scaler(X, "maxabs")
    Y = scaler.transform(X)
    assert Y.nnz == X.nnz == scaler.nnz_after(X)
    np.testing.assert_array_equal(Y.indices, X.indices)
    np.testing.assert_array_equal(Y.indptr, X.indptr)
    assert np.abs(Y.data).max() == 1.0


def test_minmax_densifies_like_svm_scale() -> None:
    X = sp.csr_matrix(np.array([[2.0, 0, 0], [0, 3.0, 0], [0, 0, 1.0]]))
    scaler = fit_scaler(X)
    Y = scaler.transform(X)
    # Every zero maps to -1: the 3 stored values become 9.
    np.testing.assert_array_equal(Y.toarray(), 2 * np.eye(3) - 1)
    assert scaler.nnz_after(X) == Y.nnz == 9
    assert densify_warning(X.nnz, Y.nnz) == (
        "WARNING: original #nonzeros 3\n"
        "       > new      #nonzeros 9\n"
        "If feature values are non-negative and sparse, use -l 0 rather than the default -l -1"
    )
    nonneg = fit_scaler(X, lower=0.0)
    assert nonneg.transform(X).nnz == nonneg.nnz_after(X) == 3
    assert densify_warning(3, 3) is None


# ------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"method": "zscore"}, "unknown scaling method"),
        ({"lower": 1.0, "upper": 1.0}, "lower < upper"),
        ({"lower": 2.0, "upper": -1.0}, "lower < upper"),
        ({"lower": float("nan")}, "finite"),
        ({"upper": float("inf")}, "finite"),
        ({"method": "maxabs", "lower": 0.0}, r"\[-1, 1\]"),
    ],
)
def test_fit_rejects_bad_options(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(KcheckError, match=match):
        fit_scaler(TRAIN, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_values_are_rejected(bad: float) -> None:
    data = TRAIN.copy()
    data[1, 1] = bad
    with pytest.raises(KcheckError, match="finite"):
        fit_scaler(data)
    with pytest.raises(KcheckError, match="finite"):
        fit_scaler(TRAIN).transform(sp.csr_matrix(data))


def test_scaler_is_frozen_and_checked() -> None:
    scaler = fit_scaler(TRAIN)
    with pytest.raises(AttributeError):
        scaler.lower = 0.0  # type: ignore[misc]
    with pytest.raises(ValueError):
        scaler.feature_min[0] = 1.0
    with pytest.raises(ValueError, match="feature_min == -feature_max"):
        Scaler("maxabs", -1.0, 1.0, np.array([-1.0]), np.array([2.0]))
    with pytest.raises(ValueError, match="min"):
        Scaler("minmax", -1.0, 1.0, np.array([2.0]), np.array([1.0]))


# ------------------------------------------------------------ properties

finite = st.floats(-1e100, 1e100, allow_nan=False, allow_infinity=False)
value = st.one_of(st.just(0.0), finite, st.integers(-3, 3).map(float))


@st.composite
def data_sets(draw: st.DrawFn) -> np.ndarray:
    rows = draw(st.integers(1, 7))
    cols = draw(st.integers(1, 5))
    return draw(hnp.arrays(np.float64, (rows, cols), elements=value))


@st.composite
def bounds(draw: st.DrawFn) -> tuple[float, float]:
    a = draw(st.floats(-1e6, 1e6))
    b = draw(st.floats(-1e6, 1e6).filter(lambda b: b != a))
    return (min(a, b), max(a, b))


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(data_sets(), bounds(), st.booleans())
def test_minmax_training_data_lies_within_bounds(
    dense: np.ndarray, lu: tuple[float, float], sparse: bool
) -> None:
    lower, upper = lu
    X = sp.csr_matrix(dense) if sparse else dense
    scaler = fit_scaler(X, "minmax", lower, upper)
    Y = scaler.transform(X)
    values = Y.toarray()
    kept = scaler.feature_min != scaler.feature_max
    assert np.all(values[:, ~kept] == 0)
    assert np.all((values[:, kept] >= lower) & (values[:, kept] <= upper))
    # Each kept feature reaches both ends exactly.
    assert np.all(values[:, kept].min(axis=0) == lower)
    assert np.all(values[:, kept].max(axis=0) == upper)
    assert scaler.nnz_after(X) == Y.nnz
    assert_canonical(Y, dense.shape)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(data_sets(), st.booleans())
def test_maxabs_training_data_lies_within_unit_box(dense: np.ndarray, sparse: bool) -> None:
    X = sp.csr_matrix(dense) if sparse else dense
    scaler = fit_scaler(X, "maxabs")
    Y = scaler.transform(X)
    assert np.abs(Y.data).max(initial=0.0) <= 1.0
    # Zeros stay zeros (a tiny value may also underflow to zero: 1e-313 / 1e10).
    assert np.all(dense[Y.toarray() != 0] != 0)
    assert scaler.nnz_after(X) == Y.nnz
    X_csr = sp.csr_matrix(dense)
    np.testing.assert_array_equal(scaler.transform_inplace(X_csr).toarray(), Y.toarray())


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(data_sets(), data_sets(), bounds())
def test_nnz_after_predicts_transform_on_other_data(
    train: np.ndarray, other: np.ndarray, lu: tuple[float, float]
) -> None:
    scaler = fit_scaler(train, "minmax", *lu)
    try:
        Y = scaler.transform(sp.csr_matrix(other))
    except KcheckError:  # values far outside the training range can overflow
        return
    assert scaler.nnz_after(other) == Y.nnz


# ------------------------------------------------------------ range files


@pytest.mark.parametrize("method", ["minmax", "maxabs"])
def test_fitting_block_by_block_is_fitting_at_once(method: str) -> None:
    """kcheck scale's first pass (ColumnRanges, fed blocks of rows as the file streams) fits
    what fit_scaler fits on the whole matrix, to the bit, wherever the blocks are cut; also
    with explicit zeros of both signs, where a min or max of zero is +0.0 either way."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        rows, cols = int(rng.integers(1, 40)), int(rng.integers(1, 30))
        values = rng.choice([0.0, -0.0, 1.0, -1.0, 2.5, -3.0, 5e-324], size=(rows, cols))
        r, c = np.nonzero(rng.random((rows, cols)) < rng.random())
        X = sp.csr_matrix((values[r, c], (r, c)), shape=(rows, int(c.max()) + 1 if c.size else 0))
        X.sort_indices()
        y = rng.choice([-1.0, 1.0, 2.0], size=rows)
        ranges = ColumnRanges("data")
        cuts = sorted({0, rows, *rng.integers(0, rows + 1, size=3).tolist()})
        for a, b in zip(cuts, cuts[1:], strict=False):
            ranges.add(y[a:b], X[a:b])
        assert (ranges.rows, ranges.nnz, ranges.width) == (rows, X.nnz, X.shape[1])
        got, want = ranges.scaler(method), fit_scaler(X, method=method)
        for g, w in ((got.feature_min, want.feature_min), (got.feature_max, want.feature_max)):
            assert np.array_equal(g, w) and np.array_equal(np.signbit(g), np.signbit(w))
        assert ranges.label_scaling(0.0, 1.0) == fit_label_scaling(y, 0.0, 1.0)
    stored = sp.csr_matrix((np.array([-0.0, -1.0]), np.array([0, 0]), np.array([0, 1, 2])))
    assert not np.signbit(fit_scaler(stored).feature_max).any()  # not -0 in a range file


def test_range_file_format_is_svm_scale_s(tmp_path: os.PathLike[str]) -> None:
    scaler = fit_scaler(as_sparse(TRAIN))
    path = os.path.join(tmp_path, "range")
    write_range_file(path, scaler)
    with open(path, encoding="ascii") as f:
        text = f.read()
    assert text == "x\n-1 1\n1 0 4\n2 -1 3\n3 5 7\n7 -0.25 0\n"
    third = Scaler("minmax", 0.0, 1.0, np.array([0.1, 0.0]), np.array([1.0 / 3, 1e-300]))
    write_range_file(path, third)
    with open(path, encoding="ascii") as f:
        assert f.read() == ("x\n0 1\n1 0.10000000000000001 0.33333333333333331\n2 0 1e-300\n")


@pytest.mark.parametrize("method", ["minmax", "maxabs"])
def test_range_file_round_trip(tmp_path: os.PathLike[str], method: str) -> None:
    scaler = fit_scaler(TRAIN * np.pi, method, *((-1.0, 1.0) if method == "maxabs" else (0, 3)))
    path = os.path.join(tmp_path, "range")
    write_range_file(path, scaler)
    back = read_range_file(path, n_features=scaler.n_features)
    assert back == scaler
    assert back.method == method
    # Without n_features the width stops at the last listed feature (7, index 6 here).
    assert read_range_file(path).n_features == 7
    assert read_range_file(path, n_features=np.int64(10)).n_features == 10


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(
    hnp.arrays(np.float64, st.integers(0, 6), elements=st.floats(-1e300, 1e300, width=64)),
    hnp.arrays(np.float64, 6, elements=st.floats(0, 1e300)),
    bounds(),
)
def test_range_file_round_trip_is_exact(
    tmp_path_factory: pytest.TempPathFactory,
    lows: np.ndarray,
    spans: np.ndarray,
    lu: tuple[float, float],
) -> None:
    highs = np.minimum(lows + spans[: lows.size], 1e300)
    highs = np.maximum(highs, lows)
    scaler = Scaler("minmax", lu[0], lu[1], lows, highs)
    const = scaler.feature_min == scaler.feature_max
    expected_min = np.where(const, 0.0, lows)
    expected_max = np.where(const, 0.0, highs)
    path = tmp_path_factory.mktemp("rt") / "range"
    write_range_file(path, scaler)
    back = read_range_file(path, n_features=lows.size)
    symmetric = np.array_equal(expected_min, -expected_max)
    assert back.method == ("maxabs" if symmetric and lu == (-1.0, 1.0) else "minmax")
    assert (back.lower, back.upper) == lu
    np.testing.assert_array_equal(back.feature_min, expected_min)
    np.testing.assert_array_equal(back.feature_max, expected_max)


def test_unlisted_features_map_to_zero(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "range")
    with open(path, "w") as f:
        f.write("x\n0 1\n2 1 3\n5 -2 2\n")
    scaler = read_range_file(path)
    assert scaler.n_features == 5 and scaler.method == "minmax"
    Y = scaler.transform(np.array([[9.0, 2.0, 9.0, 9.0, 0.0, 9.0]]))
    np.testing.assert_array_equal(Y.toarray(), [[0.0, 0.5, 0.0, 0.0, 0.5]])


def test_maxabs_is_inferred_from_symmetric_ranges(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "range")
    with open(path, "w") as f:
        f.write("x\n-1 1\n1 -2 2\n3 -0.5 0.5\n")
    scaler = read_range_file(path)
    assert scaler.method == "maxabs"
    np.testing.assert_array_equal(
        scaler.transform(np.array([[1.0, 7.0, -0.5]])).toarray(), [[0.5, 0.0, -1.0]]
    )


def test_method_can_be_forced(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "range")
    with open(path, "w") as f:
        f.write("x\n-1 1\n1 -2 2\n")
    assert read_range_file(path, method="minmax").method == "minmax"
    assert read_range_file(path, method="maxabs").method == "maxabs"
    with open(path, "w") as f:
        f.write("x\n-1 1\n1 -2 3\n")
    with pytest.raises(DataFormatError, match="not a max-abs range file"):
        read_range_file(path, method="maxabs")
    with pytest.raises(KcheckError, match="unknown scaling method"):
        read_range_file(path, method="zscore")


def test_y_section_is_read(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "range")
    with open(path, "w") as f:
        f.write("y\n0 1\n1.5 2\nx\n-1 1\n1 0.12345678910000001 0.20000000000000001\n")
    scaler = read_range_file(path)
    assert scaler.method == "minmax" and scaler.n_features == 1
    assert scaler.feature_min[0] == 0.1234567891 and scaler.feature_max[0] == 0.2
    assert scaler.y_scaling == LabelScaling(0.0, 1.0, 1.5, 2.0)
    # Written back, the y section comes first, as svm-scale -y -s writes it.
    again = os.path.join(tmp_path, "again")
    write_range_file(again, scaler)
    with open(again) as f:
        assert f.read() == "y\n0 1\n1.5 2\nx\n-1 1\n1 0.12345678910000001 0.20000000000000001\n"
    assert read_range_file(again) == scaler


def test_label_scaling_follows_svm_scale() -> None:
    """y_min and y_max map to the bounds exactly, others by svm-scale's formula."""
    y = np.array([3.0, -1.0, 1.0, 0.5, 3.0])
    ls = fit_label_scaling(y, -3.0, 5.0)
    assert (ls.y_min, ls.y_max) == (-1.0, 3.0)
    out = ls.apply(y)
    np.testing.assert_array_equal(
        out, [5.0, -3.0, -3.0 + 8.0 * 2.0 / 4.0, -3.0 + 8.0 * 1.5 / 4.0, 5.0]
    )
    # Test labels outside the training range map outside the bounds, as in svm-scale.
    np.testing.assert_array_equal(ls.apply([7.0]), [-3.0 + 8.0 * 8.0 / 4.0])
    assert isinstance(out, np.ndarray) and out is not y


def test_label_scaling_refuses_what_it_cannot_do() -> None:
    with pytest.raises(KcheckError, match="y_lower < y_upper"):
        fit_label_scaling([1.0, 2.0], 1.0, 1.0)
    with pytest.raises(KcheckError, match="at least one row"):
        fit_label_scaling([], 0.0, 1.0)
    with pytest.raises(KcheckError, match="finite"):
        LabelScaling(0.0, 1.0, float("nan"), 1.0)
    with pytest.raises(KcheckError, match="y_min <= y_max"):
        LabelScaling(0.0, 1.0, 2.0, 1.0)
    one = fit_label_scaling([4.0, 4.0], 0.0, 1.0)
    np.testing.assert_array_equal(one.apply([4.0]), [0.0])  # y_min wins, as in svm-scale
    with pytest.raises(KcheckError, match="cannot scale label 5"):
        one.apply([4.0, 5.0])


def test_scaled_text_is_svm_scale_layout() -> None:
    """Label %.17g, then index:%g pairs, every item followed by a space."""
    y = np.array([0.1, -1.0, 1e20])
    X = sp.csr_matrix(np.array([[0.5, 0.0, 1 / 3], [0.0, 0.0, 0.0], [-2.0, 1e-7, 0.0]]))
    text = "".join(scaled_text(y, X))
    assert text == "0.10000000000000001 1:0.5 3:0.333333 \n-1 \n1e+20 1:-2 2:1e-07 \n"
    full = "".join(scaled_text(y, X, full_precision=True))
    assert full.splitlines()[0] == "0.10000000000000001 1:0.5 3:0.33333333333333331 "
    assert "".join(scaled_text(np.empty(0), sp.csr_matrix((0, 3)))) == ""


def test_scaled_text_in_several_blocks() -> None:
    n = 10_000  # more rows than one block holds
    y = np.arange(n, dtype=np.float64)
    X = sp.csr_matrix(np.arange(n, dtype=np.float64).reshape(-1, 1))
    lines = "".join(scaled_text(y, X)).splitlines()
    assert len(lines) == n
    assert lines[0] == "0 " and lines[-1] == f"{n - 1} 1:{n - 1:g} "


def test_write_is_atomic(tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = os.path.join(tmp_path, "range")
    write_range_file(path, fit_scaler(TRAIN))
    with open(path) as f:
        original = f.read()

    def fail(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(KcheckError, match="No space left"):
        write_range_file(path, fit_scaler(TRAIN, "maxabs"))
    monkeypatch.undo()
    with open(path) as f:
        assert f.read() == original
    assert os.listdir(tmp_path) == ["range"]  # no temporary file left behind
    umask = os.umask(0o022)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask


def test_write_to_missing_directory_is_a_user_error(tmp_path: os.PathLike[str]) -> None:
    with pytest.raises(KcheckError, match="cannot write range file"):
        write_range_file(os.path.join(tmp_path, "nope", "range"), fit_scaler(TRAIN))


@pytest.mark.parametrize(
    ("content", "line", "fragment"),
    [
        ("", 1, "expected 'x' or 'y'"),
        ("z\n-1 1\n", 1, "expected 'x' or 'y'"),
        ("x\n", 2, "expected 'lower upper'"),
        ("x\n-1\n", 2, "expected 'lower upper'"),
        ("x\n-1 one\n", 2, "expected 'lower upper'"),
        ("x\n1 -1\n", 2, "lower < upper"),
        ("x\n-1 inf\n", 2, "finite"),
        ("x\n-1 1\n1 0 2\nfoo\n", 4, "expected 'index min max'"),
        ("x\n-1 1\n1 0 2\n2 0\n", 4, "expected 'index min max'"),
        ("x\n-1 1\n1.5 0 2\n", 3, "expected 'index min max'"),
        ("x\n-1 1\n1 0 2 3\n", 3, "expected 'index min max'"),
        ("x\n-1 1\n0 0 2\n", 3, "greater than 0"),
        ("x\n-1 1\n2 0 2\n2 0 3\n", 4, "greater than 2"),
        ("x\n-1 1\n3 0 2\n\n1 0 3\n", 5, "greater than 3"),
        ("x\n-1 1\n1 2 0\n", 3, "min <= max"),
        ("x\n-1 1\n1 nan 0\n", 3, "finite"),
        ("x\n-1 1\n1 0 1_0\n", 3, "expected 'index min max'"),
        ("x\n-1 1_0\n", 2, "expected 'lower upper'"),
        ("x\n-1 1\n1 -1e308 1e308\n", 3, "too wide"),
        ("y\n0 1\n", 3, "expected 'y_min y_max'"),
        ("y\n1 0\n1 2\nx\n-1 1\n", 2, "y_lower < y_upper"),
        ("y\n1 1\n1 2\nx\n-1 1\n", 2, "y_lower < y_upper"),
        ("y\n0 1\n2 1\nx\n-1 1\n", 3, "y_min <= y_max"),
        ("y\n0 1\n1 nan\nx\n-1 1\n", 3, "finite"),
        ("y\n-inf 1\n1 2\nx\n-1 1\n", 2, "finite"),
        ("y\n0 1\n-1e308 1e308\nx\n-1 1\n", 3, "too wide"),
        ("y\n-1e308 1e308\n0 1\nx\n-1 1\n", 2, "too wide"),
        ("y\n0 1\n1 2 3\nx\n-1 1\n", 3, "expected 'y_min y_max'"),
        ("y\n0 1\n1 2\ny\n", 4, "expected 'x'"),
        ("y\n0 1\n1 2\n-1 1\n", 4, "expected 'x'"),
        ("y\n0\n1 2\nx\n-1 1\n", 2, "expected 'y_lower y_upper'"),
        ("x\n-1 1\n1 0 \xff\n", 3, "UTF-8"),
    ],
)
def test_bad_range_files_name_the_line(
    tmp_path: os.PathLike[str], content: str, line: int, fragment: str
) -> None:
    path = os.path.join(tmp_path, "range")
    with open(path, "wb") as f:
        f.write(content.encode("latin-1"))
    with pytest.raises(DataFormatError) as info:
        read_range_file(path)
    assert info.value.line == line
    assert info.value.path == path
    assert fragment in info.value.message
    assert str(info.value).startswith(f"{path}:{line}: ")


def test_missing_range_file(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "absent")
    with pytest.raises(DataFormatError) as info:
        read_range_file(path)
    assert info.value.line is None and info.value.path == path
    assert "cannot read range file" in info.value.message
    with pytest.raises(DataFormatError):
        read_range_file(tmp_path)  # a directory


def test_blank_lines_and_crlf_are_tolerated(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "range")
    with open(path, "wb") as f:
        f.write(b"x\r\n-1 1\r\n1 0 2\r\n\r\n3 1 5\r\n\r\n")
    scaler = read_range_file(path)
    np.testing.assert_array_equal(scaler.feature_min, [0.0, 0.0, 1.0])
    np.testing.assert_array_equal(scaler.feature_max, [2.0, 0.0, 5.0])
