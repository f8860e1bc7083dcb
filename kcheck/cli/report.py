"""``kcheck report``: a batch's results as one self-contained HTML page."""

from __future__ import annotations

import os

import click

from kcheck.cli.options import output_option, quiet_option
from kcheck.cli.outputs import prepare_outputs, refuse_input_as_output
from kcheck.cli.ui import Ui
from kcheck.io.atomic import write_text


@click.command(short_help="A batch's results as one self-contained HTML page.")
@click.argument("results", type=str)
@output_option("Write the page to FILE (atomically).", required=True)
@click.option(
    "--title", type=str, default=None, metavar="TITLE", help="The page's title [default: RESULTS]."
)
@click.option(
    "--fail-on",
    type=click.Choice(["kernel", "linear"]),
    default=None,
    help="Frame the data sets whose verdict trips the batch's --fail-on, and name them.",
)
@quiet_option()
def report(results: str, output: str, title: str | None, fail_on: str | None, quiet: bool) -> None:
    """Make one HTML page from RESULTS, the JSON lines of `kcheck batch -o`.

    A forest plot shows, for every data set, each checker's gap with its 95% interval, the
    epsilon line, and the verdict and margin; error and skipped lines show as such. A table
    (click a column to sort) follows. The page loads nothing from outside the file, so CI
    can attach it as an artifact.
    """
    from kcheck.reports.html import read_lines, render

    ui = Ui(quiet)
    refuse_input_as_output(output, "-o", [results])
    with prepare_outputs([(output, "-o")]):
        rows = read_lines(results)
        page = render(rows, title or os.path.basename(results), fail_on=fail_on)
        write_text(output, page, "report")
    ui.info(f"kcheck: {len(rows)} data sets and files in {output}")
