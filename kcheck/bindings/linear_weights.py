"""A LIBLINEAR model's weights in numpy: prediction is one BLAS product, no binding call
(:class:`kcheck.bindings.engines.LinearModel` adds the C model, for saving). The weight array's
layout (vectors, bias row) is here, so training, saving and loading read it alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck.errors import EngineError

__all__ = [
    "LOGISTIC_SOLVERS",
    "MCSVM_CS",
    "SOLVER",
    "LinearWeights",
    "nr_weight_vectors",
    "split_bias",
]

#: LIBLINEAR solver used throughout: L2-regularised L2-loss SVC in the primal (``-s 2``).
SOLVER = 2
#: LIBLINEAR's logistic-regression solvers (``-s 0, 6, 7``), the ones with probabilities.
LOGISTIC_SOLVERS = frozenset({0, 6, 7})
#: LIBLINEAR's Crammer-Singer solver, which keeps nr_class weight vectors even for two classes.
MCSVM_CS = 4


def nr_weight_vectors(nr_class: int, solver_type: int) -> int:
    """Weight vectors LIBLINEAR keeps: one for two classes, except Crammer-Singer (``-s 4``)."""
    return 1 if nr_class == 2 and solver_type != MCSVM_CS else nr_class


def split_bias(w: np.ndarray, nr_feature: int, bias: float) -> tuple[np.ndarray, np.ndarray]:
    """LIBLINEAR's stored (w_size, nr_w) weights as the features' and the bias term's: with ``bias
    >= 0`` the last row is the constant feature's, times ``bias`` added to every decision value."""
    if bias >= 0:
        return w[:nr_feature], w[nr_feature] * bias
    return w[:nr_feature], np.zeros(w.shape[1])


@dataclass
class LinearWeights:
    """A trained LIBLINEAR model as numpy weights. ``weights``: (n_features, n_w); ``bias_weights``:
    (n_w,). Two classes: n_w == 1, positive means ``labels[0]``; else one-vs-rest argmax. With
    sorted ``columns``, row i is column ``columns[i]`` of X and all others weigh 0 (trained on the
    columns used)."""

    weights: np.ndarray
    bias_weights: np.ndarray
    labels: np.ndarray
    C: float
    #: The binding's model the weights were copied from, if any.
    _raw: Any = field(default=None, repr=False)
    columns: np.ndarray | None = None
    #: With ``columns``: the width of the data it was trained on, which a saved file keeps.
    width: int | None = None
    #: LIBLINEAR's ``-s``: only logistic regression (0, 6, 7) gives probabilities.
    solver_type: int = SOLVER

    def __getstate__(self) -> dict[str, Any]:
        """Pickle only the numpy weights: an unpickled model predicts but cannot save."""
        state = dict(self.__dict__)
        state["_raw"] = None
        return state

    @property
    def n_features(self) -> int:
        return int(self.weights.shape[0])

    def full_width(self, bias_row: np.ndarray | None) -> np.ndarray:
        """A ``columns``-trained model's weights at full width in LIBLINEAR's layout (``bias_row``
        last); other columns 0, as full-width training gives them."""
        assert self.columns is not None and self.width is not None
        rows = self.width + (0 if bias_row is None else 1)
        w = np.zeros((rows, self.weights.shape[1]), dtype=np.float64)
        w[self.columns] = self.weights
        if bias_row is not None:
            w[self.width] = bias_row
        return w

    def decision_function(self, X: sp.spmatrix | np.ndarray) -> np.ndarray:
        W = self.weights
        if self.columns is not None:
            keep = int(np.searchsorted(self.columns, X.shape[1]))
            dec: np.ndarray = np.asarray(X[:, self.columns[:keep]] @ W[:keep]) + self.bias_weights
            return dec
        n = X.shape[1]
        if n < W.shape[0]:
            W = W[:n]
        elif n > W.shape[0]:
            W = np.vstack([W, np.zeros((n - W.shape[0], W.shape[1]))])
        out: np.ndarray = np.asarray(X @ W) + self.bias_weights
        return out

    def predict(self, X: sp.spmatrix | np.ndarray) -> np.ndarray:
        return self.labels_from(self.decision_function(X))

    def predict_scored(self, X: sp.spmatrix | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Labels and decision values, from one product: per-point scores for the checkers."""
        dec = self.decision_function(X)
        return self.labels_from(dec), dec

    def labels_from(self, dec: np.ndarray) -> np.ndarray:
        """LIBLINEAR's labels for decision values (one column per weight vector)."""
        n = dec.shape[0]
        if self.labels.size == 1:
            return np.full(n, self.labels[0])
        if self.labels.size == 2:
            # LIBLINEAR's rule for two classes, also for Crammer-Singer's two weight vectors.
            return np.asarray(np.where(dec[:, 0] > 0, self.labels[0], self.labels[1]))
        return np.asarray(self.labels[np.argmax(dec, axis=1)])

    @property
    def has_probability(self) -> bool:
        """Whether ``liblinear-predict -b 1`` works: logistic regression models only."""
        return self.solver_type in LOGISTIC_SOLVERS

    def predict_probability(self, X: sp.spmatrix | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Labels and class probabilities (``labels`` order), as LIBLINEAR's
        ``predict_probability``: each value's logistic, normalised over more than two classes."""
        if not self.has_probability:
            raise EngineError(
                "only LIBLINEAR logistic regression models (-s 0, 6, 7) give probabilities"
            )
        dec = self.decision_function(X)
        with np.errstate(over="ignore"):
            p = 1.0 / (1.0 + np.exp(-dec))
        if self.labels.size == 2:
            p = np.column_stack([p[:, 0], 1.0 - p[:, 0]])
        elif self.labels.size > 2:
            p = p / p.sum(axis=1, keepdims=True)
        return self.predict(X), p
