"""Running ``python -m kcheck`` as users do, for the tests that need a real process.

One runner for every test that runs kcheck to its end: :func:`kcheck` (``run_kcheck`` under
it), with an optional address-space cap (a runaway allocation fails the test instead of
hurting the machine), an optional loss of root's file-access override (so permission errors
can be tested as root), and a hard timeout that kills the whole process group and fails the
test; :func:`run_kcheck_many` runs a corpus of short commands in one process. One assertion
for a refusal, :func:`one_error_line`. Runs that a test must watch or
interrupt start with :func:`start_kcheck`.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: The project's root: the working directory of a run unless a test gives another.
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Run:
    """A finished run: its exit code, stdout as bytes, stderr as text (an undecodable byte
    replaced; ``stderr_bytes`` as written)."""

    args: tuple[str, ...]
    code: int
    stdout: bytes
    stderr: str
    seconds: float = 0.0
    raw_stderr: bytes | None = None

    def describe(self) -> str:
        return (
            f"kcheck {' '.join(self.args)} -> exit {self.code} in {self.seconds:.1f}s\n"
            f"stderr: {self.stderr[-3000:]}"
        )

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)

    @property
    def returncode(self) -> int:
        """``code``, under subprocess's name."""
        return self.code

    @property
    def stdout_text(self) -> str:
        """stdout decoded (an undecodable byte replaced)."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_bytes(self) -> bytes:
        """stderr as the process wrote it."""
        return self.stderr.encode() if self.raw_stderr is None else self.raw_stderr


#: A log line of a stage starting or ending (kcheck.cli.ui.StageLog, off a terminal): progress,
#: not part of an error or of the result. It may wrap onto an indented line.
_STAGE_LINE = re.compile(r"^(kcheck: (?!error: |interrupted$|terminated$)|  \S)")


def without_stage_lines(stderr: str, *, keep_warnings: bool = False) -> list[str]:
    """The non-blank lines of ``stderr`` that are not a stage's log lines (nor warnings,
    unless ``keep_warnings``)."""

    def dropped(line: str) -> bool:
        warning = line.startswith("kcheck: warning: ")
        return bool(_STAGE_LINE.match(line)) and not (keep_warnings and warning)

    return [x for x in stderr.splitlines() if x.strip() and not dropped(x)]


def one_error_line(
    run_or_stderr: Run | str, *fragments: str, code: int | None = 2, stages: bool = True
) -> str:
    """Assert that a run was refused with one ``kcheck: error: ...`` line holding every
    fragment, and return that line.

    A :class:`Run` must have ended with ``code`` (given its stderr alone, the exit code is
    the caller's to check). Nothing may be a traceback. With ``stages``, the stages' log
    lines (off a terminal, the stages that ran before the error have them) may come with it,
    but no warning; without, the line is all of stderr.
    """
    run = run_or_stderr if isinstance(run_or_stderr, Run) else None
    stderr = run_or_stderr if run is None else run.stderr
    said = run.describe() if run is not None else stderr
    if run is not None and code is not None:
        assert run.code == code, said
    assert "Traceback" not in stderr, said
    lines = without_stage_lines(stderr, keep_warnings=True) if stages else stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kcheck: error: "), said
    for fragment in fragments:
        assert fragment in lines[0], said
    return lines[0]


def drop_file_access_override() -> None:
    """preexec_fn: run the child without root's right to read and write any file.

    Drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding set, so the program
    that is executed next gets neither, and file permissions apply to it as to any user.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def _preexec(address_space: int | None, drop_root: bool) -> Callable[[], None] | None:
    drop = drop_root and os.geteuid() == 0
    if address_space is None and not drop:
        return None

    def setup() -> None:
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        if drop:
            drop_file_access_override()

    return setup


#: One process running many commands through kcheck's entry point, each with fds 1 and 2 on
#: files of its own: argv lists come as JSON lines on stdin, and each result goes as a JSON
#: line to the file named first, written as each command ends, so a crash loses none before it.
_MANY = r"""
import json, os, sys, tempfile
from kcheck.cli.app import main

results = open(sys.argv[1], "w")
for line in sys.stdin:
    argv = json.loads(line)
    saved = os.dup(1), os.dup(2)
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush(); sys.stderr.flush()
    os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    finally:
        sys.stdout.flush(); sys.stderr.flush()
        os.dup2(saved[0], 1); os.dup2(saved[1], 2)
        os.close(saved[0]); os.close(saved[1])
    out.seek(0); err.seek(0)
    said = {"code": code, "stdout": out.read().hex(), "stderr": err.read().hex()}
    results.write(json.dumps(said) + "\n")
    results.flush()
"""


def run_kcheck_many(
    argvs: Sequence[Sequence[str]], *, address_space: int | None = None, timeout: float = 600
) -> list[Run]:
    """:func:`run_kcheck` for each of ``argvs``, for a corpus of short commands: one
    process runs them all through kcheck's entry point (a process start cost more than most of
    them). Where that process dies (a crash in a C loader), the command it was running and
    every one after it run again, each in its own process, so a crash is still that command's
    own result."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        said = Path(tmp) / "said.jsonl"
        proc = subprocess.run(
            [sys.executable, "-c", _MANY, str(said)],
            input="".join(json.dumps(list(a)) + "\n" for a in argvs),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
            preexec_fn=_preexec(address_space, False),
        )
        lines = said.read_text().splitlines() if said.exists() else []
    each = (time.monotonic() - t0) / max(len(lines), 1)
    runs = []
    for argv, line in zip(argvs, lines, strict=False):
        r = json.loads(line)
        raw = bytes.fromhex(r["stderr"])
        runs.append(
            Run(
                tuple(argv),
                r["code"],
                bytes.fromhex(r["stdout"]),
                raw.decode("utf-8", "replace"),
                each,
                raw,
            )
        )
    if len(runs) < len(argvs):
        assert proc.returncode != 0, proc.stderr[-3000:]
        runs += [
            run_kcheck(a, timeout=timeout, address_space=address_space) for a in argvs[len(runs) :]
        ]
    return runs


def run_kcheck(
    args: Sequence[str],
    *,
    timeout: float = 600,
    address_space: int | None = None,
    drop_root: bool = False,
    env: dict[str, str] | None = None,
    stdout: Any = subprocess.PIPE,
    stdin: Any = None,
    input: bytes | None = None,
    cwd: Path | None = None,
    during: Callable[[subprocess.Popen], None] | None = None,
) -> Run:
    """Run ``python -m kcheck ARGS`` (``input`` written to its stdin, else ``stdin`` is its
    stdin); kill it (and its children) and fail the test if it does not end within
    ``timeout`` seconds."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kcheck", *args],
        stdout=stdout,
        stdin=subprocess.PIPE if input is not None else stdin,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
        preexec_fn=_preexec(address_space, drop_root),
    )
    try:
        if during is not None:
            during(proc)
        out, err = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"kcheck {' '.join(args)} did not end within {timeout:g}s (hang?)")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return Run(
        tuple(args),
        proc.returncode,
        out or b"",
        err.decode("utf-8", "replace"),
        time.monotonic() - t0,
        err,
    )


