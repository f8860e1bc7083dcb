"""The check: prepare, baseline, checkers, decide, assemble. Never prints: progress goes to a
callback so the CLI decides what to show. ``run(config, progress)`` returns a :class:`CheckReport`
whose ``json`` is the verdict (schema: :mod:`kcheck.result`); the ``--model-out`` model is trained
afterwards (:func:`kcheck.modelfiles.export.train_model`), so the verdict can show first."""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kcheck import plan
from kcheck.checkers import linear, registry
from kcheck.checkers.base import (
    CheckerResult,
    Context,
    Counts,
    Dataset,
    Sized,
    cpu_seconds,
    guarded,
)
from kcheck.config import MAX_TIME_LIMIT, CheckConfig
from kcheck.costs import budget
from kcheck.costs import pace as probe
from kcheck.defaults import (
    Event,
    Progress,
    no_progress,
)
from kcheck.errors import KcheckError, TimeLimitReached, recorded_warnings
from kcheck.io.data import read_until
from kcheck.memory import check_footprint, checker_budget
from kcheck.parallel.workers import Background, run_until
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
from kcheck.terms import explain
from kcheck.verdict import Decision, Gap, Outcome, interval_floor, remeasure, rule, unsettled

__all__ = ["CheckReport", "run"]


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


def run(
    config: CheckConfig,
    progress: Progress | None = None,
    *,
    prepared: Prepared | None = None,
    test_data: TestFile | None = None,
) -> CheckReport:
    """Run the whole check and return the verdict; KcheckError on bad input. With
    ``config.model_out``, labels a model file cannot store are refused at once."""
    config = config.validated()
    report = progress or no_progress
    t_start = time.perf_counter()
    memory_limit = config.memory_bytes
    # An infinite (or absurdly long) limit is no limit: a deadline of inf overflows timeouts.
    limited = config.time_limit is not None and config.time_limit < MAX_TIME_LIMIT
    deadline = t_start + config.time_limit if limited and config.time_limit else None

    data, test, read_notes = _read_within(
        deadline, config, memory_limit, report, prepared, test_data
    )
    split = stratified_split(data.y, seed=config.seed)
    T = Dataset(data.X[split[0]], data.y[split[0]])
    V = Dataset(data.X[split[1]], data.y[split[1]])
    data.X = data.X[:0]  # T and V hold the rows now: keep one copy of the data
    scoring = _scoring(config, data, T)
    ctx = Context(
        config.seed,
        config.jobs,
        config.epsilon,
        checker_budget(memory_limit, data.data_bytes, deadline is not None),
        deadline,
        baseline=None,
        progress=report,
        scoring=scoring,
    )
    counts = Counts.of(T, V)
    planned = plan.make(counts, _plan_options(config, ctx))
    # This machine's pace (display only): read before the first stage and after each stage of note.
    probed = probe.Readings(probe.probe_seconds() if planned.worth_probing else None)
    pace = _Pace(machine=probe.pace(probed.seconds), readings=probed)
    exact_json, first = _methods(config, planned, counts, T, V, ctx, pace)
    settled = _settle(config, planned, counts, first, T, V, ctx, pace)
    results = first if settled is None else {**first, settled.name: settled}
    decision, gaps, second = _verdict(config, planned, results, T, V, split, ctx, pace)
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
            *decision.notes(registry.words),
            *_sanity_warnings(results),
            *_alike_warnings(results, V),
            *unseen_warnings(test),
            *read_notes,
        ],
        read_seconds=data.read_seconds,
        started=t_start,
        explain=explained,
        scoring=scoring,
        values=_values(results, scoring, V),
        second_fold=None if second is None else second.to_json(),
        plan=planned.to_json(first, probed.seconds, settled),
    )
    return CheckReport(result, data, T, V, split, deadline, results)


def _read_within(
    deadline: float | None,
    config: CheckConfig,
    memory_limit: int,
    report: Progress,
    prepared: Prepared | None,
    test_data: TestFile | None,
) -> tuple[Prepared, TestFile | None, list[str]]:
    """:func:`_read` by ``deadline``: a time limit that passes while reading decides nothing."""
    try:
        with read_until(deadline):
            return _read(config, memory_limit, report, prepared, test_data, deadline is not None)
    except TimeLimitReached:
        raise KcheckError(
            f"{config.train}: the time limit (--time-limit {config.time_limit:g}) passed while "
            "reading the data, so nothing was decided"
        ) from None


