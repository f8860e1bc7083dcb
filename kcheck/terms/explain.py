"""``--explain``: which second-order terms carry the nonlinearity, and what adding them buys.

The degree-2 checker's model is linear in phi(x) = [sqrt2*x_i, x_i^2, sqrt2*x_i*x_j (i<j)], so
its weights already say which products matter. A *term* is the product x_i*x_j (x_i^2 for a
square) of the scaled features (those stored in every row moved to their mean, as degree-2
moved them: :class:`kcheck.checkers.degree2.Shift`), without phi's sqrt2. Its importance is
|w| times the standard deviation of its phi column on the rows degree-2 trained on (the
largest |w| over the one-vs-rest models), which is the same as |w'| times the term's own
deviation for the weight w'
of the term itself: the typical size of what the term adds to a decision value. Only where
degree-2 ran on the explicit expansion: on its hashed one (wide sparse data,
:func:`kcheck.checkers.degree2.expand_hashed`) a column sums every term hashed to it, so no
weight is a term's, and the block says so instead of naming any.

Then the top k terms are appended to the original features and a linear model is trained on T
(a stratified subsample of :data:`MAX_TRAIN_ROWS` rows on larger T) with degree-2's C (no new
C search; the baseline's C, tuned without products, held linear + x1*x2 to 91% on xor against
99.6%) and scored on all of V with the paired interval against the baseline, like every other
model. This is advice: it never changes the verdict.

The row bound is what keeps the cost a fraction of the baseline's. A linear + k model has at
most n + 20 weights, and from 20,000 rows on its accuracy on V no longer moves with the rows
(ijcnn1, cod-rna: within 0.11 point of all of T), while four fixed-C trainings on all of a
large T cost most of the baseline's whole C search: 0.6-0.9x of it on 436,000 rows of
covtype-like data, where degree-2's C of 16 makes every Newton solve long.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck.bindings import engines
from kcheck.checkers import degree2, registry
from kcheck.checkers.base import CheckerResult, Dataset, score
from kcheck.split import stratified_subsample
from kcheck.tuning import linear_c
from kcheck.verdict import json_number, json_parameter, paired_gap

#: The k of "linear + top-k products" that ``explain.recovered`` reports.
KS = (1, 3, 10, 20)
#: Terms listed in ``explain.terms``: as many as the largest k uses.
TOP_TERMS = max(KS)
#: Rows of T the linear + k models train on at most (``explain.train_rows``): above it, a
#: stratified subsample, so that their cost stops growing with T while the baseline's does not.
MAX_TRAIN_ROWS = 20_000

__all__ = [
    "KS",
    "MAX_TRAIN_ROWS",
    "TOP_TERMS",
    "Term",
    "append_products",
    "cheaper_model_sentence",
    "explain",
    "explain_sentence",
    "rank_terms",
    "term_text",
]


@dataclass(frozen=True)
class Term:
    """The product of columns ``i <= j`` of the scaled data (0-based columns), and its weight."""

    i: int
    j: int
    importance: float


def _term_starts(n: int) -> np.ndarray:
    """Offset of term (i, i) among phi's product columns: tri(i, i) = i*n - i(i-1)/2."""
    i = np.arange(n, dtype=np.int64)
    out: np.ndarray = i * n - (i * (i - 1)) // 2
    return out


def _full_weights(model: engines.LinearModel, dim: int) -> np.ndarray:
    """The model's weights over all ``dim`` columns of phi (a compacted model keeps fewer)."""
    W = np.zeros((dim, model.weights.shape[1]))
    if model.columns is not None:
        keep = model.columns < dim
        W[model.columns[keep]] = model.weights[keep]
    else:
        m = min(dim, model.weights.shape[0])
        W[:m] = model.weights[:m]
    return W


def _phi_std(X: sp.csr_matrix) -> np.ndarray:
    """Standard deviation of every column of phi(X) over the rows of X, expanded in chunks so
    that phi(X) never exists in full."""
    X = engines.as_binding_csr(X)
    dim = degree2.expanded_dimension(X.shape[1])
    total = np.zeros(dim)
    squares = np.zeros(dim)
    ends = np.cumsum(degree2.row_expanded_nnz(X))
    start = 0
    rows = X.shape[0]
    while start < rows:
        done = int(ends[start - 1]) if start else 0
        stop = int(np.searchsorted(ends, done + degree2.EXPAND_CHUNK_NNZ, side="right"))
        stop = min(max(stop, start + 1), rows)
        P = degree2.expand(X[start:stop])
        total += np.bincount(P.indices, weights=P.data, minlength=dim)
        squares += np.bincount(P.indices, weights=P.data * P.data, minlength=dim)
        start = stop
    mean = total / max(rows, 1)
    var: np.ndarray = np.maximum(squares / max(rows, 1) - mean * mean, 0.0)
    std: np.ndarray = np.sqrt(var)
    return std


