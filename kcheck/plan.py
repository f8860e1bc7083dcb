"""The plan: what runs, on which rows, on what budget and in which role, decided once from counts
before any model trains.

:func:`make` reads counts of T and V and the options, never a clock or a model, so the same file
plans the same work everywhere and plans are testable without training. Each method sizes itself
once through its registry ``size`` (Allowance in, Sized out); the pipeline executes and never
re-sizes, except under ``--time-limit`` via :func:`resized`.

The one budget (kcheck.costs.budget.methods_seconds): methods other than the linear baselines share
``max(FLOOR_SECONDS, LINEAR_FACTOR x baseline's count)`` in run order (exact, checkers in registry
order, a second fold's), each within what the earlier left and charged its count. The first
measurement gets kcheck.costs.budget.first_seconds; its leftover (``Plan.second_fold_seconds``) is a
second fold's. No row threshold decides: a method that does not fit reports itself skipped with the
reason. Baselines have no budget."""

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
    "settling",
]

#: Counted seconds a worker-process baseline costs before it overlaps (start ~0.5 s, sending T and
#: V); baseline and beside-checkers must each count this (a9a: 2.1x to 1.45x).
BESIDE_MIN_SECONDS = 0.5


@dataclass(frozen=True)
class Options:
    """What the plan reads of the run's options."""

    checkers: tuple[str, ...]
    exact: str = "auto"
    jobs: int = 1
    #: What the methods may allocate beyond the data in memory (kcheck.memory.checker_budget).
    memory_limit: int = 8 * 2**30
    #: Whether a ``--time-limit`` applies: budgets would depend on the overlap, so no ``beside``.
    time_limit: bool = False


@dataclass(frozen=True)
class Step:
    """One method's part: its role, whether it runs, its rows (0: skipped, with ``reason``), what
    cut them, its counted seconds, and the budget left when planned."""

    name: str
    role: str
    runs: bool
    rows: int
    reason: str | None = None
    limited_by: str | None = None
    estimated_seconds: float | None = None
    budget_seconds: float | None = None
    #: Its measurement's budget; ``budget_seconds``: what was left of it.
    floor_seconds: float = 0.0
    #: Bytes it allocates beyond the data (None: it does not say).
    bytes: int | None = None
    #: What it takes of the budget where it runs (counted; kcheck.plan charges it).
    charged_seconds: float = 0.0
    #: What its ``size`` decided, handed to its ``run`` (None: a baseline, or not run).
    sized: Sized | None = field(default=None, compare=False, repr=False)

    @property
    def cost_seconds(self) -> float | None:
        """Its counted cost (kcheck.costs.budget), what decides; times pace, what is shown."""
        return self.estimated_seconds if self.runs and self.rows > 0 else None

    def outcome(self, result: CheckerResult | None) -> str:
        """What happened at run time: ``ran``; ``cut short`` (fewer rows, ``--time-limit``);
        ``skipped`` (no rows, or no result); ``not run`` (left out by the plan)."""
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
    #: The floor, not the linear model, set the first budget (budget.floor_sets_budget).
    small_data: bool
    #: With the baseline beside, checkers in a worker process of their own (:func:`_detached`).
    detached: tuple[str, ...] = ()
    #: The one budget (kcheck.costs.budget.methods_seconds), counted.
    budget_seconds: float = 0.0
    #: What the first measurement left: a second fold's budget, where it holds the baseline.
    second_fold_seconds: float = 0.0
    #: What an unsettled first measurement buys with that instead (:func:`settling`): the stand-in
    #: on all of T. None: a second fold, where affordable.
    settling: Step | None = None

    def step(self, name: str) -> Step | None:
        return next((s for s in self.steps if s.name == name), None)

    @property
    def affords_second_fold(self) -> bool:
        """Whether the first measurement's leftover holds a second fold's baseline (counted on T's
        rows); only then may kcheck.verdict.remeasure ask for one, and T's rows are copied. Not
        where the leftover buys :attr:`settling`."""
        if self.settling is not None:
            return False
        linear = self.step("linear")
        cost = linear.estimated_seconds if linear is not None else None
        return cost is not None and cost <= self.second_fold_seconds

    @property
    def checkers(self) -> tuple[Step, ...]:
        """The checkers that run, in order: beside the baseline, those not reading it first."""
        run = [s for s in self.steps if s.runs and s.role in ("proxy", "stand-in")]
        if self.beside:
            run = [s for s in run if early(s)] + [s for s in run if not early(s)]
        return tuple(run)

    @property
    def worth_probing(self) -> bool:
        """Whether a stage counts OFF_MIN_SECONDS or more: only such are held to their count."""
        return any((s.cost_seconds or 0.0) >= OFF_MIN_SECONDS for s in self.steps)

    def to_json(
        self,
        results: Mapping[str, CheckerResult] | None = None,
        probe_cpu_seconds: float | None = None,
        settled: CheckerResult | None = None,
    ) -> dict[str, Any]:
        """The plan with each step's ``outcome`` and, from ``results`` (the first measurement's),
        wall and CPU seconds here (not reference seconds) and the pace probe's CPU seconds (None if
        not run); ``settled``: the :attr:`settling` step's result, where it ran."""

        def done(s: Step, r: CheckerResult | None) -> dict[str, Any]:
            took = None if r is None else round(r.seconds, 3)
            cpu = None if r is None or r.cpu_seconds is None else round(r.cpu_seconds, 3)
            return {**s.to_json(), "outcome": s.outcome(r), "seconds": took, "cpu_seconds": cpu}

        steps = [done(s, (results or {}).get(s.name)) for s in self.steps]
        settling = None
        if self.settling is not None:
            settling = done(self.settling, settled)
            if settled is None:
                settling["outcome"] = "not run"  # the first verdict was settled
        # Not ``beside``: it changes when things run, never results (the same JSON at any --jobs).
        probed = None if probe_cpu_seconds is None else round(probe_cpu_seconds, 5)
        return {
            "small_data": self.small_data,
            "budget_seconds": round(self.budget_seconds, 3),
            "second_fold_seconds": round(self.second_fold_seconds, 3),
            "steps": steps,
            "settling": settling,
            "probe_cpu_seconds": probed,
        }


