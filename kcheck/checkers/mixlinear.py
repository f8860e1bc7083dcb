"""Mixlinear checker: a mixture of linear SVMs fitted by hard (classification) EM.

MultiLinear's k-means ignores labels, diluting gains where the nonlinearity does not follow the
features' density; a mixture of linear experts (IEEE TNN 21(12), 2010) fits partition and experts
together:

* gate: an isotropic Gaussian per expert with shared variance, p(k | x) proportional to
  pi_k exp(-|x - mu_k|^2 / (2 s^2)), s^2 its ML value (:func:`_scale`);
* expert fit of a row: exp(-loss), the squared hinge loss of LIBLINEAR's one-vs-rest decision
  values for the row's label (4 for a wrong constant expert);
* E-step: argmax_k log pi_k - |x - mu_k|^2 / (2 s^2) - loss_k (hard: the binding takes no
  instance weights; soft EM in scipy was not better and 7-20x slower, scripts/results/mixlinear.md);
* pruning: experts below ``max(MIN_EXPERT_ROWS / l, PRUNE_FRACTION / K0)`` go, their rows
  reassigned; the largest stays;
* M-step: a LIBLINEAR model per expert (C from a 5-fold search in the first M-step, then
  fixed), centers the rows' means, pi_k the shares;
* :func:`n_rounds` rounds (from counts), ending early at a fixed point;
* then each row goes to the gate's expert (label unknown, as at prediction) and changed experts
  retrain;
* prediction: the gate's argmax, then that expert's label, as cheap as MultiLinear's."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from kcheck.bindings import engines
from kcheck.checkers import base
from kcheck.checkers import kmeans as km
from kcheck.checkers import multilinear as ml
from kcheck.checkers.base import Allowance, CheckerResult, Context, Counts, Dataset, Sized
from kcheck.costs import budget
from kcheck.defaults import Event
from kcheck.metrics import platt_fit
from kcheck.tuning import linear_c

NAME = "mixlinear"
#: EM rounds after MultiLinear's partition, on T of at most ROUNDS_MAX_NNZ values: rows changing
#: expert fell 3-10x over 6 rounds; small sets reached a fixed point in 3-4.
N_ROUNDS = 6
#: Above this many stored values in T, fewer rounds (each costs about one linear training).
ROUNDS_MAX_NNZ = 2_000_000
N_ROUNDS_LARGE = 3
#: Experts below this many rows (or PRUNE_FRACTION / K0 of T) go: they scored 5-10 below linear.
MIN_EXPERT_ROWS = km.MIN_CLUSTER_ROWS // 2
PRUNE_FRACTION = 0.2
#: Squared hinge loss of a wrong constant expert (a decision value of -1 on the row's label).
WRONG_LOSS = 4.0
#: A fixed-C training's share of a C search and training (counted; the checker took a median 3.1x
#: the baseline's time on small judged sets, 0.3-0.8x where the baseline took 5 s or more).
TRAIN_SHARE = 0.2


def n_rounds(nnz: int) -> int:
    """EM rounds from T's stored values (no clock: the same data does the same work)."""
    return N_ROUNDS if nnz <= ROUNDS_MAX_NNZ else N_ROUNDS_LARGE


def prune_share(rows: int, initial: int) -> float:
    """The share below which an expert is pruned."""
    return max(MIN_EXPERT_ROWS / max(rows, 1), PRUNE_FRACTION / max(initial, 1))


@dataclass(frozen=True)
class MixLinearOptions(ml.ClusterOptions):
    #: Initial experts (None: MultiLinear's K for T's rows).
    n_experts: int | None = None
    #: EM rounds (None: :func:`n_rounds`).
    rounds: int | None = None


