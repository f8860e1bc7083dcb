"""rbfsvm: the RBF SVM itself, trained on T and scored on V, where exact mode costs too much.

The proxies miss boundaries an RBF SVM learns (12,000 rows of trend plus waves: degree-2 +0.2,
MultiLinear +1.7, RBF +8.2), and with few features one LIBSVM training on T takes about a second.
So, where its count fits the budget the methods before it left
(kcheck.costs.budget.methods_seconds):

1. exact mode's grid search (:func:`kcheck.tuning.rbf_sample.search_grid`) on a stratified
   sample of 600 to 2,000 rows of T: each gamma's best C;
2. gamma chosen on T: each candidate trained on a stratified two thirds of T and scored on
   the rest (the sample's scores are flat, and its choice cost a sinusoid +5.6 points);
3. the grid's next larger C at that gamma, kept if it scores better on that third (more rows
   overfit less: the larger C won 15 of 25 times and raised V's gap by 1-1.4 points);
4. one RBF SVM with that (C, gamma) on all of T (LIBSVM's own kernel, no rows x rows matrix),
   scored on V like every checker. V is used for nothing else.

It does not decide alone as exact mode does (one split's V is noisier, and the parameters come from
a sample). It runs only where exact mode is ``auto`` and did not run; whether, and on how many
tuning rows, is decided from counted work, never a clock."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck.bindings import engines
from kcheck.checkers.base import (
    Allowance,
    CheckerResult,
    Context,
    Counts,
    Dataset,
    SearchThenStage,
    Sized,
    sample_reference,
    score,
    sizing_of,
    stratified_sample,
)
from kcheck.costs import budget, solvers
from kcheck.split import stratified_split
from kcheck.tuning import rbf_sample
from kcheck.tuning.rbf_grid import best_point
from kcheck.tuning.rbf_sample import Search, Tuning

NAME = "rbfsvm"
#: Its progress: the search on a sample, then the trainings on T.
STAGE = "RBF SVM on the training split"
TRAINING_STAGE = "RBF SVM: training on T"


def training_stage(rows: int, of: int | None) -> str:
    """The trainings' stage: on T, or on a stratified ``rows`` of T's ``of`` rows."""
    if of is None or rows >= of:
        return TRAINING_STAGE
    return f"RBF SVM: training on a sample of {rows:,} of T's {of:,} rows"


#: Fewest rows of T it trains on (degree-2's least): below, one split's V says too little.
MIN_SAMPLE_ROWS = 1_000
#: The share of T held out to choose gamma (the rest trains each candidate).
SELECT_FRACTION = 1.0 / 3.0
#: How far past the plan's count for one training a candidate's prediction may go before it is
#: passed over: the 2x band (kcheck.plan.OFF_HIGH) on a count up to 2x low.
PASS_OVER_FACTOR = 4.0
#: Bytes of LIBSVM's copy of one stored value of T (index and double) and of each row's terminator.
NODE_BYTES = engines.SVM_NODE_BYTES


@dataclass(frozen=True)
class RbfSvmSizing:
    """What it runs, as the plan decided: tuning rows (None: not run), estimate and budget."""

    tune_rows: int | None
    estimated_seconds: float
    budget_seconds: float
    reason: str | None = None
    #: Rows of T: None, all; fewer, a stratified sample, compared with linear on the same sample.
    rows: int | None = None


def estimated_seconds(T: Dataset, V: Dataset, n_classes: int, tune_rows: int) -> float:
    """Counted seconds of :func:`run` with ``tune_rows`` tuning rows (kcheck.costs.budget)."""
    return counted_seconds(_counts(T, V, n_classes), tune_rows)


def counted_seconds(c: Counts, tune_rows: int) -> float:
    """:func:`estimated_seconds` from counts."""
    return _search_seconds(c, tune_rows) + _fit_seconds(c)


def _counts(T: Dataset, V: Dataset, n_classes: int) -> Counts:
    return Counts(T.rows, V.rows, int(T.X.nnz), int(V.X.nnz), n_classes, int(T.X.shape[1]))


def _search_seconds(c: Counts, tune_rows: int) -> float:
    """Counted seconds of the grid search on the sample: distances, kernels and CVs."""
    options = Tuning()
    tune = min(tune_rows, c.rows)
    tune_nnz = c.nnz * tune / max(c.rows, 1)
    return budget.DISTANCE_SECONDS_PER_WORK * tune * max(
        tune_nnz, tune
    ) + budget.rbf_tuning_seconds(
        tune_rows=tune,
        n_classes=c.n_classes,
        grid_points=options.grid_points(),
        gammas=len(options.resolved_gamma_factor()),
        folds=options.folds,
    )


def _fit_seconds(c: Counts) -> float:
    held_out = int(round(c.rows * SELECT_FRACTION))
    selections = len(Tuning().resolved_gamma_factor()) + 1
    return selections * budget.rbf_fit_seconds(
        rows=c.rows - held_out,
        nnz=int(c.nnz * (1.0 - held_out / max(c.rows, 1))),
        predict_rows=held_out,
        n_classes=c.n_classes,
        features=c.features,
    ) + budget.rbf_fit_seconds(
        rows=c.rows,
        nnz=c.nnz,
        predict_rows=c.val_rows,
        n_classes=c.n_classes,
        features=c.features,
    )


def cache_mb(memory_limit: int, nnz: int, rows: int) -> float:
    """LIBSVM's kernel cache (MB) for the trainings on T within ``memory_limit`` beside LIBSVM's
    copy of T (engines.cache_mb_within); its 200 MB default is outside the plan's count."""
    return engines.cache_mb_within(memory_limit - engines.svm_copy_bytes(nnz, rows))


