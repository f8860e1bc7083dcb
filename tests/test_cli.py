"""The command line as users run it: real subprocesses, real exit codes, stdout vs stderr."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from runner import cpu_seconds, kcheck, slowdown, wait_for, without_stage_lines

from kcheck.io.data import write_libsvm


@pytest.mark.slow
def test_check_prints_json_when_piped(datasets):
    r = kcheck("check", str(datasets / "fourclass"))
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert v["verdict"] == "kernel"
    # Status goes to stderr, data to stdout: stdout is exactly one JSON line.
    assert r.stdout.decode().count("\n") == 1


@pytest.mark.slow
def test_quiet_silences_stderr(datasets):
    r = kcheck("check", str(datasets / "heart_scale"), "-q")
    assert r.returncode == 0 and r.stderr == ""
    assert json.loads(r.stdout)["verdict"] in ("linear", "kernel")


@pytest.mark.slow
def test_fail_on_gate(datasets):
    tripped = kcheck("check", str(datasets / "fourclass"), "--fail-on", "kernel", "-q")
    # -q is the silent form: the exit code alone says the gate tripped.
    assert tripped.returncode == 1 and tripped.stderr == ""
    loud = kcheck("check", str(datasets / "fourclass"), "--fail-on", "kernel", "--exact", "never")
    assert loud.returncode == 1
    assert loud.stderr.splitlines()[-1] == "kcheck: verdict is kernel (--fail-on kernel)"
    passed = kcheck("check", str(datasets / "fourclass"), "--fail-on", "linear", "-q")
    assert passed.returncode == 0


@pytest.mark.slow
def test_output_file_is_written_and_stdout_stays_empty(datasets, tmp_path):
    out = tmp_path / "verdict.json"
    r = kcheck("check", str(datasets / "german.numer"), "-o", str(out), "-q")
    assert r.returncode == 0
    assert r.stdout == b""
    assert json.loads(out.read_text())["verdict"] == "linear"
    assert [p.name for p in tmp_path.iterdir()] == ["verdict.json"]


@pytest.mark.slow
def test_bad_input_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:0.5 2:1\n-1 1:0.25\n1 3;0.5\n")
    r = kcheck("check", str(bad))
    assert r.returncode == 2
    err = r.stderr
    assert f"{bad}:3:" in err and "Traceback" not in err
    assert len(without_stage_lines(err)) == 1
    assert r.stdout == b""


@pytest.mark.parametrize(
    "args",
    [
        ["check", "/nonexistent/data.svm"],
        ["check", "{heart}", "--checkers", "rbf,degree2"],
        ["check", "{heart}", "--epsilon", "abc"],
        ["check", "{heart}", "--memory-limit", "lots"],
        ["check", "{heart}", "--model", "kernel"],
        ["check"],
        ["nosuchcommand"],
    ],
)
def test_usage_errors_exit_2_without_traceback(datasets, args):
    args = [a.replace("{heart}", str(datasets / "heart_scale")) for a in args]
    r = kcheck(*args)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.strip()


@pytest.mark.slow
def test_single_class_file_is_refused(tmp_path):
    path = tmp_path / "one.svm"
    write_libsvm(str(path), np.ones(40), np.eye(40))
    r = kcheck("check", str(path))
    assert r.returncode == 2 and "two classes" in r.stderr


@pytest.mark.slow
def test_stdin_input(datasets):
    r = kcheck("check", "-", input=(datasets / "heart_scale").read_bytes())
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["data"]["rows"] == 270


def test_version_and_help():
    assert kcheck("--version").returncode == 0
    r = kcheck("check", "--help")
    assert r.returncode == 0 and b"--fail-on" in r.stdout
    # Bare kcheck asks what there is: the help, on stdout, and no error.
    bare = kcheck()
    assert bare.returncode == 0 and bare.stderr == "", bare.stderr
    assert bare.stdout == kcheck("--help").stdout and b"Commands:" in bare.stdout


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timing
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_ends_a_long_check_without_output(tmp_path, sig, code):
    # A data set big enough that the check runs for several seconds.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60_000, 30))
    y = np.where(np.sin(3 * X[:, 0]) + X[:, 1] * X[:, 2] > 0, 1.0, -1.0)
    data = tmp_path / "big.svm"
    write_libsvm(str(data), y, X)
    out = tmp_path / "verdict.json"
    factor = slowdown()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kcheck", "check", str(data), "-o", str(out), "-j", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    # Well into the work (reading and training take about 10 CPU seconds), not after a time.
    wait_for(lambda: cpu_seconds(proc.pid) > 2.0 or proc.poll() is not None, "the check's work")
    assert proc.poll() is None, "the check finished before it could be interrupted"
    t0 = time.monotonic()
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == code, stderr
    assert time.monotonic() - t0 < 10 * factor
    assert stdout == b""
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".verdict")]


_FAILS_IN_DEL = """
import os, signal, sys, time
import kcheck.cli.app as app

