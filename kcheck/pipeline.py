"""The check: prepare, baseline, checkers, decide, assemble. Never prints.

``run(config, progress)`` returns a :class:`CheckReport` whose ``json`` is the verdict
(:mod:`kcheck.result` owns its schema). Progress is reported through a callback so that the
CLI alone decides what to show. :func:`kcheck.models.train_model` then trains the
``--model-out`` model as a separate step, so that a caller can show the verdict before the
(possibly long) training.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kcheck import budget, explain
from kcheck.checkers import linear, registry
from kcheck.checkers.base import CheckerResult, Context, Dataset, guarded
from kcheck.config import CHECKERS, DEFAULT_CHECKERS, MAX_TIME_LIMIT, CheckConfig
from kcheck.defaults import (
    EXACT_MODES,
    SCALINGS,
    Progress,
    no_progress,
)
from kcheck.errors import KcheckError, TimeLimitReached, recorded_warnings
from kcheck.memory import FIXED_BYTES, checker_budget, csr_bytes, default_memory_limit
from kcheck.prepare import (
    BlockPredictor,
    Prepared,
    Tested,
    TestFile,
    encode_labels,
    open_test,
    prepare,
    unseen_warnings,
)
from kcheck.result import CheckResult
from kcheck.scoring import Scoring, oriented
from kcheck.second_fold import SecondFold, second_split
from kcheck.split import stratified_split
from kcheck.verdict import Decision, Gap, Outcome, remeasure, rule
from kcheck.workers import Background, run_until

__all__ = [
    "CHECKERS",
    "DEFAULT_CHECKERS",
    "EXACT_MODES",
    "SCALINGS",
    "CheckConfig",
    "CheckReport",
    "Progress",
    "default_memory_limit",
    "run",
]


@dataclass
class CheckReport:
    """The verdict as JSON-ready data, plus what :func:`train_model` reuses."""

    result: CheckResult
    prepared: Prepared
    T: Dataset
    V: Dataset
    split: tuple[np.ndarray, np.ndarray]
    deadline: float | None
    results: dict[str, CheckerResult] = field(default_factory=dict)

    @property
    def json(self) -> dict[str, Any]:
        return self.result.to_json()

    @property
    def scaler(self) -> Any:
        return self.prepared.scaler


def run(config: CheckConfig, progress: Progress | None = None) -> CheckReport:
    """Run the whole check and return the verdict; raises KcheckError on bad input.

    With ``config.model_out``, labels a model file cannot store are refused at once; the
    model itself is trained afterwards by :func:`kcheck.models.train_model`.
    """
    config = config.validated()
    report = progress or no_progress
    t_start = time.perf_counter()
    memory_limit = config.memory_limit or default_memory_limit()
    # An infinite (or absurdly long) limit is no limit: a deadline of inf overflows timeouts.
    limited = config.time_limit is not None and config.time_limit < MAX_TIME_LIMIT
    deadline = t_start + config.time_limit if limited and config.time_limit else None

    data, test, read_notes = _read(config, memory_limit, report)
    split = stratified_split(data.y, seed=config.seed)
    T = Dataset(data.X[split[0]], data.y[split[0]])
    V = Dataset(data.X[split[1]], data.y[split[1]])
    data.X = data.X[:0]  # T and V hold the rows now: keep one copy of the data
    scoring = _scoring(config, data, T)
    ctx = Context(
        seed=config.seed,
        jobs=config.jobs,
        epsilon=config.epsilon,
        memory_limit=checker_budget(memory_limit, data.data_bytes),
        deadline=deadline,
        baseline=None,
        progress=report,
        scoring=scoring,
    )
    exact_json, results = _methods(config, T, V, ctx)
    decision, gaps, second = _verdict(config, results, T, V, split, ctx)
    tested = _score_test(test, results, report) if test is not None else None
    explained = _explain(config, T, V, results, deadline, report) if config.explain else None
    result = CheckResult(
        decision=decision,
        epsilon=config.epsilon,
        seed=config.seed,
        data=data.summary,
        scaler=data.scaler,
        split=(T.rows, V.rows),
        baseline=results["linear"],
        checkers={
            n: (results[n], gaps.get(n))
            for n in (*config.checkers, registry.EXACT.name)
            if n in results
        },
        exact=exact_json,
        test=None if tested is None else _test_json(tested, scoring),
        warnings=[
            *decision.notes,
            *_sanity_warnings(results),
            *unseen_warnings(test),
            *read_notes,
        ],
        read_seconds=data.read_seconds,
        started=t_start,
        explain=explained,
        scoring=scoring,
        values=_values(results, scoring, V),
        second_fold=None if second is None else second.to_json(),
    )
    return CheckReport(result, data, T, V, split, deadline, results)


def _read(
    config: CheckConfig, memory_limit: int, report: Progress
) -> tuple[Prepared, TestFile | None, list[str]]:
    """The training file, prepared, and the test file opened, with what the reader warned
    of: it goes into the JSON, so a library call and the command record the same."""
    report("reading " + config.train, None, None)
    with recorded_warnings() as read_notes:
        data = prepare(
            config.train,
            scaling=config.scaling,
            memory_limit=memory_limit,
            zero_based=config.zero_based,
            integer_labels=config.model_out is not None,
            max_rows=config.max_rows,
            seed=config.seed,
        )
        # Read now, so that a test file no model can be scored on fails before any training.
        test = None
        if config.test is not None:
            report("reading " + config.test, None, None)
            test = open_test(
                config.test, data, memory_limit=config.memory_limit, zero_based=config.zero_based
            )
    return data, test, read_notes


def _methods(
    config: CheckConfig, T: Dataset, V: Dataset, ctx: Context
) -> tuple[dict[str, Any], dict[str, CheckerResult]]:
    """The linear baseline (beside the checkers where it can), exact mode where it runs, and
    the checkers: exact mode's JSON block and every method's result, the baseline's first."""
    beside = _start_beside(config, T, V, ctx)
    try:
        if beside is None:
            ctx = dataclasses.replace(
                ctx, baseline=_baseline(config, T, V, ctx.deadline, ctx.progress, ctx.scoring)
            )
        exact_json, rbf = registry.EXACT.run_all(T, V, ctx, config.exact)
        names = _proxies(config, rbf is not None)
        base, checked = _run_checkers(names, T, V, ctx, exact=rbf, beside=beside)
    except BaseException:
        if beside is not None:
            beside.cancel()
        raise
    results: dict[str, CheckerResult] = {"linear": base}
    if rbf is not None:
        results[registry.EXACT.name] = rbf
    results.update(checked)
    return exact_json, results


