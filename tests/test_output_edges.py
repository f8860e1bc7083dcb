"""Outputs at the edges: a path that cannot be written, a FIFO, a device, a set that fails.

Every output path of a command is checked before its work starts: a directory, a file under
/proc or /sys, an empty name, a missing or read-only directory is refused at once with one line
and exit 2. A device or FIFO is opened before the work without waiting: a FIFO that no process
reads is refused, one whose reader does not read can be interrupted, and ``/dev/stdout`` on a
pipe is written in place. The outputs of one run are committed together once it reached its
end: one that fails leaves every other as it was. No staging folder survives any of it.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import stat
import struct
import subprocess
import termios
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import DATASETS
from runner import (
    one_error_line,
    run_kcheck,
    slowdown,
    start_kcheck,
    wait_for,
    without_stage_lines,
)

from kcheck.io.data import write_libsvm

HEART = str(DATASETS / "heart_scale")
#: Bytes that are no data, model, range file or results: whatever reads one first fails on it.
GARBAGE = str(Path(__file__).resolve().parent / "data" / "hostile" / "garbage.bin")
FAST = ("-q", "--exact", "never")
OLD = b"old content\n"


def env_with_tmpdir(tmp: Path) -> dict[str, str]:
    tmp.mkdir(exist_ok=True)
    return dict(os.environ, TMPDIR=str(tmp))


# --- a path that cannot be written: refused before the work ---------------------------------

#: id -> (the command, with {bad} for the output path, and an input that is garbage: read
#: first, it would fail the run with its own error; the option named; what the path is).
REFUSED: dict[str, tuple[list[str], str, str]] = {
    "check -o under /proc": (["check", GARBAGE, "-q", "-o", "{bad}"], "-o", "proc"),
    "check --model-out whose .range is a directory": (
        ["check", GARBAGE, "-q", "--model-out", "{bad}"],
        "--model-out",
        "range directory",
    ),
    "check --junit empty": (["check", GARBAGE, "-q", "--junit", "{bad}"], "--junit", "empty"),
    "batch -o empty": (["batch", GARBAGE, "-q", "-o", "{bad}"], "-o", "empty"),
    "batch --junit under /proc": (
        ["batch", GARBAGE, "-q", "-o", "{dir}/o.jsonl", "--junit", "{bad}"],
        "--junit",
        "proc",
    ),
    "report -o in a missing directory": (["report", GARBAGE, "-q", "-o", "{bad}"], "-o", "missing"),
    "report -o in a read-only directory": (
        ["report", GARBAGE, "-q", "-o", "{bad}"],
        "-o",
        "read-only",
    ),
    "scale -o a directory": (["scale", GARBAGE, "-q", "-o", "{bad}"], "-o", "directory"),
    "scale -s under /sys": (["scale", GARBAGE, "-q", "-o", os.devnull, "-s", "{bad}"], "-s", "sys"),
    "expand -o empty": (
        ["expand", GARBAGE, "-q", "--terms", "1:2", "--fit-scaling", GARBAGE, "-o", "{bad}"],
        "-o",
        "empty",
    ),
    "predict -o in a missing directory": (
        ["predict", GARBAGE, GARBAGE, "-q", "-o", "{bad}"],
        "-o",
        "missing",
    ),
    "verify -o a directory": (
        ["verify", GARBAGE, "-q", "-j", "1", "-o", "{bad}"],
        "-o",
        "directory",
    ),
}


def bad_path(kind: str, d: Path) -> tuple[str, str]:
    """A path of ``kind`` in ``d`` that cannot be written, and what its message names."""
    if kind == "proc":
        return "/proc/kcheck-output-test", "/proc/kcheck-output-test"
    if kind == "sys":
        return "/sys/kcheck-output-test", "/sys/kcheck-output-test"
    if kind == "empty":
        return "", ""
    if kind == "directory":
        (d / "a-directory").mkdir()
        return str(d / "a-directory"), str(d / "a-directory")
    if kind == "range directory":
        (d / "m.range").mkdir()
        return str(d / "m"), str(d / "m.range")
    if kind == "missing":
        return str(d / "missing" / "out"), str(d / "missing" / "out")
    assert kind == "read-only"
    (d / "read-only").mkdir()
    (d / "read-only").chmod(0o555)
    return str(d / "read-only" / "out"), str(d / "read-only" / "out")


@pytest.mark.parametrize("case", list(REFUSED))
def test_an_output_path_that_cannot_be_written_is_refused_before_the_work(
    case: str, tmp_path: Path, can_drop_root: bool
) -> None:
    """Each command's every output path is checked first: the refusal, not the garbage input
    that the work would read first, is the one line. Unchecked, a directory, /proc, /sys, an
    empty name (and for report, scale, expand and predict any path) was found after the work,
    or not at all (batch --junit ran every data set and committed -o first)."""
    args, option, kind = REFUSED[case]
    if kind == "read-only" and not can_drop_root:
        pytest.skip("file permissions do not apply to this user here")
    out = tmp_path / "out"
    out.mkdir()
    bad, named = bad_path(kind, out)
    before = sorted(p.name for p in out.iterdir())
    command = [a.format(bad=bad, dir=out) for a in args]
    try:
        r = run_kcheck(
            command,
            timeout=600,
            env=env_with_tmpdir(tmp_path / "tmp"),
            drop_root=kind == "read-only",
        )
    finally:
        if kind == "read-only":
            (out / "read-only").chmod(0o755)
    line = one_error_line(r, named)
    assert line.startswith(f"kcheck: error: {option}"), r.describe()
    assert "garbage.bin" not in line, r.describe()
    assert sorted(p.name for p in out.iterdir()) == before  # no o.jsonl, nothing staged
    assert list((tmp_path / "tmp").iterdir()) == []


# --- an output that fails: every other one stays as it was ----------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("junit", ["/proc/kcheck-output-test.xml", "/dev/full"])
@pytest.mark.parametrize("command", ["check", "batch"])
def test_an_output_that_fails_changes_no_other_output(
    command: str, junit: str, tmp_path: Path
) -> None:
    """``-o v.json --junit /proc/x.xml`` exited 2 "cannot write JUnit file" and wrote v.json
    (and a --model-out model): check --help promises no output file unless the whole run
    finished. /proc is now refused first; /dev/full, which only fails as it is written, fails
    the set before any file is renamed. A batch's lines stay in FILE.partial (README)."""
    out = tmp_path / "out"
    out.mkdir()
    if command == "check":
        olds = ["v.json", "m", "m.range"]
        args = ["check", HEART, *FAST, "-o", str(out / "v.json"), "--model-out", str(out / "m")]
        args += ["--model", "linear"]
    else:
        olds = ["o.jsonl"]
        args = ["batch", HEART, *FAST, "-o", str(out / "o.jsonl")]
    for name in olds:
        (out / name).write_bytes(OLD)
    r = run_kcheck([*args, "--junit", junit], timeout=600, env=env_with_tmpdir(tmp_path / "tmp"))
    one_error_line(r, junit)
    for name in olds:
        assert (out / name).read_bytes() == OLD, f"{name} changed\n{r.describe()}"
    left = sorted(p.name for p in out.iterdir())
    if command == "batch" and junit == "/dev/full":
        # The run reached its end, so its line is kept for --resume, as an interrupt keeps it.
        assert left == ["o.jsonl", "o.jsonl.partial"], r.describe()
        (line,) = (out / "o.jsonl.partial").read_text().splitlines()
        assert json.loads(line)["status"] == "ok"
    else:
        assert left == sorted(olds), r.describe()
    assert list((tmp_path / "tmp").iterdir()) == []


