"""The expensive reference: an RBF grid search next to the tuned linear model, CV on the same rows,
from the check's :func:`kcheck.prepare.prepare` and decided by its rule."""

from __future__ import annotations

import dataclasses
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kcheck.bindings import engines
from kcheck.costs import budget
from kcheck.defaults import (
    DEFAULT_METRIC,
    DEFAULT_SCALING,
    EPSILON,
    FOLDS,
    MAX_SEED,
    METRICS,
    MODEL_KINDS,
    SCALINGS,
    Event,
    Progress,
    check_common,
    no_progress,
)
from kcheck.errors import DataFormatError, KcheckError, KcheckWarning, recorded_warnings
from kcheck.io.ownformat import (
    CHECK_JSON_BYTES,
    brief,
    byte_cap,
    epsilon_problem,
    is_int,
    read_json,
)
from kcheck.memory import FIXED_BYTES, VERIFY_BYTES_PER_CSR_BYTE, csr_bytes, default_memory_limit
from kcheck.prepare import (
    AUTO_ROWS,
    Prepared,
    TestFile,
    encode_labels,
    open_test,
    parse_max_rows,
    prepare,
    unseen_warnings,
)
from kcheck.result import VerifyResult
from kcheck.scoring import PointResults, Scoring, oriented, positive_scores, validate_metric
from kcheck.split import stratified_folds, stratified_subsample
from kcheck.tuning import linear_c
from kcheck.tuning.rbf_grid import (
    GRID,
    GRID_POINTS,
    Grid,
    GridResult,
    SearchMemory,
    duration_text,
    grid_text,
    point_seconds,
    rbf_grid_search,
    search_memory,
    search_seconds,
)
from kcheck.verdict import READABLE_CHECK_SCHEMAS, decide


@dataclass(frozen=True)
class VerifyConfig:
    """What ``kcheck verify`` needs. ``scaling``, ``seed``, ``epsilon`` None: the check JSON's, else
    maxabs, 0, 0.02; an explicit value differing from the check's is refused."""

    train: str
    test: str | None = None
    jobs: int = 1
    max_rows: int | str | None = None
    scaling: str | None = None
    seed: int | None = None
    epsilon: float | None = None
    #: None: the check JSON's, else accuracy.
    metric: str | None = None
    check_json: str | None = None
    zero_based: bool = False
    memory_limit: int | None = None
    grid: Grid = GRID
    #: A Dask scheduler (``tcp://host:port`` or ``local:N``) to run the grid points on.
    scheduler: str | None = None

    @property
    def memory_bytes(self) -> int:
        """The limit the run keeps to: ``memory_limit``, or by default half of RAM."""
        return self.memory_limit or default_memory_limit()

    def validated(self) -> VerifyConfig:
        check_common(
            epsilon=self.epsilon,
            scaling=self.scaling,
            jobs=self.jobs,
            memory_limit=self.memory_limit,
        )
        if self.metric is not None:
            validate_metric(self.metric)
        if self.seed is not None and not 0 <= self.seed <= MAX_SEED:
            raise KcheckError(f"--seed must lie in 0..{MAX_SEED}, got {self.seed}")
        if self.max_rows is not None:
            max_rows = parse_max_rows(self.max_rows)
            if max_rows != self.max_rows:
                return dataclasses.replace(self, max_rows=max_rows).validated()
        return self