def rank_terms(model: engines.LinearModel, X: sp.csr_matrix, top: int = TOP_TERMS) -> list[Term]:
    """The ``top`` product terms of a degree-2 model trained on phi(X), most important first;
    terms of importance 0 (never nonzero, or weight 0) are left out. Ties keep column order."""
    n = X.shape[1]
    dim = degree2.expanded_dimension(n)
    W = np.abs(_full_weights(model, dim)[n:]).max(axis=1)
    importance = W * _phi_std(X)[n:]
    order = np.argsort(-importance, kind="stable")[:top]
    order = order[importance[order] > 0]
    starts = _term_starts(n)
    out = []
    for t in order:
        i = int(np.searchsorted(starts, t, side="right")) - 1
        j = i + int(t - starts[i])
        out.append(Term(i, j, float(importance[t])))
    return out


def append_products(X: sp.csr_matrix, terms: Sequence[tuple[int, int]]) -> sp.csr_matrix:
    """X with one column per term (x_i*x_j of 0-based columns) appended after its last column.

    A term whose column lies beyond X's width (a test row that never used it) is 0.
    """
    X = engines.as_binding_csr(X)
    if not terms:
        return X
    n = X.shape[1]
    feats = sorted({c for t in terms for c in t if c < n})
    where = {c: k for k, c in enumerate(feats)}
    cols = X[:, feats].tocsc() if feats else sp.csc_matrix((X.shape[0], 0))
    zero = sp.csc_matrix((X.shape[0], 1))
    products = []
    for i, j in terms:
        if i >= n or j >= n:
            products.append(zero)
        else:
            products.append(cols[:, where[i]].multiply(cols[:, where[j]]).tocsc())
    return engines.as_binding_csr(sp.hstack([X, *products], format="csr"))


def _unavailable(reason: str, t0: float) -> dict[str, Any]:
    return {
        "available": False,
        "reason": reason,
        "terms": None,
        "recovered": None,
        "seconds": json_number(time.perf_counter() - t0),
    }


def _hashed_reason(name: str, d2: CheckerResult) -> str:
    """Why a degree-2 model on the hashed expansion names no term: each of its square and pair
    columns sums the terms that hash to it, so no weight belongs to one product."""
    width = int(d2.info.get("hashed_width", 0))
    return (
        f"{name} ran on its hashed expansion, where each of its {width:,} square and pair "
        "columns holds every term hashed to it, so no weight belongs to a single product term"
    )


def explain(
    T: Dataset,
    V: Dataset,
    results: dict[str, CheckerResult],
    *,
    seed: int,
    zero_based: bool,
    deadline: float | None = None,
) -> dict[str, Any]:
    """The ``explain`` block of the JSON: the top terms of the degree-2 model and, for each k
    in :data:`KS`, linear + top-k products trained on T (at most :data:`MAX_TRAIN_ROWS` rows of
    it) with degree-2's C, scored on all of V."""
    t0 = time.perf_counter()
    name = registry.EXPLAINED
    d2 = results.get(name)
    if d2 is None:
        return _unavailable(f"{name} did not run (--checkers), so no explanation", t0)
    model = d2.model
    if d2.status == "skipped" or not isinstance(model, engines.LinearModel):
        why = d2.reason or "it did not finish"
        return _unavailable(f"{name} was skipped ({why}), so no explanation is available", t0)
    if d2.info.get("expansion") == "hashed":
        return _unavailable(_hashed_reason(name, d2), t0)
    if deadline is not None and time.perf_counter() >= deadline:
        return _unavailable("the time limit passed before the explanation", t0)
    rows = int(d2.info.get("rows", T.rows))
    XT = T.X
    if rows < T.rows:
        XT = T.X[stratified_subsample(T.y, rows, seed=seed)]
    # The rows as degree-2 expanded them: its weights are those of the shifted features.
    terms = rank_terms(model, degree2.Shift.of(XT).apply(XT))
    base = results["linear"]
    C = float(d2.info["C"])
    pairs = [(t.i, t.j) for t in terms]
    XF, yF = T.X, T.y
    if T.rows > MAX_TRAIN_ROWS:
        keep = stratified_subsample(T.y, MAX_TRAIN_ROWS, seed=seed)
        XF, yF = T.X[keep], T.y[keep]
    PT, PV = append_products(XF, pairs), append_products(V.X, pairs)
    n = T.X.shape[1]
    recovered = []
    assert base.correct is not None
    for k in KS:
        if k > len(terms):
            break
        m, _ = linear_c.fit_linear(PT[:, : n + k], yF, seed=seed, C=C)
        s = score(m, Dataset(PV[:, : n + k], V.y))
        gap = paired_gap(s.correct, base.correct)
        recovered.append(
            {
                "k": k,
                "val_accuracy": json_number(s.accuracy),
                "gap": json_number(gap.value),
                "gap_ci95": [json_number(gap.low), json_number(gap.high)],
            }
        )
    first = 0 if zero_based else 1
    return {
        "available": True,
        "reason": None,
        "index_base": first,
        "rows": int(XT.shape[0]),
        "train_rows": int(XF.shape[0]),
        "C": json_parameter(C),
        "terms": [
            {"features": [t.i + first, t.j + first], "importance": json_number(t.importance)}
            for t in terms
        ],
        "recovered": recovered,
        "seconds": json_number(time.perf_counter() - t0),
    }


