"""The only wrapper of the LIBLINEAR and LIBSVM bindings, which print to stdout, return ``None`` (or
NULL) on failure, sort the caller's CSR indices in place and draw CV folds from the process-wide C
``rand()``. Here: low-level ctypes entry points are called so nothing prints; matrices are handed
over as ``csr_matrix`` with sorted indices; ``rand()`` is seeded right before each call that uses
it; failures become :class:`~kcheck.errors.EngineError`.

Inputs are prepared in :mod:`kcheck.bindings.inputs`, C state is :mod:`kcheck.bindings.c_runtime`,
linear weights :mod:`kcheck.bindings.linear_weights`, model files :mod:`kcheck.modelfiles.load`."""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import math
import os
import signal
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from kcheck.bindings.c_runtime import (
    c_rand,
    captured_stderr,
    interruptible,
    library_reason,
    one_omp_thread,
    save_failed,
    seed_c_rand,
    side_by_side,
    weights_quiet,
)
from kcheck.bindings.inputs import (
    ClassWeight,
    as_binding_csr,
    binding_data,
    indices_sorted,
    kernel_data,
    kernel_rows,
    squared_distances,
    weight_options,
)
from kcheck.bindings.linear_weights import SOLVER, LinearWeights, nr_weight_vectors, split_bias
from kcheck.errors import EngineError


def _load_own_library(package: str) -> None:
    """Load the C library that ``package`` ships before its binding does, so a failure says why
    ("failed to map segment"); the binding's bare ``except:`` hides it and tries another copy."""
    spec = importlib.util.find_spec(package)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        for name in sorted(os.listdir(folder)):
            if name.startswith("clib.") and name.endswith(".so"):
                ctypes.CDLL(os.path.join(folder, name))
                return


def _import_binding(module: str) -> Any:
    """The binding ``module``, imported with SIGINT and SIGTERM held: its bare ``except:`` takes a
    Ctrl-C for a failed load and may load another version. Handlers swap in the main thread; a held
    signal is raised after."""
    came: list[int] = []
    swapped: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(sig)
            if callable(handler):  # Python's own, or kcheck's: a Python handler
                swapped[sig] = signal.signal(sig, lambda signum, _frame: came.append(signum))
    package = module.split(".")[0]
    try:
        _load_own_library(package)
        return importlib.import_module(module)
    except ImportError:
        raise
    except Exception as e:  # no C library loaded, or another one than the binding's own
        raise ImportError(f"{package}'s own C library did not load: {e}", name=package) from e
    finally:
        for held, handler in swapped.items():
            signal.signal(held, handler)
        for signum in came[:1]:
            signal.raise_signal(signum)


if TYPE_CHECKING:
    from liblinear import liblinear as _ll
    from libsvm import svm as _svm
else:
    _ll = _import_binding("liblinear.liblinear")
    _svm = _import_binding("libsvm.svm")


__all__ = [
    "BIAS",
    "N_FOLDS",
    "SOLVER",
    "SVM_CACHE_MB",
    "SVM_MIN_CACHE_MB",
    "SVM_NODE_BYTES",
    "SIDE_BY_SIDE_MIN_ROWS",
    "SVM_SOLVER_BYTES_PER_ROW",
    "ClassWeight",
    "KernelProblem",
    "LinearModel",
    "Problem",
    "RbfModel",
    "SvmProblem",
    "as_binding_csr",
    "cache_mb_within",
    "cv_kernel",
    "cv_kernel_predictions",
    "cv_linear_correct",
    "cv_rbf",
    "cv_rbf_correct",
    "cv_rbf_predictions",
    "fit_predict_kernel",
    "fold_problem",
    "libsvm_cv_order",
    "svm_copy_bytes",
    "svm_iterations",
    "indices_sorted",
    "load_liblinear",
    "load_libsvm",
    "loaded_rbf",
    "search_C",
    "squared_distances",
    "train_linear",
    "train_rbf",
]