def run(config: VerifyConfig, progress: Progress | None = None) -> VerifyResult:
    """The RBF reference next to the tuned linear model, as JSON (``kind: verify``). Both are 5-fold
    cross-validated on the same rows (the file, or a stratified streaming sample of ``max_rows``, as
    ``check --max-rows``). ``gap``: RBF CV accuracy minus linear's, with the paired 95% interval;
    the verdict is :func:`kcheck.verdict.decide`'s. A test file: both retrained on all rows and
    scored on it."""
    config = config.validated()
    report = progress or no_progress
    t_start = time.perf_counter()
    check = _read_check_json(config.check_json, config.memory_bytes) if config.check_json else None
    config, epsilon = _settings(config, check)
    assert config.seed is not None and config.metric is not None
    with recorded_warnings() as notes:
        data, test = _read_inputs(config, check, report)
    Xc, yc = engines.as_binding_csr(data.X), data.y
    if config.max_rows == AUTO_ROWS:
        with recorded_warnings() as more:
            Xc, yc = _rows_the_search_holds(config, Xc, yc)
        notes += more
    memory = _search_memory(config, Xc)
    try:
        scoring = Scoring.for_training(config.metric, yc, encode_labels(data.classes, data.classes))
    except KcheckError as e:
        raise KcheckError(f"{config.train}: {e}") from None
    weight = scoring.class_weight

    lin_model, lin = _linear_cv(Xc, yc, config.seed, weight, report)
    # The processes the search will run in: those the memory limit leaves.
    shown = dataclasses.replace(config, jobs=min(config.jobs, memory.jobs))
    report(announcement(shown, len(data.classes), scoring, test, Xc))
    found, rbf = _rbf_cv(Xc, yc, config, scoring, report, memory)
    if scoring.needs_scores:
        report(Event("AUC: decision values by cross-validation"))
        t0 = time.perf_counter()
        lin.points, rbf.points = _cv_scores(
            Xc, yc, lin_model.C, found, config.seed, weight, memory.alone_mb
        )
        rbf.seconds += time.perf_counter() - t0

    if test is not None:
        lin.score_on(test, scoring, "linear model", lambda: lin_model, report)
        rbf.score_on(
            test,
            scoring,
            "RBF model",
            lambda: _train_rbf(Xc, yc, found, weight, memory.alone_mb),
            report,
        )
    gap = scoring.gap(yc, rbf.points, lin.points)
    return VerifyResult(
        decision=decide({"rbf": gap}, epsilon),
        gap=gap,
        epsilon=epsilon,
        seed=config.seed,
        folds=FOLDS,
        data={**data.summary, "cv_rows": int(yc.size)},
        scaler=data.scaler,
        linear=lin.json(scoring, yc, C=lin_model.C),
        rbf=rbf.json(scoring, yc, C=found.C, gamma=found.gamma, grid_points=found.points),
        scoring=scoring,
        test=None if test is None else {"path": test.path, "rows": test.rows},
        test_gap=(
            None
            if lin.test_score is None or rbf.test_score is None
            else rbf.test_score - lin.test_score
        ),
        check=None
        if check is None
        else {
            "path": config.check_json,
            "verdict": check["verdict"],
            "margin": check.get("margin"),
        },
        warnings=notes + unseen_warnings(test),
        started=t_start,
    )


def _search_memory(config: VerifyConfig, X: Any) -> SearchMemory:
    """:func:`kcheck.tuning.rbf_grid.search_memory` beside the rows and fixed share."""
    return search_memory(
        config.train,
        X,
        config.memory_bytes,
        2 * csr_bytes(X) + FIXED_BYTES,
        config.jobs,
    )


