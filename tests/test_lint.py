"""Lint, format and types are part of the suite, so that ``pip install '.[test]' && python -m
pytest -q`` (the README's test command, and CI's) runs them too: a missing type or an unformatted
file fails CI like a failing test does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TREES = ["kcheck", "tests", "scripts"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_check() -> None:
    r = _run("ruff", "check", *TREES)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_format() -> None:
    r = _run("ruff", "format", "--check", *TREES)
    assert r.returncode == 0, "run `ruff format kcheck tests scripts`:\n" + r.stdout + r.stderr


def test_mypy_strict() -> None:
    r = _run("mypy", "--strict", "kcheck")
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("tool", ["ruff", "mypy"])
def test_the_linters_can_fail(tool: str, tmp_path: Path) -> None:
    """A file with an unused import and a type error is refused: the gates are not vacuous."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f(x: int) -> str:\n    return x\n")
    args = ("ruff", "check", str(bad)) if tool == "ruff" else ("mypy", "--strict", str(bad))
    assert _run(*args).returncode != 0
