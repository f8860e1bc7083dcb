"""Model files checked in Python before a C loader sees them.

LIBLINEAR's ``load_model`` and LIBSVM's ``svm_load_model`` trust their input: a regression
model without a ``label`` line is dereferenced as if it had one, a header whose sizes overflow
``w_size * nr_w`` makes the loader write past a small allocation, a missing ``rho`` or ``nr_sv``
is a NULL pointer, and a truncated support-vector section is read as garbage that predicts one
class for every row. Users run ``kcheck predict`` on files from colleagues and the internet, so
the whole file is parsed here first, against what LIBLINEAR 2.3-2.50 and LIBSVM 3.24-3.37
write: known header keys, each once, with values of the right type and range; counts that
agree with the body; positive, strictly increasing feature indices; finite numbers; and sizes
within the memory limit. Only a file that passes goes to the binding.

Model kinds kcheck cannot use (regression, one-class, a precomputed kernel) are refused here,
with the file and line. Pure Python and numpy: this module never imports a binding.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol, cast

import numpy as np

from kcheck.errors import DataFormatError
from kcheck.memory import default_memory_limit, line_too_long, max_line_bytes, size_text

__all__ = [
    "LIBLINEAR_CLASSIFIERS",
    "LinearFile",
    "SvmFile",
    "model_file_kind",
    "read_model_file",
]

INT_MAX = 2**31 - 1

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
#: Per stored support-vector value: LIBSVM's 16-byte node, our int32 index and float64 value,
#: and the node copy made to find the model's features.
SVM_BYTES_PER_VALUE = 16 + 12 + 16
#: Per support vector: its node terminator, its SV pointer, and per coefficient 8 bytes in C
#: and 8 in numpy.
SVM_BYTES_PER_SV = 16 + 8

_INT = re.compile(rb"[+-]?[0-9]+\Z")
_FLOAT = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_NONFINITE = re.compile(rb"[+-]?(?:nan|inf|infinity)(?:\([^)]*\))?\Z", re.IGNORECASE)
_NUMBER_BYTES = np.zeros(256, dtype=bool)
_NUMBER_BYTES[np.frombuffer(b"0123456789+-.eE \t\r\n", np.uint8)] = True
_SPACE_BYTES = np.zeros(256, dtype=bool)
_SPACE_BYTES[np.frombuffer(b" \t\r\n", np.uint8)] = True
_BLOCK = 1 << 22


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


# --- reading lines ----------------------------------------------------------------------------


class _Source(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...

    def readline(self, n: int = -1, /) -> bytes: ...


class _Reader:
    """Numbered lines of a binary file, each at most ``max_line`` bytes (a line cap keeps a
    file without newlines, such as /dev/zero, from being buffered without end)."""

    def __init__(self, f: _Source, path: str, max_line: int) -> None:
        self.f = f
        self.path = path
        self.max_line = max_line
        self.lineno = 0

    def error(self, message: str, line: int | None = -1) -> DataFormatError:
        return DataFormatError(self.path, self.lineno if line == -1 else line, message)

    def readline(self) -> bytes | None:
        """The next line without its end, or None at the end of the file."""
        line = self.f.readline(self.max_line + 1)
        if not line:
            return None
        self.lineno += 1
        if len(line) > self.max_line and not line.endswith(b"\n"):
            raise line_too_long(self.path, self.lineno, self.max_line)
        return line.rstrip(b"\r\n")

    def block(self) -> bytes:
        """About _BLOCK bytes ending at a line end (or the end of the file); b"" at the end."""
        data = self.f.read(_BLOCK)
        if not data:
            return b""
        if not data.endswith(b"\n"):
            tail = len(data) - (data.rfind(b"\n") + 1)
            rest = self.f.readline(max(0, self.max_line + 1 - tail))
            if tail + len(rest) > self.max_line:
                raise line_too_long(self.path, self.lineno + data.count(b"\n") + 1, self.max_line)
            data += rest
        return data

    def rest_is_blank(self) -> None:
        """After the body only blank lines may follow; the C loaders would read more."""
        while (line := self.readline()) is not None:
            if line.strip():
                raise self.error(f"expected the end of the file, found {_shown(line)}")


def _shown(token: bytes) -> str:
    text = token.decode("ascii", "replace")
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _int(r: _Reader, token: bytes, what: str, lo: int, hi: int = INT_MAX) -> int:
    if not _INT.match(token):
        raise r.error(f"expected an integer for {what}, found {_shown(token)}")
    value = int(token)
    if not lo <= value <= hi:
        raise r.error(f"{what} must lie in [{lo}, {hi}], found {value}")
    return value


def _float(r: _Reader, token: bytes, what: str) -> float:
    if _FLOAT.match(token):
        value = float(token)
        if np.isfinite(value):
            return value
    if _NONFINITE.match(token) or _FLOAT.match(token):
        raise r.error(f"expected a finite number for {what}, found {_shown(token)}")
    raise r.error(f"expected a number for {what}, found {_shown(token)}")


def _floats(r: _Reader, tokens: list[bytes], count: int, what: str) -> np.ndarray:
    if len(tokens) != count:
        raise r.error(
            f"expected {count} value{'s' if count != 1 else ''} for {what}, found {len(tokens)}"
        )
    return np.array([_float(r, t, what) for t in tokens], dtype=np.float64)


def _ints(r: _Reader, tokens: list[bytes], count: int, what: str, lo: int) -> np.ndarray:
    if len(tokens) != count:
        raise r.error(
            f"expected {count} value{'s' if count != 1 else ''} for {what}, found {len(tokens)}"
        )
    return np.array([_int(r, t, what, lo) for t in tokens], dtype=np.int64)


def _over_limit(r: _Reader, what: str, need: int, limit: int) -> DataFormatError:
    return r.error(
        f"{what} would need {size_text(need)}, over the memory limit of {size_text(limit)}"
    )


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
    """Parse and check a whole LIBLINEAR or LIBSVM model file; raise DataFormatError.

    With ``copy_to``, every byte read is also written there, so the C loader can be given
    exactly the bytes that were checked: the file itself could be replaced in between.
    """
    limit = memory_limit or default_memory_limit()
    kind = model_file_kind(path)
    try:
        with contextlib.ExitStack() as stack:
            f: _Source = stack.enter_context(open(path, "rb"))
            if copy_to is not None:
                f = _Tee(cast(BinaryIO, f), stack.enter_context(open(copy_to, "wb")))
            r = _Reader(f, path, max_line_bytes(limit))
            return _read_linear(r, limit) if kind == "linear" else _read_svm(r, limit)
    except OSError as e:
        raise DataFormatError(path, None, f"cannot read model file: {e.strerror or e}") from None


class _Tee:
    """A binary reader that writes what it reads to a second file."""

    def __init__(self, src: BinaryIO, sink: BinaryIO) -> None:
        self.src = src
        self.sink = sink

    def read(self, n: int = -1) -> bytes:
        data = self.src.read(n)
        self.sink.write(data)
        return data

    def readline(self, n: int = -1) -> bytes:
        data = self.src.readline(n)
        self.sink.write(data)
        return data


# --- LIBLINEAR --------------------------------------------------------------------------------


def _header(r: _Reader) -> Iterator[tuple[bytes, list[bytes], int]]:
    """(key, values, line) for each header line, blank lines skipped, each key at most once."""
    seen: dict[bytes, int] = {}
    while (line := r.readline()) is not None:
        tokens = line.split()
        if not tokens:
            continue
        key = tokens[0]
        if key in seen:
            raise r.error(f"{_shown(key)} appears twice (first on line {seen[key]})")
        seen[key] = r.lineno
        yield key, tokens[1:], r.lineno


def _one(r: _Reader, key: bytes, values: list[bytes]) -> bytes:
    if len(values) != 1:
        raise r.error(f"expected one value after {key.decode()}, found {len(values)}")
    return values[0]


def _read_linear(r: _Reader, limit: int) -> LinearFile:
    solver: str | None = None
    nr_class = nr_feature = None
    bias: float | None = None
    labels: np.ndarray | None = None
    found_w = False
    for key, values, _ in _header(r):
        if key == b"solver_type":
            name = _one(r, key, values).decode("ascii", "replace")
            if name not in LIBLINEAR_SOLVERS:
                raise r.error(f"unknown LIBLINEAR solver_type {_shown(name.encode())}")
            if name not in LIBLINEAR_CLASSIFIERS:
                what = "one-class" if name == "ONECLASS_SVM" else "regression"
                raise r.error(
                    f"a LIBLINEAR {name} model (-s {LIBLINEAR_SOLVERS[name]}) is a "
                    f"{what} model; kcheck predicts with classifiers only "
                    "(solvers -s 0 to -s 7)"
                )
            solver = name
        elif key == b"nr_class":
            nr_class = _int(r, _one(r, key, values), "nr_class", 1)
        elif key == b"label":
            if nr_class is None:
                raise r.error("expected nr_class before label")
            labels = _ints(r, values, nr_class, "label", -INT_MAX - 1)
            if np.unique(labels).size != labels.size:
                raise r.error("expected distinct class labels")
        elif key == b"nr_feature":
            nr_feature = _int(r, _one(r, key, values), "nr_feature", 0)
        elif key == b"bias":
            bias = _float(r, _one(r, key, values), "bias")
        elif key == b"w":
            if values:
                raise r.error("expected nothing after 'w' on its line")
            found_w = True
            break
        else:
            raise r.error(f"unknown key {_shown(key)} in a LIBLINEAR model header")
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
        raise _over_limit(r, f"{nr_feature:,} features x {nr_w} weight vector(s)", need, limit)
    weights = _read_weights(r, w_size, nr_w)
    r.rest_is_blank()
    return LinearFile(r.path, solver, nr_class, labels, nr_feature, bias, weights)


def _read_weights(r: _Reader, w_size: int, nr_w: int) -> np.ndarray:
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
                raise r.error(f"expected the end of the file, found {_shown(line)}", r.lineno + k)
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


def _weight_lines_slow(r: _Reader, data: bytes, nr_w: int) -> None:
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
            _float(r, t, "a weight")
        r.lineno = saved


# --- LIBSVM -----------------------------------------------------------------------------------


def _read_svm(r: _Reader, limit: int) -> SvmFile:
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

    for key, values, _ in _header(r):
        if key == b"svm_type":
            name = _one(r, key, values).decode("ascii", "replace")
            if name not in SVM_TYPES:
                raise r.error(f"unknown LIBSVM svm_type {_shown(name.encode())}")
            if name not in SVM_CLASSIFIERS:
                what = "one-class" if name == "one_class" else "regression"
                raise r.error(
                    f"a LIBSVM {name} model is a {what} model; kcheck predicts "
                    "with classifiers only (c_svc, nu_svc)"
                )
            svm_type = name
        elif key == b"kernel_type":
            name = _one(r, key, values).decode("ascii", "replace")
            if name not in KERNELS:
                raise r.error(f"unknown LIBSVM kernel_type {_shown(name.encode())}")
            if name == "precomputed":
                raise r.error(
                    "a model with a precomputed kernel needs the training kernel "
                    "matrix to predict; kcheck cannot use it"
                )
            kernel = name
        elif key == b"degree":
            degree = _int(r, _one(r, key, values), "degree", 0)
        elif key == b"gamma":
            gamma = _float(r, _one(r, key, values), "gamma")
            if gamma < 0:
                raise r.error(f"expected gamma >= 0, found {gamma:g}")
        elif key == b"coef0":
            coef0 = _float(r, _one(r, key, values), "coef0")
        elif key == b"nr_class":
            nr_class = _int(r, _one(r, key, values), "nr_class", 1)
            need = nr_class * (nr_class - 1) // 2 * 8 * 4
            if need > limit or nr_class * (nr_class - 1) // 2 > INT_MAX:
                raise r.error(
                    f"nr_class {nr_class:,} is more classes than LIBSVM's "
                    "one-vs-one decision values can hold within the memory limit"
                )
        elif key == b"total_sv":
            total_sv = _int(r, _one(r, key, values), "total_sv", 0)
        elif key == b"rho":
            rho = _floats(r, values, pairs(key), "rho")
        elif key == b"label":
            labels = _ints(r, values, classes(key), "label", -INT_MAX - 1)
            if np.unique(labels).size != labels.size:
                raise r.error("expected distinct class labels")
        elif key == b"probA":
            prob_a = _floats(r, values, pairs(key), "probA")
        elif key == b"probB":
            prob_b = _floats(r, values, pairs(key), "probB")
        elif key == b"nr_sv":
            nr_sv = _ints(r, values, classes(key), "nr_sv", 0)
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
            raise r.error(f"unknown key {_shown(key)} in a LIBSVM model header")
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
        raise _over_limit(r, f"{total_sv:,} support vectors", need, limit)
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
    r: _Reader, total_sv: int, m: int, limit: int
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
            raise _over_limit(r, "the support vectors", nnz * SVM_BYTES_PER_VALUE, limit)
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


def _sv_line_slow(r: _Reader, body: bytes, m: int) -> None:
    """Find what is wrong with a support-vector line and raise it."""
    tokens = body.split()
    if len(tokens) < m:
        raise r.error(
            f"expected {m} coefficient{'s' if m > 1 else ''} and index:value pairs, "
            f"found {_shown(body)}"
        )
    for t in tokens[:m]:
        if b":" in t:
            raise r.error(
                f"expected {m} coefficient{'s' if m > 1 else ''} before the "
                f"index:value pairs, found {_shown(t)}"
            )
        _float(r, t, "a support-vector coefficient")
    for t in tokens[m:]:
        idx, colon, val = t.partition(b":")
        if not colon or b":" in val:
            raise r.error(f"expected index:value, found {_shown(t)}")
        _int(r, idx, "a feature index", 1)
        _float(r, val, f"feature {int(idx)}")
    raise r.error(f"expected index:value pairs, found {_shown(body)}")
