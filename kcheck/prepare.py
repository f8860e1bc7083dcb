"""Read, validate and scale a training file once for every command that trains on it: ``check``,
``verify`` and ``--model-out`` start from a :class:`Prepared`. Validation happens here, so the
commands cannot disagree about what data they accept or how labels are coded."""

from __future__ import annotations

import hashlib
import operator
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck.defaults import MAX_ROWS, MIN_ROWS, MIN_ROWS_PER_CLASS
from kcheck.errors import KcheckError, KcheckWarning
from kcheck.io.data import LibsvmBlocks, Sample, dropped_warning, read_libsvm, sample_libsvm
from kcheck.io.reservoir import METHOD
from kcheck.memory import (
    CHECK_BYTES_PER_CSR_BYTE,
    FIXED_BYTES,
    check_fits,
    csr_bytes,
    max_data_bytes,
    size_text,
)
from kcheck.scaling.fitting import Scaler, fit_scaler
from kcheck.verdict import json_number, label_value

#: ``--max-rows auto``: as many rows as the memory limit holds.
AUTO_ROWS = "auto"
#: svm-scale's default bounds; max-abs scaling ignores them (it maps to [-1, 1] by definition).
LOWER, UPPER = -1.0, 1.0


@dataclass
class Prepared:
    """A training file read, checked and scaled. ``y``: labels as the bindings store them
    (:func:`encode_labels`); ``y_raw``: the user's, which saved models carry."""

    path: str
    X: sp.csr_matrix
    y: np.ndarray
    y_raw: np.ndarray
    classes: np.ndarray
    scaler: Scaler
    summary: dict[str, Any]
    data_bytes: int
    read_seconds: float

    @property
    def rows(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    @property
    def sha256(self) -> str:
        return str(self.summary["sha256"])


@dataclass
class Scored:
    """A file to score models on, scaled and coded as training; ``unseen``: unknown labels."""

    path: str
    X: sp.csr_matrix
    y: np.ndarray
    sha256: str
    unseen: int

    @property
    def rows(self) -> int:
        return int(self.X.shape[0])


def prepare(
    path: str,
    *,
    scaling: str,
    memory_limit: int,
    zero_based: bool = False,
    integer_labels: bool = False,
    max_rows: int | str | None = None,
    seed: int = 0,
    per_csr_byte: int = CHECK_BYTES_PER_CSR_BYTE,
    what: str = "a check",
    fixed_bytes: int = FIXED_BYTES,
) -> Prepared:
    """Read ``path`` within ``memory_limit``, validate it for classification, and scale it.

    ``integer_labels``: refuse non-integer labels now (a model file must store them). ``max_rows``
    (a number, or ``"auto"``: what memory holds) keeps a stratified sample while streaming
    (:func:`kcheck.io.data.sample_libsvm`, with ``seed``); everything after sees only the sample.
    ``per_csr_byte``, ``fixed_bytes``, ``what``: the command's memory per byte of rows and beside
    them (kcheck.memory.check_fits)."""
    t0 = time.perf_counter()
    digest = hashlib.sha256()
    sample = None
    if max_rows is None:
        y_raw, X = read_libsvm(
            path,
            zero_based=zero_based,
            memory_limit=memory_limit,
            digest=digest,
            max_csr_bytes=max_data_bytes(memory_limit, per_csr_byte, fixed_bytes),
        )
    else:
        sample = sample_libsvm(
            path,
            None if max_rows == AUTO_ROWS else int(max_rows),
            seed=seed,
            zero_based=zero_based,
            memory_limit=memory_limit,
            digest=digest,
            max_csr_bytes=max_data_bytes(memory_limit, per_csr_byte, fixed_bytes),
        )
        y_raw, X = sample.y, sample.X
    read_seconds = time.perf_counter() - t0
    if integer_labels:
        require_integer_labels(y_raw)
    classes = np.unique(y_raw)
    _validate(path, X.shape[0], classes)
    summary = data_summary(path, X, classes, digest.hexdigest())
    if sample is not None and max_rows is not None:
        summary.update(sampling_json(sample, max_rows))
        if sample.auto and sample.sampled:
            warnings.warn(
                f"{path}: all {sample.rows_read:,} rows would not fit the memory limit of "
                f"{size_text(memory_limit)}; the check used a stratified sample of "
                f"{X.shape[0]:,} of them (--max-rows auto)",
                KcheckWarning,
                stacklevel=2,
            )
    check_fits(path, csr_bytes(X), memory_limit, per_csr_byte, what, fixed_bytes)
    return scaled(path, X, y_raw, classes, summary, scaling, memory_limit, read_seconds)


def scaled(
    path: str,
    X: sp.csr_matrix,
    y_raw: np.ndarray,
    classes: np.ndarray,
    summary: dict[str, Any],
    scaling: str,
    memory_limit: int,
    read_seconds: float,
) -> Prepared:
    """Validated rows that fit (:func:`kcheck.memory.check_fits`), scaled and coded."""
    data_bytes = csr_bytes(X)
    scaler = fit_scaler(
        X, method=scaling, lower=LOWER, upper=UPPER, source=path, memory_limit=memory_limit
    )
    X = _scale(scaler, X, memory_limit, path)
    return Prepared(
        path=path,
        X=X,
        y=encode_labels(y_raw, classes),
        y_raw=y_raw,
        classes=classes,
        scaler=scaler,
        summary=summary,
        data_bytes=data_bytes,
        read_seconds=read_seconds,
    )


def read_scored(
    path: str, prepared: Prepared, *, memory_limit: int | None, zero_based: bool = False
) -> Scored:
    """Read a test file whole at the training width, scaled and coded as training (:func:`open_test`
    scores any size). A file sharing no label with training is refused."""
    test = open_test(path, prepared, memory_limit=memory_limit, zero_based=zero_based)
    ys, Xs = [], []
    for y, X in test.blocks(raw_labels=True):
        ys.append(y)
        Xs.append(X)
    return Scored(
        path=path,
        X=Xs[0] if len(Xs) == 1 else sp.vstack(Xs, format="csr"),
        y=encode_labels(np.concatenate(ys), prepared.classes),
        sha256=test.sha256,
        unseen=test.unseen,
    )


#: A test file is read and scored in blocks of about this many CSR bytes.
TEST_BLOCK_BYTES = 16 << 20
TEST_BLOCK_ROWS = 1 << 16
#: The checking pass keeps blocks up to this many bytes; a larger test file is read again to score.
TEST_KEEP_BYTES = 64 << 20


@dataclass
class Predictions:
    """One model's predictions on every row of a test file: ``predicted`` class indices into the
    training classes, ``scores`` decision values where the model gives them."""

    predicted: np.ndarray
    scores: np.ndarray | None


#: What scores a block of scaled rows: labels coded as training's, and decision values or None.
BlockPredictor = Callable[[sp.csr_matrix], tuple[np.ndarray, np.ndarray | None]]


class TestFile:
    """A test file, checked whole before any training, then scored block by block.

    Opening reads it once: every line parsed (a bad one stops the check with file and line), labels
    checked and kept as class indices, content hashed. Rows are kept only while small
    (TEST_KEEP_BYTES); a larger file is reread when scoring, holding one block plus a few small
    arrays a row."""

    __test__ = False  # not a pytest class

    def __init__(
        self, path: str, prepared: Prepared, *, memory_limit: int | None, zero_based: bool
    ) -> None:
        self.path = path
        self.classes = prepared.classes
        self.train_path = prepared.path
        self.scaler = prepared.scaler
        self.reader = LibsvmBlocks(
            path,
            n_features=prepared.n_features,
            zero_based=zero_based,
            memory_limit=memory_limit,
            block_bytes=TEST_BLOCK_BYTES,
            block_rows=TEST_BLOCK_ROWS,
        )
        self.kept: list[tuple[np.ndarray, sp.csr_matrix]] | None = []
        codes: list[np.ndarray] = []
        unseen_labels = np.empty(0)
        kept_bytes = 0
        # Standard input cannot be read twice: its rows are kept, as its bytes already are.
        keep_all = path == "-"
        for y, X in self.reader:
            code = self.class_index(y)
            codes.append(code)
            unseen_labels = np.unique(np.concatenate([unseen_labels, y[code < 0]]))[:5]
            kept_bytes += csr_bytes(X)
            if self.kept is not None and (keep_all or kept_bytes <= TEST_KEEP_BYTES):
                self.kept.append((y, X))
            else:
                self.kept = None
        self.y = np.concatenate(codes)
        assert self.reader.sha256 is not None
        self.sha256: str = self.reader.sha256
        self.unseen = int(np.count_nonzero(self.y < 0))
        if self.unseen == self.rows:
            shown = ", ".join(str(label_value(v)) for v in unseen_labels)
            raise KcheckError(
                f"{path}: none of its labels ({shown}) occurs in the training file "
                f"{prepared.path}, so no model can be scored on it"
            )
        if self.reader.dropped:
            warnings.warn(
                dropped_warning(path, self.reader.dropped, prepared.n_features),
                KcheckWarning,
                stacklevel=3,
            )

    @property
    def rows(self) -> int:
        return int(self.y.size)

    def class_index(self, labels: np.ndarray, coded: bool = False) -> np.ndarray:
        """Each label's index in the training classes (-1: none), of raw or ``coded`` labels."""
        classes = encode_labels(self.classes, self.classes) if coded else self.classes
        pos = np.searchsorted(classes, labels).clip(0, classes.size - 1)
        n = classes.size
        dtype = np.int8 if n < 2**7 else np.int16 if n < 2**15 else np.int32
        return np.where(classes[pos] == labels, pos, -1).astype(dtype)

    def blocks(self, raw_labels: bool = False) -> Iterator[tuple[np.ndarray, sp.csr_matrix]]:
        """The rows by block in file order, scaled, labels raw (``raw_labels``) or coded."""
        source: Iterable[tuple[np.ndarray, sp.csr_matrix]] = (
            self.reader if self.kept is None else self.kept
        )
        seen = 0
        for y, X in source:
            seen += y.size
            if seen > self.rows:
                break
            yield (y if raw_labels else encode_labels(y, self.classes)), self.scaler.transform(X)
        if self.kept is None and (seen != self.rows or self.reader.sha256 != self.sha256):
            raise KcheckError(
                f"{self.path}: the file changed while it was being read (its content is not "
                "what was checked before training); score a file that stays put"
            )

    def predict(self, models: dict[str, BlockPredictor | None]) -> dict[str, Predictions | None]:
        """Every model's predictions on every row in one pass; a model given as None gets None."""
        out: dict[str, Predictions | None] = {name: None for name in models}
        active = {name: fn for name, fn in models.items() if fn is not None}
        if not active:
            return out
        predicted = {name: np.empty(self.rows, self.y.dtype) for name in active}
        scores: dict[str, np.ndarray | None] = {}
        start = 0
        for _, X in self.blocks():
            stop = start + X.shape[0]
            for name, fn in active.items():
                labels, dec = fn(X)
                predicted[name][start:stop] = self.class_index(labels, coded=True)
                if name not in scores:
                    scores[name] = (
                        None if dec is None else np.empty((self.rows, *dec.shape[1:]), dec.dtype)
                    )
                held = scores[name]
                if held is not None and dec is not None:
                    held[start:stop] = dec
            start = stop
        for name in active:
            out[name] = Predictions(predicted[name], scores.get(name))
        return out

    def accuracy(self, predictions: Predictions | None) -> float | None:
        """The share of rows whose predicted class is their label (None without predictions)."""
        if predictions is None or not self.rows:
            return None
        return float(np.count_nonzero(predictions.predicted == self.y)) / self.rows


@dataclass
class Tested:
    """Per model, predictions on every row (None: cannot predict), and the seconds scoring took."""

    test: TestFile
    predictions: dict[str, Predictions | None]
    seconds: float

    def accuracy(self, name: str) -> float | None:
        return self.test.accuracy(self.predictions.get(name))

    def to_json(self) -> dict[str, Any]:
        """The JSON ``test`` block."""
        return {
            "path": self.test.path,
            "sha256": self.test.sha256,
            "rows": self.test.rows,
            "seconds": self.seconds,
            "accuracy": {name: self.accuracy(name) for name in self.predictions},
        }


def open_test(
    path: str, prepared: Prepared, *, memory_limit: int | None, zero_based: bool = False
) -> TestFile:
    """Check a test file against the training data now, to score models later. One with no label in
    common with training is refused here, before any training."""
    return TestFile(path, prepared, memory_limit=memory_limit, zero_based=zero_based)


def sampling_json(sample: Sample, max_rows: int | str) -> dict[str, Any]:
    """The ``data`` fields that a ``--max-rows`` read adds: what was read, what was used, how."""
    return {
        "rows_read": sample.rows_read,
        "rows_used": int(sample.X.shape[0]),
        "sampling": {
            "method": METHOD,
            "max_rows": max_rows if max_rows == AUTO_ROWS else int(max_rows),
            "sampled": sample.sampled,
        },
    }


def parse_max_rows(value: int | str | None) -> int | str | None:
    """``--max-rows``: rows (MIN_ROWS to MAX_ROWS) or ``"auto"``; None: no limit."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        if text == AUTO_ROWS:
            return AUTO_ROWS
        digits = text.replace("_", "").replace(",", "")
        if not (digits.isascii() and digits.isdigit()):
            shown = text if len(text) <= 40 else text[:37] + "..."
            raise KcheckError(f"--max-rows takes a number of rows or auto, got {shown!r}")
        # More digits than MAX_ROWS has is over it: no int() of 5,000 digits.
        value = int(digits) if len(digits) <= len(str(MAX_ROWS)) else MAX_ROWS + 1
    try:
        n = operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        n = None
    if n is None:
        raise KcheckError(f"--max-rows takes a number of rows or auto, got {value!r}")
    if n < MIN_ROWS:
        raise KcheckError(f"--max-rows must be at least {MIN_ROWS} (or auto)")
    if n > MAX_ROWS:
        raise KcheckError(f"--max-rows must be at most {MAX_ROWS:,} (or auto)")
    return n


def _validate(path: str, rows: int, classes: np.ndarray) -> None:
    if classes.size < 2:
        only = f"every row has label {label_value(classes[0])}; " if classes.size else ""
        raise KcheckError(f"{path}: {only}a classifier needs at least two classes")
    if rows < MIN_ROWS:
        raise KcheckError(
            f"{path}: {rows} rows are too few to compare classifiers "
            f"(at least {MIN_ROWS} are needed)"
        )
    if rows < MIN_ROWS_PER_CLASS * classes.size:
        raise KcheckError(
            f"{path}: {classes.size:,} classes in {rows:,} rows; comparing "
            f"classifiers needs at least {MIN_ROWS_PER_CLASS} rows per class on average"
        )


def encode_labels(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Labels the bindings hold exactly (C ints): integral labels are kept (saved models then carry
    them); otherwise each label becomes its class code 0..k-1 so 2.5 and 2.7 cannot merge. A label
    not in ``classes`` becomes -1, which no model predicts."""
    if np.all(np.floor(classes) == classes) and np.all(np.abs(classes) < 2**31):
        return y
    pos = np.searchsorted(classes, y).clip(0, classes.size - 1)
    return np.where(classes[pos] == y, pos, -1).astype(np.float64)


def require_integer_labels(y: np.ndarray) -> None:
    """Refuse labels a model file (C ints) would silently change: codes for 2.5 and 3.5 would make
    ``svm-predict`` print codes, not the user's labels."""
    y = np.asarray(y, dtype=np.float64)
    bad = ~np.isfinite(y) | (np.floor(y) != y) | (np.abs(y) >= 2**31)
    if bad.any():
        v = float(y[np.flatnonzero(bad)[0]])
        raise KcheckError(
            f"label {v:.17g} is not an integer; LIBLINEAR and LIBSVM model files store class "
            "labels as integers, so a model can be saved only for integer labels"
        )


def data_summary(
    path: str, X: sp.csr_matrix, classes: np.ndarray, sha256: str | None = None
) -> dict[str, Any]:
    """The JSON ``data`` block, before any scaling or sampling; ``sha256`` of the decompressed
    content ties a verdict to its data (``verify --check-json``, ``batch --resume``)."""
    n_rows, n_features = X.shape
    return {
        "path": path,
        "sha256": sha256,
        "rows": int(n_rows),
        "features": int(n_features),
        "nnz": int(X.nnz),
        "density": json_number(X.nnz / max(1, n_rows * n_features)),
        "classes": [label_value(c) for c in classes],
    }


def _scale(scaler: Scaler, X: sp.csr_matrix, memory_limit: int, path: str) -> sp.csr_matrix:
    """Scale in place when zeros stay zeros; refuse a densifying scaling that cannot fit."""
    try:
        return scaler.transform_inplace(X)
    except ValueError:
        pass
    nnz = scaler.nnz_after(X)
    if nnz * 12 > memory_limit:
        raise KcheckError(
            f"{path}: min-max scaling to [{scaler.lower:g}, {scaler.upper:g}] turns zeros into "
            f"non-zeros and would store {nnz:,} values; use --scaling maxabs"
        )
    return scaler.transform(X)


def scaling_json(scaler: Scaler) -> dict[str, Any]:
    """The JSON ``scaling`` block."""
    return {"method": scaler.method, "lower": scaler.lower, "upper": scaler.upper}


def unseen_warnings(test: Scored | TestFile | None) -> list[str]:
    """The warning for a test file with labels that training never saw (none without)."""
    if test is None or not test.unseen:
        return []
    return [
        f"{test.path}: {test.unseen:,} of {test.rows:,} rows have a label that never occurs "
        "in the training file; no model can get them right"
    ]
