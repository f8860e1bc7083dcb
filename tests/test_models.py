"""Model export, prediction with saved models, and the verify reference
(kcheck/modelfiles/export.py)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import DATASETS
from runner import Run, kcheck, one_error_line

from kcheck import predict, verify
from kcheck.bindings import engines
from kcheck.defaults import MODEL_KINDS
from kcheck.errors import KcheckError
from kcheck.io.data import read_libsvm
from kcheck.modelfiles import export as models
from kcheck.modelfiles import load as model_load
from kcheck.scaling.fitting import fit_scaler, read_range_file
from kcheck.tuning import linear_c as tuning
from kcheck.tuning import rbf_grid as rbf_search

#: A 3 x 3 grid with a one-step refinement: enough to exercise the search, cheap to run.
SMALL = rbf_search.Grid(
    log2_C=(1.0, 3.0, 5.0), log2_gamma=(3.0, 1.0, -1.0), refine=True, radius=1.0, step=1.0
)


def _scaled(name: str, method: str = "maxabs"):
    y, X = read_libsvm(str(DATASETS / name))
    scaler = fit_scaler(X, method=method)
    return y, scaler.transform(X), scaler


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, dict]:
    """Models saved once: both kinds for heart_scale (13 features) and fourclass (2)."""
    d = tmp_path_factory.mktemp("models")
    out = {}
    for name in ("fourclass", "heart_scale"):
        y, X, scaler = _scaled(name)
        for kind in MODEL_KINDS:
            grid = SMALL if name == "fourclass" else rbf_search.Grid((1.0,), (-3.0,))
            out[f"{kind}:{name}"] = models.export(
                X, y, scaler, kind, str(d / f"{name}.{kind}"), seed=0, grid=grid
            )
    out["kernel"], out["linear"] = out["kernel:fourclass"], out["linear:heart_scale"]
    return out


# --- grid search ----------------------------------------------------------------------------------


def test_default_grid_is_grid_py():
    assert rbf_search.GRID.log2_C == tuple(float(v) for v in range(-5, 16, 2))
    assert rbf_search.GRID.log2_gamma == tuple(float(v) for v in range(3, -16, -2))
    assert len(rbf_search.GRID.coarse) == 110 and not rbf_search.GRID.refine
    assert rbf_search.EXPORT_GRID.refine


def test_refinement_stays_inside_the_grid():
    g = rbf_search.EXPORT_GRID
    inner = g.refined((5.0, -7.0))
    assert len(inner) == 25 and (5.5, -6.5) in inner and (4.0, -8.0) in inner
    corner = g.refined((15.0, 3.0))
    assert len(corner) == 9
    assert all(c <= 15.0 and gm <= 3.0 for c, gm in corner)


def test_tie_break_prefers_smaller_C_then_smaller_gamma():
    scores = {(3.0, -1.0): 90, (1.0, 1.0): 90, (1.0, -3.0): 90, (-1.0, 1.0): 80}
    assert rbf_search.best_point(scores) == (1.0, -3.0)
    assert rbf_search.best_point({**scores, (5.0, 1.0): 91}) == (5.0, 1.0)


def test_grid_search_reports_progress_and_refines():
    y, X, _ = _scaled("heart_scale")
    seen: list[tuple[int | None, int | None]] = []
    found = rbf_search.rbf_grid_search(
        X, y, SMALL, seed=0, progress=lambda e: seen.append((e.done, e.total))
    )
    assert seen[0] == (0, SMALL.max_points)
    assert seen[-1][0] == seen[-1][1] == found.points
    assert 9 < found.points <= SMALL.max_points
    assert found.scores[(found.log2_C, found.log2_gamma)] == found.correct
    assert found.correct == max(found.scores.values())
    assert found.C == 2.0**found.log2_C and found.gamma == 2.0**found.log2_gamma


def test_grid_search_is_the_same_in_worker_processes(monkeypatch):
    y, X, _ = _scaled("heart_scale")
    grid = rbf_search.Grid(log2_C=(-1.0, 3.0), log2_gamma=(-1.0, -5.0))
    serial = rbf_search.rbf_grid_search(X, y, grid, seed=3, jobs=1)
    monkeypatch.setattr(rbf_search, "MIN_PARALLEL_WORK", 0)
    parallel = rbf_search.rbf_grid_search(X, y, grid, seed=3, jobs=2)
    assert serial.scores == parallel.scores
    assert (serial.log2_C, serial.log2_gamma) == (parallel.log2_C, parallel.log2_gamma)


# --- export ---------------------------------------------------------------------------------------


def test_export_kernel_writes_model_range_and_entry(exported):
    entry = exported["kernel"]
    path = Path(entry["path"])
    assert entry["kind"] == "kernel" and entry["range_path"] == str(path) + ".range"
    assert set(entry) >= {
        "path",
        "range_path",
        "kind",
        "params",
        "cv_accuracy",
        "search_rows",
        "seconds",
    }
    C, gamma = entry["params"]["C"], entry["params"]["gamma"]
    assert float(np.log2(C)).is_integer() and float(np.log2(gamma)).is_integer()
    assert gamma > 0 and entry["search_rows"] == 862 and entry["cv_accuracy"] > 0.9
    text = path.read_text()
    assert text.startswith("svm_type c_svc\nkernel_type rbf\n")
    assert f"gamma {gamma:.17g}" in text
    assert read_range_file(entry["range_path"]).n_features == 2
    assert not [p for p in os.listdir(path.parent) if p.endswith(".tmp")]
    model = model_load.load_model(str(path))
    assert isinstance(model, engines.RbfModel) and model.kernel == "rbf"


def test_export_linear_writes_a_liblinear_model(exported):
    entry = exported["linear"]
    assert entry["kind"] == "linear" and set(entry["params"]) == {"C"}
    assert entry["search_rows"] == 270 and 0.7 < entry["cv_accuracy"] <= 1.0
    text = Path(entry["path"]).read_text()
    assert text.startswith("solver_type L2R_L2LOSS_SVC\n") and "\nbias 1\n" in text
    y, X, scaler = _scaled("heart_scale")
    assert read_range_file(entry["range_path"]) == read_range_file(entry["range_path"], 13)
    ours, _ = tuning.fit_linear(X, y, seed=0)
    saved = predict.load(entry["path"])
    assert np.array_equal(saved.predict_scaled(X), ours.predict(X))


def test_kernel_search_uses_a_sample_but_trains_on_all_rows(tmp_path, monkeypatch):
    y, X, scaler = _scaled("fourclass")
    trained_on: list[int] = []
    real_train = engines.train_rbf

    def spy(problem, C, gamma):
        trained_on.append(problem.n_rows)
        return real_train(problem, C, gamma)

    monkeypatch.setattr(engines, "train_rbf", spy)
    entry = models.export(
        X, y, scaler, "kernel", str(tmp_path / "m"), seed=1, grid=SMALL, max_search_rows=200
    )
    assert abs(entry["search_rows"] - 200) <= 2
    assert trained_on == [862]


def test_export_refuses_non_integer_labels(tmp_path):
    y, X, scaler = _scaled("heart_scale")
    y = np.where(y > 0, 2.5, -1.0)
    for kind in MODEL_KINDS:
        with pytest.raises(KcheckError, match="not an integer"):
            models.export(X, y, scaler, kind, str(tmp_path / kind), seed=0, grid=SMALL)
    assert os.listdir(tmp_path) == []


def test_export_to_a_missing_directory_is_a_clear_error(tmp_path):
    y, X, scaler = _scaled("heart_scale")
    with pytest.raises(KcheckError, match="cannot write model file"):
        models.export(X, y, scaler, "linear", str(tmp_path / "no" / "m"), seed=0)


def test_export_prints_nothing(tmp_path, capfd):
    y, X, scaler = _scaled("heart_scale")
    models.export(
        X, y, scaler, "kernel", str(tmp_path / "m"), seed=0, grid=rbf_search.Grid((1.0,), (-3.0,))
    )
    out, err = capfd.readouterr()
    assert out == "" and err == ""


# --- predict --------------------------------------------------------------------------------------


def test_predict_cli_kernel(exported):
    entry = exported["kernel"]
    r = kcheck("predict", entry["path"], "datasets/fourclass")
    assert r.returncode == 0, r.stderr
    lines = r.stdout_text.splitlines()
    assert len(lines) == 862 and set(lines) <= {"1", "-1"}
    y, X, _ = _scaled("fourclass")
    expected = predict.load(entry["path"]).predict_scaled(X)
    assert np.array_equal(np.array(lines, dtype=float), expected)
    correct = int(np.sum(expected == y))
    assert f"({correct}/862)" in r.stderr and r.stderr.startswith("Accuracy = ")


def test_predict_cli_linear_to_file(exported, tmp_path):
    out = tmp_path / "labels"
    r = kcheck("predict", exported["linear"]["path"], "datasets/heart_scale", "-o", str(out), "-q")
    assert r.returncode == 0 and r.stdout == b"" and r.stderr == ""
    lines = out.read_text().splitlines()
    assert len(lines) == 270 and set(lines) <= {"1", "-1"}


def test_format_labels_like_svm_predict():
    assert predict.format_labels(np.array([1.0, -1.0, 0.0, 12.0])) == "1\n-1\n0\n12\n"
    assert predict.format_labels(np.array([])) == ""


def _expect_usage_error(r: Run, *words: str) -> None:
    one_error_line(r, *words, stages=False)
    assert r.stdout == b""


def _copy_model(entry: dict, dest: Path, with_range: str | None) -> Path:
    model = dest / "copy.model"
    model.write_text(Path(entry["path"]).read_text())
    if with_range is not None:
        (dest / "copy.model.range").write_text(Path(with_range).read_text())
    return model


@pytest.mark.parametrize(
    "content",
    [
        "not a model\n",
        "",
        "svm_type c_svc\nkernel_type rbf\nbogus 3\n",
        "solver_type L2R_L2LOSS_SVC\nnr_class two\n",
        "svm_type epsilon_svr\n",
    ],
)
def test_predict_rejects_a_bad_model_file(tmp_path, exported, content):
    model = tmp_path / "bad.model"
    model.write_text(content)
    Path(str(model) + ".range").write_text(Path(exported["linear"]["range_path"]).read_text())
    _expect_usage_error(kcheck("predict", str(model), "datasets/heart_scale"), str(model))


def test_predict_rejects_a_missing_model(tmp_path):
    _expect_usage_error(kcheck("predict", str(tmp_path / "none"), "datasets/heart_scale"), "none")


def test_predict_needs_the_range_file(tmp_path, exported):
    model = _copy_model(exported["kernel"], tmp_path, None)
    _expect_usage_error(
        kcheck("predict", str(model), "datasets/fourclass"), f"{model}.range", "not found"
    )


@pytest.mark.parametrize(
    ("model", "data", "other", "words"),
    [
        ("kernel:heart_scale", "heart_scale", "fourclass", ("does not match", "uses feature 3")),
        ("linear:heart_scale", "heart_scale", "fourclass", ("does not match", "uses feature 3")),
        # Refused at the first index beyond the model's width, before the rest is read.
        (
            "linear:fourclass",
            "fourclass",
            "heart_scale",
            (".range:5:", "feature 3 is beyond the model's 2 features"),
        ),
    ],
)
def test_predict_rejects_a_range_file_of_other_data(tmp_path, exported, model, data, other, words):
    kind = model.split(":")[0]
    path = _copy_model(exported[model], tmp_path, exported[f"{kind}:{other}"]["range_path"])
    _expect_usage_error(kcheck("predict", str(path), f"datasets/{data}"), *words)


def test_predict_warns_about_a_range_file_wider_than_the_support_vectors(tmp_path, exported):
    path = _copy_model(
        exported["kernel:fourclass"], tmp_path, exported["kernel:heart_scale"]["range_path"]
    )
    r = kcheck("predict", str(path), "datasets/fourclass")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 862
    assert "kcheck: warning:" in r.stderr and "no support vector" in r.stderr
    quiet = kcheck("predict", str(path), "datasets/fourclass", "-q")  # -q silences warnings
    assert quiet.returncode == 0 and quiet.stdout == r.stdout and quiet.stderr == ""


def test_predict_rejects_a_range_file_that_drops_a_used_feature(tmp_path, exported):
    # heart_scale's range without feature 5: the model was trained with it.
    lines = Path(exported["linear"]["range_path"]).read_text().splitlines(keepends=True)
    model = _copy_model(exported["linear"], tmp_path, None)
    Path(f"{model}.range").write_text("".join(ln for ln in lines if not ln.startswith("5 ")))
    _expect_usage_error(kcheck("predict", str(model), "datasets/heart_scale"), "feature 5")


def test_loaded_kernel_model_reports_its_features(exported):
    saved = predict.load(exported["kernel"]["path"])
    assert isinstance(saved.model, engines.RbfModel)
    assert saved.model.used_features().tolist() == [0, 1]


# --- verify ---------------------------------------------------------------------------------------


def _without_seconds(d):
    if isinstance(d, dict):
        return {k: _without_seconds(v) for k, v in d.items() if k != "seconds"}
    return d


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_verify_json_and_determinism_across_jobs(tmp_path):
    check = tmp_path / "check.json"
    check.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "verdict": "kernel",
                "epsilon": 0.02,
                "data": {"sha256": _sha256(DATASETS / "fourclass")},
            }
        )
    )
    runs = []
    for jobs in ("1", "2"):
        r = kcheck(
            "verify",
            "datasets/fourclass",
            "-j",
            jobs,
            "--seed",
            "3",
            "--check-json",
            str(check),
            "--json",
        )
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout))
    v = runs[0]
    assert _without_seconds(runs[0]) == _without_seconds(runs[1])
    assert v["schema_version"] == 3 and v["kind"] == "verify" and v["kcheck_version"]
    assert v["data"]["rows"] == v["data"]["cv_rows"] == 862
    assert v["scaling"]["method"] == "maxabs"
    assert set(v["linear"]) == {
        "cv_score",
        "cv_accuracy",
        "C",
        "seconds",
        "test_accuracy",
        "test_score",
    }
    assert v["metric"] == "accuracy" and v["linear"]["cv_score"] == v["linear"]["cv_accuracy"]
    assert set(v["rbf"]) >= {"cv_accuracy", "C", "gamma", "grid_points", "seconds", "test_accuracy"}
    assert v["rbf"]["grid_points"] == 110
    assert v["gap"] == pytest.approx(v["rbf"]["cv_accuracy"] - v["linear"]["cv_accuracy"], abs=2e-6)
    # fourclass needs a kernel (linear about 78%, RBF about 100%).
    assert v["gap"] > 0.1 and v["verdict"] == "kernel" and v["epsilon"] == 0.02
    assert v["confirms"] is True and v["check"]["verdict"] == "kernel"
    # The check's rule on the paired per-row CV results: an interval clear of epsilon.
    lo, hi = v["gap_ci95"]
    assert lo <= v["gap"] <= hi and lo >= 0.02 and v["margin"] == "clear"


def test_verify_per_row_cv_matches_the_grid_count(datasets):
    """The per-row RBF CV that the paired interval uses is the grid's CV at the chosen point:
    same folds, same count."""
    y, X, _ = _scaled("heart_scale")
    grid = rbf_search.Grid(log2_C=(1.0, 3.0), log2_gamma=(-3.0, -5.0))
    found = rbf_search.rbf_grid_search(X, y, grid, seed=4, jobs=1)
    per_row = engines.cv_rbf_correct(
        engines.SvmProblem.from_data(X, y), found.C, found.gamma, folds=5, seed=4
    )
    assert int(per_row.sum()) == found.correct


def test_verify_with_test_file_and_sample():
    config = verify.VerifyConfig(
        str(DATASETS / "svmguide1"),
        test=str(DATASETS / "svmguide1.t"),
        max_rows=300,
        grid=SMALL,
    )
    v = verify.verify(config)
    assert v["data"]["cv_rows"] == v["data"]["rows"] == 300 and v["data"]["rows_read"] == 3089
    assert v["test"] == {"path": str(DATASETS / "svmguide1.t"), "rows": 4000}
    assert 0.9 < v["linear"]["test_accuracy"] <= 1.0
    assert 0.9 < v["rbf"]["test_accuracy"] <= 1.0
    assert v["test_gap"] == pytest.approx(
        v["rbf"]["test_accuracy"] - v["linear"]["test_accuracy"], abs=2e-6
    )
    assert v["confirms"] is None and v["check"] is None


def test_verify_maps_non_integer_labels(tmp_path):
    y, X = read_libsvm(str(DATASETS / "heart_scale"))
    from kcheck.io.data import write_libsvm

    path = tmp_path / "frac"
    write_libsvm(str(path), np.where(y > 0, 0.5, 0.25), sp.csr_matrix(X))
    v = verify.verify(verify.VerifyConfig(str(path), grid=rbf_search.Grid((1.0,), (-3.0,))))
    assert v["data"]["classes"] == [0.25, 0.5]
    assert 0.7 < v["linear"]["cv_accuracy"] < 1.0 and 0.7 < v["rbf"]["cv_accuracy"] < 1.0


def test_verify_uses_the_check_epsilon_and_reports_disagreement(tmp_path):
    check = tmp_path / "check.json"
    check.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "verdict": "kernel",
                "epsilon": 0.5,
                "data": {"sha256": _sha256(DATASETS / "heart_scale")},
            }
        )
    )
    v = verify.verify(
        verify.VerifyConfig(str(DATASETS / "heart_scale"), grid=SMALL, check_json=str(check))
    )
    assert v["epsilon"] == 0.5 and v["verdict"] == "linear" and v["confirms"] is False


@pytest.mark.parametrize(
    "content",
    [
        "{",
        "[]",
        '{"schema_version": 1, "verdict": "maybe"}',
        '{"schema_version": 1, "kind": "verify", "verdict": "linear"}',
    ],
)
def test_verify_rejects_a_bad_check_json(tmp_path, content):
    check = tmp_path / "check.json"
    check.write_text(content)
    _expect_usage_error(
        kcheck("verify", "datasets/heart_scale", "--check-json", str(check)), str(check)
    )


def test_verify_rejects_bad_options():
    for args in (["--max-rows", "3"], ["-j", "0"], ["--epsilon", "2"]):
        _expect_usage_error(kcheck("verify", "datasets/heart_scale", *args))


def test_check_model_out_then_predict(tmp_path):
    model = tmp_path / "m"
    r = kcheck(
        "check",
        "datasets/heart_scale",
        "--model-out",
        str(model),
        "--model",
        "linear",
        "--json",
        "-q",
    )
    assert r.returncode == 0, r.stderr
    entry = json.loads(r.stdout)["model"]
    assert entry["kind"] == "linear" and entry["path"] == str(model)
    assert Path(entry["range_path"]).is_file()
    r = kcheck("predict", str(model), "datasets/heart_scale")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 270


# --- the verdict before the model -----------------------------------------------------------------


def test_the_checks_seconds_leave_the_model_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The JSON's ``seconds`` is the check's; the model's training has its own."""
    import time

    from kcheck.config import CheckConfig
    from kcheck.pipeline import run

    config = CheckConfig(
        train=str(DATASETS / "heart_scale"),
        exact="never",
        model_out=str(tmp_path / "m"),
        model_kind="linear",
    )
    report = run(config)
    before = report.json["seconds"]
    real, calls = time.perf_counter, iter(range(10**6))
    # Every clock read 1,000 s after the last: a long training.
    monkeypatch.setattr(time, "perf_counter", lambda: real() + 1000.0 * next(calls))
    models.train_model(report, config)
    after = report.json
    assert after["seconds"] == before
    assert after["model"]["seconds"] >= 1000.0


