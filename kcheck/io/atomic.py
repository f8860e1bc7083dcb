"""Atomic file output: write a temporary file beside the target, then rename it over, so a reader
sees the old file or the complete new one, and a failed or interrupted run leaves the old file and
no temporary. Every file kcheck writes goes through here:

* a device or pipe (``/dev/null``, ``/dev/stdout``, a FIFO, ``-o >(jq ...)``) is written in
  place (renaming would replace the node), opened before the work without waiting for a reader,
  and written with signals live so a reader cannot hold an interrupt back;
* a symlink's target is replaced, not the link;
* a new file gets the umask's permissions, a replaced one keeps its own;
* an OSError becomes a one-line KcheckError.

Each temporary lives alone in a private directory beside its target (``.NAME.XXXX.tmp/``; TMPDIR for
a device), so an interrupted run can delete it for good: a C thread still writing the path cannot
recreate it once the directory is gone. While an :class:`OutputSet` is active, writes are staged and
the command's outputs commit together at its end, or none do."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import IO, Any, Protocol

from kcheck.errors import KcheckError


def _special(path: str) -> bool:
    """Whether ``path`` names a device, pipe or socket, through links (``/dev/fd/N`` too)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _is_fifo(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def no_reader(path: str, e: OSError) -> bool:
    """Whether ``e`` is what opening FIFO ``path`` without waiting gives when no one reads it."""
    return e.errno == errno.ENXIO and _is_fifo(path)


def _failed(target: str, what: str, e: OSError) -> KcheckError:
    why = "a FIFO that no process reads" if no_reader(target, e) else e.strerror or e
    return KcheckError(f"cannot write {what} {target}: {why}")


_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_NOCTTY = getattr(os, "O_NOCTTY", 0)


def open_special(path: str, *, wait: bool = False) -> int:
    """A descriptor writing device or pipe ``path`` in place, opened without waiting for a reader
    (ENXIO for an unread FIFO; ``wait``: wait for one). Writes block as usual."""
    try:
        fd = os.open(path, os.O_WRONLY | _NONBLOCK | _NOCTTY)
    except OSError as e:
        if not (wait and e.errno == errno.ENXIO):
            raise
        fd = os.open(path, os.O_WRONLY | _NOCTTY)
    try:
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


class Abandoned(BaseException):
    """Raised where a temporary is asked for after :func:`abandon`: nothing new may be left."""


#: Private directories of temporaries in use. :func:`abandon` removes them before ``os._exit`` (no
#: ``finally`` runs then) while a worker thread may still write into one.
_live: set[str] = set()
_live_lock = threading.Lock()
#: Held while temporaries are renamed: an interrupt waits for a whole set (model, range).
_commit_lock = threading.Lock()
#: The commit lock :func:`abandon` took for good: from then on no temporary, no rename.
_abandoned_with: list[object] = []
#: Whether the main thread is in a step a signal must not split (renaming a set, making and tracking
#: a temporary directory), and the signals held meanwhile (:func:`defer_signal`).
_main_holding = False
_deferred: list[int] = []
#: The set that writes are staged into now (see :class:`OutputSet`), if any.
_active: OutputSet | None = None


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
    """Before ``os._exit``: wait for renames under way, then delete every temporary file. The commit
    lock is never released, so no thread renames a half-deleted file or makes a new temporary."""
    lock = _commit_lock
    lock.acquire(timeout=10)
    with _live_lock:
        _abandoned_with.append(lock)
        for path in list(_live):
            _remove_tree(path)
        _live.clear()


def defer_signal(signum: int) -> bool:
    """For a signal handler: whether the main thread is in a step a signal must not split
    (:func:`_holding`); if so the signal is held and re-sent when the step ends, so no new model
    sits beside an old range file and no directory escapes :func:`abandon`."""
    if _main_holding and threading.current_thread() is threading.main_thread():
        _deferred.append(signum)
        return True
    return False


def _release_held() -> None:
    """Send again the signals :func:`defer_signal` held."""
    held = list(_deferred)
    _deferred.clear()
    for signum in held:
        signal.raise_signal(signum)


@contextlib.contextmanager
def _holding() -> Iterator[None]:
    """In the main thread, signals held for the step inside and re-sent after, even where it failed
    (the signal wins); elsewhere, or nested, nothing more."""
    global _main_holding
    if threading.current_thread() is not threading.main_thread() or _main_holding:
        yield
        return
    _main_holding = True
    try:
        yield
    finally:
        _main_holding = False
        if _deferred:
            _release_held()


@contextlib.contextmanager
def _renaming() -> Iterator[None]:
    """The commit lock, and in the main thread signals held until the renames are done."""
    with _holding(), _commit_lock:
        if _abandoned():
            raise Abandoned()
        yield


def _private_directory(parent: str, prefix: str) -> str:
    """A new directory ``parent/PREFIX.XXXX.tmp``, tracked for :func:`abandon`; made and tracked
    with signals held (a Ctrl-C between them left it behind)."""
    with _holding(), _live_lock:
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

    def __init__(self, path: str | os.PathLike[str], what: str, group: OutputSet | None) -> None:
        self.given = os.fspath(path)
        self.what = what
        self.special = _special(self.given)
        # Through the name given: /dev/stdout or /dev/fd/N may be a pipe with no path to resolve.
        self.target = self.given if self.special else os.path.realpath(self.given)
        self.directory: str | None = None
        self.fd: int | None = None
        self._owns_fd = False
        name = os.path.basename(self.target)
        parent = tempfile.gettempdir() if self.special else os.path.dirname(self.target)
        try:
            if self.special:
                # Opened now, never under the commit lock: the set's descriptor, else our own (an
                # unread FIFO is an error in a set; alone we wait for a reader, as a shell does).
                self.fd = group.reserved(self.given) if group is not None else None
                if self.fd is None:
                    self.fd = open_special(self.given, wait=group is None)
                    self._owns_fd = True
            self.directory = _private_directory(parent, "." + name + ".")
            self.path = os.path.join(self.directory, name or "file")
            with open(self.path, "xb"):
                pass
        except OSError as e:
            self.discard()
            raise _failed(self.given, what, e) from None
        except BaseException:
            self.discard()
            raise

    def sync(self) -> None:
        if not self.special:
            try:
                _sync(self.path)
            except OSError as e:
                raise _failed(self.given, self.what, e) from None

    def check(self) -> None:
        """A target that cannot be replaced (a directory) fails its set before any rename."""
        if not self.special and os.path.isdir(self.target):
            e = IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), self.target)
            raise _failed(self.given, self.what, e)

    def write(self) -> None:
        """A device or pipe: the temporary's bytes written through its descriptor."""
        if not self.special:
            return
        assert self.fd is not None
        try:
            with open(self.path, "rb") as src:
                while chunk := src.read(1 << 16):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(self.fd, view) :]
        except OSError as e:
            raise _failed(self.given, self.what, e) from None

    def rename(self) -> None:
        """A file: the temporary renamed over the target."""
        if self.special:
            return
        try:
            os.chmod(self.path, mode_for(self.target))
            os.replace(self.path, self.target)
        except OSError as e:
            raise _failed(self.given, self.what, e) from None

    def discard(self) -> None:
        if self._owns_fd and self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self.fd = None
        if self.directory is not None:
            _remove_tree(self.directory)
            _track(self.directory, False)