def _verdict(
    config: CheckConfig,
    results: dict[str, CheckerResult],
    T: Dataset,
    V: Dataset,
    split: tuple[np.ndarray, np.ndarray],
    ctx: Context,
) -> tuple[Decision, dict[str, Gap], SecondFold | None]:
    """The rule on V's gaps; where it asks for a second fold, that fold, and the rule again on
    the mean of both folds' gaps."""
    decision, gaps = _decide(config, results, ctx.scoring, V)
    small = budget.floor_applies(rows=T.rows, nnz=int(T.X.nnz))
    again = remeasure(decision, _outcomes(config, results, gaps), config.epsilon, small_data=small)
    if not again:
        return decision, gaps, None
    second = _second_fold(config, again, T, V, split, ctx, gaps)
    gaps = {**gaps, **second.combined()}
    return rule(_outcomes(config, results, gaps), config.epsilon), gaps, second


def _scoring(config: CheckConfig, data: Prepared, T: Dataset) -> Scoring:
    """The run's metric and class weights, from T's labels (V is for scoring only)."""
    try:
        return Scoring.for_training(config.metric, T.y, encode_labels(data.classes, data.classes))
    except KcheckError as e:
        raise KcheckError(f"{config.train}: {e}") from None


def _baseline(
    config: CheckConfig,
    T: Dataset,
    V: Dataset,
    deadline: float | None,
    report: Progress,
    scoring: Scoring,
) -> CheckerResult:
    try:
        return _train_linear(config, T, V, deadline, report, scoring)
    except TimeLimitReached:
        raise KcheckError(
            f"{config.train}: the time limit (--time-limit {config.time_limit:g}) passed before "
            "the linear baseline finished; every checker is compared with it, so nothing was "
            "decided"
        ) from None


