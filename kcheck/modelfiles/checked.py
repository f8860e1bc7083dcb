"""Model files checked in Python before a C loader sees them.

LIBLINEAR's ``load_model`` and LIBSVM's ``svm_load_model`` trust their input: missing lines become
NULL dereferences, overflowing ``w_size * nr_w`` writes past an allocation, a truncated SV section
predicts one class everywhere. ``kcheck predict`` takes files from anywhere, so the whole file is
parsed first against what LIBLINEAR 2.3-2.50 and LIBSVM 3.24-3.37 write: known header keys once
each, typed and in range; counts agreeing with the body; positive, strictly increasing indices;
finite numbers; sizes within the memory limit. Kinds kcheck cannot use (regression, one-class,
precomputed kernel) are refused with file and line. Never imports a binding."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import BinaryIO, cast

import numpy as np

from kcheck.errors import DataFormatError
from kcheck.memory import default_memory_limit, max_line_bytes
from kcheck.modelfiles.lines import (
    INT_MAX,
    Reader,
    Source,
    Tee,
    float_value,
    float_values,
    header_lines,
    int_value,
    int_values,
    one_value,
    over_limit,
    shown,
)

__all__ = [
    "LIBLINEAR_CLASSIFIERS",
    "LinearFile",
    "SvmFile",
    "model_file_kind",
    "read_model_file",
]

#: LIBLINEAR's ``solver_type_table``: index -> name. 8-10 and 14-20 are unused.
LIBLINEAR_SOLVERS = {
    "L2R_LR": 0,
    "L2R_L2LOSS_SVC_DUAL": 1,
    "L2R_L2LOSS_SVC": 2,
    "L2R_L1LOSS_SVC_DUAL": 3,
    "MCSVM_CS": 4,
    "L1R_L2LOSS_SVC": 5,
    "L1R_LR": 6,
    "L2R_LR_DUAL": 7,
    "L2R_L2LOSS_SVR": 11,
    "L2R_L2LOSS_SVR_DUAL": 12,
    "L2R_L1LOSS_SVR_DUAL": 13,
    "ONECLASS_SVM": 21,
}
#: The classification solvers (``-s 0`` to ``-s 7``), the only ones kcheck predicts with.
LIBLINEAR_CLASSIFIERS = frozenset(name for name, s in LIBLINEAR_SOLVERS.items() if s <= 7)
MCSVM_CS = "MCSVM_CS"

SVM_TYPES = ("c_svc", "nu_svc", "one_class", "epsilon_svr", "nu_svr")
SVM_CLASSIFIERS = ("c_svc", "nu_svc")
KERNELS = ("linear", "polynomial", "rbf", "sigmoid", "precomputed")

#: Bytes the C loader, our parse and the numpy copy of a LIBLINEAR weight hold at once.
LINEAR_BYTES_PER_WEIGHT = 3 * 8
#: Per stored SV value: LIBSVM's 16-byte node, our index and value, and a node copy.
SVM_BYTES_PER_VALUE = 16 + 12 + 16
#: Per SV: its terminator node, SV pointer, and per coefficient 8 bytes in C and 8 in numpy.
SVM_BYTES_PER_SV = 16 + 8

_NUMBER_BYTES = np.zeros(256, dtype=bool)
_NUMBER_BYTES[np.frombuffer(b"0123456789+-.eE \t\r\n", np.uint8)] = True
_SPACE_BYTES = np.zeros(256, dtype=bool)
_SPACE_BYTES[np.frombuffer(b" \t\r\n", np.uint8)] = True


@dataclass(frozen=True)
class LinearFile:
    """A checked LIBLINEAR classification model: ``weights`` is (w_size, nr_w)."""

    path: str
    solver: str
    nr_class: int
    labels: np.ndarray
    nr_feature: int
    bias: float
    weights: np.ndarray

    @property
    def nr_w(self) -> int:
        return int(self.weights.shape[1])


@dataclass(frozen=True)
class SvmFile:
    """A checked LIBSVM classification model; support vectors as CSR arrays (0-based columns)."""

    path: str
    svm_type: str
    kernel: str
    nr_class: int
    total_sv: int
    labels: np.ndarray
    nr_sv: np.ndarray
    rho: np.ndarray
    gamma: float | None
    degree: int | None
    coef0: float | None
    coef: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    has_probability: bool
    #: The pairwise sigmoid parameters of ``svm-train -b 1`` (one per class pair), if any.
    prob_a: np.ndarray | None = None
    prob_b: np.ndarray | None = None

    def used_features(self) -> np.ndarray:
        """Sorted 0-based columns that some support vector stores."""
        return np.unique(self.indices).astype(np.intp)


# --- entry points -----------------------------------------------------------------------------


def model_file_kind(path: str) -> str:
    """``linear`` for a LIBLINEAR model file, ``kernel`` for a LIBSVM one, from its first word."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as e:
        raise DataFormatError(path, None, f"cannot read model file: {e.strerror or e}") from None
    first = head.split(maxsplit=1)[0] if head.split() else b""
    if first == b"solver_type":
        return "linear"
    if first == b"svm_type":
        return "kernel"
    raise DataFormatError(
        path, 1, "not a LIBLINEAR or LIBSVM model file (expected 'solver_type' or 'svm_type' first)"
    )


