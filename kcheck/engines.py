"""The only wrapper of the LIBLINEAR and LIBSVM bindings.

The bindings print to stdout, return ``None`` (or a NULL pointer) on failure, sort the caller's
CSR indices in place and draw cross-validation folds from the C library's process-wide
``rand()``. Everything that touches them goes through here, so those habits are handled once:

* the low-level ctypes entry points are called directly, so nothing is printed;
* every matrix is handed over as a ``csr_matrix`` whose indices are already sorted, so the
  binding's in-place sort never changes a caller's arrays;
* ``rand()`` is seeded right before each call that uses it, so results do not depend on what
  ran before in the process;
* failures become :class:`~kcheck.errors.EngineError`.
"""

from __future__ import annotations

import ctypes
import math
import os
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from liblinear import liblinear as _ll
from libsvm import svm as _svm

from kcheck.errors import EngineError

#: LIBLINEAR solver used throughout: L2-regularised L2-loss SVC in the primal (``-s 2``).
SOLVER = 2
#: Bias term appended to every instance (``-B 1``); see DESIGN.md for why it matters.
BIAS = 1.0
#: Folds of LIBLINEAR's warm-start ``-C`` search.
N_FOLDS = 5

_libc = ctypes.CDLL(None)
_libc.srand.argtypes = [ctypes.c_uint]
_libc.srand.restype = None


def _seed_c_rand(seed: int) -> None:
    """Seed the C ``rand()`` that LIBLINEAR/LIBSVM use for CV folds (process-wide state)."""
    _libc.srand(ctypes.c_uint(seed & 0xFFFFFFFF))


def as_binding_csr(X: sp.spmatrix | np.ndarray) -> sp.csr_matrix:
    """Return ``X`` as a float64 ``csr_matrix`` with sorted indices, copying only if needed.

    The binding rejects ``csr_array`` and sorts indices in place; handing it a matrix that is
    already sorted makes that in-place sort a no-op.
    """
    if isinstance(X, np.ndarray):
        return sp.csr_matrix(X, dtype=np.float64)
    if not isinstance(X, sp.csr_matrix) or X.dtype != np.float64:
        X = sp.csr_matrix(X, dtype=np.float64)
    if not indices_sorted(X):
        X = X.copy()
        X.has_sorted_indices = False
        X.sort_indices()
    return X


def indices_sorted(X: sp.csr_matrix) -> bool:
    """Check sortedness from the arrays themselves; scipy's cached flag can be stale."""
    ind = X.indices
    if ind.size < 2:
        return True
    inc = np.diff(ind.astype(np.int64)) > 0
    # A decrease is allowed only across a row boundary.
    starts = X.indptr[1:-1]
    starts = starts[(starts > 0) & (starts < ind.size)]
    inc[starts - 1] = True
    return bool(inc.all())


@dataclass
class LinearModel:
    """A trained LIBLINEAR model, kept as numpy weights so prediction is one BLAS product.

    ``weights`` has shape (n_features, n_w); ``bias_weights`` shape (n_w,). For two classes
    n_w == 1 and a positive decision value means ``labels[0]``; otherwise one-vs-rest argmax.
    """

    weights: np.ndarray
    bias_weights: np.ndarray
    labels: np.ndarray
    C: float
    _raw: object = field(default=None, repr=False)

    @property
    def n_features(self) -> int:
        return int(self.weights.shape[0])

    def decision_function(self, X: sp.spmatrix | np.ndarray) -> np.ndarray:
        W = self.weights
        n = X.shape[1]
        if n < W.shape[0]:
            W = W[:n]
        elif n > W.shape[0]:
            W = np.vstack([W, np.zeros((n - W.shape[0], W.shape[1]))])
        return np.asarray(X @ W) + self.bias_weights

    def predict(self, X: sp.spmatrix | np.ndarray) -> np.ndarray:
        dec = self.decision_function(X)
        if self.labels.size == 1:
            return np.full(X.shape[0], self.labels[0])
        if dec.shape[1] == 1:
            return np.where(dec[:, 0] > 0, self.labels[0], self.labels[1])
        return self.labels[np.argmax(dec, axis=1)]

    def save(self, path: str) -> None:
        """Save in LIBLINEAR's text format (readable by ``predict``)."""
        if self._raw is None:
            raise EngineError("this model has no LIBLINEAR representation to save")
        if _ll.liblinear.save_model(os.fsencode(path), ctypes.pointer(self._raw)) != 0:
            raise EngineError(f"cannot write model file {path}")