# --- /dev/stdout on a pipe -------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("case", ["check -o", "check --junit", "batch -o", "scale -o"])
def test_dev_stdout_on_a_pipe_is_written_in_place(case: str, tmp_path: Path) -> None:
    """/dev/stdout (and /dev/fd/N, as ``-o >(jq ...)`` gives) leads to a pipe that has no
    path: every output path was resolved first, and each ended "cannot write file
    /dev/stdout: No such file or directory"."""
    args = {
        "check -o": ["check", HEART, *FAST, "-o", "/dev/stdout"],
        "check --junit": ["check", HEART, *FAST, "-o", str(tmp_path / "v.json")]
        + ["--junit", "/dev/stdout"],
        "batch -o": ["batch", HEART, *FAST, "-o", "/dev/stdout"],
        "scale -o": ["scale", HEART, "-q", "-o", "/dev/stdout"],
    }[case]
    r = run_kcheck(args, timeout=600, env=env_with_tmpdir(tmp_path / "tmp"))
    assert (r.code, without_stage_lines(r.stderr)) == (0, []), r.describe()
    if case == "check -o":
        assert json.loads(r.stdout)["verdict"] in ("linear", "kernel")
    elif case == "check --junit":
        assert ET.fromstring(r.stdout).attrib["tests"] == "1"
        assert json.loads((tmp_path / "v.json").read_bytes())["verdict"] in ("linear", "kernel")
    elif case == "batch -o":
        (line,) = r.stdout.decode().splitlines()
        assert json.loads(line)["status"] == "ok"
    else:
        plain = run_kcheck(["scale", HEART, "-q"], timeout=600)  # stdout itself
        assert r.stdout == plain.stdout and plain.stdout.count(b"\n") == 270
    assert list((tmp_path / "tmp").iterdir()) == []


# --- FIFOs -----------------------------------------------------------------------------------