def test_the_verdict_is_shown_before_the_model_trains_off_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """In a log (no terminal) as on one: when the model's training starts, the verdict line
    is already on stderr."""
    from kcheck.cli.app import main

    seen: list[str] = []
    train = models.train_model

    def watched(*args: object, **kwargs: object) -> None:
        seen.append(capfd.readouterr().err)
        train(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(models, "train_model", watched)
    out = tmp_path / "v.json"
    with pytest.raises(SystemExit) as ended:
        main(
            [
                "check",
                str(DATASETS / "heart_scale"),
                "--exact",
                "never",
                "--model-out",
                str(tmp_path / "m"),
                "--model",
                "linear",
                "-o",
                str(out),
            ]
        )
    assert ended.value.code == 0
    assert len(seen) == 1 and "verdict: " in seen[0]
    rest = capfd.readouterr().err
    assert "verdict: " not in rest and "model: linear" in rest
    assert json.loads(out.read_text())["model"]["kind"] == "linear"


# --- where the kernel model's search starts -------------------------------------------------------


def test_the_start_is_exact_modes_point_else_rbfsvms_else_the_grid():
    exact = {"status": "exact", "log2_C": 5.0, "log2_gamma": 0.784111}
    rbfsvm = {"status": "ok", "log2_C": 7.0, "log2_gamma": -1.5}
    assert models.tuned_start({"rbf": exact, "rbfsvm": rbfsvm}) == models.Start(
        "exact", 5.0, 0.784111
    )
    assert models.tuned_start({"rbfsvm": rbfsvm}) == models.Start("rbfsvm", 7.0, -1.5)
    skipped = {"status": "skipped", "log2_C": None, "log2_gamma": None}
    assert models.tuned_start({"rbfsvm": skipped}) is models.GRID_START
    assert models.tuned_start({"degree2": {"status": "ok"}}).point is None
    assert models.GRID_START.source == "grid"


def _searched(monkeypatch: pytest.MonkeyPatch, substitute: rbf_search.Grid | None = None) -> list:
    """The grids the kernel model's search is handed (run as given, or as ``substitute``)."""
    grids: list[rbf_search.Grid] = []
    search = models.rbf_grid_search

    def recorded(X, y, grid, **kwargs):
        grids.append(grid)
        return search(X, y, substitute or grid, **kwargs)

    monkeypatch.setattr(models, "rbf_grid_search", recorded)
    return grids


def _checked(tmp_path: Path, **options: object):
    from kcheck.config import CheckConfig
    from kcheck.pipeline import run

    settings: dict[str, object] = {"train": str(DATASETS / "heart_scale"), **options}
    config = CheckConfig(
        model_out=str(tmp_path / "m"),
        model_kind="kernel",
        **settings,  # type: ignore[arg-type]
    )
    return config, run(config)


def test_the_kernel_model_starts_at_exact_modes_point(tmp_path, monkeypatch):
    grids = _searched(monkeypatch)
    config, report = _checked(tmp_path)
    rbf = report.json["checkers"]["rbf"]
    assert rbf["status"] == "exact"
    models.train_model(report, config)
    (grid,) = grids
    assert grid.start == (rbf["log2_C"], round(rbf["log2_gamma"], 6))
    assert grid.first_points[0] == grid.start and len(grid.first_points) == 5
    model = report.json["model"]
    assert model["start"] == "exact" and model["grid_points"] < len(rbf_search.GRID.coarse)
    assert Path(model["path"]).is_file()


@pytest.mark.slow
def test_the_kernel_model_starts_at_rbfsvms_point_without_exact_mode(tmp_path, monkeypatch):
    """Where exact mode's cost is over the budget (9,000 rows) it does not run under auto,
    and rbfsvm tunes in its stead."""
    from kcheck.io.data import write_libsvm

    rng = np.random.default_rng(5)
    X = rng.uniform(-1.0, 1.0, size=(9_000, 2))
    y = np.where((X**2).sum(axis=1) < 0.5, 1.0, -1.0)
    write_libsvm(str(tmp_path / "disc"), y, sp.csr_matrix(X))
    # The search runs on one point: the grid it is handed is what is tested.
    grids = _searched(monkeypatch, rbf_search.Grid((1.0,), (-3.0,)))
    config, report = _checked(tmp_path, train=str(tmp_path / "disc"))
    tuned = report.json["checkers"]["rbfsvm"]
    assert tuned["status"] in ("ok", "subsampled") and "rbf" not in report.json["checkers"]
    models.train_model(report, config)
    assert grids[0].start == (tuned["log2_C"], round(tuned["log2_gamma"], 6))
    assert report.json["model"]["start"] == "rbfsvm"


def test_the_kernel_model_runs_the_grid_where_nothing_was_tuned(tmp_path, monkeypatch):
    # The full grid is 134 points; the search runs on one, as the grid handed over is the test.
    grids = _searched(monkeypatch, rbf_search.Grid((1.0,), (-3.0,)))
    config, report = _checked(tmp_path, exact="never", checkers=("degree2", "multilinear"))
    assert "rbf" not in report.json["checkers"] and "rbfsvm" not in report.json["checkers"]
    models.train_model(report, config)
    assert grids == [rbf_search.EXPORT_GRID] and grids[0].start is None
    assert report.json["model"]["start"] == "grid"


def test_a_linear_model_has_no_start(exported):
    assert exported["linear"]["start"] is None
    assert exported["kernel"]["start"] == "grid"  # export without a start: the grid given


# --- the predicted time, said before training -----------------------------------------------------


def test_export_predicts_its_time_before_training(tmp_path):
    y, X, scaler = _scaled("heart_scale")
    events: list = []
    models.export(
        X,
        y,
        scaler,
        "kernel",
        str(tmp_path / "m"),
        grid=rbf_search.Grid((1.0,), (-3.0,)),
        start=models.Start("exact", 1.0, -3.0),
        progress=events.append,
    )
    said = [e for e in events if e.predicted_seconds is not None and not e.done]
    assert said and events.index(said[0]) == 0
    assert said[0].stage == models.SEARCH_STAGE
    assert said[0].text.startswith("kernel model: starting from exact mode's C=2^1 gamma=2^-3: ")
    assert "5-fold CV on 270 rows" in said[0].text and "predicted about" in said[0].text
    seconds, _ = models.predicted(X, y, "kernel", grid=rbf_search.Grid((1.0,), (-3.0,)))
    linear, line = models.predicted(X, y, "linear")
    assert 0 < linear < seconds and "linear model: C search" in line


def test_the_estimate_is_printed_before_the_model_trains_off_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """In a log (stderr a pipe): the model's predicted time is on stderr when training
    starts."""
    from kcheck.cli.app import main

    seen: list[str] = []
    train = models._train_and_save

    def watched(*args: object, **kwargs: object) -> object:
        seen.append(capfd.readouterr().err)
        return train(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(models, "_train_and_save", watched)
    with pytest.raises(SystemExit) as ended:
        main(
            [
                "check",
                str(DATASETS / "heart_scale"),
                "--model-out",
                str(tmp_path / "m"),
                "--model",
                "kernel",
                "-o",
                str(tmp_path / "v.json"),
            ]
        )
    assert ended.value.code == 0
    assert len(seen) == 1
    text = " ".join(seen[0].split())  # the line wraps at the log's width
    assert "kernel model: starting from exact mode's" in text and "predicted about" in text
    rest = " ".join(capfd.readouterr().err.split())  # the model line wraps at the log's width
    assert "search started at exact mode's point" in rest


# --- a cheaper model than the kernel --------------------------------------------------------------


@pytest.fixture(scope="module")
def disc_check(tmp_path_factory) -> dict:
    """A check with --explain on a disc: x1^2 + x2^2 < 0.5, which linear + 3 products fits."""
    from kcheck.config import CheckConfig
    from kcheck.io.data import write_libsvm
    from kcheck.pipeline import run

    rng = np.random.default_rng(3)
    X = rng.uniform(-1.0, 1.0, size=(400, 2))
    y = np.where((X**2).sum(axis=1) < 0.5, 1.0, -1.0)
    path = tmp_path_factory.mktemp("disc") / "disc"
    write_libsvm(str(path), y, sp.csr_matrix(X))
    return run(CheckConfig(train=str(path), explain=True)).json


def test_the_cheaper_model_is_pointed_at_where_products_recover_the_kernels_gain(disc_check):
    from kcheck.terms.explain import cheaper_model_sentence

    v = disc_check
    assert v["verdict"] == "kernel"
    sentence = cheaper_model_sentence(v)
    assert sentence is not None
    k = min(
        r["k"]
        for r in v["explain"]["recovered"]
        if r["gap"] >= v["checkers"][v["deciding_checker"]]["gap"] - v["epsilon"] / 2
    )
    assert f"--explain --model-out MODEL --model linear+{k}` trains it" in sentence
    assert sentence.startswith(f"linear + {k} products gains +")


def test_no_cheaper_model_where_the_products_fall_short(disc_check):
    from kcheck.terms.explain import cheaper_model_sentence

    v = json.loads(json.dumps(disc_check))
    kernel = v["checkers"][v["deciding_checker"]]["gap"]
    for r in v["explain"]["recovered"]:
        r["gap"] = kernel - v["epsilon"]  # a whole epsilon short of the kernel's gain
    assert cheaper_model_sentence(v) is None
    v["explain"]["recovered"][-1]["gap"] = kernel - v["epsilon"] / 2
    assert cheaper_model_sentence(v) is not None
    assert cheaper_model_sentence({**v, "verdict": "linear", "deciding_checker": None}) is None
    assert cheaper_model_sentence({**v, "explain": None}) is None
