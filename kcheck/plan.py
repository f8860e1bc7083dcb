"""The plan: what runs, on which rows, on what budget and in which role, decided once from
counts before any model trains.

:func:`make` reads numbers of T and V (:class:`~kcheck.checkers.base.Counts`) and the options,
never a clock or a trained model, so the same file plans the same work on every machine and
the plan can be tested without training anything. Each method sizes itself once, here, through
its registry entry's ``size`` (:class:`~kcheck.checkers.base.Allowance` in,
:class:`~kcheck.checkers.base.Sized` out, with the method's own record of what it decided);
the pipeline then only executes the plan, handing each method its ``Sized``, which the method
obeys and never computes again. Only ``--time-limit`` may change a step at run time, and only
here (:func:`resized`): through the same ``size``, with the time left.

The one budget (kcheck.costs.budget.methods_seconds, counted seconds of the reference machine):
every
method beside the linear baselines shares ``max(FLOOR_SECONDS, LINEAR_FACTOR x the baseline's
counted cost)``, in the order they run (exact mode first, then the checkers in registry order,
then a second fold's), each planned within what the ones before it left and charged what it is
counted to spend. The first measurement is planned within kcheck.costs.budget.first_seconds of it
(half of the floor on small data); what it leaves (``Plan.second_fold_seconds``) is all a
second fold's checkers may spend, where it holds the baseline's count (:func:`second_fold_steps`).
No row or stored-value threshold decides what runs: a method that does not fit what is left,
or the memory limit, reports itself skipped with the reason. A linear baseline, the first
measurement's or a second fold's, has no budget: everything is compared with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kcheck.checkers import exact, registry
from kcheck.checkers.base import Allowance, CheckerResult, Counts, Sized
from kcheck.costs import budget
from kcheck.costs import pace as probe
from kcheck.memory import FIXED_BYTES

__all__ = [
    "BESIDE_MIN_SECONDS",
    "Options",
    "Plan",
    "Step",
    "checker_steps",
    "make",
    "second_fold_steps",
]

#: What training the linear baseline in a worker process costs before anything overlaps, in
#: counted seconds: starting the worker (the fork server's imports, about 0.5 s the first
#: time) and sending it T and V (0.03-0.06 s for a9a's 5 MB). The baseline trains beside the
#: checkers where both it and the checkers that may run beside it count at least this, so that
#: the overlap is predicted to save more than it costs (a9a, 0.85 counted seconds of linear
#: work: the check went from 2.1x to 1.45x linear here).
BESIDE_MIN_SECONDS = 0.5


@dataclass(frozen=True)
class Options:
    """What the plan reads of the run's options."""

    checkers: tuple[str, ...]
    exact: str = "auto"
    jobs: int = 1
    #: What the methods may allocate beyond the data in memory (kcheck.memory.checker_budget).
    memory_limit: int = 8 * 2**30
    #: Whether a ``--time-limit`` applies: the checkers' time budgets would then depend on
    #: the overlap, so the baseline never trains beside them.
    time_limit: bool = False


