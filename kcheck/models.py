"""Trained models: export after a check, and the RBF reference.

* :func:`export` trains the chosen model on all training rows and saves it in LIBLINEAR's or
  LIBSVM's own format, next to an svm-scale range file, so the official ``liblinear-predict`` /
  ``svm-predict`` (after ``svm-scale -r``) can use it as well as ``kcheck predict``
  (:mod:`kcheck.predict`).
* :func:`verify` is the expensive reference a verdict can be confirmed with: an RBF grid search
  with LIBSVM next to the tuned linear model, on the same rows.

Nothing here prints; progress goes through a ``progress(stage, done, total)`` callback.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck import __version__, engines
from kcheck.atomic import atomic_paths
from kcheck.data import read_libsvm
from kcheck.errors import KcheckError, TimeLimitReached, recorded_warnings
from kcheck.pipeline import MIN_ROWS, SCALINGS, Progress, data_summary
from kcheck.scaling import RANGE_SUFFIX, Scaler, fit_scaler, write_range_file
from kcheck.split import stratified_subsample
from kcheck.verdict import SCHEMA_VERSION, json_number
from kcheck.workers import process_pool, run_until

KINDS = ("linear", "kernel")
#: Folds of every cross-validation here (grid.py's and LIBLINEAR's -C default).
FOLDS = 5
#: The kernel model's (C, gamma) search runs on at most this many rows (stratified sample):
#: each grid point costs about (rows)^2 kernel evaluations, and the optimum moves little.
MAX_SEARCH_ROWS = 10_000
DEFAULT_EPSILON = 0.02
#: Below this many rows x stored values (a grid point costs about that many flops), starting
#: worker processes (about a second) costs more than sharing the grid saves.
MIN_PARALLEL_WORK = 1_000_000


@dataclass(frozen=True)
class Grid:
    """The (log2 C, log2 gamma) points of an RBF search.

    The default is grid.py's: log2 C from -5 to 15 and log2 gamma from 3 to -15, in steps of 2.
    With ``refine``, a second pass covers the best coarse point +- ``radius`` in steps of
    ``step`` (clipped to the coarse bounds): the coarse grid is 4x apart in C and gamma, and
    the accuracy surface often peaks in between.
    """

    log2_C: tuple[float, ...] = tuple(float(v) for v in range(-5, 16, 2))
    log2_gamma: tuple[float, ...] = tuple(float(v) for v in range(3, -16, -2))
    refine: bool = False
    radius: float = 1.0
    step: float = 0.5

    @property
    def coarse(self) -> list[tuple[float, float]]:
        return [(c, g) for c in self.log2_C for g in self.log2_gamma]

    def refined(self, centre: tuple[float, float]) -> list[tuple[float, float]]:
        """Points around ``centre`` inside the coarse bounds (the centre included)."""
        k = int(round(self.radius / self.step))
        offsets = [i * self.step for i in range(-k, k + 1)]
        lo_c, hi_c = min(self.log2_C), max(self.log2_C)
        lo_g, hi_g = min(self.log2_gamma), max(self.log2_gamma)
        return [
            (centre[0] + dc, centre[1] + dg)
            for dc in offsets
            for dg in offsets
            if lo_c <= centre[0] + dc <= hi_c and lo_g <= centre[1] + dg <= hi_g
        ]

    @property
    def max_points(self) -> int:
        k = int(round(self.radius / self.step))
        return len(self.coarse) + ((2 * k + 1) ** 2 - 1 if self.refine else 0)


#: grid.py's grid, as ``kcheck verify`` runs it.
GRID = Grid()
#: The export search: grid.py's grid, then a refinement around its best point.
EXPORT_GRID = Grid(refine=True)


def _noop(stage: str, done: int | None, total: int | None) -> None:
    return None


# --- RBF grid search ------------------------------------------------------------------------------


@dataclass
class GridResult:
    """The chosen point and every point's CV result (number of rows predicted right)."""

    log2_C: float
    log2_gamma: float
    correct: int
    rows: int
    scores: dict[tuple[float, float], int]

    @property
    def C(self) -> float:
        return float(2.0**self.log2_C)

    @property
    def gamma(self) -> float:
        return float(2.0**self.log2_gamma)

    @property
    def cv_accuracy(self) -> float:
        return self.correct / self.rows

    @property
    def points(self) -> int:
        return len(self.scores)


