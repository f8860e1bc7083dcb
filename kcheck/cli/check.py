"""``kcheck check``: one data set, a verdict, optionally a model."""

from __future__ import annotations

import os
from typing import Any

import click

from kcheck.cli.app import GateTripped
from kcheck.cli.options import check_config, check_options
from kcheck.cli.outputs import (
    check_writable,
    emit_json,
    json_destination,
    refuse_input_as_output,
)
from kcheck.cli.render import fmt_acc, verdict_table
from kcheck.cli.ui import Ui
from kcheck.errors import recorded_warnings


def _show_verdict(ui: Ui, v: dict[str, Any]) -> None:
    if ui.quiet:
        return
    ui.console.print(verdict_table(v))
    for name, c in v["checkers"].items():
        if c.get("reason"):
            ui.info(f"{name}: {c['status']}: {c['reason']}")
    style = "bold red" if v["verdict"] == "kernel" else "bold green"
    ui.console.print(
        f"verdict: [{style}]{v['verdict']}[/] ({v['margin']}; epsilon {v['epsilon']:g}, "
        f"{v['seconds']:.2f}s)"
    )
    if v.get("test"):
        t = v["test"]
        parts = [f"{k} {fmt_acc(t[k])}" for k in ("linear", *v["checkers"]) if k in t]
        ui.info(f"test ({t['rows']} rows): " + ", ".join(parts))
    for w in v.get("warnings", []):
        ui.warn(w)


@click.command()
@click.argument("train", type=str)
@click.option("--test", "test", type=str, default=None, help="Also score every model on FILE.")
@click.option("--jobs", "-j", type=int, default=None,
              help="Worker processes for MultiLinear's clusters [default: CPU count].")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON verdict on stdout.")
@click.option("-o", "--output", type=str, default=None,
              help="Write the JSON verdict to FILE (atomically); - is stdout.")
@click.option("--model-out", type=str, default=None,
              help="Train the recommended model on all of TRAIN; save it to PATH (+ PATH.range).")
@click.option("--model", "model_kind", type=click.Choice(["linear", "kernel"]), default=None,
              help="With --model-out: save this kind whatever the verdict.")
@check_options
def check(
    train: str,
    test: str | None,
    jobs: int | None,
    as_json: bool,
    output: str | None,
    model_out: str | None,
    model_kind: str | None,
    **opts: Any,
) -> None:
    """Decide whether TRAIN needs a Gaussian kernel or a linear model is enough."""
    from kcheck.pipeline import run

    ui = Ui(opts["quiet"])
    fail_on = opts["fail_on"]
    config = check_config(
        train,
        jobs if jobs is not None else (os.cpu_count() or 1),
        opts,
        test=test,
        model_out=model_out,
        model_kind=model_kind,
    )
    if model_kind and not model_out:
        raise click.UsageError("--model needs --model-out")
    # Fail now, not after a long check (and not after --model-out has replaced a model).
    output, to_stdout = json_destination(output, as_json)
    if model_out is not None:
        check_writable(model_out, "--model-out")
    inputs = [train, test]
    if model_out is not None:
        refuse_input_as_output(model_out, "--model-out", inputs)
        refuse_input_as_output(model_out + ".range", "--model-out", inputs)
    if output is not None:
        refuse_input_as_output(output, "-o", inputs, [model_out, model_out and
                                                       model_out + ".range"])
    with recorded_warnings() as notes:
        report = ui.run(lambda progress: run(config, progress))
    verdict = report.json
    verdict["warnings"] = [*verdict.get("warnings", []), *notes]
    _show_verdict(ui, verdict)
    emit_json(verdict, output, to_stdout=to_stdout)
    if fail_on is not None and verdict["verdict"] == fail_on:
        raise GateTripped(f"verdict is {fail_on} (--fail-on {fail_on})")
