"""The decision rule and its paired 95% intervals, shared by check and verify. Scores are per point,
optionally weighted: a metric changes weights, not the rule."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

#: The JSON's schema (changelog in docs/json.md). 2: six significant digits except method parameters
#: (exact), per-model test accuracies under ``test.accuracy``.
SCHEMA_VERSION = 3
#: Check verdicts that ``verify --check-json`` reads: the fields it uses are the same in both.
READABLE_CHECK_SCHEMAS = (1, 2, 3)
Verdict = Literal["linear", "kernel"]
Margin = Literal["clear", "borderline"]
#: Gaps are rounded to this many decimals before comparing, so exact ties survive.
TIE_DECIMALS = 12
#: Two-sided 95% normal quantile.
Z95 = 1.959963984540054


@dataclass(frozen=True)
class Gap:
    """gap = Val(checker) - Val(linear), with a 95% interval from paired per-point results."""

    value: float
    low: float
    high: float


def accuracy(correct: np.ndarray, weights: np.ndarray | None = None) -> float:
    """The (weighted) mean of per-point results; NaN for no points."""
    c = np.asarray(correct, dtype=np.float64)
    if c.size == 0:
        return float("nan")
    if weights is None:
        return float(c.mean())
    w = np.asarray(weights, dtype=np.float64)
    return float(np.sum(w * c) / np.sum(w))


def paired_gap(
    checker_correct: np.ndarray, linear_correct: np.ndarray, weights: np.ndarray | None = None
) -> Gap:
    """Mean and normal 95% interval of d_i = correct_checker(i) - correct_linear(i) on V: pairing
    removes shared variance. ``weights``: weighted mean and variance."""
    a = np.asarray(checker_correct, dtype=np.float64)
    b = np.asarray(linear_correct, dtype=np.float64)
    if a.shape != b.shape or a.size == 0:
        raise ValueError("paired results must be non-empty and of equal length")
    d = a - b
    if weights is None:
        mean = float(d.mean())
        se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else 0.0
        points = float(d.size)
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != d.shape or not np.all(w >= 0) or not w.sum() > 0:
            raise ValueError("weights must be non-negative, one per point, not all zero")
        w = w / w.sum()
        mean = float(np.sum(w * d))
        n = d.size
        se = float(math.sqrt(np.sum(w**2 * (d - mean) ** 2) * n / (n - 1))) if n > 1 else 0.0
        points = float(1.0 / np.sum(w**2))  # the effective number of points
    half = max(Z95 * se, interval_floor(points))
    return Gap(mean, mean - half, mean + half)


def interval_floor(points: float) -> float:
    """The least half-width of a gap's 95% interval on ``points`` points: Z95 / (n + 1). With no
    discordant pair the sample variance is 0 and the interval collapses (10 rows called ``linear
    (clear)`` on +0.0 [+0.0, +0.0]); no discordance among n leaves a rate of about 1 / (n + 1)
    (add-one). Binds only with at most one discordant pair."""
    return Z95 / (points + 1.0)


def reaches(x: float, epsilon: float) -> bool:
    """Whether a gain (or interval end) reaches epsilon, rounded: the rule's one comparison."""
    return round(x, TIE_DECIMALS) >= epsilon


def straddles(gap: Gap, epsilon: float) -> bool:
    """Whether epsilon lies inside the interval: the side of epsilon is then uncertain."""
    return reaches(gap.high, epsilon) and not reaches(gap.low, epsilon)


def mean_gap(first: Gap, second: Gap) -> Gap:
    """The mean of two gaps on disjoint points (two folds) with its interval, se = sqrt(se1^2 +
    se2^2) / 2. Averaging gaps, not pooling points, also suits AUC."""
    se1 = (first.high - first.low) / (2 * Z95)
    se2 = (second.high - second.low) / (2 * Z95)
    mean = (first.value + second.value) / 2
    se = math.sqrt(se1**2 + se2**2) / 2
    return Gap(mean, mean - Z95 * se, mean + Z95 * se)


#: An outcome's role: ``deciding`` (exact mode, decides where run); ``proxy`` (degree-2,
#: MultiLinear, rff); ``stand-in`` (rbfsvm: its skip for cost is normal).
Role = Literal["deciding", "proxy", "stand-in"]
#: Why a margin is what it is.
MarginReason = Literal[
    "interval",  # the deciding interval (every interval, for linear) lies on one side
    "interval-reaches-epsilon",  # an interval contains epsilon
    "cut-short",  # a checker that might have overturned a linear verdict did not finish
]


