"""Trained models: export after a check, and prediction with saved models.

* :func:`export` trains the chosen model on all training rows and saves it in LIBLINEAR's or
  LIBSVM's own format, next to an svm-scale range file, so the official ``liblinear-predict`` /
  ``svm-predict`` (after ``svm-scale -r``) can use it as well as ``kcheck predict``.
* :func:`predict_file` applies a saved range file and model to a data file.

Nothing here prints; progress goes through a ``progress(stage, done, total)`` callback.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck import engines
from kcheck.atomic import atomic_paths
from kcheck.data import read_libsvm
from kcheck.defaults import MODEL_KINDS, Progress, no_progress
from kcheck.errors import KcheckError, KcheckWarning, TimeLimitReached
from kcheck.pipeline import CheckConfig, CheckReport
from kcheck.prepare import require_integer_labels
from kcheck.rbf_search import EXPORT_GRID, Grid, rbf_grid_search
from kcheck.scaling import Scaler, read_range_file, write_range_file
from kcheck.split import stratified_subsample
from kcheck.verdict import json_number, json_parameter
from kcheck.workers import run_until

#: The kernel model's (C, gamma) search runs on at most this many rows (stratified sample):
#: each grid point costs about (rows)^2 kernel evaluations, and the optimum moves little.
MAX_SEARCH_ROWS = 10_000
RANGE_SUFFIX = ".range"


# --- export ---------------------------------------------------------------------------------------


def train_model(
    report: CheckReport, config: CheckConfig, progress: Progress | None = None
) -> None:
    """Train the ``--model-out`` model on all training rows and record it in the report."""
    assert config.model_out is not None
    progress = progress or no_progress
    kind = config.model_kind or report.result.decision.verdict
    progress(f"training the {kind} model on all rows", None, None)
    train_idx, val_idx = report.split
    y_raw = report.prepared.y_raw
    report.result.model = export(
        sp.vstack([report.T.X, report.V.X], format="csr"),
        np.concatenate([y_raw[train_idx], y_raw[val_idx]]),
        report.prepared.scaler,
        kind,
        config.model_out,
        seed=config.seed,
        jobs=config.jobs,
        progress=progress,
        deadline=report.deadline,
    )
    report.result.finished = time.perf_counter()


def export(
    X: sp.csr_matrix,
    y: np.ndarray,
    scaler: Scaler,
    kind: str,
    path: str,
    *,
    seed: int = 0,
    jobs: int = 1,
    progress: Progress | None = None,
    grid: Grid = EXPORT_GRID,
    max_search_rows: int = MAX_SEARCH_ROWS,
    deadline: float | None = None,
) -> dict[str, Any]:
    """Train a ``kind`` model on all rows of the scaled ``X``; save it and ``path``.range.

    ``linear``: LIBLINEAR ``-s 2 -B 1`` with C from its ``-C`` search on all rows. ``kernel``:
    LIBSVM C-SVC with the RBF kernel; C and gamma from ``grid`` with 5-fold CV on a stratified
    sample of at most ``max_search_rows`` rows. Returns the verdict JSON's ``model`` entry.
    With a ``deadline`` (``time.perf_counter()``), training runs where the deadline can stop
    it, and nothing is written if it does.
    """
    report = progress or no_progress
    t0 = time.perf_counter()
    if kind not in MODEL_KINDS:
        raise KcheckError(f"model kind must be linear or kernel, got {kind!r}")
    y = np.asarray(y, dtype=np.float64)
    require_integer_labels(y)
    if np.unique(y).size < 2:
        raise KcheckError("a classifier needs at least two classes")
    X = engines.as_binding_csr(X)
    range_path = path + RANGE_SUFFIX
    # Both files are written in full before either is renamed into place, so a failure leaves
    # the old pair (or nothing) rather than a new model beside an old range file. The model is
    # renamed first, and an interrupt waits for both renames (kcheck.atomic).
    with atomic_paths([(path, "model file"), (range_path, "range file")]) as (model_tmp,
                                                                              range_tmp):
        args = (X, y, kind, model_tmp, seed, jobs, grid, max_search_rows)
        if deadline is None:
            trained = _train_and_save(*args, report)
        else:
            # In a worker process that the deadline can end. It writes only the model's
            # temporary file, which is this process's to remove if the worker is stopped.
            try:
                trained = run_until(deadline, _train_and_save, *args, None)
            except TimeLimitReached:
                raise KcheckError(
                    f"--time-limit reached while training the {kind} model for --model-out; "
                    f"{path} was not written"
                ) from None
        write_range_file(range_tmp, scaler)
    params, cv, search_rows, grid_points = trained
    return {
        "path": path,
        "range_path": range_path,
        "kind": kind,
        "params": params,
        "cv_accuracy": json_number(cv),
        "search_rows": search_rows,
        "grid_points": grid_points,
        "seconds": json_number(time.perf_counter() - t0),
    }


def _train_and_save(
    X: sp.csr_matrix,
    y: np.ndarray,
    kind: str,
    model_tmp: str,
    seed: int,
    jobs: int,
    grid: Grid,
    max_search_rows: int,
    progress: Progress | None,
) -> tuple[dict[str, Any], float | None, int, int | None]:
    """Train the model and save it to ``model_tmp``; (params, CV accuracy, search rows, grid
    points)."""
    report = progress or no_progress
    params: dict[str, Any]
    model: engines.LinearModel | engines.RbfModel
    if kind == "linear":
        report("training the linear model on all rows", None, None)
        # Trained on the columns in use, saved at full width: on 20 million mostly empty
        # columns, full-width training took 370 s and 2.75 GB.
        model, cv = engines.fit_linear(X, y, seed=seed)
        params = {"C": json_parameter(model.C)}
        search_rows, grid_points = int(y.size), None
    else:
        rows = stratified_subsample(y, max_search_rows, seed=seed)
        found = rbf_grid_search(
            X[rows], y[rows], grid, seed=seed, jobs=jobs, progress=report,
            stage="kernel model: grid search",
        )
        report("training the kernel model on all rows", None, None)
        model = engines.train_rbf(engines.SvmProblem.from_data(X, y), found.C, found.gamma)
        cv = found.cv_accuracy
        params = {"C": json_parameter(found.C), "gamma": json_parameter(found.gamma)}
        search_rows, grid_points = int(rows.size), found.points
    model.save(model_tmp)
    return params, cv, search_rows, grid_points


@dataclass
class SavedModel:
    """A model file and its range file, checked against each other."""

    path: str
    range_path: str
    kind: str
    model: engines.LinearModel | engines.RbfModel
    scaler: Scaler

    def predict_scaled(self, X: sp.spmatrix) -> np.ndarray:
        """Labels for rows that are already scaled (e.g. ``svm-scale -r`` output)."""
        return self.model.predict(engines.as_binding_csr(X))


def load(path: str, memory_limit: int | None = None) -> SavedModel:
    """Load ``path`` (LIBLINEAR or LIBSVM) and ``path``.range; refuse a pair that disagrees.

    Both files may come from anywhere: each is parsed and checked in full, against the
    memory limit too, before any C code sees it.
    """
    kind = engines.model_file_kind(path)
    range_path = path + RANGE_SUFFIX
    if not os.path.isfile(range_path):
        raise KcheckError(
            f"range file {range_path} not found; predict applies the scaling saved next to "
            "the model (MODEL.range, written by kcheck check --model-out or svm-scale -s)"
        )
    model = engines.load_model(path, memory_limit)
    # A LIBLINEAR model knows its width, and a range file wider than it does not belong to it:
    # refuse that at its line instead of allocating the range file's width first.
    width = model.n_features if isinstance(model, engines.LinearModel) else None
    scaler = read_range_file(range_path, memory_limit=memory_limit, max_features=width)
    _check_widths(path, range_path, model, scaler)
    return SavedModel(path, range_path, kind, model, scaler)


def _check_widths(
    path: str, range_path: str, model: engines.LinearModel | engines.RbfModel, scaler: Scaler
) -> None:
    """A model trained on scaled data uses only features its range file scales.

    A feature the range file drops (constant or absent) is 0 in every scaled training row, so
    a LIBLINEAR weight or a LIBSVM support vector that uses it means the two files do not
    belong together. A LIBLINEAR model also knows its width, which must cover the range file;
    for a LIBSVM model a range file wider than the support vectors is only warned about.
    """
    n = scaler.n_features
    if isinstance(model, engines.LinearModel):
        if n > model.n_features:
            raise KcheckError(
                f"{range_path} does not match {path}: the range file scales {n} features, "
                f"the model has {model.n_features}"
            )
        used = np.flatnonzero(np.any(model.weights != 0, axis=1))
    else:
        used = model.used_features()
        # LIBSVM files do not store a width; a support vector set that never uses the range
        # file's last feature is possible (only non-support rows stored it), but suspicious.
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
    kind: str
    labels: np.ndarray
    correct: int | None
    rows: int

    @property
    def accuracy(self) -> float | None:
        return None if self.correct is None or self.rows == 0 else self.correct / self.rows


def predict_file(
    model_path: str,
    data_path: str,
    *,
    zero_based: bool = False,
    progress: Progress | None = None,
    memory_limit: int | None = None,
) -> Prediction:
    """Scale ``data_path`` with the model's range file and predict every row."""
    report = progress or no_progress
    report("loading " + model_path, None, None)
    saved = load(model_path, memory_limit)
    report("reading " + data_path, None, None)
    y, X = read_libsvm(data_path, n_features=saved.scaler.n_features, zero_based=zero_based,
                       memory_limit=memory_limit)
    report("predicting", None, None)
    labels = saved.predict_scaled(saved.scaler.transform(X))
    known = np.isfinite(y)
    correct = int(np.count_nonzero(labels[known] == y[known])) if known.all() else None
    return Prediction(saved.kind, labels, correct, int(labels.size))


def format_labels(labels: np.ndarray) -> str:
    """One label a line, as ``svm-predict`` writes them (``%.17g``: 1 and -1 for integers)."""
    if labels.size == 0:
        return ""
    return "\n".join(format(float(v), ".17g") for v in labels) + "\n"
