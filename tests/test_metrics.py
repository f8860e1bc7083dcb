"""Balanced accuracy, AUC, DeLong's paired interval and Platt scaling against their definitions,
scikit-learn, and simulated nulls."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize
from sklearn.metrics import balanced_accuracy_score, roc_auc_score
from sklearn.utils.class_weight import compute_class_weight

from kcheck import metrics
from kcheck.errors import KcheckError
from kcheck.verdict import Z95, paired_gap

# ---------------------------------------------------------------- weights and balanced accuracy


def test_class_weights_by_hand() -> None:
    # n = 4, classes 0 and 1 present (k = 2), class 2 absent.
    w = metrics.class_weights(np.array([0, 0, 0, 1]), 3)
    assert w == pytest.approx([4 / (2 * 3), 4 / (2 * 1), 0.0])
    # Balanced classes: every weight is 1, so C is unchanged.
    assert metrics.class_weights(np.array([1, 0, 1, 0]), 2) == pytest.approx([1.0, 1.0])


def test_point_weights_by_hand() -> None:
    w = metrics.point_weights(np.array([0, 0, 0, 1]), 3)
    assert w == pytest.approx([1 / 6, 1 / 6, 1 / 6, 1 / 2])


def test_bad_codes_are_refused() -> None:
    with pytest.raises(ValueError):
        metrics.class_weights(np.array([0, 3]), 3)
    with pytest.raises(ValueError):
        metrics.point_weights(np.array([0.5, 1.0]), 2)


def test_balanced_accuracy_by_hand() -> None:
    y = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
    pred = np.array([0, 0, 1, 1, 1, 1, 2, 0, 5])
    # Recalls 2/3, 3/3 and 1/3; the label 5 no point has is just wrong.
    assert metrics.balanced_accuracy(y, pred) == pytest.approx((2 / 3 + 1 + 1 / 3) / 3)
    # Imbalanced: plain accuracy 9/10 for "always 0", balanced accuracy 1/2.
    y = np.array([0] * 9 + [1])
    assert metrics.balanced_accuracy(y, np.zeros(10)) == pytest.approx(0.5)
    assert math.isnan(metrics.balanced_accuracy(np.zeros(0), np.zeros(0)))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 60), st.integers(2, 4))
def test_balanced_accuracy_matches_sklearn(seed: int, n: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    pred = np.where(rng.random(n) < 0.6, y, rng.integers(0, k + 1, n))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn warns about predicted classes absent from y
        expected = balanced_accuracy_score(y, pred)
    assert metrics.balanced_accuracy(y, pred) == pytest.approx(expected, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 80), st.integers(2, 5))
def test_point_weights_give_balanced_accuracy(seed: int, n: int, n_classes: int) -> None:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    pred = np.where(rng.random(n) < 0.5, y, rng.integers(0, n_classes, n))
    w = metrics.point_weights(y, n_classes)
    assert w.sum() == pytest.approx(1.0)
    assert np.sum(w * (y == pred)) == pytest.approx(metrics.balanced_accuracy(y, pred))
    # The -wi multipliers are the point weights scaled to average 1 over the points.
    cw = metrics.class_weights(y, n_classes)
    assert cw[y] == pytest.approx(w * n)
    assert np.all(cw[np.bincount(y, minlength=n_classes) == 0] == 0.0)
    # scikit-learn's class_weight="balanced" is the same rule.
    present = np.unique(y)
    assert cw[present] == pytest.approx(compute_class_weight("balanced", classes=present, y=y))


# ---------------------------------------------------------------------------------------- AUC


def test_auc_by_hand() -> None:
    # Positives 0.9, 0.5, 0.3 against negatives 0.5, 0.2, 0.1: the 9 pairs score
    # 0.9 -> 1+1+1, 0.5 -> 1/2+1+1 (a tie counts 1/2), 0.3 -> 0+1+1; 7.5 of 9.
    positive = np.array([True, True, True, False, False, False])
    scores = np.array([0.9, 0.5, 0.3, 0.5, 0.2, 0.1])
    assert metrics.auc(positive, scores) == pytest.approx(7.5 / 9)
    assert metrics.auc(positive, -scores) == pytest.approx(1.5 / 9)
    assert metrics.auc(positive, np.zeros(6)) == pytest.approx(0.5)


def test_auc_needs_both_classes() -> None:
    with pytest.raises(KcheckError, match="all positive"):
        metrics.auc(np.ones(3, dtype=bool), np.arange(3.0))
    with pytest.raises(KcheckError, match="all negative"):
        metrics.auc_gap(np.zeros(3, dtype=bool), np.arange(3.0), np.arange(3.0))
    with pytest.raises(KcheckError, match="two points of each class"):
        metrics.auc_gap(np.array([True, False, False]), np.arange(3.0), np.arange(3.0))
    with pytest.raises(ValueError):
        metrics.auc(np.array([1, 0]), np.arange(2.0))  # labels, not a bool mask


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.integers(2, 80), st.integers(1, 6))
def test_auc_matches_sklearn_with_ties(seed: int, n: int, levels: int) -> None:
    rng = np.random.default_rng(seed)
    positive = np.zeros(n, dtype=bool)
    positive[rng.choice(n, rng.integers(1, n), replace=False)] = True
    scores = rng.integers(0, levels, n) + positive * rng.integers(0, 2, n)  # many ties
    assert metrics.auc(positive, scores) == pytest.approx(roc_auc_score(positive, scores))


def _delong_direct(
    positive: np.ndarray, a: np.ndarray, b: np.ndarray
) -> tuple[float, float, float]:
    """DeLong, DeLong & Clarke-Pearson (1988) straight from the definition, O(m n)."""
    comps10, comps01, aucs = [], [], []
    for s in (a, b):
        x, y = s[positive], s[~positive]
        psi = (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])
        aucs.append(psi.mean())
        comps10.append(psi.mean(axis=1))  # one per positive
        comps01.append(psi.mean(axis=0))  # one per negative
    m, n = len(comps10[0]), len(comps01[0])
    s10 = np.cov(np.vstack(comps10))
    s01 = np.cov(np.vstack(comps01))
    var = (s10[0, 0] + s10[1, 1] - 2 * s10[0, 1]) / m + (s01[0, 0] + s01[1, 1] - 2 * s01[0, 1]) / n
    return aucs[0], aucs[1], var


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.integers(4, 60), st.booleans())
def test_auc_gap_matches_direct_delong(seed: int, n: int, tied: bool) -> None:
    rng = np.random.default_rng(seed)
    positive = np.zeros(n, dtype=bool)
    positive[rng.choice(n, rng.integers(2, n - 1), replace=False)] = True
    a = rng.normal(size=n) + positive
    b = 0.5 * a + rng.normal(size=n)
    if tied:
        a, b = np.round(a), np.round(b)
    d, (low, high) = metrics.auc_gap(positive, a, b)
    auc_a, auc_b, var = _delong_direct(positive, a, b)
    assert d == pytest.approx(auc_a - auc_b, abs=1e-12)
    assert d == pytest.approx(metrics.auc(positive, a) - metrics.auc(positive, b), abs=1e-12)
    half = Z95 * math.sqrt(max(var, 0.0))
    assert low == pytest.approx(d - half, abs=1e-9)
    assert high == pytest.approx(d + half, abs=1e-9)


def test_auc_gap_of_identical_scores_is_a_point() -> None:
    rng = np.random.default_rng(0)
    positive = rng.random(50) < 0.3
    s = rng.normal(size=50) + positive
    d, (low, high) = metrics.auc_gap(positive, s, s)
    assert d == low == high == 0.0
    # A monotone transformation keeps the ROC curve, so the difference is exactly 0 too.
    d, (low, high) = metrics.auc_gap(positive, s, np.exp(3 * s))
    assert d == low == high == 0.0


def test_auc_gap_covers_zero_on_a_null() -> None:
    """Two correlated scores with the same true AUC: the interval covers 0 about 95% of times."""
    n, trials, covered = 150, 400, 0
    for seed in range(trials):
        rng = np.random.default_rng(seed)
        positive = rng.random(n) < 0.3
        shared = rng.normal(size=n)
        a = positive + shared + rng.normal(size=n)
        b = positive + shared + rng.normal(size=n)
        _, (low, high) = metrics.auc_gap(positive, a, b)
        covered += low <= 0.0 <= high
    assert 0.92 <= covered / trials <= 0.98


def test_auc_gap_detects_a_real_difference() -> None:
    """The interval is not vacuous: a clearly better score gets an interval above 0."""
    rng = np.random.default_rng(1)
    positive = rng.random(400) < 0.3
    shared = rng.normal(size=400)
    d, (low, _) = metrics.auc_gap(
        positive, 2 * positive + shared, positive + shared + rng.normal(size=400)
    )
    assert d > 0 and low > 0


def test_weighted_paired_gap_covers_zero_on_a_null() -> None:
    """Balanced accuracy through verdict.paired_gap: equal per-class recalls in expectation,
    10% of one class, correlated errors; the 95% interval covers 0 about 95% of times."""
    n, trials, covered = 400, 400, 0
    recall = np.array([0.9, 0.6])
    for seed in range(trials):
        rng = np.random.default_rng(seed)
        y = (rng.random(n) < 0.1).astype(np.int64)
        r = recall[y]
        a = rng.random(n) < r
        b = np.where(rng.random(n) < 0.5, a, rng.random(n) < r)
        g = paired_gap(a, b, weights=metrics.point_weights(y, 2))
        assert g.value == pytest.approx(
            metrics.balanced_accuracy(y, np.where(a, y, 1 - y))
            - metrics.balanced_accuracy(y, np.where(b, y, 1 - y))
        )
        covered += g.low <= 0.0 <= g.high
    assert 0.92 <= covered / trials <= 0.98


# -------------------------------------------------------------------------------------- Platt


def _platt_direct(f: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """Minimise the same prior-corrected cross-entropy with a general-purpose optimiser."""
    n1 = positive.sum()
    n0 = positive.size - n1
    t = np.where(positive, (n1 + 1) / (n1 + 2), 1 / (n0 + 2))

    def loss(p: np.ndarray) -> tuple[float, np.ndarray]:
        z = p[0] * f + p[1]
        value = np.sum((t - 1) * z + np.logaddexp(0, z))
        r = 1 / (1 + np.exp(-z)) - (1 - t)  # d loss / d z
        return float(value), np.array([np.sum(r * f), np.sum(r)])

    res = minimize(loss, np.zeros(2), jac=True, method="BFGS", options={"gtol": 1e-11})
    return np.asarray(res.x)


@pytest.mark.parametrize("seed", range(6))
def test_platt_fit_minimises_the_regularised_log_loss(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 300))
    f = rng.normal(scale=rng.uniform(0.3, 4), size=n) + rng.uniform(-1, 1)
    if seed % 3 == 2:
        positive = f > np.median(f)  # separable: the targets keep A and B finite
    else:
        positive = rng.random(n) < 1 / (1 + np.exp(-(rng.uniform(0.5, 3) * f + 0.3)))
    a, b = metrics.platt_fit(f, positive)
    assert np.allclose([a, b], _platt_direct(f, positive), atol=1e-4, rtol=0)
    assert a < 0  # larger decision values, more likely positive


@pytest.mark.parametrize("present", [True, False])
def test_platt_fit_with_one_class_absent(present: bool) -> None:
    f = np.linspace(-2, 3, 9)
    positive = np.full(9, present)
    a, b = metrics.platt_fit(f, positive)
    # The constant fit: every probability is the class's prior-corrected target.
    target = (9 + 1) / (9 + 2) if present else 1 / (9 + 2)
    assert a == pytest.approx(0.0, abs=1e-8)
    assert metrics.platt_apply(f, a, b) == pytest.approx(np.full(9, target))
    assert np.allclose([a, b], _platt_direct(f, positive), atol=1e-4, rtol=0)


def test_platt_apply_is_stable() -> None:
    with np.errstate(all="raise"):
        p = metrics.platt_apply(np.array([-1e6, -1.0, 0.0, 1.0, 1e6]), -2.0, 0.5)
    assert p[0] == 0.0 and p[-1] == 1.0
    assert p[1:4] == pytest.approx(1 / (1 + np.exp(-2.0 * np.array([-1.0, 0.0, 1.0]) + 0.5)))