@dataclass
class MixLinearModel:
    """The gate (centers over ``columns`` of X, log shares, 2 s^2) and one model per expert."""

    centers: np.ndarray
    log_share: np.ndarray
    scale: float
    experts: list[ml.ClusterModel]
    columns: np.ndarray | None = None

    def gate(self, X: sp.csr_matrix) -> np.ndarray:
        """Each row's expert: the gate's most probable one."""
        Xc = _gate_columns(X, self.columns, self.centers.shape[1])
        out = np.empty(X.shape[0], dtype=np.intp)
        for s in range(0, X.shape[0], km.BLOCK_ROWS):
            e = min(s + km.BLOCK_ROWS, X.shape[0])
            out[s:e] = np.argmax(_gate_scores(Xc[s:e], self), axis=1)
        return out

    def predict(self, X: sp.csr_matrix) -> np.ndarray:
        return self.predict_scored(X)[0]

    def predict_scored(self, X: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray | None]:
        """The gated expert's labels, and (calibrated) its probability of the larger label."""
        assign = self.gate(X)
        out = np.empty(X.shape[0], dtype=np.float64)
        calibrated = all(c.platt is not None for c in self.experts)
        probs = np.empty(X.shape[0], dtype=np.float64) if calibrated else None
        for c, idx in ml._groups(assign, len(self.experts)):
            labels, p = self.experts[c].predict_scored(X[idx])
            out[idx] = labels
            if probs is not None and p is not None:
                probs[idx] = p
        return out, probs


def _gate_columns(X: sp.csr_matrix, columns: np.ndarray | None, width: int) -> sp.csr_matrix:
    """X over the gate's columns, padded or cut to the centers' width."""
    if columns is not None:
        X = X[:, columns[: int(np.searchsorted(columns, X.shape[1]))]]
    if X.shape[1] < width:
        X = sp.hstack([X, sp.csr_matrix((X.shape[0], width - X.shape[1]))], format="csr")
    elif X.shape[1] > width:
        X = X[:, :width]
    return X


def _gate_scores(X: sp.csr_matrix, model: MixLinearModel) -> np.ndarray:
    d = km.sq_distances(X, model.centers)
    d /= -model.scale
    d += model.log_share[None, :]
    return d


def _losses(expert: ml.ClusterModel, X: sp.csr_matrix, y: np.ndarray) -> np.ndarray:
    """Squared hinge loss of the expert's one-vs-rest decision values for each row's label."""
    if expert.constant is not None:
        return np.where(y == expert.constant, 0.0, WRONG_LOSS)
    assert expert.weights is not None and expert.bias_weights is not None
    assert expert.labels is not None and expert.C is not None
    model = engines.LinearModel(
        expert.weights, expert.bias_weights, expert.labels, expert.C, columns=expert.columns
    )
    dec = model.decision_function(X)
    labels = expert.labels
    if labels.size == 2:
        sign = np.where(y == labels[0], 1.0, -1.0)
        loss = np.maximum(0.0, 1.0 - sign * dec[:, 0]) ** 2
        return np.where(np.isin(y, labels), loss, WRONG_LOSS)
    sign = np.where(y[:, None] == labels[None, :], 1.0, -1.0)
    loss = (np.maximum(0.0, 1.0 - sign * dec) ** 2).sum(axis=1)
    out: np.ndarray = np.where(np.isin(y, labels), loss, loss + WRONG_LOSS)
    return out


def _e_step(
    X: sp.csr_matrix,
    Xg: sp.csr_matrix,
    y: np.ndarray,
    model: MixLinearModel,
    alive: np.ndarray,
) -> np.ndarray:
    """Each row's most responsible expert among ``alive`` (indices into the model's experts)."""
    out = np.empty(X.shape[0], dtype=np.intp)
    centers = model.centers[alive]
    sub = MixLinearModel(centers, model.log_share[alive], model.scale, [], None)
    for s in range(0, X.shape[0], km.BLOCK_ROWS):
        e = min(s + km.BLOCK_ROWS, X.shape[0])
        score = _gate_scores(Xg[s:e], sub)
        for j, k in enumerate(alive):
            score[:, j] -= _losses(model.experts[k], X[s:e], y[s:e])
        out[s:e] = alive[np.argmax(score, axis=1)]
    return out


