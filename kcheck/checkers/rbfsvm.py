"""rbfsvm: the RBF SVM itself, trained on T and scored on V, where exact mode costs too much.

Exact mode cross-validates on all rows, repeatedly, on precomputed kernels: past a few thousand
rows that is minutes. The proxies do not see every boundary an RBF SVM learns: on 12,000 rows
of five features with a linear trend plus waves, degree-2 and MultiLinear found +0.2 and +1.7
points where the RBF SVM gains +8.2. With few features, though, one LIBSVM training on T takes
about a second. So, where its counted cost fits the budget:

Only on small data (T within the floor's bounds, kcheck.budget.floor_applies), so the time
ratios on large data stay as they were:

1. (C, gamma) by exact mode's grid search (:func:`kcheck.checkers.exact.search_grid`) on a
   stratified sample of T of 600 to 2,000 rows, the most the budget affords;
2. one RBF SVM with those parameters, trained on all of T (LIBSVM's own kernel, so no
   rows x rows matrix);
3. scored on V, like every checker: its gap joins the rule.

Unlike exact mode it does not decide alone: one split's V is noisier than repeated CV on all
rows, and the parameters come from a sample. It runs only where exact mode is ``auto`` and did
not run (``--exact never`` trains no RBF SVM). Whether it runs, and on how many tuning rows, is
decided from counted work (kcheck.budget), never from a clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from kcheck import budget, engines
from kcheck.checkers import exact
from kcheck.checkers.base import CheckerResult, Context, Dataset, score
from kcheck.errors import TimeLimitReached
from kcheck.split import stratified_subsample

NAME = "rbfsvm"
#: Its relative budget, as exact mode's: this many times the linear baseline's counted cost.
LINEAR_FACTOR = exact.LINEAR_FACTOR
#: Bytes of LIBSVM's copy of one stored value of T (an index and a double, 16) and of each
#: row's terminating node.
NODE_BYTES = 16


@dataclass(frozen=True)
class Plan:
    """Whether it runs: the tuning rows (None: it does not), the counted estimate and budget."""

    tune_rows: int | None
    estimated_seconds: float
    budget_seconds: float
    reason: str | None = None


def estimated_seconds(T: Dataset, V: Dataset, n_classes: int, tune_rows: int) -> float:
    """Counted seconds of :func:`run` with ``tune_rows`` tuning rows (kcheck.budget)."""
    options = exact.ExactOptions()
    tune = min(tune_rows, T.rows)
    tune_nnz = int(T.X.nnz) * tune / max(T.rows, 1)
    return (
        budget.DISTANCE_SECONDS_PER_WORK * tune * max(tune_nnz, tune)
        + budget.rbf_tuning_seconds(
            tune_rows=tune,
            n_classes=n_classes,
            grid_points=options.grid_points(),
            gammas=len(options.resolved_gamma_factor()),
            folds=options.folds,
        )
        + budget.rbf_fit_seconds(
            rows=T.rows, nnz=int(T.X.nnz), predict_rows=V.rows, n_classes=n_classes
        )
    )


def memory_bytes(T: Dataset, tune_rows: int) -> int:
    """The tuning's kernel matrices and LIBSVM's node copy of T."""
    return exact.matrix_bytes(min(tune_rows, T.rows)) + NODE_BYTES * (int(T.X.nnz) + T.rows)


def plan(T: Dataset, V: Dataset, n_classes: int, budget_seconds: float) -> Plan:
    """The most tuning rows of exact mode's ladder (all of T where fewer) that fit the budget."""
    chosen = None
    estimate = estimated_seconds(T, V, n_classes, exact.TUNE_ROWS)
    for t in exact.TUNE_LADDER:
        e = estimated_seconds(T, V, n_classes, t)
        if e > budget_seconds:
            break
        chosen, estimate = min(t, T.rows), e
        if t >= T.rows:
            break
    reason = None
    if chosen is None and budget_seconds <= 0:
        reason = (
            f"the training split is above small data's bounds ({budget.FLOOR_MAX_ROWS:,} rows, "
            f"{budget.FLOOR_MAX_NNZ:,} stored values); the proxies stand in for it"
        )
    elif chosen is None:
        reason = (
            f"its counted cost ({estimate:.1f} s) is over the budget ({budget_seconds:.1f} s); "
            "the proxies stand in for it"
        )
    return Plan(chosen, round(estimate, 3), round(budget_seconds, 3), reason)


