"""Read, validate and scale a training file once, for every command that trains on it.

``check``, ``verify`` and ``--model-out`` all start from a :class:`Prepared`: the scaled rows,
the labels as the bindings hold them, the user's own labels, the fitted scaling and the JSON
``data`` block with the content hash. Validation happens here, at the boundary, so the
commands cannot disagree about what data they accept or how labels are coded.
"""

from __future__ import annotations

import hashlib
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck.data import Sample, read_libsvm, sample_libsvm
from kcheck.defaults import MIN_ROWS, MIN_ROWS_PER_CLASS
from kcheck.errors import KcheckError, KcheckWarning
from kcheck.memory import check_fits, csr_bytes, max_data_bytes, size_text
from kcheck.reservoir import METHOD
from kcheck.scaling import Scaler, fit_scaler
from kcheck.verdict import json_number, label_value

#: ``--max-rows auto``: as many rows as the memory limit holds.
AUTO_ROWS = "auto"
#: svm-scale's default bounds; max-abs scaling ignores them (it maps to [-1, 1] by definition).
LOWER, UPPER = -1.0, 1.0


@dataclass
class Prepared:
    """A training file, read, checked and scaled: what every model here is trained on.

    ``y`` holds the labels as LIBLINEAR and LIBSVM store them (:func:`encode_labels`);
    ``y_raw`` the user's labels, which saved models carry.
    """

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
    """A file to score trained models on, scaled like the training data, labels coded alike.

    ``unseen`` counts the rows whose label never occurs in training: no model can get them
    right.
    """

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
) -> Prepared:
    """Read ``path`` within ``memory_limit``, validate it for classification, and scale it.

    ``integer_labels``: refuse non-integer labels now (a model file will have to store them),
    rather than after the whole run. ``max_rows`` (a number, or ``"auto"``: what the memory
    limit holds) keeps a stratified sample of that many rows while the file streams
    (:func:`kcheck.data.sample_libsvm`, drawn with ``seed``); everything after, the scaling
    included, sees the sample only.
    """
    t0 = time.perf_counter()
    digest = hashlib.sha256()
    sample = None
    if max_rows is None:
        y_raw, X = read_libsvm(
            path,
            zero_based=zero_based,
            memory_limit=memory_limit,
            digest=digest,
            max_csr_bytes=max_data_bytes(memory_limit),
        )
    else:
        sample = sample_libsvm(
            path,
            None if max_rows == AUTO_ROWS else int(max_rows),
            seed=seed,
            zero_based=zero_based,
            memory_limit=memory_limit,
            digest=digest,
            max_csr_bytes=max_data_bytes(memory_limit),
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
    data_bytes = csr_bytes(X)
    check_fits(path, data_bytes, memory_limit)
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
    """Read a test file at the training width, scale it as the training data, code its labels.

    A test file with no label in common with training can tell nothing about any model: it is
    refused (before any training, when the caller reads it first).
    """
    digest = hashlib.sha256()
    y_raw, X = read_libsvm(
        path,
        n_features=prepared.n_features,
        zero_based=zero_based,
        memory_limit=memory_limit,
        digest=digest,
    )
    known = np.isin(y_raw, prepared.classes)
    if y_raw.size and not known.any():
        shown = ", ".join(str(label_value(v)) for v in np.unique(y_raw)[:5])
        raise KcheckError(
            f"{path}: none of its labels ({shown}) occurs in the training file "
            f"{prepared.path}, so no model can be scored on it"
        )
    return Scored(
        path=path,
        X=prepared.scaler.transform(X),
        y=encode_labels(y_raw, prepared.classes),
        sha256=digest.hexdigest(),
        unseen=int(y_raw.size - np.count_nonzero(known)),
    )


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
    """``--max-rows``: a number of rows (at least MIN_ROWS) or ``"auto"``; None is no limit."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        if text == AUTO_ROWS:
            return AUTO_ROWS
        try:
            value = int(text.replace("_", "").replace(",", ""))
        except ValueError:
            raise KcheckError(f"--max-rows takes a number of rows or auto, got {value!r}") from None
    if isinstance(value, bool) or value < MIN_ROWS:
        raise KcheckError(f"--max-rows must be at least {MIN_ROWS} (or auto)")
    return int(value)


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
    """Labels the bindings hold exactly: LIBLINEAR and LIBSVM store them as C ints.

    Integral labels are kept (saved models then carry the user's labels). Otherwise every
    label becomes its class code 0..k-1, so 2.5 and 2.7 cannot merge; a label not in
    ``classes`` (in a test file) becomes -1, a code no model predicts.
    """
    if np.all(np.floor(classes) == classes) and np.all(np.abs(classes) < 2**31):
        return y
    pos = np.searchsorted(classes, y).clip(0, classes.size - 1)
    return np.where(classes[pos] == y, pos, -1).astype(np.float64)


def require_integer_labels(y: np.ndarray) -> None:
    """Model files store labels as C ints; refuse labels they would silently change.

    Mapping 2.5 and 3.5 to codes would make ``svm-predict`` and ``liblinear-predict`` print the
    codes instead of the user's labels, so a saved model must carry the real ones.
    """
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
    """The JSON ``data`` block: what was read, before any scaling or sampling.

    ``sha256`` is the hash of the file's decompressed content: it ties a verdict to its data
    (``verify --check-json``, ``batch --resume``).
    """
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


def unseen_warnings(test: Scored | None) -> list[str]:
    """The warning for a test file with labels that training never saw (none without)."""
    if test is None or not test.unseen:
        return []
    return [
        f"{test.path}: {test.unseen:,} of {test.rows:,} rows have a label that never occurs "
        "in the training file; no model can get them right"
    ]
