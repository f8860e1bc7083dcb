"""Prediction with saved models: kcheck's own, svm-train's and liblinear-train's. Data is scaled as
the training data was, by ``MODEL.range`` (what ``--model-out`` writes) or ``range_path`` (e.g.
``svm-scale -s``'s); ``scale=False`` takes it as scaled, as ``svm-predict`` does. Both files may
come from anywhere: each is fully parsed and checked (:mod:`kcheck.modelfiles.checked`,
:func:`kcheck.scaling.fitting.read_range_file`) and against the other before a C loader sees it.
Nothing prints; progress goes to ``progress(event)``."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from kcheck.bindings import engines
from kcheck.defaults import Event, Progress, no_progress
from kcheck.errors import KcheckError, KcheckWarning
from kcheck.io.data import read_libsvm
from kcheck.modelfiles import checked as modelfile
from kcheck.modelfiles import load as model_load
from kcheck.scaling.fitting import RANGE_SUFFIX, Scaler, read_range_file
from kcheck.terms.expand import TermSpec, read_spec, spec_path

__all__ = [
    "Prediction",
    "SavedModel",
    "format_labels",
    "format_probabilities",
    "load",
    "predict_file",
]


@dataclass
class SavedModel:
    """A model file and the scaling its data needs (None: the data is already scaled)."""

    path: str
    range_path: str | None
    kind: str
    model: engines.LinearModel | engines.RbfModel
    scaler: Scaler | None
    #: The product terms of a ``linear+K`` model (``MODEL.terms``), appended after scaling.
    spec: TermSpec | None = None

    @property
    def n_features(self) -> int | None:
        """Columns to read: the range file's width, else a LIBLINEAR model's (LIBSVM: all)."""
        if self.spec is not None:
            return self.spec.width
        if self.scaler is not None:
            return self.scaler.n_features
        if isinstance(self.model, engines.LinearModel):
            return self.model.n_features
        return None

    def predict_scaled(self, X: sp.spmatrix) -> np.ndarray:
        """Labels for rows that are already scaled (e.g. ``svm-scale -r`` output)."""
        return self.model.predict(self._with_products(X))

    def _with_products(self, X: sp.spmatrix) -> sp.csr_matrix:
        X = engines.as_binding_csr(X)
        return X if self.spec is None else self.spec.apply(X)

    def check_probability(self) -> None:
        """Refuse, with the reason, a model that cannot give probabilities."""
        if self.model.has_probability:
            return
        if isinstance(self.model, engines.LinearModel):
            raise KcheckError(
                f"{self.path}: a LIBLINEAR model gives probabilities only for logistic "
                "regression (liblinear-train -s 0, 6 or 7); this one cannot be used with -b 1"
            )
        raise KcheckError(
            f"{self.path}: the model has no probability information (no probA/probB); train "
            "it with svm-train -b 1 or kcheck check --model kernel --probability to use -b 1"
        )

    def predict_probability_scaled(self, X: sp.spmatrix) -> tuple[np.ndarray, np.ndarray]:
        """(labels, probabilities in ``model.labels`` order) for already scaled rows."""
        self.check_probability()
        return self.model.predict_probability(self._with_products(X))


def load(
    path: str,
    memory_limit: int | None = None,
    *,
    range_path: str | None = None,
    scale: bool = True,
) -> SavedModel:
    """Load model ``path`` and its range file (``range_path``, else ``path``.range; none with
    ``scale=False``), refusing a disagreeing pair; both fully checked before any C code."""
    if not scale and range_path is not None:
        raise KcheckError("-r RANGE and --no-scale exclude each other")
    kind = modelfile.model_file_kind(path)
    if scale:
        if range_path is None:
            range_path = path + RANGE_SUFFIX
            if not os.path.isfile(range_path):
                raise KcheckError(
                    f"range file {range_path} not found; predict scales the data with the range "
                    "file saved next to the model (written by kcheck check --model-out); give "
                    "another with -r RANGE (e.g. from svm-scale -s), or --no-scale if the data "
                    "is already scaled"
                )
        elif not os.path.isfile(range_path):
            raise KcheckError(f"-r {range_path}: no such range file")
    model = model_load.load_model(path, memory_limit)
    spec = _load_spec(path, model)
    scaler = None
    if range_path is not None:
        # A range file wider than a LIBLINEAR model is not its own: refuse it before allocating.
        width = model.n_features if isinstance(model, engines.LinearModel) else None
        if spec is not None:
            width = spec.width
        scaler = read_range_file(range_path, memory_limit=memory_limit, max_features=width)
        if spec is not None and scaler.n_features != spec.width:
            raise KcheckError(
                f"{range_path} does not match {spec_path(path)}: the range file scales "
                f"{scaler.n_features} features, the term spec's width is {spec.width}"
            )
        _check_widths(path, range_path, model, scaler, spec)
    return SavedModel(path, range_path, kind, model, scaler, spec)


def _load_spec(path: str, model: engines.LinearModel | engines.RbfModel) -> TermSpec | None:
    """``MODEL.terms`` beside a LIBLINEAR model: a ``linear+K`` model's products, checked against
    its width (features, then exactly K products)."""
    where = spec_path(path)
    if not os.path.isfile(where):
        return None
    if not isinstance(model, engines.LinearModel):
        raise KcheckError(f"{where}: a term spec goes with a LIBLINEAR model, not {path}")
    spec = read_spec(where)
    if model.n_features != spec.width + len(spec.terms):
        raise KcheckError(
            f"{where} does not match {path}: {spec.width} features and {len(spec.terms)} "
            f"products, but the model has {model.n_features} features"
        )
    return spec


def _check_widths(
    path: str,
    range_path: str,
    model: engines.LinearModel | engines.RbfModel,
    scaler: Scaler,
    spec: TermSpec | None = None,
) -> None:
    """A model on scaled data uses only features its range file keeps, else the files do not belong
    together; a LIBLINEAR model's width must cover the range file (LIBSVM: a warning)."""
    n = scaler.n_features
    if isinstance(model, engines.LinearModel):
        if n > model.n_features:
            raise KcheckError(
                f"{range_path} does not match {path}: the range file scales {n} features, "
                f"the model has {model.n_features}"
            )
        used = np.flatnonzero(np.any(model.weights != 0, axis=1))
        if spec is not None:
            # The product columns come after the scaled ones; they are built, not scaled.
            used = used[used < spec.width]
    else:
        used = model.used_features()
        # LIBSVM stores no width; SVs never using the range's last feature are suspicious.
        if used.size and n > int(used.max()) + 1:
            warnings.warn(
                f"{range_path} scales features up to {n}, but no support vector of {path} "
                f"uses a feature above {int(used.max()) + 1}; are they from the same data?",
                KcheckWarning,
                stacklevel=3,
            )
    kept = scaler.feature_min != scaler.feature_max
    inside = used[used < n]
    unscaled = np.concatenate([used[used >= n], inside[~kept[inside]]])
    if unscaled.size:
        j = int(unscaled.min()) + 1
        raise KcheckError(
            f"{range_path} does not match {path}: the model uses feature {j}, which the range "
            f"file does not scale ({unscaled.size} such feature{'s' if unscaled.size > 1 else ''})"
        )


