"""Shared fixtures: bundled data, a fixed-seed generator, a checker Context, LIBSVM tools."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from kcheck.checkers.base import Context

ROOT = Path(__file__).resolve().parent.parent
DATASETS = ROOT / "datasets"

# The properties draw the same examples on every run, as the seeded fixtures do, so one that
# fails on a rare example fails every run and not one CI run in many (test_plan's
# test_every_plan_is_consistent failed once, on 2,253 rows of 32 values in 4 classes, a draw
# it then kept as an explicit example). HYPOTHESIS_PROFILE=explore draws new ones each run.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


def make_context(**given: object) -> Context:
    """A checker's Context for a test: seed 0, one job, epsilon 2 points, 1 GiB, no deadline
    and no baseline, apart from what ``given`` sets."""
    from kcheck.checkers.base import Context

    fields: dict[str, object] = dict(
        seed=0, jobs=1, epsilon=0.02, memory_limit=2**30, deadline=None, baseline=None
    )
    return Context(**{**fields, **given})  # type: ignore[arg-type]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture
def datasets() -> Path:
    return DATASETS


def load_script(name: str) -> ModuleType:
    """scripts/NAME.py as a module (scripts are not a package), registered under NAME."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def require_tool(name: str) -> str:
    """Path of a LIBSVM/LIBLINEAR binary; skip without it, but fail in CI (KCHECK_REQUIRE_TOOLS)."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("KCHECK_REQUIRE_TOOLS"):
            pytest.fail(f"{name} is required here (apt-get install libsvm-tools liblinear-tools)")
        pytest.skip(f"{name} not installed")
    return path


# --- tiers ------------------------------------------------------------------------------------
# `python -m pytest -q` runs the fast tier: every test marked neither `slow` nor `serial`, in two
# processes (pytest-xdist) where that is installed. `--slow` runs the whole suite, one test at
# a time (what CI runs), and lists the 20 slowest tests so that they stay visible.

#: Processes for the fast tier: this kind of machine has 2 cores.
FAST_TIER_PROCESSES = 2


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        default=False,
        help="run the whole suite, one test at a time: the tests marked slow or serial too "
        "(what CI runs)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--slow"):
        if not config.getoption("durations"):
            config.option.durations = 20
        return
    # The fast tier holds no serial test, so it may run in processes side by side; an
    # explicit -n (including -n 0) or a collection alone is left as asked.
    xdist = config.pluginmanager.hasplugin("xdist")
    worker = os.environ.get("PYTEST_XDIST_WORKER") is not None
    if xdist and not worker and config.option.numprocesses is None:
        if not config.getoption("collectonly"):
            config.option.numprocesses = FAST_TIER_PROCESSES
            config.option.dist = "loadfile"  # a module's fixtures are made once
            config.option.tx = ["popen"] * FAST_TIER_PROCESSES


def _whole_suite_only(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) is not None for m in ("slow", "serial"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    report = os.environ.get("KCHECK_TIERS_REPORT")
    if report:  # tests/test_tiers.py: each test's tier, from one collection
        with open(report, "w") as f:
            f.writelines(
                f"{'whole' if _whole_suite_only(i) else 'fast'}\t{i.nodeid}\n" for i in items
            )
    if config.getoption("--slow"):
        return
    slow = [item for item in items if _whole_suite_only(item)]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not _whole_suite_only(item)]
