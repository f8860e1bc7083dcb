"""The MultiLinear checker (kcheck/checkers/multilinear.py): k-means on T, one LIBLINEAR model
per cluster, nearest-center prediction."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import make_context, planned
from hypothesis import given
from hypothesis import strategies as st

from kcheck.checkers import kmeans as km
from kcheck.checkers import linear, multilinear
from kcheck.checkers.base import CheckerResult, Dataset
from kcheck.checkers.multilinear import ClusterModel, MultiLinearModel, MultiLinearOptions
from kcheck.costs import solvers as solver_costs
from kcheck.defaults import Event
from kcheck.errors import TimeLimitReached
from kcheck.split import stratified_split
from kcheck.tuning import linear_c as tuning


def _xor(rows: int = 2000, seed: int = 12345) -> tuple[np.ndarray, np.ndarray]:
    """Four quadrants, opposite ones sharing a label; some coordinates exactly 0 (sparse)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(rows, 2))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    X[rng.random(size=X.shape) < 0.05] = 0.0
    return X, y


@pytest.fixture(scope="module")
def xor() -> tuple[Dataset, Dataset, Dataset, Dataset]:
    """T and V as CSR, and the same rows dense."""
    X, y = _xor()
    train, val = stratified_split(y, seed=0)
    return (
        Dataset(sp.csr_matrix(X[train]), y[train]),
        Dataset(sp.csr_matrix(X[val]), y[val]),
        Dataset(X[train], y[train]),
        Dataset(X[val], y[val]),
    )


@pytest.fixture(scope="module")
def xor_runs(xor) -> tuple[CheckerResult, CheckerResult]:
    T, V, _, _ = xor
    base = linear.run(T, V, linear.LinearOptions(seed=0))
    ml = multilinear.run(T, V, MultiLinearOptions(seed=0, fallback_C=base.info["C"]))
    return base, ml


def test_beats_the_linear_model_on_xor(xor_runs) -> None:
    base, ml = xor_runs
    assert base.val_accuracy < 0.65  # no line separates XOR
    assert ml.val_accuracy > 0.9
    assert ml.val_accuracy - base.val_accuracy > 0.3


def test_result_contract(xor, xor_runs) -> None:
    T, V, _, _ = xor
    _, ml = xor_runs
    assert ml.name == "multilinear" and ml.status == "ok"
    assert ml.correct is not None and ml.correct.shape == (V.rows,)
    np.testing.assert_array_equal(ml.correct, ml.predicted == V.y)
    assert ml.val_accuracy == pytest.approx(ml.correct.mean())
    assert set(np.unique(ml.predicted)) <= set(np.unique(T.y))
    assert ml.scores is None  # clusters' decision values are not on one scale
    assert ml.predict is not None
    np.testing.assert_array_equal(ml.predict(V.X), ml.predicted)


def test_cluster_counts(xor, xor_runs) -> None:
    T, _, _, _ = xor
    _, ml = xor_runs
    info = ml.info
    assert 2 <= info["clusters"] <= km.n_clusters(T.rows)
    # Quadrants are single-class: many clusters fall inside one.
    assert 1 <= info["single_class_clusters"] < info["clusters"]
    assert 0 <= info["untuned_clusters"] <= info["clusters"] - info["single_class_clusters"]