def best_point(scores: dict[tuple[float, float], int]) -> tuple[float, float]:
    """Highest CV count; ties go to the smaller C, then the smaller gamma.

    Both prefer the smoother, more regularised model (and smaller C trains faster), and the
    rule depends on the scores only, never on the order in which points finished.
    """
    return min(scores, key=lambda p: (-scores[p], p[0], p[1]))


_WORKER: dict[str, engines.SvmProblem] = {}


def _init_worker(X: sp.csr_matrix, y: np.ndarray) -> None:
    """Build the LIBSVM problem once per worker process; every grid point reuses it."""
    _WORKER["problem"] = engines.SvmProblem.from_data(X, y)


def _cv_point(log2_C: float, log2_gamma: float, seed: int) -> tuple[float, float, int]:
    correct = engines.cv_rbf(
        _WORKER["problem"], 2.0**log2_C, 2.0**log2_gamma, folds=FOLDS, seed=seed
    )
    return log2_C, log2_gamma, correct


class _Evaluator:
    """Runs CV at grid points, in this process or in a pool of worker processes.

    Processes, not threads: LIBSVM draws its folds from the process-wide ``rand()``. Each task
    seeds it, so every point sees the same folds however the tasks are scheduled.
    """

    def __init__(self, X: sp.csr_matrix, y: np.ndarray, *, seed: int, jobs: int) -> None:
        self.seed = seed
        self.jobs = jobs
        self.pool: ProcessPoolExecutor | None = None
        if jobs > 1:
            self.pool = process_pool(
                jobs, ["kcheck.engines", "kcheck.models"], _init_worker, (X, y)
            )
        else:
            self.problem = engines.SvmProblem.from_data(X, y)

    def run(
        self,
        points: Iterable[tuple[float, float]],
        on_done: Callable[[tuple[float, float], int], None],
    ) -> None:
        # Large C and small gamma train slowest; starting them first balances the workers.
        todo = sorted(points, key=lambda p: (-p[0], p[1]))
        if self.pool is None:
            for c, g in todo:
                on_done((c, g), _cv_point_with(self.problem, c, g, self.seed))
            return
        futures: list[Future[tuple[float, float, int]]] = [
            self.pool.submit(_cv_point, c, g, self.seed) for c, g in todo
        ]
        try:
            for fut in as_completed(futures):
                c, g, correct = fut.result()
                on_done((c, g), correct)
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


def _cv_point_with(problem: engines.SvmProblem, log2_C: float, log2_gamma: float, seed: int) -> int:
    return engines.cv_rbf(problem, 2.0**log2_C, 2.0**log2_gamma, folds=FOLDS, seed=seed)


def rbf_grid_search(
    X: sp.csr_matrix,
    y: np.ndarray,
    grid: Grid = GRID,
    *,
    seed: int = 0,
    jobs: int = 1,
    progress: Progress | None = None,
    stage: str = "RBF grid search",
) -> GridResult:
    """5-fold CV of C-SVC with the RBF kernel at every grid point; returns the best point."""
    report = progress or _noop
    if y.size < FOLDS:
        raise KcheckError(f"{y.size} rows are too few for {FOLDS}-fold cross-validation")
    coarse = grid.coarse
    if not coarse:
        raise KcheckError("the RBF grid is empty")
    scores: dict[tuple[float, float], int] = {}
    total = [grid.max_points]
    report(stage, 0, total[0])

    def done(point: tuple[float, float], correct: int) -> None:
        scores[point] = correct
        report(stage, len(scores), total[0])

    Xb = engines.as_binding_csr(X)
    jobs = max(1, min(jobs, len(coarse)))
    if Xb.shape[0] * Xb.nnz < MIN_PARALLEL_WORK:
        jobs = 1
    evaluator = _Evaluator(Xb, np.asarray(y, np.float64), seed=seed, jobs=jobs)
    try:
        evaluator.run(coarse, done)
        if grid.refine:
            fine = [p for p in grid.refined(best_point(scores)) if p not in scores]
            total[0] = len(scores) + len(fine)
            report(stage, len(scores), total[0])
            evaluator.run(fine, done)
    finally:
        evaluator.close()
    c, g = best_point(scores)
    return GridResult(c, g, scores[(c, g)], int(y.size), scores)