def make(counts: Counts, options: Options) -> Plan:
    """The plan of a check: baseline, exact mode, checkers within the first budget, and what is
    left."""
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
    after_exact = whole - (deciding.charged_seconds if deciding.runs else 0.0)
    held = _held(counts, checkers, after_exact, options.memory_limit)
    if held is not None and after_exact - held.counted_seconds < left:
        proxies = max(after_exact - held.counted_seconds, 0.0)
        checkers = checker_steps(counts, names, proxies, options.memory_limit, first)
    reason = "exact mode runs" if deciding.runs else "exact mode is off"
    left_out = tuple(
        Step(n, registry.role(n), False, 0, f"{reason}: it stands in for exact mode only")
        for n in options.checkers
        if n not in names
    )
    steps = (linear, deciding, *checkers, *left_out)
    beside = _beside(counts, options, steps)
    spent = sum(s.charged_seconds for s in steps if s.runs)
    leftover = max(whole - spent, 0.0)
    return Plan(
        steps,
        beside=beside,
        small_data=budget.floor_sets_budget(**sizes),
        detached=_detached(counts, options, steps) if beside else (),
        budget_seconds=whole,
        second_fold_seconds=leftover,
        settling=settling(counts, steps, leftover, options.memory_limit),
    )


def _stand_in(steps: tuple[Step, ...]) -> tuple[Step, registry.CheckerSpec] | None:
    """The stand-in's step where it runs in the first measurement, with its registry entry (which
    sizes it); None where it does not run there (exact mode runs, or it was not asked for)."""
    for s in steps:
        spec = registry.CHECKERS.get(s.name)
        if s.role == "stand-in" and s.runs and spec is not None and spec.size is not None:
            return s, spec
    return None


def _held(
    counts: Counts, steps: tuple[Step, ...], budget_seconds: float, memory_limit: int
) -> Sized | None:
    """The stand-in's least run on all of T, where the first measurement gives it fewer rows and
    that run fits ``budget_seconds`` (the whole budget after exact mode). Where the first
    measurement would leave it less, the proxies are planned within what it leaves, so that an
    unsettled first verdict (kcheck.verdict.unsettled) can buy all of T (:func:`settling`)."""
    found = _stand_in(steps)
    if found is None or found[0].rows >= counts.rows:
        return None
    size = found[1].size
    assert size is not None  # _stand_in returns only entries that size
    # Its count on all of T, as a zero budget's skip reports it (to 3 decimals), then sized
    # within that.
    cost = size(counts, Allowance(memory_limit, 0.0)).estimated_seconds
    if cost is None or cost + 1e-3 > budget_seconds:
        return None
    sized = size(counts, Allowance(memory_limit, cost + 1e-3))
    return sized if sized.rows >= counts.rows else None


def settling(
    counts: Counts, steps: tuple[Step, ...], left_seconds: float, memory_limit: int
) -> Step | None:
    """What an unsettled first measurement buys with ``left_seconds``: the stand-in for exact mode
    (the RBF SVM checker), which measures the kernel itself, on all of T where it had fewer rows
    there, sized by its ``size`` like every step. A gain that shows only on many rows (weak
    interactions among many features) is missed on a sample and found on all rows; proxies
    re-measured on a second fold keep their bias. None where it cannot have all of T: another
    sample would understate the gain again (judged: on text_d8400 at seeds 1 and 3, 1,700 of
    5,850 rows left the verdict borderline where a second fold settled it), and a second fold may
    run then."""
    found = _stand_in(steps)
    if found is None:
        return None
    first, spec = found
    assert spec.size is not None  # _stand_in returns only entries that size
    sized = spec.size(counts, Allowance(memory_limit, left_seconds))
    if first.rows < sized.rows == counts.rows:
        return _step(first.name, first.role, sized, left_seconds, left_seconds)
    return None


