"""The shared option vocabulary (kcheck/defaults.py) is what the core and the CLI use."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest
from conftest import ROOT

from kcheck import defaults, pipeline, verify
from kcheck.config import CheckConfig
from kcheck.defaults import EXACT_MODES, SCALINGS
from kcheck.tuning.rbf_grid import Grid

#: One grid point: verify's settings are what is tested here, not its search.
ONE_POINT = Grid((1.0,), (-3.0,))


def _field_default(cls: type, name: str) -> object:
    (f,) = [f for f in dataclasses.fields(cls) if f.name == name]
    return f.default


def test_check_config_defaults_come_from_defaults() -> None:
    config = CheckConfig(train="x")
    assert config.epsilon == defaults.EPSILON
    assert config.scaling == defaults.DEFAULT_SCALING
    assert config.exact == defaults.DEFAULT_EXACT
    assert _field_default(CheckConfig, "epsilon") == defaults.EPSILON


def test_pipeline_vocabulary_is_the_defaults() -> None:
    assert SCALINGS == defaults.SCALINGS
    assert EXACT_MODES == defaults.EXACT_MODES
    assert defaults.DEFAULT_SCALING in defaults.SCALINGS
    assert defaults.DEFAULT_EXACT in defaults.EXACT_MODES
    assert 0.0 <= defaults.EPSILON < 1.0


def test_check_config_validates_against_the_vocabulary() -> None:
    for scaling in defaults.SCALINGS:
        CheckConfig(train="x", scaling=scaling).validated()
    for mode in defaults.EXACT_MODES:
        CheckConfig(train="x", exact=mode).validated()
    with pytest.raises(Exception, match="--scaling must be one of maxabs, minmax"):
        CheckConfig(train="x", scaling="zscore").validated()
    with pytest.raises(Exception, match="--exact must be one of auto, always, never"):
        CheckConfig(train="x", exact="sometimes").validated()


def test_check_uses_the_default_epsilon_and_scaling(datasets) -> None:
    v = pipeline.run(CheckConfig(train=str(datasets / "heart_scale"), exact="never")).json
    assert v["epsilon"] == defaults.EPSILON
    assert v["scaling"]["method"] == defaults.DEFAULT_SCALING
    assert v["exact"]["mode"] == "never"


def test_verify_config_leaves_settings_open() -> None:
    # None means: the check JSON's, else the defaults (resolved in verify.run).
    config = verify.VerifyConfig(train="x")
    assert config.epsilon is None and config.scaling is None and config.seed is None


def test_verify_resolves_open_settings_to_the_defaults(datasets) -> None:
    v = verify.run(verify.VerifyConfig(train=str(datasets / "heart_scale"), grid=ONE_POINT))
    out = v.to_json()
    assert out["epsilon"] == defaults.EPSILON
    assert out["scaling"]["method"] == defaults.DEFAULT_SCALING
    assert out["seed"] == 0
    assert out["folds"] == defaults.FOLDS


def _help(command: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "kcheck", command, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _epsilon_default(help_text: str) -> float | None:
    """The default epsilon the help states, as a fraction; None if it does not say plainly."""
    lines = help_text.splitlines()
    option = re.compile(r"^\s{1,4}(-\w, )?--[a-z]")
    starts = [i for i, line in enumerate(lines) if re.match(r"^\s{1,4}--epsilon\b", line)]
    assert len(starts) == 1, "the help lists no --epsilon option"
    block = [lines[starts[0]]]
    for line in lines[starts[0] + 1 :]:
        if option.match(line) or not line.strip():
            break
        block.append(line)
    text = " ".join(" ".join(block).split())
    found = re.findall(r"\[default:[^\]]*?(\d+(?:\.\d+)?)\s*(points?|%)?\s*\]", text)
    if len(found) != 1:
        return None
    value, unit = found[0]
    return float(value) / 100 if unit else float(value)


@pytest.mark.parametrize("command", ["check", "verify"])
def test_help_shows_the_default_epsilon(command: str) -> None:
    stated = _epsilon_default(_help(command))
    if stated is None:
        # The help does not say it plainly: the option object must still carry the default.
        from kcheck.cli import cli

        cmd = cli.commands[command]  # type: ignore[attr-defined]
        (opt,) = [p for p in cmd.params if p.name == "epsilon"]
        assert opt.default in (defaults.EPSILON, None)
        return
    assert stated == pytest.approx(defaults.EPSILON, abs=1e-12)


@pytest.mark.slow
def test_check_and_verify_help_agree_on_epsilon() -> None:
    check, verify_ = _epsilon_default(_help("check")), _epsilon_default(_help("verify"))
    if check is None or verify_ is None:
        pytest.skip("a help text does not state the default epsilon plainly")
    assert check == verify_