#: Bias term appended to every instance (``-B 1``); see DESIGN.md for why it matters.
BIAS = 1.0
#: Folds of LIBLINEAR's warm-start ``-C`` search.
N_FOLDS = 5


def _enough_rows(n_rows: int, folds: int) -> None:
    if n_rows < folds:
        raise EngineError(f"{n_rows} rows are too few for {folds}-fold CV")


class LinearModel(LinearWeights):
    """A trained LIBLINEAR model: numpy weights to predict with, and the C model, to save."""

    def save(self, path: str) -> None:
        """Save in LIBLINEAR's text format at full width (:meth:`LinearWeights.full_width`)."""
        if self._raw is None:
            raise EngineError("this model has no LIBLINEAR representation to save")
        raw = self._raw
        keep: tuple[Any, ...] = ()
        if self.columns is not None:
            if self.width is None:
                raise EngineError("this model does not know the width of its data")
            raw, keep = self._full_width()
        if _ll.liblinear.save_model(os.fsencode(path), ctypes.pointer(raw)) != 0:
            raise save_failed(path, "LIBLINEAR")
        del keep

    def _full_width(self) -> tuple[_ll.model, tuple[Any, ...]]:
        """A full-width LIBLINEAR model struct over numpy-owned weights, kept alive by the returned
        tuple (the C library never frees a struct made in Python)."""
        assert self.columns is not None
        src = self._raw
        nr_w = self.weights.shape[1]
        bias_row = None
        if src.bias >= 0:
            trained = np.ctypeslib.as_array(src.w, shape=((self.columns.size + 1) * nr_w,))
            bias_row = trained[self.columns.size * nr_w :]
        w = self.full_width(bias_row)
        m = _ll.model()
        m.param = src.param
        m.nr_class = src.nr_class
        m.nr_feature = self.width
        m.bias = src.bias
        m.label = src.label
        if hasattr(src, "rho"):
            m.rho = src.rho
        m.w = w.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
        return m, (w, src)


@dataclass
class Problem:
    """A LIBLINEAR problem (16 bytes a nonzero, 32 a row) built once for C search and training."""

    _prob: _ll.problem
    y: np.ndarray
    n_rows: int
    #: ``-wi`` options for every training on this problem (class weights of the metric).
    weights: str = ""

    @classmethod
    def from_data(
        cls, X: sp.spmatrix | np.ndarray, y: np.ndarray, class_weight: ClassWeight | None = None
    ) -> Problem:
        Xb, yb = binding_data(X, y)
        prob = _ll.problem(yb, Xb)
        prob.set_bias(BIAS)
        return cls(prob, yb, Xb.shape[0], weight_options(class_weight, yb))


def _parameter(C: float, eps: float | None, weights: str = "") -> _ll.parameter:
    opts = f"-s {SOLVER} -B {BIAS:g} -c {C!r} -q" + weights
    if eps is not None:
        opts += f" -e {eps!r}"
    return _ll.parameter(opts)


def _check_linear(problem: Problem, param: _ll.parameter) -> None:
    err = _ll.liblinear.check_parameter(problem._prob, param)
    if err:
        raise EngineError(f"LIBLINEAR: {err.decode()}")


def search_C(problem: Problem, *, seed: int, eps: float | None = None) -> tuple[float, float]:
    """LIBLINEAR's warm-start ``-C`` search (5-fold CV): (best C, CV accuracy). ``find_parameters``
    directly, as ``train(..., '-C')`` prints under ``-q``; ``rand()`` seeded here."""
    _enough_rows(problem.n_rows, N_FOLDS)
    param = _ll.parameter(
        f"-s {SOLVER} -B {BIAS:g} -C -q" + problem.weights + (f" -e {eps!r}" if eps else "")
    )
    _check_linear(problem, param)
    best_C = ctypes.c_double()
    best_p = ctypes.c_double()
    best_score = ctypes.c_double()
    seed_c_rand(seed)
    prob = problem._prob
    with weights_quiet(problem.weights):
        interruptible(
            lambda: _ll.liblinear.find_parameters(
                prob, param, N_FOLDS, -1.0, -1.0, best_C, best_p, best_score
            )
        )
    C = float(best_C.value)
    if not (C > 0 and math.isfinite(C)):
        raise EngineError("LIBLINEAR's C search returned no usable C")
    return C, float(best_score.value)