def kcheck(
    *args: object,
    code: int | Collection[int] | None = None,
    cwd: Path | str | None = ROOT,
    env: Mapping[str, str | None] | None = None,
    timeout: float = 600,
    **options: Any,
) -> Run:
    """Run ``python -m kcheck ARGS`` (each argument through ``str``) in ``cwd``, the project's
    root unless given, and return the finished :class:`Run`.

    ``env`` holds variables set over this process's environment (``None`` unsets one).
    ``code``, where given, is the exit code (or the codes) the run must end with, and then
    nothing on stderr may be a traceback. ``options`` go to :func:`run_kcheck`: ``input``,
    ``stdin``, ``stdout``, ``address_space``, ``drop_root``, ``during``.
    """
    full = None
    if env is not None:
        full = dict(os.environ)
        for name, value in env.items():
            if value is None:
                full.pop(name, None)
            else:
                full[name] = value
    run = run_kcheck(
        [str(a) for a in args],
        timeout=timeout,
        cwd=None if cwd is None else Path(cwd),
        env=full,
        **options,
    )
    if code is not None:
        codes = (code,) if isinstance(code, int) else tuple(code)
        assert run.code in codes, run.describe()
        assert "Traceback" not in run.stderr, run.describe()
    return run


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` now (from /proc), e.g. a command's worker processes."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(condition: Callable[[], object], what: str, *, ceiling: float = 300.0) -> None:
    """Poll ``condition`` until it holds; fail the test naming ``what`` after ``ceiling``.

    Tests wait for an event (a file, a line, a process state), never for a fixed time: the
    ceiling only stops a hang, and is generous enough for a machine busy with other work.
    """
    deadline = time.monotonic() + ceiling
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {ceiling:g}s for {what}")
        time.sleep(0.02)


def startup_seconds() -> float:
    """How long starting kcheck and refusing a missing file takes on this machine, now.

    The reference that a bound such as "at once" or "within the time limit" is measured
    against: a loaded machine slows the reference as much as the action it bounds.
    """
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "kcheck", "check", "/nonexistent/kcheck-reference", "-q"],
        capture_output=True,
        timeout=600,
    )
    assert r.returncode == 2, r.stderr
    return time.monotonic() - t0


#: What ``startup_seconds()`` takes on this kind of machine (2 cores) when it is idle.
STARTUP_IDLE_SECONDS = 1.0
_slowdown: list[float] = []  # [measured at, factor]


def slowdown() -> float:
    """How many times slower than idle this machine runs kcheck now (at least 1), from a
    reference timed at most a minute ago. A cap on a run's seconds that exists to catch a
    runaway is multiplied by it, so that a busy machine does not fail the test."""
    now = time.monotonic()
    if not _slowdown or now - _slowdown[0] > 60:
        _slowdown[:] = [now, max(1.0, startup_seconds() / STARTUP_IDLE_SECONDS)]
    return _slowdown[1]


def cpu_seconds(pid: int) -> float:
    """The CPU seconds ``pid`` has used so far (user and system, from /proc; 0 once gone): a
    process state to wait for, where "it is well into its work" is what a test needs."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """The CPU seconds ``pid`` and the processes below it now have used: how far into its work
    a run is, whatever else the machine is doing (a process that has ended no longer counts)."""
    return cpu_seconds(pid) + sum(cpu_seconds(c) for c in descendants(pid))


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` now (SigCgt in /proc): for kcheck,
    SIGTERM caught means its own start-up handlers are in, the first thing it does."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except OSError:
        pass
    return False


