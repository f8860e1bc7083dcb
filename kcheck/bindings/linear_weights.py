"""A LIBLINEAR model's weights in numpy: prediction is one BLAS product, with no binding call.

:class:`kcheck.bindings.engines.LinearModel` adds to this the C model behind the weights, for
saving.
The layout of LIBLINEAR's weight array (how many vectors, where the bias row is) is here too,
so that training, saving and loading read it the same way.
"""

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
    """LIBLINEAR's stored (w_size, nr_w) weights as the features' weights and the bias term's.

    With a bias (``bias >= 0``) the last row belongs to the constant feature ``bias``, so its
    weights times ``bias`` are what every decision value adds.
    """
    if bias >= 0:
        return w[:nr_feature], w[nr_feature] * bias
    return w[:nr_feature], np.zeros(w.shape[1])


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

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the numpy weights only (a worker process sends its model back this way); the
        C model is left behind, so an unpickled model predicts but cannot be saved."""
        state = dict(self.__dict__)
        state["_raw"] = None
        return state

    @property
    def n_features(self) -> int:
        return int(self.weights.shape[0])

    def full_width(self, bias_row: np.ndarray | None) -> np.ndarray:
        """The weights of a model trained on ``columns`` at the data's full width, laid out as
        LIBLINEAR stores them (``bias_row`` last, if any). The other columns get weight 0,
        which is what full-width training gives them (their gradient is 0, and the
        regulariser pulls them to 0)."""
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
