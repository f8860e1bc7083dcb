"""``kcheck predict`` with the models, range files and outputs of the official LIBSVM tools.

Models trained by svm-train and liblinear-train on svm-scale output, range files written by
``svm-scale -s``, already scaled data, and ``-b 1`` probabilities compared byte for byte
with ``svm-predict -b 1`` and ``liblinear-predict -b 1``. The files here are the bundled data
sets; every tool run is deterministic, so the comparisons are exact.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import DATASETS, require_tool
from runner import kcheck, one_error_line

pytestmark = pytest.mark.interop

TRAIN, TEST = DATASETS / "svmguide1", DATASETS / "svmguide1.t"
HEART = DATASETS / "heart_scale"


def tool(name: str, *args: object, stdout: Path | None = None) -> None:
    path = require_tool(name)
    if stdout is None:
        subprocess.run([path, *map(str, args)], check=True, capture_output=True, timeout=600)
        return
    with open(stdout, "wb") as f:
        subprocess.run(
            [path, *map(str, args)], check=True, stdout=f, stderr=subprocess.DEVNULL, timeout=600
        )


def ok(*args: object) -> bytes:
    r = kcheck(*args)
    assert r.returncode == 0, r.stderr
    return r.stdout


def refused(*args: object) -> str:
    """One error line and exit 2, nothing on stdout."""
    r = kcheck(*args)
    line = one_error_line(r, stages=False)
    assert r.stdout == b""
    return line


def official_pair(
    tmp: Path, trainer: str, *options: object, train: Path = TRAIN
) -> tuple[Path, Path]:
    """``svm-scale -s r train > train.s; TRAINER [options] train.s m``: (model, range)."""
    rng, scaled, model = tmp / "r", tmp / "train.s", tmp / "m"
    tool("svm-scale", "-s", rng, train, stdout=scaled)
    tool(trainer, "-q", *options, scaled, model)
    return model, rng


def official_predict(
    tmp: Path, predictor: str, model: Path, rng: Path, data: Path, *options: object
) -> tuple[bytes, Path]:
    """``svm-scale -r r data > data.s; PREDICTOR [options] data.s m out``: (out, data.s)."""
    scaled, out = tmp / f"{data.name}.s", tmp / f"{data.name}.{predictor}.out"
    tool("svm-scale", "-r", rng, data, stdout=scaled)
    tool(predictor, *options, scaled, model, out)
    return out.read_bytes(), scaled


@pytest.mark.slow
@pytest.mark.parametrize(
    ("trainer", "predictor"),
    [("svm-train", "svm-predict"), ("liblinear-train", "liblinear-predict")],
)
def test_range_file_of_svm_scale(tmp_path: Path, trainer: str, predictor: str) -> None:
    """kcheck predict -r r m test == svm-scale -r r test | PREDICTOR, without a MODEL.range."""
    model, rng = official_pair(tmp_path, trainer)
    theirs, scaled = official_predict(tmp_path, predictor, model, rng, TEST)
    ours = ok("predict", "-r", rng, model, TEST, "-q")
    assert np.array_equal(np.array(ours.split(), float), np.array(theirs.split(), float))
    assert len(ours.split()) == 4000
    # Already scaled data, as the official predictor reads it: the same file to the byte.
    assert ok("predict", "--no-scale", model, scaled, "-q") == theirs


@pytest.mark.slow
def test_accuracy_line_agrees_with_svm_predict(tmp_path: Path) -> None:
    model, rng = official_pair(tmp_path, "svm-train")
    scaled, out = tmp_path / "t.s", tmp_path / "out"
    tool("svm-scale", "-r", rng, TEST, stdout=scaled)
    theirs = subprocess.run(
        [require_tool("svm-predict"), scaled, model, out],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    r = kcheck("predict", "--no-scale", model, scaled)
    assert r.returncode == 0
    ours = r.stderr.strip()
    assert ours.startswith("Accuracy = ") and theirs.startswith(ours), (ours, theirs)


@pytest.mark.slow
def test_range_file_with_a_y_section(tmp_path: Path) -> None:
    """svm-scale -y 0 1 turns heart_scale's -1/+1 into 0/1, in the model too; the range
    file's y section scales the true labels the same way, so the accuracy is svm-predict's."""
    rng, scaled, model = tmp_path / "r", tmp_path / "train.s", tmp_path / "m"
    tool("svm-scale", "-y", "0", "1", "-s", rng, HEART, stdout=scaled)
    tool("svm-train", "-q", scaled, model)
    assert b"\nlabel 1 0\n" in model.read_bytes() or b"\nlabel 0 1\n" in model.read_bytes()
    test_s, out = tmp_path / "test.s", tmp_path / "out"
    tool("svm-scale", "-r", rng, HEART, stdout=test_s)
    theirs = subprocess.run(
        [require_tool("svm-predict"), test_s, model, out],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    r = kcheck("predict", "-r", rng, model, HEART)
    assert r.returncode == 0, r.stderr
    assert set(r.stdout.split()) == {b"0", b"1"}
    assert np.mean(np.array(r.stdout.split(), float) == np.loadtxt(out)) >= 0.99
    ours = r.stderr.strip()
    correct = int(ours.split("(")[1].split("/")[0])
    assert correct > 200  # of 270: the 0/1 predictions are compared with scaled labels
    assert theirs.split("(")[1].split("/")[0] == str(correct), (ours, theirs)


@pytest.mark.slow
@pytest.mark.parametrize("data", [HEART, DATASETS / "fourclass"])
def test_probabilities_like_svm_predict_b1(tmp_path: Path, data: Path) -> None:
    model, rng = official_pair(tmp_path, "svm-train", "-b", "1", train=data)
    theirs, scaled = official_predict(tmp_path, "svm-predict", model, rng, data, "-b", "1")
    assert theirs.startswith(b"labels ")
    assert ok("predict", "-b", "1", "--no-scale", model, scaled, "-q") == theirs
    via_range = ok("predict", "-b", "1", "-r", rng, model, data, "-q")
    lines_ours, lines_theirs = via_range.splitlines(), theirs.splitlines()
    assert lines_ours[0] == lines_theirs[0] and len(lines_ours) == len(lines_theirs)
    a = np.array([line.split() for line in lines_ours[1:]], float)
    b = np.array([line.split() for line in lines_theirs[1:]], float)
    assert np.mean(a[:, 0] == b[:, 0]) >= 0.99  # svm-scale rounds to 6 digits, we do not
    np.testing.assert_allclose(a[:, 1:], b[:, 1:], atol=1e-3)


@pytest.mark.slow
def test_probabilities_of_three_classes(tmp_path: Path) -> None:
    """Pairwise coupling (LIBSVM) and normalised logistics (LIBLINEAR) for three classes."""
    three = tmp_path / "three"
    lines = HEART.read_text().splitlines()
    three.write_text(
        "".join(
            f"{2 if i % 3 == 0 else line.split()[0]} {' '.join(line.split()[1:])}\n"
            for i, line in enumerate(lines)
        )
    )
    for trainer, predictor, options in (
        ("svm-train", "svm-predict", ("-b", "1")),
        ("liblinear-train", "liblinear-predict", ("-s", "0")),
    ):
        model, rng = official_pair(tmp_path, trainer, *options, train=three)
        theirs, scaled = official_predict(tmp_path, predictor, model, rng, three, "-b", "1")
        assert len(theirs.splitlines()[0].split()) == 4  # "labels" and three classes
        assert ok("predict", "-b", "1", "--no-scale", model, scaled, "-q") == theirs


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["0", "6", "7"])
def test_liblinear_logistic_regression_b1(tmp_path: Path, solver: str) -> None:
    model, rng = official_pair(tmp_path, "liblinear-train", "-s", solver)
    theirs, scaled = official_predict(tmp_path, "liblinear-predict", model, rng, TEST, "-b", "1")
    assert ok("predict", "-b", "1", "--no-scale", model, scaled, "-q") == theirs


@pytest.mark.parametrize(
    ("trainer", "options", "words"),
    [
        ("svm-train", (), "no probability information"),
        ("liblinear-train", ("-s", "2"), "only for logistic regression"),
        ("liblinear-train", ("-s", "4"), "only for logistic regression"),
    ],
)
def test_b1_without_probabilities_is_refused(
    tmp_path: Path, trainer: str, options: tuple[str, ...], words: str
) -> None:
    model, rng = official_pair(tmp_path, trainer, *options, train=HEART)
    line = refused("predict", "-b", "1", "-r", rng, model, HEART)
    assert line.startswith(f"kcheck: error: {model}: ") and words in line


@pytest.mark.slow
def test_predict_usage(tmp_path: Path) -> None:
    model, rng = official_pair(tmp_path, "svm-train", train=HEART)
    line = refused("predict", model, HEART)
    assert f"{model}.range not found" in line and "-r RANGE" in line and "--no-scale" in line
    r = kcheck("predict", "-r", rng, "--no-scale", model, HEART)
    assert r.returncode == 2 and "-r and --no-scale" in r.stderr
    assert "no such range file" in refused("predict", "-r", tmp_path / "none", model, HEART)
    assert kcheck("predict", "-b", "2", model, HEART).returncode == 2
    # -o may not overwrite the range file given with -r.
    assert "input file" in refused("predict", "-r", rng, model, HEART, "-o", rng)
    helptext = ok("predict", "--help").decode()
    for option in ("-r RANGE", "--no-scale", "-b"):
        assert option in helptext


@pytest.mark.slow
def test_check_probability_model_works_with_both_predictors(tmp_path: Path) -> None:
    """kcheck check --model kernel --probability: svm-predict -b 1 reads the model, and
    kcheck predict -b 1 prints the same bytes on the same scaled file."""
    model = tmp_path / "m"
    ok(
        "check",
        HEART,
        "--model-out",
        model,
        "--model",
        "kernel",
        "--probability",
        "-q",
        "-j",
        "1",
        "-o",
        tmp_path / "verdict.json",
    )
    assert b"\nprobA " in model.read_bytes() and b"\nprobB " in model.read_bytes()
    theirs, scaled = official_predict(
        tmp_path, "svm-predict", model, Path(f"{model}.range"), HEART, "-b", "1"
    )
    assert theirs.startswith(b"labels ")
    assert ok("predict", "-b", "1", "--no-scale", model, scaled, "-q") == theirs
    ours = ok("predict", "-b", "1", model, HEART, "-q").splitlines()
    assert ours[0] == theirs.splitlines()[0] and len(ours) == 271
    probs = np.array([line.split()[1:] for line in ours[1:]], float)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=2e-6)  # %g: 6 digits each
    # Without --model kernel there may be no kernel model to give probabilities.
    r = kcheck("check", HEART, "--model-out", tmp_path / "x", "--probability", "-q")
    assert r.returncode == 2 and "--model kernel" in r.stderr
    assert not (tmp_path / "x").exists()