def memory_bytes(c: Counts, tune_rows: int) -> int:
    """The tuning's kernel matrices and LIBSVM's node copy of T."""
    return rbf_sample.matrix_bytes(min(tune_rows, c.rows)) + NODE_BYTES * (c.nnz + c.rows)


def plan_counts(c: Counts, budget_seconds: float) -> RbfSvmSizing:
    """The most ladder tuning rows that fit the budget with the RBF SVM on all of T; else the most
    sampled rows (from MIN_SAMPLE_ROWS) whose run and linear reference fit."""
    chosen, estimate = _ladder(c, budget_seconds)
    if chosen is None and c.rows > MIN_SAMPLE_ROWS:
        rows = _sample_rows(c, budget_seconds)
        if rows is not None:
            sc = sampled(c, rows)
            ref = budget.linear_seconds(sc.nnz, sc.n_classes)
            tune, spent = _ladder(sc, budget_seconds - ref)
            if tune is not None:
                return RbfSvmSizing(
                    tune, round(spent + ref, 3), round(budget_seconds, 3), None, rows
                )
    reason = None
    if chosen is None:
        reason = (
            f"its counted cost ({estimate:.1f} s) is over the budget ({budget_seconds:.1f} s); "
            "the proxies stand in for it"
        )
    return RbfSvmSizing(chosen, round(estimate, 3), round(budget_seconds, 3), reason)


def _ladder(c: Counts, budget_seconds: float) -> tuple[int | None, float]:
    """The most tuning rows whose counted run on ``c`` fits, and its estimate (else the first's)."""
    chosen = None
    estimate = counted_seconds(c, rbf_sample.TUNE_ROWS)
    for t in rbf_sample.TUNE_LADDER:
        e = counted_seconds(c, t)
        if e > budget_seconds:
            break
        chosen, estimate = min(t, c.rows), e
        if t >= c.rows:
            break
    return chosen, estimate


def sampled(c: Counts, rows: int) -> Counts:
    """The counts of a stratified sample of ``rows`` rows of T (V unchanged)."""
    share = rows / max(c.rows, 1)
    return dataclasses.replace(
        c,
        rows=rows,
        nnz=int(round(c.nnz * share)),
        expanded_nnz=int(round(c.expanded_nnz * share)),
        data_bytes=int(round(c.data_bytes * share)),
    )