def _fit_fixed(
    X: sp.csr_matrix,
    y: np.ndarray,
    C: float,
    class_weight: engines.ClassWeight | None,
) -> ml.ClusterModel:
    """An expert at a given C (plain LIBLINEAR: deterministic, no folds)."""
    classes = np.unique(y)
    if classes.size == 1:
        return ml.ClusterModel(rows=int(y.size), constant=float(classes[0]))
    model, _ = linear_c.fit_linear(X, y, seed=0, C=C, class_weight=class_weight)
    return ml.ClusterModel.trained(model, int(y.size), tuned=True)


def _calibrate(
    expert: ml.ClusterModel,
    X: sp.csr_matrix,
    y: np.ndarray,
    seed: int,
    class_weight: engines.ClassWeight | None,
    positive: float,
) -> None:
    """Platt's sigmoid on the expert's cross-validated decision values, as MultiLinear's."""
    if expert.constant is not None or expert.C is None:
        expert.platt = platt_fit(np.zeros(y.size), y == positive)
        return
    dec = ml._cv_decision_values(X, y, seed, expert.C, class_weight)
    expert.platt = platt_fit(dec, y == positive)
    if expert.platt[0] >= 0:
        expert.platt = platt_fit(np.zeros(y.size), y == positive)


def _shares(assign: np.ndarray, k: int) -> np.ndarray:
    return np.bincount(assign, minlength=k).astype(np.float64) / max(assign.size, 1)


@dataclass
class Trace:
    """What the rounds did: rows that changed expert in each, and the experts left."""

    changed: list[int] = field(default_factory=list)
    experts: list[int] = field(default_factory=list)
    pruned: int = 0


def fit(
    T: Dataset, options: MixLinearOptions, on_round: Callable[[int], None] | None = None
) -> tuple[MixLinearModel, np.ndarray, Trace]:
    """Hard EM from MultiLinear's partition: the model, each row's final expert, and a trace."""
    k0 = options.n_experts or km.n_clusters(T.rows)
    k0 = max(1, min(k0, T.rows))
    columns, Xg = _gate_view(T.X)
    centers, members, assign = _first_partition(Xg, k0, options.seed, T.rows)
    k = len(members)
    base.stop_if_past(options.deadline, "mixlinear's first experts")
    experts = _first_experts(T, members, options)
    Cs = [e.C if e.C is not None else options.fallback_C for e in experts]
    model = MixLinearModel(centers, np.log(_shares(assign, k)), 1.0, experts, columns)
    model.scale = _scale(Xg, model.centers, assign)
    trace = Trace(experts=[k])
    assign = _em_rounds(T, Xg, model, assign, Cs, prune_share(T.rows, k0), options, trace, on_round)
    if trace.changed:
        assign = _route_by_gate(T, Xg, model, assign, Cs, options.class_weight)
    final, remap, alive = _kept(model, assign)
    if options.calibrate:
        _calibrate_all(T, final, alive, assign, options)
    return final, remap[assign], trace


def _gate_view(X: sp.csr_matrix) -> tuple[np.ndarray | None, sp.csr_matrix]:
    """The gate's columns and X over them: on wide data, only the columns that hold values."""
    columns = None
    Xg = X
    if X.shape[1] >= linear_c.COMPACT_MIN_WIDTH:
        used = np.unique(X.indices)
        if used.size < X.shape[1] // 2:
            columns, Xg = used, X[:, used]
    return columns, Xg