class FailsInDel:
    # Stands for an object the run frees while a Ctrl-C unwinds (a Dask client whose event
    # loop was closed first raised "IOLoop is closed" from its __del__).
    def __del__(self):
        raise RuntimeError("IOLoop is closed")

def run(argv):
    held = FailsInDel()
    if argv == ["free-first"]:
        del held  # before any signal: Python reports it as usual
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)

app._invoke = run
app.main(sys.argv[1:])
"""


@pytest.mark.slow
@pytest.mark.serial
def test_ctrl_c_says_interrupted_and_nothing_else_while_objects_fail_to_free():
    r = subprocess.run(
        [sys.executable, "-c", _FAILS_IN_DEL], capture_output=True, timeout=600, text=True
    )
    assert r.returncode == 130
    assert r.stderr.splitlines() == ["kcheck: interrupted"], r.stderr
    # The silence starts with the signal: a failure before it is reported as Python does.
    r = subprocess.run(
        [sys.executable, "-c", _FAILS_IN_DEL, "free-first"],
        capture_output=True,
        timeout=600,
        text=True,
    )
    assert r.returncode == 130
    assert "Exception ignored" in r.stderr and "IOLoop is closed" in r.stderr, r.stderr
    assert r.stderr.splitlines()[-1] == "kcheck: interrupted"


def test_main_in_process_gives_back_the_callers_hooks() -> None:
    """The quiet hooks are for a run ending on a signal; a run that ends otherwise leaves the
    caller's hooks as they were, rather than wrapping them once more at every call."""
    import threading

    from kcheck.cli.app import main

    before = sys.unraisablehook, threading.excepthook
    for _ in range(2):
        with pytest.raises(SystemExit) as e:
            main(["--version"])
        assert e.value.code == 0
    assert (sys.unraisablehook, threading.excepthook) == before


def _parse_libsvm_text(text: str) -> list[tuple[float, dict[int, float]]]:
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        features = dict(p.split(":") for p in parts[1:])
        rows.append((float(parts[0]), {int(k): float(v) for k, v in features.items()}))
    return rows


def _assert_same_scaled(ours: str, theirs: str) -> None:
    a, b = _parse_libsvm_text(ours), _parse_libsvm_text(theirs)
    assert len(a) == len(b)
    for (ya, xa), (yb, xb) in zip(a, b, strict=True):
        assert ya == yb
        assert xa.keys() == xb.keys()
        for k in xa:
            # svm-scale prints %g: 6 significant digits.
            assert xa[k] == pytest.approx(xb[k], rel=1e-5, abs=1e-6)


@pytest.mark.slow
@pytest.mark.interop
@pytest.mark.parametrize("bounds", [[], ["-l", "0", "-u", "1"]])
def test_scale_matches_svm_scale(datasets, tmp_path, bounds):
    from conftest import require_tool

    svm_scale = require_tool("svm-scale")
    data = str(datasets / "svmguide1")
    ours = kcheck("scale", *bounds, "-s", str(tmp_path / "ours.range"), data)
    theirs = subprocess.run(
        [svm_scale, *bounds, "-s", str(tmp_path / "theirs.range"), data],
        capture_output=True,
        check=True,
    )
    assert ours.returncode == 0, ours.stderr
    _assert_same_scaled(ours.stdout.decode(), theirs.stdout.decode())
    # Each tool applies the other's range file to the test file and gets the same result.
    test = str(datasets / "svmguide1.t")
    a = kcheck("scale", "-r", str(tmp_path / "theirs.range"), test)
    b = subprocess.run(
        [svm_scale, "-r", str(tmp_path / "ours.range"), test], capture_output=True, check=True
    )
    assert a.returncode == 0, a.stderr
    _assert_same_scaled(a.stdout.decode(), b.stdout.decode())


