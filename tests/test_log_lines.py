"""Off a terminal (a CI log, a pipe), a check talks: one line when each stage starts and one
when it ends, with no carriage return and no colour (kcheck.cli.ui.StageLog)."""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import threading

import pytest
from conftest import DATASETS, ROOT

#: Escape sequences a terminal would interpret (colour, cursor moves).
ANSI = re.compile(r"\x1b\[")


def test_a_check_in_a_pipe_says_each_stage_while_it_runs() -> None:
    """The data come on stdin, so the run cannot end before this test closes it: the first
    stage's line is read while the process is still running, with no clock involved."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kcheck", "check", "-", "--exact", "never", "-o", "/dev/null"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
        text=True,
    )
    assert proc.stdin is not None and proc.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    stderr = proc.stderr
    threading.Thread(target=lambda: lines.put(stderr.readline()), daemon=True).start()
    try:
        first = lines.get(timeout=300)  # a guard against a silent run, not a time bound
    except queue.Empty:
        proc.kill()
        raise AssertionError("nothing on stderr while the data were being read") from None
    assert first == "kcheck: reading -\n"
    assert proc.poll() is None  # still reading: stdin is open
    proc.stdin.write((DATASETS / "heart_scale").read_text())
    proc.stdin.close()
    rest = proc.stderr.read()
    assert proc.wait(timeout=600) == 0, rest
    log = first + rest
    assert "\r" not in log and not ANSI.search(log)
    started = re.findall(r"^kcheck: (.+?)(?: \(about \d+s predicted\))?$", log, flags=re.M)
    ended = re.findall(r"^kcheck: (.+): done in \d+\.\ds$", log, flags=re.M)
    stages = [s for s in started if not re.search(r": done in \d+\.\ds$", s)]
    assert stages[:2] == ["reading -", "linear baseline (C search)"]
    assert "degree-2 checker" in stages and "MultiLinear checker: k-means" in stages
    # Its clusters' trainings are a stage of their own, once k-means has made them.
    assert any(re.fullmatch(r"MultiLinear checker: training \d+ clusters", s) for s in stages)
    # Every stage that started ended, in order, before the table.
    assert ended == stages[: len(ended)] and set(stages) <= set(ended) | {"-"}
    assert log.index("degree-2 checker: done in") < log.index("verdict: ")


def test_quiet_prints_no_stage_lines() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "kcheck", "check", str(DATASETS / "heart_scale"), "-q"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0 and r.stderr == ""


def test_a_stage_that_ends_skipped_says_so_not_done() -> None:
    """A checker the memory limit skips reported its stage "done in 0.0s": the log now says it
    was skipped, with the reason, and every other stage still ends "done"."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kcheck",
            "check",
            str(DATASETS / "german.numer"),
            "--memory-limit",
            "66M",
            "--checkers",
            "degree2,multilinear",
            "--exact",
            "never",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    log = re.sub(r"\n  ", " ", r.stderr)  # a long line folds onto indented ones
    assert re.search(
        r"^kcheck: degree-2 checker: skipped \(.*memory limit.*\) after \d+\.\ds$", log, re.M
    ), log
    assert "degree-2 checker: done in" not in log
    assert re.search(
        r"^kcheck: MultiLinear checker: training \d+ clusters: done in \d+\.\ds$", log, re.M
    ), log


def test_a_stage_that_did_less_than_it_announced_says_why_in_its_done_line() -> None:
    """Exact mode's repeats are announced for all of them and stop once the verdict is
    settled: the log's "done" line says so (fourclass: 1 of 5, its gap 21 points above
    epsilon); a stage with no note ends as before."""
    from kcheck.cli.ui import StageLog
    from kcheck.config import CheckConfig
    from kcheck.defaults import Event
    from kcheck.pipeline import run

    lines: list[str] = []
    log = StageLog(lines.append)
    log.report(Event("repeats", 0, 5, predicted_seconds=8.0))
    log.report(Event("repeats", 1, 5, note="settled after 1 of 5 repeats"))
    log.report(Event("MultiLinear checker"))
    log.close()
    assert lines[0] == "kcheck: repeats (about 8s predicted)"
    assert re.fullmatch(
        r"kcheck: repeats: done in \d+\.\ds \(settled after 1 of 5 repeats\)", lines[1]
    )
    assert re.fullmatch(r"kcheck: MultiLinear checker: done in \d+\.\ds", lines[3])
    # A real check: the repeats' event carries the note, and the log writes it.
    events: list[Event] = []
    run(CheckConfig(train=str(DATASETS / "fourclass"), exact="always"), events.append)
    notes = [e for e in events if e.note is not None]
    assert [(e.stage, e.note) for e in notes] == [
        ("exact RBF comparison: repeats on all rows", "settled after 1 of 5 repeats")
    ]