# --- export ---------------------------------------------------------------------------------------


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
) -> dict[str, Any]:
    """Train a ``kind`` model on all rows of the scaled ``X``; save it and ``path``.range.

    ``linear``: LIBLINEAR ``-s 2 -B 1`` with C from its ``-C`` search on all rows. ``kernel``:
    LIBSVM C-SVC with the RBF kernel; C and gamma from ``grid`` with 5-fold CV on a stratified
    sample of at most ``max_search_rows`` rows. Returns the verdict JSON's ``model`` entry.
    With a ``deadline`` (``time.perf_counter()``), training runs where the deadline can stop
    it, and nothing is written if it does. ``probability`` trains the kernel model with
    ``-b 1``, so that ``svm-predict -b 1`` and ``kcheck predict -b 1`` can use it.
    """
    report = progress or _noop
    t0 = time.perf_counter()
    if kind not in KINDS:
        raise KcheckError(f"model kind must be linear or kernel, got {kind!r}")
    if probability and kind != "kernel":
        raise KcheckError("probability outputs need the kernel model (LIBLINEAR -s 2 has none)")
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
        args = (X, y, kind, model_tmp, seed, jobs, grid, max_search_rows, probability)
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
        "seconds": round(time.perf_counter() - t0, 4),
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
    probability: bool,
    progress: Progress | None,
) -> tuple[dict[str, Any], float | None, int, int | None]:
    """Train the model and save it to ``model_tmp``; (params, CV accuracy, search rows, grid
    points)."""
    report = progress or _noop
    params: dict[str, Any]
    model: engines.LinearModel | engines.RbfModel
    if kind == "linear":
        report("training the linear model on all rows", None, None)
        # Trained on the columns in use, saved at full width: on 20 million mostly empty
        # columns, full-width training took 370 s and 2.75 GB.
        model, cv = engines.fit_linear(X, y, seed=seed)
        params = {"C": json_number(model.C, 10)}
        search_rows, grid_points = int(y.size), None
    else:
        rows = stratified_subsample(y, max_search_rows, seed=seed)
        found = rbf_grid_search(
            X[rows], y[rows], grid, seed=seed, jobs=jobs, progress=report,
            stage="kernel model: grid search",
        )
        report("training the kernel model on all rows", None, None)
        problem = engines.SvmProblem.from_data(X, y)
        if probability:
            model = engines.train_rbf(problem, found.C, found.gamma, probability=True, seed=seed)
        else:
            model = engines.train_rbf(problem, found.C, found.gamma)
        cv = found.cv_accuracy
        params = {"C": found.C, "gamma": found.gamma}
        search_rows, grid_points = int(rows.size), found.points
    model.save(model_tmp)
    return params, cv, search_rows, grid_points


# --- verify ---------------------------------------------------------------------------------------


#: ``--seed`` takes what LIBLINEAR's and LIBSVM's ``srand`` take: an unsigned 32-bit integer.
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class VerifyConfig:
    """What ``kcheck verify`` needs.

    ``scaling``, ``seed`` and ``epsilon`` None mean: the check JSON's, else maxabs, 0 and 0.02.
    With a check JSON, an explicit value that differs from the check's is refused, since the
    reference would then not be about the same comparison.
    """

    train: str
    test: str | None = None
    jobs: int = 1
    max_rows: int | None = None
    scaling: str | None = None
    seed: int | None = None
    epsilon: float | None = None
    check_json: str | None = None
    zero_based: bool = False
    grid: Grid = GRID

    def validated(self) -> VerifyConfig:
        if self.scaling is not None and self.scaling not in SCALINGS:
            raise KcheckError(f"--scaling must be one of {', '.join(SCALINGS)}")
        if self.seed is not None and not 0 <= self.seed <= MAX_SEED:
            raise KcheckError(f"--seed must lie in 0..{MAX_SEED}, got {self.seed}")
        if self.jobs < 1:
            raise KcheckError("--jobs must be at least 1")
        if self.max_rows is not None and self.max_rows < MIN_ROWS:
            raise KcheckError(f"--max-rows must be at least {MIN_ROWS}")
        if self.epsilon is not None and not 0.0 <= self.epsilon < 1.0:
            raise KcheckError(f"--epsilon must lie in [0, 1), got {self.epsilon}")
        return self