class _Staged(Protocol):
    """Outputs that are ready: committed together with the rest of their set, or discarded."""

    def check(self) -> None:
        """Before anything is written: raise if this cannot be committed."""

    def write(self) -> None:
        """Write devices and pipes in place (with signals live)."""

    def rename(self) -> None:
        """Rename files into place (under the commit lock)."""

    def directories(self) -> set[str]:
        """Directories whose renames are to be made durable."""

    def discard(self) -> None:
        """Remove what is left; the end of every staged item, committed or not."""


class _Files:
    """The temporaries of one :func:`atomic_paths`, renamed in the order given."""

    def __init__(self, made: list[_Temporary]) -> None:
        self.made = made

    def check(self) -> None:
        for t in self.made:
            t.check()

    def write(self) -> None:
        for t in self.made:
            t.write()

    def rename(self) -> None:
        for t in self.made:
            t.rename()

    def directories(self) -> set[str]:
        return {os.path.dirname(t.target) for t in self.made if not t.special}

    def discard(self) -> None:
        for t in self.made:
            t.discard()


class _Deferred:
    """Another writer's commit (a batch's ``FILE.partial`` renamed over ``FILE``)."""

    def __init__(self, rename: Callable[[], None], end: Callable[[], None]) -> None:
        self.rename = rename
        self._end = end

    def check(self) -> None:
        pass

    def write(self) -> None:
        pass

    def directories(self) -> set[str]:
        return set()

    def discard(self) -> None:
        self._end()


def _commit(items: list[_Staged]) -> None:
    """Commit ``items`` as one set: nothing if one cannot be (a directory at a file's target); then
    devices and pipes, with signals live (a failure there leaves every file as it was); then every
    file renamed in order under the commit lock."""
    for item in items:
        item.check()
    for item in items:
        item.write()
    with _renaming():
        for item in items:
            item.rename()
        for directory in {d for item in items for d in item.directories()}:
            _sync_directory(directory)


