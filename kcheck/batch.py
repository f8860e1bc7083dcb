"""Batch runs: find the LIBSVM files under directories, check each data set, write JSON lines.

The pieces, each usable on its own:

* :func:`discover` walks directories (sorted, so the order is always the same), keeps the
  files that look like LIBSVM data and pairs ``name`` with ``name.t`` (or ``name.test``) as
  training and test file.
* :func:`check_one` runs the check on one data set and returns its JSON line; it never raises
  for a problem of that data set, it records it.
* :func:`run_batch` checks every data set, serially in this process or in worker processes,
  appends each line to the output as soon as that data set is done (flushed and synced, so a
  crash loses nothing done) and returns a :class:`BatchResult` for the summary and exit code.

Nothing here prints; progress goes through callbacks, so the CLI alone decides what to show.
"""

from __future__ import annotations

import bz2
import contextlib
import dataclasses
import gzip
import json
import lzma
import os
import re
import signal
import sys
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
from kcheck.errors import KcheckError
from kcheck.memory import default_memory_limit
from kcheck.pipeline import CheckConfig, Progress, run
from kcheck.verdict import SCHEMA_VERSION
from kcheck.workers import end_pool, process_pool

#: Suffixes read through transparent decompression; stripped from a data set's name.
COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz")
#: ``name`` + one of these is the test file of ``name``; the first found in this order wins.
TEST_SUFFIXES = (".t", ".test")
#: Extensions (after any compression suffix is removed) that are never LIBSVM data.
SKIP_EXTENSIONS = frozenset(
    """
    .md .rst .json .jsonl .ndjson .yaml .yml .toml .ini .cfg .py .ipynb .sh .bash .r .m
    .c .h .cpp .js .html .htm .css .csv .tsv .range .model .log .pdf .ps .png .jpg .jpeg
    .gif .svg .zip .tar .tgz .npy .npz .pkl .pickle .h5 .hdf5 .mat .parquet .arff
    """.split()
)
#: File names (case-insensitive, with or without an extension) that are documentation.
SKIP_STEMS = frozenset(
    "readme license licence copying changelog changes news notice authors manifest "
    "makefile index".split()
)
#: How much of a file (after decompression) is read to decide whether it is LIBSVM data.
SNIFF_BYTES = 8192
#: Keys of a line that hold wall-clock times: the only keys that may differ between runs.

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


def name_skip_reason(filename: str) -> str | None:
    """Why a file is obviously not data, judged by its name alone; None if it may be data."""
    if filename.startswith("."):
        return "hidden file"
    base = strip_compression(filename)
    stem, ext = os.path.splitext(base)
    if ext.lower() in SKIP_EXTENSIONS:
        return f"{ext} file"
    if (stem if ext else base).lower() in SKIP_STEMS or base.lower() in SKIP_STEMS:
        return "documentation"
    return None


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


