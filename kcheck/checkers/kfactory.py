"""Kernel Factory (opt-in): an ensemble of kernel machines on row partitions (Ballings and Van den
Poel, Expert Systems with Applications 40(8), 2013; R ``kernelFactory``).

T's rows (a stratified sample where the budget cannot hold all) are split into ``rp =
round(log10(n))`` disjoint stratified partitions; each partition's empirical kernel map (a row's
kernel values against its rows) feeds a base learner. The paper's random forest is not among
kcheck's dependencies: here LIBLINEAR with its ``-C`` search (the paper's future work). The kernel
(linear, degree-2 polynomial, or RBF at 1 / median squared distance) is chosen by burn-in on a
held-out third of the first partition, ties to the simpler. Members' decision values, each over its
spread on its own rows, are averaged with equal weights (V is the verdict's; no weights fitted on
it). One column partition, as the paper recommends; on a sample, the gap is against a linear model
on the same rows."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck.bindings import engines
from kcheck.checkers import base
from kcheck.checkers.base import Allowance, CheckerResult, Context, Counts, Dataset, Sized
from kcheck.costs import budget
from kcheck.defaults import Event
from kcheck.errors import KcheckError
from kcheck.split import stratified_folds
from kcheck.tuning import linear_c, rbf_sample

NAME = "kfactory"
#: The kernels burn-in tries, the simplest first: a tie goes to the earlier.
KERNELS = ("linear", "poly2", "rbf")
#: Rows of a partition: fewer learn nothing a kernel shows; more make the m x m matrix and
#: LIBLINEAR's copy (24 bytes a value) the largest allocation.
MIN_PARTITION_ROWS = 50
MAX_PARTITION_ROWS = 2_000
#: Rows of V (and of held-out rows) whose kernel values against a partition are built at once.
BLOCK_ROWS = 4_096


@dataclass(frozen=True)
class KFactorySizing:
    """What it trains, as the plan decided: ``partitions`` of ``rows`` rows (0: skipped)."""

    partitions: int
    rows: int
    reason: str | None = None
    limited_by: str | None = None

    def sampled(self, rows: int) -> int:
        """Rows of T used: all where nothing cut the partitions, else ``partitions x rows``."""
        return rows if self.limited_by is None else self.partitions * self.rows


def n_partitions(rows: int) -> int:
    """The R package's default, ``round(log10(n))``, at least one."""
    return max(1, round(math.log10(max(rows, 1))))