def _sample_rows(c: Counts, budget_seconds: float) -> int | None:
    """The most rows of T from MIN_SAMPLE_ROWS whose sampled run and its linear reference fit
    ``budget_seconds``, by bisection (cost grows with rows); None where the least does not."""

    def cost(rows: int) -> float:
        sc = sampled(c, rows)
        return counted_seconds(sc, rbf_sample.TUNE_ROWS) + budget.linear_seconds(
            sc.nnz, sc.n_classes
        )

    lo, hi = MIN_SAMPLE_ROWS, c.rows - 1
    if cost(lo) > budget_seconds:
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cost(mid) <= budget_seconds:
            lo = mid
        else:
            hi = mid - 1
    return lo


def size(counts: Counts, allowed: Allowance) -> Sized:
    """What :func:`check` will do within the plan's budget (or the time left, where less) and
    memory: all of T, a stratified sample, or nothing, with the reason."""
    budget_seconds, _ = allowed.bound()
    return _sized(counts, budget_seconds, allowed.memory_limit)


def _sized(c: Counts, budget_seconds: float, memory_limit: int) -> Sized:
    p = plan_counts(c, budget_seconds)
    if p.tune_rows is None:
        reason = p.reason or "over budget"
        return Sized(0, reason, "cost", 0, estimated_seconds=p.estimated_seconds, sizing=p)
    rows = c.rows if p.rows is None else p.rows
    need = memory_bytes(sampled(c, rows), p.tune_rows)
    if need > memory_limit:
        reason = (
            f"its kernel matrices and LIBSVM's copy of T need {budget.size_text(need)}, over "
            f"the memory limit of {budget.size_text(memory_limit)}"
        )
        return Sized(0, reason, "memory", 0, estimated_seconds=p.estimated_seconds, sizing=p)
    cut = "cost" if rows < c.rows else None
    return Sized(rows, None, cut, need, p.estimated_seconds, p.estimated_seconds, sizing=p)


def check(T: Dataset, V: Dataset, ctx: Context, sized: Sized) -> CheckerResult:
    """The checker's entry: on what the plan sized (:func:`size`), then :func:`run`."""
    t0 = time.perf_counter()
    p = sizing_of(sized, RbfSvmSizing)
    info: dict[str, object] = {
        "estimated_seconds": p.estimated_seconds,
        "budget_seconds": p.budget_seconds,
    }
    if p.tune_rows is None or sized.rows == 0:
        res = CheckerResult.skipped(NAME, sized.reason or "", time.perf_counter() - t0)
        res.info.update(info, limited_by=sized.limited_by)
        return res
    options = Tuning(seed=ctx.seed, scoring=ctx.scoring, deadline=ctx.deadline, jobs=ctx.jobs)
    if sized.rows < T.rows:
        result = _on_sample(T, V, options, p.tune_rows, sized.rows, ctx)
    else:
        result = run(T, V, options, p.tune_rows, ctx)
    result.info.update(info)
    result.counted_seconds = p.estimated_seconds
    return result


def _on_sample(
    T: Dataset, V: Dataset, options: Tuning, tune_rows: int, rows: int, ctx: Context
) -> CheckerResult:
    """:func:`run` on a stratified sample of ``rows`` rows of T, against a linear model tuned and
    trained on the same sample (against one on all of T it would measure the missing rows)."""
    S = stratified_sample(T, rows, seed=options.seed)
    sc = _counts(S, V, int(np.unique(S.y).size))
    # The linear reference trains after the trainings, within their stage.
    then = solvers.linear_reference_seconds(sc.nnz, sc.features, sc.rows, sc.n_classes)
    result = run(S, V, options, tune_rows, ctx, sampled_from=T.rows, then_seconds=then)
    if result.status == "skipped":
        return result
    result.status = "subsampled"
    result.reason = f"{S.rows:,} of {T.rows:,} rows fit the cost budget"
    result.info.update(fraction=S.rows / T.rows, limited_by="cost")
    reference = sample_reference(S, V, seed=options.seed, class_weight=options.scoring.class_weight)
    return reference.fill(result)