def fold_problem(problem: Problem, rows: np.ndarray, class_weight: ClassWeight) -> Problem:
    """Rows ``rows`` of ``problem`` as a LIBLINEAR problem pointing into its nodes (16 bytes a row,
    as LIBLINEAR's CV does), with only its own classes' weights, so none warns."""
    full = problem._prob
    m = int(rows.size)
    sub = _ll.problem.__new__(_ll.problem)
    ctypes.Structure.__init__(sub)
    y = np.ascontiguousarray(problem.y[rows], dtype=np.float64)
    x = (ctypes.POINTER(_ll.feature_node) * max(m, 1))()
    addresses = np.ctypeslib.as_array(
        ctypes.cast(full.x, ctypes.POINTER(ctypes.c_uint64)), (full.l,)
    )
    np.ctypeslib.as_array(ctypes.cast(x, ctypes.POINTER(ctypes.c_uint64)), (max(m, 1),))[:m] = (
        addresses[rows]
    )
    sub.l, sub.n, sub.bias = m, full.n, full.bias
    sub.y = y.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
    sub.x = x
    # The arrays and the parent problem (whose nodes the rows point at) live as long as sub.
    sub._kcheck_keep = (y, x, full)
    return Problem(sub, y, m, weight_options(class_weight, y))


def _from_raw(m: _ll.model, C: float) -> LinearModel:
    """Copy a binding model's weights into numpy (w is stored feature-major, n_w per feature)."""
    nr_class = int(m.nr_class)
    nr_feature = int(m.nr_feature)
    n = nr_feature + (1 if m.bias >= 0 else 0)
    nr_w = nr_weight_vectors(nr_class, int(m.param.solver_type))
    w = np.ctypeslib.as_array(m.w, shape=(n * nr_w,)).reshape(n, nr_w).copy()
    labels = np.array(m.label[:nr_class], dtype=np.float64)
    weights, bias_w = split_bias(w, nr_feature, m.bias)
    return LinearModel(
        weights=weights,
        bias_weights=bias_w,
        labels=labels,
        C=C,
        _raw=m,
        solver_type=int(m.param.solver_type),
    )


def train_linear(
    problem: Problem, C: float, *, eps: float | None = None, start: LinearModel | None = None
) -> LinearModel:
    """Train ``-s 2 -B 1`` at C into numpy weights; ``start``: warm-start from its solution."""
    param = _parameter(C, eps, problem.weights)
    _check_linear(problem, param)
    if start is not None:
        param.init_sol = start._raw.w
        # The warm start's weights live as long as the parameters that point at them.
        param._kcheck_keep = start
    # A problem holds only the weights of its own classes: nothing to warn about.
    prob = problem._prob
    ptr = interruptible(lambda: _ll.liblinear.train(prob, param))
    if not ptr:
        raise EngineError("LIBLINEAR failed to train a model")
    return _from_raw(_ll.toPyModel(ptr), C)


# =================================================================================================
# LIBSVM: C-SVC with the RBF kernel, for model export, prediction and verify. Beyond the habits
# above: its default print function writes to stdout (re-installed by every ``svm_parameter``
# without ``-q``), and the PyPI build's OpenMP slows small problems, so every call uses ``-q`` and
# one OpenMP thread. Model-load failures go to stderr, captured into the error message.
# =================================================================================================

#: LIBSVM's kernel cache per call, in MB (its default is 100); only speed depends on it.
SVM_CACHE_MB = 200
#: Least kernel cache (MB) under a memory limit (LIBSVM keeps two columns whatever it is given).
SVM_MIN_CACHE_MB = 1.0
#: LIBSVM's solver arrays per training row (gradients, alphas, status, the cache's heads).
SVM_SOLVER_BYTES_PER_ROW = 96
_KERNELS = ("linear", "polynomial", "rbf", "sigmoid", "precomputed")

