"""Faults around the outputs: every file kcheck writes is whole or untouched, errors are one line.

The files: the JSON verdict (``check -o``), the model and its range file (``--model-out``),
scaled data (``scale -o``), a range file (``scale -s``), batch JSON lines (``batch -o``), labels
(``predict -o``) and the verify JSON (``verify -o``). For each, a failed run (bad input, a full
disk, a read-only or missing directory) and an interrupted run (SIGINT, SIGTERM) must leave an
existing file as it was and no temporary file behind, and end with exit 2 (130, 143) and one
``kcheck: error: ...`` line. Standard output may be a full device or a pipe whose reader left.

The last part checks determinism: the same input and seed give the same JSON, apart from the
keys that end in ``seconds``, on a machine of any speed (at any ``--jobs``: test_batch's
test_parallel_lines_match_serial, and test_golden's exact mode with two jobs).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from runner import (
    Run,
    alive,
    descendants,
    kcheck,
    one_error_line,
    tree_cpu_seconds,
    wait_for,
)

from kcheck.checkers.multilinear import MIN_PARALLEL_NNZ
from kcheck.io.data import write_libsvm
from kcheck.verdict import without_timing

ROOT = Path(__file__).resolve().parent.parent
DATASETS = ROOT / "datasets"
PLAIN = Path(__file__).resolve().parent / "data" / "hostile" / "plain.svm"
GARBAGE = Path(__file__).resolve().parent / "data" / "hostile" / "garbage.bin"
OLD = b"old content\n"


def snapshot(d: Path) -> dict[str, bytes | None]:
    """Every entry of d (files with their bytes, directories as None), hidden ones included."""
    return {p.name: (p.read_bytes() if p.is_file() else None) for p in d.iterdir()}


# --- the writers ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "plain.model"
    r = kcheck(
        "check",
        str(PLAIN),
        "--checkers",
        "multilinear",
        "-q",
        "--model-out",
        str(path),
        "--model",
        "linear",
    )
    assert r.code == 0, r.describe()
    return path


#: name -> (arguments with {data}, {model} and {out}; files written besides {out}).
WRITERS: dict[str, tuple[list[str], list[str]]] = {
    "check -o": (["check", "{data}", "--checkers", "multilinear", "-q", "-o", "{out}"], []),
    "check --model-out": (
        [
            "check",
            "{data}",
            "--checkers",
            "multilinear",
            "-q",
            "--model-out",
            "{out}",
            "--model",
            "linear",
        ],
        [".range"],
    ),
    "scale -o": (["scale", "{data}", "-q", "-o", "{out}"], []),
    "scale -s": (["scale", "{data}", "-q", "-s", "{out}", "-o", os.devnull], []),
    "batch -o": (["batch", "{data}", "--checkers", "multilinear", "-q", "-o", "{out}"], []),
    "predict -o": (["predict", "{model}", "{data}", "-q", "-o", "{out}"], []),
    "verify -o": (["verify", "{data}", "-q", "-j", "1", "-o", "{out}"], []),
}


def writer_args(name: str, data: Path | str, model: Path, out: Path | str) -> list[str]:
    args, _ = WRITERS[name]
    return [a.format(data=data, model=model, out=out) for a in args]


def with_old_files(d: Path, name: str, target: str = "out") -> Path:
    """Create the writer's output files in d with old content; return the main one."""
    out = d / target
    out.write_bytes(OLD)
    for suffix in WRITERS[name][1]:
        (d / (target + suffix)).write_bytes(OLD)
    return out


def writer_params(known: dict[str, str] | None = None) -> list:
    known = known or {}
    return [
        pytest.param(
            name,
            id=name.replace(" ", "").replace("-", "_"),
            marks=[pytest.mark.xfail(strict=True, reason=known[name])] if name in known else [],
        )
        for name in WRITERS
    ]