def run(
    T: Dataset,
    V: Dataset,
    options: Tuning,
    tune_rows: int,
    ctx: Context,
    *,
    sampled_from: int | None = None,
    then_seconds: float = 0.0,
) -> CheckerResult:
    """Tune (C, gamma) on a sample of T, train the RBF SVM on all of T, score it on V.
    ``sampled_from``: T's original row count (for the stage); ``then_seconds``: predicted seconds of
    what the caller runs after it in the trainings' stage."""
    t0 = time.perf_counter()
    steps = _search_stage(T, V, options, tune_rows, ctx)
    Xb = engines.as_binding_csr(T.X)
    yb = np.asarray(T.y, dtype=np.float64)
    if T.rows < 2 * options.folds:
        return CheckerResult.skipped(
            NAME, f"{T.rows} rows are too few for {options.folds}-fold cross-validation"
        )
    search, tune_rows = _search_sample(Xb, yb, tune_rows, options, steps)
    cache = cache_mb(ctx.memory_limit, int(Xb.nnz), T.rows)
    held = _Held(Xb, yb, options, steps, cache)
    counts = _counts(T, V, int(np.unique(T.y).size))
    held.predict_from(search, tune_rows, counts)
    candidates = _best_C_per_gamma(search)
    announced = then_seconds + _announced_seconds(
        search, tune_rows, options, counts, held, candidates
    )
    steps.then(training_stage(T.rows, sampled_from), options.grid_points(), announced, "trainings")
    best = held.choose(candidates)
    model = _train_final(Xb, yb, best, options, cache)
    steps.tick(steps.total)
    steps.check_time()
    s = score(model, V)
    return CheckerResult.scored(
        NAME,
        s,
        t0,
        model.predict,
        info=_info(T, search, held, model, best, tune_rows, counts, options, then_seconds),
        cv_accuracy=_cv_accuracy(search, best, tune_rows),
        model=model,
    )


def _search_stage(
    T: Dataset, V: Dataset, options: Tuning, tune_rows: int, ctx: Context
) -> SearchThenStage:
    """The checker's progress, started with the search's own prediction."""
    steps = _steps(ctx, options)
    # The search is a stage of its own, with its own count (folds side by side at two jobs or more).
    searched = _search_seconds(_counts(T, V, int(np.unique(T.y).size)), tune_rows)
    steps.predicted = round(searched * rbf_sample.search_share(min(tune_rows, T.rows), options), 3)
    steps.tick(0)
    return steps


def _announced_seconds(
    search: Search,
    tune_rows: int,
    options: Tuning,
    counts: Counts,
    held: _Held,
    candidates: list[tuple[float, float]],
) -> float:
    """The trainings' prediction, announced and checked: candidates that will train and the final
    training at the sample's best (the larger C's is left out)."""
    sample_best = (search.log2_C, search.log2_gamma)
    trained = held.will_train(candidates)
    return _trainings_predicted(
        search, tune_rows, options.folds, counts, trained, held, sample_best
    )


def _train_final(
    X: sp.csr_matrix, y: np.ndarray, best: tuple[float, float], options: Tuning, cache: float
) -> engines.RbfModel:
    """The RBF SVM at the chosen (log2 C, log2 gamma), trained on all of T."""
    C, gamma = float(2.0 ** best[0]), float(2.0 ** best[1])
    problem = engines.SvmProblem.from_data(X, y, options.scoring.class_weight, cache)
    return engines.train_rbf(problem, C, gamma)


def _info(
    T: Dataset,
    search: Search,
    held: _Held,
    model: engines.RbfModel,
    best: tuple[float, float],
    tune_rows: int,
    counts: Counts,
    options: Tuning,
    then_seconds: float,
) -> dict[str, Any]:
    """What the result says of the tuning and the model, for the verdict JSON."""
    return {
        "C": float(2.0 ** best[0]),
        "gamma": float(2.0 ** best[1]),
        "log2_C": best[0],
        "log2_gamma": round(best[1], 6),
        "tune_rows": tune_rows,
        "select_rows": held.rows,
        "passed_over": held.passed_over,
        "grid_passed_over": list(search.passed_over),
        "rows": T.rows,
        "support_vectors": model.n_sv,
        # The stage's prediction once the search has run (kcheck.plan.done_share): the search as
        # run, trainings predicted from its support vectors and iterations, and the caller's rest.
        "revised_seconds": round(
            then_seconds
            + _search_seconds(counts, tune_rows)
            + rbf_sample.beyond_count(search, tune_rows, counts.n_classes, options)
            + _trainings_predicted(
                search, tune_rows, options.folds, counts, list(held.scores), held, best
            ),
            3,
        ),
    }


