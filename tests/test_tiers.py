"""The two tiers: the fast one (the default) keeps most tests and a test of every file; the
whole suite (``--slow``, what CI runs) keeps everything."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from conftest import ROOT


def test_the_fast_tier_keeps_most_tests_and_a_test_of_every_file(tmp_path: Path) -> None:
    report = tmp_path / "tiers.tsv"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        env={**env, "KCHECK_TIERS_REPORT": str(report)},
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    tiers = [line.split("\t") for line in report.read_text().splitlines()]
    fast = [nodeid for tier, nodeid in tiers if tier == "fast"]
    assert 0 < len(fast) < len(tiers), "the fast tier is a part of the whole suite"
    assert len(fast) >= 0.8 * len(tiers), (len(fast), len(tiers))
    # What the default command collects is exactly the fast tier.
    collected = [line for line in r.stdout.splitlines() if "::" in line]
    assert collected == fast
    files = {nodeid.split("::")[0] for _, nodeid in tiers}
    per_file = Counter(nodeid.split("::")[0] for nodeid in fast)
    assert not [f for f in sorted(files) if per_file[f] == 0], "a file with no fast test"


def _small_suite(tmp_path: Path, tests: str, *args: str, **env: str) -> None:
    """Run pytest ARGS in ``tmp_path`` on a test file of ``tests`` beside the project's
    conftest, as the project's tiers run; fail with its output unless it passes."""
    (tmp_path / "test_small.py").write_text(tests)
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HYPOTHESIS"))}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**clean, **env},
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


PROPERTY = """
import os
from hypothesis import given, settings, strategies as st

@settings(max_examples=20)
@given(st.integers(0, 10**12))
def test_draws(x):
    with open(os.environ["DRAWN"], "a") as f:
        f.write(f"{x}\\n")
"""


def test_a_property_draws_the_same_examples_on_every_run_unless_told_to_explore(
    tmp_path: Path,
) -> None:
    """The README's promise: a run's result does not hang on its luck (tests/conftest.py's
    hypothesis profile), and HYPOTHESIS_PROFILE=explore draws new examples."""

    def drawn(run: int, **extra: str) -> list[str]:
        out = tmp_path / f"drawn{run}.txt"
        _small_suite(tmp_path, PROPERTY, "-n", "0", DRAWN=str(out), **extra)
        return out.read_text().split()

    first, second = drawn(1), drawn(2)
    assert len(first) >= 10 and first == second
    explored = drawn(3, HYPOTHESIS_PROFILE="explore")
    assert explored != first


TIMED = """
import os, time
import pytest

def _spent(name):
    start = time.monotonic()
    time.sleep(0.2)
    with open(os.environ["SPANS"], "a") as f:
        f.write(f"{name} {start} {time.monotonic()}\\n")

@pytest.mark.parametrize("i", range(6))
def test_shared(i):
    _spent(f"shared{i}")

@pytest.mark.slow
@pytest.mark.parametrize("i", range(3))
def test_slow(i):
    _spent(f"slow{i}")

@pytest.mark.serial
@pytest.mark.parametrize("i", range(3))
def test_alone(i):
    _spent(f"serial{i}")
"""


def test_the_whole_suite_runs_in_two_processes_and_a_serial_test_alone(tmp_path: Path) -> None:
    """`--slow` runs in two processes like the fast tier, and a `serial` test overlaps no other
    test in time (tests/conftest.py's lock), whichever process runs it."""
    spans = tmp_path / "spans.txt"
    _small_suite(tmp_path, TIMED, "--slow", SPANS=str(spans))
    rows = [line.split() for line in spans.read_text().splitlines()]
    spans_of = {name: (float(a), float(b)) for name, a, b in rows}
    assert len(spans_of) == 12
    overlapping = [
        (a, b)
        for a, (a0, a1) in spans_of.items()
        for b, (b0, b1) in spans_of.items()
        if a < b and a0 < b1 and b0 < a1
    ]
    assert overlapping, "two processes ran no two tests at the same time"
    assert not [pair for pair in overlapping if any(n.startswith("serial") for n in pair)]
