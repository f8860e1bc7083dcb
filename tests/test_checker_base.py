"""The checkers' contract (kcheck/checkers/base.py): scoring, guarding, the context."""

from __future__ import annotations

import time

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import DATASETS

from kcheck.bindings import engines
from kcheck.checkers.base import CheckerResult, Context, Dataset, guarded, score
from kcheck.defaults import Event
from kcheck.errors import EngineError, KcheckError, TimeLimitReached
from kcheck.io.data import read_libsvm
from kcheck.scaling.fitting import fit_scaler
from kcheck.tuning import linear_c as tuning


@pytest.fixture(scope="module")
def heart() -> tuple[Dataset, Dataset, engines.LinearModel]:
    """heart_scale cut in two (first 200 rows train, the rest score), and a model on the first."""
    y, X = read_libsvm(str(DATASETS / "heart_scale"))
    X = fit_scaler(X, method="maxabs").transform(X)
    T, V = Dataset(X[:200], y[:200]), Dataset(X[200:], y[200:])
    model, _ = tuning.fit_linear(T.X, T.y, seed=0)
    return T, V, model


def _tiny() -> Dataset:
    X = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]]))
    return Dataset(X, np.array([1.0, -1.0, 1.0, -1.0]))


# --- score ----------------------------------------------------------------------------------------


def test_score_with_a_plain_function() -> None:
    V = _tiny()
    calls: list[int] = []

    def predict(X: sp.csr_matrix) -> np.ndarray:
        calls.append(X.shape[0])
        return np.where(np.asarray(X[:, 0].todense()).ravel() > 0, 1.0, -1.0)

    s = score(predict, V)
    assert calls == [4]  # V is predicted once
    np.testing.assert_array_equal(s.predicted, [1.0, -1.0, 1.0, -1.0])
    np.testing.assert_array_equal(s.correct, [True, True, True, True])
    assert s.accuracy == 1.0 and s.scores is None


def test_score_counts_mistakes() -> None:
    V = _tiny()
    s = score(lambda X: np.ones(X.shape[0]), V)
    np.testing.assert_array_equal(s.correct, V.y == 1.0)
    assert s.accuracy == 0.5


def test_score_with_an_object_with_predict() -> None:
    class Constant:
        def predict(self, X: sp.csr_matrix) -> np.ndarray:
            return np.full(X.shape[0], -1.0)

    s = score(Constant(), _tiny())
    np.testing.assert_array_equal(s.predicted, [-1.0] * 4)
    assert s.accuracy == 0.5 and s.scores is None


def test_score_prefers_predict_over_calling_the_object() -> None:
    class Both:
        def __call__(self, X: sp.csr_matrix) -> np.ndarray:
            raise AssertionError("the object itself must not be called")

        def predict(self, X: sp.csr_matrix) -> np.ndarray:
            return np.ones(X.shape[0])

    assert score(Both(), _tiny()).accuracy == 0.5


def test_score_records_decision_values_of_a_real_model(heart) -> None:
    _, V, model = heart
    s = score(model, V)
    assert s.scores is not None
    # Two classes: each point's decision value for the larger label (LIBLINEAR's own sign
    # means its first label, whichever that is).
    dec = model.decision_function(V.X)[:, 0]
    first, second = model.labels
    np.testing.assert_allclose(s.scores, dec if first > second else -dec)
    np.testing.assert_array_equal(s.predicted, model.predict(V.X))
    np.testing.assert_array_equal(s.correct, model.predict(V.X) == V.y)
    assert s.accuracy == pytest.approx(np.mean(model.predict(V.X) == V.y))
    np.testing.assert_array_equal(
        s.predicted, np.where(s.scores > 0, max(first, second), min(first, second))
    )


def test_score_with_the_bound_predict_has_no_scores(heart) -> None:
    _, V, model = heart
    with_scores, labels_only = score(model, V), score(model.predict, V)
    assert labels_only.scores is None
    np.testing.assert_array_equal(labels_only.predicted, with_scores.predicted)
    assert labels_only.accuracy == with_scores.accuracy