@dataclass(frozen=True)
class Step:
    """One method's part: its role, whether it runs, the rows it trains on (0: it reports
    itself skipped, with ``reason``), what cut them, its counted seconds, and what was left of
    the check's budget when it was planned."""

    name: str
    role: str
    runs: bool
    rows: int
    reason: str | None = None
    limited_by: str | None = None
    estimated_seconds: float | None = None
    budget_seconds: float | None = None
    #: The budget of its measurement (kcheck.costs.budget.first_seconds; a second fold's, what the
    #: first left); ``budget_seconds`` is what the steps before it left of it.
    floor_seconds: float = 0.0
    #: Bytes it allocates beyond the data (None: it does not say).
    bytes: int | None = None
    #: What it takes of the budget where it runs (counted; kcheck.plan charges it).
    charged_seconds: float = 0.0
    #: What its method's ``size`` decided, which the pipeline hands its ``run`` (None: a
    #: baseline, or a step that does not run).
    sized: Sized | None = field(default=None, compare=False, repr=False)

    @property
    def cost_seconds(self) -> float | None:
        """Its one cost, counted (kcheck.costs.budget), where it trains on rows: what decides,
        and, times this machine's pace, the time the user is shown. None: nothing to run."""
        return self.estimated_seconds if self.runs and self.rows > 0 else None

    def outcome(self, result: CheckerResult | None) -> str:
        """What happened at run time, beside ``runs``, the plan's decision: ``ran`` as
        planned; ``cut short``, on fewer rows than planned (``--time-limit``); ``skipped``,
        planned on no rows or ended without a result (the time limit, memory, an engine);
        ``not run``, left out by the plan."""
        if not self.runs:
            return "not run"
        if self.rows == 0 or result is None or result.status == "skipped":
            return "skipped"
        trained = result.info.get("rows")
        if isinstance(trained, int) and trained < self.rows:
            return "cut short"
        return "ran"

    def to_json(self) -> dict[str, Any]:
        def counted(x: float | None) -> float | None:
            return None if x is None else round(x, 3)

        return {
            "name": self.name,
            "role": self.role,
            "runs": self.runs,
            "rows": self.rows,
            "reason": self.reason,
            "limited_by": self.limited_by,
            "estimated_seconds": counted(self.estimated_seconds),
            "budget_seconds": counted(self.budget_seconds),
            "floor_seconds": counted(self.floor_seconds),
        }


@dataclass(frozen=True)
class Plan:
    """Every method's step, in the order they run, and how the run is arranged."""

    steps: tuple[Step, ...]
    #: The linear baseline trains in a worker process beside the checkers that do not read it.
    beside: bool
    #: The floor, not the linear model, set the first measurement's budget
    #: (kcheck.costs.budget.floor_sets_budget).
    small_data: bool
    #: With the baseline beside them, the checkers that run in a worker process of their own,
    #: beside the baseline and the checkers this process runs (:func:`_detached`).
    detached: tuple[str, ...] = ()
    #: The one budget (kcheck.costs.budget.methods_seconds), counted.
    budget_seconds: float = 0.0
    #: What the first measurement left of it: all a second fold's checkers may spend, where it
    #: holds the baseline's count (:func:`second_fold_steps`).
    second_fold_seconds: float = 0.0

    def step(self, name: str) -> Step | None:
        return next((s for s in self.steps if s.name == name), None)

    @property
    def affords_second_fold(self) -> bool:
        """Whether what the first measurement left holds a second fold's linear baseline (on
        the second split, which has T's rows: counted on T's). Only then may the rule ask for
        one (kcheck.verdict.remeasure), and T's rows are copied for it."""
        linear = self.step("linear")
        cost = linear.estimated_seconds if linear is not None else None
        return cost is not None and cost <= self.second_fold_seconds

    @property
    def checkers(self) -> tuple[Step, ...]:
        """The checkers that run, in the order they run: beside the baseline, those that do
        not read it first."""
        run = [s for s in self.steps if s.runs and s.role in ("proxy", "stand-in")]
        if self.beside:
            run = [s for s in run if early(s)] + [s for s in run if not early(s)]
        return tuple(run)

    @property
    def worth_probing(self) -> bool:
        """Whether a stage is counted to take OFF_MIN_SECONDS or more: only such a stage is
        compared with its count, which needs this machine's pace (kcheck.costs.pace)."""
        return any((s.cost_seconds or 0.0) >= OFF_MIN_SECONDS for s in self.steps)

    def to_json(
        self,
        results: Mapping[str, CheckerResult] | None = None,
        probe_cpu_seconds: float | None = None,
    ) -> dict[str, Any]:
        """The plan, and beside each step what happened to it at run time (``outcome``) and
        what it took here where ``results`` has it: wall and CPU seconds (the machine's, where
        ``estimated_seconds`` are the reference's), and the CPU seconds of the probe that
        measured this machine's pace (kcheck.costs.pace; None where it did not run)."""
        steps = []
        for s in self.steps:
            r = (results or {}).get(s.name)
            took = None if r is None else round(r.seconds, 3)
            cpu = None if r is None or r.cpu_seconds is None else round(r.cpu_seconds, 3)
            outcome = s.outcome(r)
            steps.append({**s.to_json(), "outcome": outcome, "seconds": took, "cpu_seconds": cpu})
        # Not ``beside``: it arranges when things run, never what is computed, and the JSON is
        # the same at any --jobs.
        probed = None if probe_cpu_seconds is None else round(probe_cpu_seconds, 5)
        return {
            "small_data": self.small_data,
            "budget_seconds": round(self.budget_seconds, 3),
            "second_fold_seconds": round(self.second_fold_seconds, 3),
            "steps": steps,
            "probe_cpu_seconds": probed,
        }