def discover(paths: Iterable[str], *, exclude: Iterable[str] = ()) -> Discovery:
    """Find the data sets under ``paths`` (directories are walked, files taken as they are).

    Files are filtered by name (hidden, documentation, known non-data extensions) and by
    sniffing the first data line, whether found by walking or named explicitly (so that a
    shell glob such as ``data/*`` skips ``data/README.md``). ``name.t`` or ``name.test`` in
    the directory of ``name`` becomes its test file and is not checked on its own; a test file
    with no training file beside it is checked as a data set of its own. Raises KcheckError
    for a path that does not exist.
    """
    excluded = {os.path.realpath(p) for p in exclude}
    found: list[tuple[str, str]] = []  # (path as the user spelled it, real path)
    seen: set[str] = set()
    skipped: list[tuple[str, str]] = []
    for top in paths:
        if os.path.isdir(top):
            files = list(_walk(top))
        elif os.path.exists(top):
            files = [top]
        else:
            raise KcheckError(f"{top}: no such file or directory")
        for path in files:
            real = os.path.realpath(path)
            if real in seen or real in excluded or not os.path.isfile(real):
                continue
            seen.add(real)
            reason = name_skip_reason(os.path.basename(path)) or sniff(path)
            if reason is not None:
                skipped.append((path, reason))
            else:
                found.append((path, real))

    # Pair within each directory: base name (compression stripped) -> candidates.
    by_dir: dict[tuple[str, str], list[int]] = {}
    for i, (_, real) in enumerate(found):
        key = (os.path.dirname(real), strip_compression(os.path.basename(real)))
        by_dir.setdefault(key, []).append(i)
    test_of: dict[int, list[tuple[int, int]]] = {}  # train index -> [(suffix rank, test index)]
    is_test: set[int] = set()
    for i, (_, real) in enumerate(found):
        directory, base = os.path.dirname(real), strip_compression(os.path.basename(real))
        for rank, suffix in enumerate(TEST_SUFFIXES):
            if base.endswith(suffix) and len(base) > len(suffix):
                trains = by_dir.get((directory, base[: -len(suffix)]), [])
                if trains:
                    is_test.add(i)
                    for t in trains:
                        test_of.setdefault(t, []).append((rank, i))
                break

    pairs: list[tuple[int, int | None]] = []
    used_tests: set[int] = set()
    for i in range(len(found)):
        if i in is_test:
            continue
        options = sorted(test_of.get(i, []))
        test = options[0][1] if options else None
        if test is not None:
            used_tests.add(test)
        pairs.append((i, test))
    for i in sorted(is_test - used_tests):
        skipped.append((found[i][0], "another test file of the same data set is used"))

    names = _unique_names([found[i][0] for i, _ in pairs])
    datasets = [
        DataSet(name=name, train=found[i][0], test=None if t is None else found[t][0])
        for name, (i, t) in zip(names, pairs, strict=True)
    ]
    return Discovery(datasets=datasets, skipped=skipped)