def _train_linear(
    config: CheckConfig,
    T: Dataset,
    V: Dataset,
    deadline: float | None,
    report: Progress,
    scoring: Scoring,
) -> CheckerResult:
    """The linear baseline's C search, training and scoring; TimeLimitReached at the deadline.

    With a time limit, in a worker process that is killed at the deadline: LIBLINEAR's C
    search cannot be interrupted, and it took 50 s on 1,000 classes.
    """
    report("linear baseline (C search)", None, None)
    options = linear.LinearOptions(seed=config.seed, class_weight=scoring.class_weight)
    return run_until(deadline, linear.run, T, V, options)


#: The linear baseline trains in a worker process beside the checkers that do not need its
#: result where its counted cost is at least this many seconds: below, starting a worker and
#: copying T and V to it cost more than the overlap saves. rcv1-like data (1.1M values in T,
#: 2.7 counted seconds; its C search took 14 s here) went from 32 s to 20 s.
BESIDE_MIN_SECONDS = 2.0


def _start_beside(config: CheckConfig, T: Dataset, V: Dataset, ctx: Context) -> Background | None:
    """Start the linear baseline in a worker process where it can train beside the checkers.

    On large data the baseline's C search is one long single-threaded LIBLINEAR call, and
    neither degree-2 nor MultiLinear needs its result to start (MultiLinear's fallback C for
    its smallest clusters waits for it), so with ``--jobs`` of 2 or more they share the cores
    instead of taking turns. Nothing computed changes, only when: each runs with the
    seeds and inputs it has in turn, so the JSON is that of ``--jobs 1``. It is decided from
    counts only, and only where it can change no plan:

    * no ``--time-limit`` (the checkers' time budgets would then depend on the overlap);
    * T above degree-2's floor (no floor of counted work is handed from one checker to
      the next) and exact mode unable to run (it would want the cores);
    * the worker's copy of T and V, LIBLINEAR's nodes, and what the early checkers plan to
      allocate, fit the checkers' memory budget together.
    """
    if config.jobs < 2 or ctx.deadline is not None:
        return None
    if budget.degree2_floor_applies(nnz=int(T.X.nnz)):
        return None  # degree-2's floor (it has no row bound) covers the RBF kernels' floor
    if config.exact == "always" or (
        config.exact == "auto" and T.rows + V.rows <= registry.EXACT.auto_max_rows
    ):
        return None
    n_classes = int(np.unique(T.y).size)
    if budget.linear_seconds(int(T.X.nnz), n_classes) < BESIDE_MIN_SECONDS:
        return None
    early = _early_checkers(_proxies(config, False))
    if not early:
        return None
    plans = 0
    for name in early:
        planned = registry.CHECKERS[name].planned_bytes
        plans += planned(T, ctx) if planned is not None else 0
    if plans == 0 or _beside_bytes(T, V) + plans > ctx.memory_limit:
        return None  # nothing would run beside it (degree-2 skipped), or no room
    ctx.progress("linear baseline (C search), beside the checkers", None, None)
    options = linear.LinearOptions(seed=config.seed, class_weight=ctx.class_weight)
    return Background(linear.run, T, V, options)


def _early_checkers(names: tuple[str, ...]) -> list[str]:
    """The checkers that may run before the baseline has finished: they never read it, and
    they say what they will allocate."""
    return [
        n
        for n in names
        if not registry.CHECKERS[n].needs_baseline and registry.CHECKERS[n].planned_bytes
    ]


def _beside_bytes(T: Dataset, V: Dataset) -> int:
    """What the baseline's worker adds: its copy of T and V (counted twice, a margin for the
    conversions it may make), LIBLINEAR's nodes (16 bytes a value, a bias and an end node a
    row), and its interpreter. This process sends the arrays as they are (no copy)."""
    data = csr_bytes(T.X) + csr_bytes(V.X)
    return 2 * data + 16 * (int(T.X.nnz) + 2 * T.rows) + FIXED_BYTES


