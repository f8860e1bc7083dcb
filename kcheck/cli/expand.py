"""``kcheck expand``: scaled LIBSVM data with product features, for any other tool."""

from __future__ import annotations

import click

from kcheck.cli.options import memory_limit_option, output_option, quiet_option
from kcheck.cli.outputs import prepare_outputs, refuse_input_as_output
from kcheck.cli.ui import Ui
from kcheck.defaults import DEFAULT_SCALING, SCALINGS

EXPAND_HELP = """Scale FILE and append product features x_i*x_j after the training width.

The products are of the scaled features (x_i^2 for a square), as `kcheck check
--explain` names them. Scaling comes first: -r RANGE (a check's --model-out writes
MODEL.range) or --fit-scaling TRAIN. The output is LIBSVM data with 1-based indices, for
liblinear-train, liblinear-predict or any other tool.

\b
Examples:
  kcheck expand train.svm --terms 3:7,3:3 --fit-scaling train.svm -o train.x
  kcheck expand test.svm --from-check verdict.json --top 3 -r m.range -o test.x
  kcheck expand test.svm --spec m.terms -r m.range | liblinear-predict /dev/stdin m out
"""


@click.command(help=EXPAND_HELP, short_help="Scale FILE and append product features.")
@click.argument("file", type=str)
@click.option("--terms", type=str, default=None, metavar="I:J,...", help="Products to append.")
@click.option(
    "--from-check",
    type=str,
    default=None,
    metavar="JSON",
    help="Take the terms from a check's JSON (kcheck check --explain).",
)
@click.option(
    "--top", type=click.IntRange(min=1), default=None, metavar="K", help="With --from-check."
)
@click.option(
    "--spec",
    type=str,
    default=None,
    metavar="TERMS",
    help="Take the terms from a term spec (MODEL.terms beside a linear+K model).",
)
@click.option("-r", "range_path", type=str, default=None, metavar="RANGE", help="Range file.")
@click.option(
    "--fit-scaling",
    type=str,
    default=None,
    metavar="TRAIN",
    help="Fit the scaling on TRAIN, as kcheck check does.",
)
@click.option(
    "--scaling",
    type=click.Choice(SCALINGS),
    default=DEFAULT_SCALING,
    show_default=True,
    help="With --fit-scaling.",
)
@click.option("--zero-based", is_flag=True, help="Feature indices (and --terms) start at 0.")
@output_option("Write to FILE (atomically).", default="-")
@memory_limit_option(
    "FILE is expanded in chunks of rows within it, and a run whose per-feature arrays "
    "cannot fit is refused before it starts."
)
@quiet_option()
def expand(
    file: str,
    terms: str | None,
    from_check: str | None,
    top: int | None,
    spec: str | None,
    range_path: str | None,
    fit_scaling: str | None,
    scaling: str,
    zero_based: bool,
    output: str,
    memory_limit: int | None,
    quiet: bool,
) -> None:
    from kcheck.memory import default_memory_limit
    from kcheck.terms import expand as core

    ui = Ui(quiet)
    sources = [x for x in (terms, from_check, spec) if x is not None]
    if len(sources) != 1:
        raise click.UsageError("give one of --terms, --from-check (with --top) or --spec")
    if (top is None) != (from_check is None):
        raise click.UsageError("--top K goes with --from-check JSON")
    if fit_scaling is not None and range_path is not None:
        raise click.UsageError("-r and --fit-scaling cannot be used together")
    if output != "-":
        refuse_input_as_output(output, "-o", [file, range_path, fit_scaling, from_check, spec])
    limit = memory_limit or default_memory_limit()  # one limit for the three readers below
    with prepare_outputs([(output, "-o")]):
        scaler = core.scaler_for(
            range_path,
            fit_scaling,
            scaling=scaling,
            zero_based=zero_based,
            memory_limit=limit,
        )
        width = int(scaler.n_features)
        if spec is not None:
            term_spec = core.read_spec(spec, width=width)
        elif from_check is not None:
            assert top is not None
            pairs = core.terms_from_check(
                from_check, top, width, zero_based=zero_based, memory_limit=limit
            )
            term_spec = core.TermSpec(width, pairs)
        else:
            assert terms is not None
            term_spec = core.TermSpec(width, core.parse_terms(terms, width, zero_based=zero_based))
        rows = core.expand_file(
            file, output, term_spec, scaler, zero_based=zero_based, memory_limit=limit
        )
    if output != "-":
        ui.info(
            f"kcheck: {rows:,} rows of {file} with {len(term_spec.terms)} products at "
            f"{width + 1}..{width + len(term_spec.terms)} written to {output}"
        )