@pytest.mark.slow
def test_scale_warns_like_svm_scale_when_sparse_data_densifies(tmp_path):
    data = tmp_path / "sparse.svm"
    data.write_text("1 1:1 5:2\n-1 2:3\n1 3:1 4:4\n")
    r = kcheck("scale", str(data))
    assert r.returncode == 0
    assert "use -l 0" in r.stderr
    quiet = kcheck("scale", "-l", "0", str(data))
    assert quiet.returncode == 0 and quiet.stderr == ""


@pytest.mark.slow
def test_scale_output_file_is_atomic_and_usage_errors(datasets, tmp_path):
    out = tmp_path / "scaled"
    r = kcheck("scale", str(datasets / "heart_scale"), "-o", str(out), "--maxabs")
    assert r.returncode == 0 and r.stdout == b""
    assert out.read_text().count("\n") == 270
    assert kcheck("scale", str(datasets / "heart_scale"), "-s", "a", "-r", "b").returncode == 2
    missing = kcheck("scale", "-r", str(tmp_path / "none.range"), str(datasets / "heart_scale"))
    assert missing.returncode == 2 and "none.range" in missing.stderr


@pytest.fixture
def wide_test_file(tmp_path, datasets):
    """heart_scale's test file with a feature the training file never has: reading it drops
    that value with a warning."""
    test = tmp_path / "heart.t"
    test.write_text("+1 1:0.5 14:1\n-1 2:0.5\n")
    return test


@pytest.mark.slow
def test_quiet_silences_warnings_and_the_json_keeps_them(datasets, wide_test_file):
    args = [
        "check",
        str(datasets / "heart_scale"),
        "--test",
        str(wide_test_file),
        "--checkers",
        "multilinear",
        "--exact",
        "never",
    ]
    loud = kcheck(*args)
    assert loud.returncode == 0, loud.stderr
    assert loud.stderr.count("dropped 1 value(s)") == 1
    quiet = kcheck(*args, "-q")
    assert quiet.returncode == 0 and quiet.stderr == ""
    warnings = json.loads(quiet.stdout)["warnings"]
    assert any("dropped 1 value(s)" in w for w in warnings)


@pytest.mark.slow
def test_quiet_batch_keeps_warnings_in_its_lines(datasets, wide_test_file, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "heart").write_bytes((datasets / "heart_scale").read_bytes())
    (d / "heart.t").write_bytes(wide_test_file.read_bytes())
    out = tmp_path / "o.jsonl"
    r = kcheck(
        "batch", str(d), "-o", str(out), "-q", "--checkers", "multilinear", "--exact", "never"
    )
    assert r.returncode == 0 and r.stderr == "" and r.stdout == b""
    line = json.loads(out.read_text())
    assert any("dropped 1 value(s)" in w for w in line["warnings"])
    loud = kcheck("batch", str(d), "-o", str(out), "--checkers", "multilinear", "--exact", "never")
    # Laid out for the log's width, the warning may wrap anywhere in its words (where depends
    # on the temporary path's length).
    assert "dropped 1 value(s)" in " ".join(loud.stderr.split())


@pytest.mark.slow
def test_dash_o_means_stdout(datasets, tmp_path):
    for command in (
        ["check", str(datasets / "heart_scale"), "--checkers", "multilinear"],
        ["verify", str(datasets / "heart_scale"), "-j", "1"],
    ):
        r = kcheck(*command, "-o", "-", "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["data"]["rows"] == 270
        assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_workers_do_not_import_a_kcheck_folder_in_the_working_directory(tmp_path, datasets):
    """The fork server that starts the worker processes imports kcheck as the command did, not
    from a ``kcheck/`` folder that happens to be where the command runs."""
    script = os.path.join(os.path.dirname(sys.executable), "kcheck")
    if not os.path.exists(script):
        pytest.skip("no kcheck console script beside this interpreter")
    (tmp_path / "kcheck").mkdir()  # a folder of that name, no package: a namespace to Python
    model = tmp_path / "m"
    args = [script, "check", str(datasets / "fourclass"), "--exact", "never"]
    args += ["--model-out", str(model), "--model", "kernel", "-j", "2", "-q", "-o", "-"]
    r = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert json.loads(r.stdout)["model"]["kind"] == "kernel" and model.exists()
