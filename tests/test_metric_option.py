"""``--metric balanced|auc``: class-weighted training, scores and gaps in the metric, refusals.

The generated "ball" data hide a 4% minority class in a small disc: predicting the majority
everywhere is 96% accurate, so accuracy sees no gain from a kernel, while balanced accuracy and
AUC see the disc that no line can cut out.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import made_once, require_tool
from sklearn.metrics import balanced_accuracy_score, roc_auc_score
from test_schema import assert_valid

from kcheck import metrics, pipeline, verify
from kcheck.bindings import engines
from kcheck.checkers import multilinear
from kcheck.config import CheckConfig
from kcheck.errors import KcheckError
from kcheck.io.data import read_libsvm
from kcheck.modelfiles import load as model_load
from kcheck.scoring import Scoring, positive_scores
from kcheck.split import stratified_folds
from kcheck.tuning import linear_c as tuning

DATA = Path(__file__).resolve().parent.parent / "datasets"


def _write(path: Path, X: np.ndarray, y: np.ndarray) -> None:
    with open(path, "w") as f:
        for yi, xi in zip(y, X, strict=True):
            f.write(f"{int(yi)} " + " ".join(f"{j + 1}:{v:.4f}" for j, v in enumerate(xi)) + "\n")


@pytest.fixture(scope="module")
def ball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    n = 1200
    X = rng.uniform(-1, 1, size=(n, 2))
    inside = np.sqrt((X**2).sum(axis=1)) < 0.25
    y = np.where(rng.random(n) < np.where(inside, 0.6, 0.01), 1, -1)
    path = tmp_path_factory.mktemp("ball") / "ball"
    _write(path, X, y)
    return path


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, ball: Path) -> dict[str, pipeline.CheckReport]:
    """Made once a run: the whole suite runs this module's slow and fast tests apart."""
    checkers = ("degree2", "multilinear", "rff")

    def three() -> dict[str, pipeline.CheckReport]:
        return {
            m: pipeline.run(
                CheckConfig(train=str(ball), metric=m, exact="never", checkers=checkers)
            )
            for m in ("accuracy", "balanced", "auc")
        }

    return made_once(request.config, "metric-runs", three)


@pytest.mark.slow
def test_balanced_and_auc_see_what_accuracy_hides(runs: dict[str, pipeline.CheckReport]) -> None:
    acc, bal, auc = (runs[m].json for m in ("accuracy", "balanced", "auc"))
    assert (acc["verdict"], acc["margin"]) == ("linear", "clear")
    assert (bal["verdict"], bal["margin"]) == ("kernel", "clear")
    assert (auc["verdict"], auc["margin"]) == ("kernel", "clear")
    assert [j["metric"] for j in (acc, bal, auc)] == ["accuracy", "balanced", "auc"]


def test_scores_are_the_metric_of_each_model_on_V(runs: dict[str, pipeline.CheckReport]) -> None:
    for metric, report in runs.items():
        assert_valid("check.schema.json", report.json)
        assert set(report.results) == {"linear", "degree2", "multilinear", "rff"}
        V = report.V
        for name, r in report.results.items():
            block = report.json["linear"] if name == "linear" else report.json["checkers"][name]
            assert r.predicted is not None
            if metric == "accuracy":
                want = float(np.mean(r.predicted == V.y))
                assert block["val_score"] == block["val_accuracy"]
            elif metric == "balanced":
                want = balanced_accuracy_score(V.y, r.predicted)
            else:
                assert r.scores is not None and r.scores.ndim == 1
                want = roc_auc_score(V.y == 1, r.scores)
            assert block["val_score"] == pytest.approx(want, abs=5e-6), (metric, name)


def test_every_model_trains_with_the_class_weights(runs: dict[str, pipeline.CheckReport]) -> None:
    report = runs["balanced"]
    T = report.T
    n_pos = int(np.sum(T.y == 1))
    n_neg = T.rows - n_pos
    want = {"-1": T.rows / (2 * n_neg), "1": T.rows / (2 * n_pos)}
    got = report.json["class_weights"]
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-5)
    assert runs["accuracy"].json["class_weights"] is None
    # The baseline is LIBLINEAR's weighted model: the same weights as fitting it directly,
    # and not the unweighted one.
    weight = report.result.scoring.class_weight
    C = report.json["linear"]["C"]
    weighted, _ = tuning.fit_linear(T.X, T.y, seed=0, C=C, class_weight=weight)
    plain, _ = tuning.fit_linear(T.X, T.y, seed=0, C=C)
    base = report.results["linear"]
    ours = base.predict(report.V.X) if base.predict else None
    assert ours is not None
    np.testing.assert_array_equal(ours, weighted.predict(report.V.X))
    assert not np.allclose(weighted.weights, plain.weights)


