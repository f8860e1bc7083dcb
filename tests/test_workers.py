"""Running a call until a deadline (kcheck/parallel/workers.py): in-process without one, in a worker
process that is killed when it passes."""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runner import slowdown

from kcheck.errors import KcheckError, TimeLimitReached
from kcheck.parallel import workers


def _write_pid_and_sleep(path: str, seconds: float) -> None:
    """Record this process's id, then block (as an uninterruptible library call would)."""
    Path(path).write_text(str(os.getpid()))
    time.sleep(seconds)


def _pid_and_sum(a: int, b: int) -> tuple[int, int]:
    return os.getpid(), a + b


def _fail(message: str) -> None:
    raise KcheckError(message)


def _alive(pid: int) -> bool:
    """Whether ``pid`` names a live (not zombie) process, from /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def _wait_gone(pid: int, seconds: float = 120.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return not _alive(pid)


@pytest.fixture
def warm_worker() -> None:
    """Start the fork server first, so that a short deadline measures the call, not that."""
    workers.run_until(time.perf_counter() + 60, _pid_and_sum, 0, 0)


def test_without_a_deadline_the_call_runs_in_this_process() -> None:
    seen: list[int] = []

    def local(x: int) -> int:  # not picklable: only an in-process call can run it
        seen.append(os.getpid())
        return x * 2

    assert workers.run_until(None, local, 21) == 42
    assert seen == [os.getpid()]


def test_without_a_deadline_errors_propagate_unchanged() -> None:
    with pytest.raises(KcheckError, match="^bad input$"):
        workers.run_until(None, _fail, "bad input")


def test_a_generous_deadline_returns_the_result_from_a_worker() -> None:
    before = set(multiprocessing.active_children())
    pid, total = workers.run_until(time.perf_counter() + 60, _pid_and_sum, 2, 3)
    assert total == 5
    assert pid != os.getpid()  # it really ran in a worker process
    assert _wait_gone(pid)
    assert set(multiprocessing.active_children()) <= before


def test_a_worker_error_is_raised_in_the_caller() -> None:
    with pytest.raises(KcheckError, match="^from the worker$"):
        workers.run_until(time.perf_counter() + 60, _fail, "from the worker")


@pytest.mark.timing
def test_a_passed_deadline_stops_a_long_call_and_leaves_no_process(
    tmp_path: Path, warm_worker: None
) -> None:
    pid_file = tmp_path / "pid"
    before = set(multiprocessing.active_children())
    factor = slowdown()  # time enough for the worker to start, however busy the machine
    t0 = time.perf_counter()
    with pytest.raises(TimeLimitReached):
        workers.run_until(t0 + 1.0 * factor, _write_pid_and_sleep, str(pid_file), 600.0)
    # The worker started (it wrote its id) and was ended: nothing is left running.
    assert pid_file.exists(), "the worker never started"
    pid = int(pid_file.read_text())
    assert pid != os.getpid()
    assert _wait_gone(pid), f"worker {pid} still runs after the deadline"
    assert set(multiprocessing.active_children()) <= before
    # It returned long before the 600 s call would have.
    assert time.perf_counter() - t0 < 300


def test_a_deadline_already_past_starts_nothing(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with pytest.raises(TimeLimitReached):
        workers.run_until(time.perf_counter() - 1.0, _write_pid_and_sleep, str(pid_file), 60.0)
    assert not pid_file.exists()


@pytest.mark.timing
def test_stoppable_raises_stopped(tmp_path: Path, warm_worker: None) -> None:
    before = set(multiprocessing.active_children())
    deadline = time.perf_counter() + 0.5 * slowdown()
    with pytest.raises(workers.Stopped):
        workers.stoppable(_write_pid_and_sleep, str(tmp_path / "p"), 600.0, deadline=deadline)
    # Stopped however far the worker got (on a busy machine it may not have started): no
    # process of the call is left.
    pid_file = tmp_path / "p"
    if pid_file.exists() and pid_file.read_text():
        assert _wait_gone(int(pid_file.read_text()))
    assert set(multiprocessing.active_children()) <= before


def _state(pid: int) -> str:
    """The process state letter in /proc (R, S, T stopped, Z zombie, ...)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.mark.timing
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_end_pool_stops_workers_before_the_shutdown_then_kills_them(tmp_path: Path) -> None:
    """The shutdown drops the pool's queues, whose semaphores are unlinked once collected; a
    worker still reading its start-up data then printed a traceback after "interrupted". So
    the workers are stopped before it, then killed (a stopped process holds SIGTERM)."""
    pool = workers.process_pool(1, ["kcheck.parallel.workers"])
    marker = tmp_path / "pid"
    future = pool.submit(_write_pid_and_sleep, str(marker), 600.0)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (marker.exists() and marker.read_text()):
        time.sleep(0.02)
    pid = int(marker.read_text())
    seen: list[str] = []
    shutdown = pool.shutdown

    def recording_shutdown(*args: object, **kwargs: object) -> None:
        seen.append(_state(pid))
        shutdown(*args, **kwargs)  # type: ignore[arg-type]

    pool.shutdown = recording_shutdown  # type: ignore[method-assign]
    t0 = time.monotonic()
    workers.end_pool(pool, grace=600.0)
    assert seen == ["T"], f"worker state at shutdown: {seen}"
    assert time.monotonic() - t0 < 300.0, "a stopped worker must be killed, not waited for"
    assert _wait_gone(pid)
    # The pool's own thread then fails the running task (its worker died).
    concurrent.futures.wait([future], timeout=600)
    assert future.done()