def make(counts: Counts, options: Options) -> Plan:
    """The plan of a check of T and V: the baseline, exact mode, then the checkers, within
    the first measurement's share of the one budget; and what they leave a second fold."""
    linear = Step(
        "linear",
        "baseline",
        True,
        counts.rows,
        estimated_seconds=budget.linear_seconds(counts.nnz, counts.n_classes, counts.rows),
    )
    sizes = {"nnz": counts.nnz, "n_classes": counts.n_classes, "rows": counts.rows}
    whole = budget.methods_seconds(**sizes)
    first = budget.first_seconds(**sizes)
    deciding = _exact(counts, options, first)
    left = first - (deciding.charged_seconds if deciding.runs else 0.0)
    stands_in = options.exact == "auto" and not deciding.runs
    names = tuple(n for n in options.checkers if registry.role(n) != "stand-in" or stands_in)
    checkers = checker_steps(counts, names, max(left, 0.0), options.memory_limit, first)
    reason = "exact mode runs" if deciding.runs else "exact mode is off"
    left_out = tuple(
        Step(n, registry.role(n), False, 0, f"{reason}: it stands in for exact mode only")
        for n in options.checkers
        if n not in names
    )
    steps = (linear, deciding, *checkers, *left_out)
    beside = _beside(counts, options, steps)
    spent = sum(s.charged_seconds for s in steps if s.runs)
    return Plan(
        steps,
        beside=beside,
        small_data=budget.floor_sets_budget(**sizes),
        detached=_detached(counts, options, steps) if beside else (),
        budget_seconds=whole,
        second_fold_seconds=max(whole - spent, 0.0),
    )


def second_fold_steps(
    counts: Counts, names: tuple[str, ...], left_seconds: float, memory_limit: int
) -> tuple[Step, ...] | None:
    """A second fold's checkers ``names`` on the second split's ``counts``, planned as the
    first measurement's (:func:`checker_steps`) within what the first measurement's methods
    left of the one budget (``left_seconds``, ``Plan.second_fold_seconds``); None where that
    does not hold the second split's linear baseline. A baseline, the second fold's as the
    first's, is what every method is compared with and is not charged; but only a budget that
    could pay for it affords a second fold: on large data, where the first measurement spends
    the whole budget, none runs, and on small data the second fold's checkers get at least
    the first measurement's share of the floor."""
    baseline = budget.linear_seconds(counts.nnz, counts.n_classes, counts.rows)
    if baseline > left_seconds:
        return None
    return checker_steps(counts, names, left_seconds, memory_limit)


