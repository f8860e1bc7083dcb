"""Golden outputs: the check's JSON on fixed inputs, byte for byte apart from timing fields.

A refactor must not change what kcheck says. Each case runs the whole check (``--exact never``
and ``--exact always``, a fixed ``--memory-limit`` and one job, so that nothing machine-dependent
enters) and compares the JSON without its ``*seconds`` fields to ``tests/golden/NAME.json``.

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

from kcheck.data import write_libsvm
from kcheck.pipeline import CheckConfig, run
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


GENERATED = {"xor400": _xor, "three300": _three_classes}
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


def _relative(v: dict[str, object], base: Path) -> dict[str, object]:
    """Paths as the case's name, so the goldens do not depend on where the checkout is."""
    text = json.dumps(v, sort_keys=True)
    return json.loads(text.replace(str(base) + "/", ""))  # type: ignore[no-any-return]


@pytest.mark.parametrize("exact", ["never", "always"])
@pytest.mark.parametrize(("name", "test"), CASES)
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
    path = GOLDEN / f"{name}.exact-{exact}.json"
    if os.environ.get("KCHECK_UPDATE_GOLDENS"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert path.exists(), f"{path} is missing: run with KCHECK_UPDATE_GOLDENS=1 to make it"
    want = json.loads(path.read_text())
    assert json.dumps(got, indent=1, sort_keys=True) == json.dumps(want, indent=1, sort_keys=True)


def test_every_golden_file_has_a_case() -> None:
    """A golden whose case was removed would silently stop being compared."""
    expected = {f"{n}.exact-{e}.json" for n, _ in CASES for e in ("never", "always")}
    expected |= {f"{n}.verify.json" for n, _, _ in VERIFY_CASES}
    assert {p.name for p in GOLDEN.glob("*.json")} == expected


VERIFY_CASES = [
    ("heart_scale", None, None),
    ("svmguide1", "svmguide1.t", 300),
    ("three300", None, None),
]


@pytest.mark.parametrize(("name", "test", "max_rows"), VERIFY_CASES)
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
    path = GOLDEN / f"{name}.verify.json"
    if os.environ.get("KCHECK_UPDATE_GOLDENS"):
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert path.exists(), f"{path} is missing: run with KCHECK_UPDATE_GOLDENS=1 to make it"
    want = json.loads(path.read_text())
    assert json.dumps(got, indent=1, sort_keys=True) == json.dumps(want, indent=1, sort_keys=True)
