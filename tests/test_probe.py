"""This machine's pace (kcheck.costs.pace): what it measures, where the check reads it, and that
nothing the check decides does."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

import pytest
from conftest import DATASETS

from kcheck import plan
from kcheck.bindings import engines
from kcheck.checkers import exact
from kcheck.config import CheckConfig
from kcheck.costs import pace as probe
from kcheck.defaults import Event
from kcheck.pipeline import run
from kcheck.verdict import without_timing


def test_the_probe_keeps_its_fastest_run_in_cpu_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each run trains LIBLINEAR at four C values and LIBSVM once (the real bindings), timed
    on the process's CPU clock: the fastest run is the machine's, the others waited."""
    trained: list[str] = []
    linear, rbf = engines.train_linear, engines.train_rbf

    def train_linear(*a: object, **k: object) -> object:
        trained.append("linear")
        return linear(*a, **k)  # type: ignore[arg-type]

    def train_rbf(*a: object, **k: object) -> object:
        trained.append("rbf")
        return rbf(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(engines, "train_linear", train_linear)
    monkeypatch.setattr(engines, "train_rbf", train_rbf)
    # Three runs of 0.03, 0.01 and 0.05 CPU seconds on a fake CPU clock.
    ticks = itertools.chain([0.0, 0.03, 1.0, 1.01, 2.0, 2.05], itertools.repeat(9.0))
    monkeypatch.setattr(probe.time, "process_time", lambda: next(ticks))
    assert probe.probe_seconds(runs=3) == pytest.approx(0.01)
    assert trained == (["linear"] * 4 + ["rbf"]) * 3


def test_the_probe_runs_the_real_solvers_in_milliseconds() -> None:
    seconds = probe.probe_seconds(runs=1)
    # A generous bound: it is meant for a check's start, never for a timed assertion.
    assert 0 < seconds < 2.0


def test_pace_is_the_probe_over_its_reference() -> None:
    assert probe.pace(None) == 1.0
    assert probe.pace(0.0) == 1.0
    assert probe.pace(probe.REFERENCE_SECONDS) == pytest.approx(1.0)
    assert probe.pace(probe.REFERENCE_SECONDS / 2) == pytest.approx(0.5)


def test_the_probe_runs_only_where_a_stage_is_predicted_to_take_half_a_second() -> None:
    heart = str(DATASETS / "heart_scale")
    # Exact mode, predicted at about 2 s: the probe ran, and the plan carries it.
    with_exact = run(CheckConfig(train=heart, exact="auto")).json["plan"]
    assert with_exact["probe_cpu_seconds"] > 0
    # Without it every stage is predicted under 0.1 s: nothing to compare, no probe.
    without = run(CheckConfig(train=heart, exact="never")).json["plan"]
    assert max(s["estimated_seconds"] or 0.0 for s in without["steps"]) < plan.OFF_MIN_SECONDS
    assert without["probe_cpu_seconds"] is None


def test_the_first_predictions_shown_are_at_the_probes_pace_and_nothing_else_moves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Exact mode is the first stage of note on heart_scale: before it, no stage says how fast
    the machine is, so its announced prediction is the plan's times the probe's pace. The
    JSON, apart from measured seconds, is the same at any pace."""
    heart = str(DATASETS / "heart_scale")

    def announced(pace: float) -> tuple[float, dict[str, object]]:
        monkeypatch.setattr(probe, "probe_seconds", lambda runs=3: pace * probe.REFERENCE_SECONDS)
        events: list[Event] = []
        v = run(CheckConfig(train=heart, exact="auto", jobs=1), events.append).json
        shown = next(
            e.predicted_seconds
            for e in events
            if e.predicted_seconds is not None and e.stage.startswith("exact")
        )
        planned = next(s for s in v["plan"]["steps"] if s["name"] == exact.NAME)
        assert shown == pytest.approx(planned["estimated_seconds"] * pace, rel=1e-3)
        # The baseline, announced before it, with the plan's prediction at the probe's pace
        # too (it was announced with the budget's count, which the warning does not use).
        baseline = next(e for e in events if e.stage == "linear baseline (C search)")
        lin = next(s for s in v["plan"]["steps"] if s["name"] == "linear")
        assert baseline.predicted_seconds == pytest.approx(
            lin["estimated_seconds"] * pace, rel=1e-2, abs=1e-3
        )
        return shown, without_timing(v)

    slow, slow_json = announced(2.0)
    fast, fast_json = announced(0.5)
    assert slow == pytest.approx(4 * fast, rel=1e-3)
    assert slow_json == fast_json


def test_a_check_reads_the_probe_again_after_each_stage_of_note_and_keeps_the_median(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The machine switches between two speeds, so one reading at the start may fall in the
    slower while the stages run in both: the JSON keeps the median of the reading before the
    first stage and one after each stage predicted at OFF_MIN_SECONDS or more."""
    readings = iter([0.030, 0.010, 0.012, 0.011, 0.013])
    asked: list[int] = []

    def reading(runs: int = 3) -> float:
        asked.append(runs)
        return next(readings)

    monkeypatch.setattr(probe, "probe_seconds", reading)
    v = run(CheckConfig(train=str(DATASETS / "heart_scale"), exact="auto", jobs=1)).json
    noted = [
        s
        for s in v["plan"]["steps"]
        if s["runs"] and s["rows"] and (s["estimated_seconds"] or 0.0) >= plan.OFF_MIN_SECONDS
    ]
    assert noted and asked == [3] + [1] * len(noted)
    taken = [0.030, 0.010, 0.012, 0.011, 0.013][: len(asked)]
    assert v["plan"]["probe_cpu_seconds"] == pytest.approx(statistics.median(taken))
    # Its median, not the slow first reading, is the pace the stages are compared at.
    assert v["plan"]["probe_cpu_seconds"] < 0.030
    r = probe.Readings(None)
    r.again()
    assert r.seconds is None  # a check that never read it does not start reading later


def test_the_readme_gives_the_reference_a_user_divides_by() -> None:
    """The README's cost sentence tells a user how to find their machine's pace: the
    probe's CPU seconds over the reference machine's, the constant the warnings use."""
    readme = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text().split())
    assert f"`plan.probe_cpu_seconds` / {probe.REFERENCE_SECONDS:g}" in readme
    assert probe.pace(2 * probe.REFERENCE_SECONDS) == pytest.approx(2.0)
