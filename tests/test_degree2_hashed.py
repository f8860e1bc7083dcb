"""Degree-2 on its hashed expansion: the square and pair terms of phi hashed into D columns
(kcheck.checkers.degree2.expand_hashed), where wide sparse rows price the explicit expansion
out of its budget. All on real LIBLINEAR."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import scipy.sparse as sp
from referencing import Registry, Resource

from kcheck.checkers import degree2
from kcheck.checkers.base import Allowance, Counts, Dataset, score
from kcheck.config import CheckConfig
from kcheck.costs import budget
from kcheck.io.data import write_libsvm
from kcheck.pipeline import run as check
from kcheck.terms import explain
from kcheck.tuning import linear_c
from kcheck.verdict import paired_gap


def sparse_rows(rows: int, n: int, per_row: int, seed: int) -> sp.csr_matrix:
    """``rows`` rows of ``n`` features with ``per_row`` values each, signed, in [0.2, 1]."""
    rng = np.random.default_rng(seed)
    indices = np.concatenate([np.sort(rng.choice(n, per_row, replace=False)) for _ in range(rows)])
    data = rng.uniform(0.2, 1.0, indices.size) * rng.choice([-1.0, 1.0], indices.size)
    return sp.csr_matrix((data, indices, np.arange(rows + 1) * per_row), shape=(rows, n))


def planted(rows: int, seed: int, *, n: int = 8_000, rare: int = 25) -> Dataset:
    """Text-like rows whose label is a product of word pairs: XOR(w0, w1) XOR (w2 AND w3), 3%
    flipped. Words 0-3 are in half the rows, the other ``n - 4`` are rare (``rare`` a row on
    average), so a linear model sees nothing of the label and the pairs of w0-w3 see it all."""
    rng = np.random.default_rng(seed)
    present = rng.random((rows, 4)) < 0.5
    counts = rng.poisson(rare, rows)
    cols = [
        np.r_[np.flatnonzero(present[r]), np.sort(4 + rng.choice(n - 4, counts[r], replace=False))]
        for r in range(rows)
    ]
    indptr = np.r_[0, np.cumsum([c.size for c in cols])]
    indices = np.concatenate(cols)
    X = sp.csr_matrix((rng.uniform(0.5, 1.0, indices.size), indices, indptr), shape=(rows, n))
    label = (present[:, 0] ^ present[:, 1]) ^ (present[:, 2] & present[:, 3])
    label ^= rng.random(rows) < 0.03
    return Dataset(X, np.where(label, 1.0, -1.0))


def text_counts(rows: int, *, width: int, per_row: int) -> Counts:
    """Counts of T (``rows`` rows of ``per_row`` values) and V (a third of that)."""
    val = rows // 3
    return Counts(
        rows=rows,
        val_rows=val,
        nnz=rows * per_row,
        val_nnz=val * per_row,
        n_classes=2,
        features=width,
        expanded_nnz=rows * int(degree2.expanded_counts(np.array([per_row]))[0]),
        data_bytes=12 * rows * per_row,
        val_bytes=12 * val * per_row,
        all_classes=2,
    )


def plan_of(c: Counts, seconds: float, memory_limit: int = 8 * 2**30) -> degree2.Degree2Sizing:
    options = degree2.Degree2Options(budget_seconds=seconds, memory_limit=memory_limit)
    return degree2.plan_counts(c.rows, c.features, c.nnz, c.expanded_nnz, 2, options)


# --- the expansion -------------------------------------------------------------------------


def test_the_linear_part_stays_exact_and_inner_products_of_phi_are_nearly_kept() -> None:
    X = sparse_rows(300, 2_000, 30, seed=1)
    n = X.shape[1]
    explicit = degree2.expand(X)
    width = degree2.hashed_width(explicit.nnz / X.shape[0])
    H = degree2.expand_hashed(X, width)
    assert H.shape == (300, n + width) and H.has_sorted_indices
    H.sum_duplicates()  # a no-op: duplicates within a row were summed
    assert H.nnz == degree2.expand_hashed(X, width).nnz
    np.testing.assert_array_equal(H[:, :n].toarray(), explicit[:, :n].toarray())
    # Inner products of phi: the signs make a shared column's cross terms cancel on average.
    G, K = (explicit @ explicit.T).toarray(), (H @ H.T).toarray()
    norms = np.sqrt(np.outer(np.diag(G), np.diag(G)))
    off = np.triu_indices(300, 1)
    error = np.abs(K - G)[off] / norms[off]
    assert error.mean() < 0.01 and error.max() < 0.06, (error.mean(), error.max())
    assert np.abs(np.diag(K) / np.diag(G) - 1.0).max() < 0.08


def test_dense_and_sparse_input_chunks_and_repeats_give_one_expansion() -> None:
    X = sparse_rows(60, 200, 12, seed=2)
    H = degree2.expand_hashed(X, 1024)
    for other in (
        degree2.expand_hashed(X.toarray(), 1024),
        degree2.expand_hashed(X, 1024, chunk_nnz=50),
        degree2.expand_hashed(X.copy(), 1024),
    ):
        assert other.shape == H.shape and (other != H).nnz == 0
        np.testing.assert_array_equal(other.indptr, H.indptr)
    # The hash is a fixed function of the triangle index, on every machine and run.
    slots, signs = degree2.hash_slots(np.arange(6), 1024)
    np.testing.assert_array_equal(slots, [0, 632, 241, 874, 483, 92])
    np.testing.assert_array_equal(signs, [1.0, -1.0, -1.0, -1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="power of two"):
        degree2.hash_slots(np.arange(3), 1000)


def test_the_hashed_width_is_a_power_of_two_of_64_columns_a_value() -> None:
    assert degree2.HASH_SLOTS_PER_VALUE == 64
    assert degree2.hashed_width(1_316.0) == 2**17  # 84,224 -> 131,072
    assert degree2.hashed_width(1_024.0) == 2**16
    assert degree2.hashed_width(1_024.5) == 2**17
    assert degree2.hashed_width(0.0) == 2


# --- the sizing ----------------------------------------------------------------------------


def test_the_sizing_hashes_wide_sparse_rows_whose_explicit_expansion_cannot_run() -> None:
    """Text-like rows (8,400 words, 44 a row, 20,000 rows): the explicit width of 35 million
    columns leaves 453 rows within 20 counted seconds; hashed into 131,072 columns, the most
    rows whose own count fits, counted at its values alone (degree2.counted_width)."""
    c = text_counts(20_000, width=8_400, per_row=44)
    mean = c.expanded_nnz / c.rows
    p = plan_of(c, 20.0)
    width = degree2.hashed_width(mean)
    assert p.hashed_width == width == 2**17 and p.reason is None
    assert degree2.MIN_ROWS <= p.rows < c.rows and p.limited_by == "cost"
    assert degree2.counted_width(8_400, width) == 0
    assert degree2.counted_width(8_400, None) == degree2.expanded_dimension(8_400)
    assert budget.degree2_sizing_seconds(int(p.rows * mean), 2, p.rows) <= 20.0
    # What the plan counts is the hashed expansion's, without the separable factor.
    sized = degree2.size(c, Allowance(memory_limit=8 * 2**30, budget_seconds=20.0))
    assert sized.sizing == p and sized.counted_seconds == pytest.approx(
        budget.degree2_seconds(round(p.rows * mean), 2, p.rows)
    )
    # With the budget to run the explicit expansion on a subsample, it runs: its terms are exact.
    assert plan_of(c, 200.0).hashed_width is None and plan_of(c, 200.0).rows > 0


def test_the_sizing_hashes_rows_whose_explicit_weight_vectors_do_not_fit() -> None:
    """20,000 words: the explicit expansion's weight vectors alone need 19 GiB."""
    c = text_counts(15_000, width=20_000, per_row=20)
    p = plan_of(c, 60.0)
    assert p.hashed_width == degree2.hashed_width(c.expanded_nnz / c.rows) and p.rows > 0


