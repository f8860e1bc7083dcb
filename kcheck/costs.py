"""Predicted seconds of each stage of a check, from counts, for the user to read.

kcheck.budget's counted estimates decide what runs; they are coarse on purpose, as a change
there moves verdicts. The predictions here only inform: the JSON's ``plan`` block shows them
beside what each stage took (``predicted_seconds``, ``cpu_seconds``), a warning names a stage
that took under half or over twice its prediction, and the log's stage lines show them. So they
may follow each solver more closely, and be re-fitted without moving a verdict:

* LIBLINEAR's C search (the baseline, degree-2, MultiLinear's clusters) costs per stored value
  and one-vs-rest model, more per value on more rows (more Newton steps), and much more where
  the width far exceeds the rows: separable data drives the search to large C, where the
  Newton-CG steps multiply (degree-2 on text of 8,000 words: 11.6x its per-value cost on
  1,700 rows; scripts/calibrate_separable.py); the baseline's grows already where T's rows
  approach twice its width, where Cover's theorem makes them separable (``width_onset_factor``);
* k-means' 15 passes cost per stored value and cluster;
* LIBSVM (exact mode, rbfsvm) keeps kcheck.budget's kernel-entry terms.

Each stage's prediction is its shape (below) times one factor per stage, the median of CPU
seconds over shape on the judged corpus (``python scripts/calibrate_plan.py``, which writes
the factors' table in scripts/results/calibrate_plan.md). Counted on the reference machine: the same
numbers on every machine.
"""

from __future__ import annotations

import math

from kcheck import budget
from kcheck.checkers import kmeans as km
from kcheck.checkers.base import Counts
from kcheck.checkers.degree2 import expanded_dimension

#: Where it is counted (kcheck.budget): degree-2's counted seconds follow it too.
separable_factor = budget.separable_factor

__all__ = [
    "FACTORS",
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
#: k-means: seconds per stored value, cluster and pass (sparse rows against dense centers).
KMEANS_SECONDS_PER_WORK = 2.0e-9


#: Cover's theorem: n rows in general position in d dimensions are linearly separable with
#: high probability where n < 2d. Towards there the baseline's C search no longer settles: it
#: runs on to its largest C, where LIBLINEAR's Newton-CG steps multiply. Its cost per value
#: grows from 1 where T has ONSET_FROM x its width in rows to ONSET_MOST where it has the
#: width or fewer (text of 8,400 words on 5,850 rows and 20,000 on 15,000: 2.2 and 2.1 times
#: the prediction without it; 1,000 on 1,125 rows: 1.3; sector's 55,197 on 4,794: 1.45).
#: Only the baseline: a MultiLinear cluster is as narrow in rows, but its problem is small
#: (madelon's 41-row clusters on 500 features took half their prediction without it).
ONSET_FROM = 4.0
ONSET_MOST = 2.0


def width_onset_factor(width: int, rows: int) -> float:
    """1 where ``rows`` are at least ONSET_FROM x ``width``; ONSET_MOST at ``width`` or fewer,
    in between as the log of the ratio."""
    if rows <= 0 or width <= 0 or rows >= ONSET_FROM * width:
        return 1.0
    share = math.log(ONSET_FROM * width / rows) / math.log(ONSET_FROM)
    return 1.0 + (ONSET_MOST - 1.0) * min(share, 1.0)


def _liblinear(nnz: int, width: int, rows: int, models: float) -> float:
    """LIBLINEAR -s 2 with its -C search on ``rows`` rows of ``nnz`` values, ``width`` wide,
    ``models`` one-vs-rest models: per value, more on more rows (degree-2's row factor, which
    the baseline follows too: cod-rna's 44,651 rows took 3.7x the per-value cost of a few
    thousand), and more in the separable regime."""
    per_value = budget.LINEAR_SECONDS_PER_NNZ * budget.rows_factor(rows)
    return per_value * nnz * models * separable_factor(width, rows)


def shape_seconds(name: str, counts: Counts, rows: int, estimated: float | None) -> float | None:
    """A stage's seconds before its factor: ``rows`` the rows it trains on (the plan's),
    ``estimated`` kcheck.budget's counted seconds where it has them."""
    if rows <= 0:
        return None
    share = rows / max(counts.rows, 1)
    models = budget.n_models(counts.n_classes)
    if name == "linear":
        onset = width_onset_factor(counts.features, counts.rows)
        return _liblinear(counts.nnz, counts.features, counts.rows, models) * onset
    if name == "degree2":
        expanded = int(counts.expanded_nnz * share)
        dim = expanded_dimension(counts.features)
        main = budget.degree2_sizing_seconds(expanded, counts.n_classes, rows, dim)
        # On a subsample, a linear model on the same rows is its reference.
        ref = (
            0.0
            if rows >= counts.rows
            else _liblinear(int(counts.nnz * share), counts.features, rows, models)
        )
        return main + ref
    if name in ("multilinear", "mixlinear"):
        k = km.n_clusters(counts.rows)
        kmeans = KMEANS_SECONDS_PER_WORK * km.N_ITER * k * max(counts.nnz, counts.rows)
        # A cluster holds a few of many classes: its one-vs-rest models grow with about the
        # square root of the classes (letter's 26 classes in 46 clusters cost 5x, not 26x).
        per_cluster = math.sqrt(models) if models > 1 else 1.0
        trained = _liblinear(counts.nnz, counts.features, max(counts.rows // k, 1), per_cluster)
        if name == "mixlinear" and estimated is not None:
            return kmeans + estimated
        return kmeans + trained
    return estimated


def predicted_seconds(
    name: str, counts: Counts, rows: int, estimated: float | None
) -> float | None:
    """A stage's predicted seconds (see the module's doc); None where it has no shape."""
    shape = shape_seconds(name, counts, rows, estimated)
    return None if shape is None else shape * FACTORS.get(name, 1.0)
