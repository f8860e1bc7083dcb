"""Options shared by several commands, from :mod:`kcheck.defaults`, which imports nothing heavy, so
``kcheck --help`` and ``kcheck scale`` skip the numeric stack."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import click

from kcheck.defaults import (
    CHECKER_NAMES,
    DEFAULT_EXACT,
    DEFAULT_METRIC,
    DEFAULT_SCALING,
    EPSILON,
    EXACT_MODES,
    MAX_ROWS,
    MAX_SEED,
    METRICS,
    MIN_ROWS,
    SCALINGS,
)
from kcheck.defaults import DEFAULT_CHECKERS as DEFAULT_CHECKER_NAMES

#: Smallest accuracy gain (a fraction: 0.02 is 2 points) that makes the kernel worth it.
DEFAULT_EPSILON = EPSILON
DEFAULT_SEED = 0
DEFAULT_CHECKERS = ",".join(DEFAULT_CHECKER_NAMES)

#: ``--seed``: what LIBLINEAR's and LIBSVM's srand take, an unsigned 32-bit integer.
SEED = click.IntRange(0, MAX_SEED)


class MetavarType(click.ParamType):  # type: ignore[type-arg, unused-ignore]
    """A parameter type that --help shows as its ``metavar`` (click asks a method for it)."""

    metavar = ""

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return self.metavar


class CheckerList(MetavarType):
    """``--checkers``: a comma-separated subset of the core's checkers, checked at parse time."""

    name = "checkers"
    metavar = "NAME[,NAME...]"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, ...]:
        if isinstance(value, tuple):
            return value
        known = CHECKER_NAMES
        names = tuple(c.strip() for c in str(value).split(",") if c.strip())
        unknown = [c for c in names if c not in known]
        if unknown or not names:
            what = ", ".join(repr(c) for c in unknown) if unknown else "nothing"
            self.fail(
                f"{what} is not a checker; give a comma-separated subset of {','.join(known)}",
                param,
                ctx,
            )
        return names

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[Any]:
        from click.shell_completion import CompletionItem

        head, _, last = incomplete.rpartition(",")
        prefix = head + "," if head else ""
        taken = set(head.split(","))
        return [
            CompletionItem(prefix + c)
            for c in CHECKER_NAMES
            if c.startswith(last) and c not in taken
        ]


_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


class Size(MetavarType):
    """``--memory-limit``: 8G, 512M, 1.5g or a number of bytes, checked at parse time."""

    name = "size"
    metavar = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except click.BadParameter as e:
            self.fail(e.message, param, ctx)


class MaxRows(MetavarType):
    """``--max-rows``: a number of rows, or ``auto`` (what --memory-limit holds)."""

    name = "max_rows"
    metavar = "N|auto"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> int | str:
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        elif str(value).strip().lower() == "auto":
            return "auto"
        else:
            digits = str(value).strip().replace("_", "").replace(",", "")
            if not (digits.isascii() and digits.isdigit()):
                shown = digits if len(digits) <= 40 else digits[:37] + "..."
                self.fail(f"expected a number of rows or auto, got {shown!r}", param, ctx)
            # More digits than MAX_ROWS has is over it: no int() of 5,000 digits.
            n = int(digits) if len(digits) <= len(str(MAX_ROWS)) else MAX_ROWS + 1
        if n < MIN_ROWS:
            self.fail(f"must be at least {MIN_ROWS} rows (or auto), got {value}", param, ctx)
        if n > MAX_ROWS:
            self.fail(f"must be at most {MAX_ROWS:,} rows (or auto)", param, ctx)
        return n


MAX_ROWS_HELP = (
    "Use a stratified sample of N rows, kept while TRAIN streams (memory: N rows, not the "
    "file); auto: as many as --memory-limit holds."
)


class Fraction(MetavarType):
    """``--epsilon``: a fraction of accuracy in [0, 1); 2 for 2 points is refused with a hint."""

    name = "fraction"
    metavar = "FRACTION"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            x = value
        else:
            try:
                x = float(value)
            except ValueError:
                self.fail(f"expected a fraction such as 0.02 (2 points), got {value!r}", param, ctx)
        if x >= 1:
            self.fail(
                f"a fraction of accuracy is expected (0.02 = 2 points), got {value}; "
                f"for {x:g} points give {x / 100:g}",
                param,
                ctx,
            )
        if not x >= 0:
            self.fail(f"must lie in [0, 1), got {value}", param, ctx)
        return x


def parse_size(text: str) -> int:
    """'8G', '512M', '1.5g', '1000000' -> bytes (binary multiples, as memory is counted)."""
    m = _SIZE.match(text)
    if not m:
        raise click.BadParameter(f"expected a size like 8G or 512M, got {text!r}")
    factor = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}[m.group(2).lower()]
    value = int(float(m.group(1)) * factor)
    if value <= 0:
        raise click.BadParameter("must be positive")
    return value


# --- options every command words alike ------------------------------------------------------


def quiet_option() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``-q``: nothing on stderr but errors (warnings still go into the JSON)."""
    return click.option("-q", "--quiet", is_flag=True, help="Nothing on stderr except errors.")


def memory_limit_option(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--memory-limit``: the memory budget of a command that reads data, as check's."""
    return click.option(
        "--memory-limit",
        type=Size(),
        default=None,
        help=f"Memory budget, e.g. 2G [default: half the physical memory]; {what}",
    )


