"""``kcheck predict``: label a file with a saved model, kcheck's or the LIBSVM tools'."""

from __future__ import annotations

import sys

import click

from kcheck.cli.options import Size, output_option, quiet_option
from kcheck.cli.outputs import prepare_outputs, refuse_input_as_output
from kcheck.cli.ui import Ui
from kcheck.io.atomic import atomic_open


@click.command(short_help="Label FILE with a saved MODEL; one label a line, as svm-predict.")
@click.argument("model", type=str)
@click.argument("file", type=str)
@click.option(
    "-r",
    "range_path",
    type=str,
    default=None,
    metavar="RANGE",
    help="Scale FILE with RANGE (e.g. from svm-scale -s) instead of MODEL.range.",
)
@click.option(
    "--no-scale",
    is_flag=True,
    help="FILE is already scaled (e.g. svm-scale -r output); read no range file.",
)
@click.option(
    "-b",
    "probability",
    type=click.Choice(["0", "1"]),
    default="0",
    show_default=True,
    help="1: print each class's probability, as svm-predict -b 1 (models trained "
    "with -b 1, or LIBLINEAR logistic regression).",
)
@output_option("Write the labels to FILE (atomically) instead of stdout.")
@click.option("--zero-based", is_flag=True, help="Feature indices in FILE start at 0.")
@click.option(
    "--memory-limit",
    type=Size(),
    default=None,
    help="Memory budget, e.g. 2G [default: half the physical memory]; a model or "
    "range file that needs more is refused before it is loaded.",
)
@quiet_option()
def predict(
    model: str,
    file: str,
    range_path: str | None,
    no_scale: bool,
    probability: str,
    output: str | None,
    zero_based: bool,
    memory_limit: int | None,
    quiet: bool,
) -> None:
    """Label FILE with a saved MODEL; one label a line, as svm-predict writes them.

    FILE is scaled with MODEL.range (kcheck check --model-out writes it), with -r RANGE, or
    not at all with --no-scale, so models of svm-train and liblinear-train work too. MODEL
    and the range file are checked in full before they are loaded; regression, one-class and
    precomputed-kernel models are refused.
    """
    from kcheck import predict as predicting

    ui = Ui(quiet)
    if range_path is not None and no_scale:
        raise click.UsageError("-r and --no-scale cannot be used together")
    if output is not None:
        inputs = [model, file, range_path if range_path is not None else model + ".range"]
        refuse_input_as_output(output, "-o", inputs)
    with prepare_outputs([(output, "-o")]):
        result = ui.run(
            lambda progress: predicting.predict_file(
                model,
                file,
                range_path=range_path,
                scale=not no_scale,
                probability=probability == "1",
                zero_based=zero_based,
                progress=progress if ui.interactive else None,
                memory_limit=memory_limit,
            )
        )
        if result.probabilities is not None:
            assert result.classes is not None
            text = predicting.format_probabilities(
                result.classes, result.labels, result.probabilities
            )
        else:
            text = predicting.format_labels(result.labels)
        if output is None:
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            with atomic_open(output) as f:
                f.write(text)
    if result.accuracy is not None:
        ui.info(f"Accuracy = {100 * result.accuracy:g}% ({result.correct}/{result.rows})")
