"""Edges of issue 63: a reported CV accuracy for every point the RBF SVM checker can choose,
JUnit XML for any file name, an invalid sparse matrix refused before the bindings see it, and
integer labels that a double does not keep apart refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import DATASETS, ROOT, make_context
from hypothesis import given, settings
from hypothesis import strategies as st
from runner import run_kcheck
from test_schema import assert_valid

import kcheck
from kcheck.checkers import rbfsvm
from kcheck.checkers.base import CheckerResult, Dataset
from kcheck.io.data import write_libsvm
from kcheck.scoring import Scoring
from kcheck.tuning import rbf_sample as rbf_tuning

# --- 0: the selection's point and the CV accuracy reported for it ---------------------------


def _generated(kind: str, rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Labels by the sign of a product of two features (noise features beside), of a linear
    rule, or of the distance from the centre in three classes; a few labels flipped."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(rows, 4))
    if kind == "product":
        y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    elif kind == "linear":
        y = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, 1.0, -1.0)
    else:
        r = np.hypot(X[:, 0], X[:, 1])
        y = np.digitize(r, [0.5, 0.9]).astype(np.float64)
    flip = rng.random(rows) < 0.05
    y[flip] = rng.permutation(y)[flip]
    return X, y


def _scored_run(
    X: np.ndarray,
    y: np.ndarray,
    options: rbf_tuning.Tuning,
    tune_rows: int,
    allowance: float,
) -> tuple[CheckerResult, rbf_tuning.Search]:
    """rbfsvm.run on three quarters of the rows (scored on the rest) with the search's
    allowance at ``allowance`` times its count, and the search it ran."""
    t = y.size * 3 // 4
    A = sp.csr_matrix(X)
    T, V = Dataset(A[:t], y[:t]), Dataset(A[t:], y[t:])
    searches: list[rbf_tuning.Search] = []
    real = rbf_tuning.search_grid

    def spy(*args: object, **kwargs: object) -> rbf_tuning.Search:
        found = real(*args, **kwargs)  # type: ignore[arg-type]
        searches.append(found)
        return found

    with (
        mock.patch.object(rbf_tuning, "SEARCH_ALLOWANCE", allowance),
        mock.patch.object(rbf_tuning, "search_grid", spy),
    ):
        result = rbfsvm.run(T, V, options, tune_rows, make_context(seed=options.seed))
    (search,) = searches
    return result, search


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(["product", "linear", "rings"]),
    rows=st.integers(80, 200),
    data_seed=st.integers(0, 2**16),
    seed=st.integers(0, 6),
    log2_C=st.lists(st.sampled_from(rbf_tuning.LOG2_C), min_size=1, max_size=4, unique=True),
    factors=st.lists(
        st.sampled_from(rbf_tuning.LOG2_GAMMA_FACTOR), min_size=1, max_size=3, unique=True
    ),
    tune_share=st.floats(0.4, 1.0),
    allowance=st.sampled_from([0.0, 0.05, 0.3, 2.0, 1e9]),
    metric=st.sampled_from(["accuracy", "balanced"]),
)
def test_the_cv_accuracy_reported_is_the_chosen_points_own(
    kind: str,
    rows: int,
    data_seed: int,
    seed: int,
    log2_C: list[float],
    factors: list[float],
    tune_share: float,
    allowance: float,
    metric: str,
) -> None:
    """Whatever the data, seed, grid and the search's allowance, the point the selection on
    T's held-out third chooses (a candidate, or the next larger C at its gamma, which the
    search may have passed over) ends in a result whose cv_accuracy is the search's CV
    accuracy at that very point, or none where the search did not score it."""
    X, y = _generated(kind, rows, data_seed)
    classes = np.unique(y)
    options = rbf_tuning.Tuning(
        seed=seed,
        log2_C=tuple(sorted(log2_C)),
        log2_gamma_factor=tuple(sorted(factors)),
        scoring=Scoring.for_training(metric, y, classes),
    )
    tune_rows = max(2 * options.folds + classes.size, int(tune_share * rows * 3 // 4))
    result, search = _scored_run(X, y, options, tune_rows, allowance)
    assert result.status == "ok", result.reason
    on_grid = {*search.scores, *search.passed_iterations}
    chosen = [
        p
        for p in on_grid
        if p[0] == result.info["log2_C"] and round(p[1], 6) == result.info["log2_gamma"]
    ]
    assert len(chosen) == 1, (result.info, sorted(on_grid))
    (point,) = chosen
    if point in search.right:
        assert result.cv_accuracy == search.right[point] / result.info["tune_rows"]
    else:
        assert result.cv_accuracy is None
    assert result.info["C"] == 2.0 ** point[0]


@pytest.mark.slow
def test_a_larger_C_its_search_passed_over_ends_in_a_result_not_a_traceback(
    tmp_path: Path,
) -> None:
    """Issue 63's case: 7,000 rows, the sign of a product of two features and eight noise
    features. At --seed 1 the larger-C step chose C = 2^11, which the search had passed over
    as too costly, and the CV accuracy of a point never scored raised KeyError."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-1.0, 1.0, size=(7000, 10))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    path = tmp_path / "product.svm"
    write_libsvm(str(path), y, X)
    run = run_kcheck(["check", "-q", str(path), "--seed", "1"], timeout=600)
    assert run.code == 0, run.describe()
    svm = run.json["checkers"]["rbfsvm"]
    assert svm["status"] == "ok"
    passed = {(p["log2_C"], p["log2_gamma"]) for p in svm["grid_passed_over"]}
    assert (svm["log2_C"], svm["log2_gamma"]) in passed
    assert "cv_accuracy" not in svm
    assert_valid("check.schema.json", run.json)


