"""``kcheck batch``: every data set under directories and named files, one JSON line each."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click
from rich.progress import Progress, TaskID
from rich.text import Text

from kcheck.cli.app import BatchFailed, GateTripped
from kcheck.cli.options import (
    check_config,
    check_options,
    cluster_from,
    junit_option,
    junit_properties,
    scheduler_option,
)
from kcheck.cli.outputs import prepare_outputs, require_stdout
from kcheck.cli.render import batch_caption, batch_table
from kcheck.cli.ui import Ui, count_text, new_progress
from kcheck.cli.words import verdict_summary
from kcheck.errors import KcheckError

if TYPE_CHECKING:
    from kcheck.batch import BatchProgress, BatchResult, Discovery
    from kcheck.config import CheckConfig


def _names(lines: list[dict[str, Any]], limit: int = 5) -> str:
    names = [x["name"] for x in lines]
    return ", ".join(names[:limit]) + (
        f" and {len(names) - limit} more" if len(names) > limit else ""
    )


@click.command(short_help="Check every data set in DIRs and FILEs; one JSON line each.")
@click.argument("paths", nargs=-1, required=False, metavar="DIR|FILE...")
@click.option(
    "--files-from",
    type=str,
    default=None,
    metavar="FILE",
    help="Also check the paths listed in FILE, one a line (- for stdin).",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="Data sets checked at once, each in its own process; they share the memory budget.",
)
@scheduler_option("One task per data set; the lines are those of a local run.")
@click.option(
    "--shared-fs/--no-shared-fs",
    "shared_fs",
    default=None,
    help="With --scheduler: workers read the files at their paths (--shared-fs), or are sent "
    "each file's bytes once (--no-shared-fs) [default: by path where a worker sees the same "
    "file at its absolute path].",
)
@click.option(
    "-o",
    "--output",
    type=str,
    default=None,
    metavar="FILE",
    help="Write the JSON lines to FILE (via FILE.partial, renamed at the end, under a "
    "lock on FILE.lock); - is stdout.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="With -o: reuse the ok lines of FILE and FILE.partial whose data, test "
    "file, options and kcheck version are unchanged; check the rest.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="A skipped file is an error (exit 3): every file looked at must be data.",
)
@junit_option()
@check_options
def batch(
    paths: tuple[str, ...],
    files_from: str | None,
    jobs: int,
    scheduler: str | None,
    shared_fs: bool | None,
    output: str | None,
    resume: bool,
    strict: bool,
    junit_out: str | None,
    **opts: Any,
) -> None:
    """Check every data set in DIRs (walked in sorted order) and FILEs.

    A named file, and a file under a DIR with a data-file extension (.svm, .libsvm, .txt, .t,
    .scale...) or none, is always checked: a broken one is an error. Files plainly not data
    (README.md, images, .json, .py...) are skipped; other files under a DIR are checked when
    their first line is LIBSVM data. Every skipped file gets a line with status "skipped" and
    its reason (--strict makes it an error). .gz, .bz2 and .xz files are read directly; - is
    stdin. NAME.t or NAME.test beside NAME (NAME.t.scale beside NAME.scale) is its test
    file. One JSON line per data set: the JSON of `kcheck check` plus "name", "status" ("ok",
    "error" or "skipped") and "error". Without -o, the lines go to stdout unless it is a
    terminal, where the summary table is shown instead.

    \b
    Exit codes:
      0  every data set was checked (and no --fail-on match)
      1  --fail-on matched at least one data set
      2  usage error: bad option, no data files found, --resume without -o,
         FILE locked by another batch, a --scheduler that cannot be reached
      3  at least one data set could not be checked, or (--strict) a file was
         skipped; errors take precedence over --fail-on
    Ctrl-C ends the batch (exit 130); FILE keeps its old content and the lines
    already written stay in FILE.partial, so --resume carries on from there.
    With --scheduler, Ctrl-C cancels the cluster's tasks (local:N also ends its
    workers); on a shared cluster a check already running finishes, unused.
    """
    from kcheck.batch import discover

    ui = Ui(opts["quiet"])
    jobs_given = (
        click.get_current_context().get_parameter_source("jobs")
        is click.core.ParameterSource.COMMANDLINE
    )
    run = _BatchRun.from_options(
        paths, files_from, jobs, jobs_given, scheduler, shared_fs, output, resume, strict, opts
    )
    if junit_out is not None:
        if run.output is not None and os.path.abspath(junit_out) == os.path.abspath(run.output):
            raise click.UsageError("--junit and -o name the same file")
    # FILE (from FILE.partial) and --junit commit together once every data set has a line.
    with prepare_outputs([(run.destination, "-o"), (junit_out, "--junit")]):
        own = run.own_files + ([junit_out] if junit_out is not None else [])
        found = discover(run.named, exclude=own)
        for path, reason in found.skipped:
            ui.info(
                f"kcheck: skipping {path} ({reason})"
                + (": an error under --strict" if strict else "")
            )
        if not found.datasets:
            raise KcheckError(f"no LIBSVM data files found in {' '.join(run.named)}")
        result = _check(ui, run, found)
        _summarise(ui, run, result, len(found.datasets))
        if junit_out is not None:
            _write_junit(junit_out, result, opts)
    _exit_status(run, result, len(found.datasets), opts["fail_on"])


@dataclass(frozen=True)
class _BatchRun:
    """What the command line asks of the batch, checked before anything runs."""

    named: list[str]
    #: A file, ``"-"`` for stdout, or None (a terminal's stdout: the table only).
    destination: str | None
    output: str | None
    #: What each check is (the numeric stack is imported only once the options are checked).
    template: CheckConfig
    jobs: int
    scheduler: str | None
    shared_fs: bool | None
    resume: bool
    strict: bool

    @classmethod
    def from_options(
        cls,
        paths: tuple[str, ...],
        files_from: str | None,
        jobs: int,
        jobs_given: bool,
        scheduler: str | None,
        shared_fs: bool | None,
        output: str | None,
        resume: bool,
        strict: bool,
        opts: dict[str, Any],
    ) -> _BatchRun:
        """The options validated in the order a user meets their errors."""
        if shared_fs is not None and scheduler is None:
            raise click.UsageError("--shared-fs and --no-shared-fs go with --scheduler")
        if scheduler is not None and opts["time_limit"] is not None:
            raise click.UsageError(
                "--time-limit cannot be used with --scheduler: a check is stopped by ending its "
                "own process, which a Dask worker may not start"
            )
        scheduler = cluster_from(scheduler, jobs_given, opts["memory_limit"])
        named = _named(paths, files_from, opts["memory_limit"])
        destination = _destination(output)
        if resume and destination in (None, "-"):
            raise click.UsageError("--resume needs -o FILE: the results to resume from")
        template = check_config("", os.cpu_count() or 1, opts)
        return cls(named, destination, output, template, jobs, scheduler, shared_fs, resume, strict)

    @property
    def own_files(self) -> list[str]:
        """The output and its companions, never checked as data."""
        if self.output is None or self.destination in (None, "-"):
            return []
        return [self.output, f"{self.output}.partial", f"{self.output}.lock"]

    def go(
        self,
        found: Discovery,
        on_progress: Callable[[BatchProgress], None] | None,
        on_line: Callable[[dict[str, Any]], None] | None,
    ) -> BatchResult:
        """Run the batch on what was found; the callbacks are what the screen shows."""
        from kcheck.batch import run_batch

        return run_batch(
            found.datasets,
            self.template,
            jobs=self.jobs,
            output=self.destination,
            resume=self.resume,
            skipped=found.skipped,
            strict=self.strict,
            on_progress=on_progress,
            on_line=on_line,
            scheduler=self.scheduler,
            shared_fs=self.shared_fs,
        )


def _named(paths: tuple[str, ...], files_from: str | None, memory_limit: int | None) -> list[str]:
    """The DIRs and FILEs given and those ``--files-from`` lists (discovery.read_path_list)."""
    from kcheck.batch.discovery import read_path_list

    named = list(paths)
    if files_from is not None:
        if files_from == "-" and "-" in named:
            raise click.UsageError("--files-from - and - (data on stdin) cannot both read stdin")
        named += read_path_list(files_from, memory_limit)
    if not named:
        raise click.UsageError("give DIRs or FILEs to check, or --files-from FILE")
    return named


def _destination(output: str | None) -> str | None:
    """Where lines go: ``-o FILE``, stdout (``-o -``, or a non-terminal stdout), or nowhere."""
    if output == "-":
        destination: str | None = "-"
    elif output is not None:
        destination = output  # checked with the other outputs (prepare_outputs)
    else:
        destination = None if sys.stdout.isatty() else "-"
    if destination == "-":
        require_stdout()
    return destination


def _announce(line: dict[str, Any], print_: Callable[[str], None]) -> None:
    """One line per data set as it is done: its verdict or its error."""
    if line["status"] == "ok":
        what = f"{line['verdict']} ({line['margin']})"
    else:
        what = f"error: {line['error']}"
    print_(f"kcheck: {line['name']}: {what}, {line['seconds']:.2f}s")


def _check(ui: Ui, run: _BatchRun, found: Discovery) -> BatchResult:
    """Run the batch, with a live progress line on a terminal, else a line per data set."""
    # JSON lines on a terminal's stdout would land in the middle of a live progress display.
    if not ui.interactive or (run.destination == "-" and sys.stdout.isatty()):
        with ui.batch_log() as progress:
            return run.go(found, progress, None if ui.quiet else lambda x: _announce(x, ui.info))
    bar = new_progress(ui.console, redirect_stdout=False)
    task = bar.add_task("starting", total=None, count="")

    def show(line: dict[str, Any]) -> None:
        _announce(line, lambda m: bar.console.print(m, markup=False, highlight=False))

    with bar:
        return run.go(found, _progress_line(bar, task), show)


def _progress_line(bar: Progress, task: TaskID) -> Callable[[BatchProgress], None]:
    """Shows each report: stage, and count with its unit (data sets, or a check's steps)."""

    def report(event: BatchProgress) -> None:
        count = count_text(event.done, event.total, event.unit)
        bar.update(
            task,
            description=event.stage,
            completed=event.done or 0,
            total=event.total,
            count=count,
        )

    return report


def _summarise(ui: Ui, run: _BatchRun, result: BatchResult, total: int) -> None:
    """What was reused, the summary table, and every skip, error and warning."""
    if run.resume:
        ui.info(
            f"kcheck: reused {len(result.resumed)} of {total} results from {run.output} "
            f"(--resume); checked {total - len(result.resumed)} again, "
            f"{len(result.stale)} of them because their data, test file, options or "
            "kcheck version changed, or their saved line was not well formed"
        )
    if ui.quiet:
        return
    ui.show(
        Text("kcheck batch", style="italic"),
        batch_table(result.lines, result.resumed, ui.width),
        Text(batch_caption(result.lines, result.seconds), style="dim"),
    )
    for x in result.skipped:
        ui.note(f"skipped {x['name']}: {x['reason']}", style="yellow")
    for x in result.errors:
        ui.note(f"{x['name']}: {x['error']}", style="red")
    for x in result.lines:
        for w in x.get("warnings") or []:
            ui.warn(f"{x['name']}: {w}")


def _write_junit(path: str, result: BatchResult, opts: dict[str, Any]) -> None:
    """Every line as a test case of one suite, the verdicts in the table's plain words."""
    from kcheck.reports import junit

    suite = junit.build(
        result.lines,
        fail_on=opts["fail_on"],
        summary=verdict_summary,
        seconds=result.seconds,
        properties=junit_properties(opts),
    )
    junit.write(path, suite)


def _exit_status(run: _BatchRun, result: BatchResult, total: int, fail_on: str | None) -> None:
    """Exit 3 where a data set could not be checked; else 1 where ``--fail-on`` matches."""
    if result.errors:
        n = len(result.errors)
        raise BatchFailed(
            f"{n} of {total + len(result.skipped) if run.strict else total} "
            f"{'files' if run.strict else 'data sets'} could not be checked: "
            f"{_names(result.errors)}"
        )
    if fail_on is not None and (hits := result.matching(fail_on)):
        raise GateTripped(
            f"verdict is {fail_on} for {len(hits)} of {total} data sets "
            f"(--fail-on {fail_on}): {_names(hits)}"
        )
