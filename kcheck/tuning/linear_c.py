"""C for a LIBLINEAR model, and the model trained with it: LIBLINEAR's ``-C`` search
(:func:`kcheck.bindings.engines.search_C`) scores plain accuracy, so with class weights (``--metric
balanced`` or ``auc``) C comes from a balanced-accuracy search over stratified folds, warm-started
along the C path (:func:`kcheck.bindings.engines.fold_problem`,
:func:`kcheck.bindings.engines.train_linear`)."""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from kcheck.bindings.engines import (
    BIAS,
    N_FOLDS,
    LinearModel,
    Problem,
    fold_problem,
    search_C,
    train_linear,
)
from kcheck.bindings.inputs import ClassWeight, as_binding_csr
from kcheck.errors import EngineError
from kcheck.metrics import balanced_accuracy
from kcheck.split import stratified_folds

__all__ = [
    "COMPACT_MIN_WIDTH",
    "MAX_SEARCH_C",
    "fit_linear",
    "search_C_balanced",
    "start_C",
]

#: Below this width, dropping unused columns before training saves nothing worth a copy.
COMPACT_MIN_WIDTH = 1024

#: The largest C of a C search, as in LIBLINEAR's own ``-C`` search (``find_parameter_C``).
MAX_SEARCH_C = 1024.0
#: A C search stops after the solution has not moved for this many doublings of C (-C's rule).
UNCHANGED_STOP = 5


def start_C(X: sp.csr_matrix, n_rows: int) -> float:
    """LIBLINEAR's ``calc_start_C`` for ``-s 2`` with bias: the largest power of two at most 1 / (2
    l max_i |x_i|^2); below it every C gives about the same model."""
    sq = np.asarray(X.multiply(X).sum(axis=1)).ravel() + BIAS * BIAS
    top = float(sq.max()) if sq.size else 1.0
    return float(2.0 ** math.floor(math.log2(1.0 / (2.0 * max(n_rows, 1) * top))))


def search_C_balanced(
    problem: Problem,
    X: sp.csr_matrix,
    class_weight: ClassWeight,
    *,
    seed: int,
    eps: float | None = None,
) -> tuple[float, float]:
    """C by 5-fold stratified CV in balanced accuracy; returns (C, CV accuracy at that C). ``-C``
    scores plain accuracy over random folds even with ``-wi`` (1% positives: 73.2% held-out balanced
    accuracy against 91.8% here, scripts/results/metric.md). ``-C``'s grid (start C doubling to
    1024), warm-started per fold; stops when no fold's solution moved for 5 doublings or 5 doublings
    scored below the best. Folds point into ``problem``'s nodes; held-out folds are predicted from
    ``X``. Ties to the smaller C."""
    Xb, yb = as_binding_csr(X), problem.y
    n = yb.size
    if n < N_FOLDS:
        raise EngineError(f"{n} rows are too few for {N_FOLDS}-fold CV")
    Cs: list[float] = []
    C = start_C(Xb, n)
    while C <= MAX_SEARCH_C:
        Cs.append(C)
        C *= 2.0
    fold = stratified_folds(yb, N_FOLDS, seed, 0)
    folds = []
    for k in range(N_FOLDS):
        test = np.flatnonzero(fold == k)
        if test.size == 0:
            continue
        sub = fold_problem(problem, np.flatnonzero(fold != k), class_weight)
        folds.append((sub, test, Xb[test]))
    best = (-1.0, Cs[0], 0.0)  # (balanced accuracy, C, accuracy)
    since_best = unchanged = 0
    predicted = np.zeros(n)
    # Each fold's last model (the next one's warm start) and its weights, to see them move.
    last: list[tuple[LinearModel, np.ndarray] | None] = [None] * len(folds)
    for c in Cs:
        moved = False
        for f, (sub, test, X_test) in enumerate(folds):
            before = last[f]
            model = train_linear(sub, c, eps=eps, start=None if before is None else before[0])
            predicted[test] = model.predict(X_test)
            w = np.concatenate([model.weights.ravel(), model.bias_weights.ravel()])
            moved |= before is None or float(np.linalg.norm(w - before[1])) > 1e-15
            last[f] = (model, w)
        score = balanced_accuracy(yb, predicted)
        if score > best[0]:  # strictly: ties keep the smaller C
            best, since_best = (score, c, float(np.mean(predicted == yb))), 0
        elif score < best[0]:  # a plateau (small C: every model alike) is not a decline
            since_best += 1
        unchanged = 0 if moved else unchanged + 1
        # -C's rule (separable: same models), and 5 doublings below the best (slowest to train).
        if unchanged >= UNCHANGED_STOP or since_best >= UNCHANGED_STOP:
            break
    return best[1], best[2]


def fit_linear(
    X: sp.spmatrix | np.ndarray,
    y: np.ndarray,
    *,
    seed: int,
    C: float | None = None,
    eps: float | None = None,
    compact: bool = True,
    class_weight: ClassWeight | None = None,
) -> tuple[LinearModel, float | None]:
    """Tune C with ``-C`` (unless given) and train on the same problem (one data copy); returns the
    model and the search's CV accuracy (None where C was given). ``class_weight``: C from
    :func:`search_C_balanced` and ``-wi`` training. ``compact``: where under half of X's columns
    hold a value, LIBLINEAR sees only those (its work vectors span the width: one stray index of
    3,000,000 made a 40-row search take 12 s); the model still saves at full width."""
    columns = None
    width = X.shape[1]
    if compact and X.shape[1] >= COMPACT_MIN_WIDTH:
        Xb = as_binding_csr(X)
        used = np.unique(Xb.indices)
        if used.size < X.shape[1] // 2:
            columns, X = used, Xb[:, used]
    cv = None
    problem = Problem.from_data(X, y, class_weight)
    if C is None and class_weight:
        # Weighted (balanced accuracy, AUC): C by stratified CV in balanced accuracy.
        C, cv = search_C_balanced(problem, X, class_weight, seed=seed, eps=eps)
    if C is None:
        C, cv = search_C(problem, seed=seed, eps=eps)
    model = train_linear(problem, C, eps=eps)
    if columns is not None:
        model = LinearModel(
            model.weights,
            model.bias_weights,
            model.labels,
            model.C,
            _raw=model._raw,
            columns=columns,
            width=int(width),
        )
    return model, cv