# --- 3: JUnit XML for any file name -----------------------------------------------------------

FAST = ("--checkers", "multilinear", "--exact", "never")


def test_junit_of_file_names_that_are_not_utf8_parses(tmp_path: Path) -> None:
    """A file name's undecodable bytes were written as lone surrogates (``&#56575;``), which
    XML 1.0 forbids: xml.etree refused the file. They are shown as ``\\xff`` now, as kcheck's
    messages show them, in a case's name and in its message alike; a control character still
    becomes U+FFFD."""
    d = tmp_path / "d"
    d.mkdir()
    heart = (DATASETS / "heart_scale").read_bytes()
    (d / os.fsdecode(b"inv\xff.svm")).write_bytes(heart)
    (d / os.fsdecode(b"ctl\x01.svm")).write_bytes(heart)
    (d / os.fsdecode(b"bad\xfe.svm")).write_bytes(b"+1 1:0.5\nnot data\n")
    report = tmp_path / "j.xml"
    run = run_kcheck(
        ["batch", "-q", str(d), "-o", str(tmp_path / "o.jsonl"), "--junit", str(report), *FAST]
    )
    assert run.code == 3, run.describe()  # the broken file is an error, the others ok
    suite = ET.parse(report).getroot()
    cases = {Path(c.get("name") or "").name: c for c in suite.iter("testcase")}
    assert set(cases) == {"inv\\xff.svm", "ctl\ufffd.svm", "bad\\xfe.svm"}, sorted(cases)
    assert cases["inv\\xff.svm"].find("system-out") is not None
    error = cases["bad\\xfe.svm"].find("error")
    assert error is not None and "bad\\xfe.svm" in (error.get("message") or "")
    assert "&#5" not in report.read_text("utf-8")


# --- 5: an invalid sparse matrix is refused before anything reads its indices ----------------

#: Each case spoils one index array of a valid matrix, then calls kcheck.check with it as X and
#: as the test X; a JSON line before and after each call, so that a crash names its case.
_SPARSE_CASES = textwrap.dedent(
    """
    import json
    import numpy as np, scipy.sparse as sp
    import kcheck

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1, -1)

    def csr_negative(S): S.indices[0] = -1
    def csr_past_the_width(S): S.indices[0] = 7
    def indptr_decreasing(S): S.indptr[3] = S.indptr[5]
    def indptr_past_the_values(S): S.indptr[-1] += 3
    def csc_negative(S): S.indices[0] = -1
    def coo_negative_row(S): S.row[0] = -1
    def coo_past_the_width(S): S.col[0] = 9

    CASES = [
        ("csr_negative", sp.csr_matrix, csr_negative),
        ("csr_array_negative", sp.csr_array, csr_negative),
        ("csr_past_the_width", sp.csr_matrix, csr_past_the_width),
        ("indptr_decreasing", sp.csr_matrix, indptr_decreasing),
        ("indptr_past_the_values", sp.csr_matrix, indptr_past_the_values),
        ("csc_negative", sp.csc_matrix, csc_negative),
        ("coo_negative_row", sp.coo_matrix, coo_negative_row),
        ("coo_past_the_width", sp.coo_matrix, coo_past_the_width),
    ]

    def arrays(S):
        names = ("row", "col") if S.format == "coo" else ("indptr", "indices")
        return [np.array(getattr(S, n), copy=True) for n in (*names, "data")]

    for name, make, spoil in CASES:
        for where in ("X", "test X"):
            S = make(X)
            spoil(S)
            before = arrays(S)
            print(json.dumps({"case": name, "where": where}), flush=True)
            try:
                if where == "X":
                    kcheck.check(S, y, checkers="multilinear", exact="never")
                else:
                    kcheck.check(X, y, test=(S, y), checkers="multilinear", exact="never")
                error, message = None, ""
            except Exception as e:
                error, message = type(e).__name__, str(e)
            kept = all(np.array_equal(a, b) for a, b in zip(before, arrays(S)))
            print(json.dumps({"case": name, "where": where, "error": error,
                              "message": message, "kept": kept}), flush=True)
    """
)

