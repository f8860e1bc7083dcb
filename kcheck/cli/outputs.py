"""Where a command's data goes: the JSON destination, atomic writes, and refusing to write over
an input or over another output."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Sequence
from typing import Any

from kcheck.atomic import atomic_open
from kcheck.errors import KcheckError

#: Standard streams that were closed when kcheck started (see app.guard_standard_streams).
closed_streams: set[str] = set()


def json_destination(output: str | None, as_json: bool) -> tuple[str | None, bool]:
    """(file to write, whether to print on stdout) for ``-o`` / ``--json``.

    ``-o -`` is stdout. Without ``-o``, the JSON goes to stdout when asked (``--json``) or when
    stdout is not a terminal, ``-q`` or not: ``-o FILE -q`` is the silent form. A closed stdout
    is refused now rather than after the work.
    """
    if output == "-":
        output, as_json = None, True
    to_stdout = as_json or (output is None and not sys.stdout.isatty())
    if to_stdout:
        require_stdout()
    if output is not None:
        check_writable(output, "-o")
    return output, to_stdout


def require_stdout() -> None:
    if "stdout" in closed_streams:
        raise KcheckError("stdout is closed, so there is nowhere to write the JSON; use -o FILE")


def emit_json(data: dict[str, Any], out_path: str | None, to_stdout: bool) -> None:
    """JSON to ``out_path`` (atomically, indented) and/or stdout (one line, for jq and JSONL)."""
    if out_path is not None:
        with atomic_open(out_path) as f:
            f.write(json.dumps(data, indent=2) + "\n")
    if to_stdout:
        sys.stdout.write(json.dumps(data) + "\n")
        sys.stdout.flush()


def check_writable(path: str, option: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise KcheckError(f"{option} {path}: cannot write there: No such file or directory")
    if not os.access(directory, os.W_OK):
        raise KcheckError(f"{option} {path}: cannot write there: Permission denied")


def _same_file(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` name one existing regular file (by inode, so links and
    other spellings count). Devices and pipes (``/dev/stdout``, ``-``) are never refused."""
    if "-" in (a, b):
        return False
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return stat.S_ISREG(sa.st_mode) and (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def refuse_input_as_output(
    output: str, option: str, inputs: Sequence[str | None], outputs: Sequence[str | None] = ()
) -> None:
    """Refuse to write ``output`` over one of the command's inputs, or over another output."""
    for path in inputs:
        if path is not None and _same_file(output, path):
            raise KcheckError(
                f"{option} {output} is the input file {path}; it would be "
                "overwritten, so choose another output path"
            )
    for path in outputs:
        if path is not None and (
            _same_file(output, path) or (os.path.abspath(output) == os.path.abspath(path))
        ):
            raise KcheckError(
                f"{option} {output} is also the output {path}; choose different paths"
            )
