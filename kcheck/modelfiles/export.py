"""Training and saving the model a check recommends (``--model-out``).

:func:`export` trains the chosen model on all rows and saves it in LIBLINEAR's or LIBSVM's format
beside an svm-scale range file, so ``liblinear-predict`` / ``svm-predict`` (after ``svm-scale -r``)
can use it as well as ``kcheck predict`` (:mod:`kcheck.predict`). The kernel model's search climbs
from the check's tuned point where there is one (:func:`tuned_start`; the check's 600-2,000 rows
undervalue a large C), else runs grid.py's grid and a refinement. Its predicted time is reported
before training. Nothing prints; progress goes to ``progress(event)``."""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck.bindings import engines
from kcheck.config import CheckConfig
from kcheck.costs import budget
from kcheck.defaults import FOLDS, MODEL_KINDS, Event, Progress, no_progress, products_of
from kcheck.errors import KcheckError, TimeLimitReached
from kcheck.io.atomic import atomic_paths
from kcheck.parallel.workers import run_until
from kcheck.pipeline import CheckReport
from kcheck.prepare import require_integer_labels
from kcheck.result import class_weights_json
from kcheck.scaling.fitting import RANGE_SUFFIX, Scaler, write_range_file
from kcheck.split import stratified_subsample
from kcheck.terms.expand import TermSpec, spec_path, spec_text
from kcheck.tuning import linear_c
from kcheck.tuning.rbf_grid import (
    EXPORT_GRID,
    Grid,
    duration_text,
    grid_text,
    rbf_grid_search,
    search_seconds,
)
from kcheck.verdict import json_number, json_parameter

#: Max rows (stratified) of the kernel search: a point costs ~rows^2; the optimum moves little.
MAX_SEARCH_ROWS = 10_000
#: LIBSVM's ``-b 1`` adds a 5-fold CV to the training, for Platt's sigmoid.
PROBABILITY_FACTOR = 6.0


# --- where the kernel model's search starts -------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """Where the kernel search starts: ``exact`` or ``rbfsvm`` with its point, or ``grid``."""

    source: str
    log2_C: float | None = None
    log2_gamma: float | None = None

    @property
    def point(self) -> tuple[float, float] | None:
        if self.log2_C is None or self.log2_gamma is None:
            return None
        return self.log2_C, self.log2_gamma

    def text(self) -> str:
        """``starting from exact mode's C=2^5 gamma=2^0.78``, or why the grid."""
        if self.point is None:
            return (
                "no RBF SVM was tuned by the check (exact mode and rbfsvm did not run), "
                "so grid.py's grid"
            )
        who = "exact mode's" if self.source == "exact" else f"{self.source}'s"
        return f"starting from {who} C=2^{_log2(self.point[0])} gamma=2^{_log2(self.point[1])}"


GRID_START = Start("grid")
#: The check's blocks that tune an RBF SVM, by preference, and the start each gives.
START_METHODS = (("rbf", "exact"), ("rbfsvm", "rbfsvm"))


def _log2(value: float) -> str:
    return f"{round(value, 2):g}"


def tuned_start(checkers: Mapping[str, Any]) -> Start:
    """The kernel search's start from a check's ``checkers`` block: exact mode's (``rbf``), else
    rbfsvm's point where it finished; else :data:`GRID_START`."""
    for name, source in START_METHODS:
        block = checkers.get(name)
        if not isinstance(block, Mapping) or block.get("status") == "skipped":
            continue
        c, g = block.get("log2_C"), block.get("log2_gamma")
        if (
            isinstance(c, (int, float))
            and isinstance(g, (int, float))
            and _finite(c)
            and _finite(g)
        ):
            return Start(source, float(c), float(g))
    return GRID_START


def _finite(value: float) -> bool:
    return not isinstance(value, bool) and math.isfinite(value)


# --- export ---------------------------------------------------------------------------------------