@pytest.mark.parametrize(
    ("what", "c"),
    [
        ("dense", text_counts(18_000, width=50, per_row=50)),
        ("narrow sparse", text_counts(18_000, width=30, per_row=6)),
        ("fewer rows than MIN_ROWS", text_counts(900, width=8_400, per_row=44)),
    ],
)
def test_dense_narrow_or_small_data_keeps_the_explicit_expansion(what: str, c: Counts) -> None:
    for seconds in (0.01, 0.5, 1e6):
        p = plan_of(c, seconds)
        assert p.hashed_width is None, (what, seconds, p)
        assert "hashed" not in (p.reason or "")


def test_a_skip_says_what_the_hashed_expansion_would_have_fit() -> None:
    c = text_counts(5_850, width=8_400, per_row=50)
    p = plan_of(c, 1.0)
    assert p.rows == 0 and p.hashed_width is None and p.limited_by == "cost"
    assert p.reason is not None and "; hashed into 131,072 columns, only " in p.reason


# --- training and predicting ---------------------------------------------------------------


def test_hashed_degree2_finds_the_products_where_the_explicit_expansion_is_too_wide() -> None:
    """1,200 rows of 8,000 words: within 4 counted seconds the explicit expansion (32 million
    columns) fits no rows, the hashed one all of them, and its gap over linear clears epsilon
    (+8.9 points, interval from +6.0)."""
    T, V = planted(1_200, seed=1), planted(1_500, seed=2)
    options = degree2.Degree2Options(budget_seconds=4.0)
    sizing = degree2.plan_rows(T, 2, options)
    assert sizing.rows == T.rows and sizing.hashed_width is not None
    res = degree2.run(T, V, options, sizing)
    assert res.status == "ok" and res.info["expansion"] == "hashed"
    lin, _ = linear_c.fit_linear(T.X, T.y, seed=0)
    gap = paired_gap(res.correct, score(lin, V).correct)
    assert gap.low > 0.02, gap