def _rows_the_search_holds(config: VerifyConfig, X: Any, y: np.ndarray) -> tuple[Any, np.ndarray]:
    """``--max-rows auto``: the rows read, or the largest stratified sample LIBSVM's copy fits
    beside (few values a row cost it more: fourclass 5x), with a warning."""
    try:
        _search_memory(config, X)
        return X, y
    except KcheckError:
        pass
    lo, hi = 0, int(y.size)  # fits(lo) (nothing); not fits(hi)

    def fits(n: int) -> bool:
        keep = stratified_subsample(y, n, seed=config.seed or 0)
        try:
            _search_memory(config, X[keep])
        except KcheckError:
            return False
        return True

    while hi - lo > max(1, hi // 1000):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    if lo < FOLDS:
        _search_memory(config, X)  # the refusal, with its figures
    keep = stratified_subsample(y, lo, seed=config.seed or 0)
    warnings.warn(
        f"{config.train}: LIBSVM's copy of all {y.size:,} rows read would not fit the memory "
        f"limit beside them; the grid search used a stratified sample of {keep.size:,} "
        "(--max-rows auto)",
        KcheckWarning,
        stacklevel=2,
    )
    return X[keep], y[keep]


def predicted_seconds(
    grid: Grid,
    *,
    rows: int,
    nnz: int,
    n_classes: int,
    jobs: int = 1,
    test_rows: int = 0,
    auc: bool = False,
    linear: bool = True,
    features: int = 0,
) -> float:
    """Counted seconds of a verify on ``rows`` rows of ``nnz`` values: linear C search and CV
    (unless ``linear`` is False), the grid, the chosen point's CV, a test file's scoring."""
    seconds = 2 * budget.linear_seconds(nnz, n_classes) if linear else 0.0
    seconds += search_seconds(
        grid, rows=rows, nnz=nnz, n_classes=n_classes, jobs=jobs, features=features
    )
    point = point_seconds(rows=rows, nnz=nnz, n_classes=n_classes, features=features)
    seconds += point * (2 if auc else 1)
    if test_rows:
        seconds += budget.rbf_fit_seconds(
            rows=rows, nnz=nnz, predict_rows=test_rows, n_classes=n_classes, features=features
        )
    return seconds


#: The stage of verify's grid search, and of the prediction said before its first point.
GRID_STAGE = "RBF grid search"


def announcement(
    config: VerifyConfig, n_classes: int, scoring: Scoring, test: TestFile | None, X: Any
) -> Event:
    """The search's grid, rows and folds and the rest's predicted time, before the first point."""
    rows = int(X.shape[0])
    seconds = predicted_seconds(
        config.grid,
        rows=rows,
        nnz=int(X.nnz),
        n_classes=n_classes,
        jobs=config.jobs,
        test_rows=0 if test is None else test.rows,
        auc=scoring.needs_scores,
        linear=False,
        features=int(X.shape[1]),
    )
    where = (
        "on the cluster"
        if config.scheduler
        else f"in {config.jobs} process" + ("es" if config.jobs > 1 else "")
    )
    return Event(
        GRID_STAGE,
        0,
        config.grid.expected_points,
        GRID_POINTS,
        predicted_seconds=seconds,
        line=(
            f"verify: RBF grid of {grid_text(config.grid)}, {FOLDS}-fold CV on {rows:,} rows "
            f"{where}; predicted about {duration_text(seconds)}"
        ),
    )


#: A suggested ``kcheck verify`` should take about this long; else it adds ``--max-rows``.
SUGGESTED_SECONDS = 600.0


def rows_within(seconds: float, rows: int, cost: Callable[[int], float]) -> int | None:
    """The most of ``rows`` (``--max-rows``) whose ``cost``, a verify's predicted seconds on that
    many (:func:`predicted_seconds`), is within ``seconds``; None where all fit."""
    if cost(rows) <= seconds:
        return None
    lo, hi = FOLDS, rows  # cost(lo) is a few milliseconds; cost(hi) is over
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if cost(mid) <= seconds else (lo, mid)
    return lo


def _read_inputs(
    config: VerifyConfig, check: dict[str, Any] | None, report: Progress
) -> tuple[Prepared, TestFile | None]:
    """Training rows and test file read before training, so wrong data fails at once."""
    assert config.seed is not None and config.scaling is not None
    memory_limit = config.memory_bytes
    report(Event("reading " + config.train))
    data = prepare(
        config.train,
        scaling=config.scaling,
        memory_limit=memory_limit,
        zero_based=config.zero_based,
        max_rows=config.max_rows,
        seed=config.seed,
        per_csr_byte=VERIFY_BYTES_PER_CSR_BYTE,
        what="a verify",
    )
    if check is not None and check["data"]["sha256"] != data.sha256:
        raise KcheckError(
            f"{config.train} is not the data {config.check_json} was made on (their "
            "content hashes differ); re-run kcheck check on it, then verify that verdict"
        )
    if config.test is None:
        return data, None
    report(Event("reading " + config.test))
    return data, open_test(
        config.test, data, memory_limit=memory_limit, zero_based=config.zero_based
    )


@dataclass
class _Side:
    """One model of the comparison as its JSON block reports it: ``correct`` (per-row CV),
    ``points`` (what the metric scores), ``seconds`` (search, CV, test)."""

    correct: np.ndarray
    points: PointResults
    seconds: float
    test_accuracy: float | None = None
    test_score: float | None = None

    def score_on(
        self,
        test: TestFile,
        scoring: Scoring,
        name: str,
        train: Callable[[], engines.LinearModel | engines.RbfModel],
        report: Progress,
    ) -> None:
        """Train on all rows (``train``) and score the test file; the time is the model's."""
        report(Event(f"{name}: training on all rows"))
        t0 = time.perf_counter()
        self.test_accuracy, self.test_score = _test_scores(train(), test, scoring)
        self.seconds += time.perf_counter() - t0

    def json(self, scoring: Scoring, y: np.ndarray, **params: Any) -> dict[str, Any]:
        """The block of ``linear`` or ``rbf`` in the result, with the model's ``params``."""
        return {
            "cv_score": scoring.value(y, self.points),
            "cv_accuracy": float(self.correct.mean()),
            **params,
            "seconds": self.seconds,
            "test_accuracy": self.test_accuracy,
            "test_score": self.test_score,
        }


def _linear_cv(
    X: Any, y: np.ndarray, seed: int, weight: engines.ClassWeight | None, report: Progress
) -> tuple[engines.LinearModel, _Side]:
    """The tuned linear model (C from LIBLINEAR's own search) and its CV results per row."""
    report(Event("linear model: C search"))
    t0 = time.perf_counter()
    model, _ = linear_c.fit_linear(X, y, seed=seed, class_weight=weight)
    correct = engines.cv_linear_correct(
        engines.Problem.from_data(X, y, weight), model.C, folds=FOLDS, seed=seed
    )
    return model, _Side(correct, PointResults(correct), time.perf_counter() - t0)


def _rbf_cv(
    X: Any,
    y: np.ndarray,
    config: VerifyConfig,
    scoring: Scoring,
    report: Progress,
    memory: SearchMemory,
) -> tuple[GridResult, _Side]:
    """The RBF's (C, gamma) and per-row CV results, on the linear model's rows and folds."""
    assert config.seed is not None
    t0 = time.perf_counter()
    found = rbf_grid_search(
        X,
        y,
        config.grid,
        seed=config.seed,
        jobs=config.jobs,
        progress=report,
        stage=GRID_STAGE,
        class_weight=scoring.class_weight,
        balanced=scoring.weighted,
        scheduler=config.scheduler,
        memory=memory,
    )
    correct = engines.cv_rbf_correct(
        engines.SvmProblem.from_data(X, y, scoring.class_weight, memory.alone_mb),
        found.C,
        found.gamma,
        folds=FOLDS,
        seed=config.seed,
    )
    return found, _Side(correct, PointResults(correct), time.perf_counter() - t0)


def _settings(config: VerifyConfig, check: dict[str, Any] | None) -> tuple[VerifyConfig, float]:
    """Scaling, seed and epsilon: the check's where there is one, else the defaults."""
    recorded = check or {}
    scaling_block = recorded.get("scaling")
    scaling = _from_check(
        "--scaling",
        config.scaling,
        scaling_block.get("method") if isinstance(scaling_block, dict) else None,
        DEFAULT_SCALING,
        config.check_json,
    )
    seed = _from_check("--seed", config.seed, recorded.get("seed"), 0, config.check_json)
    # A schema 1 verdict (no metric) was made under accuracy.
    recorded_metric = recorded.get("metric", DEFAULT_METRIC) if check is not None else None
    metric = _from_check(
        "--metric", config.metric, recorded_metric, DEFAULT_METRIC, config.check_json
    )
    epsilon = float(
        _from_check(
            "--epsilon", config.epsilon, recorded.get("epsilon"), EPSILON, config.check_json
        )
    )
    config = dataclasses.replace(config, scaling=scaling, seed=seed, metric=metric)
    return config.validated(), epsilon


def _read_check_json(path: str, memory_limit: int | None = None) -> dict[str, Any]:
    """A saved ``kcheck check`` verdict: readable schema, a linear/kernel verdict, typed settings
    within their options' rules, and ``data.sha256`` (else nothing ties it to the data); read within
    byte_cap and nesting bounds."""
    what = "a kcheck check verdict (JSON)"
    data = read_json(path, cap=byte_cap(CHECK_JSON_BYTES, memory_limit), what=what)
    version = data.get("schema_version") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or not is_int(version)
        or version not in READABLE_CHECK_SCHEMAS
        or data.get("kind", "check") != "check"
        or data.get("verdict") not in MODEL_KINDS
    ):
        raise DataFormatError(
            path,
            None,
            "not a kcheck check verdict (schema_version "
            f"{' or '.join(map(str, READABLE_CHECK_SCHEMAS))})",
        )
    problem = _settings_problem(data)
    if problem is not None:
        raise DataFormatError(path, None, f"not a kcheck check verdict: {problem}")
    block = data.get("data")
    sha = block.get("sha256") if isinstance(block, dict) else None
    if not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)):
        raise DataFormatError(
            path,
            None,
            "the verdict has no data.sha256, so nothing ties it to the data being verified; "
            "re-run kcheck check on the data to get one",
        )
    return data