def budget_seconds(T: Dataset, V: Dataset, n_classes: int, floor_seconds: float) -> float:
    """What is left of the floor, or 3x the linear baseline's counted cost where more, on
    small T only (:func:`kcheck.budget.floor_applies`); 0 above. Large data keeps the time
    ratios it had: on letter (11,250 rows of T, 26 classes) the relative budget alone would
    have let one training take 25 s, three times the rest of the check."""
    if not budget.floor_applies(rows=T.rows, nnz=int(T.X.nnz)):
        return 0.0
    relative = LINEAR_FACTOR * budget.linear_seconds(T.X.nnz + V.X.nnz, n_classes)
    return max(floor_seconds, relative)


def check(T: Dataset, V: Dataset, ctx: Context) -> CheckerResult:
    """The checker's entry: plan from counts, then :func:`run`."""
    t0 = time.perf_counter()
    n_classes = int(np.unique(T.y).size)
    allowed = budget_seconds(T, V, n_classes, ctx.floor_seconds)
    left = ctx.seconds_left()
    if left is not None and left < allowed:
        # The one clock allowed to change what is computed: the user's --time-limit.
        allowed = max(left, 0.0)
    p = plan(T, V, n_classes, allowed)
    info: dict[str, object] = {
        "estimated_seconds": p.estimated_seconds,
        "budget_seconds": p.budget_seconds,
    }
    if p.tune_rows is None:
        res = CheckerResult.skipped(NAME, p.reason or "over budget", time.perf_counter() - t0)
        res.info.update(info, limited_by="cost")
        return res
    need = memory_bytes(T, p.tune_rows)
    if need > ctx.memory_limit:
        res = CheckerResult.skipped(
            NAME,
            f"its kernel matrices and LIBSVM's copy of T need {budget.size_text(need)}, over "
            f"the memory limit of {budget.size_text(ctx.memory_limit)}",
            time.perf_counter() - t0,
        )
        res.info.update(info, limited_by="memory")
        return res
    options = exact.ExactOptions(seed=ctx.seed, scoring=ctx.scoring, deadline=ctx.deadline)
    result = run(T, V, options, p.tune_rows, ctx)
    result.info.update(info)
    result.counted_seconds = p.estimated_seconds
    return result


def run(
    T: Dataset, V: Dataset, options: exact.ExactOptions, tune_rows: int, ctx: Context
) -> CheckerResult:
    """Tune (C, gamma) on a sample of T, train the RBF SVM on all of T, score it on V."""
    t0 = time.perf_counter()
    stage = "RBF SVM on the training split"
    total = options.grid_points() + 1
    ctx.progress(stage, 0, total)

    def check_time() -> None:
        if options.deadline is not None and time.perf_counter() >= options.deadline:
            raise TimeLimitReached("RBF SVM")

    Xb = engines.as_binding_csr(T.X)
    yb = np.asarray(T.y, dtype=np.float64)
    if T.rows < 2 * options.folds:
        return CheckerResult.skipped(
            NAME, f"{T.rows} rows are too few for {options.folds}-fold cross-validation"
        )
    if T.rows > tune_rows:
        sample = np.sort(stratified_subsample(yb, tune_rows, seed=options.seed))
        Xs, ys = Xb[sample], yb[sample]
    else:
        Xs, ys = Xb, yb
    D = engines.squared_distances(Xs)
    median = exact.median_sq_distance(D)
    search = exact.search_grid(
        D, ys, median, options, lambda done: ctx.progress(stage, done, total), check_time
    )
    del D
    C, gamma = float(2.0**search.log2_C), float(2.0**search.log2_gamma)
    problem = engines.SvmProblem.from_data(Xb, yb, options.scoring.class_weight)
    model = engines.train_rbf(problem, C, gamma)
    ctx.progress(stage, total, total)
    check_time()
    s = score(model, V)
    best = (search.log2_C, search.log2_gamma)
    return CheckerResult(
        name=NAME,
        status="ok",
        val_accuracy=s.accuracy,
        correct=s.correct,
        predicted=s.predicted,
        scores=s.scores,
        seconds=time.perf_counter() - t0,
        info={
            "C": C,
            "gamma": gamma,
            "log2_C": search.log2_C,
            "log2_gamma": round(search.log2_gamma, 6),
            "tune_rows": int(ys.size),
            "rows": T.rows,
            "support_vectors": model.n_sv,
        },
        predict=model.predict,
        cv_accuracy=search.right[best] / int(ys.size),
        model=model,
    )