# --- a failed run leaves existing outputs as they were -------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("writer", writer_params())
def test_bad_input_leaves_existing_outputs_untouched(writer: str, tmp_path: Path, model: Path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = with_old_files(out_dir, writer)
    before = snapshot(out_dir)
    if writer == "batch -o":
        empty = tmp_path / "no_data"  # a batch records bad files; with no data files it fails
        empty.mkdir()
        r = kcheck(*writer_args(writer, empty, model, out), env={"TMPDIR": str(tmp_path)})
        one_error_line(r, "no LIBSVM data files found")
    else:
        r = kcheck(*writer_args(writer, GARBAGE, model, out), env={"TMPDIR": str(tmp_path)})
        one_error_line(r, f"{GARBAGE}:1:")
    assert snapshot(out_dir) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["out", "no_data"] if writer == "batch -o" else ["out"]
    )


MODEL_BEFORE_PAIR = (
    "models.export saves the model (renamed over PATH) before it writes PATH.range, so when "
    "the range file cannot be written the run fails (exit 2) with a new model beside the old "
    "range file"
)
MODEL_BEFORE_JSON = (
    "the model is exported inside pipeline.run, before cli.check writes -o; an -o that cannot "
    "be written fails the run (exit 2) after the old model was replaced"
)


@pytest.mark.slow
def test_model_is_not_replaced_when_its_range_file_fails(tmp_path: Path) -> None:
    m = tmp_path / "m"
    m.write_bytes(OLD)
    (tmp_path / "m.range").mkdir()  # cannot be replaced by a file
    r = kcheck("check", str(PLAIN), "--checkers", "multilinear", "-q", "--model-out", str(m))
    one_error_line(r, "m.range")
    assert m.read_bytes() == OLD


@pytest.mark.slow
def test_model_is_not_replaced_when_the_json_output_fails(tmp_path: Path) -> None:
    m = tmp_path / "m"
    m.write_bytes(OLD)
    (tmp_path / "m.range").write_bytes(OLD)
    r = kcheck(
        "check",
        str(PLAIN),
        "--checkers",
        "multilinear",
        "-q",
        "--model-out",
        str(m),
        "-o",
        str(tmp_path / "missing" / "verdict.json"),
    )
    one_error_line(r, "verdict.json")
    assert m.read_bytes() == OLD and (tmp_path / "m.range").read_bytes() == OLD


# --- missing and read-only directories -----------------------------------------------------