def test_its_prediction_is_revised_from_the_clusters_k_means_made(
    xor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``revised_seconds``: kcheck.costs.solvers.clusters_seconds of the clusters' own rows, stored
    values and classes, once k-means has run (kcheck.plan.done_share compares the stage with
    it): every row of T in one cluster, and the same from dense and sparse input."""
    seen: list[list[tuple[int, int, int]]] = []
    real = solver_costs.clusters_seconds

    def clusters_seconds(clusters, width, kmeans):  # type: ignore[no-untyped-def]
        seen.append(list(clusters))
        return real(seen[-1], width, kmeans)

    monkeypatch.setattr(solver_costs, "clusters_seconds", clusters_seconds)
    T, V, Td, Vd = xor
    revised = []
    for train, val in ((T, V), (Td, Vd)):
        ml = multilinear.run(train, val, MultiLinearOptions(seed=0))
        got = seen[-1]
        assert sum(r for r, _, _ in got) == T.rows
        assert sum(n for _, n, _ in got) == sp.csr_matrix(T.X).nnz
        assert all(k in (1, 2) for _, _, k in got) and any(k == 1 for _, _, k in got)
        revised.append(ml.info["revised_seconds"])
        kmeans = solver_costs.kmeans_seconds(
            sp.csr_matrix(T.X).nnz, T.rows, km.n_clusters(T.rows), km.N_ITER
        )
        # Rounded to the millisecond in the JSON.
        assert revised[-1] == pytest.approx(real(got, T.X.shape[1], kmeans), abs=5e-4)
    assert revised[0] == revised[1] > 0


# --- K --------------------------------------------------------------------------------------------


def _paper_k(rows: int) -> int:
    return max(4, math.floor(5 * math.log(rows)))


@pytest.mark.parametrize(
    ("rows", "k"),
    [(0, 0), (1, 1), (3, 2), (100, 2), (150, 3), (1000, 20), (1900, 37), (10_000, 46)],
)
def test_n_clusters_by_hand(rows: int, k: int) -> None:
    assert km.n_clusters(rows) == k


@given(st.integers(1, 10**7))
def test_n_clusters_is_the_paper_capped_by_cluster_size(rows: int) -> None:
    k = km.n_clusters(rows)
    cap = max(2, rows // km.MIN_CLUSTER_ROWS)
    assert k == min(rows, _paper_k(rows), cap)
    assert 1 <= k <= rows
    if rows >= 2000:  # above about 1,900 rows the cap does not bite
        assert k == _paper_k(rows)


def test_check_asks_for_the_k_of_T(xor, monkeypatch: pytest.MonkeyPatch) -> None:
    """k-means runs with K from T's size, as a stage of its own; the clusters' trainings are
    then announced with their prediction from the clusters it made (the revised prediction
    less k-means), and count the clusters as they train."""
    T, V, _, _ = xor
    base = linear.run(T, V, linear.LinearOptions(seed=0))
    asked: list[int] = []
    real = km.kmeans

    def kmeans(X, k, **kw):  # type: ignore[no-untyped-def]
        asked.append(k)
        return real(X, k, **kw)

    monkeypatch.setattr(km, "kmeans", kmeans)
    events: list[Event] = []
    ctx = make_context(baseline=base, progress=events.append)
    r = multilinear.check(T, V, ctx, planned("multilinear", T, V))
    k = km.n_clusters(T.rows)
    assert asked == [k]
    first, rest = events[0], events[1:]
    assert first.stage == multilinear.KMEANS_STAGE and first.total is None
    assert first.predicted_seconds == pytest.approx(
        solver_costs.kmeans_seconds(sp.csr_matrix(T.X).nnz, T.rows, k, km.N_ITER)
    )
    n = r.info["clusters"]
    assert {e.stage for e in rest} == {multilinear.training_stage(n)}
    assert [e.done for e in rest] == list(range(n + 1)) and {e.total for e in rest} == {n}
    trainings = rest[0].predicted_seconds
    assert trainings is not None and trainings > 0
    assert {e.predicted_seconds for e in rest} == {trainings}
    assert trainings + first.predicted_seconds == pytest.approx(r.info["revised_seconds"], abs=5e-4)


def test_an_explicit_k_is_used(xor) -> None:
    T, V, _, _ = xor
    r = multilinear.run(T, V, MultiLinearOptions(seed=0, n_clusters=4))
    assert r.info["clusters"] <= 4


# --- single-class clusters ------------------------------------------------------------------------


def test_a_single_class_cluster_predicts_its_constant() -> None:
    X = sp.csr_matrix(np.arange(12.0).reshape(6, 2))
    fitted = multilinear._fit_cluster(X, np.full(6, 7.0), seed=0, fallback_C=1.0)
    assert fitted.constant == 7.0 and fitted.weights is None and fitted.rows == 6
    np.testing.assert_array_equal(fitted.predict(sp.csr_matrix(np.ones((3, 2)))), [7.0] * 3)


def test_a_small_cluster_uses_the_fallback_C(rng: np.random.Generator) -> None:
    rows = multilinear.MIN_CV_ROWS - 1
    X = sp.csr_matrix(rng.normal(size=(rows, 2)))
    y = np.where(np.arange(rows) % 2 == 0, 1.0, -1.0)
    fitted = multilinear._fit_cluster(X, y, seed=0, fallback_C=0.125)
    assert fitted.C == 0.125 and not fitted.tuned and fitted.constant is None
    big = multilinear.MIN_CV_ROWS
    X = sp.csr_matrix(rng.normal(size=(big, 2)))
    y = np.where(np.arange(big) % 2 == 0, 1.0, -1.0)
    assert multilinear._fit_cluster(X, y, seed=0, fallback_C=0.125).tuned


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_fallback_C_is_asked_for_once_and_only_for_a_cluster_too_small_to_tune(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    """The baseline may still be training beside MultiLinear: its C is awaited only when a
    cluster too small for a C search comes, and then gives the models a given C gives."""
    monkeypatch.setattr(multilinear, "MIN_PARALLEL_NNZ", 0)
    X = sp.csr_matrix(rng.normal(size=(300, 3)))
    y = np.where(X.toarray()[:, 0] + 0.3 * rng.normal(size=300) > 0, 1.0, -1.0)
    T = Dataset(X, y)
    small = multilinear.MIN_CV_ROWS - 2
    members = [np.arange(0, 150), np.arange(150, 150 + small), np.arange(150 + small, 300)]
    asked: list[int] = []

    def fallback() -> float:
        asked.append(1)
        return 0.125

    lazy = multilinear._fit_all(
        T, members, MultiLinearOptions(seed=1, jobs=jobs, fallback=fallback), None
    )
    given = multilinear._fit_all(
        T, members, MultiLinearOptions(seed=1, jobs=jobs, fallback_C=0.125), None
    )
    assert asked == [1]
    assert lazy[1].C == 0.125 and not lazy[1].tuned
    for a, b in zip(lazy, given, strict=True):
        assert (a.C, a.tuned, a.rows) == (b.C, b.tuned, b.rows)
        np.testing.assert_array_equal(a.weights, b.weights)
    asked.clear()
    multilinear._fit_all(
        T, [members[0], members[2]], MultiLinearOptions(seed=1, jobs=jobs, fallback=fallback), None
    )
    assert asked == []


def test_single_class_clusters_in_a_run(rng: np.random.Generator) -> None:
    # Two far-apart blobs, one class each, plus a mixed blob: the pure ones predict constants.
    a = rng.normal(loc=(-20.0, 0.0), scale=0.5, size=(150, 2))
    b = rng.normal(loc=(20.0, 0.0), scale=0.5, size=(150, 2))
    c = rng.normal(loc=(0.0, 20.0), scale=0.5, size=(150, 2))
    X = np.vstack([a, b, c])
    y = np.concatenate([np.full(150, 1.0), np.full(150, -1.0), np.where(c[:, 0] > 0, 1.0, -1.0)])
    T = Dataset(sp.csr_matrix(X), y)
    r = multilinear.run(T, T, MultiLinearOptions(seed=0, n_clusters=3))
    assert r.info["clusters"] == 3 and r.info["single_class_clusters"] == 2
    np.testing.assert_array_equal(r.predicted[:300], y[:300])


# --- nearest-center prediction --------------------------------------------------------------------


def _linear_cluster(w: list[float], b: float) -> ClusterModel:
    """A cluster whose model says +1 where w.x + b > 0, else -1."""
    return ClusterModel(
        rows=10,
        weights=np.array(w, dtype=np.float64).reshape(-1, 1),
        bias_weights=np.array([b]),
        labels=np.array([1.0, -1.0]),
        C=1.0,
    )


def test_prediction_uses_the_nearest_center() -> None:
    model = MultiLinearModel(
        centers=np.array([[0.0, 0.0], [10.0, 10.0], [10.0, -10.0]]),
        clusters=[
            ClusterModel(rows=5, constant=3.0),
            ClusterModel(rows=5, constant=4.0),
            _linear_cluster([0.0, 1.0], 10.0),  # +1 above y = -10
        ],
    )
    X = sp.csr_matrix(
        np.array([[1.0, -1.0], [9.0, 11.0], [4.9, 4.9], [5.1, 5.1], [10.0, -9.0], [10.0, -11.0]])
    )
    np.testing.assert_array_equal(model.predict(X), [3.0, 4.0, 3.0, 4.0, 1.0, -1.0])
    np.testing.assert_array_equal(model.predict(X.toarray()), model.predict(X))


def test_prediction_against_brute_force_distances(rng: np.random.Generator) -> None:
    centers = rng.normal(size=(6, 4))
    model = MultiLinearModel(
        centers=centers, clusters=[ClusterModel(rows=1, constant=float(c)) for c in range(6)]
    )
    X = rng.normal(size=(200, 4))
    X[rng.random(size=X.shape) < 0.3] = 0.0
    nearest = np.argmin(((X[:, None, :] - centers[None, :, :]) ** 2).sum(axis=2), axis=1)
    np.testing.assert_array_equal(model.predict(sp.csr_matrix(X)), nearest.astype(float))


def test_centers_over_columns_ignore_the_others() -> None:
    # Centers over columns 0 and 2 of a 4-wide X: columns 1 and 3 do not move a row.
    model = MultiLinearModel(
        centers=np.array([[0.0, 0.0], [5.0, 5.0]]),
        clusters=[ClusterModel(rows=1, constant=1.0), ClusterModel(rows=1, constant=2.0)],
        columns=np.array([0, 2]),
    )
    X = sp.csr_matrix(np.array([[0.0, 100.0, 0.0, 100.0], [5.0, -100.0, 5.0, 0.0]]))
    np.testing.assert_array_equal(model.predict(X), [1.0, 2.0])
    # A narrower X: its absent columns are 0.
    np.testing.assert_array_equal(
        model.predict(sp.csr_matrix(np.array([[8.0], [0.5]]))), [2.0, 1.0]
    )


# --- determinism, parallelism, input kinds --------------------------------------------------------


def test_jobs_1_and_2_give_identical_predictions(xor, monkeypatch: pytest.MonkeyPatch) -> None:
    T, V, _, _ = xor
    options = MultiLinearOptions(seed=3, jobs=1, fallback_C=0.5)
    serial = multilinear.run(T, V, options)
    monkeypatch.setattr(multilinear, "MIN_PARALLEL_NNZ", 0)
    done = [0]

    def tick() -> None:
        done[0] += 1

    parallel = multilinear.run(T, V, MultiLinearOptions(seed=3, jobs=2, fallback_C=0.5), tick)
    assert done[0] == parallel.info["clusters"]
    assert parallel.info == serial.info
    np.testing.assert_array_equal(parallel.predicted, serial.predicted)
    X_all = sp.vstack([T.X, V.X], format="csr")
    np.testing.assert_array_equal(parallel.predict(X_all), serial.predict(X_all))


def test_dense_and_sparse_input_agree(xor, xor_runs) -> None:
    _, _, T_dense, V_dense = xor
    base, sparse = xor_runs
    dense = multilinear.run(T_dense, V_dense, MultiLinearOptions(seed=0, fallback_C=base.info["C"]))
    assert dense.info == sparse.info
    np.testing.assert_array_equal(dense.predicted, sparse.predicted)


def test_the_seed_decides_the_clustering(xor) -> None:
    T, V, _, _ = xor
    a = multilinear.run(T, V, MultiLinearOptions(seed=5, fallback_C=0.5))
    b = multilinear.run(T, V, MultiLinearOptions(seed=5, fallback_C=0.5))
    assert a.info == b.info
    np.testing.assert_array_equal(a.predicted, b.predicted)


def test_trains_on_T_only(xor, xor_runs) -> None:
    T, V, _, _ = xor
    base, ml = xor_runs
    flipped = multilinear.run(
        T, Dataset(V.X, -V.y), MultiLinearOptions(seed=0, fallback_C=base.info["C"])
    )
    np.testing.assert_array_equal(flipped.predicted, ml.predicted)
    assert flipped.val_accuracy < 0.1


def test_a_passed_deadline_stops_training(xor) -> None:
    T, V, _, _ = xor
    with pytest.raises(TimeLimitReached):
        multilinear.run(T, V, MultiLinearOptions(deadline=time.perf_counter() - 1.0))


def test_cluster_models_are_liblinear_models(xor) -> None:
    # A cluster's weights predict as LIBLINEAR trained on the cluster's rows would.
    T, _, _, _ = xor
    rows = np.flatnonzero(T.X.toarray()[:, 0] > 0.5)
    fitted = multilinear._fit_cluster(T.X[rows], T.y[rows], seed=1, fallback_C=1.0)
    if fitted.constant is not None:
        pytest.skip("the chosen rows hold one class")
    direct, _ = tuning.fit_linear(T.X[rows], T.y[rows], seed=1)
    assert fitted.C == direct.C
    np.testing.assert_array_equal(fitted.predict(T.X), direct.predict(T.X))