def checker_steps(
    counts: Counts,
    names: tuple[str, ...],
    left_seconds: float,
    memory_limit: int,
    whole_seconds: float | None = None,
) -> tuple[Step, ...]:
    """The steps of the checkers ``names``, in registry order, each sized by its own entry
    (``CheckerSpec.size``) within what the ones before it left of ``left_seconds`` (counted),
    and charged its counted seconds. ``whole_seconds``, the measurement's budget, is recorded
    beside (``left_seconds`` where not given). A second fold plans its checkers with this too."""
    steps = []
    left = left_seconds
    whole = left_seconds if whole_seconds is None else whole_seconds
    for name, spec in registry.CHECKERS.items():
        if name not in names:
            continue
        allowed = Allowance(memory_limit, left)
        sized = spec.size(counts, allowed) if spec.size is not None else Sized(counts.rows)
        steps.append(_step(name, spec.role, sized, left, whole))
        left = max(left - sized.counted_seconds, 0.0)
    return tuple(steps)


def _step(name: str, role: str, sized: Sized, left: float, whole: float) -> Step:
    """The step of a method that ``sized`` says what it will do, planned within ``left`` of
    its measurement's budget ``whole`` and charged its counted seconds."""
    return Step(
        name,
        role,
        True,
        sized.rows,
        sized.reason,
        sized.limited_by,
        sized.estimated_seconds,
        left,
        whole,
        sized.bytes,
        charged_seconds=sized.counted_seconds,
        sized=sized,
    )


def resized(
    step: Step,
    counts: Counts,
    memory_limit: int,
    seconds_left: float | None,
    linear_seconds: float | None = None,
) -> Sized:
    """What ``step``'s method runs on, as it is about to run: the plan's ``Sized`` as made;
    under ``--time-limit`` (``seconds_left``, and what the linear baseline took here), sized
    again through the same ``size`` with the time left. The one place a decision changes at
    run time. Every method's step carries its ``Sized`` (a baseline's none)."""
    if step.sized is None:
        raise ValueError(f"the plan's {step.name} step carries no sizing")
    if seconds_left is None:
        return step.sized
    allowed = Allowance(memory_limit, step.budget_seconds, seconds_left, linear_seconds)
    if step.name == registry.EXACT.name:
        return registry.EXACT.size(counts, allowed, step.sized.sizing.mode)
    spec = registry.CHECKERS[step.name]
    return spec.size(counts, allowed) if spec.size is not None else step.sized


def _exact(counts: Counts, options: Options, whole: float) -> Step:
    """Exact mode's step: its ``size`` (:func:`kcheck.checkers.exact.size`) on all rows (T and
    V), within the whole of the first measurement's budget ``whole`` (it runs first)."""
    sized = registry.EXACT.size(counts, Allowance(options.memory_limit, whole), options.exact)
    return Step(
        registry.EXACT.name,
        registry.EXACT.role,
        sized.rows > 0,
        sized.rows,
        sized.reason,
        estimated_seconds=sized.estimated_seconds,
        budget_seconds=whole,
        floor_seconds=whole,
        charged_seconds=sized.counted_seconds,
        sized=sized,
    )


def early(step: Step) -> bool:
    """A checker that may start before the baseline has finished, where it trains beside: one
    that says what it will allocate. Any other starts once the baseline has finished; one that
    starts early and reads the baseline (``Context.linear``) waits for it there."""
    return step.bytes is not None


def _early_steps(steps: tuple[Step, ...]) -> list[Step]:
    """The checkers that train on rows and may start before the baseline has finished."""
    return [s for s in steps if s.role in ("proxy", "stand-in") and early(s) and s.rows > 0]