@pytest.mark.parametrize("writer", writer_params())
def test_missing_directory(writer: str, tmp_path: Path, model: Path) -> None:
    out = tmp_path / "missing" / "out"
    r = kcheck(*writer_args(writer, PLAIN, model, out), env={"TMPDIR": str(tmp_path)})
    one_error_line(r, str(out), "No such file or directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("writer", writer_params())
def test_read_only_directory(writer: str, tmp_path: Path, model: Path, can_drop_root: bool):
    if not can_drop_root:
        pytest.skip("file permissions do not apply to this user here")
    d = tmp_path / "ro"
    d.mkdir()
    out = with_old_files(d, writer)
    # batch -o appends to its file in place (a writable file in a read-only directory is fine):
    # give it a new file, which it cannot create.
    target = d / "new" if writer == "batch -o" else out
    d.chmod(0o555)
    before = snapshot(d)
    try:
        r = kcheck(
            *writer_args(writer, PLAIN, model, target),
            drop_root=True,
            env={"TMPDIR": str(tmp_path)},
        )
    finally:
        d.chmod(0o755)
    one_error_line(r, str(target), "Permission denied")
    assert snapshot(d) == before


# --- a full disk ---------------------------------------------------------------------------


STDOUT_WRITE_ERROR = (
    "an OSError other than EPIPE while writing stdout (here ENOSPC) escapes main(): traceback "
    "and exit 1"
)


@pytest.mark.parametrize("writer", writer_params())
def test_full_device(writer: str, tmp_path: Path, model: Path) -> None:
    """/dev/full as the output: written in place (a device is not renamed over), ENOSPC."""
    r = kcheck(*writer_args(writer, PLAIN, model, "/dev/full"), env={"TMPDIR": str(tmp_path)})
    one_error_line(r, "/dev/full", "No space left on device")
    assert list(tmp_path.iterdir()) == []  # no temporary file left in TMPDIR


STDOUT_WRITERS = {
    "check": ["check", str(PLAIN), "--checkers", "multilinear", "-q"],
    "scale": ["scale", str(PLAIN), "-q"],
    "predict": ["predict", "{model}", str(PLAIN), "-q"],
    "batch": ["batch", str(PLAIN), "--checkers", "multilinear", "-q"],
    "verify": ["verify", str(PLAIN), "-q", "-j", "1"],
}


@pytest.mark.parametrize("command", list(STDOUT_WRITERS))
def test_stdout_on_a_full_device(command: str, model: Path) -> None:
    args = [a.format(model=model) for a in STDOUT_WRITERS[command]]
    with open("/dev/full", "wb") as full:
        r = kcheck(*args, stdout=full)
    one_error_line(r, "No space left on device")


@pytest.fixture
def full_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KB tmpfs, mounted for the test; skipped where mounting is not allowed."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(d: Path) -> None:
    """Fill the file system of d up to the last byte."""
    with contextlib.suppress(OSError), open(d / ".filler", "wb") as f:
        while True:
            f.write(b"\0" * 4096)
            f.flush()


@pytest.mark.parametrize(
    "writer",
    writer_params(),
)
def test_full_file_system(writer: str, full_tmpfs: Path, tmp_path: Path, model: Path) -> None:
    """A real file system without space: the old file stays, no temporary file is left."""
    out = with_old_files(full_tmpfs, writer)
    new = full_tmpfs / "new"  # batch -o starts its file afresh: give it a new one
    fill(full_tmpfs)
    before = snapshot(full_tmpfs)
    target = new if writer == "batch -o" else out
    r = kcheck(*writer_args(writer, PLAIN, model, target), env={"TMPDIR": str(tmp_path / "mnt")})
    one_error_line(r, str(target), "No space left on device")
    after = snapshot(full_tmpfs)
    after.pop("new", None)
    assert after == before


# --- interrupted runs ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def slow_model_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,500 rows where the check takes well under a second and the kernel model's grid
    search takes minutes: a signal at 1.5 s lands in the model's training."""
    rng = np.random.default_rng(0)
    X = np.round(rng.normal(size=(1500, 10)), 3)
    y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2] > 0, 1.0, -1.0)
    path = tmp_path_factory.mktemp("slow") / "slow.svm"
    write_libsvm(str(path), y, X)
    return path


@pytest.fixture(scope="module")
def parallel_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dense data whose training part T (3/4) holds just over MIN_PARALLEL_NNZ stored values,
    so MultiLinear trains its clusters in worker processes when -j > 1."""
    d = 30
    rows = int(MIN_PARALLEL_NNZ / (0.75 * d) * 1.05)
    rng = np.random.default_rng(0)
    X = np.round(rng.normal(size=(rows, d)), 3)
    y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2] > 0, 1.0, -1.0)
    path = tmp_path_factory.mktemp("parallel") / "parallel.svm"
    write_libsvm(str(path), y, X)
    return path


def interrupt(
    args: list[str],
    sig: int,
    *,
    after: float,
    tmpdir: Path,
    when_exists: Path | None = None,
    group: bool = False,
) -> tuple[Run, set[int]]:
    """Start kcheck, send ``sig`` once its processes have used ``after`` CPU seconds (or once
    ``when_exists`` matches a file), and return the run and the processes it had started.
    ``group`` sends it to the whole process group, as Ctrl-C in a terminal does.

    CPU seconds, not wall seconds: on a busy machine the same moment of the run comes later,
    and an interrupt timed by the clock would land in another stage (or before kcheck runs)."""
    env = dict(os.environ, TMPDIR=str(tmpdir))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kcheck", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            if when_exists is not None and list(when_exists.parent.glob(when_exists.name)):
                break
            if when_exists is None and tree_cpu_seconds(proc.pid) >= after:
                break
            time.sleep(0.002 if when_exists else 0.02)
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(
                f"kcheck {' '.join(args)} ended (exit {proc.returncode}) before it could be "
                f"interrupted, at {tree_cpu_seconds(proc.pid):.2f} CPU s of {after}:\n"
                + err.decode("utf-8", "replace")[-3000:]
            )
        children = descendants(proc.pid)
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return Run(tuple(args), proc.returncode, out, err.decode("utf-8", "replace")), children


def our_temporary_files(tmpdir: Path) -> list[str]:
    """What a run left in TMPDIR, apart from multiprocessing's directory (tested apart)."""
    return [p.name for p in tmpdir.iterdir() if not p.name.startswith("pymp-")]


