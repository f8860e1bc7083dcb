"""Checking the data sets: in this process, in a pool of worker processes, or on a Dask cluster.
:func:`run_batch` writes each line as soon as its data set is done
(:class:`~kcheck.batch.writer.LineWriter`); ``resume`` reuses a saved line only while data, test
file, options and kcheck version are the same (:func:`~kcheck.batch.resume.resume_key`). Nothing
prints; progress goes through callbacks."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcheck.batch.discovery import STDIN, DataSet
from kcheck.batch.lines import check_one, error_line, error_message, skip_line
from kcheck.batch.progress import (
    BatchProgress,
    BatchReport,
    all_done,
    in_flight,
    reporter,
    starting,
    step,
)
from kcheck.batch.resume import reusable, with_key
from kcheck.batch.writer import LineWriter
from kcheck.config import CheckConfig
from kcheck.defaults import Event, Progress
from kcheck.errors import KcheckError
from kcheck.parallel.cluster import Scheduler, Session, same_files, shared_path
from kcheck.parallel.workers import end_pool, process_pool


class CheckCancelled(BaseException):
    """Raised inside a check running in a thread once the batch has been interrupted."""


@dataclass
class BatchResult:
    """Every line of the batch: skipped files' first, then each data set's in discovery order."""

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
    """Worker processes to start and each check's config. ``jobs`` is the CPU budget: one worker
    keeps ``template.jobs``; several divide the memory budget (``template.memory_limit`` or half of
    available memory) and the CPUs equally (one each with enough data sets)."""
    workers = max(1, min(jobs, n_datasets))
    if jobs <= 1:
        return 1, template
    memory = template.memory_bytes
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
    on_progress: BatchReport | None = None,
    on_line: Callable[[dict[str, Any]], None] | None = None,
    scheduler: str | None = None,
    shared_fs: bool | None = None,
) -> BatchResult:
    """Check ``datasets``; write one JSON line per data set and per skipped file to ``output``.

    ``output``: a file (:class:`LineWriter`), ``"-"`` for stdout, or None. Skipped files' lines come
    first, then each data set's when done. ``resume`` (file output only) carries over a data set's
    latest ok line in ``FILE`` or ``FILE.partial`` with a matching resume key. ``strict`` makes
    skipped files error lines. ``on_progress`` gets :class:`~kcheck.batch.progress.BatchProgress`
    reports, ``progress(stage, done, total)`` the same as text (counts of data sets); ``on_line``
    each new line after writing. On any BaseException pending work is cancelled, workers ended, and
    it propagates; written lines are whole.

    ``scheduler`` (``tcp://host:port`` or ``local:N``) runs one task per data set on Dask
    (:func:`_run_cluster`), same lines. ``shared_fs``: workers read files at their paths (True) or
    get bytes (False); None: decided per data set."""
    t0 = time.perf_counter()
    template = template.validated()
    _refuse(datasets, template, jobs=jobs, output=output, resume=resume, scheduler=scheduler)
    report = reporter(progress, on_progress)
    session: Session | None = None
    writer: LineWriter | None = None
    workers = 0
    try:
        writer = LineWriter(output) if output is not None else None
        if scheduler is not None and any(ds.train != STDIN for ds in datasets):
            report(step(f"connecting to {scheduler}"))
            session = Session(scheduler, memory_limit=template.memory_limit)
            workers = session.slots
        head = [skip_line(path, reason, template, strict=strict) for path, reason in skipped]
        reused, stale = _reusable(writer, datasets, template, report) if resume else ({}, set())
        if writer is not None:
            writer.start([*head, *(reused[ds.name] for ds in datasets if ds.name in reused)])
        todo = [ds for ds in datasets if ds.name not in reused]
        runs = (
            _run(todo, template, jobs, report)
            if session is None
            else _run_on(session, todo, template, report, shared_fs)
        )
        lines = _written(runs, template, writer, on_line)
        if writer is not None:
            writer.commit()
    finally:
        if writer is not None:
            writer.close()
        if session is not None:
            session.close()
    if session is None:
        workers = plan(template, jobs, len(todo))[0]
    ordered = [lines[ds.name] if ds.name in lines else reused[ds.name] for ds in datasets]
    return BatchResult(
        lines=[*head, *ordered],
        resumed=set(reused),
        seconds=time.perf_counter() - t0,
        workers=workers,
        stale=stale,
    )


def _refuse(
    datasets: Sequence[DataSet],
    template: CheckConfig,
    *,
    jobs: int,
    output: str | None,
    resume: bool,
    scheduler: str | None,
) -> None:
    """KcheckError for a batch that cannot run as asked, before anything is written."""
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


def _reusable(
    writer: LineWriter | None,
    datasets: Sequence[DataSet],
    template: CheckConfig,
    report: BatchReport,
) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """The saved ok lines still valid, by name; and the names of those no longer valid."""
    reused: dict[str, dict[str, Any]] = {}
    stale: set[str] = set()
    if writer is None:
        return reused, stale
    prior = writer.prior(template.memory_limit)
    saved = [ds for ds in datasets if prior.get(ds.name, {}).get("status") == "ok"]
    for i, ds in enumerate(saved):
        report(step(f"comparing saved results with the data: {ds.name}", i, len(saved), "results"))
        line = prior[ds.name]
        if reusable(line, ds, template):
            reused[ds.name] = line
        else:
            stale.add(ds.name)
    return reused, stale


def _written(
    runs: Iterable[dict[str, Any]],
    template: CheckConfig,
    writer: LineWriter | None,
    on_line: Callable[[dict[str, Any]], None] | None,
) -> dict[str, dict[str, Any]]:
    """Each new line, keyed for resume, written and shown as it comes; all of them by name."""
    lines: dict[str, dict[str, Any]] = {}
    for line in runs:
        line = with_key(line, template)
        if writer is not None:
            writer.write(line)
        lines[line["name"]] = line
        if on_line is not None:
            on_line(line)
    return lines


def _run(
    todo: Sequence[DataSet], template: CheckConfig, jobs: int, report: BatchReport
) -> Generator[dict[str, Any], None, None]:
    """Every data set's line in completion order; one on stdin is checked first, here."""
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


def _run_serial(
    todo: Sequence[DataSet], config: CheckConfig, report: BatchReport
) -> Generator[dict[str, Any], None, None]:
    """One data set at a time in a worker thread, so Ctrl-C is seen at once (ctypes swallows it
    during LIBLINEAR in the main thread); the thread stops at its next progress report."""
    cancelled = threading.Event()
    n = len(todo)
    for i, ds in enumerate(todo):
        prefix = f"[{i + 1}/{n}] {ds.name}"

        def relay(event: Event, prefix: str = prefix) -> None:
            if cancelled.is_set():
                raise CheckCancelled()
            if event.ended is None:  # a stage's start moves the bar, not its end
                report(step(f"{prefix}: {event.stage}", event.done, event.total, event.unit))

        box: dict[str, Any] = {}

        def target(ds: DataSet = ds, relay: Progress = relay, box: dict[str, Any] = box) -> None:
            try:
                box["line"] = check_one(ds, config, relay)
            except BaseException as e:  # noqa: BLE001 - re-raised in the calling thread
                box["error"] = e

        report(starting(prefix, i, n))
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
    report(all_done(n))


def _new_pool(workers: int) -> ProcessPoolExecutor:
    return process_pool(workers, ["kcheck.pipeline"])


def _end_pool(pool: ProcessPoolExecutor) -> None:
    end_pool(pool)


_DIED = (
    "the worker process died while checking this data set (killed, for example for lack "
    "of memory, or crashed); try a lower -j or --memory-limit"
)


def _in_flight(todo: Sequence[DataSet], running: Iterable[int], finished: int) -> BatchProgress:
    """The report of a batch with several checks at once: the count and the names running."""
    return in_flight([todo[i].name for i in sorted(running)], finished, len(todo))


def _run_parallel(
    todo: Sequence[DataSet],
    config: CheckConfig,
    workers: int,
    report: BatchReport,
    task: Callable[[DataSet, CheckConfig], dict[str, Any]] = check_one,
) -> Generator[dict[str, Any], None, None]:
    """At most ``workers`` data sets in flight, so every submitted one is running. A dead worker
    (OOM killer, crash) breaks the pool and fails all in flight; those are rerun one at a time so
    only the one that kills its worker alone gets the error line."""
    flight = _Flight(todo, config, workers, report, task)
    try:
        while flight.pending or flight.running:
            yield from flight.round()
        yield from flight.suspects_alone()
        report(all_done(len(todo)))
    finally:
        _end_pool(flight.pool)


@dataclass(eq=False)
class _Flight:
    """:func:`_run_parallel`'s state: waiting, in flight, suspected, finished, and the pool."""

    todo: Sequence[DataSet]
    config: CheckConfig
    workers: int
    report: BatchReport
    task: Callable[[DataSet, CheckConfig], dict[str, Any]]
    suspects: list[int] = field(default_factory=list)
    running: dict[Future[dict[str, Any]], int] = field(default_factory=dict)
    finished: int = 0

    def __post_init__(self) -> None:
        self.pending = deque(range(len(self.todo)))
        self.pool = _new_pool(self.workers)

    def round(self) -> Generator[dict[str, Any], None, None]:
        """Fill the free workers and wait a moment: the lines done, a broken pool replaced."""
        broken = self._submit()
        self.report(_in_flight(self.todo, self.running.values(), self.finished))
        done, _ = wait(list(self.running), timeout=0.5, return_when=FIRST_COMPLETED)
        for f in sorted(done, key=lambda f: self.running[f]):
            i = self.running.pop(f)
            try:
                line = f.result()
            except BrokenProcessPool:
                broken = True
                self.suspects.append(i)
                continue
            except Exception as e:  # noqa: BLE001 - e.g. a result that could not be sent
                line = error_line(self.todo[i], self.config, error_message(e), 0.0)
            self.finished += 1
            yield line
        if broken:
            yield from self._after_break()

    def _submit(self) -> bool:
        """Submit waiting data sets while a worker is free; True where the pool is broken."""
        while self.pending and len(self.running) < self.workers:
            i = self.pending.popleft()
            try:
                self.running[self.pool.submit(self.task, self.todo[i], self.config)] = i
            except BrokenProcessPool:
                # A worker died before its future said so: the futures in flight tell which; wait.
                self.pending.appendleft(i)
                return True
        return False

    def _after_break(self) -> Generator[dict[str, Any], None, None]:
        """Lines of data sets finished in a broken pool, the others suspected, and a new pool."""
        wait(list(self.running))
        for f, i in sorted(self.running.items(), key=lambda kv: kv[1]):
            if f.exception() is None:
                self.finished += 1
                yield f.result()
            else:
                self.suspects.append(i)
        self.running.clear()
        _end_pool(self.pool)
        self.pool = _new_pool(self.workers)

    def suspects_alone(self) -> Generator[dict[str, Any], None, None]:
        """The suspects again one at a time in a one-worker pool, to find the one that kills it."""
        if self.suspects:
            _end_pool(self.pool)
            self.pool = _new_pool(1)
        for i in sorted(self.suspects):
            line = self._alone(i)
            self.finished += 1
            yield line

    def _alone(self, i: int) -> dict[str, Any]:
        """Data set ``i``'s line from the pool of one: its error line if its worker dies."""
        self.running[self.pool.submit(self.task, self.todo[i], self.config)] = i
        self.report(_in_flight(self.todo, self.running.values(), self.finished))
        f = next(iter(self.running))
        while not f.done():
            wait([f], timeout=0.5)
        self.running.clear()
        try:
            return f.result()
        except BrokenProcessPool:
            line = error_line(self.todo[i], self.config, _DIED, 0.0)
            _end_pool(self.pool)
            self.pool = _new_pool(1)
            return line
        except Exception as e:  # noqa: BLE001
            return error_line(self.todo[i], self.config, error_message(e), 0.0)


# --- on a Dask cluster ---------------------------------------------------------------------


def cluster_config(template: CheckConfig, scheduler: Scheduler) -> CheckConfig:
    """Each cluster check's config: one job (daemonic Dask workers have no pools) and this machine's
    memory budget, divided among ``local:N``'s workers as ``-j N`` divides it."""
    memory = template.memory_bytes
    if scheduler.local_workers is not None:
        memory = max(1, memory // scheduler.local_workers)
    return dataclasses.replace(template, jobs=1, memory_limit=memory)


def _run_on(
    session: Session,
    todo: Sequence[DataSet],
    template: CheckConfig,
    report: BatchReport,
    shared_fs: bool | None,
) -> Generator[dict[str, Any], None, None]:
    """Standard input here (as :func:`_run` does), every other data set on the cluster."""
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
    """Per data set, whether workers read its files at their paths (else get the bytes).
    ``shared_fs`` None: when one worker sees every file with this machine's path, size and mtime.
    Unreadable files here go by path, so the worker reports them as a local check would."""
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
    """On a worker: check ``ds`` and return its line as a local check would write it. Files are read
    at ``paths`` (shared filesystem) or from ``contents`` copied under their own names into a
    temporary directory; paths in the line are turned back into the user's."""
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


def _run_cluster(
    todo: Sequence[DataSet],
    config: CheckConfig,
    session: Session,
    report: BatchReport,
    shared_fs: bool | None,
    task: Callable[[DataSet, CheckConfig], dict[str, Any]] = check_one,
) -> Generator[dict[str, Any], None, None]:
    """One task per data set, as many in flight as the cluster has worker threads (bytes are read
    and sent only when a worker is ready). Dask reruns a dead worker's task; one that killed its
    worker three times gets an error line and the batch goes on. On an interrupt tasks are cancelled
    (:meth:`Session.cancel`)."""
    n = len(todo)
    report(step(f"looking for {n} data sets' files on the workers", 0, n, "files"))
    by_path = _by_path(todo, session, shared_fs)
    pending = deque(range(n))
    running: dict[Any, int] = {}
    finished = 0

    def submit(i: int) -> Any:
        ds = todo[i]
        files = _files(ds)
        contents = None if by_path[i] else [session.scatter(Path(f).read_bytes()) for f in files]
        paths = [os.path.abspath(f) for f in files]
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
            report(_in_flight(todo, running.values(), finished))
            for i, line, error in session.finished(running, timeout=0.5):
                if error is not None:
                    line = error_line(todo[i], config, error_message(error), 0.0)
                finished += 1
                yield line
        report(all_done(n))
    finally:
        session.cancel(running)
