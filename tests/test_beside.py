"""The linear baseline training beside degree-2 and MultiLinear (``--jobs`` 2 or more, large
data): the same JSON as one job, memory permitting, and no worker left behind when the run
ends early."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kcheck import pipeline, plan
from kcheck.checkers import registry
from kcheck.checkers.base import Allowance, Counts
from kcheck.config import CheckConfig
from kcheck.costs import budget
from kcheck.io.data import write_libsvm
from kcheck.parallel import workers
from kcheck.pipeline import run
from kcheck.verdict import without_timing


@pytest.fixture(scope="module")
def wide_enough(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """41,000 rows of 10 features (T: 30,750 rows and 307,500 stored values), labels from a
    product of two features plus noise: degree-2 runs on a subsample by the check's budget."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(41_000, 10))
    y = np.where(X[:, 0] * X[:, 1] + 0.3 * X[:, 2] + 0.5 * rng.normal(size=41_000) > 0, 1, -1)
    path = tmp_path_factory.mktemp("beside") / "product.svm"
    write_libsvm(str(path), y.astype(float), X)
    return path


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[workers.Background]:
    """Every background baseline the pipeline starts; its cost threshold lowered to this
    data's (a 30,750-row linear model counts 0.77 s)."""
    jobs: list[workers.Background] = []

    class Spy(workers.Background):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            jobs.append(self)

    monkeypatch.setattr(pipeline, "Background", Spy)
    monkeypatch.setattr(plan, "BESIDE_MIN_SECONDS", 0.0)
    return jobs


@pytest.mark.slow
def test_the_baseline_beside_the_checkers_gives_the_json_of_one_job(
    wide_enough: Path, started: list[workers.Background]
) -> None:
    one = run(CheckConfig(train=str(wide_enough), jobs=1)).json
    assert started == []
    two = run(CheckConfig(train=str(wide_enough), jobs=2)).json
    # The baseline's worker, and degree-2's own (kcheck.plan's ``detached``).
    assert len(started) == 2
    assert one["checkers"]["degree2"]["status"] == "subsampled"
    # Degree-2's CPU seconds are its worker's, not this process's wait for it (near 0): about
    # what the same work took in this process with one job. Against its own wall seconds the
    # share fell under a half on a busy machine, where the worker waits for a core too.
    steps = {s["name"]: s for s in two["plan"]["steps"]}
    alone = {s["name"]: s for s in one["plan"]["steps"]}
    assert steps["degree2"]["cpu_seconds"] > 0.5 * alone["degree2"]["cpu_seconds"] > 0.1
    # The baseline's are its worker's too (they were None, as its worker is no child of this
    # process's).
    assert steps["linear"]["cpu_seconds"] is not None and steps["linear"]["cpu_seconds"] > 0
    # The baseline block says its wall time was shared, and gives its CPU time beside it.
    assert two["linear"]["beside_seconds"] == two["linear"]["seconds"] > 0
    assert two["linear"]["cpu_seconds"] == pytest.approx(steps["linear"]["cpu_seconds"], abs=1e-3)
    assert one["linear"]["beside_seconds"] == 0 and one["linear"]["cpu_seconds"] > 0
    assert one["verdict"] == "kernel" and one["deciding_checker"] == "degree2"
    assert without_timing(two) == without_timing(one)


@pytest.mark.slow
def test_no_baseline_beside_where_its_worker_would_not_fit_the_memory_limit(
    wide_enough: Path, started: list[workers.Background]
) -> None:
    """230 MB leaves the checkers about 160 MB: enough for degree-2's plan (its rows and a
    chunk of a quarter of that), not for that and the worker's interpreter too. With room for
    the worker the plan puts the baseline beside the checkers; the plan, not a run, says so.
    (A run starts the worker where the plan says beside and only there, with the JSON of one
    job: test_the_baseline_beside_the_checkers_gives_the_json_of_one_job.)"""
    limit = 230 * 2**20
    for memory, beside in ((limit, False), (2**30, True)):
        T, V, ctx = _split(wide_enough, jobs=2, memory_limit=memory)
        config = CheckConfig(train=str(wide_enough), jobs=2, memory_limit=memory)
        assert _beside(config, T, V, ctx) is beside, memory


@pytest.mark.parametrize(
    "config",
    [
        {"time_limit": 600.0},  # the checkers' time budgets would depend on the overlap
        {"exact": "always"},
        # rbfsvm stands in for exact mode only: with it off, nothing would run beside
        {"checkers": ("rbfsvm",), "exact": "never"},
    ],
)
def test_no_baseline_beside_where_it_could_change_a_plan_or_saves_nothing(
    wide_enough: Path, started: list[workers.Background], config: dict[str, Any]
) -> None:
    T, V, ctx = _split(wide_enough, jobs=2, **config)
    assert _beside(CheckConfig(train=str(wide_enough), jobs=2, **config), T, V, ctx) is False
    T, V, ctx = _split(wide_enough, jobs=2)
    assert _beside(CheckConfig(train=str(wide_enough), jobs=2), T, V, ctx) is True


