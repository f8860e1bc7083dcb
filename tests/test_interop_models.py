"""Saved models against the official tools: svm-scale, svm-predict, liblinear-predict.

svm-scale prints scaled values with ``%g`` (6 significant digits), so a point very close to the
decision boundary may flip between ``svm-scale -r`` + ``svm-predict`` and ``kcheck predict``
(which scales in full precision). Each comparison therefore asks for at least 99.5% agreement
on kcheck's own scaling, and exact agreement when kcheck predicts from svm-scale's output.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import DATASETS, ROOT, require_tool

from kcheck import predict
from kcheck.io.data import read_libsvm
from kcheck.modelfiles import export as models
from kcheck.scaling.fitting import fit_scaler
from kcheck.tuning import rbf_grid as rbf_search

pytestmark = pytest.mark.interop

GRID = rbf_search.Grid(
    log2_C=(1.0, 3.0, 5.0), log2_gamma=(3.0, 1.0, -1.0, -3.0), refine=True, radius=1.0, step=1.0
)


def _run(*args: str, stdout=None) -> None:
    subprocess.run(list(args), check=True, stdout=stdout, stderr=subprocess.DEVNULL, timeout=600)


def _kcheck_predict(model: Path, data: Path) -> np.ndarray:
    r = subprocess.run(
        [sys.executable, "-m", "kcheck", "predict", str(model), str(data), "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    return np.array(r.stdout.split(), dtype=float)


def _official(tool: str, model: Path, data: Path, tmp: Path) -> tuple[np.ndarray, Path]:
    """svm-scale -r MODEL.range DATA, then TOOL on the result: (labels, scaled file)."""
    scaled = tmp / f"{data.name}.scaled"
    with open(scaled, "w") as f:
        _run(require_tool("svm-scale"), "-r", f"{model}.range", str(data), stdout=f)
    out = tmp / f"{data.name}.{tool}.out"
    _run(require_tool(tool), str(scaled), str(model), str(out))
    return np.loadtxt(out, ndmin=1), scaled


def _compare(model: Path, data: Path, tool: str, tmp: Path) -> None:
    theirs, scaled = _official(tool, model, data, tmp)
    ours = _kcheck_predict(model, data)
    assert ours.shape == theirs.shape
    assert np.mean(ours == theirs) >= 0.995
    saved = predict.load(str(model))
    _, X = read_libsvm(str(scaled), n_features=saved.scaler.n_features)
    assert np.array_equal(saved.predict_scaled(X), theirs)


def _export(train: str, kind: str, tmp: Path) -> Path:
    y, X = read_libsvm(str(DATASETS / train))
    scaler = fit_scaler(X, method="maxabs")
    path = tmp / f"{train}.{kind}.model"
    models.export(scaler.transform(X), y, scaler, kind, str(path), seed=0, grid=GRID)
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("train", "test"), [("fourclass", "fourclass"), ("heart_scale", "heart_scale")]
)
def test_kernel_model_predicts_like_svm_predict(tmp_path, train, test):
    model = _export(train, "kernel", tmp_path)
    _compare(model, DATASETS / test, "svm-predict", tmp_path)


def test_linear_model_predicts_like_liblinear_predict(tmp_path):
    model = _export("svmguide1", "linear", tmp_path)
    _compare(model, DATASETS / "svmguide1.t", "liblinear-predict", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("trainer", "predictor"),
    [("svm-train", "svm-predict"), ("liblinear-train", "liblinear-predict")],
)
def test_models_of_the_official_tools(tmp_path, trainer, predictor):
    """A model trained by svm-train/liblinear-train on svm-scale output, with svm-scale's range."""
    train, test = DATASETS / "svmguide1", DATASETS / "svmguide1.t"
    model = tmp_path / "official.model"
    scaled = tmp_path / "train.scaled"
    with open(scaled, "w") as f:
        _run(require_tool("svm-scale"), "-s", f"{model}.range", str(train), stdout=f)
    _run(require_tool(trainer), "-q", str(scaled), str(model))
    _compare(model, test, predictor, tmp_path)


def _official_model(tmp_path, train, trainer, options):
    """A model trained by the official tool on svm-scale'd ``train``, its range file beside it."""
    model = tmp_path / "official.model"
    scaled = tmp_path / "train.scaled"
    with open(scaled, "w") as f:
        _run(require_tool("svm-scale"), "-s", f"{model}.range", str(train), stdout=f)
    _run(require_tool(trainer), "-q", *options, str(scaled), str(model))
    return model


@pytest.mark.slow
@pytest.mark.parametrize(
    ("trainer", "options", "predictor"),
    [
        ("liblinear-train", ("-s", "4"), "liblinear-predict"),  # two weight vectors, 2 classes
        ("liblinear-train", ("-s", "0", "-B", "1"), "liblinear-predict"),
        ("liblinear-train", ("-s", "5"), "liblinear-predict"),
        ("svm-train", ("-s", "1", "-t", "3"), "svm-predict"),  # nu-SVC, sigmoid kernel
        ("svm-train", ("-t", "1", "-b", "1"), "svm-predict"),  # polynomial, probA/probB
        ("svm-train", ("-t", "0"), "svm-predict"),
    ],
)
def test_every_accepted_kind_of_the_official_tools(tmp_path, trainer, options, predictor):
    """Each classifier kind kcheck accepts predicts exactly as the official tool does."""
    train = DATASETS / "heart_scale"
    model = _official_model(tmp_path, train, trainer, options)
    _compare(model, train, predictor, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("trainer", "options", "words"),
    [
        ("liblinear-train", ("-s", "11"), "regression"),
        ("liblinear-train", ("-s", "12"), "regression"),
        ("liblinear-train", ("-s", "13"), "regression"),
        ("svm-train", ("-s", "2"), "one-class"),
        ("svm-train", ("-s", "3"), "regression"),
        ("svm-train", ("-s", "4"), "regression"),
    ],
)
def test_models_kcheck_cannot_use_are_refused(tmp_path, trainer, options, words):
    """Genuine regression and one-class models: one line, exit 2, the first line named."""
    train = DATASETS / "heart_scale"
    model = _official_model(tmp_path, train, trainer, options)
    r = subprocess.run(
        [sys.executable, "-m", "kcheck", "predict", str(model), str(train)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"kcheck: error: {model}:1: ") and words in line, line