def _read_check_json(path: str) -> dict[str, Any]:
    """A saved ``kcheck check`` verdict: schema 1, a linear/kernel verdict and the data's hash.

    Without ``data.sha256`` (a verdict from a kcheck before the hash existed) nothing ties the
    verdict to the data being verified, so it is refused.
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise KcheckError(f"{path}: cannot read: {e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise KcheckError(f"{path}: not a JSON file ({e})") from None
    if (
        not isinstance(data, dict)
        or data.get("schema_version") != SCHEMA_VERSION
        or data.get("kind", "check") != "check"
        or data.get("verdict") not in KINDS
    ):
        raise KcheckError(f"{path}: not a kcheck check verdict (schema_version {SCHEMA_VERSION})")
    scaling = data.get("scaling")
    if (
        not isinstance(data.get("epsilon", 0.0), (int, float))
        or not isinstance(data.get("seed", 0), int)
        or not isinstance(scaling if scaling is not None else {}, dict)
        or (isinstance(scaling, dict) and scaling.get("method", "maxabs") not in SCALINGS)
    ):
        raise KcheckError(f"{path}: not a kcheck check verdict (bad epsilon, seed or scaling)")
    block = data.get("data")
    sha = block.get("sha256") if isinstance(block, dict) else None
    if not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)):
        raise KcheckError(
            f"{path}: the verdict has no data.sha256, so nothing ties it to the data being "
            "verified; re-run kcheck check on the data to get one"
        )
    return data


def _from_check(
    option: str, explicit: Any, recorded: Any, default: Any, path: str | None
) -> Any:
    """The check's value of a setting; an explicit one must agree with it."""
    if recorded is None:
        return default if explicit is None else explicit
    if explicit is not None and explicit != recorded:
        raise KcheckError(
            f"{option} {explicit} differs from the {recorded} that {path} was made with; "
            f"leave out {option} to take the check's"
        )
    return recorded