def _settings_problem(data: dict[str, Any]) -> str | None:
    """What is wrong with the settings a verdict records, which verify takes as its own."""
    if "epsilon" in data:
        problem = epsilon_problem(data["epsilon"])
        if problem is not None:
            return problem
    seed = data.get("seed", 0)
    if not is_int(seed) or not 0 <= seed <= MAX_SEED:
        return f"seed must be an integer in 0..{MAX_SEED}, got {brief(seed)}"
    scaling = data.get("scaling")
    if scaling is not None and (
        not isinstance(scaling, dict) or scaling.get("method", DEFAULT_SCALING) not in SCALINGS
    ):
        return f"scaling.method must be one of {', '.join(SCALINGS)}"
    if data.get("metric") not in (None, *METRICS):
        return f"metric must be one of {', '.join(METRICS)}"
    return None


def _from_check(option: str, explicit: Any, recorded: Any, default: Any, path: str | None) -> Any:
    """The check's value of a setting; an explicit one must agree with it."""
    if recorded is None:
        return default if explicit is None else explicit
    if explicit is not None and explicit != recorded:
        raise KcheckError(
            f"{option} {explicit} differs from the {recorded} that {path} was made with; "
            f"leave out {option} to take the check's"
        )
    return recorded


def _test_scores(
    model: engines.LinearModel | engines.RbfModel, test: TestFile, scoring: Scoring
) -> tuple[float | None, float | None]:
    """Accuracy and metric score of a model on all rows, on the test file, block by block."""
    predictions = test.predict({"model": oriented(model)})["model"]
    if predictions is None:
        return None, None
    value = scoring.value_on_file(test.y, predictions.predicted, predictions.scores)
    return test.accuracy(predictions), value


