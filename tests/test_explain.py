"""``--explain``: the term ranking, the appended products and linear + top-k, checked against
direct formulas and against models trained here on the same rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import DATASETS, ROOT
from runner import run_kcheck
from test_schema import assert_valid

from kcheck.checkers import degree2
from kcheck.checkers.base import Dataset
from kcheck.config import CheckConfig
from kcheck.pipeline import run
from kcheck.split import stratified_subsample
from kcheck.terms import explain
from kcheck.tuning import linear_c as tuning
from kcheck.verdict import paired_gap


def write_svm(path: Path, X: np.ndarray, y: np.ndarray, *, zero_based: bool = False) -> Path:
    first = 0 if zero_based else 1
    with path.open("w") as f:
        for row, label in zip(X, y, strict=True):
            cells = " ".join(f"{j + first}:{v:.6f}" for j, v in enumerate(row) if v != 0)
            f.write(f"{int(label)} {cells}\n")
    return path


def xor_data(rows: int = 2000, n: int = 10, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """The label is the sign of x3*x5 (1-based): no linear signal, one product carries it."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(rows, n))
    return X, np.where(X[:, 2] * X[:, 4] > 0, 1, -1)


def test_std_of_the_expansion_matches_the_formula(rng: np.random.Generator) -> None:
    D = rng.normal(size=(40, 5))
    D[rng.random(D.shape) > 0.6] = 0.0
    E = degree2.expand(sp.csr_matrix(D)).toarray()
    np.testing.assert_allclose(explain._phi_std(sp.csr_matrix(D)), E.std(axis=0), atol=1e-12)


def test_the_term_ranking_puts_the_xor_product_first() -> None:
    X, y = xor_data()
    T = Dataset(sp.csr_matrix(X[:1500]), y[:1500].astype(float))
    V = Dataset(sp.csr_matrix(X[1500:]), y[1500:].astype(float))
    opts = degree2.Degree2Options(seed=0)
    res = degree2.run(T, V, opts, degree2.plan_rows(T, 2, opts))
    terms = explain.rank_terms(res.model, T.X)
    assert (terms[0].i, terms[0].j) == (2, 4)
    assert terms[0].importance > 10 * terms[1].importance
    # Importance is |w| x the std of the phi column, in the documented column order.
    n = X.shape[1]
    col = n + int(explain._term_starts(n)[2]) + (4 - 2)
    w = abs(res.model.weights[col, 0])
    phi_col = degree2.expand(T.X)[:, col].toarray().ravel()
    assert terms[0].importance == pytest.approx(w * phi_col.std(), rel=1e-9)
    assert [t.importance for t in terms] == sorted((t.importance for t in terms), reverse=True)


def test_multiclass_importance_takes_the_largest_weight(rng: np.random.Generator) -> None:
    X = rng.uniform(-1, 1, size=(600, 3))
    y = np.select([X[:, 0] * X[:, 1] > 0.2, X[:, 0] * X[:, 1] < -0.2], [1, 2], 3).astype(float)
    T = Dataset(sp.csr_matrix(X), y)
    model, _ = tuning.fit_linear(degree2.expand(T.X), y, seed=0, C=1.0)
    assert model.weights.shape[1] == 3
    terms = explain.rank_terms(model, T.X, top=6)
    E = degree2.expand(T.X).toarray()
    n = 3
    by_pair = {}
    for c, (i, j) in enumerate((a, b) for a in range(n) for b in range(a, n)):
        by_pair[(i, j)] = np.abs(model.weights[n + c]).max() * E[:, n + c].std()
    assert {(t.i, t.j): t.importance for t in terms} == pytest.approx(by_pair)


@pytest.mark.parametrize("sparse", [False, True])
def test_append_products_matches_the_formula(rng: np.random.Generator, sparse: bool) -> None:
    D = rng.normal(size=(12, 5))
    if sparse:
        D[rng.random(D.shape) > 0.4] = 0.0
    terms = [(2, 4), (0, 0), (1, 3), (4, 9)]  # the last lies beyond the width: 0
    out = explain.append_products(sp.csr_matrix(D), terms).toarray()
    direct = np.column_stack([D, D[:, 2] * D[:, 4], D[:, 0] ** 2, D[:, 1] * D[:, 3], np.zeros(12)])
    np.testing.assert_array_equal(out, direct)


