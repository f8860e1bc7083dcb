"""The linear baseline (kcheck/checkers/linear.py): LIBLINEAR -s 2 -B 1 with C from -C on T,
checked against scikit-learn's LinearSVC on the same problem."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import DATASETS
from sklearn.svm import LinearSVC

from kcheck.bindings import engines
from kcheck.checkers import linear
from kcheck.checkers.base import Dataset
from kcheck.memory import default_memory_limit
from kcheck.prepare import prepare
from kcheck.split import stratified_split

#: LIBLINEAR's -C search stops at this C (find_parameters' max_C).
MAX_C = 1024.0


def _split(name: str, seed: int = 0) -> tuple[Dataset, Dataset]:
    p = prepare(str(DATASETS / name), scaling="maxabs", memory_limit=default_memory_limit())
    train, val = stratified_split(p.y, seed=seed)
    return Dataset(p.X[train], p.y[train]), Dataset(p.X[val], p.y[val])


@pytest.fixture(scope="module")
def heart() -> tuple[Dataset, Dataset, linear.CheckerResult]:
    T, V = _split("heart_scale")
    return T, V, linear.run(T, V, linear.LinearOptions(seed=0))


def _sklearn(T: Dataset, C: float, dual: bool) -> LinearSVC:
    # LIBLINEAR's -B 1 appends a constant feature 1 whose weight is regularised like the
    # others: LinearSVC's intercept with intercept_scaling=1 is that same model.
    model = LinearSVC(
        loss="squared_hinge",
        dual=dual,
        C=C,
        fit_intercept=True,
        intercept_scaling=1.0,
        tol=1e-6,
        max_iter=100_000,
    )
    return model.fit(T.X, T.y)


def test_result_fields(heart) -> None:
    T, V, r = heart
    assert r.name == "linear" and r.status == "ok" and r.reason is None
    assert r.correct is not None and r.predicted is not None and r.scores is not None
    assert r.correct.shape == r.predicted.shape == (V.rows,)
    np.testing.assert_array_equal(r.correct, r.predicted == V.y)
    assert r.val_accuracy == pytest.approx(np.mean(r.predicted == V.y))
    assert r.cv_accuracy is not None and 0.5 < r.cv_accuracy <= 1.0
    assert r.predict is not None
    np.testing.assert_array_equal(r.predict(V.X), r.predicted)
    assert r.seconds > 0
    assert set(r.info) == {"C"}


@pytest.mark.parametrize("dual", [False, True])
def test_agrees_with_sklearn_linear_svc(heart, dual: bool) -> None:
    T, V, r = heart
    model = _sklearn(T, r.info["C"], dual)
    agree = np.mean(model.predict(V.X) == r.predicted)
    assert agree >= 0.98
    assert abs(model.score(V.X, V.y) - r.val_accuracy) <= 0.02


def test_decision_values_match_sklearn(heart) -> None:
    T, V, r = heart
    model = _sklearn(T, r.info["C"], dual=False)
    # Scores are for the larger label, as scikit-learn's decision_function (classes_[1]),
    # whatever label LIBLINEAR met first.
    ours = r.scores
    assert ours.ndim == 1
    theirs = model.decision_function(V.X)
    # The same strictly convex problem: the solutions agree to the solvers' tolerance.
    assert np.corrcoef(ours, theirs)[0, 1] > 0.999
    np.testing.assert_allclose(ours, theirs, atol=0.05 * np.abs(theirs).max())


@pytest.mark.parametrize("name", ["svmguide1", "fourclass"])
def test_agrees_with_sklearn_where_the_bias_matters(name: str) -> None:
    # svmguide1's features carry offsets: without the bias a linear model scores 79%, not 95%.
    T, V = _split(name)
    r = linear.run(T, V, linear.LinearOptions(seed=0))
    model = _sklearn(T, r.info["C"], dual=False)
    assert np.mean(model.predict(V.X) == r.predicted) >= 0.98


def _start_C(T: Dataset) -> float:
    """LIBLINEAR's first -C value for -s 2: 2^floor(log2(1 / (2 l max ||x||^2))), with the
    bias feature in ||x||^2."""
    sq = np.asarray(T.X.multiply(T.X).sum(axis=1)).ravel()
    max_sq = float(sq.max()) + engines.BIAS**2
    return 2.0 ** math.floor(math.log2(1.0 / (2 * T.rows * max_sq)))


@pytest.mark.parametrize("name", ["heart_scale", "german.numer", "fourclass"])
def test_C_is_one_of_the_search_values(name: str) -> None:
    T, V = _split(name)
    C = linear.run(T, V, linear.LinearOptions(seed=0)).info["C"]
    start = _start_C(T)
    steps = math.log2(C / start)
    assert steps == int(steps) and steps >= 0, f"C={C} is not start_C={start} times 2^k"
    assert start <= C <= MAX_C


def test_C_is_the_best_of_its_own_cross_validation(heart) -> None:
    # The reported CV accuracy is the -C search's, at the chosen C.
    T, _, r = heart
    C, cv = engines.search_C(engines.Problem.from_data(T.X, T.y), seed=0)
    assert (C, cv) == (r.info["C"], r.cv_accuracy)


def test_dense_and_sparse_input_give_the_same_result(heart) -> None:
    T, V, sparse = heart
    dense = linear.run(
        Dataset(T.X.toarray(), T.y), Dataset(V.X.toarray(), V.y), linear.LinearOptions(seed=0)
    )
    assert dense.info == sparse.info and dense.cv_accuracy == sparse.cv_accuracy
    np.testing.assert_array_equal(dense.predicted, sparse.predicted)
    np.testing.assert_allclose(dense.scores, sparse.scores, rtol=1e-12, atol=1e-15)


def test_trains_on_T_only(heart) -> None:
    T, V, r = heart
    flipped = linear.run(T, Dataset(V.X, -V.y), linear.LinearOptions(seed=0))
    assert flipped.info == r.info
    np.testing.assert_array_equal(flipped.predicted, r.predicted)
    np.testing.assert_array_equal(flipped.correct, ~r.correct)
    assert flipped.val_accuracy == pytest.approx(1.0 - r.val_accuracy)


def test_the_caller_arrays_are_left_alone(heart) -> None:
    # The binding sorts CSR indices in place; T's rows with reversed indices must stay so.
    T, V, r = heart
    X = T.X.copy()
    for i in range(X.shape[0]):
        a, b = X.indptr[i], X.indptr[i + 1]
        X.indices[a:b] = X.indices[a:b][::-1].copy()
        X.data[a:b] = X.data[a:b][::-1].copy()
    X.has_sorted_indices = False
    before = (X.indices.copy(), X.data.copy())
    out = linear.run(Dataset(X, T.y), V, linear.LinearOptions(seed=0))
    np.testing.assert_array_equal(X.indices, before[0])
    np.testing.assert_array_equal(X.data, before[1])
    assert out.info == r.info
    np.testing.assert_array_equal(out.predicted, r.predicted)


def test_the_seed_fixes_the_folds(heart) -> None:
    T, V, r = heart
    again = linear.run(T, V, linear.LinearOptions(seed=0))
    assert (again.info, again.cv_accuracy) == (r.info, r.cv_accuracy)


def test_multiclass_one_vs_rest(rng: np.random.Generator) -> None:
    # Three separated blobs: one-vs-rest finds them all.
    centres = np.array([[0.0, 3.0], [3.0, -2.0], [-3.0, -2.0]])
    y = np.repeat([1.0, 2.0, 3.0], 60)
    X = centres[(y - 1).astype(int)] + rng.normal(scale=0.4, size=(180, 2))
    train, val = stratified_split(y, seed=0)
    T = Dataset(sp.csr_matrix(X[train]), y[train])
    V = Dataset(sp.csr_matrix(X[val]), y[val])
    r = linear.run(T, V, linear.LinearOptions(seed=0))
    # Per-point scores exist for two classes (AUC ranks them); three have no single one.
    assert r.scores is None
    assert r.val_accuracy >= 0.95
    model = _sklearn(T, r.info["C"], dual=False)
    assert np.mean(model.predict(V.X) == r.predicted) >= 0.98
