"""Model files in: checked in Python (:mod:`kcheck.modelfiles.checked`) while copied to a private
temporary file, which the C loader (:func:`kcheck.bindings.engines.load_liblinear`,
:func:`~kcheck.bindings.engines.load_libsvm`) then reads, so it sees exactly the bytes that passed.
The loaded C model is compared with the Python parse before use: a library that read the file
differently is an error. Reads C model fields; calls no binding."""

from __future__ import annotations

import ctypes
import os

import numpy as np

from kcheck.bindings import engines
from kcheck.bindings.linear_weights import nr_weight_vectors, split_bias
from kcheck.errors import EngineError
from kcheck.io.atomic import scratch_directory
from kcheck.modelfiles import checked as modelfile

__all__ = ["load_model"]

#: One node of a loaded LIBSVM model's support-vector block.
_NODE = np.dtype(
    {
        "names": ["index", "value"],
        "formats": ["<i4", "<f8"],
        "offsets": [0, 8],
        "itemsize": engines.SVM_NODE_BYTES,
    }
)


def load_model(
    path: str, memory_limit: int | None = None
) -> engines.LinearModel | engines.RbfModel:
    """Load a LIBLINEAR or LIBSVM classification model file, checked first, printing nothing."""
    with scratch_directory("kcheck-model-") as tmp:
        copy = os.path.join(tmp, "model")
        checked = modelfile.read_model_file(path, memory_limit, copy_to=copy)
        if isinstance(checked, modelfile.LinearFile):
            return _load_liblinear(copy, checked)
        return _load_libsvm(copy, checked)


def _changed(path: str, what: str) -> EngineError:
    return EngineError(f"{path}: the library read {what} differently from the checked file")


def _load_liblinear(copy: str, checked: modelfile.LinearFile) -> engines.LinearModel:
    path = checked.path
    m = engines.load_liblinear(copy, path)
    if (int(m.nr_class), int(m.nr_feature)) != (checked.nr_class, checked.nr_feature):
        raise _changed(path, "the header")
    if not m.label or list(m.label[: checked.nr_class]) != checked.labels.tolist():
        raise _changed(path, "the labels")
    w_size, nr_w = checked.weights.shape
    if nr_weight_vectors(checked.nr_class, int(m.param.solver_type)) != nr_w:
        raise _changed(path, "the solver")
    # Read at the checked sizes, which the header and solver just showed are the library's.
    w = np.ctypeslib.as_array(m.w, shape=(w_size * nr_w,)).reshape(w_size, nr_w)
    if not np.array_equal(w, checked.weights):
        raise _changed(path, "the weights")
    weights, bias_w = split_bias(checked.weights, checked.nr_feature, checked.bias)
    return engines.LinearModel(
        weights=weights,
        bias_weights=bias_w,
        labels=checked.labels.astype(np.float64),
        C=float(m.param.C),
        _raw=m,
        solver_type=int(m.param.solver_type),
    )


def _load_libsvm(copy: str, checked: modelfile.SvmFile) -> engines.RbfModel:
    path = checked.path
    m = engines.load_libsvm(copy, path)
    k, n_sv = checked.nr_class, checked.total_sv
    if (int(m.nr_class), int(m.l)) != (k, n_sv) or int(m.param.svm_type) not in (0, 1):
        raise _changed(path, "the header")
    if not m.label or not m.nSV or not m.rho:
        raise _changed(path, "the header")
    if list(m.label[:k]) != checked.labels.tolist() or list(m.nSV[:k]) != checked.nr_sv.tolist():
        raise _changed(path, "the labels or nr_sv")
    pairs = k * (k - 1) // 2
    for name, ptr, expected in (
        ("probA", m.probA, checked.prob_a),
        ("probB", m.probB, checked.prob_b),
    ):
        if expected is None:
            if ptr:
                raise _changed(path, name)
        elif pairs and (not ptr or not np.array_equal(ptr[:pairs], expected)):
            raise _changed(path, name)
    if n_sv:
        # A loaded model keeps all support vectors in one node block, each ended by index -1.
        count = checked.indices.size + n_sv
        base = ctypes.cast(m.SV[0], ctypes.c_void_p).value
        if base is None:
            raise _changed(path, "the support vectors")
        nodes = np.frombuffer(
            memoryview((ctypes.c_char * (count * _NODE.itemsize)).from_address(base)),
            dtype=_NODE,
        )
        ends = checked.indptr[1:] + np.arange(1, n_sv + 1) - 1
        expected = np.full(count, -1, dtype=np.int64)
        keep = np.ones(count, dtype=bool)
        keep[ends] = False
        expected[keep] = checked.indices.astype(np.int64) + 1
        if not np.array_equal(nodes["index"], expected) or not np.array_equal(
            nodes["value"][keep], checked.values
        ):
            raise _changed(path, "the support vectors")
    return engines.loaded_rbf(m, checked.used_features())