def read_model_file(
    path: str, memory_limit: int | None = None, *, copy_to: str | None = None
) -> LinearFile | SvmFile:
    """Parse and check a whole LIBLINEAR or LIBSVM model file, else DataFormatError. ``copy_to``
    gets every byte read, so the C loader loads exactly what was checked."""
    limit = memory_limit or default_memory_limit()
    kind = model_file_kind(path)
    try:
        with contextlib.ExitStack() as stack:
            f: Source = stack.enter_context(open(path, "rb"))
            if copy_to is not None:
                f = Tee(cast(BinaryIO, f), stack.enter_context(open(copy_to, "wb")))
            r = Reader(f, path, max_line_bytes(limit))
            return _read_linear(r, limit) if kind == "linear" else _read_svm(r, limit)
    except OSError as e:
        raise DataFormatError(path, None, f"cannot read model file: {e.strerror or e}") from None


# --- LIBLINEAR --------------------------------------------------------------------------------


def _classifier(
    r: Reader, value: bytes, tool: str, known: Collection[str], classifiers: Collection[str]
) -> str:
    """The model's type name (solver_type / svm_type), refused unless a classifier of that tool."""
    name = value.decode("ascii", "replace")
    linear = tool == "LIBLINEAR"
    if name not in known:
        field = "solver_type" if linear else "svm_type"
        raise r.error(f"unknown {tool} {field} {shown(name.encode())}")
    if name not in classifiers:
        what = "one-class" if name in ("ONECLASS_SVM", "one_class") else "regression"
        solver = f" (-s {LIBLINEAR_SOLVERS[name]})" if linear else ""
        only = "solvers -s 0 to -s 7" if linear else ", ".join(classifiers)
        raise r.error(
            f"a {tool} {name} model{solver} is a {what} model; kcheck predicts with "
            f"classifiers only ({only})"
        )
    return name


def _read_linear(r: Reader, limit: int) -> LinearFile:
    solver: str | None = None
    nr_class = nr_feature = None
    bias: float | None = None
    labels: np.ndarray | None = None
    found_w = False
    for key, values, _ in header_lines(r):
        if key == b"solver_type":
            token = one_value(r, key, values)
            solver = _classifier(r, token, "LIBLINEAR", LIBLINEAR_SOLVERS, LIBLINEAR_CLASSIFIERS)
        elif key == b"nr_class":
            nr_class = int_value(r, one_value(r, key, values), "nr_class", 1)
        elif key == b"label":
            if nr_class is None:
                raise r.error("expected nr_class before label")
            labels = int_values(r, values, nr_class, "label", -INT_MAX - 1)
            if np.unique(labels).size != labels.size:
                raise r.error("expected distinct class labels")
        elif key == b"nr_feature":
            nr_feature = int_value(r, one_value(r, key, values), "nr_feature", 0)
        elif key == b"bias":
            bias = float_value(r, one_value(r, key, values), "bias")
        elif key == b"w":
            if values:
                raise r.error("expected nothing after 'w' on its line")
            found_w = True
            break
        else:
            raise r.error(f"unknown key {shown(key)} in a LIBLINEAR model header")
    if not found_w:
        raise r.error(
            "expected a 'w' line and the weights, found the end of the file", r.lineno + 1
        )
    missing = [
        k
        for k, v in (
            ("solver_type", solver),
            ("nr_class", nr_class),
            ("nr_feature", nr_feature),
            ("bias", bias),
        )
        if v is None
    ]
    if missing:
        raise r.error(f"the header has no {' or '.join(missing)} line")
    assert solver is not None and nr_class is not None and nr_feature is not None
    assert bias is not None
    if labels is None:
        raise r.error("the header has no label line (a classifier's file has one)")
    w_size = nr_feature + (1 if bias >= 0 else 0)
    nr_w = 1 if nr_class == 2 and solver != MCSVM_CS else nr_class
    if w_size * nr_w > INT_MAX:
        raise r.error(
            f"nr_feature {nr_feature} with {nr_w} weight vector(s) is more weights "
            f"than LIBLINEAR can index ({INT_MAX})"
        )
    need = w_size * nr_w * LINEAR_BYTES_PER_WEIGHT
    if need > limit:
        raise over_limit(r, f"{nr_feature:,} features x {nr_w} weight vector(s)", need, limit)
    weights = _read_weights(r, w_size, nr_w)
    r.rest_is_blank()
    return LinearFile(r.path, solver, nr_class, labels, nr_feature, bias, weights)