def _read(
    config: CheckConfig,
    memory_limit: int,
    report: Progress,
    prepared: Prepared | None = None,
    test_data: TestFile | None = None,
    time_limited: bool = False,
) -> tuple[Prepared, TestFile | None, list[str]]:
    """The training file prepared and the test file opened, with the reader's warnings (they go into
    the JSON). Arrays prepared by kcheck.arrays are taken as they are. ``time_limited``: leave room
    for each method's worker (check_footprint)."""
    if prepared is not None:
        return prepared, test_data, []
    report(Event("reading " + config.train))
    per_csr_byte, fixed_bytes = check_footprint(time_limited)
    with recorded_warnings() as read_notes:
        data = prepare(
            config.train,
            scaling=config.scaling,
            memory_limit=memory_limit,
            zero_based=config.zero_based,
            integer_labels=config.model_out is not None,
            max_rows=config.max_rows,
            seed=config.seed,
            per_csr_byte=per_csr_byte,
            what="a check under --time-limit" if time_limited else "a check",
            fixed_bytes=fixed_bytes,
        )
        # Read now, so that a test file no model can be scored on fails before any training.
        test = None
        if config.test is not None:
            report(Event("reading " + config.test))
            test = open_test(
                config.test, data, memory_limit=memory_limit, zero_based=config.zero_based
            )
    return data, test, read_notes


def _plan_options(config: CheckConfig, ctx: Context) -> plan.Options:
    return plan.Options(
        checkers=config.checkers,
        exact=config.exact,
        jobs=config.jobs,
        memory_limit=ctx.memory_limit,
        time_limit=ctx.deadline is not None,
    )


def _methods(
    config: CheckConfig,
    planned: plan.Plan,
    counts: Counts,
    T: Dataset,
    V: Dataset,
    ctx: Context,
    pace: _Pace | None = None,
) -> tuple[dict[str, Any], dict[str, CheckerResult]]:
    """The baseline (beside the checkers where planned), exact mode and the checkers: exact's JSON
    block and every result, the baseline's first; ``pace`` scales predictions."""
    beside = None
    pace = pace if pace is not None else _Pace()
    if planned.beside:
        ctx.progress(Event("starting the linear baseline (C search) in a worker process"))
        options = linear.LinearOptions(seed=config.seed, class_weight=ctx.class_weight)
        beside = Background(linear.run, T, V, options)
    try:
        if beside is None:
            lin = planned.step("linear")
            predicted = lin.cost_seconds if lin is not None else None
            shown = _predicted(ctx.progress, predicted, pace)
            stage = _baseline_stage(config, predicted, pace, ctx.seconds_left())
            ctx = dataclasses.replace(ctx, baseline=_baseline(config, T, V, ctx, shown, stage))
            pace.add(predicted, ctx.linear().seconds)
        deciding = planned.step(registry.EXACT.name)
        exact_seconds = None
        if deciding is not None and deciding.cost_seconds is not None:
            # Its folds train side by side at two jobs or more: shown, and paced, as it takes.
            share = registry.EXACT.wall_share(deciding.rows, ctx.jobs, ctx.memory_limit)
            exact_seconds = deciding.cost_seconds * share
        watched = _LastStage(_predicted(ctx.progress, exact_seconds, pace))
        assert deciding is not None  # plan.make always plans it
        sized = plan.resized(deciding, counts, ctx.memory_limit, ctx.seconds_left())
        exact_ctx = dataclasses.replace(ctx, progress=watched)
        exact_json, rbf = registry.EXACT.run_all(T, V, exact_ctx, sized)
        if rbf is not None:
            watched.ended(rbf)
            pace.add(exact_seconds, rbf.seconds)
        base, checked = _run_checkers(
            planned.checkers,
            counts,
            T,
            V,
            ctx,
            beside=beside,
            pace=pace,
            detached=planned.detached,
        )
    except BaseException:
        if beside is not None:
            beside.cancel()
        raise
    results: dict[str, CheckerResult] = {"linear": base}
    if rbf is not None:
        results[registry.EXACT.name] = rbf
    results.update(checked)
    return exact_json, results


