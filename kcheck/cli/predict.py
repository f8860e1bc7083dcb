"""``kcheck predict``: label a file with a saved model."""

from __future__ import annotations

import sys

import click

from kcheck.atomic import atomic_open
from kcheck.cli.options import Size
from kcheck.cli.outputs import refuse_input_as_output
from kcheck.cli.ui import Ui


@click.command(short_help="Label FILE with a saved MODEL (and MODEL.range); one label a line.")
@click.argument("model", type=str)
@click.argument("file", type=str)
@click.option("-o", "--output", type=str, default=None, metavar="FILE",
              help="Write the labels to OUT instead of stdout.")
@click.option("--zero-based", is_flag=True, help="Feature indices in FILE start at 0.")
@click.option("--memory-limit", type=Size(), default=None,
              help="Memory budget, e.g. 2G [default: half the physical memory]; a model or "
                   "range file that needs more is refused before it is loaded.")
@click.option("-q", "--quiet", is_flag=True, help="Nothing on stderr except errors.")
def predict(model: str, file: str, output: str | None, zero_based: bool,
            memory_limit: int | None, quiet: bool) -> None:
    """Label FILE with a saved MODEL (scaled with MODEL.range); one label a line.

    MODEL and MODEL.range are checked in full before they are loaded; regression, one-class
    and precomputed-kernel models are refused.
    """
    from kcheck import models

    ui = Ui(quiet)
    if output is not None:
        refuse_input_as_output(output, "-o", [model, model + ".range", file])
    result = ui.run(
        lambda progress: models.predict_file(
            model, file, zero_based=zero_based, progress=progress if ui.interactive else None,
            memory_limit=memory_limit,
        )
    )
    text = models.format_labels(result.labels)
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with atomic_open(output) as f:
            f.write(text)
    if result.accuracy is not None:
        ui.info(f"Accuracy = {100 * result.accuracy:g}% ({result.correct}/{result.rows})")
