"""Processes at the edges: what a signal to the process group leaves, how soon Ctrl-C stops
``kcheck.check``, and what kcheck says when memory or address space runs out.

* SIGTERM to the process group of ``kcheck batch -j 2`` (a terminal's job control, ``kill --
  -PGID``) ends every process kcheck started: its workers, its fork server and the resource
  tracker, which ignores SIGINT and SIGTERM by design and must be ended by kcheck itself.
* Ctrl-C in ``kcheck.check(..., jobs=1)`` raises KeyboardInterrupt within about a second
  (docs/python.md), also while a LIBLINEAR or LIBSVM call that runs for many seconds is under
  way in the calling thread.
* An address space too small to load numpy, or to allocate what the run needs, ends the
  command with one ``kcheck: error:`` line and exit 2, never a traceback.
* ``--max-rows auto`` keeps the process tree within ``--memory-limit`` while it samples a
  gzip bomb of short rows.

Every bound on time is "about a second" times :func:`runner.slowdown`; every wait is for an
event (a line, a process state), with a ceiling that only stops a hang.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from runner import (
    cpu_seconds,
    default_sigint,
    descendants,
    kcheck,
    one_error_line,
    slowdown,
    start_kcheck,
    tree_peak,
    wait_for,
)

from kcheck.io.data import write_libsvm

ROOT = Path(__file__).resolve().parent.parent
HEART = str(ROOT / "datasets" / "heart_scale")
#: The ``kcheck`` command ([project.scripts]) beside this interpreter: its worker processes
#: run the command's script again as they start, which ``python -m kcheck`` does not.
KCHECK_COMMAND = Path(sys.executable).with_name("kcheck")
#: "Within about a second", on an idle machine of this kind; a busy one gets as many times
#: more as it is slower now (runner.slowdown).
ABOUT_A_SECOND = 1.0


def dense(path: Path, rows: int, features: int, seed: int) -> Path:
    """Dense data with a quadratic boundary: every checker trains, degree-2's LIBLINEAR C
    search on the expanded rows for many seconds in one call."""
    rng = np.random.default_rng(seed)
    X = np.round(rng.standard_normal((rows, features)), 3)
    y = np.where((X[:, :3] ** 2).sum(axis=1) > 3, 1.0, -1.0)
    write_libsvm(str(path), y, X)
    return path


# --- a signal to the process group leaves no process --------------------------------------


def in_group(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` that have not ended (zombies aside): an
    orphaned worker is adopted by init, so it is no descendant of kcheck's any more."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(entry))
    return found


def busy_workers(pid: int, cpu: float) -> bool:
    """Whether two processes below ``pid``'s children (the workers the fork server started)
    have each used ``cpu`` CPU seconds: both are well into a check."""
    children = descendants(pid)
    grandchildren = children - {c for c in children if _parent(c) == pid}
    return sum(cpu_seconds(w) >= cpu for w in grandchildren) >= 2


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


@pytest.fixture(scope="module")
def two_long_data_sets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("batch")
    for seed in (1, 2):
        dense(d / f"set{seed}.svm", 8000, 20, seed)
    return d


def sigterm_to_the_group(args: list[str], cwd: Path) -> tuple[int, str, list[int]]:
    """Start the ``kcheck`` command on ``args`` in a process group of its own; once both of its
    workers are well into their checks, send SIGTERM to the group. Its exit code, its stderr,
    and the processes of the group still there about a second after it ended."""
    proc = start_kcheck(args, command=[str(KCHECK_COMMAND)], cwd=cwd)
    left: list[int] = []
    try:
        wait_for(
            lambda: proc.poll() is not None or busy_workers(proc.pid, 0.5),
            "both workers to be well into their checks",
        )
        assert proc.poll() is None, "the batch ended before the signal"
        os.killpg(proc.pid, signal.SIGTERM)
        wait_for(lambda: proc.poll() is not None, "kcheck to end")
        # A process left holds kcheck's stderr open: it is waited for before stderr is read.
        deadline = time.monotonic() + ABOUT_A_SECOND * slowdown()
        while in_group(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        left = in_group(proc.pid)
    finally:
        for pid in in_group(proc.pid):  # what the run left: not for the next one
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=600)
    return proc.returncode, err.decode("utf-8", "replace"), left


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timing
def test_sigterm_to_the_process_group_of_a_parallel_batch_leaves_no_process(
    two_long_data_sets: Path, tmp_path: Path
) -> None:
    """``setsid kcheck batch -j 2 DIR -o b.jsonl & kill -TERM -- -$!``: exit 143 and the one
    line, but in about one run in two the resource tracker and both workers stayed, adopted
    by init. The workers of the ``kcheck`` command had imported its script again, with its
    start-up SIGTERM handler, which a worker inside a LIBLINEAR call does not run; kcheck
    then stopped them (SIGSTOP) and killed them through handles that the pool's own thread
    had marked ended once the fork server had died of the same SIGTERM (when it got there
    first); the tracker ignores SIGTERM and waited for them. Now no process of the group is
    left about a second after kcheck has ended; five runs catch a one-in-two failure."""
    if not KCHECK_COMMAND.exists():
        pytest.skip(f"{KCHECK_COMMAND} is not installed")
    for run in range(5):
        out = tmp_path / f"b{run}.jsonl"
        args = ["batch", "-q", "-j", "2", "--exact", "never", str(two_long_data_sets)]
        code, err, left = sigterm_to_the_group([*args, "-o", str(out)], tmp_path)
        assert (code, err) == (143, "kcheck: interrupted\n"), f"run {run}: exit {code}\n{err}"
        assert not left, f"run {run}: processes of kcheck's left: {left}"


# --- Ctrl-C in kcheck.check(jobs=1) --------------------------------------------------------

_ONE_JOB_CHECK = """
import sys
import numpy as np
import kcheck

