import ast
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from kcheck.bindings import engines
from kcheck.errors import EngineError, KcheckError
from kcheck.modelfiles import load as model_load
from kcheck.tuning import linear_c as tuning


def _blobs(rng, n=300, classes=(-1.0, 1.0), dim=5):
    y = np.repeat(np.array(classes), n // len(classes))
    centers = rng.normal(scale=3.0, size=(len(classes), dim))
    X = centers[np.searchsorted(np.array(classes), y)] + rng.normal(size=(y.size, dim))
    return X, y


@pytest.mark.parametrize("sparse", [False, True])
def test_numpy_prediction_matches_binding(rng, sparse):
    from liblinear.liblinearutil import predict

    for classes in ((-1.0, 1.0), (0.0, 1.0, 2.0, 5.0)):
        X, y = _blobs(rng, classes=classes)
        Xin = sp.csr_matrix(X) if sparse else X
        model, cv = tuning.fit_linear(Xin, y, seed=0)
        assert cv is not None and 0.5 < cv <= 1.0
        ours = model.predict(sp.csr_matrix(X))
        theirs, _, _ = predict(y, sp.csr_matrix(X), model._raw, "-q")
        assert np.array_equal(ours, np.array(theirs))


def test_search_is_deterministic_and_prints_nothing(rng, capfd):
    X, y = _blobs(rng)
    X = X + rng.normal(scale=3.0, size=X.shape)  # overlap, so C matters
    runs = [tuning.fit_linear(X, y, seed=7) for _ in range(3)]
    assert len({(m.C, cv) for m, cv in runs}) == 1
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_caller_indices_are_not_reordered(rng):
    D = rng.normal(size=(40, 6))
    X = sp.csr_matrix(D)
    X.indices[:6] = X.indices[:6][::-1].copy()
    X.data[:6] = X.data[:6][::-1].copy()
    X.has_sorted_indices = False
    before = X.indices.copy()
    y = np.tile([1.0, -1.0], 20)
    tuning.fit_linear(X, y, seed=0, C=1.0)
    assert np.array_equal(X.indices, before)


def test_indices_sorted_sees_through_stale_flag():
    X = sp.csr_matrix(np.array([[1.0, 2.0, 0.0], [0.0, 3.0, 4.0]]))
    assert engines.indices_sorted(X)
    X.indices[0], X.indices[1] = X.indices[1], X.indices[0]
    assert not engines.indices_sorted(X)


def test_too_few_rows_for_cv():
    with pytest.raises(EngineError):
        tuning.fit_linear(np.eye(3), np.array([1.0, -1.0, 1.0]), seed=0)


def test_load_model_failure_is_an_error(tmp_path, capfd):
    bad = tmp_path / "bad.model"
    bad.write_text("not a model\n")
    with pytest.raises(KcheckError, match="not a LIBLINEAR or LIBSVM model"):
        model_load.load_model(str(bad))
    assert capfd.readouterr() == ("", "")


def test_save_and_load_round_trip(rng, tmp_path):
    X, y = _blobs(rng)
    model, _ = tuning.fit_linear(X, y, seed=0)
    path = tmp_path / "m.model"
    model.save(str(path))
    loaded = model_load.load_model(str(path))
    assert np.array_equal(loaded.predict(sp.csr_matrix(X)), model.predict(sp.csr_matrix(X)))


def test_compacted_model_predicts_like_a_full_one(rng):
    # Two used columns in a width of 5,000: LIBLINEAR trains on the two, and the model
    # scores full-width (and narrower) data as if it had all columns.
    n = 200
    X = sp.lil_matrix((n, 5000))
    a, b = rng.normal(size=n), rng.normal(size=n)
    X[:, 10] = a[:, None]
    X[:, 4000] = b[:, None]
    X = sp.csr_matrix(X)
    y = np.where(a + b > 0, 1.0, -1.0)
    compact, _ = tuning.fit_linear(X, y, seed=0, C=1.0)
    full, _ = tuning.fit_linear(X, y, seed=0, C=1.0, compact=False)
    assert compact.columns is not None and list(compact.columns) == [10, 4000]
    assert full.columns is None and full.weights.shape[0] == 5000
    np.testing.assert_allclose(
        compact.decision_function(X), full.decision_function(X), rtol=1e-6, atol=1e-9
    )
    narrow = X[:, :100]
    assert np.array_equal(compact.predict(narrow), full.predict(narrow))


def test_a_compacted_model_saves_at_full_width(rng, tmp_path):
    """Trained on the columns in use, written as LIBLINEAR would write the full-width model."""
    n = 300
    X = sp.lil_matrix((n, 5000))
    a, b = rng.normal(size=n), rng.normal(size=n)
    X[:, 10] = a[:, None]
    X[:, 4000] = b[:, None]
    X = sp.csr_matrix(X)
    y = np.where(a - b > 0.2, 1.0, -1.0)
    compact, _ = tuning.fit_linear(X, y, seed=0)
    full, _ = tuning.fit_linear(X, y, seed=0, compact=False)
    assert compact.columns is not None and compact.C == full.C
    compact.save(str(tmp_path / "compact.model"))
    full.save(str(tmp_path / "full.model"))
    a_text = (tmp_path / "compact.model").read_text().splitlines()
    b_text = (tmp_path / "full.model").read_text().splitlines()
    assert a_text[:6] == b_text[:6] and len(a_text) == len(b_text) == 6 + 5001
    a_w = np.array([float(v) for v in a_text[6:]])
    b_w = np.array([float(v) for v in b_text[6:]])
    assert np.count_nonzero(a_w) == 3  # columns 10 and 4000 and the bias
    np.testing.assert_allclose(a_w, b_w, rtol=1e-6, atol=1e-12)
    loaded = model_load.load_model(str(tmp_path / "compact.model"))
    assert np.array_equal(loaded.predict(X), full.predict(X))


def test_engines_stands_on_its_helpers_alone():
    """engines.py holds the binding calls only: what they take, their C state and a linear
    model's numpy side come from below it, and nothing above the bindings comes in."""
    tree = ast.parse(Path(engines.__file__).read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    ours = {m for m in imported if m.split(".")[0] == "kcheck"}
    helpers = {
        "kcheck.bindings.inputs",
        "kcheck.bindings.c_runtime",
        "kcheck.errors",
        "kcheck.bindings.linear_weights",
    }
    assert ours <= helpers


def test_a_warm_start_is_the_solution_it_starts_from(rng):
    """train_linear's ``start`` hands LIBLINEAR the earlier solution: at the same C, on a fold
    problem pointing into the whole one, it gives the model it starts from."""
    X, y = _blobs(rng)
    X = X + rng.normal(scale=3.0, size=X.shape)
    problem = engines.Problem.from_data(X, y)
    rows = np.arange(0, y.size, 2)
    fold = engines.fold_problem(problem, rows, ())
    cold = engines.train_linear(fold, 0.5)
    alone = engines.train_linear(engines.Problem.from_data(X[rows], y[rows]), 0.5)
    assert np.array_equal(cold.weights, alone.weights)
    warm = engines.train_linear(fold, 0.5, start=cold)
    np.testing.assert_allclose(warm.weights, cold.weights, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("sparse", [False, True])
def test_libsvm_iterations_are_counted_the_same_every_time(rng, sparse):
    """LIBSVM's "#iter" lines, summed: a training at a large C on overlapping classes does
    many times the iterations of one at a small C, a CV counts every fold, and the same call
    counts the same again (a count, not a clock)."""
    # A checkerboard, which a wide kernel (gamma 1 on [-1, 1]^2) fits only at a large C.
    X = rng.uniform(-1.0, 1.0, size=(400, 2))
    y = np.where(np.sin(4 * X[:, 0]) * np.sin(4 * X[:, 1]) > 0, 1.0, -1.0)
    problem = engines.SvmProblem.from_data(sp.csr_matrix(X) if sparse else X, y)

    def iterations(call):
        before = engines.svm_iterations()
        call()
        return engines.svm_iterations() - before

    small = iterations(lambda: engines.train_rbf(problem, 1.0, 1.0))
    large = iterations(lambda: engines.train_rbf(problem, 2.0**11, 1.0))
    assert 0 < small and 50 * small < large
    assert iterations(lambda: engines.train_rbf(problem, 2.0**11, 1.0)) == large
    cv = iterations(lambda: engines.cv_rbf(problem, 1.0, 1.0, folds=5, seed=0))
    # Five trainings on four fifths of the rows each: about four times one on all of them.
    assert 2 * small < cv < 8 * small


@pytest.mark.parametrize("sparse", [False, True])
def test_libsvm_support_vectors_are_counted_as_each_model_keeps_them(rng, sparse):
    """The "Total nSV" lines, summed: a training counts its model's support vectors, more
    where the classes overlap (a small C on a checkerboard keeps nearly every row) than on
    separated ones, and a CV, trained side by side or not, counts every fold's."""
    X = rng.uniform(-1.0, 1.0, size=(engines.SIDE_BY_SIDE_MIN_ROWS + 100, 2))
    board = np.where(np.sin(4 * X[:, 0]) * np.sin(4 * X[:, 1]) > 0, 1.0, -1.0)
    apart = np.where(X[:, 0] > 0, 1.0, -1.0)

    def counted(call):
        before = engines.svm_support_vectors()
        out = call()
        return out, engines.svm_support_vectors() - before

    for labels in (board, apart):
        problem = engines.SvmProblem.from_data(sp.csr_matrix(X) if sparse else X, labels)
        model, n = counted(lambda p=problem: engines.train_rbf(p, 1.0, 1.0))
        assert n == model.n_sv > 0
    overlap = engines.SvmProblem.from_data(X, board)
    separated = engines.SvmProblem.from_data(X, apart)
    assert counted(lambda: engines.train_rbf(overlap, 0.5, 1.0))[1] > 0.75 * X.shape[0]
    assert counted(lambda: engines.train_rbf(separated, 2.0**7, 1.0))[1] < 0.25 * X.shape[0]
    kernel = engines.KernelProblem.from_kernel(
        np.exp(-1.0 * engines.squared_distances(sp.csr_matrix(X))), board
    )
    folds = [
        counted(lambda w=w: engines.cv_kernel_predictions(kernel, 1.0, folds=5, seed=0, workers=w))
        for w in (1, 2)
    ]
    assert folds[0][1] == folds[1][1] > counted(lambda: engines.train_rbf(overlap, 1.0, 1.0))[1]


def _kernel_problem(rng, rows, labels, class_weight=None):
    """A precomputed RBF kernel of ``rows`` random rows, labels drawn from ``labels``."""
    X = rng.normal(size=(rows, 6))
    K = np.exp(-0.2 * engines.squared_distances(sp.csr_matrix(X)))
    y = rng.choice(np.asarray(labels, dtype=np.float64), size=rows)
    return engines.KernelProblem.from_kernel(K, y, class_weight)


@pytest.mark.parametrize(
    "labels",
    [(-1, 1), (1, -1), (0, 1), (3, 7, 9), (2, -1, 5, 1), (1.5, -0.5)],
    ids=["minus-first", "plus-first", "zero-one", "three", "four", "fractional"],
)
def test_folds_side_by_side_give_libsvms_own_cv(rng, labels):
    """LIBSVM's stratified folds drawn here, in its order (labels cast to int, -1 / +1
    swapped, each class shuffled), then trained in two threads: every prediction is that of
    svm_cross_validation itself, at every seed and C, so --jobs changes no result."""
    rows = engines.SIDE_BY_SIDE_MIN_ROWS + 37  # an uneven split into folds
    problem = _kernel_problem(rng, rows, labels)
    for C, seed, folds in ((0.5, 0, 5), (32.0, 3, 5), (4.0, 7, 3)):
        alone = engines.cv_kernel_predictions(problem, C, folds=folds, seed=seed)
        side = engines.cv_kernel_predictions(problem, C, folds=folds, seed=seed, workers=2)
        np.testing.assert_array_equal(side, alone)


def test_folds_side_by_side_keep_class_weights_and_count_iterations(rng):
    """Class weights (``-wi``, the balanced metric) train every fold side by side too, and
    LIBSVM's iterations, printed from the threads, are all counted."""
    weights = ((0.0, 3.0), (1.0, 1.0))  # the rarer class weighs more, as balanced gives it
    problem = _kernel_problem(rng, engines.SIDE_BY_SIDE_MIN_ROWS, (0, 1, 1, 1), weights)
    assert problem.weights

    def run(workers):
        before = engines.svm_iterations()
        out = engines.cv_kernel_predictions(problem, 8.0, folds=5, seed=1, workers=workers)
        return out, engines.svm_iterations() - before

    (alone, n_alone), (side, n_side) = run(1), run(2)
    np.testing.assert_array_equal(side, alone)
    assert n_side == n_alone > 0


def test_libsvm_cv_order_is_a_stratified_partition(rng):
    """Every row in exactly one fold, and each class spread over the folds within one row."""
    y = rng.choice([1.0, 2.0, 3.0], size=103, p=[0.6, 0.3, 0.1])
    engines.seed_c_rand(0)
    perm, start = engines.libsvm_cv_order(y, 5)
    assert sorted(perm.tolist()) == list(range(103))
    assert start[0] == 0 and start[-1] == 103
    for label in (1.0, 2.0, 3.0):
        per_fold = [np.count_nonzero(y[perm[start[i] : start[i + 1]]] == label) for i in range(5)]
        assert max(per_fold) - min(per_fold) <= 1


@pytest.mark.parametrize("workers", [1, 2])
def test_side_by_side_runs_every_call_once_and_raises_the_first_error(workers):
    """kcheck.bindings.c_runtime.side_by_side: every index once (in order where one thread), and a
    failing call's exception reaches the caller, as a fold's EngineError must."""
    from kcheck.bindings.c_runtime import side_by_side

    seen: list[int] = []
    side_by_side(seen.append, 5, workers)
    assert sorted(seen) == list(range(5)) and (workers > 1 or seen == list(range(5)))

    def fails_at_three(i: int) -> None:
        if i == 3:
            raise EngineError("LIBSVM failed to train a model")

    with pytest.raises(EngineError, match="failed to train"):
        side_by_side(fails_at_three, 5, workers)