def _read_weights(r: Reader, w_size: int, nr_w: int) -> np.ndarray:
    """``w_size`` lines of ``nr_w`` finite numbers, parsed a block of lines at a time."""
    out = np.empty((w_size, nr_w), dtype=np.float64)
    done = 0
    pending = b""
    while done < w_size:
        data = pending or r.block()
        pending = b""
        if not data:
            raise r.error(
                f"expected {w_size:,} weight lines after 'w', found {done:,} (truncated file?)",
                r.lineno + 1,
            )
        lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
        if lines > w_size - done:
            cut = _nth_line_end(data, w_size - done)
            data, pending = data[:cut], data[cut:]
            lines = w_size - done
        parsed = _weight_block(data, lines, nr_w)
        if parsed is None:
            _weight_lines_slow(r, data, nr_w)  # raises with the exact line
            raise AssertionError("unreachable")  # pragma: no cover
        out[done : done + lines] = parsed
        done += lines
        r.lineno += lines
    if pending:
        # Lines after the weights: only blank ones are allowed.
        for k, line in enumerate(pending.split(b"\n"), 1):
            if line.strip():
                raise r.error(f"expected the end of the file, found {shown(line)}", r.lineno + k)
        r.lineno += pending.count(b"\n")
    return out


def _nth_line_end(data: bytes, n: int) -> int:
    pos = -1
    for _ in range(n):
        pos = data.index(b"\n", pos + 1)
    return pos + 1


def _weight_block(data: bytes, lines: int, nr_w: int) -> np.ndarray | None:
    """The block's numbers as (lines, nr_w), or None if any line is not ``nr_w`` numbers."""
    arr = np.frombuffer(data, dtype=np.uint8)
    if not _NUMBER_BYTES[arr].all():
        return None
    space = _SPACE_BYTES[arr]
    starts = np.flatnonzero(~space & np.concatenate(([True], space[:-1])))
    newlines = np.flatnonzero(arr == 10)
    per_line = np.bincount(np.searchsorted(newlines, starts), minlength=lines)
    if per_line.size != lines or not (per_line == nr_w).all():
        return None
    try:
        values = np.array(data.split(), dtype=np.float64)
    except ValueError:
        return None
    if not np.isfinite(values).all():
        return None
    return values.reshape(lines, nr_w)


def _weight_lines_slow(r: Reader, data: bytes, nr_w: int) -> None:
    for k, line in enumerate(data.split(b"\n")):
        lineno = r.lineno + k + 1
        tokens = line.split()
        if len(tokens) != nr_w:
            raise DataFormatError(
                r.path,
                lineno,
                f"expected {nr_w} weight{'s' if nr_w > 1 else ''} on the line, found {len(tokens)}",
            )
        saved, r.lineno = r.lineno, lineno
        for t in tokens:
            float_value(r, t, "a weight")
        r.lineno = saved


# --- LIBSVM -----------------------------------------------------------------------------------