_svm.libsvm.svm_set_print_string_function(_svm.ctypes_print_null)

#: LIBSVM's solver iterations here so far, read from each "#iter = N" line (all else dropped):
#: machine-independent work that tracks a large C's slow convergence.
_svm_iterations = [0]
#: ... and support vectors, from "Total nSV = N": a precomputed kernel's training costs per support
#: vector beside its iterations (scripts/results/calibrate_search.md).
_svm_support_vectors = [0]


_svm_iterations_lock = threading.Lock()


def _count_svm_iterations(line: bytes | None) -> None:
    # b"\noptimization finished, #iter = 6305\n"; side-by-side folds print from their threads.
    if line and b"#iter = " in line:
        with _svm_iterations_lock:
            _svm_iterations[0] += int(line.split(b"#iter = ", 1)[1].split()[0])
    elif line and b"Total nSV = " in line:
        with _svm_iterations_lock:
            _svm_support_vectors[0] += int(line.split(b"Total nSV = ", 1)[1].split()[0])


_counting_print = _svm.PRINT_STRING_FUN(_count_svm_iterations)


def svm_iterations() -> int:
    """LIBSVM's solver iterations so far in this process (diff two reads for the calls between)."""
    return _svm_iterations[0]


def svm_support_vectors() -> int:
    """LIBSVM's support vectors so far in this process, summed over its trainings."""
    return _svm_support_vectors[0]


def _svm_parameter(
    C: float,
    gamma: float | None,
    probability: bool = False,
    weights: str = "",
    cache_mb: float = SVM_CACHE_MB,
) -> _svm.svm_parameter:
    """C-SVC with the RBF kernel (``-t 2``), or without ``gamma`` a precomputed one (``-t 4``).
    Parsing -q installs the process-wide null print function."""
    kernel = "-t 4" if gamma is None else "-t 2"
    g = "" if gamma is None else f" -g {gamma!r}"
    b = " -b 1" if probability else ""
    param = _svm.svm_parameter(f"-s 0 {kernel} -c {C!r}{g} -m {cache_mb!r}{b}{weights} -q")
    # The counting print function replaces -q's null one: every call counts and prints nothing.
    _svm.libsvm.svm_set_print_string_function(_counting_print)
    return param


@dataclass
class SvmProblem:
    """A LIBSVM problem built once and reused by every grid point and the final training; models
    point into its node array, so a model keeps its problem alive."""

    _prob: _svm.svm_problem
    X: sp.csr_matrix
    y: np.ndarray
    #: ``-wi`` options for every training on this problem (class weights of the metric).
    weights: str = ""
    #: LIBSVM's kernel cache in MB (``-m``): smaller under a memory limit, slower, same models.
    cache_mb: float = SVM_CACHE_MB

    @property
    def n_rows(self) -> int:
        return int(self.y.shape[0])

    @classmethod
    def from_data(
        cls,
        X: sp.spmatrix | np.ndarray,
        y: np.ndarray,
        class_weight: ClassWeight | None = None,
        cache_mb: float = SVM_CACHE_MB,
    ) -> SvmProblem:
        Xb, yb = binding_data(X, y)
        return cls(_svm.svm_problem(yb, Xb), Xb, yb, weight_options(class_weight, yb), cache_mb)


def _check_svm(problem: SvmProblem | KernelProblem, param: _svm.svm_parameter) -> None:
    err = _svm.libsvm.svm_check_parameter(problem._prob, param)
    if err:
        raise EngineError(f"LIBSVM: {err.decode()}")