def _settle(
    config: CheckConfig,
    planned: plan.Plan,
    counts: Counts,
    results: dict[str, CheckerResult],
    T: Dataset,
    V: Dataset,
    ctx: Context,
    pace: _Pace | None = None,
) -> CheckerResult | None:
    """Where more rows could move the first measurement's verdict (kcheck.verdict.unsettled), the
    plan's settling step (the RBF SVM on more rows of T) with what that measurement left; its
    result replaces the first's, which it keeps as ``first_measurement``. None where nothing was
    bought."""
    step = planned.settling
    if step is None:
        return None
    decision, gaps = _decide(config, results, ctx.scoring, V)
    if not unsettled(decision, _outcomes(config, results, gaps)):
        return None
    outer = ctx.progress

    def prefixed(event: Event) -> None:
        outer(dataclasses.replace(event, stage="all of T: " + event.stage, line=None))

    ctx = dataclasses.replace(ctx, baseline=results["linear"], progress=prefixed)
    _, out = _run_checkers((step,), counts, T, V, ctx, pace=pace)
    bought, first = out[step.name], results[step.name]
    gap = gaps.get(step.name)
    bought.info["first_measurement"] = {
        "status": first.status,
        "rows": first.info.get("rows", T.rows if first.points is not None else 0),
        "gap": None if gap is None else gap.value,
        "gap_ci95": None if gap is None else [gap.low, gap.high],
    }
    return bought


def _verdict(
    config: CheckConfig,
    planned: plan.Plan,
    results: dict[str, CheckerResult],
    T: Dataset,
    V: Dataset,
    split: tuple[np.ndarray, np.ndarray],
    ctx: Context,
    pace: _Pace | None = None,
) -> tuple[Decision, dict[str, Gap], SecondFold | None]:
    """The rule on V's gaps; where it asks, a second fold and the rule on both folds' mean."""
    decision, gaps = _decide(config, results, ctx.scoring, V)
    outcomes = _outcomes(config, results, gaps)
    again = remeasure(decision, outcomes, config.epsilon, affordable=planned.affords_second_fold)
    if not again:
        return decision, gaps, None
    second = _second_fold(config, again, T, V, split, ctx, gaps, planned.second_fold_seconds, pace)
    gaps = {**gaps, **second.combined()}
    return rule(_outcomes(config, results, gaps), config.epsilon), gaps, second


def _scoring(config: CheckConfig, data: Prepared, T: Dataset) -> Scoring:
    """The run's metric and class weights, from T's labels (V is for scoring only)."""
    try:
        return Scoring.for_training(config.metric, T.y, encode_labels(data.classes, data.classes))
    except KcheckError as e:
        raise KcheckError(f"{config.train}: {e}") from None


#: The baseline's stage, as the log and the display name it.
BASELINE_STAGE = "linear baseline (C search)"


def _baseline_stage(
    config: CheckConfig, predicted: float | None, pace: _Pace, left: float | None
) -> str:
    """The baseline's stage name, saying where its paced prediction exceeds what ``--time-limit``
    leaves (all checkers wait for it); display only."""
    if left is None or predicted is None or pace.shown(predicted) <= left:
        return BASELINE_STAGE
    return f"{BASELINE_STAGE}, likely past --time-limit {config.time_limit:g}"


def _baseline(
    config: CheckConfig, T: Dataset, V: Dataset, ctx: Context, report: Progress, stage: str
) -> CheckerResult:
    """The first fold's baseline: all compare with it, so a time limit passing first ends it."""
    try:
        return _train_linear(config, T, V, ctx.deadline, report, ctx.scoring, stage=stage)
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
    predicted_seconds: float | None = None,
    stage: str = BASELINE_STAGE,
) -> CheckerResult:
    """The linear baseline's C search, training and scoring; TimeLimitReached at the deadline.
    ``predicted_seconds``: its stage's announced time (None: ``report`` fills in). With a time limit
    it runs in a worker killed at the deadline (the C search cannot be interrupted: 50 s on 1,000
    classes)."""
    report(Event(stage, predicted_seconds=predicted_seconds))
    options = linear.LinearOptions(seed=config.seed, class_weight=scoring.class_weight)
    c0 = cpu_seconds()
    result = run_until(deadline, linear.run, T, V, options)
    result.cpu_seconds = cpu_seconds() - c0
    return result


@dataclass
class _Pace:
    """This run's seconds over its finished stages' predictions, scaling the predictions shown
    (display only); before a stage of note, the probe's pace (``machine``)."""

    predicted: float = 0.0
    took: float = 0.0
    machine: float = 1.0
    #: The probe's readings, read again after each stage of note done here (display only).
    readings: probe.Readings | None = None

    def add(self, predicted: float | None, took: float | None) -> None:
        if predicted is not None and took is not None:
            self.predicted += predicted
            self.took += took
        if self.readings is not None and (predicted or 0.0) >= plan.OFF_MIN_SECONDS:
            self.readings.again()

    def shown(self, seconds: float) -> float:
        # Stages of a few milliseconds say little about the machine's pace.
        if self.predicted >= 0.2:
            return seconds * self.took / self.predicted
        return seconds * self.machine


