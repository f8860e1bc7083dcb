"""Reading, validating and scaling a training file once (kcheck/prepare.py)."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st
from sklearn.preprocessing import MaxAbsScaler, MinMaxScaler

from kcheck.defaults import MIN_ROWS, MIN_ROWS_PER_CLASS
from kcheck.errors import KcheckError, KcheckWarning
from kcheck.io.data import read_libsvm, write_libsvm
from kcheck.memory import csr_bytes, default_memory_limit
from kcheck.prepare import (
    Prepared,
    encode_labels,
    prepare,
    read_scored,
    require_integer_labels,
    scaling_json,
    unseen_warnings,
)

LIMIT = default_memory_limit()


def _write(path: Path, y: np.ndarray, X: np.ndarray) -> str:
    write_libsvm(str(path), y, sp.csr_matrix(X))
    return str(path)


def _random_set(rng: np.random.Generator, rows: int, cols: int, labels: list[float]) -> tuple:
    X = rng.normal(size=(rows, cols)) * rng.uniform(0.1, 50.0, size=cols)
    X[rng.random(size=X.shape) < 0.4] = 0.0  # sparse: max-abs must keep these zeros
    y = np.array(labels * (rows // len(labels) + 1), dtype=np.float64)[:rows]
    return y, X


def _prepare(path: str, scaling: str = "maxabs", integer_labels: bool = False) -> Prepared:
    return prepare(path, scaling=scaling, memory_limit=LIMIT, integer_labels=integer_labels)


# --- validation -----------------------------------------------------------------------------------


def test_one_class_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "one.svm", np.full(20, 3.0), np.eye(20, 4))
    with pytest.raises(KcheckError) as info:
        _prepare(path)
    assert str(info.value) == (
        f"{path}: every row has label 3; a classifier needs at least two classes"
    )


def test_too_few_rows_are_refused_naming_the_file(tmp_path: Path) -> None:
    rows = MIN_ROWS - 1
    y = np.array([1.0, -1.0] * rows)[:rows]
    path = _write(tmp_path / "few.svm", y, np.arange(rows * 2, dtype=float).reshape(rows, 2) + 1)
    with pytest.raises(KcheckError) as info:
        _prepare(path)
    assert str(info.value) == (
        f"{path}: {rows} rows are too few to compare classifiers (at least {MIN_ROWS} are needed)"
    )


def test_exactly_the_minimum_rows_are_accepted(tmp_path: Path, rng: np.random.Generator) -> None:
    y, X = _random_set(rng, MIN_ROWS, 3, [1.0, -1.0])
    assert _prepare(_write(tmp_path / "ten.svm", y, X)).rows == MIN_ROWS


def test_too_few_rows_per_class_are_refused(tmp_path: Path, rng: np.random.Generator) -> None:
    k = 3
    rows = MIN_ROWS_PER_CLASS * k - 1  # 14 rows, 3 classes: 4.7 a class on average
    y, X = _random_set(rng, rows, 3, [1.0, 2.0, 3.0])
    path = _write(tmp_path / "thin.svm", y, X)
    with pytest.raises(KcheckError) as info:
        _prepare(path)
    assert str(info.value) == (
        f"{path}: {k} classes in {rows} rows; comparing classifiers needs at least "
        f"{MIN_ROWS_PER_CLASS} rows per class on average"
    )
    y, X = _random_set(rng, rows + 1, 3, [1.0, 2.0, 3.0])
    assert _prepare(_write(tmp_path / "enough.svm", y, X)).classes.size == k


def test_integer_labels_refuses_fractions_up_front(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    y, X = _random_set(rng, 40, 3, [0.5, 1.5])
    path = _write(tmp_path / "frac.svm", y, X)
    with pytest.raises(KcheckError, match=r"^label 0\.5 is not an integer"):
        _prepare(path, integer_labels=True)
    coded = _prepare(path)  # without the flag, labels become codes 0..k-1
    np.testing.assert_array_equal(coded.y, (y == 1.5).astype(float))
    np.testing.assert_array_equal(coded.y_raw, y)
    np.testing.assert_array_equal(coded.classes, [0.5, 1.5])


def test_integer_labels_accepts_integers(tmp_path: Path, rng: np.random.Generator) -> None:
    y, X = _random_set(rng, 40, 3, [-1.0, 7.0])
    p = _prepare(_write(tmp_path / "int.svm", y, X), integer_labels=True)
    np.testing.assert_array_equal(p.y, y)  # integral labels are kept, not coded


# --- scaling --------------------------------------------------------------------------------------


def test_maxabs_keeps_zeros_and_bounds_values(tmp_path: Path, rng: np.random.Generator) -> None:
    y, X = _random_set(rng, 60, 6, [1.0, -1.0])
    X[:, 4] = 0.0  # an absent feature stays absent
    p = _prepare(_write(tmp_path / "m.svm", y, X))
    S = p.X.toarray()
    assert sp.isspmatrix_csr(p.X) and p.X.dtype == np.float64
    np.testing.assert_array_equal(S == 0, X == 0)  # zeros stay zeros, non-zeros stay non-zero
    assert np.abs(S).max() <= 1.0
    np.testing.assert_allclose(np.abs(S).max(axis=0), [1, 1, 1, 1, 0, 1])
    # The direct formula, and scikit-learn's MaxAbsScaler.
    m = np.abs(X).max(axis=0)
    m[m == 0] = 1.0
    np.testing.assert_allclose(S, X / m, rtol=1e-15, atol=0)
    np.testing.assert_allclose(S, MaxAbsScaler().fit_transform(X), rtol=1e-15, atol=0)


def test_maxabs_on_real_data(datasets: Path) -> None:
    p = _prepare(str(datasets / "svmguide1"))
    _, raw = read_libsvm(str(datasets / "svmguide1"))
    # The file stores some zeros explicitly; those are dropped, no other value is.
    assert p.X.nnz == raw.count_nonzero() < raw.nnz
    np.testing.assert_allclose(
        p.X.toarray(), MaxAbsScaler().fit_transform(raw).toarray(), rtol=1e-14
    )


def test_minmax_maps_each_feature_to_minus_one_one(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    y, X = _random_set(rng, 50, 4, [1.0, -1.0])
    p = _prepare(_write(tmp_path / "mm.svm", y, X), scaling="minmax")
    S = p.X.toarray()
    expected = MinMaxScaler(feature_range=(-1, 1)).fit_transform(X)
    np.testing.assert_allclose(S, expected, atol=1e-12)
    assert S.min() >= -1.0 and S.max() <= 1.0
    assert p.scaler.method == "minmax"
    assert scaling_json(p.scaler) == {"method": "minmax", "lower": -1.0, "upper": 1.0}


# --- summary, hash, sizes -------------------------------------------------------------------------


def test_summary_and_hash(datasets: Path) -> None:
    path = str(datasets / "heart_scale")
    p = _prepare(path)
    y, raw = read_libsvm(path)
    s = p.summary
    assert s["sha256"] == hashlib.sha256(Path(path).read_bytes()).hexdigest() == p.sha256
    assert s["path"] == path
    assert (s["rows"], s["features"], s["nnz"]) == (raw.shape[0], raw.shape[1], raw.nnz)
    assert s["density"] == round(raw.nnz / (raw.shape[0] * raw.shape[1]), 6)
    assert s["classes"] == [-1, 1] and all(type(c) is int for c in s["classes"])
    assert (p.rows, p.n_features) == raw.shape
    np.testing.assert_array_equal(p.y_raw, y)
    np.testing.assert_array_equal(p.classes, np.unique(y))
    assert p.read_seconds >= 0


def test_data_bytes_are_the_csr_bytes(datasets: Path) -> None:
    path = str(datasets / "german.numer")
    p = _prepare(path)
    _, raw = read_libsvm(path)
    # The data as read (german.numer stores its zeros, which scaling then drops).
    assert p.data_bytes == csr_bytes(raw) == 12 * raw.nnz + 4 * (raw.shape[0] + 1)
    assert csr_bytes(p.X) < p.data_bytes


def test_hash_is_of_the_decompressed_content(tmp_path: Path, datasets: Path) -> None:
    plain = datasets / "heart_scale"
    packed = tmp_path / "heart_scale.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    p = _prepare(str(packed))
    assert p.sha256 == hashlib.sha256(plain.read_bytes()).hexdigest()
    assert p.sha256 != hashlib.sha256(packed.read_bytes()).hexdigest()


def test_fractional_classes_are_listed_as_floats(tmp_path: Path, rng: np.random.Generator) -> None:
    y, X = _random_set(rng, 30, 3, [2.5, -1.0, 2.7])
    p = _prepare(_write(tmp_path / "f.svm", y, X))
    assert p.summary["classes"] == [-1, 2.5, 2.7]


# --- read_scored ----------------------------------------------------------------------------------


def test_test_file_is_scaled_with_the_training_scaler(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    y, X = _random_set(rng, 80, 5, [1.0, -1.0])
    train = _prepare(_write(tmp_path / "train.svm", y, X))
    test_X = X[:30] * 3.0  # values beyond the training range scale beyond 1, as svm-scale -r
    scored = read_scored(_write(tmp_path / "test.svm", y[:30], test_X), train, memory_limit=LIMIT)
    np.testing.assert_allclose(scored.X.toarray(), train.X.toarray()[:30] * 3.0, rtol=1e-14)
    np.testing.assert_array_equal(scored.y, y[:30])
    assert scored.rows == 30 and scored.unseen == 0
    assert scored.X.shape[1] == train.n_features


def test_test_file_labels_are_coded_like_training(tmp_path: Path, rng: np.random.Generator) -> None:
    y, X = _random_set(rng, 40, 3, [0.25, 1.5, 3.75])
    train = _prepare(_write(tmp_path / "train.svm", y, X))
    test_y = np.array([1.5, 0.25, 9.0, 3.75, 9.0])
    scored = read_scored(_write(tmp_path / "test.svm", test_y, X[:5]), train, memory_limit=LIMIT)
    np.testing.assert_array_equal(scored.y, [1.0, 0.0, -1.0, 2.0, -1.0])
    assert scored.unseen == 2
    (warning,) = unseen_warnings(scored)
    assert warning.startswith(f"{scored.path}: 2 of 5 rows have a label that never occurs")


def test_a_wider_test_file_drops_values_with_a_warning(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    y, X = _random_set(rng, 40, 3, [1.0, -1.0])
    train = _prepare(_write(tmp_path / "train.svm", y, X))
    wide = tmp_path / "wide.svm"
    wide.write_text("1 1:2 3:1 5:7 9:1\n-1 2:1\n")
    with pytest.warns(KcheckWarning, match=r"dropped 2 value\(s\) with an index above"):
        scored = read_scored(str(wide), train, memory_limit=LIMIT)
    assert scored.X.shape == (2, 3)
    expected = np.array([[2.0, 0.0, 1.0], [0.0, 1.0, 0.0]]) / np.abs(X).max(axis=0)
    np.testing.assert_allclose(scored.X.toarray(), expected, rtol=1e-14)


def test_a_narrower_test_file_is_padded(tmp_path: Path, rng: np.random.Generator) -> None:
    y, X = _random_set(rng, 40, 6, [1.0, -1.0])
    train = _prepare(_write(tmp_path / "train.svm", y, X))
    narrow = tmp_path / "narrow.svm"
    narrow.write_text("1 1:1\n")
    scored = read_scored(str(narrow), train, memory_limit=LIMIT)
    assert scored.X.shape == (1, 6)


def test_a_test_file_sharing_no_label_is_refused(tmp_path: Path, rng: np.random.Generator) -> None:
    y, X = _random_set(rng, 40, 3, [1.0, -1.0])
    train_path = _write(tmp_path / "train.svm", y, X)
    train = _prepare(train_path)
    other = _write(tmp_path / "other.svm", np.array([5.0, 6.0, 5.0]), X[:3])
    with pytest.raises(KcheckError) as info:
        read_scored(other, train, memory_limit=LIMIT)
    message = str(info.value)
    assert message.startswith(f"{other}: none of its labels (5, 6) occurs in the training file")
    assert train_path in message


def test_read_scored_hashes_the_test_file(tmp_path: Path, rng: np.random.Generator) -> None:
    y, X = _random_set(rng, 40, 3, [1.0, -1.0])
    train = _prepare(_write(tmp_path / "train.svm", y, X))
    test_path = _write(tmp_path / "test.svm", y[:7], X[:7])
    scored = read_scored(test_path, train, memory_limit=None)
    assert scored.sha256 == hashlib.sha256(Path(test_path).read_bytes()).hexdigest()
    assert unseen_warnings(scored) == [] and unseen_warnings(None) == []


# --- encode_labels, require_integer_labels --------------------------------------------------------


def test_encode_keeps_integral_labels() -> None:
    y = np.array([3.0, -1.0, 3.0, 7.0])
    out = encode_labels(y, np.unique(y))
    np.testing.assert_array_equal(out, y)
    # Unknown integral labels in a test file are kept too: no model predicts them.
    np.testing.assert_array_equal(encode_labels(np.array([4.0]), np.unique(y)), [4.0])


def test_encode_codes_non_integral_labels() -> None:
    classes = np.array([2.5, 2.7, 10.0])
    y = np.array([2.7, 2.5, 10.0, 2.7, 99.5, 2.6])
    np.testing.assert_array_equal(encode_labels(y, classes), [1, 0, 2, 1, -1, -1])
    assert encode_labels(y, classes).dtype == np.float64


def test_encode_codes_labels_too_large_for_a_c_int() -> None:
    classes = np.array([1.0, 2.0**31])
    np.testing.assert_array_equal(encode_labels(np.array([2.0**31, 1.0]), classes), [1, 0])


_label = st.one_of(
    st.integers(-(2**40), 2**40).map(float),
    st.floats(-1e9, 1e9, allow_nan=False, allow_infinity=False),
)


@given(
    st.lists(_label, min_size=1, max_size=8, unique=True),
    st.lists(st.integers(0, 100), min_size=1, max_size=30),
    st.lists(_label, max_size=5),
)
def test_encode_labels_property(
    classes_list: list[float], picks: list[int], extra: list[float]
) -> None:
    classes = np.unique(np.array(classes_list))
    y = np.array([classes[i % classes.size] for i in picks] + extra)
    out = encode_labels(y, classes)
    integral = all(float(c).is_integer() and abs(c) < 2**31 for c in classes)
    if integral:
        np.testing.assert_array_equal(out, y)
        return
    for value, code in zip(y, out, strict=True):
        if value in classes:
            assert classes[int(code)] == value  # the code is the class's position
        else:
            assert code == -1
    known = np.isin(y, classes)
    assert set(out[known]) <= set(range(classes.size))
    # Distinct labels never merge.
    assert len(set(out[known])) == len(set(y[known]))


def test_require_integer_labels() -> None:
    require_integer_labels(np.array([-1.0, 1.0, 2.0**31 - 1, -(2.0**31) + 1]))
    require_integer_labels(np.array([0, 5]))  # integer arrays are fine
    for bad, shown in [
        (2.5, "2.5"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (2.0**31, "2147483648"),
    ]:
        with pytest.raises(KcheckError, match=rf"^label {shown} is not an integer"):
            require_integer_labels(np.array([1.0, bad, 3.5]))


def test_require_integer_labels_names_the_first_bad_label() -> None:
    with pytest.raises(KcheckError, match=r"^label 0\.5 is not"):
        require_integer_labels(np.array([1.0, 0.5, 0.25]))