def _svm_cv_predictions(
    problem: SvmProblem | KernelProblem,
    param: _svm.svm_parameter,
    folds: int,
    seed: int,
    workers: int = 1,
) -> np.ndarray:
    """LIBSVM's stratified k-fold CV: each row's label predicted by a model trained without it.
    ``workers`` > 1 trains the folds side by side with the same predictions."""
    _enough_rows(problem.n_rows, folds)
    _check_svm(problem, param)
    one_omp_thread()
    seed_c_rand(seed)
    with weights_quiet(problem.weights):
        n = problem.n_rows
        if workers > 1 and n >= max(SIDE_BY_SIDE_MIN_ROWS, folds + 1) and not param.probability:
            return _side_by_side_cv(problem, param, folds, workers)
        target = (ctypes.c_double * n)()
        prob = problem._prob
        interruptible(lambda: _svm.libsvm.svm_cross_validation(prob, param, folds, target))
    return np.array(np.ctypeslib.as_array(target, shape=(n,)))


#: Rows from which CV folds train side by side; below, threads cost more than they save (150 rows:
#: 1.1 ms alone, 2.0 side by side; 1,000: 59 and 42). Speed only.
SIDE_BY_SIDE_MIN_ROWS = 500


def libsvm_cv_order(y: np.ndarray, folds: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows in LIBSVM's stratified CV fold order and each fold's start:
    ``svm_cross_validation``'s ``perm`` and ``fold_start`` (C-SVC, fewer folds than rows), from the
    same C ``rand()`` calls in order (seed first). Classes in first-occurrence order (-1 before +1
    swapped), each shuffled in place, fold i takes each class's i-th share."""
    labels = np.asarray(y).astype(np.int64)
    uniq, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    data_label = rank[np.ravel(inverse)]
    counts = [int(c) for c in np.bincount(data_label, minlength=order.size)]
    if len(counts) == 2 and int(uniq[order[0]]) == -1 and int(uniq[order[1]]) == 1:
        counts.reverse()
        data_label = 1 - data_label
    grouped = [int(i) for i in np.argsort(data_label, kind="stable")]
    starts = [sum(counts[:c]) for c in range(len(counts))]
    for start, count in zip(starts, counts, strict=True):
        for i in range(count):
            j = i + c_rand() % (count - i)
            grouped[start + j], grouped[start + i] = grouped[start + i], grouped[start + j]
    perm: list[int] = []
    for i in range(folds):
        for start, count in zip(starts, counts, strict=True):
            perm.extend(grouped[start + i * count // folds : start + (i + 1) * count // folds])
    sizes = [
        sum((i + 1) * count // folds - i * count // folds for count in counts) for i in range(folds)
    ]
    return np.asarray(perm, dtype=np.int64), np.concatenate([[0], np.cumsum(sizes)])


def _side_by_side_cv(
    problem: SvmProblem | KernelProblem, param: _svm.svm_parameter, folds: int, workers: int
) -> np.ndarray:
    """``svm_cross_validation`` with folds trained in ``workers`` threads (the C calls release the
    GIL). Folds are drawn here before any training, so no ``rand()`` call depends on timing, and
    each fold holds LIBSVM's rows in LIBSVM's order: the predictions are LIBSVM's own."""
    n = problem.n_rows
    prob = problem._prob
    labels = np.ctypeslib.as_array(prob.y, shape=(n,))
    perm, fold_start = libsvm_cv_order(labels, folds)
    address = np.ctypeslib.as_array(ctypes.cast(prob.x, ctypes.POINTER(ctypes.c_size_t)), (n,))
    target = np.zeros(n, dtype=np.float64)

    def fold(i: int) -> None:
        # ``prob`` (and its nodes) lives while a fold trains, even after an interrupted caller left.
        test = perm[fold_start[i] : fold_start[i + 1]]
        train = np.concatenate([perm[: fold_start[i]], perm[fold_start[i + 1] :]])
        rows = np.ascontiguousarray(address[train])
        ys = np.ascontiguousarray(labels[train])
        sub = _svm.svm_problem.__new__(_svm.svm_problem)
        sub.l = int(train.size)
        sub.y = ys.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
        sub.x = rows.ctypes.data_as(ctypes.POINTER(ctypes.POINTER(_svm.svm_node)))
        # The fold's problem's targets live as long as it does.
        sub._kcheck_keep = (rows, ys, prob)
        one_omp_thread()
        ptr = interruptible(lambda: _svm.libsvm.svm_train(sub, param))
        if not ptr:
            raise EngineError("LIBSVM failed to train a model")
        model = _svm.toPyModel(ptr)
        for k in test:
            target[k] = _svm.libsvm.svm_predict(model, prob.x[k])

    side_by_side(fold, folds, workers)
    return target


def cv_rbf(problem: SvmProblem, C: float, gamma: float, *, folds: int, seed: int) -> int:
    """LIBSVM's stratified k-fold CV for one (C, gamma): the count of rows predicted right (exact to
    compare). ``rand()`` is seeded here, so equal seeds give equal folds."""
    predicted = cv_rbf_predictions(problem, C, gamma, folds=folds, seed=seed)
    return int(np.count_nonzero(predicted == problem.y))


def cv_rbf_correct(
    problem: SvmProblem, C: float, gamma: float, *, folds: int, seed: int
) -> np.ndarray:
    """Per-row correctness of :func:`cv_rbf`'s CV (same seed, same folds), for paired gaps."""
    predicted = cv_rbf_predictions(problem, C, gamma, folds=folds, seed=seed)
    return np.asarray(predicted == problem.y)


def cv_rbf_predictions(
    problem: SvmProblem, C: float, gamma: float, *, folds: int, seed: int
) -> np.ndarray:
    """Each row's label as predicted in :func:`cv_rbf`'s CV (same folds for the same seed)."""
    param = _svm_parameter(C, gamma, weights=problem.weights, cache_mb=problem.cache_mb)
    return _svm_cv_predictions(problem, param, folds, seed)


def cv_linear_correct(problem: Problem, C: float, *, folds: int, seed: int) -> np.ndarray:
    """Per-row correctness of LIBLINEAR's k-fold CV (``-s 2 -B 1 -c C -v folds``)."""
    _enough_rows(problem.n_rows, folds)
    param = _parameter(C, None, problem.weights)
    _check_linear(problem, param)
    target = (ctypes.c_double * problem.n_rows)()
    seed_c_rand(seed)
    prob = problem._prob
    with weights_quiet(problem.weights):
        interruptible(lambda: _ll.liblinear.cross_validation(prob, param, folds, target))
    predicted = np.ctypeslib.as_array(target, shape=(problem.n_rows,))
    return np.asarray(predicted == problem.y)


@dataclass
class RbfModel:
    """A LIBSVM classifier (trained or loaded), predicted through ``svm_predict`` so labels match
    ``svm-predict`` exactly, one-vs-one ties included."""

    labels: np.ndarray
    gamma: float
    kernel: str
    n_sv: int
    C: float | None = None
    _raw: Any = field(default=None, repr=False)
    _problem: SvmProblem | None = field(default=None, repr=False)
    #: A loaded model's columns, from the checked file.
    _features: np.ndarray | None = field(default=None, repr=False)

    def predict(self, X: sp.spmatrix | np.ndarray) -> np.ndarray:
        return self._each_row(lambda m, x, _: _svm.libsvm.svm_predict(m, x), 0, X)[0]

    def predict_scored(self, X: sp.spmatrix | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Labels and one-vs-one decision values (a column a pair); two classes: + is labels[0]."""
        k = self.labels.size
        return self._each_row(_svm.libsvm.svm_predict_values, max(1, k * (k - 1) // 2), X)

    def _each_row(
        self, predict: Any, width: int, X: sp.spmatrix | np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """:func:`_predict_rows` on the rows of ``X``."""
        Xb = as_binding_csr(X)
        n = Xb.shape[0]
        nodes = _svm.svm_problem(np.zeros(n), Xb) if n else None
        return _predict_rows(self._raw, nodes, n, predict, width)

    @property
    def has_probability(self) -> bool:
        """Whether the model holds probability information (``svm-train -b 1``)."""
        return self._raw is not None and bool(_svm.libsvm.svm_check_probability_model(self._raw))

    def predict_probability(self, X: sp.spmatrix | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Labels and class probabilities (``labels`` order) as ``svm-predict -b 1``; near the
        boundary the label may differ from :meth:`predict`'s vote, as there."""
        if not self.has_probability:
            raise EngineError("the model has no probability information (svm-train -b 1)")
        return self._each_row(_svm.libsvm.svm_predict_probability, self.labels.size, X)

    def used_features(self) -> np.ndarray:
        """Sorted 0-based columns that some support vector stores (a model's real width)."""
        if self._features is not None:
            return self._features
        m = self._raw
        if self.n_sv == 0 or self._problem is None:
            return np.empty(0, dtype=np.intp)
        rows = np.ctypeslib.as_array(m.sv_indices, shape=(self.n_sv,)) - 1
        return np.unique(self._problem.X[rows].indices).astype(np.intp)

    def save(self, path: str) -> None:
        """Save in LIBSVM's text format (readable by ``svm-predict``)."""
        if self._raw is None:
            raise EngineError("this model has no LIBSVM representation to save")
        if _svm.libsvm.svm_save_model(os.fsencode(path), self._raw) != 0:
            raise save_failed(path, "LIBSVM")


def _predict_rows(
    model: Any, nodes: _svm.svm_problem | None, n: int, predict: Any, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """LIBSVM's ``predict`` on ``n`` rows of ``nodes``: labels and the first ``width`` values."""
    labels = np.empty(n, dtype=np.float64)
    values = np.zeros((n, width), dtype=np.float64)
    if n == 0:
        return labels, values
    assert nodes is not None
    k = int(model.nr_class)
    row = (ctypes.c_double * max(1, k, k * (k - 1) // 2))()
    one_omp_thread()
    for i in range(n):
        labels[i] = predict(model, nodes.x[i], row)
        values[i] = row[:width]
    return labels, values


def _rbf_from_raw(m: _svm.svm_model, C: float | None, problem: SvmProblem | None) -> RbfModel:
    nr_class = int(m.nr_class)
    kernel = int(m.param.kernel_type)
    return RbfModel(
        labels=np.array(m.label[:nr_class], dtype=np.float64) if m.label else np.empty(0),
        gamma=float(m.param.gamma),
        kernel=_KERNELS[kernel] if 0 <= kernel < len(_KERNELS) else str(kernel),
        n_sv=int(m.l),
        C=C,
        _raw=m,
        _problem=problem,
    )


def train_rbf(
    problem: SvmProblem, C: float, gamma: float, *, probability: bool = False, seed: int = 0
) -> RbfModel:
    """Train C-SVC with the RBF kernel exp(-gamma |u - v|^2) on the whole problem. ``probability``:
    ``-b 1``, whose 5-fold CV draws from ``rand()``, seeded with ``seed``."""
    param = _svm_parameter(C, gamma, probability, problem.weights, problem.cache_mb)
    _check_svm(problem, param)
    one_omp_thread()
    if probability:
        seed_c_rand(seed)
    prob = problem._prob
    ptr = interruptible(lambda: _svm.libsvm.svm_train(prob, param))
    if not ptr:
        raise EngineError("LIBSVM failed to train a model")
    return _rbf_from_raw(_svm.toPyModel(ptr), C, problem)


# --- precomputed kernels (-t 4) ------------------------------------------------------------------


@dataclass
class KernelProblem:
    """A LIBSVM problem over a precomputed kernel (``-t 4``): 28 bytes an entry; bound it."""

    _prob: _svm.svm_problem
    y: np.ndarray
    #: ``-wi`` options for every training on this problem (class weights of the metric).
    weights: str = ""

    @property
    def n_rows(self) -> int:
        return int(self.y.shape[0])

    @classmethod
    def from_kernel(
        cls, K: np.ndarray, y: np.ndarray, class_weight: ClassWeight | None = None
    ) -> KernelProblem:
        rows, yb = kernel_data(K, y)
        weights = weight_options(class_weight, yb)
        return cls(_svm.svm_problem(yb, rows, isKernel=True), yb, weights)


def cv_kernel(problem: KernelProblem, C: float, *, folds: int, seed: int, workers: int = 1) -> int:
    """:func:`cv_rbf` on a precomputed kernel (same folds and count); ``workers``: speed only."""
    predicted = cv_kernel_predictions(problem, C, folds=folds, seed=seed, workers=workers)
    return int(np.count_nonzero(predicted == problem.y))


def cv_kernel_predictions(
    problem: KernelProblem, C: float, *, folds: int, seed: int, workers: int = 1
) -> np.ndarray:
    """Each row's label as predicted in :func:`cv_kernel`'s CV (for metrics other than a count)."""
    return _svm_cv_predictions(
        problem, _svm_parameter(C, None, weights=problem.weights), folds, seed, workers
    )


def fit_predict_kernel(
    problem: KernelProblem, C: float, K_test: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None]:
    """Train C-SVC on the problem's kernel and predict rows whose kernel against it is K_test:
    labels and, for two classes, each row's decision value for the larger label."""
    param = _svm_parameter(C, None, weights=problem.weights)
    _check_svm(problem, param)
    one_omp_thread()
    prob = problem._prob
    ptr = interruptible(lambda: _svm.libsvm.svm_train(prob, param))
    if not ptr:
        raise EngineError("LIBSVM failed to train a model")
    model = _svm.toPyModel(ptr)
    n = K_test.shape[0]
    nodes = None
    if n:
        nodes = _svm.svm_problem(np.zeros(n), kernel_rows(K_test, serial=False), isKernel=True)
    out, dec = _predict_rows(model, nodes, n, _svm.libsvm.svm_predict_values, 1)
    if int(model.nr_class) != 2:
        return out, None
    return out, -dec[:, 0] if model.label[0] < model.label[1] else dec[:, 0]


# --- model files: the C loaders, on a copy that kcheck.modelfiles.load has checked ---

#: Bytes of one LIBSVM node (int index, double value): a model's SV block and a problem's rows.
SVM_NODE_BYTES = ctypes.sizeof(_svm.svm_node)


def svm_copy_bytes(nnz: int, rows: int) -> int:
    """What LIBSVM training on ``rows`` rows of ``nnz`` values holds beside its kernel cache."""
    return SVM_NODE_BYTES * (nnz + rows) + SVM_SOLVER_BYTES_PER_ROW * rows


def cache_mb_within(free_bytes: float) -> float:
    """Kernel cache (MB) ``free_bytes`` leave, in [SVM_MIN_CACHE_MB, SVM_CACHE_MB]: speed only."""
    return max(SVM_MIN_CACHE_MB, min(float(SVM_CACHE_MB), free_bytes / 2**20))


def _load(load: Any, copy: str, path: str, library: str) -> Any:
    """A C loader on ``copy``, its complaints on stderr kept for the error, which names ``path``."""
    with captured_stderr() as captured:
        ptr = load(os.fsencode(copy))
    if not ptr:
        raise EngineError(f"{path}: not a readable {library} model file{library_reason(captured)}")
    return ptr


def load_liblinear(copy: str, path: str) -> _ll.model:
    """LIBLINEAR's ``load_model`` on ``copy``, silently (checked by kcheck.modelfiles.load)."""
    return _ll.toPyModel(_load(_ll.liblinear.load_model, copy, path, "LIBLINEAR"))


def load_libsvm(copy: str, path: str) -> _svm.svm_model:
    """LIBSVM's ``svm_load_model`` on ``copy``, silently (checked by kcheck.modelfiles.load)."""
    return _svm.toPyModel(_load(_svm.libsvm.svm_load_model, copy, path, "LIBSVM"))


def loaded_rbf(m: _svm.svm_model, features: np.ndarray) -> RbfModel:
    """The classifier of a loaded LIBSVM model whose support vectors use ``features``."""
    model = _rbf_from_raw(m, None, None)
    model._features = features
    return model