def assert_interrupted(run: Run, code: int, children: set[int]) -> None:
    assert run.code == code, run.describe()
    assert "Traceback" not in run.stderr and "interrupted" in run.stderr, run.describe()
    assert "leaked" not in run.stderr and "resource_tracker" not in run.stderr, run.describe()
    assert run.stdout == b""
    wait_for(lambda: not any(alive(p) for p in children), "the worker processes to end")


@pytest.mark.serial
@pytest.mark.timing
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_check_keeps_json_and_model(sig, code, slow_model_data, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for name in ("verdict.json", "m", "m.range"):
        (out_dir / name).write_bytes(OLD)
    before = snapshot(out_dir)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    run, children = interrupt(
        [
            "check",
            str(slow_model_data),
            "-j",
            "2",
            "--checkers",
            "multilinear",
            "-o",
            str(out_dir / "verdict.json"),
            "--model-out",
            str(out_dir / "m"),
            "--model",
            "kernel",
        ],
        sig,
        after=1.5,
        tmpdir=tmpdir,
    )
    assert_interrupted(run, code, children)
    assert snapshot(out_dir) == before
    if sig == signal.SIGINT:  # nothing at all, multiprocessing's pymp- directory included
        assert list(tmpdir.iterdir()) == []
    else:
        assert our_temporary_files(tmpdir) == []


POOL_TEMP_DIR = (
    "main() ends an interrupted run with os._exit, which skips multiprocessing's exit "
    "handlers: the fork server's pymp-XXXX directory (with its socket) stays in TMPDIR"
)


@pytest.mark.serial
@pytest.mark.timing
@pytest.mark.parametrize("after", [0.4, 0.9, 1.5, 2.5])
def test_ctrl_c_to_the_process_group_with_workers_ends_cleanly(after, slow_model_data, tmp_path):
    """Ctrl-C in a terminal reaches kcheck, its fork server, resource tracker and workers.

    Whenever it lands (reading, the fork server importing its modules, workers starting, the
    grid search running), the run ends with exit 130, one line, no traceback from any of the
    processes, no leaked-semaphore warning, and no process left. (-q: without it, a log also
    gets a line per stage.)
    """
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    run, children = interrupt(
        [
            "check",
            str(slow_model_data),
            "-j",
            "2",
            "-q",
            "--checkers",
            "multilinear",
            "--model-out",
            str(tmp_path / "m"),
            "--model",
            "kernel",
        ],
        signal.SIGINT,
        after=after,
        tmpdir=tmpdir,
        group=True,
    )
    assert_interrupted(run, 130, children)
    assert [x for x in run.stderr.splitlines() if x.strip()] == ["kcheck: interrupted"]
    assert list(tmpdir.iterdir()) == []


@pytest.mark.serial
@pytest.mark.timing
def test_interrupted_verify_keeps_its_json(slow_model_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "verify.json"
    out.write_bytes(OLD)
    # A short TMPDIR: the worker pool's socket lives in it, and a Unix socket's path holds at
    # most 107 bytes, which a test's folder in a pytest-xdist process nearly fills on its own.
    tmpdir = Path(tempfile.mkdtemp(prefix="kv-"))
    try:
        run, children = interrupt(
            ["verify", str(slow_model_data), "-j", "2", "-o", str(out)],
            signal.SIGTERM,
            after=1.5,
            tmpdir=tmpdir,
        )
        assert_interrupted(run, 143, children)
        assert out.read_bytes() == OLD
        assert sorted(p.name for p in tmp_path.iterdir()) == ["verify.json"]
        assert our_temporary_files(tmpdir) == []
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timing
def test_scale_interrupted_while_writing(parallel_data: Path, tmp_path: Path) -> None:
    """SIGINT while the scaled data is being written: the old file stays, the partial one goes."""
    out = tmp_path / "scaled"
    out.write_bytes(OLD)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    run, _ = interrupt(
        ["scale", str(parallel_data), "-q", "-o", str(out)],
        signal.SIGINT,
        after=0,
        tmpdir=tmpdir,
        when_exists=tmp_path / ".scaled.*",
    )
    assert_interrupted(run, 130, set())
    assert out.read_bytes() == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scaled", "tmp"]


def test_scale_replaces_its_data_and_range_file_together_or_neither(tmp_path: Path) -> None:
    """``scale -o FILE -s RANGE`` where FILE cannot be replaced (a directory stands there):
    the range file was written first, on its own, and stayed new beside no new data. Both are
    committed together now, so RANGE keeps its old content."""
    out = tmp_path / "s.txt"
    out.mkdir()
    ranges = tmp_path / "r.range"
    ranges.write_bytes(OLD)
    r = kcheck("scale", str(PLAIN), "-q", "-o", str(out), "-s", str(ranges))
    one_error_line(r, str(out), "Is a directory")
    assert ranges.read_bytes() == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.range", "s.txt"]


# --- a reader that leaves: broken pipes ----------------------------------------------------


BROKEN_PIPE_EXIT = (
    "click's Command.main catches the EPIPE OSError itself and calls sys.exit(1), so the "
    "BrokenPipeError handler in cli.main never runs: exit 1, the code of a tripped --fail-on "
    "gate"
)


def closed_reader(args: list[str]) -> Run:
    """Run kcheck with a stdout pipe whose read end is closed at once (``kcheck ... | true``)."""
    r, w = os.pipe()
    os.close(r)
    try:
        return kcheck(*args, stdout=w)
    finally:
        os.close(w)


@pytest.mark.slow
@pytest.mark.parametrize("command", list(STDOUT_WRITERS))
def test_broken_pipe_prints_no_traceback(command: str, model: Path) -> None:
    r = closed_reader([a.format(model=model) for a in STDOUT_WRITERS[command]])
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.describe()
    assert r.code == 0, r.describe()


def test_scale_into_head(tmp_path: Path) -> None:
    """``kcheck scale big | head -c 10`` as a shell runs it."""
    script = (
        f"{sys.executable} -m kcheck scale {DATASETS / 'svmguide1'} -q | head -c 10; "
        "echo; echo ${PIPESTATUS[0]} >&2"
    )
    r = subprocess.run(["bash", "-c", script], capture_output=True, timeout=600)
    err = r.stderr.decode()
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert len(r.stdout) == 11
    assert err.strip().splitlines()[-1] == "0", err


# --- determinism ---------------------------------------------------------------------------


DEGREE2_CLOCK = (
    "degree-2's time budget is max(linear seconds, DEG2_MIN_SECONDS): below 0.5 s of "
    "baseline the rows it may expand scale with the measured seconds, and the skip/subsample "
    "reason prints the budget in seconds, so the JSON depends on the machine's speed"
)


@pytest.mark.slow
def test_degree2_json_does_not_depend_on_machine_speed(tmp_path: Path, monkeypatch) -> None:
    """The same check on a machine four times slower (a clock running four times faster)."""
    from kcheck.config import CheckConfig
    from kcheck.pipeline import run

    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 20))
    y = np.where(X[:, 0] * X[:, 1] + 0.3 * X[:, 2] > 0, 1.0, -1.0)
    path = tmp_path / "d2.svm"
    write_libsvm(str(path), y, X)
    config = CheckConfig(
        train=str(path), checkers=("degree2", "multilinear"), jobs=1, exact="never"
    )
    fast = run(config).json
    real = time.perf_counter
    start = real()
    monkeypatch.setattr(time, "perf_counter", lambda: start + 4.0 * (real() - start))
    slow = run(config).json
    assert without_timing(fast) == without_timing(slow)


