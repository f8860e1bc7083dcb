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
import errno
import os
import shutil
import stat
import tempfile
import threading
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


#: Temporary files being written now. An interrupted run ends with ``os._exit`` while a worker
#: thread may still be writing one, so :func:`abandon` removes them; no ``finally`` runs then.
_live: set[str] = set()
_live_lock = threading.Lock()
#: Held while finished temporaries are renamed into place, so that an interrupt waits for a
#: set of renames (a model and its range file) to complete instead of splitting it.
_commit_lock = threading.Lock()


def _track(tmp: str, live: bool) -> None:
    with _live_lock:
        if live:
            _live.add(tmp)
        else:
            _live.discard(tmp)


def abandon() -> None:
    """Before ``os._exit``: wait for renames under way, then delete every temporary file.

    The commit lock is taken and never released: the process is about to end, and no
    worker thread may start renaming a file the interrupt has deleted half of.
    """
    _commit_lock.acquire(timeout=10)
    with _live_lock:
        for tmp in list(_live):
            if os.path.isdir(tmp) and not os.path.islink(tmp):
                shutil.rmtree(tmp, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        _live.clear()


@contextlib.contextmanager
def scratch_directory(prefix: str) -> Iterator[str]:
    """A private temporary directory, removed afterwards, and by :func:`abandon` too."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        _track(tmp, True)
        try:
            yield tmp
        finally:
            _track(tmp, False)


def _temporary(path: str | os.PathLike[str], what: str) -> tuple[str, str, bool]:
    """(target, temporary path, whether the target is a device or pipe)."""
    target = os.path.realpath(os.fspath(path))
    directory = os.path.dirname(target)
    special = _special(target)
    try:
        fd, tmp = tempfile.mkstemp(
            prefix="." + os.path.basename(target) + ".",
            suffix=".tmp",
            dir=tempfile.gettempdir() if special else directory,
        )
        os.close(fd)
    except OSError as e:
        raise _failed(os.fspath(path), what, e) from None
    _track(tmp, True)
    return target, tmp, special


def _commit(target: str, tmp: str, special: bool) -> None:
    if special:
        with open(tmp, "rb") as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.unlink(tmp)
        return
    os.chmod(tmp, mode_for(target))
    os.replace(tmp, target)


def _sync(tmp: str) -> None:
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())


def _sync_directory(directory: str) -> None:
    """Make a rename durable; not every file system can open a directory, which is fine."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_paths(
    targets: list[tuple[str | os.PathLike[str], str]],
) -> Iterator[list[str]]:
    """Yield temporary paths for ``(path, what)`` pairs; on success each becomes its path.

    All are written in full before any is renamed, and they are renamed in the order given
    (a model before its range file), under a lock an interrupt waits for.
    """
    made: list[tuple[str, str, bool]] = []
    current = os.fspath(targets[0][0]) if targets else ""
    what = targets[0][1] if targets else "file"
    try:
        for path, what_ in targets:
            made.append(_temporary(path, what_))
        yield [tmp for _, tmp, _ in made]
        for (path, what_), (_, tmp, special) in zip(targets, made, strict=True):
            current, what = os.fspath(path), what_
            if not special:
                _sync(tmp)
        # A target that cannot be replaced (a directory) fails the set before any rename, so
        # the model is not replaced when its range file cannot be.
        for (path, what_), (target, _, _) in zip(targets, made, strict=True):
            current, what = os.fspath(path), what_
            if os.path.isdir(target):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), target)
        with _commit_lock:
            for (path, what_), (target, tmp, special) in zip(targets, made, strict=True):
                current, what = os.fspath(path), what_
                _commit(target, tmp, special)
                _track(tmp, False)
            for directory in {os.path.dirname(t) for t, _, special in made if not special}:
                _sync_directory(directory)
    except BaseException as e:
        for _, tmp, _ in made:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            _track(tmp, False)
        if isinstance(e, OSError):
            raise _failed(current, what, e) from None
        raise


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], what: str = "file") -> Iterator[str]:
    """Yield a temporary path to write (e.g. by a C library); on success it becomes ``path``."""
    with atomic_paths([(path, what)]) as (tmp,):
        yield tmp


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


def mode_for(target: str) -> int:
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
