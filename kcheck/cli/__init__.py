"""Command line: thin click commands that build a config, call the core and present the result. One
module per command; :mod:`kcheck.cli.app` holds the group and :func:`main` (exit codes). Only this
package imports click or rich."""

from __future__ import annotations

from kcheck.cli import batch, check, expand, predict, report, scale, verify
from kcheck.cli.app import cli, main

for _command in (
    check.check,
    batch.batch,
    verify.verify,
    predict.predict,
    scale.scale,
    expand.expand,
    report.report,
):
    cli.add_command(_command)

__all__ = ["cli", "main"]