#: id -> the command, with {fifo} for the FIFO and {dir} for its directory.
FIFO_OUTPUTS: dict[str, tuple[list[str], str]] = {
    "check -o": (["check", HEART, *FAST, "-o", "{fifo}"], "-o"),
    "check --model-out": (["check", HEART, *FAST, "--model-out", "{fifo}"], "--model-out"),
    "check --junit": (["check", HEART, *FAST, "--junit", "{fifo}"], "--junit"),
    "batch -o": (["batch", HEART, *FAST, "-o", "{fifo}"], "-o"),
    "batch --junit": (
        ["batch", HEART, *FAST, "-o", "{dir}/o.jsonl", "--junit", "{fifo}"],
        "--junit",
    ),
}


@pytest.mark.serial
@pytest.mark.parametrize("case", list(FIFO_OUTPUTS))
def test_a_fifo_that_no_process_reads_is_refused_at_once(case: str, tmp_path: Path) -> None:
    """``mkfifo f; kcheck check ... -o f`` waited for a reader for ever, at the commit, with
    SIGINT and SIGTERM held (only SIGKILL ended it), and left ``.f.XXXX.tmp/`` in TMPDIR;
    --model-out, --junit and batch -o waited the same way. The FIFO is now opened before the
    work, without waiting: no reader is one line and exit 2."""
    args, option = FIFO_OUTPUTS[case]
    out = tmp_path / "out"
    out.mkdir()
    fifo = out / "f"
    os.mkfifo(fifo)
    command = [a.format(fifo=fifo, dir=out) for a in args]
    # A hang is what this catches: the runner kills the process group and fails the test.
    r = run_kcheck(command, timeout=30 * slowdown(), env=env_with_tmpdir(tmp_path / "tmp"))
    line = one_error_line(r, str(fifo), "no process reads")
    assert line.startswith(f"kcheck: error: {option} "), r.describe()
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in out.iterdir()) == ["f"]  # no o.jsonl, nothing staged
    assert list((tmp_path / "tmp").iterdir()) == []


def queued_bytes(fd: int) -> int:
    """Bytes written into the pipe whose read end is ``fd`` and not read yet."""
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0])


@pytest.fixture(scope="module")
def wide_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200 rows of 4 features and one stray index of 100,000: its linear model has a weight
    line for each of them, several times what a pipe holds."""
    rng = np.random.default_rng(0)
    Z = np.round(rng.normal(size=(200, 4)), 3)
    X = sp.lil_matrix((200, 100_000))
    X[:, :4] = Z
    X[0, 99_999] = 1.0
    y = np.where(Z[:, 0] + Z[:, 1] > 0, 1.0, -1.0)
    path = tmp_path_factory.mktemp("wide") / "wide.svm"
    write_libsvm(str(path), y, sp.csr_matrix(X))
    return path


@pytest.fixture(scope="module")
def long_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4,000 rows of 8 features: scaled, several times what a pipe holds."""
    rng = np.random.default_rng(1)
    X = np.round(rng.normal(size=(4000, 8)), 4)
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    path = tmp_path_factory.mktemp("long") / "long.svm"
    write_libsvm(str(path), y, X)
    return path


@pytest.mark.serial
@pytest.mark.timing
@pytest.mark.parametrize("case", ["scale -o", "check --model-out"])
def test_sigterm_ends_a_run_whose_fifo_reader_does_not_read(
    case: str, tmp_path: Path, wide_data: Path, long_data: Path
) -> None:
    """A FIFO whose reader holds it open and does not read: the write blocks once the pipe is
    full. It blocked with SIGTERM held (scale: only SIGKILL ended it), or under the commit lock
    that an interrupt waits 10 s for (check --model-out); now SIGTERM to the process group ends
    it within about a second, with exit 143, no other output and no staging folder left."""
    out = tmp_path / "out"
    out.mkdir()
    fifo = out / "f"
    os.mkfifo(fifo)
    if case == "scale -o":
        args = ["scale", str(long_data), "-q", "-o", str(fifo)]
    else:
        args = ["check", str(wide_data), "-q", "--exact", "never", "--checkers", "multilinear"]
        args += ["-o", str(out / "v.json"), "--model-out", str(fifo), "--model", "linear"]
    factor = slowdown()
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # holds the FIFO open, never reads
    proc = start_kcheck(args, env=env_with_tmpdir(tmp_path / "tmp"))
    try:
        capacity = fcntl.fcntl(reader, getattr(fcntl, "F_GETPIPE_SZ", 1032))
        wait_for(
            lambda: proc.poll() is not None or queued_bytes(reader) >= capacity,
            "kcheck to fill the FIFO",
        )
        assert proc.poll() is None, proc.communicate()[1].decode()
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=10 * factor)
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM did not end kcheck blocked writing a FIFO")
        seconds = time.monotonic() - t0
    finally:
        os.close(reader)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert (proc.returncode, err.decode()) == (143, "kcheck: interrupted\n")
    assert seconds < 2 * factor, f"SIGTERM took {seconds:.1f}s (slowdown {factor:.1f})"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    left = sorted(p.name for p in out.iterdir())
    assert left == ["f"], left  # neither v.json nor f.range: nothing of the set committed
    assert list((tmp_path / "tmp").iterdir()) == []