def _train_rbf(
    X: Any,
    y: np.ndarray,
    found: GridResult,
    weight: engines.ClassWeight | None,
    cache_mb: float = engines.SVM_CACHE_MB,
) -> engines.RbfModel:
    """The RBF model at the grid search's (C, gamma), trained on these rows."""
    problem = engines.SvmProblem.from_data(X, y, weight, cache_mb)
    return engines.train_rbf(problem, found.C, found.gamma)


def _cv_scores(
    X: Any,
    y: np.ndarray,
    linear_C: float,
    found: GridResult,
    seed: int,
    weight: engines.ClassWeight | None,
    cache_mb: float = engines.SVM_CACHE_MB,
) -> tuple[PointResults, PointResults]:
    """Per-row results with decision values for AUC: both models at their chosen parameters, trained
    without each row's (stratified, seeded) fold; LIBSVM's and LIBLINEAR's CV return labels only."""
    fold = stratified_folds(y, FOLDS, seed, 0)
    results = {k: (np.zeros(y.size, dtype=bool), np.zeros(y.size)) for k in ("lin", "rbf")}
    for k in range(FOLDS):
        test = np.flatnonzero(fold == k)
        train = np.flatnonzero(fold != k)
        if test.size == 0:
            continue
        lin, _ = linear_c.fit_linear(X[train], y[train], seed=seed, C=linear_C, class_weight=weight)
        rbf = _train_rbf(X[train], y[train], found, weight, cache_mb)
        for key, model in (("lin", lin), ("rbf", rbf)):
            predicted, dec = model.predict_scored(X[test])
            results[key][0][test] = predicted == y[test]
            s = positive_scores(model.labels, dec)
            results[key][1][test] = s if s is not None else 0.0
    return PointResults(*results["lin"]), PointResults(*results["rbf"])


def verify(config: VerifyConfig, progress: Progress | None = None) -> dict[str, Any]:
    """:func:`run`, as the JSON the command prints."""
    return run(config, progress).to_json()
