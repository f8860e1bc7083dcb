"""``kcheck batch``: every data set under directories and named files, one JSON line each."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import click
from rich.text import Text

from kcheck.cli.app import BatchFailed, GateTripped
from kcheck.cli.options import check_config, check_options, cluster_from, scheduler_option
from kcheck.cli.outputs import check_writable, require_stdout
from kcheck.cli.render import batch_caption, batch_table
from kcheck.cli.ui import Ui, count_text, new_progress
from kcheck.errors import KcheckError


def _names(lines: list[dict[str, Any]], limit: int = 5) -> str:
    names = [x["name"] for x in lines]
    return ", ".join(names[:limit]) + (
        f" and {len(names) - limit} more" if len(names) > limit else ""
    )


def _read_path_list(source: str) -> list[str]:
    """``--files-from``: one path a line (``-``: stdin); blank lines are ignored."""
    try:
        if source == "-":
            text = sys.stdin.read()
        else:
            with open(source, encoding="utf-8") as f:
                text = f.read()
    except OSError as e:
        raise KcheckError(f"--files-from {source}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise KcheckError(f"--files-from {source}: not UTF-8 text ({e.reason})") from None
    return [line.rstrip("\r") for line in text.split("\n") if line.strip()]


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
    from kcheck.batch import discover, run_batch

    quiet, fail_on = opts["quiet"], opts["fail_on"]
    ui = Ui(quiet)
    ctx = click.get_current_context()
    jobs_given = ctx.get_parameter_source("jobs") is click.core.ParameterSource.COMMANDLINE
    if shared_fs is not None and scheduler is None:
        raise click.UsageError("--shared-fs and --no-shared-fs go with --scheduler")
    if scheduler is not None and opts["time_limit"] is not None:
        raise click.UsageError(
            "--time-limit cannot be used with --scheduler: a check is stopped by ending its "
            "own process, which a Dask worker may not start"
        )
    scheduler = cluster_from(scheduler, jobs_given)
    named = list(paths)
    if files_from is not None:
        if files_from == "-" and "-" in named:
            raise click.UsageError("--files-from - and - (data on stdin) cannot both read stdin")
        named += _read_path_list(files_from)
    if not named:
        raise click.UsageError("give DIRs or FILEs to check, or --files-from FILE")
    if output == "-":
        destination: str | None = "-"
    elif output is not None:
        destination = output
        check_writable(output, "-o")
    else:
        destination = None if sys.stdout.isatty() else "-"
    if destination == "-":
        require_stdout()
    if resume and destination in (None, "-"):
        raise click.UsageError("--resume needs -o FILE: the results to resume from")
    template = check_config("", os.cpu_count() or 1, opts)
    own = (
        []
        if output is None or destination in (None, "-")
        else [output, f"{output}.partial", f"{output}.lock"]
    )
    found = discover(named, exclude=own)
    for path, reason in found.skipped:
        ui.info(
            f"kcheck: skipping {path} ({reason})" + (": an error under --strict" if strict else "")
        )
    if not found.datasets:
        raise KcheckError(f"no LIBSVM data files found in {' '.join(named)}")

    total = len(found.datasets)

    def announce(line: dict[str, Any], print_: Callable[[str], None]) -> None:
        if line["status"] == "ok":
            what = f"{line['verdict']} ({line['margin']})"
        else:
            what = f"error: {line['error']}"
        print_(f"kcheck: {line['name']}: {what}, {line['seconds']:.2f}s")

    def go(progress: Any = None, on_line: Any = None) -> Any:
        return run_batch(
            found.datasets,
            template,
            jobs=jobs,
            output=destination,
            resume=resume,
            skipped=found.skipped,
            strict=strict,
            progress=progress,
            on_line=on_line,
            scheduler=scheduler,
            shared_fs=shared_fs,
        )

    # JSON lines on a terminal's stdout would land in the middle of a live progress display.
    if ui.interactive and not (destination == "-" and sys.stdout.isatty()):
        bar = new_progress(ui.console, redirect_stdout=False)
        task = bar.add_task("starting", total=None, count="")

        def report(stage: str, d: int | None, t: int | None) -> None:
            # Several data sets at once: the count is of data sets, not repeated in the text.
            many = stage.split("; checking ", 1)
            if len(many) == 2 or stage == "done" or stage.endswith(" done"):
                stage = "checking " + many[1] if len(many) == 2 else "finishing"
                count = f"{d or 0}/{t} data sets" if t is not None else ""
            elif stage.startswith("[") and ": " not in stage:  # "[2/5] name": a data set starts
                count = f"{d or 0}/{t} data sets" if t is not None else ""
            else:
                count = count_text(stage, d, t)
            bar.update(task, description=stage, completed=d or 0, total=t, count=count)

        def show(line: dict[str, Any]) -> None:
            announce(line, lambda m: bar.console.print(m, markup=False, highlight=False))

        with bar:
            result = go(report, show)
    else:
        result = go(None, None if quiet else lambda x: announce(x, ui.info))
    if resume:
        ui.info(
            f"kcheck: reused {len(result.resumed)} of {total} results from {output} "
            f"(--resume); checked {total - len(result.resumed)} again, "
            f"{len(result.stale)} of them because their data, test file, options or "
            "kcheck version changed"
        )
    if not ui.quiet:
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
    if result.errors:
        n = len(result.errors)
        raise BatchFailed(
            f"{n} of {total + len(result.skipped) if strict else total} "
            f"{'files' if strict else 'data sets'} could not be checked: "
            f"{_names(result.errors)}"
        )
    if fail_on is not None and (hits := result.matching(fail_on)):
        raise GateTripped(
            f"verdict is {fail_on} for {len(hits)} of {total} data sets "
            f"(--fail-on {fail_on}): {_names(hits)}"
        )