def train_model(report: CheckReport, config: CheckConfig, progress: Progress | None = None) -> None:
    """Train the ``--model-out`` model on all training rows and record it in the report."""
    assert config.model_out is not None
    progress = progress or no_progress
    kind = config.model_kind or report.result.decision.verdict
    train_idx, val_idx = report.split
    y_raw = report.prepared.y_raw
    X = sp.vstack([report.T.X, report.V.X], format="csr")
    spec = None
    k = products_of(kind)
    if k is not None:
        spec = _products_spec(report, k, int(X.shape[1]))
        X = spec.apply(X)
    start = tuned_start(report.json["checkers"]) if kind == "kernel" else None
    report.result.model = export(
        X,
        np.concatenate([y_raw[train_idx], y_raw[val_idx]]),
        report.prepared.scaler,
        kind,
        config.model_out,
        seed=config.seed,
        jobs=config.jobs,
        progress=progress,
        deadline=report.deadline,
        probability=config.model_probability,
        terms=spec,
        zero_based=config.zero_based,
        class_weight=report.result.scoring.class_weight,
        start=start,
    )
    data = report.prepared.summary
    if data.get("sampling", {}).get("sampled"):
        report.result.warnings.append(
            f"--model-out: the model is trained on the sample of {data['rows_used']:,} of "
            f"{data['rows_read']:,} rows that --max-rows kept, not on the whole file"
        )


def _products_spec(report: CheckReport, k: int, width: int) -> TermSpec:
    """The top ``k`` terms of the check's explanation, as a spec at the training width."""
    ex = report.result.explain
    if ex is None or not ex["available"]:
        why = "--explain was not given" if ex is None else ex["reason"]
        raise KcheckError(f"--model linear+{k}: no product terms to add ({why})")
    if k > len(ex["terms"]):
        raise KcheckError(
            f"--model linear+{k}: the explanation lists only {len(ex['terms'])} terms"
        )
    base = ex["index_base"]
    terms = tuple((a - base, b - base) for a, b in (t["features"] for t in ex["terms"][:k]))
    return TermSpec(width, terms)


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
    probability: bool = False,
    terms: TermSpec | None = None,
    zero_based: bool = False,
    class_weight: engines.ClassWeight | None = None,
    start: Start | None = None,
) -> dict[str, Any]:
    """Train a ``kind`` model on all rows of the scaled ``X``; save it and ``path``.range. Returns
    the verdict JSON's ``model`` entry.

    ``linear``: LIBLINEAR ``-s 2 -B 1`` with C from its ``-C`` search. ``kernel``: LIBSVM C-SVC with
    the RBF kernel, (C, gamma) from ``grid`` by 5-fold CV on at most ``max_search_rows`` stratified
    rows, climbing from ``start`` where given. ``progress`` gets the predicted time first
    (:func:`predicted`). ``deadline``: train where it can be stopped, writing nothing then.
    ``probability``: ``-b 1``. ``terms``: X has the products appended (``linear+K``); the spec is
    saved as ``path``.terms. ``class_weight``: ``-wi`` weights, and the grid ranks by balanced
    accuracy."""
    report = progress or no_progress
    t0 = time.perf_counter()
    _check_kind(kind, terms, probability)
    y = _training_labels(y)
    X = engines.as_binding_csr(X)
    start, grid = _search_start(kind, grid, start)
    seconds, line = predicted(
        X,
        y,
        kind,
        grid=grid,
        max_search_rows=max_search_rows,
        jobs=jobs,
        probability=probability,
        start=start,
    )
    report(Event(_first_stage(kind), predicted_seconds=seconds, line=line))
    with atomic_paths(_files(path, path + RANGE_SUFFIX, terms)) as (model_tmp, range_tmp, *spec):
        train = functools.partial(
            _train_and_save,
            X,
            y,
            "linear" if terms is not None else kind,
            model_tmp,
            seed,
            jobs,
            grid,
            max_search_rows,
            probability,
            class_weight,
        )
        trained = _train_before(deadline, train, report, kind, path)
        _write_beside(range_tmp, spec, scaler, terms, zero_based)
    return _entry(path, kind, terms, start, class_weight, trained, t0)


