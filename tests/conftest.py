"""Shared fixtures: bundled data, a fixed-seed generator, a checker Context, LIBSVM tools."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from kcheck.checkers.base import Context, Dataset, Sized

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")
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


def planned(
    name: str,
    T: Dataset,
    V: Dataset,
    budget_seconds: float | None = None,
    memory_limit: int = 2**30,
    mode: str = "auto",
) -> Sized:
    """What the plan sizes the method ``name`` to on T and V within ``budget_seconds`` of
    counted work (None: none) and ``memory_limit``, through its registry entry's ``size`` as
    kcheck.plan does: a test that runs one method alone hands it this, as the pipeline hands
    it the plan's (``mode``: exact mode's)."""
    from kcheck.checkers import registry
    from kcheck.checkers.base import Allowance, Counts
    from kcheck.checkers.base import Sized as Whole

    counts = Counts.of(T, V)
    allowed = Allowance(memory_limit, budget_seconds)
    if name == registry.EXACT.name:
        return registry.EXACT.size(counts, allowed, mode)
    size = registry.CHECKERS[name].size
    return size(counts, allowed) if size is not None else Whole(counts.rows)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture
def datasets() -> Path:
    return DATASETS


@pytest.fixture(scope="session")
def can_drop_root(tmp_path_factory: pytest.TempPathFactory) -> bool:
    """True if file permissions apply to the kcheck runs (not root, or root without override)."""
    from runner import drop_file_access_override

    locked = tmp_path_factory.mktemp("probe") / "locked"
    locked.write_text("secret")
    locked.chmod(0)
    preexec = drop_file_access_override if os.geteuid() == 0 else None
    try:
        probe = subprocess.run(
            [sys.executable, "-c", f"open({str(locked)!r}).read()"],
            preexec_fn=preexec,
            capture_output=True,
        )
    except OSError:
        return False
    return probe.returncode != 0


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
# processes (pytest-xdist) where that is installed. `--slow` runs the whole suite (what CI runs),
# also in two processes, and lists the 20 slowest tests so that they stay visible. A test marked
# `serial` (it loads the machine, sends signals or starts a Dask cluster) never runs beside
# another: it holds a lock that every other test shares (_exclusive_if_serial).

#: Processes for both tiers: this kind of machine has 2 cores.
PROCESSES = 2


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        default=False,
        help="run the whole suite, the tests marked slow or serial too (what CI runs); a serial "
        "test runs alone",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    whole = config.getoption("--slow")
    if whole and config.getoption("durations") is None:  # --durations=0 lists every test
        config.option.durations = 20
    # An explicit -n (including -n 0) or a collection alone is left as asked.
    xdist = config.pluginmanager.hasplugin("xdist")
    worker = os.environ.get("PYTEST_XDIST_WORKER") is not None
    if xdist and not worker and config.option.numprocesses is None:
        if not config.getoption("collectonly"):
            config.option.numprocesses = PROCESSES
            config.option.tx = ["popen"] * PROCESSES
            # The fast tier's modules are small, so a module's fixtures are made once. The
            # whole suite's heavy modules (test_cli, test_batch, ...) would each hold one
            # process for minutes that way: there an idle process takes tests from the other.
            config.option.dist = "worksteal" if whole else "loadfile"


def _whole_suite_only(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) is not None for m in ("slow", "serial"))


def _whole_suite_rank(item: pytest.Item) -> int:
    """0 for a serial test, 1 for another slow one, 2 for a test of the fast tier."""
    if item.get_closest_marker("serial") is not None:
        return 0
    return 1 if item.get_closest_marker("slow") is not None else 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    report = os.environ.get("KCHECK_TIERS_REPORT")
    if report:  # tests/test_tiers.py: each test's tier, from one collection
        with open(report, "w") as f:
            f.writelines(
                f"{'whole' if _whole_suite_only(i) else 'fast'}\t{i.nodeid}\n" for i in items
            )
    if config.getoption("--slow"):
        # Serial tests first, then the other slow ones, then the fast tier, each in file order.
        # Work stealing gives the first process the front half and the second the back half:
        # the second runs fast-tier tests while the first runs the serial ones, so a serial
        # test waits a fraction of a second for the other process's test to end, not the many
        # seconds of a slow one; and the run ends on short tests, neither process idle while
        # the other finishes a long one.
        items.sort(key=_whole_suite_rank)
        return
    slow = [item for item in items if _whole_suite_only(item)]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not _whole_suite_only(item)]


def _lock_files(config: pytest.Config) -> tuple[str, str] | None:
    """The run's two lock files, the same for every process of one run; None outside xdist."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return None
    # Beside the processes' own temporary folders (.../pytest-N/popen-gwK), in the run's, which
    # pytest removes with the run's other leftovers.
    factory = getattr(config, "_tmp_path_factory", None)
    where = str(factory.getbasetemp().parent) if factory is not None else tempfile.gettempdir()
    stem = os.path.join(where, f"kcheck-tests-{workerinput['testrunuid']}")
    return f"{stem}.gate", f"{stem}.lock"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A serial test holds the run's lock alone, every other test shares it: a serial test
    never runs beside another, whatever process either runs in. The lock covers the whole
    protocol, so a module fixture made or ended on a serial test's turn is made alone too.

    A serial test takes the gate before it waits for the lock, and the others pass through the
    gate before they share it, so a waiting serial test is not starved by a stream of short
    ones."""
    files = _lock_files(item.config)
    if files is None:
        yield
        return
    gate_path, lock_path = files
    serial = item.get_closest_marker("serial") is not None
    with open(gate_path, "a") as gate, open(lock_path, "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        if serial:
            fcntl.flock(lock, fcntl.LOCK_EX)
            fcntl.flock(gate, fcntl.LOCK_UN)
        else:
            fcntl.flock(gate, fcntl.LOCK_UN)
            fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def made_once(config: pytest.Config, key: str, make: Callable[[], T]) -> T:
    """``make()``, called by one process of the run: the others wait for it and read its
    pickled result. For a module fixture that runs many commands (the model corpus): work
    stealing may share one module's tests out to both processes, and each would make it."""
    files = _lock_files(config)
    if files is None:
        return make()
    path = f"{files[1]}.{key}.pickle"
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path):
            with open(path, "rb") as f:
                return pickle.load(f)  # type: ignore[no-any-return]
        value = make()
        with open(f"{path}.tmp", "wb") as f:
            pickle.dump(value, f)
        os.replace(f"{path}.tmp", path)
        return value
