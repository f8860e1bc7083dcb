"""Every checker in one table: name, how it runs, how it is shown. A new checker is one module with
``size(counts, allowance) -> Sized`` and ``check(T, V, ctx, sized) -> CheckerResult``, one entry
here and its name in kcheck.defaults; pipeline, ``--checkers``, JSON, CLI, HTML report and schemas
(scripts/schema_checkers.py) follow from the entry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from kcheck.checkers import degree2, exact, kfactory, mixlinear, multilinear, rbfsvm, rff
from kcheck.checkers.base import Allowance, CheckerResult, Context, Counts, Dataset, Sized
from kcheck.defaults import CHECKER_NAMES
from kcheck.verdict import Role


class Param(NamedTuple):
    """One parameter the CLI's table shows, as ``label=value``: ``K=12``, ``C=2^7``."""

    label: str
    key: str
    #: C and gamma read as grid.py users read them (``2^7``); a count (K, D) as it is.
    log2: bool = True


@dataclass(frozen=True)
class CheckerSpec:
    """One checker; checkers run in registry order. ``table``: parameters the CLI shows from its
    JSON block. ``default``: runs unless ``--checkers`` says otherwise. ``summary``: its ``--help``
    line. ``words``: how sentences name it. ``colour``: its HTML marks."""

    name: str
    run: Callable[[Dataset, Dataset, Context, Sized], CheckerResult]
    table: tuple[Param, ...]
    default: bool
    summary: str
    words: str
    colour: str
    #: The parameter cell where its JSON block holds none of ``table`` (a skipped run).
    blank: str = "-"
    #: Its role in the rule (kcheck.verdict.Role): a ``proxy``, whose skip keeps a linear verdict
    #: from ``clear``; or a ``stand-in`` for exact mode (rbfsvm: runs only where exact is ``auto``
    #: and did not run; its skip for cost is normal on large data).
    role: Role = "proxy"
    #: Whether it may run in its own worker (``detached``): it never reads the baseline and its
    #: result pickles (not MultiLinear: reads C; not rbfsvm: C pointers).
    in_worker: bool = False
    #: What it will do with its allowance, from counts: rows, what cut them, bytes beyond the data,
    #: counted seconds. None: all of T, no cost, no memory word, so never beside the baseline.
    size: Callable[[Counts, Allowance], Sized] | None = None


@dataclass(frozen=True)
class DecidingSpec:
    """The exact RBF comparison, which decides when it runs (unless a proxy is clear of epsilon:
    :func:`kcheck.verdict.rule`). No proxy: it trains on all rows with repeated CV, so it has its
    own signature, returning the JSON block saying whether and why it ran."""

    name: str
    run_all: Callable[
        [Dataset, Dataset, Context, Sized], tuple[dict[str, object], CheckerResult | None]
    ]
    #: What it will do in an exact mode (``--exact``), from counts, as a checker's ``size``.
    size: Callable[[Counts, Allowance, str], Sized]
    table: tuple[Param, ...]
    summary: str
    words: str
    colour: str
    blank: str = "-"
    role: Role = "deciding"
    #: About its share of the one-core prediction at ``rows`` and ``jobs``; display only.
    wall_share: Callable[[int, int, int], float] = lambda rows, jobs, memory_limit: 1.0