def _proxies(config: CheckConfig, decided: bool) -> tuple[str, ...]:
    """The checkers to run: one that stands in for exact mode (rbfsvm) only where exact mode
    is ``auto`` and did not run. Where it ran, it trained the same model cross-validated on
    all rows; ``--exact never`` trains no RBF SVM."""
    if decided or config.exact != "auto":
        return tuple(
            n
            for n in config.checkers
            if n not in registry.CHECKERS or registry.CHECKERS[n].role != "stand-in"
        )
    return config.checkers


def _run_checkers(
    names: tuple[str, ...],
    T: Dataset,
    V: Dataset,
    ctx: Context,
    *,
    exact: CheckerResult | None = None,
    beside: Background | None = None,
) -> tuple[CheckerResult, dict[str, CheckerResult]]:
    """The chosen checkers, in registry order, each guarded: a failure skips it, not the
    check. Returns the linear baseline and the checkers' results.

    The floor of counted work is for the whole check: each checker gets what the ones before
    it left of it, starting from what the ``exact`` comparison left where it ran (its counted
    cost). There a proxy's clear gain can still overrule exact mode's linear verdict, so what
    the floor has left is not wasted on it. With the baseline training ``beside``
    them (:func:`_start_beside`, where no floor applies), the checkers that do not read it go
    first, then its result is awaited.
    """
    order = [n for n in registry.CHECKERS if n in names]
    if beside is not None:
        early = _early_checkers(tuple(order))
        order = early + [n for n in order if n not in early]
        waited: list[CheckerResult] = []

        def wait_for_baseline() -> CheckerResult:
            if not waited:
                ctx.progress("linear baseline (C search)", None, None)
                waited.append(beside.result())
            return waited[0]

        ctx = dataclasses.replace(ctx, await_baseline=wait_for_baseline)
    floor = budget.FLOOR_SECONDS - (exact.counted_seconds if exact is not None else 0.0)
    floor = max(floor, 0.0)
    out: dict[str, CheckerResult] = {}
    for name in order:
        spec = registry.CHECKERS[name]
        if ctx.baseline is None and spec.needs_baseline:
            ctx = dataclasses.replace(ctx, baseline=ctx.linear())
        run = functools.partial(spec.run, T, V, dataclasses.replace(ctx, floor_seconds=floor))
        out[name] = guarded(name, ctx.deadline, run)
        floor = max(floor - out[name].counted_seconds, 0.0)
    return ctx.linear(), out


def _decide(
    config: CheckConfig, results: dict[str, CheckerResult], scoring: Scoring, V: Dataset
) -> tuple[Decision, dict[str, Gap]]:
    """Every finished checker's paired gap in the metric, then the rule
    (:func:`kcheck.verdict.rule`)."""
    gaps = _gaps(config, results, scoring, V)
    if not gaps:
        reasons = "; ".join(f"{n}: {results[n].reason}" for n in config.checkers)
        raise KcheckError(f"{config.train}: no checker finished ({reasons})")
    return rule(_outcomes(config, results, gaps), config.epsilon), gaps


def _gaps(
    config: CheckConfig, results: dict[str, CheckerResult], scoring: Scoring, V: Dataset
) -> dict[str, Gap]:
    """Each finished checker's paired gap against the linear model, on the points of V."""
    base = results["linear"].points
    gaps: dict[str, Gap] = {}
    for name in (*config.checkers, registry.EXACT.name):
        r = results.get(name)
        points = r.points if r is not None else None
        if r is not None and points is not None and base is not None:
            reference = r.reference_points or base
            truth = r.truth if r.truth is not None else V.y
            gaps[name] = scoring.gap(truth, points, reference)
    return gaps


def _outcomes(
    config: CheckConfig, results: dict[str, CheckerResult], gaps: dict[str, Gap]
) -> list[Outcome]:
    """What the rule reads of each method that ran or was skipped, in the user's order, with
    its role from the registry."""
    return [
        Outcome(
            name,
            registry.role(name),
            results[name].status,
            gaps.get(name),
            results[name].info.get("limited_by"),
            results[name].reason,
        )
        for name in (*config.checkers, registry.EXACT.name)
        if name in results
    ]