@dataclass(frozen=True)
class Outcome:
    """What the rule needs of one method: role, whether it finished, what limited it (``cost``,
    ``time``, ``memory``), reason, and gap (None: none)."""

    name: str
    role: Role
    status: str
    gap: Gap | None = None
    limited_by: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class CutShort:
    """A checker skipped or cut short by time or memory, so it cannot confirm a linear verdict."""

    name: str
    what: Literal["did not run", "was cut short"]
    reason: str | None

    def note(self, words: Callable[[str], str] = str) -> str:
        """The warning, the checker named by ``words`` (kcheck.checkers.registry.words)."""
        return (
            f"{words(self.name)} {self.what} ({self.reason}), so it cannot confirm the linear "
            "verdict"
        )


@dataclass(frozen=True)
class Decision:
    """The verdict, its margin, and why: the record the JSON, the table and the words read."""

    verdict: Verdict
    margin: Margin
    deciding: str | None  # checker whose gap decided a kernel verdict
    #: ``proxies``: checkers' gaps decided; ``exact``: exact mode's; ``overrule``: a proxy's whole
    #: interval reached epsilon over exact mode's linear verdict.
    by: Literal["proxies", "exact", "overrule"] = "proxies"
    margin_reason: MarginReason = "interval"
    #: The outcomes whose interval contains epsilon (the margin's uncertainty, where any).
    straddling: tuple[str, ...] = ()
    cut_short: tuple[CutShort, ...] = ()
    #: The deciding checker's gap (a kernel verdict's).
    deciding_gap: Gap | None = None
    #: Exact mode's gap where a proxy overruled it.
    overruled: Gap | None = None

    def notes(self, words: Callable[[str], str] = str) -> list[str]:
        """The rule's warnings: cut-short checkers, then an overrule; methods named by ``words``."""
        out = [c.note(words) for c in self.cut_short]
        if self.overruled is not None and self.deciding_gap is not None:
            out.append(_overrule_note(self.overruled, words(str(self.deciding)), self.deciding_gap))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "by": self.by,
            "deciding": self.deciding,
            "margin_reason": self.margin_reason,
            "straddling": list(self.straddling),
            "cut_short": [
                {"checker": c.name, "what": c.what, "reason": c.reason} for c in self.cut_short
            ],
        }


def decide(gaps: dict[str, Gap], epsilon: float) -> Decision:
    """``kernel`` if any gap reaches epsilon, else ``linear``; ``clear`` where the deciding interval
    is on one side (kernel: the largest gap's; linear: every checker's)."""
    if not gaps:
        raise ValueError("no checker finished, so there is nothing to decide on")

    kernel = {name: g for name, g in gaps.items() if reaches(g.value, epsilon)}
    if kernel:
        name = max(kernel, key=lambda k: (kernel[k].value, k))
        clear = reaches(kernel[name].low, epsilon)
        return Decision(
            "kernel",
            "clear" if clear else "borderline",
            name,
            margin_reason="interval" if clear else "interval-reaches-epsilon",
            straddling=() if clear else (name,),
            deciding_gap=kernel[name],
        )
    straddling = tuple(n for n, g in gaps.items() if reaches(g.high, epsilon))
    return Decision(
        "linear",
        "borderline" if straddling else "clear",
        None,
        margin_reason="interval-reaches-epsilon" if straddling else "interval",
        straddling=straddling,
    )


def _overrule_note(exact: Gap, name: str, g: Gap) -> str:
    return (
        f"the exact comparison's RBF gained {100 * exact.value:+.1f} points, but "
        f"{name} gained {100 * g.value:+.1f} [{100 * g.low:+.1f}, "
        f"{100 * g.high:+.1f}] on V, clear of epsilon: the exact comparison tunes on a sample "
        "and can miss a gain that needs a larger C, so the verdict is kernel"
    )


def _exact_first(exact: Outcome, proxies: dict[str, Gap], epsilon: float) -> Decision:
    """Where exact mode ran its gap decides, unless it says ``linear`` while a proxy's whole
    interval reaches epsilon: then ``kernel`` by that proxy. Exact mode tunes on a sample, which
    ranks a needed large C lowest (it overfits the sample); a proxy's clear gap on V is real. Only a
    clear interval overrides: a point estimate on small data's V is a coin toss."""
    assert exact.gap is not None
    decision = dataclasses.replace(decide({exact.name: exact.gap}, epsilon), by="exact")
    sure = {n: g for n, g in proxies.items() if reaches(g.low, epsilon)}
    if decision.verdict == "kernel" or not sure:
        return decision
    return dataclasses.replace(decide(sure, epsilon), by="overrule", overruled=exact.gap)


def _cut_short(outcomes: Sequence[Outcome]) -> tuple[CutShort, ...]:
    """Checkers that might have overturned a linear verdict but did not finish (skipped for budget,
    memory, time, or stopped). Not a stand-in skipped for cost (normal on large data), nor a
    degree-2 subsample under its budget (its interval reflects the sample)."""
    out = []
    for o in outcomes:
        if o.role == "deciding":
            continue
        if o.limited_by == "cost" and o.role == "stand-in":
            continue
        if o.status == "skipped":
            out.append(CutShort(o.name, "did not run", o.reason))
        elif o.limited_by in ("time", "memory"):
            out.append(CutShort(o.name, "was cut short", o.reason))
    return tuple(out)