def second_fold_steps(
    counts: Counts, names: tuple[str, ...], left_seconds: float, memory_limit: int
) -> tuple[Step, ...] | None:
    """A second fold's checkers ``names`` on the second split's ``counts``, planned like the first's
    within ``left_seconds``; None where that does not hold the second split's baseline (not charged,
    but it must be affordable): on large data no second fold runs."""
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
    """The steps of checkers ``names`` in registry order, each sized by its ``CheckerSpec.size``
    within what the earlier left of ``left_seconds`` and charged its count. ``whole_seconds``: the
    measurement's budget (default ``left_seconds``)."""
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
    """A method's step as ``sized`` says, within ``left`` of ``whole``, charged its count."""
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
    """What ``step``'s method runs on as it starts: the plan's ``Sized``, or under ``--time-limit``
    re-sized through the same ``size`` with the time left. The one run-time change of a decision."""
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
    """Exact mode's step: its ``size`` on all rows, within the first measurement's budget."""
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
    """A checker that may start before the baseline finishes (beside): one that says what it
    allocates. One that starts early and reads ``Context.linear`` waits there."""
    return step.bytes is not None


def _early_steps(steps: tuple[Step, ...]) -> list[Step]:
    """The checkers that train on rows and may start before the baseline has finished."""
    return [s for s in steps if s.role in ("proxy", "stand-in") and early(s) and s.rows > 0]


def _beside(counts: Counts, options: Options, steps: tuple[Step, ...]) -> bool:
    """Whether the linear baseline trains in a worker process beside the checkers: its C search is
    one long single-threaded call that degree-2 and MultiLinear need not wait for. Only when, so no
    plan can change (the JSON stays ``--jobs 1``'s):

    * no ``--time-limit``;
    * exact mode neither running nor asked for;
    * baseline and beside-checkers each count BESIDE_MIN_SECONDS or more;
    * the worker's T and V copy, LIBLINEAR's nodes and early checkers' allocations fit the
      memory budget.
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
    """The early checkers that run in a worker process of their own beside the baseline, so no core
    idles (covtype-like: 329 s of checkers in turn beside a 73 s baseline). One with ``in_worker``
    goes there where it counts BESIDE_MIN_SECONDS, another stays here to overlap, and its copy of T
    and V fits memory. Changes when, never what."""
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
    """What the baseline's worker adds: T and V copied (counted twice, for conversions), LIBLINEAR's
    nodes (16 bytes a value, a bias and an end node a row), and its interpreter."""
    data = counts.data_bytes + counts.val_bytes
    return 2 * data + 16 * (counts.nnz + 2 * counts.rows) + FIXED_BYTES


#: CPU seconds outside these multiples of a prediction of OFF_MIN_SECONDS or more get a warning
#: line.
OFF_LOW, OFF_HIGH, OFF_MIN_SECONDS = 0.5, 2.0, 0.5


def done_share(
    block: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
    predicted: float | None = None,
) -> tuple[float, str]:
    """The share of its plan's count (``predicted``) that a checker's actual work is predicted to
    take, from its JSON block and ``data``, and how to say it.

    Exact mode revises its count from its search's LIBSVM iterations (``revised_seconds``; the plan
    counts no iterations, and at large C they dominate) and may stop repeats early; a block without
    ``revised_seconds`` (kcheck 0.6.1) gets the count of repeats run. rbfsvm and MultiLinear give
    their own ``revised_seconds``, taken over the step's ``predicted`` (the block's count where
    absent, kcheck 0.6.4). 1 otherwise."""
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
    """Lines for a finished check's steps whose CPU seconds fell outside [OFF_LOW, OFF_HIGH] times
    their paced count; ``checkers`` and ``data`` serve :func:`done_share`."""
    lines = []
    machine = probe.pace(plan_json.get("probe_cpu_seconds"))
    at_pace = "" if machine == 1.0 else f", at this machine's pace of {machine:.2f}"
    settling = plan_json.get("settling")
    for step in [*plan_json.get("steps", []), *([settling] if settling else [])]:
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
    """``ratio`` to one decimal, or more where rounding would land inside the band (0.46)."""
    for places in (1, 2, 3):
        shown = f"{ratio:.{places}f}"
        if not OFF_LOW <= float(shown) <= OFF_HIGH:
            break
    return shown
