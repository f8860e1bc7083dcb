"""The expensive reference a verdict can be confirmed with: an RBF grid search next to the
tuned linear model, cross-validated on the same rows.

It starts from the same :func:`kcheck.prepare.prepare` as the check, and decides with the same
rule (:func:`kcheck.verdict.paired_gap` and :func:`kcheck.verdict.decide`), so a check and its
reference can differ only in what they measure, never in how they read data or decide.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from kcheck import engines
from kcheck.defaults import (
    DEFAULT_METRIC,
    DEFAULT_SCALING,
    EPSILON,
    FOLDS,
    MAX_SEED,
    MODEL_KINDS,
    SCALINGS,
    Progress,
    check_common,
    no_progress,
)
from kcheck.errors import KcheckError, recorded_warnings
from kcheck.memory import default_memory_limit
from kcheck.prepare import (
    TestFile,
    encode_labels,
    open_test,
    parse_max_rows,
    prepare,
    unseen_warnings,
)
from kcheck.rbf_search import GRID, Grid, GridResult, rbf_grid_search
from kcheck.result import VerifyResult
from kcheck.scoring import PointResults, Scoring, oriented, positive_scores, validate_metric
from kcheck.split import stratified_folds
from kcheck.verdict import READABLE_CHECK_SCHEMAS, decide


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
    """The RBF reference next to the tuned linear model, as JSON (``kind: verify``).

    Both are cross-validated (5 folds) on the same rows: the training file, or a stratified
    sample of ``max_rows`` of it kept while the file streams, as ``check --max-rows`` keeps.
    ``gap`` is the RBF's CV accuracy minus the linear model's, with the paired 95% interval
    over the rows; the verdict is :func:`kcheck.verdict.decide`'s. With a test file, both are
    retrained on all those rows and scored on it.
    """
    config = config.validated()
    report = progress or no_progress
    t_start = time.perf_counter()
    check = _read_check_json(config.check_json) if config.check_json else None
    config, epsilon = _settings(config, check)
    assert config.seed is not None and config.scaling is not None
    memory_limit = config.memory_limit or default_memory_limit()

    report("reading " + config.train, None, None)
    with recorded_warnings() as notes:
        data = prepare(
            config.train,
            scaling=config.scaling,
            memory_limit=memory_limit,
            zero_based=config.zero_based,
            max_rows=config.max_rows,
            seed=config.seed,
        )
        if check is not None and check["data"]["sha256"] != data.sha256:
            raise KcheckError(
                f"{config.train} is not the data {config.check_json} was made on (their "
                "content hashes differ); re-run kcheck check on it, then verify that verdict"
            )
        # Read before any training, so a test file that cannot be scored fails at once.
        test = None
        if config.test is not None:
            report("reading " + config.test, None, None)
            test = open_test(
                config.test, data, memory_limit=memory_limit, zero_based=config.zero_based
            )
    Xc, yc = engines.as_binding_csr(data.X), data.y
    assert config.metric is not None
    try:
        scoring = Scoring.for_training(config.metric, yc, encode_labels(data.classes, data.classes))
    except KcheckError as e:
        raise KcheckError(f"{config.train}: {e}") from None
    weight = scoring.class_weight

    report("linear model: C search", None, None)
    t0 = time.perf_counter()
    lin_model, _ = engines.fit_linear(Xc, yc, seed=config.seed, class_weight=weight)
    lin_correct = engines.cv_linear_correct(
        engines.Problem.from_data(Xc, yc, weight), lin_model.C, folds=FOLDS, seed=config.seed
    )
    lin_seconds = time.perf_counter() - t0

    t0 = time.perf_counter()
    found = rbf_grid_search(
        Xc,
        yc,
        config.grid,
        seed=config.seed,
        jobs=config.jobs,
        progress=report,
        class_weight=weight,
        balanced=scoring.weighted,
        scheduler=config.scheduler,
    )
    rbf_correct = engines.cv_rbf_correct(
        engines.SvmProblem.from_data(Xc, yc, weight),
        found.C,
        found.gamma,
        folds=FOLDS,
        seed=config.seed,
    )
    lin_points, rbf_points = PointResults(lin_correct), PointResults(rbf_correct)
    if scoring.needs_scores:
        report("AUC: decision values by cross-validation", None, None)
        lin_points, rbf_points = _cv_scores(Xc, yc, lin_model.C, found, config.seed, weight)
    rbf_seconds = time.perf_counter() - t0

    lin_test = rbf_test = None
    lin_test_score = rbf_test_score = None
    if test is not None:
        report("linear model: training on all rows", None, None)
        t0 = time.perf_counter()
        lin_test, lin_test_score = _test_scores(lin_model, test, scoring)
        lin_seconds += time.perf_counter() - t0
        report("RBF model: training on all rows", None, None)
        t0 = time.perf_counter()
        rbf_model = engines.train_rbf(
            engines.SvmProblem.from_data(Xc, yc, weight), found.C, found.gamma
        )
        rbf_test, rbf_test_score = _test_scores(rbf_model, test, scoring)
        rbf_seconds += time.perf_counter() - t0

    gap = scoring.gap(yc, rbf_points, lin_points)
    return VerifyResult(
        decision=decide({"rbf": gap}, epsilon),
        gap=gap,
        epsilon=epsilon,
        seed=config.seed,
        folds=FOLDS,
        data={**data.summary, "cv_rows": data.rows},
        scaler=data.scaler,
        linear={
            "cv_score": scoring.value(yc, lin_points),
            "cv_accuracy": float(lin_correct.mean()),
            "C": lin_model.C,
            "seconds": lin_seconds,
            "test_accuracy": lin_test,
            "test_score": lin_test_score,
        },
        rbf={
            "cv_score": scoring.value(yc, rbf_points),
            "cv_accuracy": float(rbf_correct.mean()),
            "C": found.C,
            "gamma": found.gamma,
            "grid_points": found.points,
            "seconds": rbf_seconds,
            "test_accuracy": rbf_test,
            "test_score": rbf_test_score,
        },
        scoring=scoring,
        test=None if test is None else {"path": test.path, "rows": test.rows},
        test_gap=(
            None
            if lin_test_score is None or rbf_test_score is None
            else rbf_test_score - lin_test_score
        ),
        check=None if check is None else {"path": config.check_json, "verdict": check["verdict"]},
        warnings=notes + unseen_warnings(test),
        started=t_start,
    )


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
        or data.get("schema_version") not in READABLE_CHECK_SCHEMAS
        or data.get("kind", "check") != "check"
        or data.get("verdict") not in MODEL_KINDS
    ):
        raise KcheckError(
            f"{path}: not a kcheck check verdict (schema_version "
            f"{' or '.join(map(str, READABLE_CHECK_SCHEMAS))})"
        )
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
    """Accuracy and the metric's score of a model trained on all rows, on the test file,
    predicted block by block (it need not fit in memory)."""
    predictions = test.predict({"model": oriented(model)})["model"]
    if predictions is None:
        return None, None
    value = scoring.value_on_file(test.y, predictions.predicted, predictions.scores)
    return test.accuracy(predictions), value


def _cv_scores(
    X: Any,
    y: np.ndarray,
    linear_C: float,
    found: GridResult,
    seed: int,
    weight: engines.ClassWeight | None,
) -> tuple[PointResults, PointResults]:
    """Per-row results with decision values, for AUC: both models at their chosen parameters,
    trained without each row's fold (stratified, seeded) and scored on it; LIBSVM's and
    LIBLINEAR's own CV return labels only."""
    fold = stratified_folds(y, FOLDS, seed, 0)
    results = {k: (np.zeros(y.size, dtype=bool), np.zeros(y.size)) for k in ("lin", "rbf")}
    for k in range(FOLDS):
        test = np.flatnonzero(fold == k)
        train = np.flatnonzero(fold != k)
        if test.size == 0:
            continue
        lin, _ = engines.fit_linear(X[train], y[train], seed=seed, C=linear_C, class_weight=weight)
        rbf = engines.train_rbf(
            engines.SvmProblem.from_data(X[train], y[train], weight), found.C, found.gamma
        )
        for key, model in (("lin", lin), ("rbf", rbf)):
            predicted, dec = model.predict_scored(X[test])
            results[key][0][test] = predicted == y[test]
            s = positive_scores(model.labels, dec)
            results[key][1][test] = s if s is not None else 0.0
    return PointResults(*results["lin"]), PointResults(*results["rbf"])


def verify(config: VerifyConfig, progress: Progress | None = None) -> dict[str, Any]:
    """:func:`run`, as the JSON the command prints."""
    return run(config, progress).to_json()