def test_background_returns_the_value_from_another_process_and_ends_it() -> None:
    job = workers.Background(_pid_and_sum, 2, 3)
    pid, total = job.result()
    assert total == 5 and pid != os.getpid()
    assert _wait_gone(pid)


def test_background_raises_the_calls_error_in_the_caller() -> None:
    with pytest.raises(KcheckError, match="bad row"):
        workers.Background(_fail, "bad row").result()


@pytest.mark.timing
def test_cancelling_a_background_call_ends_its_worker_at_once(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    job = workers.Background(_write_pid_and_sleep, str(pid_file), 600)
    end = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < end, "the worker never started"
        time.sleep(0.02)
    pid = int(pid_file.read_text())
    t0 = time.monotonic()
    job.cancel()
    assert _wait_gone(pid) and time.monotonic() - t0 < 300


def _size(a: object) -> int:
    return int(getattr(a, "nbytes", 0))


def test_background_hands_its_arguments_over_without_a_copy() -> None:
    """The arguments' arrays go to the worker as they are: no pickled copy of them exists in
    this process, neither while the constructor sends them nor after (the worker holds its own
    copy)."""
    import tracemalloc

    import numpy as np

    data = np.ones(40 * 2**20 // 8)  # 40 MB
    tracemalloc.start()
    try:
        job = workers.Background(_size, data)
        held, sending = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        after = np.ones(40 * 2**20 // 8)
        time.sleep(0.2)  # a background sender, had there been one, would pickle meanwhile
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert job.result() == data.nbytes == after.nbytes
    assert held < 4 * 2**20 and sending < 4 * 2**20
    assert peak < 48 * 2**20


def _burn(seconds: float) -> float:
    """Spin until this process has used ``seconds`` of CPU; the CPU seconds it used."""
    c0 = time.process_time()
    while time.process_time() - c0 < seconds:
        pass
    return time.process_time() - c0


# A fork server's workers are not this process's children: RUSAGE_CHILDREN never counts them,
# so each call's CPU seconds come back with its result. Before, a MultiLinear whose clusters
# trained in a pool showed a tenth of its CPU, and the check warned that its cost model was off.


def test_a_pool_tasks_cpu_seconds_count_as_this_process_s() -> None:
    with workers.process_pool(1, ["kcheck.parallel.workers"]) as pool:
        pool.submit(_pid_and_sum, 0, 0).result()  # the worker started, outside the measure
        c0 = workers.process_cpu_seconds()
        burned = pool.submit(_burn, 0.3).result()
        counted = workers.process_cpu_seconds() - c0
    assert burned >= 0.3
    assert counted >= burned - 0.01


def test_cancelling_a_pool_task_that_has_not_started_cancels_it() -> None:
    with workers.process_pool(1, ["kcheck.parallel.workers"]) as pool:
        running = pool.submit(_burn, 0.5)
        queued = [pool.submit(_burn, 5.0) for _ in range(4)]
        cancelled = [f.cancel() for f in queued]
        assert running.result() >= 0.5
    # Futures in the pool's call queue cannot be cancelled, and it holds max_workers +
    # EXTRA_QUEUED_CALLS; once the worker has taken the first task, that many queued ones may
    # be in it. Those are the first submitted: what can be cancelled is the rest, in order.
    in_call_queue = 1 + concurrent.futures.process.EXTRA_QUEUED_CALLS
    assert sum(cancelled) >= len(queued) - in_call_queue
    assert cancelled == sorted(cancelled)
    gone = [f for f, c in zip(queued, cancelled, strict=True) if c]
    assert all(f.cancelled() for f in gone)
    done, _ = concurrent.futures.wait(gone, timeout=60)
    assert len(done) == len(gone)


def test_a_pool_tasks_error_reaches_its_caller() -> None:
    with workers.process_pool(1, ["kcheck.parallel.workers"]) as pool:
        with pytest.raises(KcheckError, match="^in a pool$"):
            pool.submit(_fail, "in a pool").result()


def test_a_stoppable_calls_cpu_seconds_count_as_this_process_s() -> None:
    workers.run_until(time.perf_counter() + 600, _pid_and_sum, 0, 0)  # the fork server
    c0 = workers.process_cpu_seconds()
    burned = workers.run_until(time.perf_counter() + 600, _burn, 0.3)
    assert workers.process_cpu_seconds() - c0 >= burned - 0.01


def test_a_background_calls_cpu_seconds_are_its_own() -> None:
    """Beside this process's stages, its CPU belongs to none of them."""
    job = workers.Background(_burn, 0.3)
    assert job.cpu_seconds is None
    c0 = workers.process_cpu_seconds()
    burned = job.result()
    assert job.cpu_seconds is not None and job.cpu_seconds >= burned - 0.01
    assert workers.process_cpu_seconds() - c0 < burned


_FORK_SERVER_MASK = """
import multiprocessing.forkserver, os
from kcheck.parallel import workers
workers.Background(os.getpid).result()
pid = multiprocessing.forkserver._forkserver._forkserver_pid
status = open(f"/proc/{pid}/status").read()
print(next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:")))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_the_fork_server_starts_with_sigint_blocked() -> None:
    """The first worker of a run starts the resource tracker and then the fork server, which
    imports numpy for a second or more: a Ctrl-C then printed a KeyboardInterrupt traceback
    from it, as multiprocessing had unblocked SIGINT after starting the tracker. In a fresh
    interpreter, so that this process's fork server, already running, is not the one read."""
    r = subprocess.run(
        [sys.executable, "-c", _FORK_SERVER_MASK], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr
    mask = int(r.stdout.strip(), 16)
    assert mask & (1 << (signal.SIGINT - 1)), f"SigBlk {r.stdout.strip()}"