def _beside(counts: Counts, options: Options, steps: tuple[Step, ...]) -> bool:
    """Whether the linear baseline trains in a worker process beside the checkers.

    On large data the baseline's C search is one long single-threaded LIBLINEAR call, and
    neither degree-2 nor MultiLinear needs its result to start (MultiLinear's fallback C for
    its smallest clusters waits for it), so with ``--jobs`` of 2 or more they share the cores
    instead of taking turns. Nothing computed changes, only when: the JSON is that of
    ``--jobs 1``. Only where it can change no plan:

    * no ``--time-limit`` (the checkers' time budgets would then depend on the overlap);
    * exact mode not running (it would want the cores), nor asked for;
    * the baseline and the checkers beside it each counting BESIDE_MIN_SECONDS or more, so
      that the overlap pays for the worker;
    * the worker's copy of T and V, LIBLINEAR's nodes, and what the early checkers plan to
      allocate, fit the checkers' memory budget together.
    """
    if options.jobs < 2 or options.time_limit:
        return False
    if options.exact == "always" or any(s.role == "deciding" and s.runs for s in steps):
        return False
    early = _early_steps(steps)
    linear = budget.linear_seconds(counts.nnz, counts.n_classes, counts.rows)
    beside_it = sum((s.estimated_seconds or 0.0) for s in early)
    if not early or min(linear, beside_it) < BESIDE_MIN_SECONDS:
        return False  # the overlap would not pay for the worker
    planned = sum(s.bytes or 0 for s in early)
    return _beside_bytes(counts) + planned <= options.memory_limit


def _detached(counts: Counts, options: Options, steps: tuple[Step, ...]) -> tuple[str, ...]:
    """The early checkers that run in a worker process of their own, with the baseline beside.

    Without this, the checkers took turns in this process while the baseline's worker, once
    done, left a core idle: on 581,012 covtype-like rows MultiLinear, degree-2 and rbfsvm ran
    one after another for 329 s beside a 73 s baseline. A checker the registry lets run in a
    worker (``in_worker``: it never reads the baseline) goes to one where it counts at least
    BESIDE_MIN_SECONDS, another checker stays in this process to overlap it, and its worker's
    copy of T and V fits the memory limit beside the baseline's and what the early checkers
    plan to allocate. Like ``beside``, it arranges when things run, never what is computed.
    """
    early = _early_steps(steps)
    copy = _beside_bytes(counts)
    used = copy + sum(s.bytes or 0 for s in early)
    detached: list[str] = []
    for s in early:
        if not registry.CHECKERS[s.name].in_worker:
            continue
        if (s.estimated_seconds or 0.0) < BESIDE_MIN_SECONDS:
            continue
        if used + copy > options.memory_limit:
            break
        used += copy
        detached.append(s.name)
    here = [
        s
        for s in steps
        if s.runs and s.rows > 0 and s.role in ("proxy", "stand-in") and s.name not in detached
    ]
    if not here and detached:
        detached.pop()  # nothing in this process would overlap the last one: it runs here
    return tuple(detached)


def _beside_bytes(counts: Counts) -> int:
    """What the baseline's worker adds: its copy of T and V (counted twice, a margin for the
    conversions it may make), LIBLINEAR's nodes (16 bytes a value, a bias and an end node a
    row), and its interpreter. This process sends the arrays as they are (no copy)."""
    data = counts.data_bytes + counts.val_bytes
    return 2 * data + 16 * (counts.nnz + 2 * counts.rows) + FIXED_BYTES


#: A stage whose CPU seconds fall outside these multiples of its prediction is named in a
#: warning line (not in the JSON, which stays the same on every machine): a cost model that is
#: wrong shows itself. Only stages predicted to take at least OFF_MIN_SECONDS.
OFF_LOW, OFF_HIGH, OFF_MIN_SECONDS = 0.5, 2.0, 0.5


