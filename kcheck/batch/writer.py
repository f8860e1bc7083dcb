"""The batch's output: whole JSON lines written to ``FILE.partial`` (synced line by line, so a crash
loses nothing done) under an exclusive lock on ``FILE.lock``, renamed over ``FILE`` at the end: old
results stay whole until the new are complete, and two runs cannot interleave."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import IO, Any

from kcheck.batch.discovery import STDIN
from kcheck.errors import DataFormatError, KcheckError
from kcheck.io.atomic import defer, mode_for, no_reader, special_target
from kcheck.io.ownformat import RESULTS_BYTES, RESULTS_LINE_BYTES, byte_cap, iter_lines, loads


def read_results(path: str, memory_limit: int | None = None) -> dict[str, dict[str, Any]]:
    """Each name's latest line in a JSON-lines file where its status is ok. Missing files have none;
    unparsable lines (torn) and error lines leave their data sets to run again."""
    latest = _latest_lines([path], memory_limit)
    return {name: line for name, line in latest.items() if line.get("status") == "ok"}


def _latest_lines(
    paths: Sequence[str], memory_limit: int | None = None
) -> dict[str, dict[str, Any]]:
    """Each name's last line over the files in order, unreadable lines ignored; streamed within
    byte_cap of RESULTS_BYTES, lines of RESULTS_LINE_BYTES (longer skipped unread)."""
    latest: dict[str, dict[str, Any]] = {}
    line_cap = byte_cap(RESULTS_LINE_BYTES, memory_limit)
    total_cap = byte_cap(RESULTS_BYTES, memory_limit)
    what = "a batch's results (--resume)"
    for path in paths:
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            continue
        except OSError as e:
            raise DataFormatError(path, None, f"cannot read: {e.strerror or e}") from None
        with f:
            for lineno, text in iter_lines(
                f, path, line_cap=line_cap, total_cap=total_cap, what=what
            ):
                if text is None or not text.lstrip().startswith(b"{"):
                    continue
                try:
                    line = loads(text, path, lineno, "a JSON line")
                except DataFormatError:
                    continue
                if isinstance(line, dict) and isinstance(line.get("name"), str):
                    latest[line["name"]] = line
    return latest


class LineWriter:
    """Writes whole lines, each in one go with SIGINT/SIGTERM held, then synced. To stdout
    (``"-"``), a device or pipe (in place), or a regular ``FILE`` via an exclusive ``FILE.lock``
    (another writer is refused at once) and ``FILE.partial``, which :meth:`commit` renames over
    ``FILE``; an interrupted run leaves ``FILE.partial`` for ``--resume``. A failed write is cut
    back off: a line is whole or absent."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock_fd: int | None = None
        self._lock_path: str | None = None
        self._f: Any = None  # stdout, or a device written in place
        self._fd: int | None = None  # FILE.partial, written unbuffered so a failure can be cut
        self._partial: str | None = None
        self._size = 0
        self._started = False
        self._committed = False
        self._deferred = False  # the rename waits for the command's set of outputs
        if path == STDIN:
            stream = sys.stdout
            stream.flush()
            self._f = getattr(stream, "buffer", None) or _TextAdapter(stream)
            return
        self._target = os.path.realpath(path)
        # Through the name given (/dev/fd/N may be a pipe), without waiting (the set may hold it).
        if _special(path):
            try:
                self._f = open(special_target(path), "wb")  # noqa: SIM115 - closed by close()
            except OSError as e:
                why = "a FIFO that no process reads" if no_reader(path, e) else e.strerror or e
                raise KcheckError(f"{path}: cannot write: {why}") from None
            return
        self._lock_path = self._target + ".lock"
        self._lock_fd = _lock(path, self._lock_path)
        self._partial = self._target + ".partial"

    @property
    def partial(self) -> str | None:
        """``FILE.partial`` while lines go there; None for stdout or a device."""
        return self._partial

    def prior(self, memory_limit: int | None = None) -> dict[str, dict[str, Any]]:
        """Each name's latest line in ``FILE`` then ``FILE.partial`` (``--resume``), capped."""
        if self._partial is None:
            return {}
        return _latest_lines([self._target, self._partial], memory_limit)

    def start(self, lines: Sequence[dict[str, Any]] = ()) -> None:
        """Restart ``FILE.partial`` with ``lines`` through a renamed new file, so an interruption
        keeps the old one (its lines may be their only copy)."""
        if self._partial is None:
            for line in lines:
                self.write(line)
            return
        data = b"".join(_encode(line) for line in lines)
        directory = os.path.dirname(self._target)
        try:
            fd, tmp = tempfile.mkstemp(
                prefix="." + os.path.basename(self._partial) + ".", suffix=".tmp", dir=directory
            )
        except OSError as e:
            raise self._failed(e) from None
        try:
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self._partial)
            self._started = True
            self._fd = os.open(self._partial, os.O_WRONLY | os.O_APPEND)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise self._failed(e) from None
        self._size = len(data)

    def write(self, line: dict[str, Any]) -> None:
        data = _encode(line)
        with _signals_held():
            try:
                if self._fd is not None:
                    _write_all(self._fd, data)
                    os.fsync(self._fd)
                else:
                    self._f.write(data)
                    self._f.flush()
            except BrokenPipeError:
                raise
            except OSError as e:
                if self._fd is not None:
                    with contextlib.suppress(OSError):
                        os.ftruncate(self._fd, self._size)  # no torn line left behind
                raise self._failed(e) from None
            # Counted with signals held; a Ctrl-C to another thread may still raise: close() checks.
            self._size += len(data)

    def commit(self) -> None:
        """All lines written: ``FILE.partial`` becomes ``FILE`` (or the stream is flushed). Within
        an :class:`kcheck.io.atomic.OutputSet` the rename is the set's and the lock is held until
        then; :meth:`close` does nothing meanwhile, and a dropped set leaves ``FILE.partial``."""
        if self._partial is None:
            try:
                if self._f is not None and self.path != STDIN:
                    self._f.close()
            except OSError as e:
                raise self._failed(e) from None
            finally:
                self.close()
            return
        if defer(self._rename, self._end):
            self._deferred = True
            return
        try:
            self._rename()
        finally:
            self.close()

    def _rename(self) -> None:
        assert self._partial is not None
        try:
            if self._fd is not None:
                fd, self._fd = self._fd, None
                os.close(fd)
            os.chmod(self._partial, mode_for(self._target))
            os.replace(self._partial, self._target)
            self._committed = True
        except OSError as e:
            raise self._failed(e) from None

    def _end(self) -> None:
        """The set's end, committed or dropped: close as :meth:`close` does."""
        self._deferred = False
        self.close()

    def close(self) -> None:
        """End without committing: ``FILE.partial`` stays if it holds a line, the lock goes. Never
        raises (runs while an error or interrupt is on its way out)."""
        if self._deferred:
            return
        f, self._f = self._f, None
        if f is not None and self.path != STDIN:
            with contextlib.suppress(OSError):
                f.close()
        fd, self._fd = self._fd, None
        holds_lines = self._size > 0
        if fd is not None:
            with contextlib.suppress(OSError):
                holds_lines = holds_lines or os.fstat(fd).st_size > 0
            with contextlib.suppress(OSError):
                os.close(fd)
        if self._partial is not None and self._started and not holds_lines and not self._committed:
            with contextlib.suppress(OSError):
                os.unlink(self._partial)
        if self._lock_fd is not None and self._lock_path is not None:
            _unlock(self._lock_fd, self._lock_path)
            self._lock_fd = None

    def _failed(self, e: OSError) -> KcheckError:
        return KcheckError(f"{self.path}: cannot write: {e.strerror or e}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _encode(line: dict[str, Any]) -> bytes:
    return (json.dumps(line) + "\n").encode("utf-8")


def _special(path: str) -> bool:
    """A device or pipe (``/dev/null``, a FIFO), written in place; a directory refused on open."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _lock(path: str, lock_path: str) -> int:
    """An exclusive lock on ``lock_path`` (created if need be), or KcheckError at once. The holder
    removes the file when done, so a lock on a since removed or replaced file is retried."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): run unlocked
        return -1
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            raise KcheckError(f"-o {path}: cannot write there: {e.strerror or e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise KcheckError(
                f"{path} is being written by another kcheck batch (it holds {lock_path}); "
                "wait for that run to end, or write to another file"
            ) from None
        except OSError as e:
            os.close(fd)
            raise KcheckError(f"cannot lock {lock_path}: {e.strerror or e}") from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock_path))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _unlock(fd: int, lock_path: str) -> None:
    """Remove the lock file, then release the lock (the order matters, see :func:`_lock`)."""
    if fd < 0:
        return
    with contextlib.suppress(OSError):
        os.unlink(lock_path)
    os.close(fd)


class _TextAdapter:
    """Bytes writes onto a text stream that has no ``buffer`` (captured output in tests)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, data: bytes) -> int:
        return self.stream.write(data.decode("utf-8"))

    def flush(self) -> None:
        self.stream.flush()


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM in this thread while a line is written; they arrive after it."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
