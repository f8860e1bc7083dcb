"""``kcheck check``: one data set, a verdict, optionally a model."""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Iterator
from typing import Any

import click
from rich.text import Text

from kcheck.cli.app import GateTripped
from kcheck.cli.options import (
    MetavarType,
    check_config,
    check_options,
    default_jobs,
    jobs_option,
    junit_option,
    junit_properties,
    output_option,
)
from kcheck.cli.outputs import (
    json_destination,
    prepare_outputs,
    print_json,
    refuse_input_as_output,
    write_json,
)
from kcheck.cli.render import (
    fmt_acc,
    log2_text,
    metric_words,
    verdict_footnote,
    verdict_table,
)
from kcheck.cli.ui import Ui
from kcheck.cli.words import model_cost, same_run, verdict_summary
from kcheck.defaults import products_of
from kcheck.errors import KcheckError, recorded_warnings
from kcheck.io.atomic import OutputSet


def show_verdict(
    ui: Ui, v: dict[str, Any], warnings: list[str], model_out: str | None = None
) -> None:
    """The table, a footnote on what it shows, the verdict and, in plain words, what next."""
    if ui.quiet:
        return
    ui.show(
        Text(f"kcheck: {v['data']['path']}", style="italic"),
        verdict_table(v, ui.width),
        Text(verdict_footnote(v), style="dim"),
    )
    for name, c in v["checkers"].items():
        if c.get("reason"):
            ui.info(f"{name}: {c['status']}: {c['reason']}")
    style = "bold red" if v["verdict"] == "kernel" else "bold green"
    verdict = Text.assemble(
        "verdict: ",
        (v["verdict"], style),
        f" ({v['margin']}; epsilon {100 * v['epsilon']:g} points, {v['seconds']:.2f}s)",
    )
    ui.show(verdict, Text(verdict_summary(v, model_out)))
    from kcheck.terms.explain import cheaper_model_sentence, explain_sentence

    if (sentence := explain_sentence(v)) is not None:
        ui.show(Text(sentence))
    cost = model_cost(v, "linear")
    if (cheaper := cheaper_model_sentence(v, same_run(v), cost)) is not None:
        ui.show(Text(cheaper))
    if v.get("test"):
        t = v["test"]
        score = t.get("score") or t["accuracy"]  # in the run's metric
        parts = [f"{k} {fmt_acc(score[k])}" for k in ("linear", *v["checkers"]) if k in score]
        ui.info(f"test file ({t['rows']:,} rows, {metric_words(v)[2]}): " + ", ".join(parts))
    for w in warnings:
        ui.warn(w)
    from kcheck.plan import off_prediction

    for line in off_prediction(v.get("plan") or {}, v.get("checkers"), v.get("data")):
        ui.warn(line)


def _show_model(ui: Ui, model: dict[str, Any], metric: str) -> None:
    params = " ".join(
        f"{'g' if k == 'gamma' else k}={log2_text(x)}" for k, x in model["params"].items()
    )
    # Under another metric the model is class-weighted and tuned by CV balanced accuracy.
    what = "CV accuracy" if metric == "accuracy" else "CV balanced accuracy"
    cv = f", {what} {fmt_acc(model['cv_accuracy'])}" if model.get("cv_accuracy") else ""
    search = {
        "exact": "; search started at exact mode's point",
        "rbfsvm": "; search started at rbfsvm's point",
        "grid": "; search: grid.py's grid",
    }.get(model.get("start") or "", "")
    ui.show(
        Text(
            f"model: {model['kind']} ({params}{cv}{search}) saved to {model['path']} and "
            f"{model['range_path']} in {model['seconds']:.1f}s"
        )
    )