def done_share(
    block: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
    predicted: float | None = None,
) -> tuple[float, str]:
    """The share of its plan's count (``predicted``) that the work a checker did is predicted to
    take,
    from its JSON block and the JSON's ``data``, and how to say it.

    The plan counts LIBSVM's kernel entries and no iterations, as none has run; at a large C
    they are most of the work (a repeat at C = 2^7 on 5,000 noisy rows took 2.5 times its
    share of the plan). Once its search has run, exact mode revises its count with the
    repeats that ran predicted from the iterations it counted (``revised_seconds``); the
    share is that over the plan's count. Exact mode's repeats also stop once the verdict is
    settled, where the plan counts all of them (the budget must): a block without
    ``revised_seconds`` (kcheck 0.6.1) gets the count of the repeats it ran.

    The RBF SVM checker (once its search has run) and MultiLinear (once its k-means has run)
    give the stage's own prediction in ``revised_seconds``, from what that first part found
    (the search's support vectors, the clusters' classes): the share is that over the step's
    ``predicted`` seconds (its count; over the block's count where not given, as kcheck 0.6.4
    counted it), so that the stage is held to its own revision. 1 where nothing says
    otherwise."""
    if not block:
        return 1.0, ""
    revised = block.get("revised_seconds")
    # Without repeats, the stage's own prediction once its first part has run.
    if revised is not None and not block.get("repeats"):
        before = float(predicted or block.get("estimated_seconds") or 0.0)
        return (float(revised) / before, "") if before > 0 else (1.0, "")
    if not block.get("repeats") or not data:
        return 1.0, ""
    if revised is None and not block.get("stopped_early"):
        return 1.0, ""
    rows = int(block.get("rows") or 0)
    done, most = int(block["repeats"]), exact.default_repeats(rows)
    if revised is None and done >= most:
        return 1.0, ""
    nnz = int(data["nnz"] * rows / max(int(data["rows"]), 1))
    options = exact.ExactOptions(
        folds=int(block.get("folds") or 5),
        tune_rows=int(block.get("tune_rows") or rows),
        nest=bool(block.get("nested")),
        baseline_C=True,
    )
    classes = len(data.get("classes") or ()) or 2

    def cost(repeats: int) -> float:
        return exact.counted_seconds(
            rows, nnz, classes, dataclasses.replace(options, repeats=repeats)
        )

    did = f" for the {done} of {most} repeats it ran" if done < most else ""
    return (cost(done) if revised is None else float(revised)) / cost(most), did


def off_prediction(
    plan_json: dict[str, Any],
    checkers: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
) -> list[str]:
    """Each step of a finished check's ``plan`` block whose CPU seconds were under OFF_LOW or
    over OFF_HIGH times its count (``estimated_seconds``, in reference seconds; a schema-2
    block's ``predicted_seconds``) at this machine's pace (the block's ``probe_cpu_seconds``,
    kcheck.costs.pace), as a line for the user. ``checkers`` and ``data``: the JSON's blocks
    of those names, for a stage that stopped early by design, whose prediction is then of the
    work it did (:func:`done_share`)."""
    lines = []
    machine = probe.pace(plan_json.get("probe_cpu_seconds"))
    at_pace = "" if machine == 1.0 else f", at this machine's pace of {machine:.2f}"
    for step in plan_json.get("steps", []):
        predicted = step.get("predicted_seconds", step.get("estimated_seconds"))
        cpu = step.get("cpu_seconds")
        # A step on 0 rows is a skip its checker reports: nothing ran to compare.
        if not step.get("runs") or not step.get("rows") or predicted is None or cpu is None:
            continue
        block = (checkers or {}).get(step["name"])
        # A checker skipped at run time (the --time-limit, memory) did not do its work either.
        if isinstance(block, Mapping) and block.get("status") == "skipped":
            continue
        share, did = done_share(block, data, predicted)
        predicted *= share * machine
        if predicted < OFF_MIN_SECONDS and cpu < OFF_MIN_SECONDS:
            continue
        ratio = cpu / predicted if predicted > 0 else float("inf")
        if OFF_LOW <= ratio <= OFF_HIGH:
            continue
        lines.append(
            f"{step['name']} took {cpu:.1f} CPU seconds against {predicted:.1f} predicted"
            f"{did} ({_times(ratio)}x{at_pace}): the cost model is off for this data or this "
            "machine"
        )
    return lines


def _times(ratio: float) -> str:
    """``ratio`` to one decimal, or more where one would round it into [OFF_LOW, OFF_HIGH]:
    a warning that said "0.5x" of 0.46 read as if the stage had been within the band."""
    for places in (1, 2, 3):
        shown = f"{ratio:.{places}f}"
        if not OFF_LOW <= float(shown) <= OFF_HIGH:
            break
    return shown