def _cv_accuracy(search: Search, point: tuple[float, float], tune_rows: int) -> float | None:
    """The search's CV accuracy at ``point`` on its ``tune_rows`` rows; None where unscored (a
    passed-over point the larger-C step picked has no CV of its own)."""
    right = search.right.get(point)
    return None if right is None else right / tune_rows


def _steps(ctx: Context, options: Tuning) -> SearchThenStage:
    """Progress over the grid's points, then the trainings as a stage predicted from the search."""
    grid = options.grid_points()
    total = grid + len(options.resolved_gamma_factor()) + 2
    return SearchThenStage(ctx.progress, options.deadline, "RBF SVM", STAGE, total, grid)


def _search_sample(
    X: sp.csr_matrix, y: np.ndarray, tune_rows: int, options: Tuning, steps: SearchThenStage
) -> tuple[Search, int]:
    """Exact mode's grid search on a stratified sample of ``tune_rows`` rows of T (all where fewer),
    and the rows it ran on; the distances are freed on return."""
    sample = rbf_sample.tuning_sample(y, tune_rows, options.seed)
    if sample is not None:
        X, y = X[sample], y[sample]
    D = engines.squared_distances(X)
    median = rbf_sample.median_sq_distance(D)
    allowance = rbf_sample.search_allowance(y, options)
    search = rbf_sample.search_grid(D, y, median, options, steps.tick, steps.check_time, allowance)
    return search, int(y.size)


class _Held:
    """Candidates trained on a stratified two thirds of T and scored on the rest (gamma needs T's
    rows).

    Each training is predicted from the sample's LIBSVM iterations at its point
    (kcheck.costs.budget.svm_iterations_on): at a large C one can cost ten times the plan's count
    (35 s of a 6 s plan). A candidate, or the larger-C step, predicted over PASS_OVER_FACTOR times
    the plan's count for one training is passed over and named in the JSON; the search's best always
    trains. A count: the same on every machine."""

    def __init__(
        self, X: sp.csr_matrix, y: np.ndarray, options: Tuning, steps: SearchThenStage, cache: float
    ) -> None:
        fit, held = stratified_split(y, seed=options.seed, validation_fraction=SELECT_FRACTION)
        self.problem = engines.SvmProblem.from_data(
            X[fit], y[fit], options.scoring.class_weight, cache
        )
        self.X, self.y = X[held], y[held]
        self.rows = int(held.size)
        self.fit_rows = int(fit.size)
        self.options, self.steps = options, steps
        self.scores: dict[tuple[float, float], float] = {}
        self.passed_over: list[dict[str, float]] = []
        self._sample_scores: dict[tuple[float, float], float] = {}
        self._best: tuple[float, float] | None = None
        self._predicted: dict[tuple[float, float], float] = {}
        self._limit = float("inf")

    def predict_from(self, search: Search, tune_rows: int, c: Counts) -> None:
        """Each point's predicted training on two thirds, and the plan's count per training."""
        fit_rows = self.problem.n_rows
        nominal = budget.rbf_fit_seconds(
            rows=fit_rows,
            nnz=int(c.nnz * fit_rows / max(c.rows, 1)),
            predict_rows=self.rows,
            n_classes=c.n_classes,
            features=c.features,
        )
        # A passed-over point is predicted from its predicted iterations, never taken as free.
        for point, iterations in search.predicted_iterations().items():
            self._predicted[point] = nominal + _iteration_seconds(
                iterations, tune_rows, self.options.folds, fit_rows, c.n_classes
            )
        self._sample_scores = dict(search.scores)
        self._best = (search.log2_C, search.log2_gamma)
        self._limit = PASS_OVER_FACTOR * nominal

    def will_train(self, candidates: list[tuple[float, float]]) -> list[tuple[float, float]]:
        """The candidates that will train (:meth:`choose`): the first, then those that fit."""
        ordered = self._in_order(candidates)
        return [p for i, p in enumerate(ordered) if i == 0 or self._fits(p)]

    def _fits(self, point: tuple[float, float]) -> bool:
        return self._predicted.get(point, 0.0) <= self._limit

    def _in_order(self, candidates: list[tuple[float, float]]) -> list[tuple[float, float]]:
        """The search's best point first, then by sample score (ties to smaller gamma, then C)."""
        return sorted(
            candidates,
            key=lambda k: (k == self._best, self._sample_scores.get(k, 0.0), -k[1], -k[0]),
            reverse=True,
        )

    def choose(self, candidates: list[tuple[float, float]]) -> tuple[float, float]:
        """The best candidate on the held-out third (ties to smaller gamma, then C), then the grid's
        next larger C at its gamma where that scores better."""
        for point in self._in_order(candidates):
            self._score_within(point, first=not self.scores)
        trained = [k for k in candidates if k in self.scores]
        best = max(trained, key=lambda k: (self.scores[k], -k[1], -k[0]))
        larger = _larger_C(best, self.options.resolved_C())
        if larger is not None and self._score_within(larger, first=False):
            if self.scores[larger] > self.scores[best]:
                best = larger
        del self.problem
        return best

    def _score_within(self, point: tuple[float, float], first: bool) -> bool:
        """Train and score ``point`` where its prediction fits (or it is the first)."""
        if not first and not self._fits(point):
            self.passed_over.append(
                {
                    "log2_C": point[0],
                    "log2_gamma": round(point[1], 6),
                    "predicted_seconds": round(self._predicted.get(point, 0.0), 3),
                }
            )
            return False
        self._score(*point)
        return True

    def _score(self, c: float, g: float) -> None:
        """Train at (2^c, 2^g) on two thirds of T and score it on the held-out third."""
        m = engines.train_rbf(self.problem, float(2.0**c), float(2.0**g))
        self.scores[(c, g)], _ = rbf_sample.prediction_score(
            self.y, m.predict(self.X), self.options.scoring
        )
        self.steps.tick(self.options.grid_points() + len(self.scores))
        self.steps.check_time()


