"""Metrics other than accuracy: class weights, balanced accuracy, AUC with DeLong's paired interval,
and Platt scaling. Balanced accuracy is a weighted mean of per-point correctness
(:func:`point_weights`), so ``verdict.paired_gap`` gives its interval; AUC is no per-point mean, so
:func:`auc_gap` uses DeLong's. Pure numpy/scipy: no training here."""

from __future__ import annotations

import math

import numpy as np

from kcheck.errors import KcheckError

#: Two-sided 95% normal quantile (``verdict.Z95``, not imported: verdict imports us).
_Z95 = 1.959963984540054


def rankdata(a: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties at their mean rank (as scipy.stats.rankdata "average"; scipy.stats costs
    ~160 MB of address space under ``ulimit -v``)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    order = np.argsort(a, kind="mergesort")
    sorted_a = a[order]
    starts = np.concatenate([[True], sorted_a[1:] != sorted_a[:-1]])
    group = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    counts = np.diff(np.append(first, a.size))
    mean_rank = first + (counts + 1) / 2.0
    ranks = np.empty(a.size, dtype=np.float64)
    ranks[order] = mean_rank[group]
    return ranks


def expit(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), without overflow for large |x|."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(under="ignore"):  # exp(-800) is 0, as it should be
        e = np.exp(-np.abs(x))
    return np.asarray(np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)), dtype=np.float64)


#: LIBSVM's ``sigmoid_train`` constants: iterations, min step, Hessian ridge, tolerance.
_PLATT_MAX_ITER = 100
_PLATT_MIN_STEP = 1e-10
_PLATT_SIGMA = 1e-12
_PLATT_EPS = 1e-5


def _class_counts(y: np.ndarray, n_classes: int) -> np.ndarray:
    codes = np.asarray(y)
    if codes.ndim != 1:
        raise ValueError("class codes must be a 1-d array")
    if codes.size and (
        not np.all(np.equal(np.mod(codes, 1), 0)) or codes.min() < 0 or codes.max() >= n_classes
    ):
        raise ValueError(f"class codes must be integers in 0..{n_classes - 1}")
    return np.bincount(codes.astype(np.intp), minlength=n_classes).astype(np.float64)


def class_weights(y: np.ndarray, n_classes: int) -> np.ndarray:
    """Per-class weight n / (k * n_c) for codes 0..n_classes-1 (k present; absent ones 0.0): the -wi
    multipliers of C. They average 1, so C keeps its scale."""
    counts = _class_counts(y, n_classes)
    present = counts > 0
    k = int(present.sum())
    w = np.zeros(n_classes, dtype=np.float64)
    if k:
        w[present] = counts.sum() / (k * counts[present])
    return w


def point_weights(y: np.ndarray, n_classes: int) -> np.ndarray:
    """Per-point weight 1 / (k * n_c), summing to 1: weighted correctness is balanced accuracy."""
    codes = np.asarray(y)
    counts = _class_counts(codes, n_classes)
    k = int((counts > 0).sum())
    if not k:
        return np.zeros(0, dtype=np.float64)
    per_class = np.zeros(n_classes, dtype=np.float64)
    per_class[counts > 0] = 1.0 / (k * counts[counts > 0])
    return per_class[codes.astype(np.intp)]


def balanced_accuracy(y: np.ndarray, predicted: np.ndarray) -> float:
    """Mean recall over the classes in y; NaN for no points. Unknown predictions count wrong."""
    truth = np.asarray(y)
    pred = np.asarray(predicted)
    if truth.shape != pred.shape or truth.ndim != 1:
        raise ValueError("labels and predictions must be 1-d arrays of equal length")
    if truth.size == 0:
        return float("nan")
    classes, codes = np.unique(truth, return_inverse=True)
    hits = np.bincount(codes, weights=(truth == pred).astype(np.float64), minlength=classes.size)
    counts = np.bincount(codes, minlength=classes.size)
    return float(np.mean(hits / counts))


def _check_scores(positive: np.ndarray, *scores: np.ndarray) -> tuple[np.ndarray, int, int]:
    pos = np.asarray(positive)
    if pos.dtype != np.bool_ or pos.ndim != 1:
        raise ValueError("positive must be a 1-d bool array")
    for s in scores:
        s = np.asarray(s)
        if s.shape != pos.shape:
            raise ValueError("scores must be one per point")
        if not np.all(np.isfinite(s)):
            raise ValueError("scores must be finite")
    m = int(pos.sum())
    n = pos.size - m
    if m == 0 or n == 0:
        raise KcheckError(
            "AUC needs points of both classes, but the scored points are all "
            + ("negative" if m == 0 else "positive")
        )
    return pos, m, n