#: MultiLinear first: the method leans on it most, so a time limit should cut degree-2.
CHECKERS: dict[str, CheckerSpec] = {
    spec.name: spec
    for spec in (
        CheckerSpec(
            "multilinear",
            multilinear.check,
            (Param("K", "clusters", log2=False),),
            True,
            "k-means on the training split, one linear model per cluster",
            words="MultiLinear",
            colour="#9467bd",
            blank="K=-",
            size=multilinear.size,
        ),
        CheckerSpec(
            "degree2",
            degree2.check,
            (Param("C", "C"),),
            True,
            "a linear model on the explicit degree-2 polynomial expansion",
            words="degree-2",
            colour="#1f77b4",
            in_worker=True,
            size=degree2.size,
        ),
        # Where exact mode did not run and the real RBF SVM is cheap: mid-size, few features, where
        # proxies miss smooth boundaries (+0.2 and +1.7 against a true +8.2).
        CheckerSpec(
            rbfsvm.NAME,
            rbfsvm.check,
            (Param("C", "C"), Param("g", "gamma")),
            True,
            "the RBF SVM itself, tuned on a sample of the training split, trained on all of it",
            words="the RBF SVM on the training split",
            colour="#e377c2",
            role="stand-in",
            size=rbfsvm.size,
        ),
        # Opt-in: catches smooth low-dimensional boundaries (+3.3 where others saw under 1) at
        # 6-120x linear's cost (scripts/results/rff_hard_cases.md).
        CheckerSpec(
            "rff",
            rff.check,
            (Param("D", "D", log2=False), Param("g", "gamma")),
            False,
            "a linear model on random Fourier features of the RBF kernel",
            words="random Fourier features",
            colour="#8c564b",
            size=rff.size,
        ),
        # Opt-in: a mixture of linear SVMs by hard EM from MultiLinear's partition; beat
        # MultiLinear's gap on 26 judged cases, trailed on 19 (scripts/results/mixlinear.md).
        CheckerSpec(
            mixlinear.NAME,
            mixlinear.check,
            (Param("K", "experts", log2=False),),
            False,
            "a mixture of linear models fitted by EM from MultiLinear's clusters",
            words="the mixture of linear SVMs",
            colour="#17becf",
            blank="K=-",
            size=mixlinear.size,
        ),
        # Opt-in: Kernel Factory (Ballings and Van den Poel 2013), LIBLINEAR on each of
        # round(log10(n)) row partitions' empirical kernel map; planned last.
        CheckerSpec(
            kfactory.NAME,
            kfactory.check,
            (Param("P", "partitions", log2=False),),
            False,
            "an ensemble of kernel machines on row partitions (Kernel Factory)",
            words="Kernel Factory",
            colour="#bcbd22",
            blank="P=-",
            size=kfactory.size,
        ),
    )
}
EXACT = DecidingSpec(
    exact.NAME,
    exact.check_all,
    exact.size,
    (Param("C", "C"), Param("g", "gamma")),
    "the real RBF SVM against the linear model, by repeated CV on all rows (where it fits)",
    words="the RBF SVM",
    colour="#d62728",
    wall_share=exact.wall_share,
)
#: ``--checkers`` names in help order (as in kcheck.defaults; tests/test_registry.py).
NAMES: tuple[str, ...] = CHECKER_NAMES
DEFAULT_NAMES: tuple[str, ...] = tuple(n for n in NAMES if CHECKERS[n].default)


#: The checker whose model ``--explain`` reads: kcheck.terms.explain ranks its product terms.
EXPLAINED = "degree2"


def spec(name: str) -> CheckerSpec | DecidingSpec | None:
    """A method's entry, the exact comparison included; None for a name not here."""
    return EXACT if name == EXACT.name else CHECKERS.get(name)


def methods() -> tuple[str, ...]:
    """Every name a check's ``checkers`` block may hold, in help order: the ``--checkers`` choices,
    then exact. Read at call time, so a table patched in a test is seen."""
    return (*NAMES, EXACT.name)


def table_keys(name: str) -> tuple[tuple[str, str], ...]:
    """The (label, JSON key) pairs shown for a checker, the exact comparison included."""
    entry = spec(name)
    return tuple((p.label, p.key) for p in entry.table) if entry is not None else ()


def words(name: str) -> str:
    """How a sentence names a method; a name not here stays as it is (``linear``)."""
    entry = spec(name)
    return entry.words if entry is not None else name


def role(name: str) -> Role:
    """A method's role in the rule: the registry says it, the rule reads it as data."""
    if name == EXACT.name:
        return EXACT.role
    return CHECKERS[name].role
