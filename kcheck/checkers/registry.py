"""Every checker there is, in one table: its name, how it runs, what the table shows of it.

Adding a checker means one module with ``check(T, V, ctx) -> CheckerResult`` and one entry
here; the pipeline, ``--checkers``, the JSON and the CLI's table all follow from the entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kcheck.checkers import degree2, exact, multilinear, rbfsvm, rff
from kcheck.checkers.base import CheckerResult, Context, Dataset
from kcheck.defaults import CHECKER_NAMES
from kcheck.verdict import Role


@dataclass(frozen=True)
class CheckerSpec:
    """One checker.

    ``table``: (label, JSON key) pairs the CLI shows in the parameter column, e.g.
    ``("K", "clusters")``. ``default``: runs unless ``--checkers`` says otherwise.
    ``summary``: one line for ``--help``. Checkers run in registry order.
    """

    name: str
    run: Callable[[Dataset, Dataset, Context], CheckerResult]
    table: tuple[tuple[str, str], ...]
    default: bool
    summary: str
    #: Its role in the rule (kcheck.verdict.Role): a ``proxy`` the method relies on, whose
    #: skip leaves a linear verdict short of ``clear``; or a ``stand-in`` for exact mode
    #: (rbfsvm), which runs only where exact mode is ``auto`` and did not run (it trains the RBF
    #: SVM itself, which exact mode does better where it runs, and ``--exact never`` turns off),
    #: and whose skip for cost is the normal case on large data.
    role: Role = "proxy"
    #: Whether it reads the linear baseline's result (``Context.linear``) before it starts:
    #: rff's measured seconds. One that does not may run while the baseline is still training
    #: beside it (kcheck.pipeline, on large data with ``--jobs`` of 2 or more); one that reads
    #: it later (MultiLinear's fallback C, for its smallest clusters) then waits for it there.
    needs_baseline: bool = False
    #: Bytes it will allocate beyond the data, from its plan (counts only); a checker with
    #: none may not run beside the baseline, whose worker needs memory of its own.
    planned_bytes: Callable[[Dataset, Context], int] | None = None


@dataclass(frozen=True)
class DecidingSpec:
    """A comparison that, when it runs, decides (unless a proxy is clear of epsilon: see
    :func:`kcheck.verdict.rule`): the exact RBF comparison.

    It is no proxy: it trains on all rows (T and V) with repeated cross-validation, so it has
    its own run signature, returning the JSON block that says whether and why it ran.
    """

    name: str
    run_all: Callable[
        [Dataset, Dataset, Context, str], tuple[dict[str, object], CheckerResult | None]
    ]
    table: tuple[tuple[str, str], ...]
    summary: str
    #: ``auto`` never runs it on more rows (T and V together) than this.
    auto_max_rows: int = 0
    role: Role = "deciding"


#: MultiLinear first: the method leans on it most, so a time limit should cut degree-2.
CHECKERS: dict[str, CheckerSpec] = {
    spec.name: spec
    for spec in (
        CheckerSpec(
            "multilinear",
            multilinear.check,
            (("K", "clusters"),),
            True,
            "k-means on the training split, one linear model per cluster",
            planned_bytes=multilinear.planned_bytes,
        ),
        CheckerSpec(
            "degree2",
            degree2.check,
            (("C", "C"),),
            True,
            "a linear model on the explicit degree-2 polynomial expansion",
            planned_bytes=degree2.planned_bytes,
        ),
        # Where exact mode did not run and the real RBF SVM is cheap: mid-size data of few
        # features, where the proxies miss smooth boundaries (wavy 5-D set of 12,000 rows:
        # +0.2 and +1.7 points against a true +8.2).
        CheckerSpec(
            rbfsvm.NAME,
            rbfsvm.check,
            (("C", "C"), ("g", "gamma")),
            True,
            "the RBF SVM itself, tuned on a sample of the training split, trained on all of it",
            role="stand-in",
        ),
        # Opt-in: it catches smooth low-dimensional boundaries the others miss (wavy 5-D set:
        # +3.3 points where degree-2 and MultiLinear saw under 1), but costs 6-120x the linear
        # model on data up to ijcnn1's size (scripts/results/rff_hard_cases.md).
        CheckerSpec(
            "rff",
            rff.check,
            (("D", "D"), ("g", "gamma")),
            False,
            "a linear model on random Fourier features of the RBF kernel",
            needs_baseline=True,
        ),
    )
}
EXACT = DecidingSpec(
    exact.NAME,
    exact.check_all,
    (("C", "C"), ("g", "gamma")),
    "the real RBF SVM against the linear model, by repeated CV on all rows (small data)",
    auto_max_rows=exact.MAX_ROWS,
)
#: Names ``--checkers`` accepts, in the order the help lists them (kcheck.defaults keeps them
#: for the command line; tests/test_registry.py checks that the two agree).
NAMES: tuple[str, ...] = CHECKER_NAMES
DEFAULT_NAMES: tuple[str, ...] = tuple(n for n in NAMES if CHECKERS[n].default)


def table_keys(name: str) -> tuple[tuple[str, str], ...]:
    """The (label, JSON key) pairs shown for a checker, the exact comparison included."""
    if name == EXACT.name:
        return EXACT.table
    spec = CHECKERS.get(name)
    return spec.table if spec is not None else ()


def role(name: str) -> Role:
    """A method's role in the rule: the registry says it, the rule reads it as data."""
    if name == EXACT.name:
        return EXACT.role
    return CHECKERS[name].role