def test_run_trains_on_exactly_the_hashed_width_it_is_given() -> None:
    T, V = planted(1_000, seed=3, n=300, rare=6), planted(400, seed=4, n=300, rare=6)
    sizing = degree2.Degree2Sizing(T.rows, hashed_width=256)
    res = degree2.run(T, V, degree2.Degree2Options(), sizing)
    assert res.info["expansion"] == "hashed" and res.info["hashed_width"] == 256
    assert res.info["dimension"] == degree2.expanded_dimension(300)
    model = res.model
    assert (model.width or model.n_features) == 300 + 256
    # V is predicted through the same hashed expansion.
    expected = model.predict(degree2.expand_hashed(V.X, 256))
    np.testing.assert_array_equal(res.predicted, expected)
    # The explicit sizing of the same rows keeps its blocks as they were.
    plain = degree2.run(T, V, degree2.Degree2Options(), degree2.Degree2Sizing(T.rows))
    assert "expansion" not in plain.info and "hashed_width" not in plain.info
    assert plain.model.n_features <= degree2.expanded_dimension(300)


def test_explain_names_no_term_of_a_hashed_model_and_says_why_in_one_line() -> None:
    T, V = planted(1_000, seed=3, n=300, rare=6), planted(400, seed=4, n=300, rare=6)
    res = degree2.run(
        T, V, degree2.Degree2Options(), degree2.Degree2Sizing(T.rows, None, None, 256)
    )
    block = explain.explain(T, V, {"degree2": res}, seed=0, zero_based=False)
    assert block["available"] is False and block["terms"] is None
    line = explain.explain_sentence({"explain": block})
    assert line is not None and "\n" not in line
    assert "hashed expansion" in line and "256" in line and "single product term" in line


# --- the whole check -----------------------------------------------------------------------

SCHEMAS = {
    name: json.loads(files("kcheck").joinpath("schema", name).read_text())
    for name in ("check.schema.json", "batch-line.schema.json", "verify.schema.json")
}
REGISTRY: Registry = Registry().with_resources(
    (s["$id"], Resource.from_contents(s)) for s in SCHEMAS.values()
)


@pytest.mark.slow
def test_a_check_of_wide_sparse_rows_reports_the_hashed_expansion(tmp_path: Path) -> None:
    """A whole check: degree-2's block says the expansion was hashed and into how many
    columns, the JSON holds to the schema, and --explain says why it names no term."""
    data = planted(2_400, seed=5)
    path = tmp_path / "pairs.svm"
    write_libsvm(str(path), data.y, data.X)
    config = CheckConfig(train=str(path), exact="never", jobs=1, explain=True, memory_limit=2**31)
    v = check(config).json
    d2 = v["checkers"]["degree2"]
    assert d2["expansion"] == "hashed" and d2["hashed_width"] == 2**15, d2
    assert d2["status"] == "ok" and d2["gap"] > 0.02
    validator = jsonschema.Draft202012Validator(SCHEMAS["check.schema.json"], registry=REGISTRY)
    errors = [f"{list(e.absolute_path)}: {e.message[:200]}" for e in validator.iter_errors(v)]
    assert not errors, errors
    assert v["explain"]["available"] is False and "hashed" in v["explain"]["reason"]