@dataclass
class Problem:
    """A LIBLINEAR problem built once and reused for the C search and the final training.

    Building it copies the CSR data into LIBLINEAR's node arrays (16 bytes per nonzero plus
    32 per row); reusing it keeps that to one copy per model.
    """

    _prob: _ll.problem
    y: np.ndarray
    n_rows: int

    @classmethod
    def from_data(cls, X: sp.spmatrix | np.ndarray, y: np.ndarray) -> Problem:
        Xb = as_binding_csr(X)
        yb = np.ascontiguousarray(y, dtype=np.float64)
        if Xb.shape[0] != yb.shape[0]:
            raise EngineError(f"{Xb.shape[0]} rows but {yb.shape[0]} labels")
        if Xb.shape[0] == 0:
            raise EngineError("cannot train on zero rows")
        prob = _ll.problem(yb, Xb)
        prob.set_bias(BIAS)
        return cls(prob, yb, Xb.shape[0])


def _parameter(C: float, eps: float | None) -> _ll.parameter:
    opts = f"-s {SOLVER} -B {BIAS:g} -c {C!r} -q"
    if eps is not None:
        opts += f" -e {eps!r}"
    return _ll.parameter(opts)


def search_C(problem: Problem, *, seed: int, eps: float | None = None) -> tuple[float, float]:
    """LIBLINEAR's warm-start ``-C`` search: 5-fold CV over C; returns (best C, CV accuracy).

    Calls ``find_parameters`` directly instead of ``train(..., '-C')``, which prints the result
    with a plain ``print`` even under ``-q``. Folds come from ``rand()``, seeded here.
    """
    if problem.n_rows < N_FOLDS:
        raise EngineError(f"{problem.n_rows} rows are too few for {N_FOLDS}-fold CV")
    param = _ll.parameter(f"-s {SOLVER} -B {BIAS:g} -C -q" + (f" -e {eps!r}" if eps else ""))
    err = _ll.liblinear.check_parameter(problem._prob, param)
    if err:
        raise EngineError(f"LIBLINEAR: {err.decode()}")
    best_C = ctypes.c_double()
    best_p = ctypes.c_double()
    best_score = ctypes.c_double()
    _seed_c_rand(seed)
    _ll.liblinear.find_parameters(
        problem._prob, param, N_FOLDS, -1.0, -1.0, best_C, best_p, best_score
    )
    C = float(best_C.value)
    if not (C > 0 and math.isfinite(C)):
        raise EngineError("LIBLINEAR's C search returned no usable C")
    return C, float(best_score.value)


def _from_raw(m: _ll.model, C: float) -> LinearModel:
    """Copy a binding model's weights into numpy (w is stored feature-major, n_w per feature)."""
    nr_class = int(m.nr_class)
    nr_feature = int(m.nr_feature)
    n = nr_feature + (1 if m.bias >= 0 else 0)
    nr_w = 1 if nr_class == 2 else nr_class
    w = np.ctypeslib.as_array(m.w, shape=(n * nr_w,)).reshape(n, nr_w).copy()
    labels = np.array(m.label[:nr_class], dtype=np.float64)
    if m.bias >= 0:
        weights, bias_w = w[:nr_feature], w[nr_feature] * m.bias
    else:
        weights, bias_w = w, np.zeros(nr_w)
    return LinearModel(weights=weights, bias_weights=bias_w, labels=labels, C=C, _raw=m)


def train_linear(problem: Problem, C: float, *, eps: float | None = None) -> LinearModel:
    """Train ``-s 2 -B 1`` with a given C and extract the weights into numpy."""
    param = _parameter(C, eps)
    err = _ll.liblinear.check_parameter(problem._prob, param)
    if err:
        raise EngineError(f"LIBLINEAR: {err.decode()}")
    ptr = _ll.liblinear.train(problem._prob, param)
    if not ptr:
        raise EngineError("LIBLINEAR failed to train a model")
    return _from_raw(_ll.toPyModel(ptr), C)


def fit_linear(
    X: sp.spmatrix | np.ndarray,
    y: np.ndarray,
    *,
    seed: int,
    C: float | None = None,
    eps: float | None = None,
) -> tuple[LinearModel, float | None]:
    """Tune C with ``-C`` (unless given) and train on the same problem: one data copy.

    Returns the model and the CV accuracy of the search (None when C was given).
    """
    problem = Problem.from_data(X, y)
    cv = None
    if C is None:
        C, cv = search_C(problem, seed=seed, eps=eps)
    return train_linear(problem, C, eps=eps), cv


def load_liblinear_model(path: str) -> LinearModel:
    """Load a LIBLINEAR model file; the binding prints and returns NULL on failure."""
    ptr = _ll.liblinear.load_model(os.fsencode(path))
    if not ptr:
        raise EngineError(f"{path}: not a LIBLINEAR model file")
    m = _ll.toPyModel(ptr)
    return _from_raw(m, float(m.param.C))


__all__ = [
    "BIAS",
    "N_FOLDS",
    "SOLVER",
    "LinearModel",
    "Problem",
    "as_binding_csr",
    "fit_linear",
    "indices_sorted",
    "load_liblinear_model",
    "search_C",
    "train_linear",
]

# LIBSVM is wrapped here too (used by model export and verify); keep the import referenced.
_SVM = _svm
