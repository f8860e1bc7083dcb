"""``kcheck verify``: the expensive reference, and a gate on a check's verdict."""

from __future__ import annotations

import os
from typing import Any

import click
from rich.text import Text

from kcheck.cli.app import GateTripped
from kcheck.cli.options import (
    MAX_ROWS_HELP,
    SEED,
    Fraction,
    MaxRows,
    cluster_from,
    jobs_option,
    memory_limit_option,
    metric_option,
    output_option,
    quiet_option,
    scheduler_option,
)
from kcheck.cli.outputs import (
    json_destination,
    prepare_outputs,
    print_json,
    refuse_input_as_output,
    write_json,
)
from kcheck.cli.render import verify_summary, verify_table
from kcheck.cli.ui import Ui
from kcheck.defaults import SCALINGS, Event
from kcheck.defaults import Progress as Report


def announcing(ui: Ui, progress: Report) -> Report:
    """``progress``, plus a stderr line per predicted time (every estimate in a log); none with
    -q."""

    def report(event: Event) -> None:
        progress(event)  # first: a log closes the stage before with its own line
        if event.predicted_seconds is not None and (not ui.interactive or not event.done):
            # Laid out for a log's width as the stage lines are; wrapped by rich on a terminal.
            (ui.info if ui.interactive else ui.log_line)(event.text)

    return report


@click.command(short_help="The expensive reference: an RBF grid search (LIBSVM) next to linear.")
@click.argument("train", type=str)
@click.option(
    "--test",
    type=str,
    default=None,
    metavar="FILE",
    help="Also train both models on all of TRAIN and score them on FILE.",
)
@jobs_option("Worker processes for the grid search")
@scheduler_option("One task per grid point, with the same result as -j.")
@click.option(
    "--max-rows",
    type=MaxRows(),
    default=None,
    help=MAX_ROWS_HELP,
)
@click.option(
    "--scaling",
    type=click.Choice(SCALINGS),
    default=None,
    help="Feature scaling fitted on TRAIN [default: the --check-json's, else maxabs].",
)
@click.option(
    "--seed",
    type=SEED,
    default=None,
    metavar="N",
    help="Seed of the folds and samples, 0 to 2^32-1 [default: the --check-json's, else 0].",
)
@click.option(
    "--epsilon",
    type=Fraction(),
    default=None,
    help="Gap that means 'kernel' [default: the --check-json's, else 0.02].",
)
@metric_option(
    default=None,
    help="What a score is: accuracy, balanced (class-weighted models) or auc (two classes) "
    "[default: the --check-json's, else accuracy].",
)
@click.option(
    "--check-json",
    type=str,
    default=None,
    metavar="FILE",
    help="A saved 'kcheck check' JSON verdict on TRAIN: exit 1 unless this confirms it.",
)
@click.option("--zero-based", is_flag=True, help="Feature indices in the files start at 0.")
@memory_limit_option(
    "the read, the grid's worker processes (local:N's too) and LIBSVM's kernel caches keep to "
    "it (a smaller cache is slower, the result the same); a remote cluster's workers keep "
    "their own."
)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON result on stdout.")
@output_option("Write the JSON result to FILE (atomically); - is stdout.")
@quiet_option()
def verify(
    train: str,
    test: str | None,
    jobs: int | None,
    scheduler: str | None,
    max_rows: int | str | None,
    scaling: str | None,
    seed: int | None,
    epsilon: float | None,
    metric: str | None,
    check_json: str | None,
    zero_based: bool,
    memory_limit: int | None,
    as_json: bool,
    output: str | None,
    quiet: bool,
) -> None:
    """The expensive reference: RBF grid search (LIBSVM) next to the tuned linear model.

    With --check-json, the verdict must be about TRAIN (its data.sha256 must match; exit 2 if
    not), --scaling, --seed and --epsilon come from it, and the exit code is a gate: 0 if the
    reference confirms the check's verdict, 1 if it does not.
    """
    from kcheck import verify as verifying

    ui = Ui(quiet)
    scheduler = cluster_from(scheduler, jobs is not None, memory_limit)
    output, to_stdout = json_destination(output, as_json)
    if output is not None:
        refuse_input_as_output(output, "-o", [train, test, check_json])
    with prepare_outputs([(output, "-o")]):
        session = None
        if scheduler is not None:
            from kcheck.parallel.cluster import Session

            # Reach the cluster (or start local:N) before any work: a bad address fails at once.
            session = Session(scheduler, memory_limit)
        try:
            config = verifying.VerifyConfig(
                train=train,
                test=test,
                jobs=jobs if jobs is not None else (os.cpu_count() or 1),
                max_rows=max_rows,
                scaling=scaling,
                seed=seed,
                epsilon=epsilon,
                metric=metric,
                check_json=check_json,
                zero_based=zero_based,
                memory_limit=memory_limit,
                scheduler=None if session is None else session.address,
            ).validated()
            result = ui.run(lambda progress: verifying.verify(config, announcing(ui, progress)))
        except BaseException:
            if session is not None:
                # Ctrl-C: the grid runs in a worker thread; cancel its tasks from here.
                from kcheck.parallel.cluster import end_all_sessions

                end_all_sessions()
            raise
        finally:
            if session is not None:
                session.close()
        _show_verify(ui, result)
        if output is not None:
            write_json(result, output)
    if to_stdout:
        print_json(result)
    if result["confirms"] is False:
        raise GateTripped(
            f"the reference does not confirm the check's verdict: {result['check']['verdict']} "
            f"in {result['check']['path']}, {result['verdict']} here"
        )


def _show_verify(ui: Ui, v: dict[str, Any]) -> None:
    if ui.quiet:
        return
    ui.show(
        Text(f"kcheck verify: {v['data']['path']}", style="italic"),
        verify_table(v, ui.width),
        Text(verify_summary(v) + f" [{v['seconds']:.1f}s]"),
    )