class OutputSet:
    """The outputs of one command, committed together once it has reached its end.

    Made before the work: :meth:`reserve` opens device or FIFO outputs then. While active
    (``with``), :func:`atomic_paths` stages its writes here from any thread and :func:`defer` adds
    another writer's commit. A normal end commits everything as one set (:func:`_commit`); an
    exception commits nothing and removes every temporary. A write still under way when an interrupt
    ended the block is dropped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reserved: dict[tuple[int, int], int] = {}
        self._staged: list[_Staged] = []
        self._pid = os.getpid()
        self._ended = False

    def reserve(self, path: str) -> None:
        """Open device or pipe ``path`` now for the commit (ENXIO for an unread FIFO)."""
        fd = open_special(path)
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        if key in self._reserved:
            os.close(fd)
        else:
            self._reserved[key] = fd

    def reserved(self, path: str) -> int | None:
        """The descriptor reserved for the device or pipe ``path``, if any."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        return self._reserved.get((st.st_dev, st.st_ino))

    def add(self, item: _Staged) -> None:
        """Stage ``item``; once the set has ended (an interrupt), drop it instead."""
        with self._lock:
            if not self._ended:
                self._staged.append(item)
                return
        item.discard()
        raise Abandoned()

    def commit(self) -> None:
        """Commit what is staged so far, as one set; the set stays active for more."""
        with self._lock:
            staged, self._staged = self._staged, []
        try:
            _commit(staged)
        finally:
            for item in staged:
                item.discard()

    def discard(self) -> None:
        """Drop what is staged so far: no target changes."""
        with self._lock:
            staged, self._staged = self._staged, []
        for item in staged:
            item.discard()

    def close(self) -> None:
        """Drop what is staged and close the reserved descriptors: the set is over."""
        with self._lock:
            self._ended = True
        self.discard()
        reserved, self._reserved = self._reserved, {}
        for fd in reserved.values():
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> OutputSet:
        global _active
        with _live_lock:
            if _active is not None and _active._pid == self._pid and not _active._ended:
                raise RuntimeError("an output set is active already")
            _active = self
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        global _active
        try:
            if exc_type is None:
                self.commit()
        finally:
            # Ended: a worker thread's write begun in this set is dropped, not committed alone.
            self.close()
            with _live_lock:
                if _active is self:
                    _active = None


def _current() -> OutputSet | None:
    """The active set of this process (a forked worker has none)."""
    group = _active
    return group if group is not None and group._pid == os.getpid() else None


def _within_temporaries(targets: list[tuple[str | os.PathLike[str], str]]) -> bool:
    """Whether a target lies in the private directory of a temporary file now in use."""
    parents = {os.path.dirname(os.path.realpath(os.fspath(path))) for path, _ in targets}
    with _live_lock:
        return not parents.isdisjoint(_live)


def defer(rename: Callable[[], None], end: Callable[[], None]) -> bool:
    """Within an active :class:`OutputSet`: ``rename`` runs among the set's renames, ``end`` after
    the commit or when it is dropped; True. False without one: the caller commits now."""
    group = _current()
    if group is None:
        return False
    group.add(_Deferred(rename, end))
    return True


def special_target(path: str) -> int:
    """A descriptor of the caller's own for device or pipe ``path``: a copy of the active set's,
    else one opened now without waiting (ENXIO for an unread FIFO)."""
    group = _current()
    fd = group.reserved(path) if group is not None else None
    return os.dup(fd) if fd is not None else open_special(path)


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

    All are written before any is renamed, then renamed in order (a model before its range file)
    under a lock an interrupt waits for. Within an active :class:`OutputSet` they are staged
    instead, except where a target is itself one of this module's temporaries (a range file beside a
    model's temporary): that is written now, for the outer temporary's commit."""
    group = None if _within_temporaries(targets) else _current()
    made: list[_Temporary] = []
    try:
        for path, what in targets:
            made.append(_Temporary(path, what, group))
        try:
            yield [t.path for t in made]
        except OSError as e:
            path, what = targets[0]
            raise _failed(os.fspath(path), what, e) from None
        files = _Files(made)
        for t in made:
            t.sync()
        files.check()
    except BaseException:
        for t in made:
            t.discard()
        raise
    if group is not None:
        group.add(files)
        return
    try:
        _commit([files])
    finally:
        files.discard()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], what: str = "file") -> Iterator[str]:
    """Yield a temporary path to write (e.g. by a C library); on success it becomes ``path``."""
    with atomic_paths([(path, what)]) as (tmp,):
        yield tmp


@contextlib.contextmanager
def atomic_open(
    path: str | os.PathLike[str], mode: str = "w", what: str = "file", **kwargs: Any
) -> Iterator[IO[Any]]:
    """Open a temporary file (``"w"``/``"wb"``, ``kwargs`` to :func:`open`); it becomes ``path``."""
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