def _predicted(progress: Progress, seconds: float | None, pace: _Pace | None = None) -> Progress:
    """``progress`` with each event's counted prediction scaled by ``pace``, also for a checker's
    own announced stages (log lines and ETAs; nothing computed reads it)."""
    if seconds is None and pace is None:
        return progress
    shown = None if seconds is None else seconds if pace is None else pace.shown(seconds)

    def report(event: Event) -> None:
        if event.predicted_seconds is None:
            if shown is not None:
                event = dataclasses.replace(event, predicted_seconds=shown)
        elif pace is not None:
            event = dataclasses.replace(
                event, predicted_seconds=pace.shown(event.predicted_seconds)
            )
        progress(event)

    return report


def _revised(predicted: float | None, result: CheckerResult) -> float | None:
    """A step's prediction as its checker revised it (kcheck.plan.done_share), for pace."""
    if predicted is None:
        return None
    return predicted * plan.done_share(result.info, None, predicted)[0]


def _run_checkers(
    steps: tuple[plan.Step, ...],
    counts: Counts,
    T: Dataset,
    V: Dataset,
    ctx: Context,
    *,
    beside: Background | None = None,
    pace: _Pace | None = None,
    detached: tuple[str, ...] = (),
) -> tuple[CheckerResult, dict[str, CheckerResult]]:
    """The planned checkers in plan order, each on what the plan sized (re-sized under
    ``--time-limit``) and guarded: a failure skips it, not the check. Returns the baseline and the
    results. With the baseline ``beside``, the first checker reading it waits; ``detached`` checkers
    run in their own workers, started first and awaited last."""
    if beside is not None:
        waited: list[CheckerResult] = []

        def wait_for_baseline() -> CheckerResult:
            if not waited:
                ctx.progress(Event("waiting for the linear baseline (C search) in its worker"))
                result = beside.result()
                if result.cpu_seconds is None:  # its CPU is its worker's
                    result.cpu_seconds = beside.cpu_seconds
                result.info["beside"] = True  # its wall time is shared: JSON linear.beside_seconds
                waited.append(result)
            return waited[0]

        ctx = dataclasses.replace(ctx, await_baseline=wait_for_baseline)
    started: dict[str, Background] = {}
    out: dict[str, CheckerResult] = {}
    try:
        for step in steps:
            if step.name in detached:
                started[step.name] = _start_detached(step, T, V, ctx)
        for step in steps:
            if step.name in started:
                continue
            spec = registry.CHECKERS[step.name]
            if ctx.baseline is None and not plan.early(step):
                ctx = dataclasses.replace(ctx, baseline=ctx.linear())
            watched = _LastStage(_predicted(ctx.progress, step.cost_seconds, pace))
            linear_seconds = ctx.baseline.seconds if ctx.baseline is not None else None
            sized = plan.resized(step, counts, ctx.memory_limit, ctx.seconds_left(), linear_seconds)
            watching = dataclasses.replace(ctx, progress=watched)
            out[step.name] = guarded(
                step.name, ctx.deadline, functools.partial(spec.run, T, V, watching, sized)
            )
            watched.ended(out[step.name])
            if pace is not None and beside is None:  # beside it, a checker's time is shared
                pace.add(_revised(step.cost_seconds, out[step.name]), out[step.name].seconds)
        for name, job in started.items():
            ctx.progress(Event(f"waiting for the {_stage(name)} in its worker"))
            out[name] = job.result()
    except BaseException:
        for job in started.values():
            job.cancel()
        raise
    return ctx.linear(), {step.name: out[step.name] for step in steps}