def _unique_names(paths: Sequence[str]) -> list[str]:
    """File name without compression suffix; the path where that name would be ambiguous."""
    candidates = [
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


def error_line(ds: DataSet, config: CheckConfig, message: str, seconds: float) -> dict[str, Any]:
    """The line of a data set that could not be checked; same leading keys as an ok line."""
    return {
        "name": ds.name,
        "status": "error",
        "error": message,
        "schema_version": SCHEMA_VERSION,
        "kcheck_version": __version__,
        "verdict": None,
        "margin": None,
        "epsilon": config.epsilon,
        "seed": config.seed,
        "data": {"path": ds.train},
        "test": None if ds.test is None else {"path": ds.test},
        "seconds": round(seconds, 4),
    }


def check_one(
    ds: DataSet, config: CheckConfig, progress: Progress | None = None
) -> dict[str, Any]:
    """Check one data set; any Exception becomes an error line rather than propagating."""
    config = dataclasses.replace(config, train=ds.train, test=ds.test)
    t0 = time.perf_counter()
    try:
        verdict = run(config, progress).json
    except Exception as e:  # noqa: BLE001 - recorded on the line; the batch goes on
        return error_line(ds, config, error_message(e), time.perf_counter() - t0)
    return {"name": ds.name, "status": "ok", "error": None, **verdict}


# --- output --------------------------------------------------------------------------------


def read_results(path: str) -> dict[str, dict[str, Any]]:
    """For each name whose latest line in a JSON-lines file has status ok, that line.

    A missing file has none. Lines that do not parse (for example one torn by a power cut)
    are ignored, so their data sets run again; so do those whose latest line is an error.
    """
    latest: dict[str, dict[str, Any]] = {}
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return latest
    with f:
        for text in f:
            try:
                line = json.loads(text)
            except ValueError:
                continue
            if isinstance(line, dict) and isinstance(line.get("name"), str):
                latest[line["name"]] = line
    return {name: line for name, line in latest.items() if line.get("status") == "ok"}


class LineWriter:
    """Appends whole lines: written in one go with SIGINT/SIGTERM held back, then synced."""

    def __init__(self, path: str | None, *, append: bool) -> None:
        self.path = path
        self._own = path is not None
        if path is None:
            stream = sys.stdout
            stream.flush()
            self._f: Any = getattr(stream, "buffer", None) or _TextAdapter(stream)
            self._sync = False
            return
        try:
            self._f = open(path, "ab" if append else "wb")
        except OSError as e:
            raise KcheckError(f"{path}: cannot write: {e.strerror}") from e
        self._sync = True
        if append and self._f.tell() > 0 and not _ends_with_newline(path):
            self._write(b"\n")  # end a torn last line so it cannot swallow the next one

    def write(self, line: dict[str, Any]) -> None:
        self._write((json.dumps(line) + "\n").encode("utf-8"))

    def _write(self, data: bytes) -> None:
        with _signals_held():
            try:
                self._f.write(data)
                self._f.flush()
                if self._sync:
                    os.fsync(self._f.fileno())
            except BrokenPipeError:
                raise
            except OSError as e:
                where = self.path or "stdout"
                raise KcheckError(f"{where}: cannot write: {e.strerror or e}") from None

    def close(self) -> None:
        if self._own:
            try:
                self._f.close()
            except OSError as e:
                raise KcheckError(f"{self.path}: cannot write: {e.strerror or e}") from None


class _TextAdapter:
    """Bytes writes onto a text stream that has no ``buffer`` (captured output in tests)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, data: bytes) -> int:
        return self.stream.write(data.decode("utf-8"))

    def flush(self) -> None:
        self.stream.flush()


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


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
    """Every selected data set's line, in discovery order (including lines kept by resume)."""

    lines: list[dict[str, Any]]
    #: Names whose line was taken from the existing output (``resume``), not checked now.
    resumed: set[str]
    seconds: float
    workers: int

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [x for x in self.lines if x["status"] != "ok"]

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
    progress: Progress | None = None,
    on_line: Callable[[dict[str, Any]], None] | None = None,
) -> BatchResult:
    """Check ``datasets``; append one JSON line per data set to ``output`` (stdout if None).

    Lines are written in completion order, each as soon as its data set is done. Without
    ``resume`` the output file is started afresh; with it, data sets that already have an ok
    line there are skipped (errored ones run again). ``progress(stage, done, total)`` counts
    data sets; ``on_line`` sees each new line after it is written. On KeyboardInterrupt (or any
    BaseException) pending work is cancelled, worker processes are ended and the exception
    propagates; every line already written is whole.
    """
    t0 = time.perf_counter()
    template = template.validated()
    names = [ds.name for ds in datasets]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise KcheckError(f"two data sets are named {dup[0]}; names must be unique")
    if resume and output is None:
        raise KcheckError("--resume needs -o FILE: the results to resume from")
    if jobs < 1:
        raise KcheckError("-j must be at least 1")
    if template.model_out is not None:
        raise KcheckError("a batch does not save models; run kcheck check --model-out")
    prior = read_results(output) if resume and output is not None else {}
    todo = [ds for ds in datasets if ds.name not in prior]
    workers, config = plan(template, jobs, len(todo))
    report = progress or _noop
    lines: dict[str, dict[str, Any]] = {}
    writer = LineWriter(output, append=resume)
    try:
        if workers == 1:
            results = _run_serial(todo, config, report)
        else:
            results = _run_parallel(todo, config, workers, report)
        with contextlib.closing(results):
            for line in results:
                writer.write(line)
                lines[line["name"]] = line
                if on_line is not None:
                    on_line(line)
    finally:
        writer.close()
    ordered = [lines[ds.name] if ds.name in lines else prior[ds.name] for ds in datasets]
    return BatchResult(
        lines=ordered,
        resumed={ds.name for ds in datasets if ds.name in prior},
        seconds=time.perf_counter() - t0,
        workers=workers,
    )


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

    def stage() -> str:
        names = [todo[i].name for i in sorted(running.values())]
        if not names:
            return f"{finished}/{n} done"
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        return f"{finished}/{n} done; checking {', '.join(names[:3])}{more}"

    try:
        while pending or running:
            while pending and len(running) < workers:
                i = pending.popleft()
                running[pool.submit(task, todo[i], config)] = i
            report(stage(), finished, n)
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
            report(stage(), finished, n)
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