def _second_fold(
    config: CheckConfig,
    names: tuple[str, ...],
    T: Dataset,
    V: Dataset,
    split: tuple[np.ndarray, np.ndarray],
    ctx: Context,
    first: dict[str, Gap],
) -> SecondFold:
    """Train the linear baseline and ``names`` on T2, score them on V2
    (:func:`kcheck.second_fold.second_split`).

    A checker that does not finish there keeps its first fold's gap; if the baseline does not
    finish (``--time-limit``), the second fold does not count.
    """
    t0 = time.perf_counter()
    T2, V2 = second_split(T, V, split, config.seed)
    first = {n: first[n] for n in names}

    def report(message: str, done: int | None, total: int | None) -> None:
        ctx.progress("second fold: " + message, done, total)

    if V2.rows == 0 or np.unique(V2.y).size < 2:
        reason = "too few rows for a second fold"
        return SecondFold(T2.rows, V2.rows, first, {}, {}, {}, reason=reason)
    try:
        base = _train_linear(config, T2, V2, ctx.deadline, report, ctx.scoring)
    except TimeLimitReached:
        reason = f"the time limit (--time-limit {config.time_limit:g}) passed"
        return SecondFold(T2.rows, V2.rows, first, {}, {}, {}, reason=reason)
    ctx2 = dataclasses.replace(ctx, baseline=base, progress=report)
    _, checked = _run_checkers(names, T2, V2, ctx2)
    results = {"linear": base, **checked}
    gaps = _gaps(config, results, ctx.scoring, V2)
    values = _values(results, ctx.scoring, V2)
    seconds = time.perf_counter() - t0
    return SecondFold(T2.rows, V2.rows, first, results, gaps, values, seconds=seconds)


def _values(
    results: dict[str, CheckerResult], scoring: Scoring, V: Dataset
) -> dict[str, float | None]:
    """Each finished model's score in the metric on the points it was scored on."""
    out: dict[str, float | None] = {}
    for name, r in results.items():
        points = r.points
        truth = r.truth if r.truth is not None else V.y
        out[name] = scoring.value(truth, points) if points is not None else None
    return out


def _explain(
    config: CheckConfig,
    T: Dataset,
    V: Dataset,
    results: dict[str, CheckerResult],
    deadline: float | None,
    report: Progress,
) -> dict[str, Any]:
    report("explaining (top product terms)", None, None)
    return explain.explain(
        T, V, results, seed=config.seed, zero_based=config.zero_based, deadline=deadline
    )


def _score_test(test: TestFile, results: dict[str, CheckerResult], report: Progress) -> Tested:
    """Every model trained on T, scored on the test file block by block (scaled as training).

    Keeps each model's per-row predicted classes and, where it has them, decision values.
    """
    report("scoring " + test.path, None, None)
    t0 = time.perf_counter()

    def scored(r: CheckerResult) -> BlockPredictor | None:
        predict = r.predict
        if predict is None:
            return None
        model = getattr(predict, "__self__", None)
        if model is not None:
            return oriented(model)
        return lambda X: (predict(X), None)

    predictions = test.predict({name: scored(r) for name, r in results.items()})
    return Tested(test, predictions, time.perf_counter() - t0)


def _test_json(tested: Tested, scoring: Scoring) -> dict[str, Any]:
    """The test block: the file's facts, each model's accuracy and its score in the metric."""
    out = tested.to_json()
    out["score"] = {
        name: None if p is None else scoring.value_on_file(tested.test.y, p.predicted, p.scores)
        for name, p in tested.predictions.items()
    }
    return out


#: A CV accuracy this far above the accuracy on V points to a fault (see DESIGN.md hazards).
CV_VAL_ALARM = 0.10


def _sanity_warnings(results: dict[str, CheckerResult]) -> list[str]:
    """Flag a model that scores far below its own CV accuracy: a fault, not a result."""
    notes = []
    for name, r in results.items():
        if r.cv_accuracy is not None and r.val_accuracy is not None:
            if r.cv_accuracy - r.val_accuracy > CV_VAL_ALARM:
                notes.append(
                    f"{name}: validation accuracy {r.val_accuracy:.3f} is far below its CV "
                    f"accuracy {r.cv_accuracy:.3f}"
                )
    return notes