def check_json(tmp_path: Path, **config: object) -> tuple[dict, object]:
    report = run(CheckConfig(exact="never", **config))  # type: ignore[arg-type]
    return report.json, report


def assert_recovered_as_trained_here(ex: dict, report: object, keep: np.ndarray) -> None:
    """Linear + top-k trained directly on rows ``keep`` of T (its columns, then the products,
    degree-2's C) and scored on all of V give the JSON's numbers."""
    T, V = report.T, report.V  # type: ignore[attr-defined]
    pairs = [(a - 1, b - 1) for a, b in (t["features"] for t in ex["terms"])]
    base = report.results["linear"]  # type: ignore[attr-defined]
    XT = T.X[keep].toarray()
    for r in ex["recovered"]:
        k = r["k"]
        cols = [XT] + [XT[:, [i]] * XT[:, [j]] for i, j in pairs[:k]]
        vcols = [V.X.toarray()] + [
            V.X[:, [i]].toarray() * V.X[:, [j]].toarray() for i, j in pairs[:k]
        ]
        m, _ = tuning.fit_linear(np.hstack(cols), T.y[keep], seed=0, C=ex["C"])
        correct = m.predict(np.hstack(vcols)) == V.y
        assert correct.size == V.rows
        gap = paired_gap(correct, base.correct)
        assert r["val_accuracy"] == pytest.approx(correct.mean(), abs=1e-6)
        assert r["gap"] == pytest.approx(gap.value, abs=1e-6)
        assert r["gap_ci95"] == pytest.approx([gap.low, gap.high], abs=1e-6)


@pytest.mark.slow
def test_recovered_matches_models_trained_here(tmp_path: Path) -> None:
    X, y = xor_data()
    path = write_svm(tmp_path / "xor.svm", X, y)
    v, report = check_json(tmp_path, train=str(path), explain=True, checkers=("degree2",))
    ex = v["explain"]
    assert ex["available"] and ex["reason"] is None and ex["index_base"] == 1
    assert ex["terms"][0]["features"] == [3, 5]
    assert [r["k"] for r in ex["recovered"]] == list(explain.KS)
    assert ex["C"] == v["checkers"]["degree2"]["C"]
    assert ex["rows"] == ex["train_rows"] == report.T.rows == 1500
    assert_recovered_as_trained_here(ex, report, np.arange(report.T.rows))
    # One product recovers the degree-2 gain; the verdict is degree-2's, unchanged by explain.
    assert ex["recovered"][0]["val_accuracy"] > v["linear"]["val_accuracy"] + 0.3
    plain, _ = check_json(tmp_path, train=str(path), checkers=("degree2",))
    assert "explain" not in plain
    for key in ("verdict", "margin", "deciding_checker"):
        assert v[key] == plain[key]
    untimed = [
        {n: {f: x for f, x in c.items() if f != "seconds"} for n, c in d["checkers"].items()}
        for d in (v, plain)
    ]
    assert untimed[0] == untimed[1]
    sentence = explain.explain_sentence(v)
    assert sentence is not None and sentence.startswith("most of the nonlinearity is in x3·x5")