#: What each case's message says (after "X: " or "test X: ").
_SPARSE_SAID = {
    "csr_negative": "stored value 0 has column index -1, outside 0 to 4 (5 columns)",
    "csr_array_negative": "stored value 0 has column index -1, outside 0 to 4 (5 columns)",
    "csr_past_the_width": "stored value 0 has column index 7, outside 0 to 4 (5 columns)",
    "indptr_decreasing": "its index pointer (indptr) decreases at row 3",
    "indptr_past_the_values": "its index pointer (indptr) ends at 1,003, past its 1,000 stored",
    "csc_negative": "stored value 0 has row index -1, outside 0 to 199 (200 rows)",
    "coo_negative_row": "stored value 0 has row index -1, outside 0 to 199 (200 rows)",
    "coo_past_the_width": "has column index 9, outside 0 to 4 (5 columns)",
}


def test_an_invalid_sparse_matrix_is_a_value_error_not_a_crash() -> None:
    """A CSR matrix with a negative column index killed Python (``munmap_chunk(): invalid
    pointer``) in scipy's conversion; an index past the width, a COO row index of -1 corrupted
    the heap too, and a decreasing index pointer gave a RuntimeError. Each is now a ValueError
    naming what is wrong, as X and as the test X, before anything reads the indices, and the
    caller's matrix is left as it was. In a process of its own: a crash fails this test."""
    done = subprocess.run(
        [sys.executable, "-c", _SPARSE_CASES],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    ended = [x for x in lines if "error" in x]
    said = f"exit {done.returncode}; last case started: {lines[-1:]}\n{done.stderr[-2000:]}"
    assert done.returncode == 0, said
    assert len(ended) == 2 * len(_SPARSE_SAID), said
    for x in ended:
        assert x["error"] == "KcheckError", x
        assert x["message"].startswith(f"{x['where']}: the sparse matrix's structure is invalid")
        assert _SPARSE_SAID[x["case"]] in x["message"], x
        assert x["kept"], x


def test_a_valid_sparse_matrix_of_any_format_is_taken_as_before() -> None:
    """The checks refuse only what is invalid: every scipy format, and a CSR matrix with
    unsorted and duplicate indices, give the canonical CSR of the same numbers."""
    from kcheck.arrays import as_csr

    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 6))
    X[X < 0.3] = 0.0
    want = sp.csr_matrix(X)
    for form in ("csr", "csc", "coo", "bsr", "lil", "dok", "dia"):
        for kind in ("matrix", "array"):
            A = as_csr(getattr(sp, f"{form}_{kind}")(X))
            assert A.nnz == want.nnz and (A != want).nnz == 0, (form, kind)
    messy = sp.csr_matrix(
        (np.array([1.0, 2.0, 3.0]), np.array([2, 0, 2]), np.array([0, 3, 3])), shape=(2, 4)
    )
    assert as_csr(messy).toarray().tolist() == [[2.0, 0.0, 4.0, 0.0], [0.0] * 4]


# --- 6: integer labels that one double holds ---------------------------------------------------


@pytest.mark.parametrize(
    ("high", "low", "dtype", "double"),
    [
        (2**53 + 1, 2**53, np.int64, "9007199254740992.0"),
        (2**63 - 1, 2**63 - 2, np.int64, "9.223372036854776e+18"),
        (2**64 - 1, 2**64 - 2, np.uint64, "1.8446744073709552e+19"),
        (2**53 + 1, 2**53, object, "9007199254740992.0"),
    ],
)
def test_integer_labels_a_double_merges_are_refused_naming_two(
    high: int, low: int, dtype: type, double: str
) -> None:
    """``np.where(y > 0, 2**53 + 1, 2**53)`` was one class as doubles ("every row has label
    9007199254740992.0; a classifier needs at least two classes"), false of the input. They
    are refused now, naming two labels that one double holds; the test labels too."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = np.where(X[:, 0] > 0, high, low).astype(dtype)
    fragment = (
        f"labels {high} and {low} are the same as a double ({double}); LIBLINEAR and LIBSVM "
        "keep labels as doubles"
    )
    with pytest.raises(ValueError, match=r"^y: labels ") as refused:
        kcheck.check(X, y, checkers="multilinear", exact="never")
    assert fragment in str(refused.value)
    with pytest.raises(ValueError, match=r"^test y: labels ") as refused:
        kcheck.check(X, X[:, 0] > 0, test=(X, y), checkers="multilinear", exact="never")
    assert fragment in str(refused.value)


def test_large_integer_labels_that_stay_distinct_as_doubles_are_two_classes() -> None:
    """2^53 and 2^53 + 2 are two doubles, and 2^63 - 1 beside a small label is one: those
    still check, as two classes, with the labels the doubles hold."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    for high, low in ((2**53 + 2, 2**53), (2**63 - 1, -1)):
        y = np.where(X[:, 0] > 0, high, low).astype(np.int64)
        result = kcheck.check(X, y, checkers="multilinear", exact="never")
        assert result.to_dict()["data"]["classes"] == [float(low), float(high)]
        assert result.verdict == "linear"