def output_option(
    what: str, *, default: str | None = None, required: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``-o FILE``: where ``what`` goes, written atomically."""
    return click.option(
        "-o",
        "--output",
        type=str,
        default=default,
        required=required,
        metavar="FILE",
        help=what,
    )


def junit_option() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--junit FILE``: the verdicts as JUnit XML for a CI system's test report."""
    return click.option(
        "--junit",
        "junit_out",
        type=str,
        default=None,
        metavar="FILE",
        help="Also write a JUnit XML report to FILE (atomically): a test case per data set, "
        "a --fail-on match a failure, an error an error, a skipped file skipped.",
    )


def junit_properties(opts: dict[str, Any]) -> dict[str, Any]:
    """The suite's ``<properties>``: what every test case was checked with."""
    return {
        "epsilon": opts["epsilon"],
        "metric": opts["metric"],
        "checkers": ",".join(opts["checkers"]),
        "exact": opts["exact"],
        "seed": opts["seed"],
        "fail_on": opts["fail_on"],
    }


def jobs_option(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``-j N``: worker processes, the CPU count unless given."""
    return click.option(
        "--jobs",
        "-j",
        type=click.IntRange(min=1),
        default=None,
        metavar="N",
        help=f"{what} [default: CPU count].",
    )


METRIC_HELP = (
    "What a score is: accuracy; balanced (mean per-class recall, every model trained with "
    "class weights); auc (two classes)."
)


def metric_option(
    default: str | None = DEFAULT_METRIC, help: str = METRIC_HELP
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(
        "--metric",
        type=click.Choice(METRICS),
        default=default,
        show_default=default is not None,
        help=help,
    )


SCHEDULER_HELP = (
    "Run on a Dask cluster instead of -j: tcp://HOST:8786 (a running scheduler) or local:N "
    "(N worker processes started here); needs pip install 'kcheck[dask]'."
)


def scheduler_option(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--scheduler ADDRESS``: a Dask cluster that replaces ``-j``."""
    return click.option(
        "--scheduler",
        type=str,
        default=None,
        metavar="ADDRESS",
        help=f"{SCHEDULER_HELP} {what}",
    )


def cluster_from(
    scheduler: str | None, jobs_given: bool, memory_limit: int | None = None
) -> str | None:
    """The checked ``--scheduler``: a usage error with ``-j``; exit 2 on a bad address, no dask
    extra, or ``local:N`` beyond cores or ``memory_limit``, before any work."""
    if scheduler is None:
        return None
    if jobs_given:
        raise click.UsageError("--scheduler replaces -j: give one of them")
    from kcheck.parallel.cluster import require

    return require(scheduler, memory_limit).text


_CHECK_OPTIONS: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
    click.option(
        "--epsilon",
        type=Fraction(),
        default=DEFAULT_EPSILON,
        show_default=True,
        help="Smallest gain that makes the kernel worth it, as a fraction in the metric's "
        "units (0.02 is 2 points).",
    ),
    metric_option(),
    click.option(
        "--checkers",
        type=CheckerList(),
        default=DEFAULT_CHECKERS,
        show_default=True,
        help=f"Checkers to run, a comma-separated subset of {', '.join(CHECKER_NAMES)} "
        "(rbfsvm runs only where exact mode is auto and did not run).",
    ),
    click.option(
        "--scaling",
        type=click.Choice(SCALINGS),
        default=DEFAULT_SCALING,
        show_default=True,
        help="Feature scaling, fitted on the training file.",
    ),
    click.option(
        "--seed",
        type=SEED,
        default=DEFAULT_SEED,
        show_default=True,
        metavar="N",
        help="Seed of the split, folds and samples: 0 to 2^32-1.",
    ),
    click.option(
        "--memory-limit",
        type=Size(),
        default=None,
        help="Memory budget, e.g. 8G or 512M [default: half the physical memory]; "
        "a batch divides it between its workers.",
    ),
    click.option(
        "--time-limit",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        metavar="SECONDS",
        help="Seconds for one check; checkers not done by then are skipped.",
    ),
    click.option("--max-rows", type=MaxRows(), default=None, help=MAX_ROWS_HELP),
    click.option("--zero-based", is_flag=True, help="Feature indices in the files start at 0."),
    click.option(
        "--exact",
        type=click.Choice(EXACT_MODES),
        default=DEFAULT_EXACT,
        show_default=True,
        help="Run the real RBF-vs-linear comparison (auto: where it is cheap, i.e. "
        "small data); where it runs, it decides the verdict. never: no RBF SVM is trained "
        "(nor the rbfsvm checker).",
    ),
    click.option(
        "--explain",
        is_flag=True,
        help="Name the product terms that carry degree-2's gain, and score linear + the "
        "top 1, 3, 10, 20 products (advice; the verdict is unchanged).",
    ),
    click.option(
        "--fail-on",
        type=click.Choice(["kernel", "linear"]),
        default=None,
        help="Exit with code 1 when a verdict is this (for CI gates).",
    ),
    quiet_option(),
]


def check_options(f: Callable[..., None]) -> Callable[..., None]:
    """The options that ``check`` and ``batch`` share: what one check is, and the gate."""
    for option in reversed(_CHECK_OPTIONS):
        f = option(f)
    return f


def default_jobs(jobs: int | None) -> int:
    return jobs if jobs is not None else (os.cpu_count() or 1)


def check_config(train: str, jobs: int, opts: dict[str, Any], **extra: Any) -> Any:
    """A validated CheckConfig from the shared options (``fail_on`` and ``quiet`` excluded)."""
    from kcheck.config import CheckConfig

    return CheckConfig(
        train=train,
        epsilon=opts["epsilon"],
        checkers=opts["checkers"],
        scaling=opts["scaling"],
        seed=opts["seed"],
        jobs=jobs,
        memory_limit=opts["memory_limit"],
        zero_based=opts["zero_based"],
        time_limit=opts["time_limit"],
        exact=opts["exact"],
        explain=opts["explain"],
        max_rows=opts["max_rows"],
        metric=opts["metric"],
        **extra,
    ).validated()