def test_liblinear_train_with_w_options_gives_the_same_model(ball: Path, tmp_path: Path) -> None:
    """The -wi weights reach LIBLINEAR as its own command line passes them."""
    tool = require_tool("liblinear-train")
    y, X = read_libsvm(str(ball))
    scoring = Scoring.for_training("balanced", y, np.array([-1.0, 1.0]))
    assert scoring.class_weight is not None
    ours, _ = tuning.fit_linear(X, y, seed=0, C=0.5, class_weight=scoring.class_weight)
    model = tmp_path / "m"
    w = [x for lab, v in scoring.class_weight for x in (f"-w{int(lab)}", repr(v))]
    subprocess.run(
        [tool, "-s", "2", "-B", "1", "-c", "0.5", "-q", *w, str(ball), str(model)],
        check=True,
    )
    loaded = model_load.load_model(str(model))
    assert isinstance(loaded, engines.LinearModel)
    np.testing.assert_array_equal(loaded.predict(X), ours.predict(X))
    theirs = positive_scores(loaded.labels, loaded.decision_function(X))
    mine = positive_scores(ours.labels, ours.decision_function(X))
    plain, _ = tuning.fit_linear(X, y, seed=0, C=0.5)
    unweighted = positive_scores(plain.labels, plain.decision_function(X))
    assert theirs is not None and mine is not None and unweighted is not None
    # The same problem, solved by two builds of LIBLINEAR to their stopping tolerance; the
    # unweighted problem's solution is much further away.
    far = np.abs(unweighted - theirs).max()
    assert np.abs(mine - theirs).max() < 0.01 * far


def test_multilinear_auc_scores_are_calibrated_probabilities(
    runs: dict[str, pipeline.CheckReport],
) -> None:
    report = runs["auc"]
    r = report.results["multilinear"]
    assert r.scores is not None
    assert np.all((r.scores > 0) & (r.scores < 1))
    # Platt's sigmoids increase with the decision value (A < 0), or the cluster is constant.
    model = r.predict.__self__  # type: ignore[union-attr]
    assert all(c.platt is not None and c.platt[0] <= 0 for c in model.clusters)
    # Without --metric auc, no scores: raw decision values of clusters are not comparable.
    assert runs["balanced"].results["multilinear"].scores is None


def test_a_one_class_cluster_scores_its_laplace_share() -> None:
    X = engines.as_binding_csr(np.ones((5, 2)))
    fitted = multilinear._fit_cluster(X, np.ones(5), 0, 1.0, positive=1.0)
    _, p = fitted.predict_scored(X)
    np.testing.assert_allclose(p, 6 / 7, atol=1e-6)
    fitted = multilinear._fit_cluster(X, -np.ones(5), 0, 1.0, positive=1.0)
    np.testing.assert_allclose(fitted.predict_scored(X)[1], 1 / 7, atol=1e-6)


def test_auc_refuses_more_than_two_classes(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(90, 3))
    y = np.repeat([1, 2, 3], 30)
    path = tmp_path / "three"
    _write(path, X, y)
    with pytest.raises(KcheckError, match="auc needs two classes.*has 3"):
        pipeline.run(CheckConfig(train=str(path), metric="auc", exact="never"))
    out = subprocess.run(
        [sys.executable, "-m", "kcheck", "check", str(path), "--metric", "auc"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert out.stdout == ""
    assert "Traceback" not in out.stderr
    assert str(path) in out.stderr and "two classes" in out.stderr
    # In a batch, that data set gets an error line and the batch goes on.
    good = tmp_path / "heart_scale"
    good.write_bytes((DATA / "heart_scale").read_bytes())
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "kcheck",
            "batch",
            str(path),
            str(good),
            "--metric",
            "auc",
            "--exact",
            "never",
            "-j",
            "1",
        ],
        capture_output=True,
        text=True,
    )
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    status = {Path(x["name"]).name: x["status"] for x in lines}
    assert status == {"three": "error", "heart_scale": "ok"}
    assert res.returncode == 3


def test_an_unknown_metric_is_a_usage_error() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "kcheck", "check", str(DATA / "heart_scale"), "--metric", "f1"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    with pytest.raises(KcheckError, match="--metric must be one of"):
        pipeline.run(CheckConfig(train=str(DATA / "heart_scale"), metric="f1"))


def test_auc_runs_are_deterministic(ball: Path) -> None:
    from kcheck.verdict import without_timing

    config = CheckConfig(train=str(ball), metric="auc", exact="never", jobs=2)
    a = pipeline.run(config).json
    b = pipeline.run(CheckConfig(train=str(ball), metric="auc", exact="never")).json
    assert without_timing(a) == without_timing(b)


