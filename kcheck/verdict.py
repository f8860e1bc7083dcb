"""The decision rule and its paired 95% intervals: the one rule that check and verify share.

Scores are per point (1/0 correct, or a fraction of repeats), optionally weighted, so that a
metric other than plain accuracy changes the weights, not the rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

#: The JSON's schema (docs/json.md has the changelog). 2: six significant digits for every
#: number except method parameters (C, gamma: exact), and the per-model test accuracies under
#: ``test.accuracy``.
SCHEMA_VERSION = 2
#: Check verdicts that ``verify --check-json`` reads: the fields it uses are the same in both.
READABLE_CHECK_SCHEMAS = (1, 2)
Verdict = Literal["linear", "kernel"]
Margin = Literal["clear", "borderline"]
#: Gaps are compared with epsilon after rounding to this many decimals, so that a gap equal to
#: epsilon in exact arithmetic (3 rows of 150 against 0.02) is not lost to binary rounding.
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
    """The (weighted) mean of per-point results; NaN for no points.

    Equal weights give plain accuracy; per-class weights would give balanced accuracy.
    """
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
    """Mean and normal 95% interval of d_i = correct_checker(i) - correct_linear(i) on V.

    Pairing on the same V points removes the variance both methods share, so the interval is
    much tighter than comparing two independent accuracies. With ``weights``, the weighted
    mean and the variance of a weighted mean (equal weights give the unweighted formula).
    """
    a = np.asarray(checker_correct, dtype=np.float64)
    b = np.asarray(linear_correct, dtype=np.float64)
    if a.shape != b.shape or a.size == 0:
        raise ValueError("paired results must be non-empty and of equal length")
    d = a - b
    if weights is None:
        mean = float(d.mean())
        se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else 0.0
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != d.shape or not np.all(w >= 0) or not w.sum() > 0:
            raise ValueError("weights must be non-negative, one per point, not all zero")
        w = w / w.sum()
        mean = float(np.sum(w * d))
        n = d.size
        se = float(math.sqrt(np.sum(w**2 * (d - mean) ** 2) * n / (n - 1))) if n > 1 else 0.0
    return Gap(mean, mean - Z95 * se, mean + Z95 * se)


def reaches(x: float, epsilon: float) -> bool:
    """Whether a gain (or an end of its interval) reaches epsilon: the rule's one comparison,
    rounded so that a gap equal to epsilon in exact arithmetic is not lost to float noise."""
    return round(x, TIE_DECIMALS) >= epsilon


def straddles(gap: Gap, epsilon: float) -> bool:
    """Whether epsilon lies inside the interval: the side of epsilon is then uncertain."""
    return reaches(gap.high, epsilon) and not reaches(gap.low, epsilon)


def mean_gap(first: Gap, second: Gap) -> Gap:
    """The mean of two gaps measured on disjoint points (two folds), with its interval.

    Each interval's half-width is Z95 standard errors; the mean of two independent estimates
    has the standard error sqrt(se1^2 + se2^2) / 2, so with folds of equal size the interval
    narrows by about sqrt(2). Averaging the folds' gaps, rather than pooling their points, is
    the same for accuracy and also right for AUC, whose scores two models do not share.
    """
    se1 = (first.high - first.low) / (2 * Z95)
    se2 = (second.high - second.low) / (2 * Z95)
    mean = (first.value + second.value) / 2
    se = math.sqrt(se1**2 + se2**2) / 2
    return Gap(mean, mean - Z95 * se, mean + Z95 * se)


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    margin: Margin
    deciding: str | None  # checker whose gap decided a kernel verdict


def decide(gaps: dict[str, Gap], epsilon: float) -> Decision:
    """``kernel`` if any checker's gap reaches epsilon, else ``linear``.

    The margin is ``clear`` when the deciding interval lies on one side of epsilon: for a
    kernel verdict, the interval of the largest qualifying gap lies at or above epsilon; for a
    linear verdict, every checker's interval lies below epsilon.
    """
    if not gaps:
        raise ValueError("no checker finished, so there is nothing to decide on")

    kernel = {name: g for name, g in gaps.items() if reaches(g.value, epsilon)}
    if kernel:
        name = max(kernel, key=lambda k: (kernel[k].value, k))
        margin: Margin = "clear" if reaches(kernel[name].low, epsilon) else "borderline"
        return Decision("kernel", margin, name)
    margin = "borderline" if any(reaches(g.high, epsilon) for g in gaps.values()) else "clear"
    return Decision("linear", margin, None)


def decide_with_exact(
    exact: tuple[str, Gap], proxies: dict[str, Gap], epsilon: float
) -> tuple[Decision, str | None]:
    """Where exact mode ran, its gap decides, unless it says ``linear`` while a proxy's whole
    interval reaches epsilon: then ``kernel``, decided by that proxy, with the reason.

    Exact mode's RBF is tuned on a sample within a budget, and a gain that needs a large C is
    lost there: a large C overfits the sample, so the sample ranks it lowest. A proxy's clear
    gap is measured on V against the tuned linear model, so a nonlinear model does beat it
    there. Only a clear interval overrides: a point estimate of a proxy is a coin toss on the
    hundred points of small data's V, which is why exact mode decides there.
    """
    name, gap = exact
    decision = decide({name: gap}, epsilon)
    sure = {n: g for n, g in proxies.items() if reaches(g.low, epsilon)}
    if decision.verdict == "kernel" or not sure:
        return decision, None
    decision = decide(sure, epsilon)
    g = sure[decision.deciding or ""]
    return decision, (
        f"the exact comparison's RBF gained {100 * gap.value:+.1f} points, but "
        f"{decision.deciding} gained {100 * g.value:+.1f} [{100 * g.low:+.1f}, "
        f"{100 * g.high:+.1f}] on V, clear of epsilon: the exact comparison tunes on a sample "
        "and can miss a gain that needs a larger C, so the verdict is kernel"
    )


def without_timing(obj: Any) -> Any:
    """The JSON without its wall-clock fields (every key ending in ``seconds``).

    The same input and seed give the same JSON apart from these; tests compare through this.
    """
    if isinstance(obj, dict):
        return {k: without_timing(v) for k, v in obj.items() if not k.endswith("seconds")}
    if isinstance(obj, list):
        return [without_timing(v) for v in obj]
    return obj


def json_number(x: float | None, digits: int = 6) -> float | None:
    """``digits`` significant digits, for stable, readable JSON; NaN and inf become null (JSON
    has neither). Significant digits, not decimals: a gap of 0.000123 keeps its 3 digits."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{float(x):.{digits}g}")


def json_parameter(x: float | None) -> float | None:
    """A method parameter (C, gamma) exactly as used, so that it can be passed on to
    ``svm-train -c/-g`` or ``liblinear-train -c`` and give the same model."""
    if x is None or not math.isfinite(x):
        return None
    return float(x)


def label_value(v: float) -> int | float:
    """Labels as users wrote them: integral labels as ints."""
    return int(v) if float(v).is_integer() and abs(v) < 2**53 else float(v)