def test_a_large_t_trains_the_k_models_on_a_bounded_subsample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above MAX_TRAIN_ROWS (lowered here to 500 of T's 1,500 rows) the linear + k models train
    on a stratified subsample; the importances stay on degree-2's rows and V stays whole."""
    monkeypatch.setattr(explain, "MAX_TRAIN_ROWS", 500)
    X, y = xor_data()
    path = write_svm(tmp_path / "xor.svm", X, y)
    v, report = check_json(tmp_path, train=str(path), explain=True, checkers=("degree2",))
    ex = v["explain"]
    keep = stratified_subsample(report.T.y, 500, seed=v["seed"])
    assert ex["rows"] == report.T.rows == 1500
    assert ex["train_rows"] == keep.size == 500
    assert ex["terms"][0]["features"] == [3, 5]
    assert_recovered_as_trained_here(ex, report, keep)
    # 500 rows are plenty for one product: it still carries degree-2's gain.
    assert ex["recovered"][0]["val_accuracy"] > v["linear"]["val_accuracy"] + 0.3
    sentence = explain.explain_sentence(v)
    assert sentence is not None and "trained on 500 of 1,500 rows of T" in sentence
    assert_valid("check.schema.json", v)


def test_zero_based_indices_follow_the_file(tmp_path: Path) -> None:
    X, y = xor_data(rows=1200)
    path = write_svm(tmp_path / "xor0.svm", X, y, zero_based=True)
    v, _ = check_json(
        tmp_path, train=str(path), explain=True, checkers=("degree2",), zero_based=True
    )
    assert v["explain"]["index_base"] == 0
    assert v["explain"]["terms"][0]["features"] == [2, 4]


def test_no_explanation_without_degree2(tmp_path: Path) -> None:
    X, y = xor_data(rows=400)
    path = write_svm(tmp_path / "xor.svm", X, y)
    v, _ = check_json(tmp_path, train=str(path), explain=True, checkers=("multilinear",))
    ex = v["explain"]
    assert not ex["available"] and "degree2 did not run" in ex["reason"]
    assert ex["terms"] is None and ex["recovered"] is None
    # Skipped by its own plan (its weights over 2,003,000 columns exceed the memory limit).
    rng = np.random.default_rng(5)
    wide = np.where(rng.random((400, 2000)) < 0.005, rng.uniform(-1, 1, (400, 2000)), 0.0)
    wide[:, -1] = 1.0
    path = write_svm(tmp_path / "wide.svm", wide, np.where(wide[:, 0] > 0, 1, -1))
    v, _ = check_json(
        tmp_path,
        train=str(path),
        explain=True,
        checkers=("degree2", "multilinear"),
        memory_limit=200 * 2**20,
    )
    assert v["checkers"]["degree2"]["status"] == "skipped"
    assert "degree2 was skipped" in v["explain"]["reason"]
    assert explain.explain_sentence(v) == f"explain: {v['explain']['reason']}."


@pytest.mark.slow
def test_the_command_shows_one_line_in_plain_words(tmp_path: Path) -> None:
    X, y = xor_data(rows=1200)
    path = write_svm(tmp_path / "xor.svm", X, y)
    out = tmp_path / "v.json"
    run = run_kcheck(
        ["check", str(path), "--explain", "--exact", "never", "-o", str(out)], cwd=ROOT
    )
    assert run.code == 0, run.describe()
    assert "x3·x5" in " ".join(run.stderr.split())
    assert json.loads(out.read_text())["explain"]["available"] is True


@pytest.mark.slow
def test_a_linear_data_set_gains_nothing() -> None:
    v, _ = check_json(
        Path(), train=str(DATASETS / "german.numer"), explain=True, checkers=("degree2",)
    )
    rec = v["explain"]["recovered"]
    assert rec and all(r["gap_ci95"][0] < 0.02 for r in rec)
    # Degree-2 alone (exact mode off) on 250 points of V: its gap is noise, never clear.
    assert v["checkers"]["degree2"]["gap_ci95"][0] < 0.02
    assert v["margin"] == "borderline" or v["verdict"] == "linear"


def test_the_sentence_names_only_terms_that_carry_a_share_of_the_top_one() -> None:
    """A disc with noise features: x1² and x2² carry the gain; a third term with a tenth of
    their importance (a product with a noise feature) is not named beside them."""
    terms = [
        {"features": [1, 1], "importance": 0.85},
        {"features": [2, 2], "importance": 0.81},
        {"features": [1, 3], "importance": 0.086},
    ]
    rec = [{"k": k, "val_accuracy": 0.7 if k == 1 else 0.95} for k in explain.KS]
    v = {
        "explain": {"available": True, "terms": terms, "recovered": rec, "train_rows": 900},
        "linear": {"val_accuracy": 0.6},
        "checkers": {"degree2": {"val_accuracy": 0.96}},
        "split": {"train": 900},
    }
    sentence = explain.explain_sentence(v)
    assert sentence is not None
    assert sentence.startswith("most of the nonlinearity is in x1² and x2²: linear + 3 products")
    assert "x1·x3" not in sentence
    terms[2]["importance"] = 0.5  # a third term of real weight is named
    sentence = explain.explain_sentence(v)
    assert sentence is not None and "x1², x2² and x1·x3" in sentence