def counted_seconds(
    partitions: int, rows: int, val_rows: int, n_classes: int, values_per_row: float
) -> float:
    """Counted seconds of ``partitions`` members of ``rows`` rows: kernel values (its rows and V's),
    a ``-C`` search on dense features, burn-in's three trainings."""
    kernel = budget.DISTANCE_SECONDS_PER_WORK * (values_per_row + 1.0)
    member = kernel * rows * (rows + val_rows) + budget.linear_seconds(rows * rows, n_classes, rows)
    burn = len(KERNELS) * budget.linear_seconds((2 * rows // 3) ** 2, n_classes, 2 * rows // 3)
    return partitions * member + burn


def memory_bytes(rows: int, val_rows: int) -> int:
    """One member at a time: kernel matrix (8 bytes a value), the binding's CSR (12), LIBLINEAR's
    nodes (16), and a block of V's kernel values."""
    return 36 * rows * rows + 8 * min(val_rows, BLOCK_ROWS) * rows


def plan_counts(c: Counts, budget_seconds: float | None, memory_limit: int) -> KFactorySizing:
    """``round(log10(n))`` partitions, shrunk (bisection on counts) until the count fits
    ``budget_seconds`` and a member ``memory_limit``; skipped below MIN_PARTITION_ROWS."""
    parts = max(1, min(n_partitions(c.rows), c.rows // MIN_PARTITION_ROWS))
    per_row = c.nnz / max(c.rows, 1)
    most = min(c.rows // parts, MAX_PARTITION_ROWS)
    limited_by = "cost" if most < c.rows // parts else None

    def fits(m: int) -> str | None:
        if memory_bytes(m, c.val_rows) > memory_limit:
            return "memory"
        seconds = counted_seconds(parts, m, c.val_rows, c.n_classes, per_row)
        if budget_seconds is not None and seconds > budget_seconds:
            return "cost"
        return None

    if fits(most) is None:
        return KFactorySizing(parts, most, None, limited_by)
    lo, hi = MIN_PARTITION_ROWS - 1, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid) is None:
            lo = mid
        else:
            hi = mid - 1
    if lo < MIN_PARTITION_ROWS:
        why = fits(MIN_PARTITION_ROWS) or "cost"
        what = (
            f"the memory limit of {budget.size_text(memory_limit)}"
            if why == "memory"
            else "the budget"
        )
        reason = f"{parts} partitions of {MIN_PARTITION_ROWS} rows do not fit {what}"
        return KFactorySizing(0, 0, reason, why)
    return KFactorySizing(parts, lo, None, fits(lo + 1) or "cost")


def size(counts: Counts, allowed: Allowance) -> Sized:
    """What :func:`check` will do within its allowance, its bytes and counted seconds."""
    budget_seconds, _ = allowed.bound()
    p = plan_counts(counts, budget_seconds, allowed.memory_limit)
    if p.partitions == 0:
        return Sized(0, p.reason, p.limited_by, 0, sizing=p)
    per_row = counts.nnz / max(counts.rows, 1)
    seconds = counted_seconds(p.partitions, p.rows, counts.val_rows, counts.n_classes, per_row)
    need = memory_bytes(p.rows + 1, counts.val_rows)
    return Sized(p.sampled(counts.rows), None, p.limited_by, need, seconds, seconds, sizing=p)


def _canonical(model: engines.LinearModel, dec: np.ndarray) -> np.ndarray:
    """A member's decision values in one order for all: two classes, one larger-label column; else a
    column per class, sorted (LIBLINEAR orders labels as met, differing per partition)."""
    labels = model.labels
    if labels.size == 2:
        return dec[:, :1] if labels[0] > labels[1] else -dec[:, :1]
    return dec[:, np.argsort(labels)]


@dataclass
class Member:
    """One partition's kernel machine: rows, kernel, linear model, and its values' spread."""

    rows: sp.csr_matrix
    kernel: str
    gamma: float
    model: engines.LinearModel
    spread: np.ndarray = field(default_factory=lambda: np.ones(1))

    def features(self, X: sp.csr_matrix) -> np.ndarray:
        return kernel_values(X, self.rows, self.kernel, self.gamma)

    def scores(self, X: sp.csr_matrix) -> np.ndarray:
        """Its standardised decision values (:func:`_canonical` order), in blocks of rows."""
        out = [
            _canonical(
                self.model, self.model.decision_function(self.features(X[s : s + BLOCK_ROWS]))
            )
            for s in range(0, X.shape[0], BLOCK_ROWS)
        ]
        dec = np.vstack(out) if out else np.empty((0, self.spread.size))
        standardised: np.ndarray = dec / self.spread
        return standardised


@dataclass
class Ensemble:
    """The members' standardised decision values averaged equally, in LIBLINEAR's convention (two
    classes: positive is ``labels[0]``), so base.score reads it as a model."""

    members: list[Member]
    classes: np.ndarray

    @property
    def labels(self) -> np.ndarray:
        return self.classes[::-1] if self.classes.size == 2 else self.classes

    def predict(self, X: sp.csr_matrix) -> np.ndarray:
        return self.predict_scored(X)[0]

    def predict_scored(self, X: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
        X = engines.as_binding_csr(X)
        dec = np.mean([m.scores(X) for m in self.members], axis=0)
        if self.classes.size == 2:
            return np.where(dec[:, 0] > 0, self.classes[1], self.classes[0]), dec
        return self.classes[np.argmax(dec, axis=1)], dec


def kernel_values(X: sp.csr_matrix, P: sp.csr_matrix, kernel: str, gamma: float) -> np.ndarray:
    """The rows of X against the rows of P, as a dense ``len(X) x len(P)`` matrix."""
    dot = np.asarray((X @ P.T).todense(), dtype=np.float64)
    if kernel == "linear":
        return dot
    if kernel == "poly2":
        return (dot + 1.0) ** 2
    x2 = np.asarray(X.multiply(X).sum(axis=1)).ravel()
    p2 = np.asarray(P.multiply(P).sum(axis=1)).ravel()
    sq = np.maximum(x2[:, None] + p2[None, :] - 2.0 * dot, 0.0)
    out: np.ndarray = np.exp(-gamma * sq)
    return out


def _gamma(P: sp.csr_matrix) -> float:
    """1 / the median squared distance between the rows of P (rbf_sample's width)."""
    dense = P.toarray()
    sq = (dense * dense).sum(axis=1)
    D = np.maximum(sq[:, None] + sq[None, :] - 2.0 * dense @ dense.T, 0.0)
    return 1.0 / rbf_sample.median_sq_distance(D)


def _member(
    P: sp.csr_matrix, y: np.ndarray, kernel: str, gamma: float, seed: int, class_weight: Any
) -> Member:
    K = kernel_values(P, P, kernel, gamma)
    model, _ = linear_c.fit_linear(K, y, seed=seed, class_weight=class_weight)
    spread = np.std(_canonical(model, model.decision_function(K)), axis=0)
    return Member(P, kernel, gamma, model, np.where(spread > 0, spread, 1.0))


def burn_in(
    P: sp.csr_matrix, y: np.ndarray, gamma: float, *, seed: int, class_weight: Any = None
) -> tuple[str, dict[str, float]]:
    """The kernel best on the first partition's held-out third; ties to the simpler (KERNELS)."""
    fold = stratified_folds(y, 3, seed, 0)
    train, held = fold != 0, fold == 0
    accuracy: dict[str, float] = {}
    for kernel in KERNELS:
        m = _member(P[train], y[train], kernel, gamma, seed, class_weight)
        accuracy[kernel] = float(np.mean(m.model.predict(m.features(P[held])) == y[held]))
    best = max(KERNELS, key=lambda k: (accuracy[k], -KERNELS.index(k)))
    return best, accuracy


def partitions(y: np.ndarray, parts: int, seed: int) -> list[np.ndarray]:
    """``parts`` disjoint stratified partitions of the rows, covering them all."""
    fold = stratified_folds(y, parts, seed, 0)
    return [np.flatnonzero(fold == p) for p in range(parts)]


def run(
    T: Dataset,
    V: Dataset,
    sizing: KFactorySizing,
    *,
    seed: int = 0,
    class_weight: Any = None,
    deadline: float | None = None,
) -> CheckerResult:
    """The ensemble on what ``sizing`` says: burn-in, a member per partition, scored on V; against a
    linear model on the same rows where sampled. Never re-sized here."""
    t0 = time.perf_counter()
    if sizing.partitions == 0:
        return CheckerResult.skipped(NAME, sizing.reason or "", time.perf_counter() - t0)
    reference = None
    S = T
    if sizing.sampled(T.rows) < T.rows:
        S = base.stratified_sample(T, sizing.sampled(T.rows), seed=seed)
        reference = base.sample_reference(S, V, seed=seed, class_weight=class_weight)
    X = engines.as_binding_csr(S.X)
    classes = np.unique(S.y)
    parts = partitions(S.y, sizing.partitions, seed)
    if any(np.unique(S.y[rows]).size < classes.size for rows in parts):
        raise KcheckError(
            f"a class has fewer rows than its {sizing.partitions} partitions, and every "
            "member must hold every class"
        )
    gamma = _gamma(X[parts[0]])
    kernel, burn = burn_in(X[parts[0]], S.y[parts[0]], gamma, seed=seed, class_weight=class_weight)
    members = []
    for rows in parts:
        base.stop_if_past(deadline, "Kernel Factory")
        members.append(_member(X[rows], S.y[rows], kernel, gamma, seed, class_weight))
    ensemble = Ensemble(members, classes)
    s = base.score(ensemble, V)
    info: dict[str, object] = {
        "partitions": len(members),
        "kernel": kernel,
        "burn_in": {k: round(v, 6) for k, v in burn.items()},
        "rows": int(S.rows),
        "fraction": S.rows / T.rows,
    }
    reason = None
    if sizing.limited_by is not None and S.rows < T.rows:
        info["limited_by"] = sizing.limited_by
        reason = f"{S.rows:,} of {T.rows:,} rows fit the {sizing.limited_by} limit"
    result = CheckerResult.scored(
        NAME,
        s,
        t0,
        ensemble.predict,
        status="ok" if S.rows == T.rows else "subsampled",
        reason=reason,
        info=info,
    )
    return result if reference is None else reference.fill(result)


def check(T: Dataset, V: Dataset, ctx: Context, sized: Sized) -> CheckerResult:
    """The checker as the pipeline runs it, on what the plan sized (:func:`size`)."""
    ctx.progress(Event("Kernel Factory checker"))
    sizing = base.sizing_of(sized, KFactorySizing)
    return run(T, V, sizing, seed=ctx.seed, class_weight=ctx.class_weight, deadline=ctx.deadline)
