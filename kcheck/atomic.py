"""Atomic file output: write a temporary file beside the target, then rename it over.

A reader of the target sees the old file or the complete new one, never a partial one, and a
failed or interrupted run leaves the old file as it was and no temporary file behind. Every
file kcheck writes goes through here, so the edge cases are handled once:

* a device or pipe (``/dev/null``, ``/dev/stdout``, a FIFO) is written in place, since renaming
  over it would replace the device node;
* a symlink's target is replaced, not the link;
* a new file gets the umask's permissions, a replaced one keeps its own;
* an OSError (disk full, permission, missing directory) becomes a one-line KcheckError.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from typing import IO, Any

from kcheck.errors import KcheckError


def _special(target: str) -> bool:
    try:
        return not stat.S_ISREG(os.stat(target).st_mode)
    except FileNotFoundError:
        return False


def _failed(target: str, what: str, e: OSError) -> KcheckError:
    return KcheckError(f"cannot write {what} {target}: {e.strerror or e}")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], what: str = "file") -> Iterator[str]:
    """Yield a temporary path to write (e.g. by a C library); on success it becomes ``path``."""
    target = os.path.realpath(os.fspath(path))
    directory = os.path.dirname(target)
    special = _special(target)
    try:
        fd, tmp = tempfile.mkstemp(
            prefix="." + os.path.basename(target) + ".", suffix=".tmp",
            dir=tempfile.gettempdir() if special else directory,
        )
        os.close(fd)
    except OSError as e:
        raise _failed(os.fspath(path), what, e) from None
    try:
        yield tmp
        if special:
            with open(tmp, "rb") as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.unlink(tmp)
            return
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, _mode_for(target))
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise _failed(os.fspath(path), what, e) from None
        raise


@contextlib.contextmanager
def atomic_open(
    path: str | os.PathLike[str], mode: str = "w", what: str = "file", **kwargs: Any
) -> Iterator[IO[Any]]:
    """Open a temporary file for writing (``"w"`` or ``"wb"``); on success it becomes ``path``.

    ``kwargs`` go to :func:`open` (e.g. ``encoding``, ``newline``).
    """
    if mode not in ("w", "wb"):
        raise ValueError("atomic_open writes text ('w') or bytes ('wb') only")
    with atomic_path(path, what) as tmp:
        try:
            with open(tmp, mode, **kwargs) as f:
                yield f
        except OSError as e:
            raise _failed(os.fspath(path), what, e) from None


def _mode_for(target: str) -> int:
    """The old file's permissions, or the umask's default for a new file."""
    try:
        return os.stat(target).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_text(path: str | os.PathLike[str], text: str, what: str = "file") -> None:
    with atomic_open(path, "w", what, encoding="utf-8") as f:
        f.write(text)