def _first_partition(
    Xg: sp.csr_matrix, k0: int, seed: int, rows: int
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """MultiLinear's k-means partition, empty clusters left out: centers, members, each row's."""
    result = km.kmeans(Xg, k0, seed=seed)
    groups = list(ml._groups(result.labels, k0))
    kept = [c for c, _ in groups]
    centers = result.centers if len(kept) == k0 else result.centers[kept]
    assign = np.empty(rows, dtype=np.intp)
    for j, (_, idx) in enumerate(groups):
        assign[idx] = j
    return centers, [idx for _, idx in groups], assign


def _first_experts(
    T: Dataset, members: list[np.ndarray], options: MixLinearOptions
) -> list[ml.ClusterModel]:
    """The first M-step, MultiLinear's: a C search per expert (the baseline's C for small ones)."""
    # Calibrated, if at all, once the EM is done (_calibrate_all).
    return ml._fit_all(T, members, dataclasses.replace(options, calibrate=False), None)


def _em_rounds(
    T: Dataset,
    Xg: sp.csr_matrix,
    model: MixLinearModel,
    assign: np.ndarray,
    Cs: list[float],
    threshold: float,
    options: MixLinearOptions,
    trace: Trace,
    on_round: Callable[[int], None] | None,
) -> np.ndarray:
    """The EM rounds, until a fixed point or the last: each row's expert after them."""
    alive = np.arange(len(model.experts))
    rounds = options.rounds if options.rounds is not None else n_rounds(_nnz(T.X))
    for r in range(rounds):
        base.stop_if_past(options.deadline, "mixlinear's EM rounds")
        new = _e_step_pruned(T, Xg, model, alive, threshold, trace)
        alive = np.unique(new)  # an expert left without rows goes too
        changed = int(np.count_nonzero(new != assign))
        trace.changed.append(changed)
        trace.experts.append(int(alive.size))
        if on_round is not None:
            on_round(r + 1)
        if changed == 0:
            break
        moved = np.unique(np.concatenate([assign[new != assign], new[new != assign]]))
        assign = new
        _m_step(T, Xg, model, assign, moved, alive, Cs, options)
    return assign


def _e_step_pruned(
    T: Dataset,
    Xg: sp.csr_matrix,
    model: MixLinearModel,
    alive: np.ndarray,
    threshold: float,
    trace: Trace,
) -> np.ndarray:
    """An E-step that prunes the experts below ``threshold`` and assigns their rows again."""
    new = _e_step(T.X, Xg, T.y, model, alive)
    share = _shares(new, len(model.experts))
    small = alive[share[alive] < threshold]
    if small.size:
        keep = alive[share[alive] >= threshold]
        if keep.size == 0:
            keep = alive[[int(np.argmax(share[alive]))]]
        trace.pruned += alive.size - keep.size
        new = _e_step(T.X, Xg, T.y, model, keep)
    return new


def _m_step(
    T: Dataset,
    Xg: sp.csr_matrix,
    model: MixLinearModel,
    assign: np.ndarray,
    moved: np.ndarray,
    alive: np.ndarray,
    Cs: list[float],
    options: MixLinearOptions,
) -> None:
    """M-step: experts whose rows changed, at their fixed C; the gate from the assignments."""
    for c in moved:
        if c not in alive:
            continue
        base.stop_if_past(options.deadline, "mixlinear's EM rounds")
        rows = np.flatnonzero(assign == c)
        model.experts[c] = _fit_fixed(T.X[rows], T.y[rows], Cs[c], options.class_weight)
    model.centers = km._means(Xg, assign, len(model.experts), model.centers)
    share = _shares(assign, len(model.experts))
    with np.errstate(divide="ignore"):
        model.log_share = np.log(share)
    model.scale = _scale(Xg, model.centers, assign)


def _route_by_gate(
    T: Dataset,
    Xg: sp.csr_matrix,
    model: MixLinearModel,
    assign: np.ndarray,
    Cs: list[float],
    class_weight: engines.ClassWeight | None,
) -> np.ndarray:
    """A last M-step on the gate's own routing, which prediction follows: each row's expert."""
    # Prediction routes by the gate alone, so experts retrain on the rows the gate sends them
    # (without this, blobs3_d8_n9000 scored -11.7 points against linear; with it -2.3).
    alive = np.unique(assign)
    sub = MixLinearModel(model.centers[alive], model.log_share[alive], model.scale, [], None)
    routed: np.ndarray = alive[sub.gate(Xg)]
    for c in np.unique(np.concatenate([assign[routed != assign], routed[routed != assign]])):
        rows = np.flatnonzero(routed == c)
        if rows.size:
            model.experts[c] = _fit_fixed(T.X[rows], T.y[rows], Cs[c], class_weight)
    return routed


def _kept(
    model: MixLinearModel, assign: np.ndarray
) -> tuple[MixLinearModel, np.ndarray, np.ndarray]:
    """The experts that kept rows, renumbered: their model, the new numbers, the old ones."""
    alive = np.unique(assign)
    remap = np.full(len(model.experts), -1, dtype=np.intp)
    remap[alive] = np.arange(alive.size)
    # The gate that routed the rows (an expert left without rows routed none of them).
    final = MixLinearModel(
        np.ascontiguousarray(model.centers[alive]),
        model.log_share[alive],
        model.scale,
        [model.experts[c] for c in alive],
        model.columns,
    )
    return final, remap, alive


def _calibrate_all(
    T: Dataset,
    final: MixLinearModel,
    alive: np.ndarray,
    assign: np.ndarray,
    options: MixLinearOptions,
) -> None:
    """Platt's sigmoid for every kept expert, on the rows the gate routes to it."""
    positive = float(np.max(T.y))
    for j, c in enumerate(alive):
        rows = np.flatnonzero(assign == c)
        seed = options.seed + j
        _calibrate(final.experts[j], T.X[rows], T.y[rows], seed, options.class_weight, positive)


def _nnz(X: sp.csr_matrix | np.ndarray) -> int:
    if isinstance(X, np.ndarray):
        return int(np.count_nonzero(X))
    return int(X.nnz)


def _scale(Xg: sp.csr_matrix, centers: np.ndarray, assign: np.ndarray) -> float:
    """2 s^2 of the isotropic Gaussian's ML fit: twice the mean squared distance of rows to their
    center over the gate's width (1 where 0). Without dividing by the width, labels outweighed the
    gate on 10-feature sets (spheres_d10: -5.2 points vs +14.0)."""
    total = 0.0
    for s in range(0, Xg.shape[0], km.BLOCK_ROWS):
        e = min(s + km.BLOCK_ROWS, Xg.shape[0])
        d = km.sq_distances(Xg[s:e], centers)
        total += float(d[np.arange(e - s), assign[s:e]].sum())
    mean = total / max(Xg.shape[0], 1)
    mean *= 2.0 / max(Xg.shape[1], 1)
    return mean if mean > 0 else 1.0


def run(
    T: Dataset,
    V: Dataset,
    options: MixLinearOptions,
    on_round: Callable[[int], None] | None = None,
) -> CheckerResult:
    """Fit the mixture on T and score the gated experts' predictions on V."""
    t0 = time.perf_counter()
    model, _, trace = fit(T, options, on_round)
    return CheckerResult.of_pieces(
        NAME,
        model,
        V,
        t0,
        info={
            "experts": len(model.experts),
            "initial_experts": trace.experts[0],
            "rounds": len(trace.changed),
            "changed": trace.changed,
            "pruned": trace.pruned,
        },
        model=model,
    )


#: What its progress counts.
ROUNDS = "EM rounds"


def check(T: Dataset, V: Dataset, ctx: Context, sized: Sized) -> CheckerResult:
    """The checker as the pipeline runs it: MultiLinear's K and fallback C, then EM rounds."""
    rounds = n_rounds(_nnz(T.X))
    stage = "mixture-of-linear-SVMs checker"
    ctx.progress(Event(stage, 0, rounds, ROUNDS))
    options = MixLinearOptions.of(ctx)
    return run(T, V, options, lambda r: ctx.progress(Event(stage, r, rounds, ROUNDS)))


def size(counts: Counts, allowed: Allowance) -> Sized:
    """All of T; memory: MultiLinear's plus the gate's T copy and rows x K blocks; counted:
    MultiLinear's plus a fixed-C training a round. Opt-in, planned last: charged nothing."""
    multilinear = ml.size(counts, allowed)
    k = km.n_clusters(counts.rows)
    extra = counts.data_bytes + 3 * 8 * k * min(counts.rows, km.BLOCK_ROWS)
    linear = budget.linear_seconds(counts.nnz, counts.n_classes)
    estimated = linear * (1.0 + TRAIN_SHARE * n_rounds(counts.nnz))
    return Sized(
        multilinear.rows,
        bytes=(multilinear.bytes or 0) + extra,
        counted_seconds=0.0,
        estimated_seconds=estimated,
    )