def test_score_of_no_rows_is_nan() -> None:
    empty = Dataset(sp.csr_matrix((0, 2)), np.empty(0))
    s = score(lambda X: np.empty(0), empty)
    assert s.correct.size == 0 and np.isnan(s.accuracy)


# --- guarded --------------------------------------------------------------------------------------


def _ok() -> CheckerResult:
    return CheckerResult(name="x", status="ok", val_accuracy=0.9)


def test_guarded_returns_what_the_checker_returns() -> None:
    r = _ok()
    assert guarded("x", None, lambda: r) is r
    assert guarded("x", time.perf_counter() + 60, lambda: r) is r


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (KcheckError("too wide for the budget"), "too wide for the budget"),
        (EngineError("LIBLINEAR: bad"), "LIBLINEAR: bad"),
        (MemoryError(), "ran out of memory"),
        (TimeLimitReached(), "time limit"),
    ],
)
def test_guarded_turns_failures_into_a_skip(error: BaseException, reason: str) -> None:
    def fail() -> CheckerResult:
        time.sleep(0.01)
        raise error

    r = guarded("degree2", None, fail)
    assert r.status == "skipped" and r.name == "degree2"
    assert r.reason == reason
    assert r.seconds > 0  # the time spent before the failure is kept
    assert r.correct is None and r.val_accuracy is None and r.predict is None


def test_guarded_lets_a_bug_through() -> None:
    def bug() -> CheckerResult:
        raise ValueError("a bug keeps its traceback")

    with pytest.raises(ValueError, match="traceback"):
        guarded("x", None, bug)


def test_guarded_skips_without_calling_after_the_deadline() -> None:
    called: list[bool] = []

    def fn() -> CheckerResult:
        called.append(True)
        return _ok()

    r = guarded("multilinear", time.perf_counter() - 0.001, fn)
    assert called == []
    assert (r.name, r.status, r.reason, r.seconds) == ("multilinear", "skipped", "time limit", 0.0)


# --- Context, CheckerResult -----------------------------------------------------------------------


def _context(deadline: float | None) -> Context:
    base = CheckerResult(name="linear", status="ok", seconds=0.5, info={"C": 0.25})
    return Context(
        seed=0, jobs=1, epsilon=0.02, memory_limit=2**30, deadline=deadline, baseline=base
    )


def test_seconds_left_without_a_deadline_is_none() -> None:
    assert _context(None).seconds_left() is None


def test_seconds_left_counts_down() -> None:
    ctx = _context(time.perf_counter() + 30.0)
    first = ctx.seconds_left()
    assert first is not None and 0 < first <= 30.0
    time.sleep(0.01)
    second = ctx.seconds_left()
    assert second is not None and second < first


def test_seconds_left_is_negative_past_the_deadline() -> None:
    left = _context(time.perf_counter() - 2.0).seconds_left()
    assert left is not None and left <= -2.0


def test_context_gives_the_baseline_C_and_defaults() -> None:
    ctx = _context(None)
    assert ctx.baseline_C == 0.25 and isinstance(ctx.baseline_C, float)
    assert ctx.progress(Event("stage", 1, 2)) is None


def test_checker_result_skipped() -> None:
    r = CheckerResult.skipped("rff", "not enough memory", 1.5)
    assert (r.name, r.status, r.reason, r.seconds) == ("rff", "skipped", "not enough memory", 1.5)
    assert r.val_accuracy is None and r.correct is None and r.cv_accuracy is None
    assert r.predicted is None and r.scores is None and r.info == {}
    assert CheckerResult.skipped("rff", "why").seconds == 0.0


def test_checker_results_do_not_share_info() -> None:
    a, b = CheckerResult.skipped("a", "r"), CheckerResult.skipped("b", "r")
    a.info["k"] = 1
    assert b.info == {}


def test_dataset_rows() -> None:
    assert _tiny().rows == 4
    assert Dataset(sp.csr_matrix((0, 3)), np.empty(0)).rows == 0