def rule(outcomes: Sequence[Outcome], epsilon: float) -> Decision:
    """The whole verdict rule, from what each method did, in the user's order.

    1. Where exact mode ran and has a gap, it decides, unless a proxy overrules it
       (:func:`_exact_first`).
    2. Otherwise ``kernel`` when any gap reaches epsilon (the largest decides), else ``linear``;
       the margin from the intervals (:func:`decide`).
    3. Without exact mode, a linear verdict is not ``clear`` while a checker that might have
       overturned it was cut short (:func:`_cut_short`).

    A second fold's gaps come in as the mean of both (:func:`mean_gap`; which: :func:`remeasure`).
    ValueError when no outcome has a gap."""
    gaps = {o.name: o.gap for o in outcomes if o.gap is not None}
    if not gaps:
        raise ValueError("no checker finished, so there is nothing to decide on")
    deciding = [o for o in outcomes if o.role == "deciding"]
    exact = next((o for o in deciding if o.gap is not None), None)
    if exact is not None:
        proxies = {n: g for n, g in gaps.items() if n != exact.name}
        decision = _exact_first(exact, proxies, epsilon)
    else:
        decision = decide(gaps, epsilon)
    if decision.verdict != "linear" or deciding:
        return decision
    cut = _cut_short(outcomes)
    if not cut:
        return decision
    return dataclasses.replace(
        decision, margin="borderline", margin_reason="cut-short", cut_short=cut
    )


def unsettled(decision: Decision, outcomes: Sequence[Outcome]) -> bool:
    """Whether more rows of T could move the verdict (kcheck.plan.settling buys them): it is
    borderline, or ``linear`` with a checker that measured a sample of T for cost. A gain that
    grows with rows (many weak interactions) shows less on a sample, and the sample's interval
    on V does not say so: degree-2 on 64% of T gained +0.8 [-0.2, +1.8] where all rows gain +3.6."""
    if decision.margin == "borderline":
        return True
    return decision.verdict == "linear" and any(
        o.limited_by == "cost" and o.status == "subsampled" for o in outcomes
    )


def remeasure(
    decision: Decision, outcomes: Sequence[Outcome], epsilon: float, *, affordable: bool
) -> tuple[str, ...]:
    """The checkers a second fold re-measures: without exact mode, where the first measurement left
    budget for one (``affordable``: kcheck.plan.Plan.affords_second_fold), those whose interval
    contains epsilon while the verdict is borderline. From counts and gaps only. A small V is noisy
    (a gap 1.4 points above epsilon, +-1.2, fell below at one seed in five); a second fold halves
    the variance only where the verdict hangs on it."""
    if decision.margin != "borderline" or not affordable:
        return ()
    if any(o.role == "deciding" for o in outcomes):
        return ()
    return tuple(
        o.name
        for o in outcomes
        if o.role != "deciding" and o.gap is not None and straddles(o.gap, epsilon)
    )


#: After one CV repeat the interval omits the fold assignment's variance (0.14-0.88 of its error,
#: scripts/results/exact.md); widened by this it covers up to 1.1.
ONE_REPEAT_WIDEN = 1.5


def settled(gap: Gap, epsilon: float, repeats: int = 2) -> bool:
    """Whether more CV repeats could not move the verdict (exact mode's early stop): the interval
    lies on one side of epsilon, widened by ONE_REPEAT_WIDEN after a single repeat."""
    if repeats <= 0:
        return False
    if repeats == 1:
        half = ONE_REPEAT_WIDEN / 2
        mid = (gap.low + gap.high) / 2
        wide = (gap.high - gap.low) * half
        gap = Gap(gap.value, mid - wide, mid + wide)
    return not straddles(gap, epsilon)


def without_timing(obj: Any) -> Any:
    """The JSON without its wall-clock fields (keys ending in ``seconds``): the same input and seed
    give the same JSON apart from these; tests compare through this."""
    if isinstance(obj, dict):
        return {k: without_timing(v) for k, v in obj.items() if not k.endswith("seconds")}
    if isinstance(obj, list):
        return [without_timing(v) for v in obj]
    return obj


def json_number(x: float | None, digits: int = 6) -> float | None:
    """``digits`` significant digits (0.000123 keeps 3); NaN and inf become null."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{float(x):.{digits}g}")


def json_parameter(x: float | None) -> float | None:
    """A method parameter exactly, for ``svm-train -c/-g`` or ``liblinear-train -c``."""
    if x is None or not math.isfinite(x):
        return None
    return float(x)


def label_value(v: float) -> int | float:
    """Labels as users wrote them: integral labels as ints."""
    return int(v) if float(v).is_integer() and abs(v) < 2**53 else float(v)
