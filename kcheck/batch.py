"""Batch runs: find the LIBSVM files under directories, check each data set, write JSON lines.

The pieces, each usable on its own:

* :func:`discover` walks directories (sorted, so the order is always the same), decides for
  every file whether it is data, and pairs ``name`` with ``name.t`` (or ``name.test``;
  ``name.scale`` with ``name.t.scale``) as training and test file. A CI gate must never pass
  because a file was quietly left out, so only files that are plainly not data are skipped,
  and every skip is reported (see :func:`discover`).
* :func:`check_one` runs the check on one data set and returns its JSON line; it never raises
  for a problem of that data set, it records it.
* :func:`run_batch` checks every data set, serially in this process or in worker processes,
  and writes each line as soon as that data set is done. A file output is written as
  ``FILE.partial`` (flushed and synced line by line, so a crash loses nothing done) under an
  exclusive lock on ``FILE.lock``, and renamed over ``FILE`` at the end: the old results stay
  whole until the new ones are complete, and two runs cannot interleave their lines.
  ``resume`` reuses a saved line only while its data, its test file, its options and the
  kcheck version are the same (:func:`resume_key`).

Nothing here prints; progress goes through callbacks, so the CLI alone decides what to show.
"""

from __future__ import annotations

import bz2
import contextlib
import dataclasses
import gzip
import hashlib
import json
import lzma
import os
import re
import signal
import stat
import sys
import tempfile
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import IO, Any

from kcheck import __version__
from kcheck.atomic import mode_for
from kcheck.cluster import Scheduler, Session, same_files, shared_path
from kcheck.data import content_sha256
from kcheck.errors import KcheckError, recorded_warnings
from kcheck.memory import default_memory_limit
from kcheck.pipeline import CheckConfig, Progress, run
from kcheck.verdict import SCHEMA_VERSION, json_number
from kcheck.workers import end_pool, process_pool

#: Suffixes read through transparent decompression; stripped from a data set's name.
COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz")
#: ``name`` + one of these is the test file of ``name``; the first found in this order wins.
TEST_SUFFIXES = (".t", ".test")
#: LIBSVM's own naming puts the test mark before ``.scale``: ``sector.t.scale`` is the test
#: file of ``sector.scale``.
SCALE_SUFFIX = ".scale"
#: Extensions (after any compression suffix is removed) of data files: a file under a directory
#: with one of these, or with none, is always checked, so that a broken one is an error line.
DATA_EXTENSIONS = frozenset(".svm .libsvm .svmlight .txt .t .test .tr .train .val .scale".split())
#: Extensions (after any compression suffix is removed) that are never LIBSVM data.
SKIP_EXTENSIONS = frozenset(
    """
    .md .rst .json .jsonl .ndjson .yaml .yml .toml .ini .cfg .py .ipynb .sh .bash .r .m
    .c .h .cpp .js .html .htm .css .csv .tsv .range .model .log .pdf .ps .png .jpg .jpeg
    .gif .svg .zip .tar .tgz .npy .npz .pkl .pickle .h5 .hdf5 .mat .parquet .arff
    .partial .lock .tmp
    """.split()
)
#: File names (case-insensitive, with or without an extension) that are documentation.
SKIP_STEMS = frozenset(
    "readme license licence copying changelog changes news notice authors manifest "
    "makefile index".split()
)
#: How much of a file (after decompression) is read to decide whether it is LIBSVM data.
SNIFF_BYTES = 8192
#: Standard input as a data set: ``-`` among the paths, as in ``kcheck check -``.
STDIN = "-"
STDIN_NAME = "<stdin>"

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_LABEL_RE = re.compile(_NUMBER + r"\Z")
_FEATURE_RE = re.compile(r"(?:\d+|qid):" + _NUMBER + r"\Z")
_MAGIC = ((b"\x1f\x8b", gzip.open), (b"BZh", bz2.open), (b"\xfd7zXZ\x00", lzma.open))


class CheckCancelled(BaseException):
    """Raised inside a check running in a thread once the batch has been interrupted."""


# --- discovery -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DataSet:
    """One unit of work: a training file, its test file if one pairs up, and the line's name."""

    name: str
    train: str
    test: str | None = None


@dataclass
class Discovery:
    datasets: list[DataSet]
    #: (path, reason) for every file looked at and left out, in the order found.
    skipped: list[tuple[str, str]] = field(default_factory=list)


def strip_compression(name: str) -> str:
    """``a9a.t.bz2`` -> ``a9a.t``; other names unchanged."""
    for suffix in COMPRESSION_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def name_skip_reason(filename: str, *, explicit: bool = False) -> str | None:
    """Why a file is plainly not data, judged by its name alone; None if it may be data.

    A hidden file found by walking a directory is skipped; one named explicitly is not.
    """
    if filename.startswith(".") and not explicit:
        return "hidden file"
    base = strip_compression(filename)
    stem, ext = os.path.splitext(base)
    if ext.lower() in SKIP_EXTENSIONS:
        return f"{ext} file"
    # README, NEWS.txt and LICENSE.md are documentation; news.scale is data.
    prose = ext.lower() not in DATA_EXTENSIONS or ext.lower() == ".txt"
    if (stem if ext else base).lower() in SKIP_STEMS and (prose or not ext):
        return "documentation"
    return None