class _LastStage:
    """A checker's progress remembering its last stage, so a skip is logged of that stage."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.stage: str | None = None

    def __call__(self, event: Event) -> None:
        if event.ended is None:
            self.stage = event.stage
        self.progress(event)

    def ended(self, result: CheckerResult) -> None:
        """Report how the last stage ended where the checker did not do its work."""
        if self.stage is not None and result.status == "skipped":
            self.progress(Event(self.stage, ended=f"skipped ({result.reason})"))


def _start_detached(step: plan.Step, T: Dataset, V: Dataset, ctx: Context) -> Background:
    """A checker in its own worker (``detached``), with its allowance; progress stays there."""
    ctx.progress(Event(f"starting the {_stage(step.name)} in a worker process"))
    alone = dataclasses.replace(ctx, jobs=1, progress=no_progress, await_baseline=None)
    return Background(_guarded_run, step.name, T, V, alone, step.sized)


def _guarded_run(name: str, T: Dataset, V: Dataset, ctx: Context, sized: Sized) -> CheckerResult:
    """A detached checker in its worker, guarded there so its CPU seconds are the worker's."""
    run = registry.CHECKERS[name].run
    return guarded(name, ctx.deadline, functools.partial(run, T, V, ctx, sized))


def _stage(name: str) -> str:
    """How progress names a detached checker's stage: ``degree-2 checker``."""
    return f"{registry.words(name)} checker"


def _decide(
    config: CheckConfig, results: dict[str, CheckerResult], scoring: Scoring, V: Dataset
) -> tuple[Decision, dict[str, Gap]]:
    """Every finished checker's paired gap in the metric, then :func:`kcheck.verdict.rule`."""
    gaps = _gaps(config, results, scoring, V)
    if not gaps:
        reasons = "; ".join(
            f"{n}: {results[n].reason if n in results else 'not run'}" for n in config.checkers
        )
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
    """What the rule reads of each method that ran or was skipped, in order, with its role."""
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
    left_seconds: float,
    pace: _Pace | None = None,
) -> SecondFold:
    """Train the baseline and ``names`` on T2, score on V2, within ``left_seconds``. An unfinished
    checker keeps its first gap; an unfinished baseline voids the fold."""
    t0 = time.perf_counter()
    T2, V2 = second_split(T, V, split, config.seed)
    first = {n: first[n] for n in names}

    def prefixed(event: Event) -> None:
        ctx.progress(dataclasses.replace(event, stage="second fold: " + event.stage, line=None))

    report = _predicted(prefixed, None, pace)

    if V2.rows == 0 or np.unique(V2.y).size < 2:
        reason = "too few rows for a second fold"
        return SecondFold(T2.rows, V2.rows, first, {}, {}, {}, reason=reason)
    counts = Counts.of(T2, V2)
    steps = plan.second_fold_steps(counts, names, left_seconds, ctx.memory_limit)
    if steps is None:
        reason = "its linear baseline does not fit what the first fold left of the budget"
        return SecondFold(T2.rows, V2.rows, first, {}, {}, {}, reason=reason)
    predicted = budget.linear_seconds(counts.nnz, counts.n_classes, counts.rows)
    try:
        base = _train_linear(config, T2, V2, ctx.deadline, report, ctx.scoring, predicted)
    except TimeLimitReached:
        reason = f"the time limit (--time-limit {config.time_limit:g}) passed"
        return SecondFold(T2.rows, V2.rows, first, {}, {}, {}, reason=reason)
    ctx2 = dataclasses.replace(ctx, baseline=base, progress=prefixed)
    _, checked = _run_checkers(steps, counts, T2, V2, ctx2, pace=pace)
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
    report(Event("explaining (top product terms)"))
    return explain.explain(
        T, V, results, seed=config.seed, zero_based=config.zero_based, deadline=deadline
    )


def _score_test(test: TestFile, results: dict[str, CheckerResult], report: Progress) -> Tested:
    """Every model trained on T, scored on the test file block by block (scaled as training):
    per-row predicted classes and, where available, decision values."""
    report(Event("scoring " + test.path))
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


def _alike_warnings(results: dict[str, CheckerResult], V: Dataset) -> list[str]:
    """Name each method that was right or wrong exactly where its linear reference was: its interval
    is then the floor (kcheck.verdict.interval_floor), not a measurement."""
    notes = []
    base = results["linear"]
    for name, r in results.items():
        reference = r.reference_correct if r.reference_correct is not None else base.correct
        if name == "linear" or r.correct is None or reference is None:
            continue
        if np.shape(r.correct) != np.shape(reference):
            continue
        d = np.asarray(r.correct, dtype=np.float64) - np.asarray(reference, dtype=np.float64)
        if d.size and np.ptp(d) == 0:
            n = int(d.size)
            notes.append(
                f"{name}: it and linear were right or wrong alike on all {n:,} points its gap "
                f"is measured on, so its 95% interval is only the floor that {n:,} points allow "
                f"(+-{100 * interval_floor(n):.1f} points): too few points to measure the gap"
            )
    return notes


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