def test_the_stage_log_ends_a_stage_as_its_event_says() -> None:
    from kcheck.cli.ui import StageLog
    from kcheck.defaults import Event

    lines: list[str] = []
    log = StageLog(lines.append)
    log.report(Event("degree-2 checker"))
    log.report(Event("MultiLinear checker", ended="skipped (time limit)"))  # not the stage
    log.report(Event("degree-2 checker", ended="skipped (time limit)"))
    log.report(Event("RBF SVM"))
    log.close()
    assert lines[0] == "kcheck: degree-2 checker"
    skipped = r"kcheck: degree-2 checker: skipped \(time limit\) after \d+\.\ds"
    assert re.fullmatch(skipped, lines[1])
    assert lines[2] == "kcheck: RBF SVM"
    assert re.fullmatch(r"kcheck: RBF SVM: done in \d+\.\ds", lines[3]) and len(lines) == 4


def test_an_exact_comparison_the_time_limit_stops_ends_skipped(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Exact mode runs apart from the checkers (registry.EXACT.run_all), and a comparison that
    the time limit stopped between its repeats was logged "done in": its last stage now ends
    skipped, as a checker's does. The deadline is simulated where run() checks it, so no clock
    decides the test."""
    from kcheck.checkers import exact
    from kcheck.config import CheckConfig
    from kcheck.errors import TimeLimitReached
    from kcheck.pipeline import run

    def past_the_deadline(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise TimeLimitReached()

    monkeypatch.setattr(exact, "_repeat_until_settled", past_the_deadline)
    events = []
    report = run(CheckConfig(train=str(DATASETS / "heart_scale"), exact="always"), events.append)
    assert report.json["checkers"]["rbf"]["status"] == "skipped"
    (end,) = [e for e in events if e.ended is not None]
    assert end.stage == exact.STAGE and end.ended == "skipped (time limit)"


def test_exact_modes_stage_is_shown_as_it_takes_at_two_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its folds train side by side at two jobs: the stage is announced with three fifths of
    the plan's one-core prediction (five folds on two threads), and with all of it at one. The
    JSON's plan keeps the one-core prediction at both. (On a machine at the reference's pace:
    the probe's pace scales both, tests/test_probe.py.)"""
    from kcheck.checkers import exact
    from kcheck.config import CheckConfig
    from kcheck.costs import pace as probe
    from kcheck.pipeline import run

    monkeypatch.setattr(probe, "probe_seconds", lambda runs=3: probe.REFERENCE_SECONDS)

    def announced(jobs: int) -> tuple[float, float, float]:
        events = []
        config = CheckConfig(train=str(DATASETS / "fourclass"), exact="auto", jobs=jobs)
        report = run(config, events.append)
        (step,) = [s for s in report.json["plan"]["steps"] if s["name"] == "rbf"]
        search = next(e for e in events if e.stage == exact.STAGE)
        repeats = next(e for e in events if e.stage == exact.REPEATS_STAGE)
        return search.predicted_seconds, repeats.predicted_seconds, step["estimated_seconds"]

    (one, one_repeats, planned_one), (two, two_repeats, planned_two) = announced(1), announced(2)
    assert planned_one == planned_two and planned_one > 0.2
    # The search (its own count: fourclass's 862 rows tune on all of them) and the repeats after
    # it, each announced as it takes: three fifths of one core's at two jobs.
    assert 0 < one < planned_one
    assert two == pytest.approx(one * 0.6, abs=2e-3)
    assert two_repeats == pytest.approx(one_repeats * 0.6, abs=2e-3)