# --- closed standard streams ---------------------------------------------------------------


def run_with_closed(stream: str, args: list[str], stdin: bytes | None = None) -> Run:
    """Run kcheck as ``kcheck ARGS <&-`` (or ``>&-``, ``2>&-``)."""
    fd = {"stdin": 0, "stdout": 1, "stderr": 2}[stream]
    proc = subprocess.run(
        [sys.executable, "-m", "kcheck", *args],
        input=stdin,
        stdout=None if fd == 1 else subprocess.PIPE,
        stderr=None if fd == 2 else subprocess.PIPE,
        preexec_fn=lambda: os.close(fd),
        timeout=600,
    )
    return Run(
        tuple(args),
        proc.returncode,
        proc.stdout or b"",
        (proc.stderr or b"").decode("utf-8", "replace"),
    )


#: Every command, with its data going to stdout where it has any.
STREAM_COMMANDS = {
    "check": ["check", str(PLAIN), "--checkers", "multilinear", "-q"],
    "check -o": ["check", str(PLAIN), "--checkers", "multilinear", "-q", "-o", "{out}"],
    "scale": ["scale", str(PLAIN), "-q"],
    "predict": ["predict", "{model}", str(PLAIN), "-q"],
    "verify": ["verify", str(PLAIN), "-q", "-j", "1"],
    "batch": ["batch", str(PLAIN), "--checkers", "multilinear", "-q"],
    "batch -o": ["batch", str(PLAIN), "--checkers", "multilinear", "-q", "-o", "{out}"],
    "help": ["--help"],
}