@dataclass
class Prediction:
    """What ``kcheck predict`` prints: labels, and with -b 1 each class's probability."""

    kind: str
    labels: np.ndarray
    correct: int | None
    rows: int
    #: With probabilities: the model's classes, in the order of ``probabilities``' columns.
    classes: np.ndarray | None = None
    probabilities: np.ndarray | None = None

    @property
    def accuracy(self) -> float | None:
        return None if self.correct is None or self.rows == 0 else self.correct / self.rows


def predict_file(
    model_path: str,
    data_path: str,
    *,
    range_path: str | None = None,
    scale: bool = True,
    probability: bool = False,
    zero_based: bool = False,
    progress: Progress | None = None,
    memory_limit: int | None = None,
) -> Prediction:
    """Scale ``data_path`` (:func:`load`) and predict every row; ``probability``: as ``svm-predict
    -b 1``. A range file's ``y`` section scales the labels first."""
    report = progress or no_progress
    report(Event("loading " + model_path))
    saved = load(model_path, memory_limit, range_path=range_path, scale=scale)
    if probability:
        saved.check_probability()  # before reading the data
    report(Event("reading " + data_path))
    y, X = read_libsvm(
        data_path, n_features=saved.n_features, zero_based=zero_based, memory_limit=memory_limit
    )
    if saved.scaler is not None:
        X = saved.scaler.transform(X)
        if saved.scaler.y_scaling is not None and np.isfinite(y).all():
            try:
                y = saved.scaler.y_scaling.apply(y)
            except KcheckError as e:
                raise KcheckError(f"{saved.range_path}: {e}") from None
    report(Event("predicting"))
    probs = None
    if probability:
        labels, probs = saved.predict_probability_scaled(X)
    else:
        labels = saved.predict_scaled(X)
    known = np.isfinite(y)
    correct = int(np.count_nonzero(labels[known] == y[known])) if known.all() else None
    classes = saved.model.labels if probability else None
    return Prediction(saved.kind, labels, correct, int(labels.size), classes, probs)


def format_labels(labels: np.ndarray) -> str:
    """One label a line, as ``svm-predict`` writes them (``%.17g``: 1 and -1 for integers)."""
    if labels.size == 0:
        return ""
    return "\n".join(format(float(v), ".17g") for v in labels) + "\n"


def format_probabilities(classes: np.ndarray, labels: np.ndarray, probs: np.ndarray) -> str:
    """``svm-predict -b 1``'s output: ``labels c1 c2 ...``, then ``label p1 p2 ...`` (%d, %g)."""
    head = "labels" + "".join(f" {int(c)}" for c in classes) + "\n"
    if labels.size == 0:
        return head
    row = "%g" + " %g" * probs.shape[1] + "\n"
    values = np.column_stack([labels, probs]).tolist()
    return head + "".join(row % tuple(v) for v in values)