def _class_codes(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Labels the bindings hold exactly: integral ones stay, others become codes 0..k-1.

    Unknown labels (in a test file) become -1, a code no model predicts.
    """
    if np.all(np.floor(classes) == classes) and np.all(np.abs(classes) < 2**31):
        return y
    pos = np.searchsorted(classes, y).clip(0, classes.size - 1)
    return np.where(classes[pos] == y, pos, -1).astype(np.float64)


def verify(config: VerifyConfig, progress: Progress | None = None) -> dict[str, Any]:
    """The RBF reference next to the tuned linear model, as schema-1 JSON (``kind: verify``).

    Both are cross-validated (5 folds) on the same rows: the training file, or a stratified
    sample of ``max_rows`` of it. ``gap`` is the RBF CV accuracy minus the linear one; the
    verdict it implies is ``kernel`` when the gap reaches epsilon. With a test file, both
    are retrained on all training rows with the chosen parameters and scored on it.
    """
    config = config.validated()
    report = progress or _noop
    t_start = time.perf_counter()
    check = _read_check_json(config.check_json) if config.check_json else None
    recorded = check or {}
    scaling_block = recorded.get("scaling")
    scaling = _from_check(
        "--scaling", config.scaling,
        scaling_block.get("method") if isinstance(scaling_block, dict) else None,
        "maxabs", config.check_json,
    )
    seed = _from_check("--seed", config.seed, recorded.get("seed"), 0, config.check_json)
    epsilon = float(
        _from_check("--epsilon", config.epsilon, recorded.get("epsilon"), DEFAULT_EPSILON,
                    config.check_json)
    )
    config = dataclasses.replace(config, scaling=scaling, seed=seed).validated()
    assert config.seed is not None and config.scaling is not None

    report("reading " + config.train, None, None)
    digest = hashlib.sha256()
    with recorded_warnings() as notes:
        y_raw, X = read_libsvm(config.train, zero_based=config.zero_based, digest=digest)
    sha256 = digest.hexdigest()
    if check is not None and check["data"]["sha256"] != sha256:
        raise KcheckError(
            f"{config.train} is not the data {config.check_json} was made on (their content "
            "hashes differ); re-run kcheck check on it, then verify that verdict"
        )
    classes = np.unique(y_raw)
    if classes.size < 2:
        raise KcheckError(f"{config.train}: a classifier needs at least two classes")
    if X.shape[0] < MIN_ROWS:
        raise KcheckError(
            f"{config.train}: {X.shape[0]} rows are too few (at least {MIN_ROWS} are needed)"
        )
    n_rows, n_features = X.shape
    report("scaling", None, None)
    scaler = fit_scaler(X, method=config.scaling, lower=-1.0, upper=1.0, source=config.train)
    X = engines.as_binding_csr(scaler.transform(X))
    y = _class_codes(y_raw, classes)
    rows = (
        stratified_subsample(y, config.max_rows, seed=config.seed)
        if config.max_rows is not None
        else np.arange(n_rows)
    )
    sampled = rows.size < n_rows
    Xc, yc = (X[rows], y[rows]) if sampled else (X, y)

    report("linear model: C search", None, None)
    t0 = time.perf_counter()
    lin_model, lin_cv = engines.fit_linear(Xc, yc, seed=config.seed)
    assert lin_cv is not None
    lin_seconds = time.perf_counter() - t0

    t0 = time.perf_counter()
    found = rbf_grid_search(Xc, yc, config.grid, seed=config.seed, jobs=config.jobs,
                            progress=report)
    rbf_seconds = time.perf_counter() - t0

    lin_test = rbf_test = None
    test_info = None
    if config.test is not None:
        report("reading " + config.test, None, None)
        with recorded_warnings() as test_notes:
            yt_raw, Xt = read_libsvm(config.test, n_features=n_features,
                                     zero_based=config.zero_based)
        notes += test_notes
        Xt = engines.as_binding_csr(scaler.transform(Xt))
        yt = _class_codes(yt_raw, classes)
        test_info = {"path": config.test, "rows": int(Xt.shape[0])}
        report("linear model: training on all rows", None, None)
        t0 = time.perf_counter()
        if sampled:
            lin_model, _ = engines.fit_linear(X, y, seed=config.seed, C=lin_model.C)
        lin_test = _accuracy(lin_model.predict(Xt), yt)
        lin_seconds += time.perf_counter() - t0
        report("RBF model: training on all rows", None, None)
        t0 = time.perf_counter()
        rbf_model = engines.train_rbf(engines.SvmProblem.from_data(X, y), found.C, found.gamma)
        rbf_test = _accuracy(rbf_model.predict(Xt), yt)
        rbf_seconds += time.perf_counter() - t0

    gap = found.cv_accuracy - lin_cv
    verdict = "kernel" if round(gap, 12) >= epsilon else "linear"
    test_gap = None if lin_test is None or rbf_test is None else rbf_test - lin_test
    return {
        "schema_version": SCHEMA_VERSION,
        "kcheck_version": __version__,
        "kind": "verify",
        "seed": config.seed,
        "folds": FOLDS,
        "data": {**data_summary(config.train, X, classes, sha256), "cv_rows": int(rows.size)},
        "scaling": {"method": scaler.method, "lower": scaler.lower, "upper": scaler.upper},
        "linear": {
            "cv_accuracy": json_number(lin_cv),
            "C": json_number(lin_model.C, 10),
            "seconds": round(lin_seconds, 4),
            "test_accuracy": json_number(lin_test),
        },
        "rbf": {
            "cv_accuracy": json_number(found.cv_accuracy),
            "C": found.C,
            "gamma": found.gamma,
            "grid_points": found.points,
            "seconds": round(rbf_seconds, 4),
            "test_accuracy": json_number(rbf_test),
        },
        "test": test_info,
        "gap": json_number(gap),
        "test_gap": json_number(test_gap),
        "epsilon": epsilon,
        "verdict": verdict,
        "check": None if check is None else {"path": config.check_json,
                                             "verdict": check["verdict"]},
        "confirms": None if check is None else check["verdict"] == verdict,
        "warnings": notes,
        "seconds": round(time.perf_counter() - t_start, 4),
    }



def _accuracy(predicted: np.ndarray, y: np.ndarray) -> float | None:
    return float(np.mean(predicted == y)) if y.size else None
