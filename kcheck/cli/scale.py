"""``kcheck scale``: svm-scale compatible scaling, byte for byte."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING

import click

from kcheck.cli.options import memory_limit_option, output_option, quiet_option
from kcheck.cli.outputs import prepare_outputs, refuse_input_as_output
from kcheck.cli.ui import Ui
from kcheck.errors import KcheckError
from kcheck.io.atomic import OutputSet, atomic_paths

if TYPE_CHECKING:
    from kcheck.scaling.stream import ScaleConfig, Scaled


@click.command(short_help="Scale FILE like svm-scale (min-max to [-1, 1] by default).")
@click.argument("file", type=str)
@click.option(
    "-l", "lower", type=float, default=None, metavar="LOWER", help="Lower bound (default -1)."
)
@click.option(
    "-u", "upper", type=float, default=None, metavar="UPPER", help="Upper bound (default 1)."
)
@click.option(
    "-y",
    "y_bounds",
    type=float,
    nargs=2,
    default=None,
    metavar="Y_LOWER Y_UPPER",
    help="Also scale the labels to [Y_LOWER, Y_UPPER].",
)
@click.option("--maxabs", is_flag=True, help="Divide each feature by its max |x| instead.")
@click.option(
    "-s",
    "save_range",
    type=str,
    default=None,
    metavar="RANGE",
    help="Save the scaling to the range file RANGE.",
)
@click.option(
    "-r",
    "restore_range",
    type=str,
    default=None,
    metavar="RANGE",
    help="Apply the scaling in the range file RANGE (svm-scale's or kcheck's; its y "
    "section scales the labels).",
)
@click.option(
    "--full-precision",
    is_flag=True,
    help="Print values with 17 significant digits (exact) instead of svm-scale's 6.",
)
@click.option("--zero-based", is_flag=True, help="Feature indices in FILE start at 0.")
@output_option("Write to FILE (atomically) instead of stdout.")
@memory_limit_option(
    "FILE is scaled in chunks of rows within it, and a run whose per-feature arrays "
    "cannot fit is refused before it starts."
)
@quiet_option()
def scale(
    file: str,
    lower: float | None,
    upper: float | None,
    y_bounds: tuple[float, float] | None,
    maxabs: bool,
    save_range: str | None,
    restore_range: str | None,
    full_precision: bool,
    zero_based: bool,
    output: str | None,
    memory_limit: int | None,
    quiet: bool,
) -> None:
    """Scale FILE like svm-scale (min-max to [-1, 1] by default); data to stdout or -o.

    The output is svm-scale's to the byte (values with %g, 6 significant digits), and so are
    the range files of -s; --full-precision keeps every digit instead. -r applies a range
    file with svm-scale's arithmetic, whichever tool wrote it. As svm-scale, it reads FILE
    twice (once to fit or check, once to write), so memory is the features' arrays and a
    chunk of rows, not the file; standard input or a pipe is kept in memory instead.
    """
    from kcheck.scaling import stream as core

    Ui(quiet)  # with -q, warnings (such as dropped features) are not printed either
    config = core.ScaleConfig(
        file=file,
        lower=lower,
        upper=upper,
        y_bounds=y_bounds,
        maxabs=maxabs,
        save_range=save_range,
        restore_range=restore_range,
        full_precision=full_precision,
        zero_based=zero_based,
        memory_limit=memory_limit,
    )
    _refuse_together(config)
    if output is not None:
        refuse_input_as_output(output, "-o", [file, restore_range], [save_range])
    if save_range is not None:
        refuse_input_as_output(save_range, "-s", [file])
    with prepare_outputs([(output, "-o"), (save_range, "-s")]) as staged:
        _write(core.scaled(config, warn=None if quiet else _warn), output, save_range, staged)


def _refuse_together(c: ScaleConfig) -> None:
    """Options that contradict each other: a usage error, before any file is read."""
    if c.save_range and c.restore_range:
        raise click.UsageError("-s and -r cannot be used together")
    if c.restore_range and (c.maxabs or c.lower is not None or c.upper is not None or c.y_bounds):
        raise click.UsageError(
            "-r takes the bounds from the range file; drop -l, -u, -y and --maxabs"
        )
    if c.maxabs and (c.lower is not None or c.upper is not None):
        raise click.UsageError("--maxabs scales to [-1, 1]; it takes no -l or -u")


def _warn(message: str) -> None:
    """svm-scale's warning in its own words (no ``kcheck: warning:``), for scripts that grep it."""
    sys.stderr.write(message + "\n")


def _write(out: Scaled, output: str | None, save_range: str | None, staged: OutputSet) -> None:
    """The scaled text to stdout or ``-o``'s file, and ``-s``'s range file, committed together (both
    or neither); on stdout the range file comes first, as svm-scale writes it."""
    from kcheck.scaling.fitting import write_range_file

    if output is None or output == "-":
        if save_range is not None:
            write_range_file(save_range, out.scaler)
            staged.commit()
        _text_to(sys.stdout, out.blocks)
        sys.stdout.flush()
        return
    targets: list[tuple[str | os.PathLike[str], str]] = [(output, "the file")]
    if save_range is not None:
        targets.append((save_range, "range file"))
    with atomic_paths(targets) as (data_tmp, *range_tmp):
        with open(data_tmp, "w", encoding="ascii", newline="\n") as f:
            _text_to(f, out.blocks)
        if range_tmp and save_range is not None:
            try:
                write_range_file(range_tmp[0], out.scaler)
            except KcheckError as e:
                # It names the temporary file it wrote; the user gave save_range.
                raise KcheckError(str(e).replace(range_tmp[0], save_range)) from None


def _text_to(f: IO[str], blocks: Iterable[str]) -> None:
    for block in blocks:
        f.write(block)
