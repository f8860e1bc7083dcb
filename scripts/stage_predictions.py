"""The solver-shaped prediction of each stage of a check, from counts, as kcheck showed it up to
JSON schema 2 (``plan.steps[].predicted_seconds``).

Since schema 3 kcheck has one cost, kcheck.costs.budget's counted estimate: it decides, and it
is what the user is shown. These predictions stay here, outside the package, so that
scripts/plan_bench.py can report how many stages they held within 0.5-2x beside the counted
cost's count, and the calibration scripts can compare with them. They followed each solver
more closely:

* LIBLINEAR's C search (the baseline, degree-2, MultiLinear's clusters) costs per stored value
  and one-vs-rest model, more per value on more rows (more Newton steps), and much more where
  the width far exceeds the rows: separable data drives the search to large C, where the
  Newton-CG steps multiply (degree-2 on text of 8,000 words: 11.6x its per-value cost on
  1,700 rows; scripts/calibrate_separable.py); the baseline's grows already where T's rows
  approach twice its width, where Cover's theorem makes them separable (``width_onset_factor``);
* k-means' 15 passes cost per stored value and cluster;
* degree-2 also expands its rows and all of V, which it scores (``EXPAND_SECONDS_PER_VALUE``);
* LIBSVM (exact mode, rbfsvm) keeps kcheck.costs.budget's kernel-entry terms.

Each stage's prediction is its shape (below) times one factor per stage, the median of CPU
seconds over shape on the judged corpus (``python scripts/calibrate_plan.py``, which writes
the factors' table in scripts/results/calibrate_plan.md). Counted on the reference machine: the same
numbers on every machine.
"""

from __future__ import annotations

from kcheck.checkers import kmeans as km
from kcheck.checkers.base import Counts
from kcheck.checkers.degree2 import expanded_dimension
from kcheck.costs import budget
from kcheck.costs.solvers import (
    KMEANS_SECONDS_PER_WORK,
    ONSET_FROM,
    ONSET_MOST,
    kmeans_seconds,
    liblinear_seconds,
    multilinear_seconds,
    width_onset_factor,
)

#: Where it is counted (kcheck.costs.budget): degree-2's counted seconds follow it too.
separable_factor = budget.separable_factor

__all__ = [
    "FACTORS",
    "KMEANS_SECONDS_PER_WORK",
    "ONSET_FROM",
    "ONSET_MOST",
    "predicted_seconds",
    "separable_factor",
    "shape_seconds",
    "width_onset_factor",
]

#: CPU seconds over shape seconds, per stage (median over the judged corpus; see the module's
#: doc). A stage not here is predicted by its shape alone.
FACTORS: dict[str, float] = {
    # Fitted to the judged corpus at seed 0, quiet, one job (scripts/results/calibrate_plan.md:
    # exact mode's over the repeats it ran): of the factors that leave the fewest stages of
    # 0.5 s or more outside [0.5, 2] of CPU / predicted, the nearest to the median of CPU over
    # shape (1.83, 1.15, 1.41, 1.41, 1.13 in this order).
    "linear": 1.6,
    "degree2": 1.2,
    "multilinear": 1.3,
    "rbf": 1.25,
    "rbfsvm": 0.9,
}
#: Degree-2's expansion of the rows it trains on and of all of V, which it scores, per expanded
#: value (vectorised numpy, about 15 passes over int64 arrays): 50-140 ns CPU at pace 0.47, on
#: dense and sparse rows of 5-8,400 features. On a subsample V can hold 20 times the training
#: rows' values: lin_d20_n100000's 25,000 rows of V took 0.65 of degree-2's 1.7 s.
EXPAND_SECONDS_PER_VALUE = 1.5e-7


def shape_seconds(name: str, counts: Counts, rows: int, estimated: float | None) -> float | None:
    """A stage's seconds before its factor: ``rows`` the rows it trains on (the plan's),
    ``estimated`` kcheck.costs.budget's counted seconds where it has them."""
    if rows <= 0:
        return None
    share = rows / max(counts.rows, 1)
    models = budget.n_models(counts.n_classes)
    if name == "linear":
        onset = width_onset_factor(counts.features, counts.rows)
        return liblinear_seconds(counts.nnz, counts.features, counts.rows, models) * onset
    if name == "degree2":
        expanded = int(counts.expanded_nnz * share)
        dim = expanded_dimension(counts.features)
        main = budget.degree2_sizing_seconds(expanded, counts.n_classes, rows, dim)
        # On a subsample, a linear model on the same rows is its reference.
        ref = (
            0.0
            if rows >= counts.rows
            else liblinear_seconds(int(counts.nnz * share), counts.features, rows, models)
        )
        val_expanded = counts.expanded_nnz * counts.val_rows / max(counts.rows, 1)
        return main + ref + EXPAND_SECONDS_PER_VALUE * (expanded + val_expanded)
    if name == "mixlinear" and estimated is not None:
        k = km.n_clusters(counts.rows)
        return kmeans_seconds(counts.nnz, counts.rows, k, km.N_ITER) + estimated
    if name in ("multilinear", "mixlinear"):
        k = km.n_clusters(counts.rows)
        return multilinear_seconds(
            counts.nnz, counts.features, counts.rows, counts.n_classes, k, km.N_ITER
        )
    return estimated


def predicted_seconds(
    name: str, counts: Counts, rows: int, estimated: float | None
) -> float | None:
    """A stage's predicted seconds (see the module's doc); None where it has no shape."""
    shape = shape_seconds(name, counts, rows, estimated)
    return None if shape is None else shape * FACTORS.get(name, 1.0)