def has_data_name(filename: str) -> bool:
    """True for a data-file extension (compression aside) or none: such a file is checked."""
    ext = os.path.splitext(strip_compression(filename))[1]
    return ext == "" or ext.lower() in DATA_EXTENSIONS


def skip_reason(path: str, *, explicit: bool) -> str | None:
    """Why ``path`` is not checked, or None if it is.

    A file named explicitly, or one with a data-file name (:func:`has_data_name`), is always
    checked unless its name marks it plainly as not data: a broken data file must become an
    error line, not a skip. Files under a directory with other extensions (``german.numer``)
    are checked if their first data line looks like LIBSVM data.
    """
    filename = os.path.basename(path)
    reason = name_skip_reason(filename, explicit=explicit)
    if reason is not None or explicit or has_data_name(filename):
        return reason
    return sniff(path)


def _read_head(path: str, size: int) -> tuple[bytes, bool]:
    """The first ``size`` bytes of the file's content (decompressed); True if that is all of it."""
    with open(path, "rb") as raw:
        magic = raw.read(6)
    opener: Callable[..., Any] = open
    for prefix, fn in _MAGIC:
        if magic.startswith(prefix):
            opener = fn
            break
    with opener(path, "rb") as f:
        head = f.read(size + 1)
    return head[:size], len(head) <= size


def sniff(path: str) -> str | None:
    """None if the first data line looks like ``label index:value ...``; else the reason not.

    Only the first few KB are read (after decompression). A file that cannot be read or
    decompressed is kept, so that the check records the real error on its line.
    """
    try:
        head, complete = _read_head(path, SNIFF_BYTES)
    except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error):
        return None
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]  # a UTF-8 BOM, which the reader skips too
    lines = head.decode("latin-1").split("\n")
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0]
        tokens = text.split()
        if not complete and number == len(lines):
            if text[-1:] and not text[-1:].isspace():
                tokens = tokens[:-1]  # the read may have cut the last token short
            if not tokens:
                return None  # one very long token: nothing to judge by, let the reader decide
        if not tokens:
            continue
        if "\x00" in line:
            # NUL before any data: a binary file. NUL after a data line is corruption in a
            # data file, which the check should report with its line number, not skip.
            return "binary file"
        if not _LABEL_RE.match(tokens[0]):
            return f"not LIBSVM data (line {number} starts {tokens[0][:20]!r})"
        bad = next((t for t in tokens[1:] if not _FEATURE_RE.match(t)), None)
        if bad is not None:
            return f"not LIBSVM data (line {number}: {bad[:20]!r} is not index:value)"
        return None
    return "empty" if not head.strip() else "no data line (only comments)"


def _walk(top: str) -> Iterator[str]:
    for root, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(files):
            yield os.path.join(root, name)


def paired_test_names(base: str) -> list[str]:
    """Names (compression stripped) of the possible test files of ``base``, first choice first.

    ``a9a`` -> ``a9a.t``, ``a9a.test``; ``sector.scale`` also -> ``sector.t.scale``,
    ``sector.test.scale`` (LIBSVM's naming).
    """
    names = [base + suffix for suffix in TEST_SUFFIXES]
    if base.endswith(SCALE_SUFFIX) and len(base) > len(SCALE_SUFFIX):
        stem = base[: -len(SCALE_SUFFIX)]
        names += [stem + suffix + SCALE_SUFFIX for suffix in TEST_SUFFIXES]
    return names


def paired_train_names(base: str) -> list[str]:
    """The inverse of :func:`paired_test_names`: the training files ``base`` may be a test of."""
    names = []
    for suffix in TEST_SUFFIXES:
        if base.endswith(suffix) and len(base) > len(suffix):
            names.append(base[: -len(suffix)])
        marked = suffix + SCALE_SUFFIX
        if base.endswith(marked) and len(base) > len(marked):
            names.append(base[: -len(marked)] + SCALE_SUFFIX)
    return names


def _test_on_disk(path: str, excluded: set[str]) -> str | None:
    """The test file beside an explicitly named training file, as a directory walk pairs it."""
    directory, base = os.path.dirname(path), strip_compression(os.path.basename(path))
    for name in paired_test_names(base):
        for compression in ("", *COMPRESSION_SUFFIXES):
            candidate = os.path.join(directory, name + compression)
            if os.path.isfile(candidate) and os.path.realpath(candidate) not in excluded:
                return candidate
    return None