def default_sigint() -> None:
    """preexec_fn: SIGINT back to its default action in the child. A process started from a
    shell's background job inherits SIGINT ignored, and an ignored disposition survives exec:
    the child would then never see the Ctrl-C a test sends it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_kcheck(
    args: Sequence[str],
    *,
    command: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``python -m kcheck ARGS`` (or ``command`` + ARGS) in a process group of its own,
    with SIGINT at its default, as a terminal starts it: ``os.killpg(proc.pid, SIGINT)`` is a
    Ctrl-C."""
    return subprocess.Popen(
        [*(command or [sys.executable, "-m", "kcheck"]), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=default_sigint,
    )


def tree_peak(args: list[str], timeout: float = 600) -> tuple[int, int, str]:
    """(exit code, peak bytes, stderr) of ``python ARGS`` and every process it starts: the sum
    of their proportional set sizes (``Pss`` in ``/proc/PID/smaps_rollup``, so pages a fork
    shares count once), sampled every 10 ms. A worker's own peak shows here, where the
    launcher's ``ru_maxrss`` sees one process only."""

    def tree(pid: int) -> list[int]:
        out = [pid]
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    out += [q for c in f.read().split() for q in tree(int(c))]
        except OSError:
            pass
        return out

    def pss(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    p = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    peak = 0
    deadline = time.monotonic() + timeout
    while p.poll() is None and time.monotonic() < deadline:
        peak = max(peak, sum(pss(q) for q in tree(p.pid)))
        time.sleep(0.01)
    if p.poll() is None:
        p.kill()
    _, err = p.communicate()
    return p.returncode, peak, err


def on_a_terminal(args: Sequence[str], *, columns: int = 80) -> tuple[int, str]:
    """``kcheck ARGS`` with stdout and stderr on one pseudo-terminal ``columns`` wide, as a user
    at a terminal runs it: (exit code, everything the terminal showed)."""
    import pty

    primary, secondary = pty.openpty()
    env = dict(os.environ, COLUMNS=str(columns), TERM="xterm")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kcheck", *args],
        stdout=secondary,
        stderr=secondary,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the terminal's other end was closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    code = proc.wait(timeout=600)
    return code, b"".join(chunks).decode("utf-8", "replace")