def term_text(features: Sequence[int]) -> str:
    """``x3·x7`` for a product, ``x3²`` for a square (indices as in the file)."""
    a, b = features
    return f"x{a}\u00b2" if a == b else f"x{a}\u00b7x{b}"


#: A k whose gain over linear is this share of degree-2's gain "reaches" it.
RECOVERED_SHARE = 0.9
#: A term is named in the sentence only with at least this share of the top term's importance:
#: on a disc with noise features the third term (a noise product) carries a tenth of the
#: first two, and naming it beside them misleads.
NAMED_SHARE = 0.25


def explain_sentence(v: dict[str, Any]) -> str | None:
    """One line in plain words from a check's JSON, or None without ``--explain``."""
    ex = v.get("explain")
    if ex is None:
        return None
    if not ex["available"]:
        return f"explain: {ex['reason']}."
    terms, rec = ex["terms"], ex["recovered"]
    lin = v["linear"]["val_accuracy"]
    d2 = v["checkers"][registry.EXPLAINED]["val_accuracy"]
    if not terms or not rec:
        return "explain: the degree-2 model puts no weight on any product term."
    pct = "{:.1%}".format
    best = max(rec, key=lambda r: (r["val_accuracy"], -r["k"]))
    gain = d2 - lin
    reach = [r for r in rec if gain > 0 and r["val_accuracy"] - lin >= RECOVERED_SHARE * gain]
    pick = reach[0] if reach else best
    k = pick["k"]
    top = terms[0]["importance"]
    named = [
        term_text(t["features"])
        for t in terms[: min(k, 3)]
        if t is terms[0] or t["importance"] >= NAMED_SHARE * top
    ]
    words = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
    products = "1 product" if k == 1 else f"{k} products"
    fitted, train = ex["train_rows"], v["split"]["train"]
    rows = f"; trained on {fitted:,} of {train:,} rows of T" if fitted < train else ""
    tail = f"(degree-2 {pct(d2)}, linear {pct(lin)}{rows})"
    if gain > 0 and not reach:
        return (
            f"the largest terms are {words}, but linear + {products} reaches only "
            f"{pct(pick['val_accuracy'])} {tail}."
        )
    if gain <= 0:
        return (
            f"explain: degree-2 gains nothing over linear; its largest terms are {words}, and "
            f"linear + {products} reaches {pct(pick['val_accuracy'])} {tail}."
        )
    return (
        f"most of the nonlinearity is in {words}: linear + {products} reaches "
        f"{pct(pick['val_accuracy'])} {tail}."
    )


def cheaper_model_sentence(
    v: dict[str, Any], options: str = "", cost: str | None = None
) -> str | None:
    """Where ``--explain`` found that linear + K products recovers the kernel's gain, less at
    most epsilon / 2, on V: a line that says so and gives the ``--model linear+K`` command
    (the smallest such K), with the run's own ``options`` and the model's predicted ``cost``.
    None otherwise: no ``--explain``, a ``linear`` verdict, or a metric other than accuracy
    (the linear + K gaps are in accuracy)."""
    ex = v.get("explain")
    deciding = v.get("deciding_checker")
    if (
        ex is None
        or not ex["available"]
        or not ex["recovered"]
        or v["verdict"] != "kernel"
        or deciding is None
        or v.get("metric", "accuracy") != "accuracy"
    ):
        return None
    kernel_gap = v["checkers"][deciding]["gap"]
    if kernel_gap is None:
        return None
    slack = v["epsilon"] / 2
    enough = [r for r in ex["recovered"] if r["gap"] is not None and r["gap"] >= kernel_gap - slack]
    if not enough:
        return None
    pick = min(enough, key=lambda r: r["k"])
    k = pick["k"]
    path = v["data"]["path"]
    data = "FILE" if path == "-" else shlex.quote(path)
    products = "1 product" if k == 1 else f"{k} products"
    pts = "{:+.1f}".format
    return (
        f"linear + {products} gains {pts(100 * pick['gap'])} points on the validation split, "
        f"within epsilon/2 of the kernel's {pts(100 * kernel_gap)}: a cheaper model than the "
        f"kernel. `kcheck check {data}{options} --explain --model-out MODEL --model linear+{k}` "
        "trains it" + ("." if cost is None else f" ({cost}).")
    )