def _trainings_predicted(
    search: Search,
    tune_rows: int,
    folds: int,
    c: Counts,
    trained: list[tuple[float, float]],
    held: _Held,
    final: tuple[float, float],
) -> float:
    """Predicted seconds of the trainings at ``trained`` points (two thirds of T) and ``final`` (all
    of T), from the search's support vectors and iterations at each point grown to its rows
    (passed-over points: all rows SVs)."""
    fold_rows = max(tune_rows * (folds - 1) / max(folds, 1), 1.0)
    iterations = search.predicted_iterations()
    values = c.nnz / max(c.rows, 1)

    def one(point: tuple[float, float], rows: int, predict_rows: int) -> float:
        ran = search.support_vectors.get(point)
        share = 1.0 if ran is None else min(ran / (folds * fold_rows), 1.0)
        return solvers.rbf_trained_seconds(
            support_vectors=share * rows,
            rows=rows,
            predict_rows=predict_rows,
            iterations=budget.svm_iterations_on(iterations.get(point, 0.0), tune_rows, folds, rows),
            values_per_row=values,
            width=c.features,
            n_classes=c.n_classes,
        )

    fits = sum(one(point, held.fit_rows, held.rows) for point in trained)
    return fits + one(final, c.rows, c.val_rows)


def _iteration_seconds(
    sample_iterations: float, tune_rows: int, folds: int, rows: int, n_classes: int
) -> float:
    """Counted seconds of LIBSVM's iterations in one training on ``rows`` rows, from the search's
    ``folds``-fold CV on ``tune_rows`` rows at that point."""
    on_rows = budget.svm_iterations_on(sample_iterations, tune_rows, folds, rows)
    return budget.svm_iteration_seconds(on_rows, rows, n_classes)


def _best_C_per_gamma(search: Search) -> list[tuple[float, float]]:
    """For each gamma of the grid, its best point on the sample (the search's own tie rule)."""
    return [
        best_point({p: s for p, s in search.scores.items() if p[1] == g})
        for g in sorted({p[1] for p in search.scores})
    ]


def _larger_C(point: tuple[float, float], grid_C: tuple[float, ...]) -> tuple[float, float] | None:
    """The grid's next larger C at that gamma; None at the top (past it LIBSVM may take minutes)."""
    above = [c for c in grid_C if c > point[0]]
    return (min(above), point[1]) if above else None