def _search_start(kind: str, grid: Grid, start: Start | None) -> tuple[Start | None, Grid]:
    """Where the kernel search starts (None for linear) and its grid (a climb from a start)."""
    start = (start or GRID_START) if kind == "kernel" else None
    if start is not None and start.point is not None:
        grid = grid.starting_at(start.point)
    return start, grid


def _write_beside(
    range_tmp: str, spec_tmp: list[str], scaler: Scaler, terms: TermSpec | None, zero_based: bool
) -> None:
    """The files saved beside the model: the range file, and the term spec with ``terms``."""
    write_range_file(range_tmp, scaler)
    if terms is not None:
        with open(spec_tmp[0], "w", encoding="ascii") as f:
            f.write(spec_text(terms, zero_based=zero_based))


def _entry(
    path: str,
    kind: str,
    terms: TermSpec | None,
    start: Start | None,
    class_weight: engines.ClassWeight | None,
    trained: _Trained,
    t0: float,
) -> dict[str, Any]:
    """The verdict JSON's ``model`` entry: the files, the parameters and how they were found."""
    params, cv, search_rows, grid_points = trained
    return {
        "path": path,
        "range_path": path + RANGE_SUFFIX,
        **({} if terms is None else {"terms_path": spec_path(path)}),
        "kind": kind,
        "start": None if start is None else start.source,
        "params": params,
        "class_weights": class_weights_json(class_weight),
        "cv_accuracy": json_number(cv),
        "search_rows": search_rows,
        "grid_points": grid_points,
        "seconds": json_number(time.perf_counter() - t0),
    }


#: The stage of the kernel model's search, which its prediction is said at the start of.
SEARCH_STAGE = "kernel model: grid search"


def _first_stage(kind: str) -> str:
    """The stage a model's training starts with: the search, or the linear model's training."""
    return SEARCH_STAGE if kind == "kernel" else "training the linear model on all rows"


def seconds_of(
    kind: str,
    *,
    rows: int,
    nnz: int,
    features: int,
    n_classes: int,
    grid: Grid = EXPORT_GRID,
    max_search_rows: int = MAX_SEARCH_ROWS,
    jobs: int = 1,
    probability: bool = False,
) -> float:
    """:func:`predicted`'s seconds from a check JSON's counts, for a suggested ``--model-out``."""
    if kind != "kernel":
        return budget.linear_seconds(nnz, n_classes)
    search_rows = min(rows, max_search_rows)
    seconds = search_seconds(
        grid,
        rows=search_rows,
        nnz=int(nnz * search_rows / max(rows, 1)),
        n_classes=n_classes,
        jobs=jobs,
        features=features,
    )
    fit = budget.rbf_fit_seconds(
        rows=rows, nnz=nnz, predict_rows=0, n_classes=n_classes, features=features
    )
    return seconds + fit * (PROBABILITY_FACTOR if probability else 1.0)


def predicted(
    X: sp.csr_matrix,
    y: np.ndarray,
    kind: str,
    *,
    grid: Grid = EXPORT_GRID,
    max_search_rows: int = MAX_SEARCH_ROWS,
    jobs: int = 1,
    probability: bool = False,
    start: Start | None = None,
) -> tuple[float, str]:
    """Counted seconds of training a ``kind`` model on ``X``, and its line: linear's C search and
    training; kernel's search (rbf_grid.search_seconds) and training."""
    rows, nnz, features = int(X.shape[0]), int(X.nnz), int(X.shape[1])
    classes = int(np.unique(y).size)
    seconds = seconds_of(
        kind,
        rows=rows,
        nnz=nnz,
        features=features,
        n_classes=classes,
        grid=grid,
        max_search_rows=max_search_rows,
        jobs=jobs,
        probability=probability,
    )
    if kind != "kernel":
        return seconds, (
            f"{kind} model: C search and training on all {rows:,} rows; "
            f"predicted about {duration_text(seconds)}"
        )
    search_rows = min(rows, max_search_rows)
    where = f"{search_rows:,} rows" if search_rows == rows else f"a sample of {search_rows:,} rows"
    begin = (start or GRID_START).text()
    return seconds, (
        f"kernel model: {begin}: {grid_text(grid)}, {FOLDS}-fold CV on {where}; then "
        f"training on all {rows:,} rows; predicted about {duration_text(seconds)}"
    )