def discover(paths: Iterable[str], *, exclude: Iterable[str] = ()) -> Discovery:
    """Find the data sets in ``paths``: directories are walked, files taken as named.

    Which files are checked (:func:`skip_reason`): a file named explicitly, or one under a
    directory with a data-file extension (``.svm``, ``.t``, ``.scale``...) or none, is always
    checked unless its name marks it plainly as not data (``README.md``, ``.json``, images),
    so that ``data/*`` still skips ``data/README.md``. Other files under a directory are
    checked if their first data line is LIBSVM data. Every file left out is in ``skipped``
    with the reason. ``-`` is standard input, checked as a data set of its own.

    Pairing: ``name.t`` or ``name.test`` (``name.t.scale`` for ``name.scale``) in the directory
    of ``name`` becomes its test file and is not checked on its own, also when only ``name``
    was named; a test file with no training file beside it is checked on its own. Raises
    KcheckError for a path that does not exist.
    """
    excluded = {os.path.realpath(p) for p in exclude}
    # Every file once (by real path), in the order met; named explicitly anywhere wins.
    candidates: dict[str, tuple[str, bool]] = {}
    stdin = False
    skipped: list[tuple[str, str]] = []
    for top in paths:
        if top == STDIN:
            if stdin:
                raise KcheckError("- (standard input) is named twice")
            stdin = True
            continue
        if os.path.isdir(top):
            files = [(p, False) for p in _walk(top)]
        elif os.path.exists(top):
            files = [(top, True)]
        else:
            raise KcheckError(f"{top}: no such file or directory")
        for path, explicit in files:
            real = os.path.realpath(path)
            if real in excluded:
                continue
            if real in candidates:
                first, was_explicit = candidates[real]
                candidates[real] = (
                    path if explicit and not was_explicit else first,
                    was_explicit or explicit,
                )
            else:
                candidates[real] = (path, explicit)

    found: list[tuple[str, str, bool]] = []  # (path as the user spelled it, real path, explicit)
    for real, (path, explicit) in candidates.items():
        if not os.path.isfile(real) and not explicit:
            skipped.append((path, "not a regular file"))
            continue
        reason = skip_reason(path, explicit=explicit)
        if reason is not None:
            skipped.append((path, reason))
        else:
            found.append((path, real, explicit))

    # Pair within each directory: (directory, base name without compression) -> indices.
    by_dir: dict[tuple[str, str], list[int]] = {}
    for i, (_, real, _) in enumerate(found):
        key = (os.path.dirname(real), strip_compression(os.path.basename(real)))
        by_dir.setdefault(key, []).append(i)
    test_of: dict[int, list[tuple[int, int]]] = {}  # train index -> [(rank, test index)]
    is_test: set[int] = set()
    for i, (_, real, _) in enumerate(found):
        directory, base = os.path.dirname(real), strip_compression(os.path.basename(real))
        for train_base in paired_train_names(base):
            trains = by_dir.get((directory, train_base), [])
            if trains:
                is_test.add(i)
                rank = paired_test_names(train_base).index(base)
                for t in trains:
                    test_of.setdefault(t, []).append((rank, i))

    pairs: list[tuple[int, str | None]] = []
    used_tests: set[int] = set()
    for i, (path, _, explicit) in enumerate(found):
        if i in is_test:
            continue
        options = sorted(test_of.get(i, []))
        test: str | None = None
        if options:
            used_tests.add(options[0][1])
            test = found[options[0][1]][0]
        elif explicit:
            test = _test_on_disk(path, excluded)
        pairs.append((i, test))
    for i in sorted(is_test - used_tests):
        skipped.append((found[i][0], "another test file of the same data set is used"))

    names = _unique_names([found[i][0] for i, _ in pairs])
    datasets = [
        DataSet(name=name, train=found[i][0], test=t)
        for name, (i, t) in zip(names, pairs, strict=True)
    ]
    if stdin:
        datasets.insert(0, DataSet(name=STDIN_NAME, train=STDIN))
    return Discovery(datasets=datasets, skipped=skipped)


def _unique_names(paths: Sequence[str]) -> list[str]:
    """File name without compression suffix; the path where that name would be ambiguous."""
    candidates: list[Callable[[str], str]] = [
        lambda p: strip_compression(os.path.basename(p)),
        lambda p: strip_compression(os.path.normpath(p)),
        lambda p: os.path.normpath(p),
    ]
    names = [candidates[0](p) for p in paths]
    for fn in candidates[1:]:
        counts: dict[str, int] = {}
        for n in names:
            counts[n] = counts.get(n, 0) + 1
        if all(c == 1 for c in counts.values()):
            break
        names = [fn(p) if counts[n] > 1 else n for p, n in zip(paths, names, strict=True)]
    return names


# --- one data set --------------------------------------------------------------------------


