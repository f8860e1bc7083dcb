"""Golden outputs: the check's JSON on fixed inputs, byte for byte apart from timing fields.

A refactor must not change what kcheck says. Each case runs the whole check (``--exact never``,
``always`` and the default ``auto``, a fixed ``--memory-limit`` and one job, so that nothing
machine-dependent enters) and compares the JSON without its ``*seconds`` fields to
``tests/golden/NAME.json``. Two more cases cover what only larger data does: rbfsvm standing in
for exact mode (6,000 rows, where exact mode's counted cost is over the check's budget), and
the baseline trained beside the checkers with ``-j 2`` (its JSON must be that of one job).

A deliberate change of behaviour regenerates them:

    KCHECK_UPDATE_GOLDENS=1 python -m pytest tests/test_golden.py

and the diff of ``tests/golden/`` then shows, in review, every number that moved.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from kcheck.config import CheckConfig
from kcheck.io.data import write_libsvm
from kcheck.pipeline import run
from kcheck.verdict import without_timing

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
MEMORY_LIMIT = 2 * 2**30


def _xor(path: Path) -> None:
    """400 rows, 5 uniform features; the label is the sign of x1 * x2 (nonlinear)."""
    rng = np.random.default_rng(11)
    X = rng.uniform(-1.0, 1.0, size=(400, 5))
    write_libsvm(str(path), np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0), sp.csr_matrix(X))


def _three_classes(path: Path) -> None:
    """300 sparse rows, 3 linearly separable classes with noise (a multiclass linear case)."""
    rng = np.random.default_rng(12)
    X = sp.random(300, 30, density=0.2, random_state=np.random.RandomState(12), format="csr")
    W = rng.normal(size=(30, 3))
    y = np.argmax(X @ W + rng.normal(0.0, 0.2, size=(300, 3)), axis=1).astype(float) + 1.0
    write_libsvm(str(path), y, X)


def _wavy(path: Path) -> None:
    """6,000 rows, 5 features, a smooth wavy boundary: over exact mode's rows, so rbfsvm
    stands in for it."""
    rng = np.random.default_rng(13)
    X = rng.uniform(-1.0, 1.0, size=(6000, 5))
    y = np.where(np.sin(3.0 * X[:, 0]) + X[:, 1] + 0.3 * rng.normal(size=6000) > 0, 1.0, -1.0)
    write_libsvm(str(path), y, sp.csr_matrix(np.round(X, 4)))


def _wide(path: Path) -> None:
    """24,000 rows of 50 dense features (1.2M values): the linear baseline counts 2 seconds or
    more, so with two jobs it trains beside the checkers."""
    rng = np.random.default_rng(14)
    X = np.round(rng.normal(size=(24_000, 50)), 3)
    y = np.where(X[:, :10].sum(axis=1) + X[:, 10] * X[:, 11] > 0, 1.0, -1.0)
    write_libsvm(str(path), y, sp.csr_matrix(X))


GENERATED = {"xor400": _xor, "three300": _three_classes, "wavy6000": _wavy, "wide24000": _wide}
CASES = [
    ("heart_scale", None),
    ("fourclass", None),
    ("german.numer", None),
    ("svmguide1", "svmguide1.t"),
    ("xor400", None),
    ("three300", None),
]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("golden")
    for name, make in GENERATED.items():
        make(d / name)
    return d


def _compare(got: dict[str, object], path: Path, *, update: bool = True) -> None:
    """``got`` against the golden at ``path``; with KCHECK_UPDATE_GOLDENS, written first
    unless ``update`` is False: a second run of a golden (two jobs) must only compare, or the
    last writer would hide a difference between them."""
    if update and os.environ.get("KCHECK_UPDATE_GOLDENS"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert path.exists(), f"{path} is missing: run with KCHECK_UPDATE_GOLDENS=1 to make it"
    want = json.loads(path.read_text())
    assert json.dumps(got, indent=1, sort_keys=True) == json.dumps(want, indent=1, sort_keys=True)


def _relative(v: dict[str, object], base: Path) -> dict[str, object]:
    """Paths as the case's name, so the goldens do not depend on where the checkout is."""
    text = json.dumps(v, sort_keys=True)
    return json.loads(text.replace(str(base) + "/", ""))  # type: ignore[no-any-return]


EXACT = ("never", "always", "auto")
#: Cases whose exact comparison takes seconds: in the whole suite only (``--slow``).
SLOW_CASES = {"german.numer", "svmguide1"}


