"""``kcheck expand``, the term spec and ``--model linear+K``: against direct formulas, against
``kcheck predict``, and piped into the official ``liblinear-predict``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import runner
from conftest import DATASETS, require_tool
from runner import Run

from kcheck.io.data import read_libsvm


def kcheck(*args: object, code: int = 0) -> Run:
    """``python -m kcheck ARGS``, which must end with ``code`` and no traceback."""
    return runner.kcheck(*args, code=code)


def write_svm(path: Path, X: np.ndarray, y: np.ndarray) -> Path:
    with path.open("w") as f:
        for row, label in zip(X, y, strict=True):
            cells = " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(row) if v != 0)
            f.write(f"{int(label)} {cells}\n")
    return path


def maxabs_products(X: np.ndarray, train: np.ndarray, terms: list[tuple[int, int]]) -> np.ndarray:
    """The formula: divide each column by its max |x| on the training file, then x_i*x_j."""
    m = np.abs(train).max(axis=0)
    S = np.divide(X, m, out=np.zeros_like(X), where=m > 0)
    return np.column_stack([S] + [S[:, i] * S[:, j] for i, j in terms])


@pytest.mark.slow
@pytest.mark.parametrize("density", [1.0, 0.3])
def test_expand_matches_the_formula(tmp_path: Path, density: float) -> None:
    rng = np.random.default_rng(11)
    A = rng.normal(size=(60, 6)) * np.array([1, 5, 0.1, 2, 3, 1])
    A[rng.random(A.shape) > density] = 0.0
    y = np.where(rng.random(60) > 0.5, 1, -1)
    train = write_svm(tmp_path / "train.svm", A, y)
    A = read_libsvm(str(train))[1].toarray()  # the values as written (6 decimals)
    out = tmp_path / "out.svm"
    kcheck("expand", train, "--terms", "2:5,3:3,6:1", "--fit-scaling", train, "-o", out, "-q")
    y2, X2 = read_libsvm(str(out))
    np.testing.assert_array_equal(y2, y)
    direct = maxabs_products(A, A, [(1, 4), (2, 2), (0, 5)])
    np.testing.assert_allclose(X2.toarray(), direct, rtol=1e-15, atol=0)
    # A test file whose last index is 3 of 6: the products still come after 6, from -r.
    kcheck("check", train, "--model-out", tmp_path / "m", "--model", "linear", "-q", "--json")
    B = A[:10].copy()
    B[:, 3:] = 0.0
    test = write_svm(tmp_path / "test.svm", B, y[:10])
    B = read_libsvm(str(test), n_features=6)[1].toarray()
    kcheck("expand", test, "--terms", "2:5,3:3,1:2", "-r", tmp_path / "m.range", "-o", out)
    _, X3 = read_libsvm(str(out), n_features=6 + 3)  # a product may be 0 in every row
    np.testing.assert_allclose(
        X3.toarray(), maxabs_products(B, A, [(1, 4), (2, 2), (0, 1)]), rtol=1e-15
    )


def xor_file(path: Path, rows: int = 1600) -> Path:
    rng = np.random.default_rng(4)
    X = rng.uniform(-1, 1, size=(rows, 6))
    return write_svm(path, X, np.where(X[:, 1] * X[:, 3] > 0, 1, -1))


@pytest.mark.slow
def test_from_check_takes_the_top_terms(tmp_path: Path) -> None:
    data = xor_file(tmp_path / "xor.svm")
    verdict = tmp_path / "v.json"
    kcheck("check", data, "--explain", "--exact", "never", "-o", verdict, "-q")
    terms = json.loads(verdict.read_text())["explain"]["terms"]
    assert terms[0]["features"] == [2, 4]
    a = tmp_path / "a.svm"
    b = tmp_path / "b.svm"
    kcheck("expand", data, "--from-check", verdict, "--top", "2", "--fit-scaling", data, "-o", a)
    pairs = ",".join(f"{t['features'][0]}:{t['features'][1]}" for t in terms[:2])
    kcheck("expand", data, "--terms", pairs, "--fit-scaling", data, "-o", b)
    assert a.read_bytes() == b.read_bytes()
    # Too many terms asked for, and a verdict without an explanation: one line, exit 2.
    bad = kcheck(
        "expand", data, "--from-check", verdict, "--top", "99", "--fit-scaling", data, code=2
    )
    assert "lists only" in bad.stderr
    plain = tmp_path / "plain.json"
    kcheck("check", data, "--exact", "never", "-o", plain, "-q")
    bad = kcheck("expand", data, "--from-check", plain, "--top", "1", "-r", plain, code=2)
    assert len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--terms", "1:9"], "outside 1..6"),
        (["--terms", "1-2"], "I:J pairs"),
        (["--terms", "1:2"], "give -r RANGE"),  # no scaling given
        (["--terms", "1:2", "--top", "2"], "--top K goes with --from-check"),
    ],
)
def test_bad_options_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    data = xor_file(tmp_path / "xor.svm", rows=40)
    scaling = [] if message.startswith("give") else ["--fit-scaling", str(data)]
    run = kcheck("expand", data, *args, *scaling, code=2)
    assert message in run.stderr


@pytest.mark.slow
def test_expand_never_writes_over_its_input(tmp_path: Path) -> None:
    data = xor_file(tmp_path / "xor.svm", rows=40)
    before = data.read_bytes()
    kcheck("expand", data, "--terms", "1:2", "--fit-scaling", data, "-o", data, code=2)
    assert data.read_bytes() == before


@pytest.fixture(scope="module")
def linear3(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    tmp = tmp_path_factory.mktemp("linear3")
    data = xor_file(tmp / "xor.svm")
    v = tmp / "v.json"
    kcheck(
        "check",
        data,
        "--explain",
        "--exact",
        "never",
        "--model-out",
        tmp / "m",
        "--model",
        "linear+3",
        "-o",
        v,
        "-q",
    )
    return data, tmp / "m", json.loads(v.read_text())


@pytest.mark.slow
def test_linear_k_saves_the_model_and_its_spec(linear3: tuple[Path, Path, dict]) -> None:
    data, model, v = linear3
    assert v["model"]["kind"] == "linear+3"
    assert v["model"]["terms_path"] == f"{model}.terms"
    spec = json.loads(Path(f"{model}.terms").read_text())
    top = [t["features"] for t in v["explain"]["terms"][:3]]
    assert spec == {"format": "kcheck-terms", "version": 1, "width": 6, "index_base": 1} | {
        "terms": top
    }
    # kcheck predict applies the spec: the products carry the xor, so accuracy is high.
    run = kcheck("predict", model, data)
    assert "Accuracy" in run.stderr
    labels = np.array(run.stdout.split(), dtype=float)
    y, _ = read_libsvm(str(data))
    assert np.mean(labels == y) > 0.95


@pytest.mark.slow
def test_expand_then_liblinear_predict_agrees_with_kcheck_predict(
    linear3: tuple[Path, Path, dict], tmp_path: Path
) -> None:
    predict_tool = require_tool("liblinear-predict")
    data, model, _ = linear3
    ours = kcheck("predict", model, data).stdout
    expanded = kcheck("expand", data, "--spec", f"{model}.terms", "-r", f"{model}.range").stdout
    x = tmp_path / "x.svm"
    x.write_bytes(expanded)
    out = tmp_path / "out"
    subprocess.run([predict_tool, x, model, out], check=True, capture_output=True, timeout=600)
    assert out.read_bytes() == ours
    # The same through a pipe, as the help shows it.
    piped = subprocess.run(
        [predict_tool, "/dev/stdin", model, tmp_path / "out2"],
        input=expanded,
        check=True,
        capture_output=True,
        timeout=600,
    )
    assert piped.returncode == 0 and (tmp_path / "out2").read_bytes() == ours


HOSTILE = {
    "not JSON": "{",
    "another format": '{"format": "x", "version": 1}',
    "a newer version": '{"format": "kcheck-terms", "version": 2}',
    "a width that disagrees": (
        '{"format": "kcheck-terms", "version": 1, "width": 5, "index_base": 1, '
        '"terms": [[1, 2], [2, 3], [1, 1]]}'
    ),
    "an index past the width": (
        '{"format": "kcheck-terms", "version": 1, "width": 6, "index_base": 1, '
        '"terms": [[1, 2], [2, 7], [1, 1]]}'
    ),
    "a float index": (
        '{"format": "kcheck-terms", "version": 1, "width": 6, "index_base": 1, '
        '"terms": [[1, 2], [2, 3.0], [1, 1]]}'
    ),
    "too few terms for the model": (
        '{"format": "kcheck-terms", "version": 1, "width": 6, "index_base": 1, "terms": [[1, 2]]}'
    ),
    "a huge width": (
        '{"format": "kcheck-terms", "version": 1, "width": 99999999999, "index_base": 1, '
        '"terms": [[1, 2]]}'
    ),
    "binary": "\udcff\x00",
}


@pytest.mark.parametrize("what", list(HOSTILE))
def test_predict_validates_the_spec(
    linear3: tuple[Path, Path, dict], tmp_path: Path, what: str
) -> None:
    data, model, _ = linear3
    copy = tmp_path / "m"
    copy.write_bytes(model.read_bytes())
    Path(f"{copy}.range").write_bytes(Path(f"{model}.range").read_bytes())
    Path(f"{copy}.terms").write_bytes(HOSTILE[what].encode("utf-8", "surrogateescape"))
    run = kcheck("predict", copy, data, code=2)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.describe()
    assert f"{copy}.terms" in lines[0] or "m.terms" in lines[0]


@pytest.mark.slow
def test_linear_k_needs_explain(tmp_path: Path) -> None:
    run = kcheck(
        "check",
        DATASETS / "heart_scale",
        "--model-out",
        tmp_path / "m",
        "--model",
        "linear+2",
        code=2,
    )
    assert "needs --explain" in run.stderr
    assert not (tmp_path / "m").exists()