def _check_outputs(
    model_out: str | None,
    inputs: list[str | None],
    output: str | None,
    junit_out: str | None = None,
) -> None:
    """Refuse a --model-out or --junit whose files (or -o) would overwrite an input or another."""
    if junit_out is not None:
        refuse_input_as_output(
            junit_out, "--junit", inputs, [output, model_out, model_out and model_out + ".range"]
        )
    if model_out is not None:
        refuse_input_as_output(model_out, "--model-out", inputs)
        refuse_input_as_output(model_out + ".range", "--model-out", inputs)
        refuse_input_as_output(model_out + ".terms", "--model-out", inputs)
    if output is not None:
        refuse_input_as_output(
            output, "-o", inputs, [model_out, model_out and model_out + ".range"]
        )


def _output_paths(
    output: str | None, model_out: str | None, model_kind: str | None, junit_out: str | None
) -> list[tuple[str | None, str]]:
    """Every file the check writes, with its option: -o, the model and companions, --junit."""
    paths: list[tuple[str | None, str]] = [(output, "-o")]
    if model_out is not None:
        paths += [(model_out, "--model-out"), (model_out + ".range", "--model-out")]
        if model_kind is not None and products_of(model_kind) is not None:
            paths.append((model_out + ".terms", "--model-out"))
    paths.append((junit_out, "--junit"))
    return paths


def _refuse_directories(*paths: str | None) -> None:
    """A directory is a batch's input: say so, with the command, instead of "Is a directory"."""
    for path in paths:
        if path is not None and path != "-" and os.path.isdir(path):
            raise KcheckError(
                f"{path}: is a directory; to check every data set in it: "
                f"kcheck batch {shlex.quote(path)}"
            )


def _write_junit(path: str, lines: list[dict[str, Any]], opts: dict[str, Any]) -> None:
    """The JUnit report of ``lines``, the verdicts in the plain words the screen shows."""
    from kcheck.reports import junit

    suite = junit.build(
        lines,
        fail_on=opts["fail_on"],
        summary=verdict_summary,
        properties=junit_properties(opts),
    )
    junit.write(path, suite)


@contextlib.contextmanager
def _junit_on_error(
    staged: OutputSet, junit_out: str | None, train: str, test: str | None, opts: dict[str, Any]
) -> Iterator[None]:
    """A check failing on its input is an ``<error>`` case, then exit 2 (the one output)."""
    try:
        yield
    except KcheckError as e:
        if junit_out is not None:
            staged.discard()
            line = {
                "name": train,
                "status": "error",
                "error": " ".join(str(e).split()),
                "data": {"path": train},
                "test": None if test is None else {"path": test},
                "seconds": None,
            }
            _write_junit(junit_out, [line], opts)
            staged.commit()
        raise


class ModelKind(MetavarType):
    """``--model``: linear, kernel or linear+K, checked at parse time."""

    name = "kind"
    metavar = "[linear|kernel|linear+K]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from kcheck.defaults import MODEL_KINDS, products_of

        text = str(value)
        if text not in MODEL_KINDS and products_of(text) is None:
            self.fail(f"expected linear, kernel or linear+K (K >= 1), got {text!r}", param, ctx)
        return text


CHECK_HELP = """Decide whether TRAIN needs a Gaussian kernel or a linear model is enough.

TRAIN is a LIBSVM-format file (.gz, .bz2 and .xz are read directly); - reads it from
stdin. On a terminal, a table and the verdict in plain words go to stderr; when stdout is
not a terminal (or with --json), the JSON verdict goes to stdout. With -q on a terminal and
no -o, stdout gets the verdict alone: linear (clear).

\b
Examples:
  kcheck check data.svm                      # table and verdict
  kcheck check data.svm -o verdict.json -q   # the JSON only, written atomically
  kcheck check data.svm --model-out m        # verdict, then the model it recommends
  zcat data.svm.gz | kcheck check - --fail-on kernel

\b
Exit codes:
  0    done
  1    the verdict matched --fail-on
  2    usage error or bad input (one line naming the file and line)
  130  interrupted (Ctrl-C); 143 terminated (SIGTERM). No output file
       is written or changed unless the whole run finished.
"""