def auc(positive: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC (Mann-Whitney, ties 1/2); ``positive`` is bool. KcheckError if a class is absent."""
    pos, m, n = _check_scores(positive, scores)
    ranks = rankdata(np.asarray(scores, dtype=np.float64))
    return float((ranks[pos].sum() - m * (m + 1) / 2.0) / (m * n))


def auc_gap(
    positive: np.ndarray, scores_a: np.ndarray, scores_b: np.ndarray
) -> tuple[float, tuple[float, float]]:
    """AUC(a) - AUC(b) and its 95% interval by DeLong's method for paired ROC curves (Sun & Xu
    2014's O(n log n) midranks): the two AUCs' covariance is subtracted, as pairing does for
    accuracy. Needs two points per class; a zero-variance difference gives (d, d)."""
    pos, m, n = _check_scores(positive, scores_a, scores_b)
    if m < 2 or n < 2:
        raise KcheckError(
            f"DeLong's interval for an AUC difference needs at least two points of each class "
            f"(have {m} positive, {n} negative)"
        )
    # Sun & Xu: midranks within positives (tx), negatives (ty) and all (tz) give V10 = (tz - tx) / n
    # per positive and V01 = 1 - (tz - ty) / m per negative.
    v10 = np.empty((2, m))
    v01 = np.empty((2, n))
    aucs = np.empty(2)
    for r, s in enumerate((scores_a, scores_b)):
        s = np.asarray(s, dtype=np.float64)
        x, y = s[pos], s[~pos]
        tz = rankdata(s)
        tzx, tzy = tz[pos], tz[~pos]
        tx = rankdata(x)
        ty = rankdata(y)
        aucs[r] = (tzx.sum() - m * (m + 1) / 2.0) / (m * n)
        v10[r] = (tzx - tx) / n
        v01[r] = 1.0 - (tzy - ty) / m
    s10 = np.cov(v10)
    s01 = np.cov(v01)
    contrast = np.array([1.0, -1.0])
    var = float(contrast @ s10 @ contrast / m + contrast @ s01 @ contrast / n)
    d = float(aucs[0] - aucs[1])
    # Rounding can leave a tiny negative variance when the two curves move together.
    se = math.sqrt(var) if var > 0 else 0.0
    return d, (d - _Z95 * se, d + _Z95 * se)


def _platt_objective(z: np.ndarray, t: np.ndarray) -> float:
    """Cross-entropy of targets t against P = 1 / (1 + exp(z)), stable for any z."""
    return float(np.sum(np.where(z >= 0, t * z, (t - 1.0) * z) + np.log1p(np.exp(-np.abs(z)))))


def platt_fit(decision: np.ndarray, positive: np.ndarray) -> tuple[float, float]:
    """(A, B) of P(y=1|f) = 1 / (1 + exp(A f + B)), fitted as LIBSVM's sigmoid_train (Platt 2000
    with Lin, Lin & Weng 2007's Newton method and targets (N+ + 1)/(N+ + 2), 1/(N- + 2)), which keep
    A and B finite on separable values so clusters' probabilities compare. One class absent: the
    constant fit."""
    f = np.asarray(decision, dtype=np.float64)
    pos = np.asarray(positive)
    if pos.dtype != np.bool_ or pos.shape != f.shape or f.ndim != 1:
        raise ValueError("decision values and a bool positive mask, one per point")
    if not np.all(np.isfinite(f)):
        raise ValueError("decision values must be finite")
    prior1 = float(pos.sum())
    prior0 = float(pos.size) - prior1
    t = np.where(pos, (prior1 + 1.0) / (prior1 + 2.0), 1.0 / (prior0 + 2.0))
    a, b = 0.0, math.log((prior0 + 1.0) / (prior1 + 1.0))
    fval = _platt_objective(a * f + b, t)
    for _ in range(_PLATT_MAX_ITER):
        z = a * f + b
        p = expit(-z)  # P(y=1) = 1 / (1 + exp(z))
        d2 = p * (1.0 - p)
        h11 = _PLATT_SIGMA + float(np.sum(f * f * d2))
        h22 = _PLATT_SIGMA + float(np.sum(d2))
        h21 = float(np.sum(f * d2))
        d1 = t - p
        g1 = float(np.sum(f * d1))
        g2 = float(np.sum(d1))
        if abs(g1) < _PLATT_EPS and abs(g2) < _PLATT_EPS:
            break
        det = h11 * h22 - h21 * h21
        da = -(h22 * g1 - h21 * g2) / det
        db = -(-h21 * g1 + h11 * g2) / det
        gd = g1 * da + g2 * db
        step = 1.0
        while step >= _PLATT_MIN_STEP:
            na, nb = a + step * da, b + step * db
            nf = _platt_objective(na * f + nb, t)
            if nf < fval + 0.0001 * step * gd:
                a, b, fval = na, nb, nf
                break
            step /= 2.0
        if step < _PLATT_MIN_STEP:
            break  # no sufficient decrease: as LIBSVM, keep the last point
    return a, b


def platt_apply(decision: np.ndarray, A: float, B: float) -> np.ndarray:
    """Probabilities, computed stably for large |A f + B|."""
    z = A * np.asarray(decision, dtype=np.float64) + B
    return np.asarray(expit(-z), dtype=np.float64)
