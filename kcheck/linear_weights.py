"""A LIBLINEAR model's weights in numpy: prediction is one BLAS product, with no binding call.

:class:`kcheck.engines.LinearModel` adds to this the C model behind the weights, for saving.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck.errors import EngineError

__all__ = ["LOGISTIC_SOLVERS", "SOLVER", "LinearWeights"]

#: LIBLINEAR solver used throughout: L2-regularised L2-loss SVC in the primal (``-s 2``).
SOLVER = 2
#: LIBLINEAR's logistic-regression solvers (``-s 0, 6, 7``), the ones with probabilities.
LOGISTIC_SOLVERS = frozenset({0, 6, 7})


@dataclass
class LinearWeights:
    """A trained LIBLINEAR model, kept as numpy weights so prediction is one BLAS product.

    ``weights`` has shape (n_features, n_w); ``bias_weights`` shape (n_w,). For two classes
    n_w == 1 and a positive decision value means ``labels[0]``; otherwise one-vs-rest argmax.
    With ``columns`` (sorted), row i of ``weights`` belongs to column ``columns[i]`` of X and
    every other column has weight 0: the model was trained on the columns its data used.
    """

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

    @property
    def n_features(self) -> int:
        return int(self.weights.shape[0])

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
        """Labels and class probabilities (columns in ``labels`` order), as LIBLINEAR's
        ``predict_probability``: the logistic of each decision value, normalised over the
        classes when there are more than two."""
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