@pytest.mark.parametrize("stream", ["stdin", "stdout", "stderr"])
@pytest.mark.parametrize("command", list(STREAM_COMMANDS))
def test_every_command_with_a_closed_standard_stream(command, stream, model, tmp_path):
    """Never a traceback or exit 1 (the gate's code): a closed stdin is not needed here, a
    closed stderr only loses messages, and data for a closed stdout is one error line."""
    out = tmp_path / "out"
    args = [a.format(model=model, out=out) for a in STREAM_COMMANDS[command]]
    r = run_with_closed(stream, args)
    assert "Traceback" not in r.stderr, r.describe()
    writes_stdout = "{out}" not in " ".join(STREAM_COMMANDS[command])
    if stream == "stdout" and writes_stdout:
        one_error_line(r, "stdout is closed")
        assert not out.exists()
        return
    assert r.code == 0, r.describe()
    if not writes_stdout:
        assert out.stat().st_size > 0
    elif stream != "stdout" and command != "help":
        assert r.stdout.strip(), r.describe()


@pytest.mark.slow
@pytest.mark.parametrize("stream", ["stdin", "stdout", "stderr"])
def test_gate_and_errors_with_a_closed_stream(stream, tmp_path):
    """The gate still trips with 1, bad input still gives 2, data from a closed stdin is 2."""
    out = ["-o", str(tmp_path / "v.json")]
    gate = run_with_closed(
        stream,
        [
            "check",
            str(DATASETS / "fourclass"),
            "--checkers",
            "multilinear",
            "--exact",
            "never",
            "--fail-on",
            "kernel",
            "-q",
            *out,
        ],
    )
    assert gate.code == 1, gate.describe()
    bad = run_with_closed(stream, ["check", str(GARBAGE), *out])
    assert bad.code == 2 and "Traceback" not in bad.stderr, bad.describe()
    piped = run_with_closed(
        stream,
        ["check", "-", "--checkers", "multilinear", "-q", *out],
        stdin=None if stream == "stdin" else PLAIN.read_bytes(),
    )
    assert piped.code == (2 if stream == "stdin" else 0), piped.describe()
    if stream == "stdin":
        one_error_line(piped, "stdin is closed")