@click.command(
    help=CHECK_HELP, short_help="Decide whether TRAIN needs a Gaussian kernel or linear is enough."
)
@click.argument("train", type=str, metavar="TRAIN")
@click.option(
    "--test", "test", type=str, default=None, metavar="FILE", help="Also score every model on FILE."
)
@jobs_option(
    "Worker processes for MultiLinear's clusters, and on large data for the linear baseline "
    "and degree-2 beside them; threads for the folds of the RBF SVM's cross-validations. "
    "The JSON is the same at any N"
)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON verdict on stdout.")
@output_option("Write the JSON verdict to FILE (atomically); - is stdout.")
@click.option(
    "--model-out",
    type=str,
    default=None,
    metavar="PATH",
    help="After the verdict, train the recommended model on all of TRAIN; save it "
    "to PATH (+ PATH.range).",
)
@click.option(
    "--model",
    "model_kind",
    type=ModelKind(),
    default=None,
    help="With --model-out: save this kind whatever the verdict; linear+K (with --explain) "
    "is the linear model with the top K product terms, saved with PATH.terms.",
)
@click.option(
    "--probability",
    is_flag=True,
    help="With --model kernel: train with -b 1, for svm-predict -b 1 and kcheck predict -b 1.",
)
@junit_option()
@check_options
def check(
    train: str,
    test: str | None,
    jobs: int | None,
    as_json: bool,
    output: str | None,
    model_out: str | None,
    model_kind: str | None,
    probability: bool,
    junit_out: str | None,
    **opts: Any,
) -> None:
    from kcheck.modelfiles import export as models
    from kcheck.pipeline import run

    ui = Ui(opts["quiet"])
    fail_on = opts["fail_on"]
    _refuse_directories(train, test)
    config = check_config(
        train,
        default_jobs(jobs),
        opts,
        test=test,
        model_out=model_out,
        model_kind=model_kind,
        model_probability=probability,
    )
    if model_kind and not model_out:
        raise click.UsageError("--model needs --model-out")
    if probability and model_kind != "kernel":
        raise click.UsageError(
            "--probability needs --model-out and --model kernel (a linear "
            "model has no probability outputs)"
        )
    # Fail now, not after a long check (and not after --model-out has replaced a model).
    output, to_stdout = json_destination(output, as_json)
    _check_outputs(model_out, [train, test], output, junit_out)
    staged = prepare_outputs(_output_paths(output, model_out, model_kind, junit_out))
    shown: list[int] = []  # how many warnings went out with an early verdict

    def decided(v: dict[str, Any]) -> None:
        # The verdict shows before a possibly long export, so Ctrl-C during it leaves it shown.
        if model_out is not None:
            early = [*v.get("warnings", []), *notes]
            show_verdict(ui, v, early, model_out)
            shown.append(len(early))

    # Every file (the model, -o, --junit) is staged, and committed together at the end.
    with staged:
        with recorded_warnings() as notes, _junit_on_error(staged, junit_out, train, test, opts):
            report = ui.run(lambda progress: run(config, progress))
            if config.model_out is not None:
                decided(report.json)
                from kcheck.cli.verify import announcing

                ui.run(
                    lambda progress: models.train_model(report, config, announcing(ui, progress))
                )
        verdict = report.json
        verdict["warnings"] = [*verdict.get("warnings", []), *notes]
        if shown:
            for w in verdict["warnings"][shown[0] :]:
                ui.warn(w)
        else:
            show_verdict(ui, verdict, verdict["warnings"], model_out)
        if verdict.get("model") and not ui.quiet:
            _show_model(ui, verdict["model"], str(verdict.get("metric") or "accuracy"))
        if output is not None:
            write_json(verdict, output)
        if junit_out is not None:
            _write_junit(junit_out, [{"name": train, "status": "ok", **verdict}], opts)
    if to_stdout:
        print_json(verdict)
    elif ui.quiet and output is None:  # -q at a terminal: the verdict, not nothing
        click.echo(f"{verdict['verdict']} ({verdict['margin']})")
    if fail_on is not None and verdict["verdict"] == fail_on:
        raise GateTripped(f"verdict is {fail_on} (--fail-on {fail_on})")