def error_message(exc: BaseException) -> str:
    """One line: a KcheckError's own message; anything else with its exception type."""
    if isinstance(exc, KcheckError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return " ".join(text.split())


def _unchecked_line(
    name: str,
    status: str,
    config: CheckConfig,
    train: str,
    test: str | None,
    seconds: float,
    **fields: Any,
) -> dict[str, Any]:
    """A line without a verdict (an error or a skip), with the same leading keys as an ok
    line, so that jq recipes read every line alike."""
    return {
        "name": name,
        "status": status,
        **fields,
        "schema_version": SCHEMA_VERSION,
        "kcheck_version": __version__,
        "verdict": None,
        "margin": None,
        "epsilon": config.epsilon,
        "seed": config.seed,
        "data": {"path": train},
        "test": None if test is None else {"path": test},
        "seconds": json_number(seconds),
    }


def error_line(ds: DataSet, config: CheckConfig, message: str, seconds: float) -> dict[str, Any]:
    """The line of a data set that could not be checked."""
    return _unchecked_line(ds.name, "error", config, ds.train, ds.test, seconds, error=message)


def skip_line(path: str, reason: str, config: CheckConfig, *, strict: bool) -> dict[str, Any]:
    """The line of a file left out: ``status: skipped`` with the reason, or under ``strict``
    an error line (the batch then exits 3)."""
    return _unchecked_line(
        path,
        "error" if strict else "skipped",
        config,
        path,
        None,
        0.0,
        error=f"not checked: {reason} (--strict)" if strict else None,
        reason=reason,
    )


def check_one(ds: DataSet, config: CheckConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Check one data set; any Exception becomes an error line rather than propagating.

    Warnings go into the line's ``warnings`` (a worker process has no terminal to show them).
    """
    config = dataclasses.replace(config, train=ds.train, test=ds.test)
    t0 = time.perf_counter()
    try:
        with recorded_warnings() as notes:
            verdict = run(config, progress).json
    except Exception as e:  # noqa: BLE001 - recorded on the line; the batch goes on
        return error_line(ds, config, error_message(e), time.perf_counter() - t0)
    verdict["warnings"] = [*verdict.get("warnings", []), *notes]
    return {"name": ds.name, "status": "ok", "error": None, **verdict}


# --- resume --------------------------------------------------------------------------------


#: CheckConfig fields that cannot change a line apart from its timing: the files (their content
#: hashes stand in for them), the CPUs used and the outputs. Every other field, including any
#: added later, is part of the resume key.
NOT_KEYED = frozenset({"train", "test", "jobs", "model_out", "model_kind", "model_probability"})


#: Fields keyed only when they differ from these values (their defaults), so that lines saved
#: before the option existed keep their keys.
KEYED_WHEN_SET: dict[str, Any] = {"max_rows": None, "metric": "accuracy"}


def keyed_options(config: CheckConfig) -> dict[str, Any]:
    """The options that can change a check's JSON, by CheckConfig field name."""
    return {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if f.name not in NOT_KEYED
        and not (f.name in KEYED_WHEN_SET and getattr(config, f.name) == KEYED_WHEN_SET[f.name])
    }


def resume_key(config: CheckConfig, data_sha256: str, test_sha256: str | None) -> str:
    """What a saved line must match to be reused: its data and test file's content, every
    option that can change its JSON, and the kcheck version; as one SHA-256."""
    material = {
        "kcheck_version": __version__,
        "data_sha256": data_sha256,
        "test_sha256": test_sha256,
        "options": keyed_options(config),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _with_key(line: dict[str, Any], template: CheckConfig) -> dict[str, Any]:
    """An ok line with its ``options`` and ``resume_key``; other lines unchanged."""
    if line.get("status") != "ok":
        return line
    data_sha = (line.get("data") or {}).get("sha256")
    test_sha = (line.get("test") or {}).get("sha256")
    if not data_sha:
        return line
    return {
        **line,
        "options": keyed_options(template),
        "resume_key": resume_key(template, data_sha, test_sha),
    }


def _rereadable(path: str) -> bool:
    """Standard input and pipes cannot be hashed without consuming them: never reused."""
    if path == STDIN:
        return False
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _current_key(ds: DataSet, template: CheckConfig) -> str | None:
    """The key a line for ``ds`` would have now; None if it cannot be known before checking."""
    files = [ds.train] + ([ds.test] if ds.test is not None else [])
    if not all(_rereadable(f) for f in files):
        return None
    try:
        data_sha = content_sha256(ds.train)
        test_sha = None if ds.test is None else content_sha256(ds.test)
    except KcheckError:
        return None  # unreadable now: checking it records the error
    return resume_key(template, data_sha, test_sha)


# --- output --------------------------------------------------------------------------------


def read_results(path: str) -> dict[str, dict[str, Any]]:
    """For each name whose latest line in a JSON-lines file has status ok, that line.

    A missing file has none. Lines that do not parse (for example one torn by a power cut)
    are ignored, so their data sets run again; so do those whose latest line is an error.
    """
    latest = _latest_lines([path])
    return {name: line for name, line in latest.items() if line.get("status") == "ok"}


def _latest_lines(paths: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each name's last line over the files, read in order; unreadable lines are ignored."""
    latest: dict[str, dict[str, Any]] = {}
    for path in paths:
        try:
            f = open(path, encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        except OSError as e:
            raise KcheckError(f"{path}: cannot read: {e.strerror or e}") from None
        with f:
            for text in f:
                try:
                    line = json.loads(text)
                except ValueError:
                    continue
                if isinstance(line, dict) and isinstance(line.get("name"), str):
                    latest[line["name"]] = line
    return latest


class LineWriter:
    """Writes whole lines: each in one go with SIGINT/SIGTERM held back, then synced.

    The destination is standard output (``path`` ``"-"``), a device or pipe (written in place),
    or a regular file. A regular ``FILE`` is never written directly. An exclusive lock on
    ``FILE.lock`` is taken first (another run writing the same file is refused at once), lines
    go to ``FILE.partial``, and :meth:`commit` renames that over ``FILE``. Until then the old
    ``FILE`` is untouched; an interrupted run leaves ``FILE.partial`` for ``--resume``. A write
    that fails is cut back off, so a line is whole or absent.
    """

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
        if path == STDIN:
            stream = sys.stdout
            stream.flush()
            self._f = getattr(stream, "buffer", None) or _TextAdapter(stream)
            return
        self._target = os.path.realpath(path)
        if _special(self._target):
            try:
                self._f = open(self._target, "wb")
            except OSError as e:
                raise KcheckError(f"{path}: cannot write: {e.strerror or e}") from None
            return
        self._lock_path = self._target + ".lock"
        self._lock_fd = _lock(path, self._lock_path)
        self._partial = self._target + ".partial"

    @property
    def partial(self) -> str | None:
        """``FILE.partial`` while lines go there; None for stdout or a device."""
        return self._partial

    def prior(self) -> dict[str, dict[str, Any]]:
        """Each name's latest line in ``FILE`` and then ``FILE.partial`` (for ``--resume``)."""
        if self._partial is None:
            return {}
        return _latest_lines([self._target, self._partial])

    def start(self, lines: Sequence[dict[str, Any]] = ()) -> None:
        """Begin ``FILE.partial`` afresh with ``lines``: a new file renamed into place, so an
        interruption leaves the old partial file (with lines that may be its only copy)."""
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
            # Counted while the signals are held in this thread. A Ctrl-C delivered to another
            # thread (the Dask client's) can still raise here, so close() asks the file itself.
            self._size += len(data)

    def commit(self) -> None:
        """All lines are written: ``FILE.partial`` becomes ``FILE`` (or the stream is flushed)."""
        if self._partial is None:
            try:
                if self._f is not None and self.path != STDIN:
                    self._f.close()
            except OSError as e:
                raise self._failed(e) from None
            finally:
                self.close()
            return
        try:
            assert self._fd is not None
            fd, self._fd = self._fd, None
            os.close(fd)
            os.chmod(self._partial, mode_for(self._target))
            os.replace(self._partial, self._target)
            self._committed = True
        except OSError as e:
            raise self._failed(e) from None
        finally:
            self.close()

    def close(self) -> None:
        """End without committing: ``FILE.partial`` stays if it holds a line, the lock goes.

        Nothing here raises: it runs while an error or an interrupt is on its way out.
        """
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
    """A device or pipe (``/dev/null``, ``/dev/stdout``, a FIFO): written in place."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return False


def _lock(path: str, lock_path: str) -> int:
    """An exclusive lock on ``lock_path`` (created if need be), or KcheckError at once.

    The holder removes the file when done, so a lock taken on a file that has meanwhile been
    removed or replaced is worth nothing: then try again.
    """
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


# --- running -------------------------------------------------------------------------------


@dataclass
class BatchResult:
    """Every line of the batch: the skipped files' first, then each data set's in discovery
    order (including lines reused by resume)."""

    lines: list[dict[str, Any]]
    #: Names whose line was taken from the existing output (``resume``), not checked now.
    resumed: set[str]
    seconds: float
    workers: int
    #: Names that had an ok line which no longer matched (data, test file or options changed).
    stale: set[str] = field(default_factory=set)

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [x for x in self.lines if x["status"] == "error"]

    @property
    def skipped(self) -> list[dict[str, Any]]:
        return [x for x in self.lines if x["status"] == "skipped"]

    def matching(self, verdict: str) -> list[dict[str, Any]]:
        return [x for x in self.lines if x["status"] == "ok" and x["verdict"] == verdict]


def plan(template: CheckConfig, jobs: int, n_datasets: int) -> tuple[int, CheckConfig]:
    """Worker processes to start and the config each check gets.

    ``jobs`` is the CPU budget. With one worker the check keeps ``template.jobs`` (the CLI
    passes the CPU count, as ``kcheck check`` does). With several, the memory budget
    (``template.memory_limit``, or half of the available memory) is divided between them and
    each check gets an equal share of the ``jobs`` CPUs: one when there are enough data sets.
    """
    workers = max(1, min(jobs, n_datasets))
    if jobs <= 1:
        return 1, template
    memory = template.memory_limit or default_memory_limit()
    config = dataclasses.replace(
        template, jobs=max(1, jobs // workers), memory_limit=max(1, memory // workers)
    )
    return workers, config


def run_batch(
    datasets: Sequence[DataSet],
    template: CheckConfig,
    *,
    jobs: int = 1,
    output: str | None = None,
    resume: bool = False,
    skipped: Sequence[tuple[str, str]] = (),
    strict: bool = False,
    progress: Progress | None = None,
    on_line: Callable[[dict[str, Any]], None] | None = None,
    scheduler: str | None = None,
    shared_fs: bool | None = None,
) -> BatchResult:
    """Check ``datasets``; write one JSON line per data set and per skipped file to ``output``.

    ``output`` is a file (see :class:`LineWriter`), ``"-"`` for stdout, or None to write
    nothing. The skipped files' lines come first, then each data set's as soon as it is done.
    With ``resume`` (a file output only), a data set whose latest line in ``FILE`` or
    ``FILE.partial`` is ok and has the :func:`resume_key` it would have now is not checked
    again; its line is carried over. ``strict`` turns skipped files into error lines.
    ``progress(stage, done, total)`` counts data sets; ``on_line`` sees each new line after it
    is written. On KeyboardInterrupt (or any BaseException) pending work is cancelled, worker
    processes are ended and the exception propagates; every line already written is whole.

    ``scheduler`` (``tcp://host:port`` or ``local:N``, instead of ``jobs``) checks one data set
    per task on a Dask cluster (:func:`_run_cluster`); the lines are those of a local run.
    ``shared_fs`` says whether workers read the files at their paths (True) or are sent their
    bytes (False); None decides per data set by looking on a worker.
    """
    t0 = time.perf_counter()
    template = template.validated()
    names = [ds.name for ds in datasets]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise KcheckError(f"two data sets are named {dup[0]}; names must be unique")
    if resume and output in (None, STDIN):
        raise KcheckError("--resume needs -o FILE: the results to resume from")
    if jobs < 1:
        raise KcheckError("-j must be at least 1")
    if not 0 <= template.seed <= 2**32 - 1:
        raise KcheckError(f"--seed must lie in 0..{2**32 - 1}, got {template.seed}")
    if template.model_out is not None:
        raise KcheckError("a batch does not save models; run kcheck check --model-out")
    if scheduler is not None and template.time_limit is not None:
        raise KcheckError(
            "--time-limit cannot be used with --scheduler: a check is stopped by ending its own "
            "process, which a Dask worker may not start"
        )
    report = progress or _noop
    session: Session | None = None
    writer: LineWriter | None = None
    try:
        writer = LineWriter(output) if output is not None else None
        if scheduler is not None and any(ds.train != STDIN for ds in datasets):
            report(f"connecting to {scheduler}", None, None)
            session = Session(scheduler)
            slots = session.slots
        head = [skip_line(path, reason, template, strict=strict) for path, reason in skipped]
        reused: dict[str, dict[str, Any]] = {}
        stale: set[str] = set()
        if resume and writer is not None:
            prior = writer.prior()
            saved = [ds for ds in datasets if prior.get(ds.name, {}).get("status") == "ok"]
            for i, ds in enumerate(saved):
                report(f"comparing saved results with the data: {ds.name}", i, len(saved))
                line = prior[ds.name]
                key = line.get("resume_key")
                if key is not None and key == _current_key(ds, template):
                    reused[ds.name] = line
                else:
                    stale.add(ds.name)
        if writer is not None:
            writer.start([*head, *(reused[ds.name] for ds in datasets if ds.name in reused)])
        lines: dict[str, dict[str, Any]] = {}
        todo = [ds for ds in datasets if ds.name not in reused]
        runs = (
            _run(todo, template, jobs, report)
            if session is None
            else _run_on(session, todo, template, report, shared_fs)
        )
        for line in runs:
            line = _with_key(line, template)
            if writer is not None:
                writer.write(line)
            lines[line["name"]] = line
            if on_line is not None:
                on_line(line)
        if writer is not None:
            writer.commit()
    finally:
        if writer is not None:
            writer.close()
        if session is not None:
            session.close()
    workers = plan(template, jobs, len(todo))[0] if session is None else slots
    ordered = [lines[ds.name] if ds.name in lines else reused[ds.name] for ds in datasets]
    return BatchResult(
        lines=[*head, *ordered],
        resumed=set(reused),
        seconds=time.perf_counter() - t0,
        workers=workers,
        stale=stale,
    )


def _run(
    todo: Sequence[DataSet], template: CheckConfig, jobs: int, report: Progress
) -> Generator[dict[str, Any], None, None]:
    """Every data set's line, in completion order. Standard input can be read only here, so
    a data set on it is checked first, in this process."""
    here = [ds for ds in todo if ds.train == STDIN]
    rest = [ds for ds in todo if ds.train != STDIN]
    if here:
        _, config = plan(template, 1, 1)
        with contextlib.closing(_run_serial(here, config, report)) as results:
            yield from results
    workers, config = plan(template, jobs, len(rest))
    if not rest:
        return
    results = (
        _run_serial(rest, config, report)
        if workers == 1
        else _run_parallel(rest, config, workers, report)
    )
    with contextlib.closing(results):
        yield from results


def _noop(stage: str, done: int | None, total: int | None) -> None:
    return None


def _run_serial(
    todo: Sequence[DataSet], config: CheckConfig, report: Progress
) -> Generator[dict[str, Any], None, None]:
    """One data set at a time, each in a worker thread so that Ctrl-C is seen at once.

    (A SIGINT that arrives while LIBLINEAR runs in the main thread is swallowed by ctypes; see
    DESIGN.md.) On interrupt the thread is told to stop at its next progress report.
    """
    cancelled = threading.Event()
    n = len(todo)
    for i, ds in enumerate(todo):
        prefix = f"[{i + 1}/{n}] {ds.name}"

        def relay(stage: str, done: int | None, total: int | None, prefix: str = prefix) -> None:
            if cancelled.is_set():
                raise CheckCancelled()
            report(f"{prefix}: {stage}", done, total)

        box: dict[str, Any] = {}

        def target(ds: DataSet = ds, relay: Progress = relay, box: dict[str, Any] = box) -> None:
            try:
                box["line"] = check_one(ds, config, relay)
            except BaseException as e:  # noqa: BLE001 - re-raised in the calling thread
                box["error"] = e

        report(prefix, i, n)
        thread = threading.Thread(target=target, name=f"kcheck-batch-{i}", daemon=True)
        thread.start()
        try:
            while thread.is_alive():
                thread.join(0.1)
        except BaseException:
            cancelled.set()
            raise
        if "error" in box:
            raise box["error"]
        yield box["line"]
    report("done", n, n)


def _new_pool(workers: int) -> ProcessPoolExecutor:
    return process_pool(workers, ["kcheck.pipeline"])


def _end_pool(pool: ProcessPoolExecutor) -> None:
    end_pool(pool)


_DIED = (
    "the worker process died while checking this data set (killed, for example for lack "
    "of memory, or crashed); try a lower -j or --memory-limit"
)


def _stage(todo: Sequence[DataSet], running: Iterable[int], finished: int) -> str:
    """The progress line of a batch with several checks in flight: counts and their names."""
    names = [todo[i].name for i in sorted(running)]
    if not names:
        return f"{finished}/{len(todo)} done"
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f"{finished}/{len(todo)} done; checking {', '.join(names[:3])}{more}"


def _run_parallel(
    todo: Sequence[DataSet],
    config: CheckConfig,
    workers: int,
    report: Progress,
    task: Callable[[DataSet, CheckConfig], dict[str, Any]] = check_one,
) -> Generator[dict[str, Any], None, None]:
    """At most ``workers`` data sets in flight, so every submitted one is running.

    If a worker dies (the OOM killer, a crash), the pool breaks and every data set in flight
    fails with it. Those are run again afterwards one at a time, so that only the one that
    kills its worker on its own gets the error line.
    """
    n = len(todo)
    pending = deque(range(n))
    suspects: list[int] = []
    running: dict[Future[dict[str, Any]], int] = {}
    finished = 0
    pool = _new_pool(workers)

    try:
        while pending or running:
            while pending and len(running) < workers:
                i = pending.popleft()
                running[pool.submit(task, todo[i], config)] = i
            report(_stage(todo, running.values(), finished), finished, n)
            done, _ = wait(list(running), timeout=0.5, return_when=FIRST_COMPLETED)
            broken = False
            for f in sorted(done, key=lambda f: running[f]):
                i = running.pop(f)
                try:
                    line = f.result()
                except BrokenProcessPool:
                    broken = True
                    suspects.append(i)
                    continue
                except Exception as e:  # noqa: BLE001 - e.g. a result that could not be sent
                    line = error_line(todo[i], config, error_message(e), 0.0)
                finished += 1
                yield line
            if broken:
                wait(list(running))
                for f, i in sorted(running.items(), key=lambda kv: kv[1]):
                    if f.exception() is None:
                        finished += 1
                        yield f.result()
                    else:
                        suspects.append(i)
                running.clear()
                _end_pool(pool)
                pool = _new_pool(workers)
        if suspects:
            _end_pool(pool)
            pool = _new_pool(1)
        for i in sorted(suspects):
            running[pool.submit(task, todo[i], config)] = i
            report(_stage(todo, running.values(), finished), finished, n)
            f = next(iter(running))
            while not f.done():
                wait([f], timeout=0.5)
            running.clear()
            try:
                line = f.result()
            except BrokenProcessPool:
                line = error_line(todo[i], config, _DIED, 0.0)
                _end_pool(pool)
                pool = _new_pool(1)
            except Exception as e:  # noqa: BLE001
                line = error_line(todo[i], config, error_message(e), 0.0)
            finished += 1
            yield line
        report("done", n, n)
    finally:
        _end_pool(pool)


# --- on a Dask cluster ---------------------------------------------------------------------


def cluster_config(template: CheckConfig, scheduler: Scheduler) -> CheckConfig:
    """What each check on a cluster gets: one job (a Dask worker is a daemonic process and
    may not start kcheck's worker pools) and this machine's memory budget, never a worker's
    own: ``--memory-limit``, or half this machine's memory, divided between the N workers of
    ``local:N`` as ``-j N`` divides it."""
    memory = template.memory_limit or default_memory_limit()
    if scheduler.local_workers is not None:
        memory = max(1, memory // scheduler.local_workers)
    return dataclasses.replace(template, jobs=1, memory_limit=memory)


def _run_on(
    session: Session,
    todo: Sequence[DataSet],
    template: CheckConfig,
    report: Progress,
    shared_fs: bool | None,
) -> Generator[dict[str, Any], None, None]:
    """Standard input in this process (as :func:`_run` does), every other data set on the
    cluster."""
    here = [ds for ds in todo if ds.train == STDIN]
    rest = [ds for ds in todo if ds.train != STDIN]
    if here:
        with contextlib.closing(_run_serial(here, plan(template, 1, 1)[1], report)) as results:
            yield from results
    if rest:
        config = cluster_config(template, session.scheduler)
        with contextlib.closing(_run_cluster(rest, config, session, report, shared_fs)) as lines:
            yield from lines


def _files(ds: DataSet) -> list[str]:
    return [ds.train] + ([ds.test] if ds.test is not None else [])


def _by_path(todo: Sequence[DataSet], session: Session, shared_fs: bool | None) -> list[bool]:
    """For each data set, whether workers read its files at their paths (else they get the
    bytes). ``shared_fs`` None: when one worker sees every file of it with this machine's
    absolute path, size and modification time. A file this machine cannot read goes by path,
    so that the worker's check reports it as a local check would."""
    facts = [[shared_path(f) for f in _files(ds)] for ds in todo]
    if shared_fs is not None:
        return [shared_fs or any(x is None for x in fs) for fs in facts]
    expected = [x for fs in facts for x in fs if x is not None]
    seen = iter(session.probe(same_files, expected)) if expected else iter(())
    return [all([next(seen) for x in fs if x is not None]) for fs in facts]


def _restore_paths(value: Any, paths: dict[str, str]) -> Any:
    """``value`` with every path a worker used replaced by the one the user gave."""
    if isinstance(value, str):
        for remote, local in paths.items():
            value = value.replace(remote, local)
        return value
    if isinstance(value, dict):
        return {k: _restore_paths(v, paths) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore_paths(v, paths) for v in value]
    return value


def check_remote(
    task: Callable[[DataSet, CheckConfig], dict[str, Any]],
    ds: DataSet,
    config: CheckConfig,
    paths: list[str],
    contents: list[bytes] | None,
) -> dict[str, Any]:
    """On a worker: check ``ds`` and return its line as a local check would write it.

    The files are read at ``paths``, their absolute paths on the client (a shared
    filesystem), or, given their ``contents``, from copies in a temporary directory under
    their own names. Either way the paths in the line (``data.path``, messages) are turned
    back into the user's.
    """
    files = _files(ds)
    with tempfile.TemporaryDirectory(prefix="kcheck-") as tmp:
        if contents is None:
            remote = list(paths)
        else:
            remote = []
            for i, (f, data) in enumerate(zip(files, contents, strict=True)):
                os.mkdir(os.path.join(tmp, str(i)))
                remote.append(os.path.join(tmp, str(i), os.path.basename(f)))
                with open(remote[-1], "wb") as out:
                    out.write(data)
        there = DataSet(ds.name, remote[0], remote[1] if len(remote) > 1 else None)
        line = task(there, config)
    # Longest first, so that a path is never replaced inside a longer one.
    back = dict(sorted(zip(remote, files, strict=True), key=lambda p: -len(p[0])))
    return {k: _restore_paths(v, back) if k != "name" else v for k, v in line.items()}


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _run_cluster(
    todo: Sequence[DataSet],
    config: CheckConfig,
    session: Session,
    report: Progress,
    shared_fs: bool | None,
    task: Callable[[DataSet, CheckConfig], dict[str, Any]] = check_one,
) -> Generator[dict[str, Any], None, None]:
    """One task per data set, as many in flight as the cluster has worker threads (so that a
    file's bytes are read and sent only when a worker is ready for it).

    A worker that dies loses nothing: Dask runs its task again on another worker. A data set
    whose task has killed its worker three times gets an error line (:mod:`kcheck.cluster`);
    the batch goes on. On an interrupt the tasks are cancelled (see :meth:`Session.cancel`).
    """
    n = len(todo)
    report(f"looking for {n} data sets' files on the workers", 0, n)
    by_path = _by_path(todo, session, shared_fs)
    pending = deque(range(n))
    running: dict[Any, int] = {}
    finished = 0

    def submit(i: int) -> Any:
        ds = todo[i]
        contents = None if by_path[i] else [session.scatter(_read_bytes(f)) for f in _files(ds)]
        paths = [os.path.abspath(f) for f in _files(ds)]
        return session.submit(i, check_remote, task, ds, config, paths, contents)

    try:
        while pending or running:
            slots = session.slots
            while pending and len(running) < slots:
                i = pending.popleft()
                try:
                    running[submit(i)] = i
                except OSError as e:  # the file changed since it was found
                    finished += 1
                    yield error_line(todo[i], config, f"{todo[i].train}: {e.strerror or e}", 0.0)
            report(_stage(todo, running.values(), finished), finished, n)
            for i, line, error in session.finished(running, timeout=0.5):
                if error is not None:
                    line = error_line(todo[i], config, error_message(error), 0.0)
                finished += 1
                yield line
        report("done", n, n)
    finally:
        session.cancel(running)