def _files(
    path: str, range_path: str, terms: TermSpec | None
) -> list[tuple[str | os.PathLike[str], str]]:
    """The files an export writes, in rename order: all written before any rename (a failure leaves
    the old set), the model first, and an interrupt waits for every rename (kcheck.io.atomic)."""
    files: list[tuple[str | os.PathLike[str], str]] = [
        (path, "model file"),
        (range_path, "range file"),
    ]
    if terms is not None:
        files.append((spec_path(path), "term spec"))
    return files


def _check_kind(kind: str, terms: TermSpec | None, probability: bool) -> None:
    """Refuse a nonexistent kind, or one ``terms`` or ``probability`` cannot fit, pre-training."""
    if kind not in MODEL_KINDS and products_of(kind) is None:
        raise KcheckError(f"model kind must be linear, kernel or linear+K, got {kind!r}")
    if (terms is None) != (products_of(kind) is None):
        raise KcheckError(f"model kind {kind} and its product terms do not go together")
    if probability and kind != "kernel":
        raise KcheckError("probability outputs need the kernel model (LIBLINEAR -s 2 has none)")


def _training_labels(y: np.ndarray) -> np.ndarray:
    """The labels as the bindings take them: integers, and at least two classes."""
    y = np.asarray(y, dtype=np.float64)
    require_integer_labels(y)
    if np.unique(y).size < 2:
        raise KcheckError("a classifier needs at least two classes")
    return y


#: What training returns: (params, CV accuracy, search rows, grid points).
_Trained = tuple[dict[str, Any], float | None, int, int | None]


def _train_before(
    deadline: float | None,
    train: Callable[[Progress | None], _Trained],
    report: Progress,
    kind: str,
    path: str,
) -> _Trained:
    """``train`` here with progress, or with a ``deadline`` in a worker it can end (no progress),
    which writes only the model's temporary (removed here if stopped)."""
    if deadline is None:
        return train(report)
    try:
        return run_until(deadline, train, None)
    except TimeLimitReached:
        raise KcheckError(
            f"--time-limit reached while training the {kind} model for --model-out; "
            f"{path} was not written"
        ) from None


def _train_and_save(
    X: sp.csr_matrix,
    y: np.ndarray,
    kind: str,
    model_tmp: str,
    seed: int,
    jobs: int,
    grid: Grid,
    max_search_rows: int,
    probability: bool,
    class_weight: engines.ClassWeight | None,
    progress: Progress | None,
) -> _Trained:
    """Train and save to ``model_tmp``; (params, CV accuracy, search rows, grid points)."""
    report = progress or no_progress
    params: dict[str, Any]
    model: engines.LinearModel | engines.RbfModel
    if kind == "linear":
        report(Event("training the linear model on all rows"))
        # Trained on the columns used, saved at full width (full-width training: 370 s, 2.75 GB).
        model, cv = linear_c.fit_linear(X, y, seed=seed, class_weight=class_weight)
        params = {"C": json_parameter(model.C)}
        search_rows, grid_points = int(y.size), None
    else:
        rows = stratified_subsample(y, max_search_rows, seed=seed)
        found = rbf_grid_search(
            X[rows],
            y[rows],
            grid,
            seed=seed,
            jobs=jobs,
            progress=report,
            stage=SEARCH_STAGE,
            class_weight=class_weight,
            balanced=class_weight is not None,
        )
        report(Event("training the kernel model on all rows"))
        problem = engines.SvmProblem.from_data(X, y, class_weight)
        if probability:
            model = engines.train_rbf(problem, found.C, found.gamma, probability=True, seed=seed)
        else:
            model = engines.train_rbf(problem, found.C, found.gamma)
        cv = found.cv_accuracy
        params = {"C": json_parameter(found.C), "gamma": json_parameter(found.gamma)}
        search_rows, grid_points = int(rows.size), found.points
    model.save(model_tmp)
    return params, cv, search_rows, grid_points
