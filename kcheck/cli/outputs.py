"""Where a command's data goes: the JSON destination, its output paths checked before the work
and committed as one set after it, and refusing to write over an input or another output."""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from kcheck.errors import KcheckError, printable
from kcheck.io.atomic import OutputSet, atomic_open, no_reader

#: Standard streams that were closed when kcheck started (see app.guard_standard_streams).
closed_streams: set[str] = set()


def json_destination(output: str | None, as_json: bool) -> tuple[str | None, bool]:
    """(file to write, whether to print on stdout) for ``-o`` / ``--json``. ``-o -`` is stdout;
    without ``-o`` JSON goes to stdout with ``--json`` or when stdout is no terminal (``-o FILE -q``
    is silent). A closed stdout is refused now, not after the work."""
    if output == "-":
        output, as_json = None, True
    to_stdout = as_json or (output is None and not sys.stdout.isatty())
    if to_stdout:
        require_stdout()
    return output, to_stdout


def require_stdout() -> None:
    if "stdout" in closed_streams:
        raise KcheckError("stdout is closed, so there is nowhere to write the JSON; use -o FILE")


def write_json(data: dict[str, Any], out_path: str) -> None:
    """The JSON to ``out_path``, indented, atomically (staged in the command's set)."""
    with atomic_open(out_path) as f:
        f.write(json.dumps(data, indent=2) + "\n")


def print_json(data: dict[str, Any]) -> None:
    """The JSON on stdout, one line (for jq and JSON lines)."""
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def prepare_outputs(declared: Iterable[tuple[str | None, str]]) -> OutputSet:
    """Check a command's output paths ``(path, option)`` (None: not asked; ``-``: stdout) before its
    work; return the set committing them together after it.

    Refused at once with one line (exit 2): empty names, directories, files under /proc or /sys,
    missing or read-only directories. A device or FIFO is opened now without waiting (an unread FIFO
    is refused) and written in place at the commit. Use the set as a context manager around the
    work: writes inside are staged and committed as one set on a normal end (before a gate's exit
    code), none where it raises."""
    group = OutputSet()
    try:
        for path, option in declared:
            if path is not None and path != "-":
                _check_output(path, option, group)
    except BaseException:
        group.close()
        raise
    return group


#: File systems whose files are the kernel's interfaces, never a place for output.
_KERNEL_TREES = ("/proc", "/sys")


def _check_output(path: str, option: str, group: OutputSet) -> None:
    """Refuse ``path`` for ``option`` where unwritable; reserve a device or pipe in ``group``."""
    if path == "":
        raise KcheckError(f"{option}: the file name is empty")
    shown = f"{option} {printable(path)}"
    try:
        mode: int | None = os.stat(path).st_mode
    except OSError:
        mode = None  # a new file (or a dangling link): its directory decides
    if mode is not None and stat.S_ISDIR(mode):
        raise KcheckError(f"{shown}: cannot write there: {os.strerror(errno.EISDIR)}")
    if mode is not None and not stat.S_ISREG(mode):
        try:
            group.reserve(path)
        except OSError as e:
            if no_reader(path, e):
                raise KcheckError(
                    f"{shown}: a FIFO that no process reads; start its reader first"
                ) from None
            raise KcheckError(f"{shown}: cannot write there: {e.strerror or e}") from None
        return
    real = os.path.realpath(path)
    if any(real == tree or real.startswith(tree + "/") for tree in _KERNEL_TREES):
        raise KcheckError(f"{shown}: cannot write a file under /proc or /sys")
    directory = os.path.dirname(real)
    if not os.path.isdir(directory):
        raise KcheckError(f"{shown}: cannot write there: No such file or directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        readonly = hasattr(os, "ST_RDONLY") and os.statvfs(directory).f_flag & os.ST_RDONLY
        why = "Read-only file system" if readonly else "Permission denied"
        raise KcheckError(f"{shown}: cannot write there: {why}")


def _same_file(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are one existing regular file (by inode); devices never are."""
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