def _check_params() -> list[object]:
    return [
        pytest.param(
            name,
            test,
            exact,
            marks=[pytest.mark.slow] if name in SLOW_CASES and exact != "never" else [],
        )
        for name, test in CASES
        for exact in EXACT
    ]


@pytest.mark.parametrize(("name", "test", "exact"), _check_params())
def test_check_json_is_unchanged(name: str, test: str | None, exact: str, generated: Path) -> None:
    base = generated if name in GENERATED else ROOT / "datasets"
    config = CheckConfig(
        train=str(base / name),
        test=None if test is None else str(base / test),
        exact=exact,
        memory_limit=MEMORY_LIMIT,
        jobs=1,
    )
    got = _relative(without_timing(run(config).json), base)
    _compare(got, GOLDEN / f"{name}.exact-{exact}.json")


#: (name, jobs): data only larger sets show, under the default --exact auto; wavy6000 with
#: two jobs too, as rbfsvm's CVs train their folds side by side then.
LARGER_CASES = [("wavy6000", 1), ("wavy6000", 2), ("wide24000", 2)]


@pytest.mark.parametrize("name", ["fourclass", "german.numer"])
def test_exact_mode_with_two_jobs_gives_the_json_of_one(name: str) -> None:
    """With two jobs, exact mode's CVs and repeats train their folds side by side in two
    threads (``libsvm_cv_order`` draws LIBSVM's own folds first): the golden of one job,
    unchanged, gap for gap and grid point for grid point."""
    base = ROOT / "datasets"
    config = CheckConfig(train=str(base / name), exact="auto", memory_limit=MEMORY_LIMIT, jobs=2)
    report = run(config)
    assert report.json["checkers"]["rbf"]["status"] == "exact"
    assert report.json["checkers"]["rbf"]["rows"] >= 500  # folds side by side from 500 rows
    got = _relative(without_timing(report.json), base)
    _compare(got, GOLDEN / f"{name}.exact-auto.json", update=False)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "jobs"), LARGER_CASES)
def test_check_json_of_larger_data_is_unchanged(name: str, jobs: int, generated: Path) -> None:
    """wavy6000: rbfsvm stands in for exact mode (the same JSON with two jobs); wide24000 with
    two jobs: the baseline trains beside the checkers (the JSON is that of one job:
    tests/test_beside.py)."""
    config = CheckConfig(
        train=str(generated / name), exact="auto", memory_limit=MEMORY_LIMIT, jobs=jobs
    )
    stages: list[str] = []
    report = run(config, lambda event: stages.append(event.stage))
    if name == "wavy6000":
        assert report.json["checkers"]["rbfsvm"]["status"] == "ok"
        assert report.json["exact"]["ran"] is False
    else:
        assert "starting the linear baseline (C search) in a worker process" in stages
        assert "waiting for the linear baseline (C search) in its worker" in stages
    got = _relative(without_timing(report.json), generated)
    # wavy6000's golden is its one-job run's; wide24000 has only the two-job one.
    _compare(got, GOLDEN / f"{name}.exact-auto.json", update=(name, jobs) != ("wavy6000", 2))


def test_every_golden_file_has_a_case() -> None:
    """A golden whose case was removed would silently stop being compared."""
    expected = {f"{n}.exact-{e}.json" for n, _ in CASES for e in EXACT}
    expected |= {f"{n}.exact-auto.json" for n, _ in LARGER_CASES}
    expected |= {f"{n}.verify.json" for n, _, _ in VERIFY_CASES}
    assert {p.name for p in GOLDEN.glob("*.json")} == expected


VERIFY_CASES = [
    ("heart_scale", None, None),
    ("svmguide1", "svmguide1.t", 300),
    ("three300", None, None),
]
#: Verify's full grid takes seconds on these: in the whole suite only (``--slow``).
SLOW_VERIFY = {"heart_scale", "three300"}


@pytest.mark.parametrize(
    ("name", "test", "max_rows"),
    [
        pytest.param(*case, marks=[pytest.mark.slow] if case[0] in SLOW_VERIFY else [])
        for case in VERIFY_CASES
    ],
)
def test_verify_json_is_unchanged(
    name: str, test: str | None, max_rows: int | None, generated: Path
) -> None:
    """``kcheck verify`` too: its grid search and decision must not drift either."""
    from kcheck.verify import VerifyConfig, verify

    base = generated if name in GENERATED else ROOT / "datasets"
    config = VerifyConfig(
        train=str(base / name),
        test=None if test is None else str(base / test),
        max_rows=max_rows,
        jobs=1,
    )
    got = _relative(without_timing(verify(config)), base)
    _compare(got, GOLDEN / f"{name}.verify.json")