@pytest.mark.slow
def test_an_early_checkers_failure_ends_the_baseline_worker(
    wide_enough: Path, started: list[workers.Background], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while MultiLinear runs here ends the baseline's worker and degree-2's."""
    spec = registry.CHECKERS["multilinear"]

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setitem(
        registry.CHECKERS, "multilinear", dataclasses.replace(spec, run=interrupted)
    )
    with pytest.raises(KeyboardInterrupt):
        run(CheckConfig(train=str(wide_enough), jobs=2))
    assert len(started) == 2
    for job in started:
        assert job.pid is not None and not _alive(job.pid)


def _beside(config: CheckConfig, T: Any, V: Any, ctx: Any) -> bool:
    """The plan's word on the baseline training beside the checkers (kcheck.plan)."""
    return plan.make(Counts.of(T, V), pipeline._plan_options(config, ctx)).beside


def _split(path: Path, **config: Any) -> tuple[Any, Any, Any]:
    """T, V and the checkers' context as :func:`kcheck.pipeline.run` builds them."""
    from kcheck.checkers.base import Context, Dataset
    from kcheck.memory import checker_budget, default_memory_limit
    from kcheck.prepare import prepare
    from kcheck.split import stratified_split

    cfg = CheckConfig(train=str(path), **config)
    limit = cfg.memory_limit or default_memory_limit()
    data = prepare(str(path), scaling="maxabs", memory_limit=limit)
    tr, va = stratified_split(data.y, seed=0)
    T, V = Dataset(data.X[tr], data.y[tr]), Dataset(data.X[va], data.y[va])
    ctx = Context(
        seed=0,
        jobs=cfg.jobs,
        epsilon=cfg.epsilon,
        memory_limit=checker_budget(limit, data.data_bytes),
        deadline=1e18 if cfg.time_limit else None,
        baseline=None,
    )
    return T, V, ctx


def test_the_baseline_goes_beside_where_it_and_the_checkers_pay_for_the_worker(
    wide_enough: Path, started: list[workers.Background], monkeypatch: pytest.MonkeyPatch
) -> None:

    T, V, ctx = _split(wide_enough, jobs=2)
    config = CheckConfig(train=str(wide_enough), jobs=2)
    counted = budget.linear_seconds(int(T.X.nnz), 2, T.rows)
    assert plan.BESIDE_MIN_SECONDS == 0.0  # lowered by the fixture; the default is 0.5
    monkeypatch.setattr(plan, "BESIDE_MIN_SECONDS", counted * 1.01)
    assert _beside(config, T, V, ctx) is False
    monkeypatch.setattr(plan, "BESIDE_MIN_SECONDS", counted)
    assert _beside(config, T, V, ctx) is True
    # The other side: the checkers beside it must count the threshold too.
    alone = CheckConfig(train=str(wide_enough), jobs=2, checkers=("degree2",))
    steps = plan.make(Counts.of(T, V), pipeline._plan_options(alone, ctx)).steps
    (d2,) = [s for s in steps if s.name == "degree2"]
    assert d2.estimated_seconds is not None and d2.estimated_seconds > counted
    monkeypatch.setattr(plan, "BESIDE_MIN_SECONDS", counted)
    assert _beside(alone, T, V, ctx) is True
    monkeypatch.setattr(plan, "BESIDE_MIN_SECONDS", d2.estimated_seconds * 1.01)
    assert _beside(alone, T, V, ctx) is False
    assert started == []  # the plan trains nothing


def test_no_baseline_beside_a_degree2_that_its_plan_skips(
    wide_enough: Path, started: list[workers.Background]
) -> None:
    from kcheck.checkers import degree2

    T, V, ctx = _split(wide_enough, jobs=2)
    counts = Counts.of(T, V)
    sized = degree2.size(counts, Allowance(ctx.memory_limit))
    assert sized.bytes is not None and sized.bytes > 0
    # A budget too small for degree-2's 1,000 rows: it will skip, so nothing would overlap.
    tiny = dataclasses.replace(ctx, memory_limit=1_000_000)
    skipped = degree2.size(counts, Allowance(tiny.memory_limit))
    assert skipped.rows == 0 and skipped.bytes == 0
    config = CheckConfig(train=str(wide_enough), jobs=2, checkers=("degree2",))
    assert _beside(config, T, V, ctx) is True
    assert _beside(config, T, V, tiny) is False
    assert started == []


def test_the_readme_states_the_threshold_the_code_uses() -> None:
    readme = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text().split())
    assert (
        f"the linear model and the checkers beside it each count at least "
        f"{plan.BESIDE_MIN_SECONDS:g} s of work" in readme
    )
    assert "where exact mode does not run and the linear model" in readme


def _alive(pid: int) -> bool:
    """Whether ``pid`` names a live (not zombie) process, from /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