def _read_svm(r: Reader, limit: int) -> SvmFile:  # noqa: C901 - hostile input, field by field
    svm_type: str | None = None
    kernel: str | None = None
    nr_class = total_sv = degree = None
    gamma: float | None = None
    coef0: float | None = None
    rho = labels = nr_sv = prob_a = prob_b = None
    found_sv = False

    def classes(key: bytes) -> int:
        if nr_class is None:
            raise r.error(f"expected nr_class before {key.decode()}")
        return nr_class

    def pairs(key: bytes) -> int:
        k = classes(key)
        return k * (k - 1) // 2

    for key, values, _ in header_lines(r):
        if key == b"svm_type":
            svm_type = _classifier(
                r, one_value(r, key, values), "LIBSVM", SVM_TYPES, SVM_CLASSIFIERS
            )
        elif key == b"kernel_type":
            name = one_value(r, key, values).decode("ascii", "replace")
            if name not in KERNELS:
                raise r.error(f"unknown LIBSVM kernel_type {shown(name.encode())}")
            if name == "precomputed":
                raise r.error(
                    "a model with a precomputed kernel needs the training kernel "
                    "matrix to predict; kcheck cannot use it"
                )
            kernel = name
        elif key == b"degree":
            degree = int_value(r, one_value(r, key, values), "degree", 0)
        elif key == b"gamma":
            gamma = float_value(r, one_value(r, key, values), "gamma")
            if gamma < 0:
                raise r.error(f"expected gamma >= 0, found {gamma:g}")
        elif key == b"coef0":
            coef0 = float_value(r, one_value(r, key, values), "coef0")
        elif key == b"nr_class":
            nr_class = int_value(r, one_value(r, key, values), "nr_class", 1)
            need = nr_class * (nr_class - 1) // 2 * 8 * 4
            if need > limit or nr_class * (nr_class - 1) // 2 > INT_MAX:
                raise r.error(
                    f"nr_class {nr_class:,} is more classes than LIBSVM's "
                    "one-vs-one decision values can hold within the memory limit"
                )
        elif key == b"total_sv":
            total_sv = int_value(r, one_value(r, key, values), "total_sv", 0)
        elif key == b"rho":
            rho = float_values(r, values, pairs(key), "rho")
        elif key == b"label":
            labels = int_values(r, values, classes(key), "label", -INT_MAX - 1)
            if np.unique(labels).size != labels.size:
                raise r.error("expected distinct class labels")
        elif key == b"probA":
            prob_a = float_values(r, values, pairs(key), "probA")
        elif key == b"probB":
            prob_b = float_values(r, values, pairs(key), "probB")
        elif key == b"nr_sv":
            nr_sv = int_values(r, values, classes(key), "nr_sv", 0)
        elif key == b"SV":
            if values:
                raise r.error("expected nothing after 'SV' on its line")
            found_sv = True
            break
        elif key == b"prob_density_marks":
            # LIBSVM >= 3.3 writes them for one-class models only, which are refused above.
            raise r.error(
                "prob_density_marks belong to one-class models; kcheck predicts "
                "with classifiers only"
            )
        else:
            raise r.error(f"unknown key {shown(key)} in a LIBSVM model header")
    if not found_sv:
        raise r.error(
            "expected an 'SV' line and the support vectors, found the end of the file", r.lineno + 1
        )
    required = (
        ("svm_type", svm_type),
        ("kernel_type", kernel),
        ("nr_class", nr_class),
        ("total_sv", total_sv),
        ("rho", rho),
        ("label", labels),
        ("nr_sv", nr_sv),
    )
    missing = [k for k, v in required if v is None]
    if missing:
        raise r.error(
            f"the header has no {' or '.join(missing)} line (a classifier's file has them)"
        )
    assert kernel is not None and svm_type is not None and nr_class is not None
    assert total_sv is not None and nr_sv is not None and labels is not None
    assert rho is not None
    for name, value, kernels in (
        ("gamma", gamma, ("polynomial", "rbf", "sigmoid")),
        ("degree", degree, ("polynomial",)),
        ("coef0", coef0, ("polynomial", "sigmoid")),
    ):
        if value is None and kernel in kernels:
            raise r.error(f"the header has no {name} line (the {kernel} kernel needs it)")
    if (prob_a is None) != (prob_b is None):
        raise r.error("expected both probA and probB, or neither")
    if int(nr_sv.sum()) != total_sv:
        raise r.error(f"nr_sv adds up to {int(nr_sv.sum()):,}, but total_sv is {total_sv:,}")
    m = nr_class - 1
    need = total_sv * (SVM_BYTES_PER_SV + 16 * m)
    if need > limit:
        raise over_limit(r, f"{total_sv:,} support vectors", need, limit)
    coef, indptr, indices, sv_values = _read_support_vectors(r, total_sv, m, limit)
    r.rest_is_blank()
    return SvmFile(
        r.path,
        svm_type,
        kernel,
        nr_class,
        total_sv,
        labels,
        nr_sv,
        rho,
        gamma,
        degree,
        coef0,
        coef,
        indptr,
        indices,
        sv_values,
        prob_a is not None,
        prob_a,
        prob_b,
    )