rng = np.random.default_rng(0)
X = np.round(rng.standard_normal((12_000, 20)), 3)
y = np.where((X[:, :3] ** 2).sum(axis=1) > 3, 1, -1)
kcheck.check(X[:300], y[:300], jobs=1, checkers="multilinear", exact="never")  # imports done
# The checkers to run (all by default): "rbfsvm" alone reaches the RBF SVM's calls without
# the seconds of degree-2 before them.
only = {"checkers": sys.argv[1]} if len(sys.argv) > 1 else {}
last = [None]

def progress(event):
    if event.stage != last[0]:
        last[0] = event.stage
        print("stage:", event.stage, flush=True)

try:
    kcheck.check(X, y, jobs=1, progress=progress, **only)
    print("finished", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""

#: Where the Ctrl-C lands: a stage (the start of its name), the CPU seconds the process has
#: used since it began, and the checkers the check runs (all, or the RBF SVM alone: the same
#: LIBSVM calls as after degree-2, reached some 9 CPU seconds sooner). degree-2's LIBLINEAR C
#: search on the expanded rows runs for 5 s and more in one call; the RBF SVM's LIBSVM
#: cross-validations for a second or less each. One moment inside each kind of call:
#: degree-2's LIBLINEAR C search, the RBF SVM's LIBSVM grid and its LIBSVM training on the
#: sample. (Three more moments inside degree-2's search repeated the first and found nothing
#: it did not.)
_MOMENTS = [
    ("degree-2", 1.5, None),
    ("RBF SVM on the training split", 0.5, "rbfsvm"),
    ("RBF SVM: training on a sample", 0.5, "rbfsvm"),
]


class Lines:
    """The lines a process writes to its stdout pipe, each waited for with a ceiling."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.pending = b""

    def next(self, ceiling: float = 300.0) -> str:
        """The next line ("" once the process has closed its stdout)."""
        deadline = time.monotonic() + ceiling
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"waited {ceiling:g}s for a line")
            if select.select([self.fd], [], [], left)[0]:
                chunk = os.read(self.fd, 4096)
                if not chunk:
                    line, self.pending = self.pending, b""
                    return line.decode()
                self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode() + "\n"


def interrupted_at(
    script: Path, stage: str, after: float, checkers: str | None = None
) -> tuple[str, float, str]:
    """Run ``script`` (on ``checkers``, or all); once it has said it began ``stage`` and used
    ``after`` more CPU seconds, send SIGINT (to it alone, as a notebook's "interrupt the
    kernel" does). Its next line that is no stage's, the seconds until that line came, and its
    stderr."""
    proc = subprocess.Popen(
        [sys.executable, str(script), *([checkers] if checkers else [])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=script.parent,
        preexec_fn=default_sigint,  # not ignored, as where pytest ran as a shell's background job
    )
    lines = Lines(proc)
    try:
        line = lines.next()
        while line and not line.startswith(f"stage: {stage}"):
            line = lines.next()
        assert line, f"the check ended before {stage!r}"
        c0 = cpu_seconds(proc.pid)
        wait_for(
            lambda: proc.poll() is not None or cpu_seconds(proc.pid) >= c0 + after,
            f"{after} CPU seconds into {stage!r}",
        )
        assert proc.poll() is None, f"the check ended during {stage!r}"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        line = lines.next()
        while line.startswith("stage: "):
            line = lines.next()
        seconds = time.monotonic() - sent
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return line, seconds, err.decode("utf-8", "replace")


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timing
def test_ctrl_c_in_a_one_job_check_raises_within_about_a_second(tmp_path: Path) -> None:
    """Python runs a signal's handler in the main thread only, between two bytecodes: a
    Ctrl-C inside a LIBLINEAR or LIBSVM call of the calling thread took effect once the call
    returned (the C search of degree-2 on 12,000 expanded rows: 5 s and more; up to 3.6 s,
    5.5 s once, was seen on a busy machine, one run in two). The call now runs in a thread
    of its own while the main thread waits. Three Ctrl-Cs, each inside such a call."""
    script = tmp_path / "one_job.py"
    script.write_text(_ONE_JOB_CHECK)
    for stage, after, checkers in _MOMENTS:
        line, seconds, err = interrupted_at(script, stage, after, checkers)
        assert line == "interrupted\n", f"{stage} +{after}: {line!r}\n{err}"
        assert "Traceback" not in err, err
        bound = ABOUT_A_SECOND * slowdown()
        assert seconds < bound, f"{after} CPU s into {stage!r}: {seconds:.1f} s > {bound:.1f} s"


# --- out of memory, out of address space -------------------------------------------------

#: An address space in which the Python interpreter and the command line start but numpy
#: cannot load ("failed to map segment from shared object"), and one in which numpy loads but
#: the run then finds no room: an import fails (numpy's, or a binding's C library) or an
#: allocation does.
NO_ROOM_FOR_NUMPY = 60 * 2**20
LITTLE_ROOM = 150 * 2**20


@pytest.mark.slow
def test_no_room_for_numpy_or_the_run_is_one_line() -> None:
    """Under ``ulimit -v 150M``, ``kcheck check -j 2`` ended with numpy's ImportError and its
    traceback (exit 1) one run in two, "out of memory" in the other; under 60M every time. A
    binding whose C library found no room went on to a system LIBLINEAR and a traceback about
    a missing symbol. All are one line and exit 2 now; six runs at 150M catch a one-in-two
    failure."""
    for limit in [NO_ROOM_FOR_NUMPY] + 6 * [LITTLE_ROOM]:
        r = kcheck("check", HEART, "-q", "-j", "2", address_space=limit)
        line = one_error_line(r, "out of memory", stages=False)
        assert "Traceback" not in r.stderr, (limit, r.describe())
        if limit == NO_ROOM_FOR_NUMPY:
            assert "while loading numpy" in line, line


#: hashlib's C modules missing, as where the address space had no room for them: hashlib,
#: imported on the way to numpy.random, logs a traceback for each hash it lacks and goes on.
NO_HASHES = """
import sys
for name in ("_hashlib", "_sha3", "_blake2"):
    sys.modules[name] = None
sys.argv = ["kcheck", *sys.argv[1:]]
from kcheck.__main__ import main
main()
"""


def test_hashes_that_did_not_load_say_nothing() -> None:
    """kcheck hashes nothing: a page of hashlib's tracebacks (seen under ``ulimit -v 150M``)
    buried the one line that said what failed, or a run that went on to its end."""
    r = subprocess.run(
        [sys.executable, "-c", NO_HASHES, "check", HEART, "-q"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert (r.returncode, r.stderr) == (0, ""), r.stderr[-2000:]


#: The SystemError CPython leaves where an import ran out of address space without a
#: MemoryError, raised where the check starts, under a limit (``LIMIT``: an address-space cap
#: far above what the run needs, or none).
SILENT_NO_ROOM = """
import resource, sys
limit = sys.argv.pop(1)
if limit != "none":
    resource.setrlimit(resource.RLIMIT_AS, (int(limit), resource.RLIM_INFINITY))
import kcheck.pipeline

def run(*args, **kwargs):
    raise SystemError("error return without exception set")

kcheck.pipeline.run = run
sys.argv = ["kcheck", *sys.argv[1:]]
from kcheck.__main__ import main
main()
"""


@pytest.mark.parametrize("limit", [str(64 * 2**30), "none"])
def test_a_silent_failure_for_room_is_out_of_memory_only_under_a_limit(limit: str) -> None:
    """Under ``ulimit -v`` the loader can fail without a MemoryError (one run in two at 150M
    under coverage): that is out of memory, one line. Without a limit the same error is a bug
    and keeps its traceback."""
    r = subprocess.run(
        [sys.executable, "-c", SILENT_NO_ROOM, limit, "check", HEART, "-q", "-j", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if limit == "none":
        assert r.returncode == 1 and r.stderr.rstrip().endswith(
            "SystemError: error return without exception set"
        ), r.stderr[-2000:]
    else:
        assert (r.returncode, r.stderr) == (
            2,
            "kcheck: error: out of memory; try a smaller --memory-limit or fewer --jobs\n",
        ), r.stderr[-2000:]


# --- --max-rows auto on a gzip bomb keeps the process tree to --memory-limit ----------------


def short_row_bomb(path: Path, gigabytes: float) -> Path:
    """A gzip file of rows of one value each, two classes, that expands to ``gigabytes``: one
    compressed member of about 400 kB of rows, repeated (gzip reads concatenated members as
    one stream), so it is written at once."""
    rows = [f"{1 if k % 2 else -1} {k % 3 + 1}:{(k % 7 + 1) / 8:g}\n" for k in range(4096)]
    block = "".join(rows).encode() * 10
    member = gzip.compress(block, compresslevel=9)
    with open(path, "wb") as f:
        for _ in range(int(gigabytes * 2**30 / len(block))):
            f.write(member)
    return path


@pytest.mark.slow
def test_max_rows_auto_keeps_the_process_tree_to_the_memory_limit_on_a_gzip_bomb(
    tmp_path: Path,
) -> None:
    """``--max-rows auto --memory-limit 150M --time-limit 10`` on gigabytes of short rows:
    the read is stopped by the time limit, and the process tree peaked 225 MB past the
    interpreter's own. The sample's target is in CSR bytes, which hold less per row than the
    pool's estimate, so the pool was always over its bound and was settled at every chunk,
    each settle holding a rank and two gathers per pooled row beside it (and the read took
    minutes). The pool now settles once it outgrows the target's rows, holds 16 bytes a row
    beside the values, and a settle holds the order and a byte a row (126 MB past it). Ten
    seconds of reading settle the pool many times over: the peak after 30 s was the same."""
    bomb = short_row_bomb(tmp_path / "bomb.svm.gz", 4.0)
    code, baseline, err = tree_peak(
        [
            "-c",
            "import kcheck.cli, kcheck.pipeline, kcheck.modelfiles.export, kcheck.checkers.exact",
        ]
    )
    assert code == 0, err
    limit = 150 * 2**20
    code, peak, err = tree_peak(
        [
            "-m",
            "kcheck",
            "check",
            str(bomb),
            "-q",
            "-j",
            "2",
            "--max-rows",
            "auto",
            "--memory-limit",
            "150M",
            "--time-limit",
            "10",
        ]
    )
    assert code == 2, err
    assert err.splitlines() == [
        f"kcheck: error: {bomb}: the time limit (--time-limit 10) passed while reading the "
        "data, so nothing was decided"
    ]
    assert peak - baseline <= limit, (peak - baseline) / 2**20


def test_an_interruptible_call_gives_its_value_and_its_error_to_the_caller() -> None:
    """The main thread waits on the call's thread: what the call returns or raises is the
    caller's, as if it had run in the calling thread."""
    from kcheck.bindings import c_runtime

    assert c_runtime.interruptible(lambda: 41 + 1) == 42

    def fails() -> None:
        raise ValueError("the binding said no")

    with pytest.raises(ValueError, match="the binding said no"):
        c_runtime.interruptible(fails)


# --- a TMPDIR too long for the fork server's socket --------------------------------------------


@pytest.mark.slow
def test_workers_start_under_a_tmpdir_too_long_for_a_unix_socket(tmp_path: Path) -> None:
    """The fork server's socket lives in a folder under TMPDIR: past about 70 characters its
    path no longer fits a Unix socket's, and every run that started workers ended with
    "kcheck: error: cannot write or read: AF_UNIX path too long"."""
    long = tmp_path / ("d" * 60) / ("e" * 40)
    long.mkdir(parents=True)
    assert len(str(long)) + 40 > 107
    env = {**os.environ, "TMPDIR": str(long)}
    # Two data sets with two jobs: a worker process for each, started by the fork server (a
    # verify of fourclass starts the same fork server for its grid, in five times as long).
    fourclass = str(ROOT / "datasets" / "fourclass")
    quick = ["--checkers", "multilinear", "--exact", "never"]
    r = subprocess.run(
        [sys.executable, "-m", "kcheck", "batch", HEART, fourclass, *quick, "-q", "-j", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(lines) == 2, r.stdout
    assert all(x["status"] == "ok" and x["verdict"] in ("linear", "kernel") for x in lines)
    assert list(long.iterdir()) == []  # nothing of the run's is left there