@pytest.mark.slow
def test_exact_mode_scores_auc_from_held_out_decision_values(ball: Path) -> None:
    report = pipeline.run(CheckConfig(train=str(ball), metric="auc", exact="always"))
    r = report.results["rbf"]
    assert r.truth is not None and r.scores is not None and r.reference_scores is not None
    block = report.json["checkers"]["rbf"]
    want, (low, high) = metrics.auc_gap(r.truth == 1, r.scores, r.reference_scores)
    assert block["gap"] == pytest.approx(want, abs=5e-6)
    assert block["gap_ci95"] == pytest.approx([low, high], abs=5e-6)
    assert block["val_score"] == pytest.approx(roc_auc_score(r.truth == 1, r.scores), abs=5e-6)
    assert (report.json["verdict"], report.json["deciding_checker"]) == ("kernel", "rbf")


def test_verify_takes_the_metric_of_the_check(tmp_path: Path) -> None:
    train = str(DATA / "heart_scale")
    check = pipeline.run(
        CheckConfig(train=train, metric="balanced", exact="never", checkers=("degree2",))
    ).json
    saved = tmp_path / "v.json"
    saved.write_text(json.dumps(check))
    out = verify.verify(verify.VerifyConfig(train=train, check_json=str(saved), max_rows=120))
    assert_valid("verify.schema.json", out)
    assert out["metric"] == "balanced"
    assert out["class_weights"] is not None
    with pytest.raises(KcheckError, match="--metric auc differs from the balanced"):
        verify.verify(
            verify.VerifyConfig(train=train, check_json=str(saved), metric="auc", max_rows=120)
        )
    # A schema 1 verdict (no metric) was made under accuracy.
    del check["metric"]
    saved.write_text(json.dumps(check))
    plain = verify.verify(verify.VerifyConfig(train=train, check_json=str(saved), max_rows=120))
    assert plain["metric"] == "accuracy" and plain["class_weights"] is None


def test_verify_auc_gap_is_delong_on_cross_validated_values() -> None:
    out = verify.verify(
        verify.VerifyConfig(train=str(DATA / "heart_scale"), metric="auc", max_rows=150)
    )
    assert_valid("verify.schema.json", out)
    assert out["metric"] == "auc"
    lo, hi = out["gap_ci95"]
    assert lo <= out["gap"] <= hi
    assert out["gap"] == pytest.approx(out["rbf"]["cv_score"] - out["linear"]["cv_score"], abs=2e-6)


def test_model_out_trains_the_weighted_model(ball: Path, tmp_path: Path) -> None:
    from kcheck.modelfiles import export as models

    out = tmp_path / "m"
    config = CheckConfig(
        train=str(ball), metric="balanced", exact="never", model_out=str(out), model_kind="linear"
    )
    report = pipeline.run(config)
    models.train_model(report, config)
    model = report.json["model"]
    assert_valid("check.schema.json", report.json)
    assert model["class_weights"] == report.json["class_weights"]
    saved = model_load.load_model(str(out))
    X = np.vstack([report.T.X.toarray(), report.V.X.toarray()])
    y = np.concatenate([report.T.y, report.V.y])
    weighted, _ = tuning.fit_linear(
        X, y, seed=0, C=model["params"]["C"], class_weight=report.result.scoring.class_weight
    )
    np.testing.assert_array_equal(saved.predict(X), weighted.predict(X))
    # Weighting is what finds the minority class at all.
    assert np.mean(saved.predict(X)[y == 1] == 1) > 0.3


def test_scoring_weights_every_class_present() -> None:
    y = np.array([0.0] * 6 + [1.0] * 3 + [2.0])
    s = Scoring.for_training("balanced", y, np.array([0.0, 1.0, 2.0]))
    assert s.class_weight is not None
    assert dict(s.class_weight) == pytest.approx({0.0: 10 / 18, 1.0: 10 / 9, 2.0: 10 / 3})
    # A class of the data that T lacks gets no weight (LIBLINEAR would warn about it).
    s = Scoring.for_training("balanced", y[:9], np.array([0.0, 1.0, 2.0]))
    assert s.class_weight is not None and 2.0 not in dict(s.class_weight)
    with pytest.raises(KcheckError, match="two classes"):
        Scoring.for_training("auc", y, np.array([0.0, 1.0, 2.0]))


def _cold_cv_balanced(X: sp.csr_matrix, y: np.ndarray, C: float, weight: Any) -> float:
    """Balanced accuracy of 5-fold stratified CV at one C, every fold trained from scratch."""
    fold = stratified_folds(y, 5, 0, 0)
    predicted = np.zeros(y.size)
    for k in range(5):
        train, test = fold != k, fold == k
        model, _ = tuning.fit_linear(X[train], y[train], seed=0, C=C, class_weight=weight)
        predicted[test] = model.predict(X[test])
    return metrics.balanced_accuracy(y, predicted)


