"""Atomic file output: write a temporary file beside the target, then rename it over.

A reader of the target sees the old file or the complete new one, never a partial one, and a
failed or interrupted run leaves the old file as it was and no temporary file behind. Every
file kcheck writes goes through here, so the edge cases are handled once:

* a device or pipe (``/dev/null``, ``/dev/stdout``, a FIFO) is written in place, since renaming
  over it would replace the device node;
* a symlink's target is replaced, not the link;
* a new file gets the umask's permissions, a replaced one keeps its own;
* an OSError (disk full, permission, missing directory) becomes a one-line KcheckError.

Each temporary file lives alone in a private directory beside its target (``.NAME.XXXX.tmp/``),
so that an interrupted run can delete it for good: a C library still writing the file's path in
another thread cannot create it again once its directory is gone, as it could a plain file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
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


class Abandoned(BaseException):
    """Raised where a temporary file or directory is asked for after :func:`abandon`: the
    process is about to end, and nothing new may be left behind."""


#: Private directories of the temporary files (and scratch directories) in use now. An
#: interrupted run ends with ``os._exit`` while a worker thread may still be writing into one,
#: so :func:`abandon` removes them; no ``finally`` runs then.
_live: set[str] = set()
_live_lock = threading.Lock()
#: Held while finished temporaries are renamed into place, so that an interrupt waits for a
#: set of renames (a model and its range file) to complete instead of splitting it.
_commit_lock = threading.Lock()
#: The commit lock that :func:`abandon` took for good, if it has run: from then on no
#: temporary is made and no rename starts.
_abandoned_with: list[object] = []
#: Whether the main thread is renaming a set into place now, and the signals that arrived
#: meanwhile (see :func:`defer_signal`).
_main_committing = False
_deferred: list[int] = []


def _abandoned() -> bool:
    return any(lock is _commit_lock for lock in _abandoned_with)


def _track(path: str, live: bool) -> None:
    with _live_lock:
        if live:
            _live.add(path)
        else:
            _live.discard(path)


def _remove_tree(path: str) -> None:
    """Remove ``path`` and what is in it, even while another thread writes a file into it."""
    for _ in range(100):
        if not os.path.lexists(path):
            return
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def abandon() -> None:
    """Before ``os._exit``: wait for renames under way, then delete every temporary file.

    The commit lock is taken and never released: the process is about to end, and no
    worker thread may start renaming a file the interrupt has deleted half of, nor make a
    new temporary file that nobody would delete.
    """
    lock = _commit_lock
    lock.acquire(timeout=10)
    with _live_lock:
        _abandoned_with.append(lock)
        for path in list(_live):
            _remove_tree(path)
        _live.clear()


def defer_signal(signum: int) -> bool:
    """For a signal handler: whether the main thread is renaming a set of files into place
    now. If so the signal is held, and sent again as soon as the set is complete, so that an
    interrupt never leaves a new model beside an old range file (the handler returns)."""
    if _main_committing and threading.current_thread() is threading.main_thread():
        _deferred.append(signum)
        return True
    return False


@contextlib.contextmanager
def _renaming() -> Iterator[None]:
    """The commit lock, and in the main thread the signals held until the renames are done."""
    global _main_committing
    main = threading.current_thread() is threading.main_thread()
    try:
        with _commit_lock:
            if _abandoned():
                raise Abandoned()
            if main:
                _main_committing = True
            try:
                yield
            finally:
                if main:
                    _main_committing = False
    finally:
        # Also when a rename failed: the signal then wins over the error.
        if main and _deferred:
            held = list(_deferred)
            _deferred.clear()
            for signum in held:
                signal.raise_signal(signum)


def _private_directory(parent: str, prefix: str) -> str:
    """A new directory ``parent/PREFIX.XXXX.tmp``, tracked for :func:`abandon`."""
    with _live_lock:
        if _abandoned():
            raise Abandoned()
        directory = tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=parent)
        _live.add(directory)
    return directory


@contextlib.contextmanager
def scratch_directory(prefix: str) -> Iterator[str]:
    """A private temporary directory, removed afterwards, and by :func:`abandon` too."""
    tmp = _private_directory(tempfile.gettempdir(), prefix)
    try:
        yield tmp
    finally:
        _remove_tree(tmp)
        _track(tmp, False)


class _Temporary:
    """One target's temporary file, alone in its private directory."""

    def __init__(self, path: str | os.PathLike[str], what: str) -> None:
        self.target = os.path.realpath(os.fspath(path))
        self.special = _special(self.target)
        name = os.path.basename(self.target)
        parent = tempfile.gettempdir() if self.special else os.path.dirname(self.target)
        try:
            self.directory = _private_directory(parent, "." + name + ".")
            self.path = os.path.join(self.directory, name or "file")
            with open(self.path, "xb"):
                pass
        except OSError as e:
            if hasattr(self, "directory"):
                self.discard()
            raise _failed(os.fspath(path), what, e) from None

    def commit(self) -> None:
        if self.special:
            with open(self.path, "rb") as src, open(self.target, "wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            os.chmod(self.path, mode_for(self.target))
            os.replace(self.path, self.target)
        self.discard()

    def discard(self) -> None:
        _remove_tree(self.directory)
        _track(self.directory, False)


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
    (a model before its range file), under a lock an interrupt waits for; in the main
    thread, a signal that arrives during the renames takes effect once they are all done.
    """
    made: list[_Temporary] = []
    current = os.fspath(targets[0][0]) if targets else ""
    what = targets[0][1] if targets else "file"
    try:
        for path, what_ in targets:
            made.append(_Temporary(path, what_))
        yield [t.path for t in made]
        for (path, what_), t in zip(targets, made, strict=True):
            current, what = os.fspath(path), what_
            if not t.special:
                _sync(t.path)
        # A target that cannot be replaced (a directory) fails the set before any rename, so
        # the model is not replaced when its range file cannot be.
        for (path, what_), t in zip(targets, made, strict=True):
            current, what = os.fspath(path), what_
            if os.path.isdir(t.target):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), t.target)
        with _renaming():
            for (path, what_), t in zip(targets, made, strict=True):
                current, what = os.fspath(path), what_
                t.commit()
            for directory in {os.path.dirname(t.target) for t in made if not t.special}:
                _sync_directory(directory)
    except BaseException as e:
        for t in made:
            t.discard()
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
