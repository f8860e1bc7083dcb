"""The command line on a terminal and in a log: widths, help, errors, completion, and the
verdict shown before a long --model-out export. Real processes, real data."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import numpy as np
import pytest
import runner
from runner import Run

from kcheck import __version__
from kcheck.io.data import write_libsvm


def kcheck(*args: str, env: dict[str, str] | None = None) -> Run:
    """``python -m kcheck ARGS`` in a log: COLUMNS unset unless ``env`` sets it."""
    return runner.kcheck(*args, env={"COLUMNS": None, **(env or {})})


@pytest.mark.slow
@pytest.mark.parametrize("columns", ["60", "80", None])
def test_log_output_is_unpadded_and_keeps_every_number(datasets, columns):
    env = {"COLUMNS": columns} if columns else {}
    r = kcheck("check", str(datasets / "fourclass"), "--exact", "always", env=env)
    assert r.returncode == 0, r.stderr
    err = r.stderr
    lines = err.splitlines()
    assert all(line == line.rstrip() for line in lines), "lines padded with spaces"
    assert "…" not in err
    width = int(columns) if columns else 100
    assert max(len(x) for x in lines if not x.startswith("`")) <= width
    import json

    v = json.loads(r.stdout)
    flat = " ".join(err.split())
    for c in v["checkers"].values():
        assert f"{100 * c['gap']:+.2f}" in flat and f"{100 * c['val_accuracy']:.2f}%" in flat
    assert "verdict: kernel" in err and "beat linear by" in err and "Next:" in err


@pytest.mark.slow
def test_batch_and_verify_in_a_narrow_log(datasets, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "fourclass").write_bytes((datasets / "fourclass").read_bytes())
    (d / "heart").write_bytes((datasets / "heart_scale").read_bytes())
    r = kcheck(
        "batch", str(d), "-o", str(tmp_path / "o.jsonl"), "--exact", "never", env={"COLUMNS": "60"}
    )
    assert r.returncode == 0, r.stderr
    err = r.stderr
    assert "…" not in err and all(x == x.rstrip() for x in err.splitlines())
    assert re.search(r"fourclass\s+kernel\s+(\S+\s+)?\+29\.17", err), err
    v = kcheck(
        "verify",
        str(datasets / "heart_scale"),
        "-j",
        "1",
        "--max-rows",
        "200",
        env={"COLUMNS": "60"},
    )
    assert v.returncode == 0, v.stderr
    out = v.stderr
    assert "…" not in out and max(len(x) for x in out.splitlines()) <= 60
    assert re.search(r"C=2\^-?\d+", out) and "g=2^" in out


@pytest.mark.parametrize(
    "args, option",
    [
        (["check", "{heart}", "--epsilon", "abc"], "--epsilon"),
        (["check", "{heart}", "--epsilon", "2"], "--epsilon"),
        (["check", "{heart}", "--memory-limit", "4X"], "--memory-limit"),
        (["check", "{heart}", "--checkers", "rbf"], "--checkers"),
        (["verify", "{heart}", "--epsilon", "5"], "--epsilon"),
        (["predict", "m", "{heart}", "--memory-limit", "lots"], "--memory-limit"),
        (["scale", "-s", "X", "-r", "Y", "{heart}"], "-s and -r"),
    ],
)
def test_one_error_style_naming_the_option(datasets, args, option):
    r = kcheck(*[a.replace("{heart}", str(datasets / "heart_scale")) for a in args])
    assert r.returncode == 2
    err = r.stderr
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("kcheck: error: ") and option in err and "Usage:" not in err


def test_epsilon_as_points_gets_a_hint(datasets):
    err = kcheck("check", str(datasets / "heart_scale"), "--epsilon", "2").stderr
    assert "0.02" in err and "fraction" in err


def _commands():
    from kcheck.cli import cli

    return cli.commands


@pytest.mark.slow
def test_help_says_what_every_value_is():
    for name, command in _commands().items():
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"{name} {param.opts} has no description"
        text = kcheck(name, "--help").stdout.decode()
        assert not re.search(r"\b(TEXT|INTEGER|FLOAT)\b", text), (name, text)
    top = kcheck("--help").stdout.decode()
    listing = top.split("Commands:")[1]
    assert "..." not in listing
    for command in _commands().values():
        assert command.get_short_help_str(limit=1000).split()[0] in listing


def test_check_help_has_exit_codes_stdin_and_examples():
    text = kcheck("check", "--help").stdout.decode()
    assert "Exit codes:" in text and "130" in text and "stdin" in text
    assert text.count("kcheck check data.svm") >= 2


@pytest.mark.slow
def test_short_version_flag():
    for flag in ("-V", "--version"):
        r = kcheck(flag)
        assert r.returncode == 0 and __version__ in r.stdout.decode()


@pytest.mark.slow
def test_shell_completion():
    script = kcheck(env={"_KCHECK_COMPLETE": "bash_source"})
    assert script.returncode == 0
    assert b"_kcheck_completion" in script.stdout and b"complete " in script.stdout
    words = kcheck(
        env={
            "_KCHECK_COMPLETE": "bash_complete",
            "COMP_WORDS": "kcheck check --sc",
            "COMP_CWORD": "2",
        }
    )
    assert b"--scaling" in words.stdout
    checkers = kcheck(
        env={
            "_KCHECK_COMPLETE": "bash_complete",
            "COMP_WORDS": "kcheck check --checkers degree2,mu",
            "COMP_CWORD": "3",
        }
    )
    assert b"degree2,multilinear" in checkers.stdout


def skipping_checkers(datasets: Path) -> list[str]:
    """A check whose memory limit skips degree-2 and rff, each with a long reason."""
    return [
        "check",
        str(datasets / "german.numer"),
        "--memory-limit",
        "66M",
        "--checkers",
        "degree2,multilinear,rff",
        "--exact",
        "never",
    ]


@pytest.mark.slow
def test_sizes_are_shown_in_a_unit_that_shows_them(datasets):
    r = kcheck(*skipping_checkers(datasets))
    assert r.returncode == 0, r.stderr
    err = r.stderr
    assert "skipped" in err and "MiB" in err
    assert not re.search(r"\b0\.0+ GiB", err + r.stdout.decode())


@pytest.fixture(scope="module")
def slow_model_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,500 rows whose check is quick and whose kernel model's grid search takes minutes."""
    rng = np.random.default_rng(0)
    X = np.round(rng.normal(size=(1500, 10)), 3)
    y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2] > 0, 1.0, -1.0)
    path = tmp_path_factory.mktemp("slow") / "slow.svm"
    write_libsvm(str(path), y, X)
    return path


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timing
def test_verdict_is_on_the_terminal_before_the_model_and_ctrl_c_writes_nothing(
    slow_model_data, tmp_path
):
    model, out = tmp_path / "m", tmp_path / "v.json"
    out.write_text("old\n")
    primary, secondary = pty.openpty()
    env = dict(os.environ, COLUMNS="100", TERM="xterm")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kcheck",
            "check",
            str(slow_model_data),
            "-j",
            "1",
            "--checkers",
            "multilinear",
            "--exact",
            "never",
            "--model-out",
            str(model),
            "--model",
            "kernel",
            "-o",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=secondary,
        env=env,
    )
    os.close(secondary)
    seen = b""
    deadline = time.monotonic() + 600
    try:
        while b"verdict:" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.5)
            if ready:
                try:
                    seen += os.read(primary, 65536)
                except OSError:
                    break
        assert b"verdict:" in seen, seen[-2000:]
        assert proc.poll() is None, "the model was trained before it could be interrupted"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=600)
        while select.select([primary], [], [], 0.5)[0]:
            try:
                chunk = os.read(primary, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(primary)
    assert proc.returncode == 130
    text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", seen)
    assert b"multilinear" in text and b"verdict: linear" in text, text[-3000:]
    assert text.index(b"verdict:") < text.index(b"interrupted")
    assert not model.exists() and not Path(str(model) + ".range").exists()
    assert out.read_text() == "old\n"


@pytest.mark.slow
def test_notes_wrap_at_words_on_a_terminal_and_stay_one_line_in_a_log(datasets):
    """A skipped checker's reason is longer than 60 columns: on a terminal rich wraps it at
    word boundaries (the terminal itself would cut words); in a log it stays one line."""
    args = [sys.executable, "-m", "kcheck", *skipping_checkers(datasets)]
    primary, secondary = pty.openpty()
    env = dict(os.environ, COLUMNS="60", LINES="40", TERM="xterm")
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=secondary, env=env)
    os.close(secondary)
    seen = b""
    try:
        while True:
            ready, _, _ = select.select([primary], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(primary, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        proc.wait(timeout=600)
        os.close(primary)
    assert proc.returncode == 0
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode())
    lines = [line.rstrip() for line in re.split(r"[\r\n]+", text)]  # progress redraws with \r
    assert any("skipped" in line for line in lines), text
    assert all(len(line) <= 60 for line in lines), text
    log = kcheck(*skipping_checkers(datasets), env={"COLUMNS": "60"}).stderr
    one = [line for line in log.splitlines() if "skipped" in line and "MiB" in line]
    assert one and len(one[0]) > 60, log