def test_the_weighted_c_search_maximises_cv_balanced_accuracy() -> None:
    # A linear rule with 3% positives and label noise: -C tunes the weighted model for plain
    # accuracy, the balanced search for balanced accuracy, on the same grid of C.
    rng = np.random.default_rng(3)
    X = rng.normal(size=(1500, 8))
    score = X @ rng.normal(size=8) + rng.normal(scale=1.5, size=1500)
    y = np.where(score > np.quantile(score, 0.97), 1.0, -1.0)
    Xs = sp.csr_matrix(X / np.abs(X).max(axis=0))
    weight = Scoring.for_training("balanced", y, np.array([-1.0, 1.0])).class_weight
    assert weight is not None
    problem = engines.Problem.from_data(Xs, y, weight)
    C_bal, _ = tuning.search_C_balanced(problem, Xs, weight, seed=0)
    C_acc, _ = engines.search_C(problem, seed=0)
    grid = [tuning.start_C(Xs, y.size) * 2.0**i for i in range(40)]
    grid = [c for c in grid if c <= tuning.MAX_SEARCH_C]
    assert C_bal in grid and C_acc in grid
    cold = {c: _cold_cv_balanced(Xs, y, c, weight) for c in grid}
    assert cold[C_bal] >= max(cold.values()) - 0.005
    assert cold[C_bal] >= cold[C_acc]
    # fit_linear takes this search whenever it trains a weighted model without a given C.
    model, _ = tuning.fit_linear(Xs, y, seed=0, class_weight=weight)
    assert model.C == C_bal


def test_the_test_file_is_scored_in_the_metric(ball: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    X = rng.uniform(-1, 1, size=(3000, 2))
    inside = np.sqrt((X**2).sum(axis=1)) < 0.25
    y = np.where(rng.random(3000) < np.where(inside, 0.6, 0.01), 1, -1)
    test = tmp_path / "ball.t"
    _write(test, X, y)
    for metric in ("balanced", "auc"):
        config = CheckConfig(train=str(ball), test=str(test), metric=metric, exact="never")
        report = pipeline.run(config)
        assert_valid("check.schema.json", report.json)
        block = report.json["test"]
        yt, Xt = read_libsvm(str(test), n_features=report.prepared.n_features)
        Xs = report.prepared.scaler.transform(Xt)
        for name in ("linear", "degree2", "multilinear"):
            model = report.results[name].predict.__self__  # type: ignore[union-attr]
            predicted, dec = model.predict_scored(Xs)
            assert block["accuracy"][name] == pytest.approx(np.mean(predicted == yt), abs=5e-6)
            if metric == "balanced":
                want = balanced_accuracy_score(yt, predicted)
            else:
                labels = getattr(model, "labels", None)
                s = dec if labels is None else positive_scores(labels, dec)
                want = roc_auc_score(yt == 1, s)
            assert block["score"][name] == pytest.approx(want, abs=5e-6), (metric, name)


@pytest.mark.slow
def test_a_test_file_scores_exact_modes_rbf_model_under_auc(ball: Path, tmp_path: Path) -> None:
    """Exact mode's model (trained on all rows when the test file asks for it) gives decision
    values, so its AUC on the file is that of the same RBF SVM in scikit-learn's LIBSVM."""
    from sklearn.svm import SVC

    y_all, X_all = read_libsvm(str(ball))
    train, test = tmp_path / "train", tmp_path / "test"
    _write(train, X_all[:900].toarray(), y_all[:900])
    _write(test, X_all[900:].toarray(), y_all[900:])
    report = pipeline.run(
        CheckConfig(train=str(train), test=str(test), metric="auc", exact="always")
    )
    v = report.json
    got = v["test"]["score"]["rbf"]
    assert got is not None
    rbf = v["checkers"]["rbf"]
    X = sp.vstack([report.T.X, report.V.X]).toarray()
    y = np.concatenate([report.T.y, report.V.y])
    weights = dict(report.result.scoring.class_weight or ())
    assert set(weights) == set(np.unique(y))  # the run's class weights, by label
    svc = SVC(C=rbf["C"], gamma=rbf["gamma"], class_weight=weights or None, tol=1e-3)
    svc.fit(X, y)
    y_test, X_test = read_libsvm(str(test))
    scaled = report.scaler.transform(X_test).toarray()
    want = roc_auc_score(y_test == svc.classes_[1], svc.decision_function(scaled))
    assert got == pytest.approx(want, abs=2e-3)
