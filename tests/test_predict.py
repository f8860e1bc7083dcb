"""kcheck.predict: range files from anywhere, already scaled data, and probabilities.

Models are trained here with the real bindings on bundled data; the comparisons with the
official tools are in test_predict_interop.py.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import DATASETS
from liblinear import liblinearutil as ll
from libsvm import svmutil as sv

from kcheck import predict
from kcheck.bindings import engines
from kcheck.errors import KcheckError
from kcheck.io.data import read_libsvm, write_libsvm
from kcheck.modelfiles import export as models
from kcheck.scaling.fitting import fit_label_scaling, fit_scaler, write_range_file

HEART = DATASETS / "heart_scale"


@pytest.fixture(scope="module")
def heart_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """heart_scale (already in [-1, 1]) models of several kinds, with a range file apart."""
    d = tmp_path_factory.mktemp("models")
    y, x = sv.svm_read_problem(str(HEART))
    out = {}
    for name, opts in (("rbf", "-q"), ("rbf_prob", "-b 1 -q")):
        sv.svm_save_model(str(d / name), sv.svm_train(y, x, opts))
        out[name] = d / name
    for name, opts in (("svc", "-s 2 -B 1 -q"), ("logistic", "-s 0 -B 1 -q")):
        ll.save_model(str(d / name), ll.train(y, x, opts))
        out[name] = d / name
    y_np, X = read_libsvm(str(HEART))
    write_range_file(d / "heart.range", fit_scaler(X))
    out["range"] = d / "heart.range"
    return out


def test_missing_range_file_names_the_ways_out(heart_models: dict[str, Path]) -> None:
    with pytest.raises(KcheckError) as info:
        predict.load(str(heart_models["rbf"]))
    message = str(info.value)
    assert f"{heart_models['rbf']}.range not found" in message
    assert "-r RANGE" in message and "--no-scale" in message
    with pytest.raises(KcheckError, match="exclude each other"):
        predict.load(str(heart_models["rbf"]), range_path=str(heart_models["range"]), scale=False)
    with pytest.raises(KcheckError, match="no such range file"):
        predict.load(str(heart_models["rbf"]), range_path=str(heart_models["range"]) + ".x")


@pytest.mark.parametrize("name", ["rbf", "svc"])
def test_a_range_file_anywhere_is_the_same_as_model_range(
    tmp_path: Path, heart_models: dict[str, Path], name: str
) -> None:
    beside = tmp_path / name
    shutil.copy(heart_models[name], beside)
    shutil.copy(heart_models["range"], f"{beside}.range")
    default = predict.predict_file(str(beside), str(HEART))
    explicit = predict.predict_file(
        str(heart_models[name]), str(HEART), range_path=str(heart_models["range"])
    )
    np.testing.assert_array_equal(default.labels, explicit.labels)
    assert default.correct == explicit.correct and default.accuracy is not None
    assert default.accuracy > 0.8


@pytest.mark.parametrize("name", ["rbf", "svc"])
def test_no_scale_predicts_the_data_as_it_is(heart_models: dict[str, Path], name: str) -> None:
    saved = predict.load(str(heart_models[name]), scale=False)
    assert saved.scaler is None and saved.range_path is None
    y, X = read_libsvm(str(HEART), n_features=saved.n_features)
    result = predict.predict_file(str(heart_models[name]), str(HEART), scale=False)
    np.testing.assert_array_equal(result.labels, saved.model.predict(X))
    # The bindings' own prediction on the same rows.
    yl, xl = sv.svm_read_problem(str(HEART))
    if name == "rbf":
        theirs, _, _ = sv.svm_predict(yl, xl, sv.svm_load_model(str(heart_models[name])), "-q")
    else:
        theirs, _, _ = ll.predict(yl, xl, ll.load_model(str(heart_models[name])), "-q")
    np.testing.assert_array_equal(result.labels, theirs)


def test_no_scale_reads_a_liblinear_model_at_its_width(
    tmp_path: Path, heart_models: dict[str, Path]
) -> None:
    """Features beyond a LIBLINEAR model's width are dropped (as liblinear-predict ignores
    them); a LIBSVM model has no width, so every column is read."""
    wide = tmp_path / "wide"
    wide.write_text("".join(line.rstrip() + " 40:1\n" for line in HEART.read_text().splitlines()))
    assert predict.load(str(heart_models["svc"]), scale=False).n_features == 13
    assert predict.load(str(heart_models["rbf"]), scale=False).n_features is None
    with pytest.warns(Warning, match="dropped 270"):
        narrow = predict.predict_file(str(heart_models["svc"]), str(wide), scale=False)
    plain = predict.predict_file(str(heart_models["svc"]), str(HEART), scale=False)
    np.testing.assert_array_equal(narrow.labels, plain.labels)


def test_probabilities_of_a_libsvm_model(heart_models: dict[str, Path]) -> None:
    result = predict.predict_file(
        str(heart_models["rbf_prob"]), str(HEART), scale=False, probability=True
    )
    assert result.probabilities is not None and result.classes is not None
    assert result.probabilities.shape == (270, 2)
    np.testing.assert_allclose(result.probabilities.sum(axis=1), 1.0, rtol=1e-12)
    assert ((result.probabilities > 0) & (result.probabilities < 1)).all()
    # svm-predict -b 1's label is the most probable class.
    best = result.classes[np.argmax(result.probabilities, axis=1)]
    np.testing.assert_array_equal(result.labels, best)
    # And LIBSVM's binding agrees with every number.
    yl, xl = sv.svm_read_problem(str(HEART))
    labels, _, probs = sv.svm_predict(
        yl, xl, sv.svm_load_model(str(heart_models["rbf_prob"])), "-b 1 -q"
    )
    np.testing.assert_array_equal(result.labels, labels)
    np.testing.assert_array_equal(result.probabilities, np.array(probs))


def test_probabilities_of_liblinear_logistic_regression(heart_models: dict[str, Path]) -> None:
    result = predict.predict_file(
        str(heart_models["logistic"]), str(HEART), scale=False, probability=True
    )
    yl, xl = sv.svm_read_problem(str(HEART))
    labels, _, probs = ll.predict(yl, xl, ll.load_model(str(heart_models["logistic"])), "-b 1 -q")
    np.testing.assert_array_equal(result.labels, labels)
    assert result.probabilities is not None
    np.testing.assert_allclose(result.probabilities, np.array(probs), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("rbf", "no probability information"),
        ("svc", "only for logistic regression"),
    ],
)
def test_models_without_probabilities_are_refused(
    heart_models: dict[str, Path], name: str, words: str
) -> None:
    with pytest.raises(KcheckError, match=words) as info:
        predict.predict_file(str(heart_models[name]), str(HEART), scale=False, probability=True)
    assert str(info.value).startswith(str(heart_models[name]))


def test_format_probabilities_like_svm_predict() -> None:
    text = predict.format_probabilities(
        np.array([3.0, -1.0, 1.0]),
        np.array([3.0, -1.0]),
        np.array([[0.971092, 0.0207594, 0.00814853], [0.25, 0.5, 0.25]]),
    )
    assert text == "labels 3 -1 1\n3 0.971092 0.0207594 0.00814853\n-1 0.25 0.5 0.25\n"
    assert (
        predict.format_probabilities(np.array([1.0, -1.0]), np.empty(0), np.empty((0, 2)))
        == "labels 1 -1\n"
    )


def test_label_range_of_the_range_file_scales_the_true_labels(tmp_path: Path) -> None:
    """Labels scaled by svm-scale -y train a model whose labels are the scaled ones; the
    range file's y section scales the test file's labels the same way for the accuracy."""
    y, X = read_libsvm(str(HEART))
    scaler = fit_scaler(X)
    ys = fit_label_scaling(y, 0.0, 1.0)
    scaler = dataclasses.replace(scaler, y_scaling=ys)
    scaled = tmp_path / "scaled"
    write_libsvm(str(scaled), ys.apply(y), scaler.transform(X))
    yl, xl = sv.svm_read_problem(str(scaled))
    model = tmp_path / "model"
    sv.svm_save_model(str(model), sv.svm_train(yl, xl, "-q"))
    write_range_file(f"{model}.range", scaler)
    result = predict.predict_file(str(model), str(HEART))
    assert set(np.unique(result.labels).tolist()) == {0.0, 1.0}
    assert result.accuracy is not None and result.accuracy > 0.8


def test_train_rbf_with_probabilities_is_seeded() -> None:
    y, X = read_libsvm(str(HEART))
    problem = engines.SvmProblem.from_data(X, y)
    a = engines.train_rbf(problem, 1.0, 0.1, probability=True, seed=3)
    b = engines.train_rbf(problem, 1.0, 0.1, probability=True, seed=3)
    plain = engines.train_rbf(problem, 1.0, 0.1)
    assert a.has_probability and not plain.has_probability
    _, pa = a.predict_probability(X)
    _, pb = b.predict_probability(X)
    np.testing.assert_array_equal(pa, pb)
    with pytest.raises(engines.EngineError, match="no probability"):
        plain.predict_probability(X)


def test_export_with_probabilities_needs_the_kernel_model(tmp_path: Path) -> None:
    y, X = read_libsvm(str(HEART))
    scaler = fit_scaler(X, "maxabs")
    with pytest.raises(KcheckError, match="kernel model"):
        models.export(
            scaler.transform(X), y, scaler, "linear", str(tmp_path / "m"), probability=True
        )
    assert list(tmp_path.iterdir()) == []