def _sv_line(m: int) -> re.Pattern[bytes]:
    """m coefficients, then index:value pairs, separated by spaces or tabs."""
    number = rb"[0-9eE+.\-]+"
    end = rb"(?:[ \t]+|\Z)"
    coefs = rb"(?:" + number + end + rb"){%d}" % m
    return re.compile(rb"[ \t]*" + coefs + rb"(?:[+-]?[0-9]{1,10}:" + number + end + rb")*\Z")


def _read_support_vectors(
    r: Reader, total_sv: int, m: int, limit: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    pattern = _sv_line(m)
    coef = np.empty((total_sv, m), dtype=np.float64)
    indptr = np.zeros(total_sv + 1, dtype=np.int64)
    idx_parts: list[np.ndarray] = []
    val_parts: list[np.ndarray] = []
    nnz = 0
    for i in range(total_sv):
        line = r.readline()
        if line is None:
            raise r.error(
                f"expected {total_sv:,} support vectors (total_sv), found {i:,} (truncated file?)",
                r.lineno + 1,
            )
        body = line.rstrip()
        if not body.strip():
            raise r.error(f"expected support vector {i + 1:,} of {total_sv:,}, found a blank line")
        nums = _sv_numbers(body, pattern)
        if nums is None:
            _sv_line_slow(r, body, m)
            raise AssertionError("unreachable")  # pragma: no cover
        coef[i] = nums[:m]
        idx = nums[m::2]
        val = nums[m + 1 :: 2]
        if idx.size:
            if idx[0] < 1 or idx[-1] > INT_MAX:
                bad = idx[(idx < 1) | (idx > INT_MAX)][0]
                raise r.error(f"expected feature indices from 1 to {INT_MAX}, found {bad:.0f}")
            if idx.size > 1 and not (np.diff(idx) > 0).all():
                raise r.error("expected feature indices in increasing order")
        nnz += idx.size
        if nnz * SVM_BYTES_PER_VALUE > limit:
            raise over_limit(r, "the support vectors", nnz * SVM_BYTES_PER_VALUE, limit)
        idx_parts.append((idx - 1).astype(np.int32))
        val_parts.append(val)
        indptr[i + 1] = nnz
    indices = np.concatenate(idx_parts) if idx_parts else np.empty(0, np.int32)
    values = np.concatenate(val_parts) if val_parts else np.empty(0)
    return coef, indptr, indices, values


def _sv_numbers(body: bytes, pattern: re.Pattern[bytes]) -> np.ndarray | None:
    """The line's numbers (coefficients, then index, value pairs), or None if malformed."""
    if not pattern.match(body):
        return None
    try:
        nums = np.array(body.replace(b":", b" ").split(), dtype=np.float64)
    except ValueError:
        return None
    if not np.isfinite(nums).all():
        return None
    return nums


def _sv_line_slow(r: Reader, body: bytes, m: int) -> None:
    """Find what is wrong with a support-vector line and raise it."""
    tokens = body.split()
    if len(tokens) < m:
        raise r.error(
            f"expected {m} coefficient{'s' if m > 1 else ''} and index:value pairs, "
            f"found {shown(body)}"
        )
    for t in tokens[:m]:
        if b":" in t:
            raise r.error(
                f"expected {m} coefficient{'s' if m > 1 else ''} before the "
                f"index:value pairs, found {shown(t)}"
            )
        float_value(r, t, "a support-vector coefficient")
    for t in tokens[m:]:
        idx, colon, val = t.partition(b":")
        if not colon or b":" in val:
            raise r.error(f"expected index:value, found {shown(t)}")
        int_value(r, idx, "a feature index", 1)
        float_value(r, val, f"feature {int(idx)}")
    raise r.error(f"expected index:value pairs, found {shown(body)}")
