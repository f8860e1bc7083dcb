"""Counted work: what each step costs, in seconds of the reference machine, from counts alone.

Every choice that changes what a check computes is taken from these counts (rows, stored values,
classes, expansion size, times per-unit costs measured once: `scripts/calibrate.py`), never from
a clock, so a faster or busier machine changes how long a check takes, not what it computes.

The one budget rule (:func:`methods_seconds`): exact mode, the checkers and a second fold share
``max(FLOOR_SECONDS, LINEAR_FACTOR x the baseline's counted cost)``, each spending what the ones
before it left; the first measurement is planned within :func:`first_seconds`, so that a
borderline verdict leaves room for a second fold. The floor keeps small data from losing its
methods to a 0.1 s baseline; above it the budget is relative, since twice the baseline made
large checks overrun. docs/method.md ("Counted work and the budget") has the measurements.
"""

from __future__ import annotations

import math

from kcheck.memory import size_text

__all__ = ["size_text"]

#: Counted seconds that every check's methods may spend together (its first measurement and a
#: second fold), whatever the linear model costs ...
FLOOR_SECONDS = 20.0
#: ... or this many times the linear baseline's counted cost, where more.
LINEAR_FACTOR = 1.0
#: The share of the floor the first measurement is planned within (where the linear model's
#: count is less): the rest is what a second fold may spend.
FIRST_SHARE = 0.5
#: Degree-2's cost per expanded value grows with T's rows above this many: LIBLINEAR's C
#: search needs more Newton steps there (measured per value: ijcnn1 2.4 us at 5,000 rows and
#: 4.9 at 20,000; a9a 5.0 at 10,000 and 5.6 at 24,421; scripts/results/calibrate.md), about
#: as the square root of the rows.
DEGREE2_ROWS_KNEE = 10_000

#: LIBLINEAR -s 2 -B 1 with its -C search, per stored value and one-vs-rest model. Measured
#: 1.0-4.3 us (median 2.0) on 15 sets of a quiet machine (scripts/results/calibrate.md),
#: rounded up.
LINEAR_SECONDS_PER_NNZ = 2.5e-6
#: The same on the degree-2 expansion, per expanded value and model: 1.5-6.3 us (median 2.3);
#: larger T lean high, as the C search needs more Newton steps there.
DEGREE2_SECONDS_PER_NNZ = 3.0e-6
#: Exact mode: LIBSVM on a precomputed kernel, per entry of a training kernel matrix and CV
#: fold or training (binary; one-vs-one multiclass costs up to twice that) ...
KERNEL_SECONDS_PER_ENTRY = 3.0e-8
#: ... building a precomputed problem, per kernel entry ...
BUILD_SECONDS_PER_ENTRY = 1.5e-8
#: ... and the distance product, per row x stored value. On a quiet machine the whole
#: comparison took 0.3-1.0 of its counted seconds on eleven of thirteen sets; poker 1.4, and
#: madelon 1.8, whose noise makes every row a support vector at large gamma.
DISTANCE_SECONDS_PER_WORK = 1.0e-9
#: The rbfsvm checker's LIBSVM trainings on T (its own RBF kernel) and their predictions, per
#: row trained x row trained or predicted x stored value of a row (plus one). Measured 0.5-4.8
#: ns (median 1.25) on six judged sets of 3,750-9,000 rows of T, the most at C = 2^11
#: (scripts/results/calibrate_rbfsvm.md); the whole checker took 0.65-1.11 of its counted
#: seconds there, 1.1-1.2 on small T, and 2.1 on parity3 (C = 2^11, noisy labels).
RBF_SECONDS_PER_WORK = 2.5e-9
#: ... times up to 1 + SPARSE_MERGE_EXTRA on sparse rows (:func:`sparse_merge_factor`): LIBSVM's
#: dot product merges two rows' index lists, and where their indices rarely coincide nearly
#: every step is a mispredicted branch. Per kernel evaluation and (stored values of a row + 1):
#: 1.7-5.0 ns on dense rows, 11-15 on rows holding 1/36 to 1/345 of the features (text_d8400,
#: lin_sparse20k, lin_sparse1k, sector). Without it the checker took 4.6x and 4.9x its counted
#: seconds on text_d8400 and lin_sparse20k, with it 1.0x on the same rows. a9a (1/9 of its
#: features) measures 8 ns but stays at 1: its models keep about half the rows as support
#: vectors, where the count assumes all (scripts/results/calibrate_rbfsvm.md).
SPARSE_MERGE_EXTRA = 4.0
SPARSE_MERGE_FROM = 10.0


def n_models(n_classes: int) -> int:
    """One-vs-rest models LIBLINEAR trains: one for two classes, one per class above."""
    return 1 if n_classes <= 2 else n_classes


def linear_seconds(nnz: int, n_classes: int, rows: int = 0) -> float:
    """Counted seconds of the linear baseline (C search and training) on ``nnz`` values of
    ``rows`` rows (0: not counted), more per value on more rows, as degree-2's (:func:`rows_factor`;
    cod-rna's 44,651 rows of T took 3.7x the per-value cost of a few thousand). Without it the
    budget of 581,012 covtype-like rows was a sixth of the baseline's real cost, and degree-2,
    charged after MultiLinear, got 0.4% of T, too few rows to see the data's sine and product."""
    return LINEAR_SECONDS_PER_NNZ * nnz * n_models(n_classes) * rows_factor(rows)


def degree2_seconds(expanded_nnz: int, n_classes: int, rows: int, dimension: int = 0) -> float:
    """Counted seconds of degree-2's C search and training on ``expanded_nnz`` values of
    ``rows`` rows, ``dimension`` expanded features wide (0: not wide enough to matter)."""
    per_value = DEGREE2_SECONDS_PER_NNZ * rows_factor(rows) * separable_factor(dimension, rows)
    return per_value * expanded_nnz * n_models(n_classes)


def degree2_sizing_seconds(
    expanded_nnz: int, n_classes: int, rows: int, dimension: int = 0
) -> float:
    """:func:`degree2_seconds` where labels overlap, as degree-2 is sized: its cost per value
    then grows with its rows from DEGREE2_ROWS_FROM (:func:`degree2_rows_factor`), and a
    subsample sized without it overran its count (a9a: 15 s where 10 were counted). A count
    cannot see the overlap, and on clean data the same rows cost the count alone (sinus_n8000,
    wavy5d: 0.85-1.07 of it), so degree-2 is sized with it and charged without it: charged
    with it, the RBF SVM after it lost rows it needed (a 10,000-row set with a 3.4-point gain
    fell under epsilon at one seed of five)."""
    return degree2_seconds(expanded_nnz, n_classes, rows, dimension) * degree2_rows_factor(rows)


#: Where labels overlap, degree-2's cost per expanded value grows with its rows from far fewer
#: than DEGREE2_ROWS_KNEE: (rows / DEGREE2_ROWS_FROM) ^ DEGREE2_ROWS_EXPONENT above it, on top
#: of :func:`rows_factor`. On the judged corpus its CPU over the count without this was 0.6-1.2
#: below 2,000 rows and 1.8-2.2 on the larger sets whose labels overlap (a9a, ijcnn1, cod-rna,
#: poker0, blobs3_d8_n9000, pair_d40_n5000: 3,700-37,500 rows). Sized without it, degree-2
#: took its 10 s floor 1.6 times over on a9a (15,743 rows), and the check 13-18 s.
DEGREE2_ROWS_FROM = 2_000
DEGREE2_ROWS_EXPONENT = 0.15


def degree2_rows_factor(rows: int) -> float:
    """1 up to DEGREE2_ROWS_FROM rows, then (rows / DEGREE2_ROWS_FROM) ^ DEGREE2_ROWS_EXPONENT."""
    return float(max(1.0, rows / DEGREE2_ROWS_FROM) ** DEGREE2_ROWS_EXPONENT)


#: The separable regime: where the width exceeds the rows by more than 10^SEPARABLE_FROM, each
#: further power of ten multiplies LIBLINEAR's cost per value by SEPARABLE_SLOPE more: the C
#: search is driven to large C, where the Newton-CG steps multiply (degree-2 on text-like rows of
#: 44 words: 2.3x, 7.4x and 11.6x at widths of 74, 1,180 and 18,800 times the rows;
#: scripts/calibrate_separable.py). Without it degree-2 on 7,800 rows of 8,400 words was
#: counted 10 s and took 84.
SEPARABLE_FROM = 1.5
SEPARABLE_SLOPE = 3.9


def separable_factor(width: int, rows: int) -> float:
    """1 where rows are many for the width; above, 1 + SLOPE per power of ten past FROM."""
    if rows <= 0 or width <= rows:
        return 1.0
    return 1.0 + SEPARABLE_SLOPE * max(0.0, math.log10(width / rows) - SEPARABLE_FROM)


def rows_factor(rows: int) -> float:
    """1 up to DEGREE2_ROWS_KNEE rows, then the square root of rows / knee."""
    return max(1.0, math.sqrt(rows / DEGREE2_ROWS_KNEE))


def methods_seconds(*, nnz: int, n_classes: int, rows: int = 0) -> float:
    """The one budget: counted seconds that exact mode, the checkers and a second fold may
    spend together on a check whose T holds ``nnz`` stored values in ``rows`` rows (see the
    module's doc)."""
    return max(FLOOR_SECONDS, LINEAR_FACTOR * linear_seconds(nnz, n_classes, rows))


def first_seconds(*, nnz: int, n_classes: int, rows: int = 0) -> float:
    """What the first measurement (exact mode, or the checkers on T) is planned within, of
    :func:`methods_seconds`: FIRST_SHARE of the floor, or the baseline's count where more."""
    return max(FIRST_SHARE * FLOOR_SECONDS, LINEAR_FACTOR * linear_seconds(nnz, n_classes, rows))


def floor_sets_budget(*, nnz: int, n_classes: int, rows: int = 0) -> bool:
    """Whether the floor, not the linear model, sets :func:`first_seconds` (the JSON's
    ``plan.small_data``): there the first measurement leaves at least half the budget."""
    return LINEAR_FACTOR * linear_seconds(nnz, n_classes, rows) <= FIRST_SHARE * FLOOR_SECONDS


def degree2_values_within(seconds: float, *, rows: int, n_classes: int, dimension: int = 0) -> int:
    """Expanded values (per model) that ``seconds`` of counted work let degree-2 use on T of
    ``rows`` rows, ``dimension`` expanded features wide, at the cost per value of all of T's
    rows. A subsample costs less per value, except in the separable regime, where fewer rows
    are more separable (kcheck.checkers.degree2 counts a subsample's own rows there)."""
    if seconds <= 0:
        return 0
    return int(round(seconds / degree2_sizing_seconds(1, n_classes, rows, dimension)))


def _pairs_factor(n_classes: int) -> float:
    """One-vs-one trains k(k-1)/2 pairs of about 2n/k rows: 2(k-1)/k times a binary problem."""
    return 2.0 * (n_classes - 1) / n_classes if n_classes > 2 else 1.0


def rbf_tuning_seconds(
    *, tune_rows: int, n_classes: int, grid_points: int, gammas: int, folds: int
) -> float:
    """Counted seconds of the (C, gamma) search on ``tune_rows`` rows (precomputed kernels): one
    problem built per gamma and a ``folds``-fold CV at each of ``grid_points``."""
    train_share = (folds - 1) / folds
    entries = float(tune_rows) ** 2
    cv = KERNEL_SECONDS_PER_ENTRY * _pairs_factor(n_classes) * entries * train_share**2
    return grid_points * folds * cv + gammas * BUILD_SECONDS_PER_ENTRY * entries


def rbf_fit_seconds(
    *, rows: int, nnz: int, predict_rows: int, n_classes: int, features: int = 0
) -> float:
    """Counted seconds of one LIBSVM training on ``rows`` rows (its own kernel, from node
    lists) and predicting ``predict_rows`` more: kernel evaluations, each as costly as a row's
    stored values, of every row against every other (an upper bound on the support vectors),
    and more on rows sparse in ``features`` (:func:`sparse_merge_factor`; 0: not counted)."""
    per_row = nnz / max(rows, 1) + 1.0
    work = float(rows) * (rows + predict_rows) * per_row
    merge = sparse_merge_factor(features, nnz, rows)
    return RBF_SECONDS_PER_WORK * _pairs_factor(n_classes) * merge * work


#: LIBSVM's solver, per iteration and row of its sub-problem: each step updates the gradient
#: of every active row. 1.2 ns on checker4_n50000's trainings at C = 2^11 (5,681 rows, 1.8-3.3
#: million iterations, 12.6-22.6 s); the kernel evaluations are rbf_fit_seconds'.
SVM_SECONDS_PER_ITERATION_ROW = 1.2e-9
#: ... and on a precomputed kernel (exact mode, the search): each step reads its kernel
#: entries from node lists, a row apart in memory. 2.9-5.1 ns on the searches and repeats
#: of six judged sets (sinus_n8000, wavy5d_n12000, checker4_n50000, parity3_d10_n2000 and
#: offsets_onehot_n5000, whose repeats at C = 2^11 took 18 s each: 3.8 ns).
SVM_PRECOMPUTED_SECONDS_PER_ITERATION_ROW = 3.8e-9


#: A training on a precomputed kernel (the search's folds), once it has run: per support
#: vector and row of its sub-problem, the kernel column LIBSVM computes for it (once: the
#: cache holds a fold's columns) and the predictions; its iterations cost
#: SVM_SECONDS_PER_ITERATION_ROW each beside. Fitted, with that fixed and no other term (the
#: kernels' building took none of the fit), to the CPU seconds of exact mode's whole searches
#: on the 40 judged cases where it runs: 0.67-1.23 of them on the searches of 0.1 s or more,
#: where rbf_tuning_seconds' kernel entries gave 0.41-1.86 (clean data keeps few support
#: vectors: svmguide1 0.41; noisy data many: parity3 1.86; scripts/results/
#: calibrate_search.md). Not counted before a search, as the plan cannot know them: only the
#: revised seconds of exact mode and the RBF SVM checker, which nothing decides on, read it.
SVM_SECONDS_PER_SUPPORT_VECTOR_ROW = 5.3e-8


def svm_trained_seconds(support_vectors: float, iterations: float, rows: float) -> float:
    """Seconds of LIBSVM trainings on precomputed kernels of ``rows`` rows each that kept
    ``support_vectors`` and took ``iterations``, both summed over the trainings."""
    per_row = (
        SVM_SECONDS_PER_SUPPORT_VECTOR_ROW * support_vectors
        + SVM_SECONDS_PER_ITERATION_ROW * iterations
    )
    return per_row * rows


def svm_iterations_on(sample_iterations: float, sample_rows: int, folds: int, rows: int) -> float:
    """LIBSVM's iterations for one training on ``rows`` rows, from a ``folds``-fold CV on
    ``sample_rows`` rows at the same (C, gamma) that took ``sample_iterations`` over its folds:
    a training's iterations grow about as its rows (checker4 and poker0: 1.0-6.6 times that
    from 600 sampled rows to 4,000-8,500, median 2.9 where it predicts 2.4-3.6). At a large
    C they are many: 2.3 million where C = 2^5 took 62,000."""
    fold_rows = max(sample_rows * (folds - 1) / max(folds, 1), 1.0)
    return sample_iterations / max(folds, 1) * rows / fold_rows


def svm_iteration_seconds(
    iterations: float, rows: int, n_classes: int, *, precomputed: bool = False
) -> float:
    """Counted seconds of ``iterations`` (summed over one-vs-one's pairs) on ``rows`` rows:
    a pair of k classes has about 2n/k of them."""
    pair_rows = rows * (2.0 / n_classes if n_classes > 2 else 1.0)
    per = (
        SVM_PRECOMPUTED_SECONDS_PER_ITERATION_ROW if precomputed else SVM_SECONDS_PER_ITERATION_ROW
    )
    return per * iterations * pair_rows


def sparse_merge_factor(features: int, nnz: int, rows: int) -> float:
    """1 where a row's stored values are at least 1 / SPARSE_MERGE_FROM of the ``features``;
    sparser, 1 + SPARSE_MERGE_EXTRA x the powers of ten below that, at most one."""
    if features <= 0 or nnz <= 0 or rows <= 0:
        return 1.0
    spread = math.log10(features * rows / nnz / SPARSE_MERGE_FROM)
    return 1.0 + SPARSE_MERGE_EXTRA * min(1.0, max(0.0, spread))


def exact_seconds(
    *,
    rows: int,
    nnz: int,
    n_classes: int,
    tune_rows: int,
    grid_points: int,
    gammas: int,
    repeats: int,
    folds: int,
    nested_folds: int = 0,
    linear_search: bool = True,
) -> float:
    """Counted seconds of the exact comparison (kcheck.checkers.exact.run): the search builds
    one precomputed problem per gamma and runs a CV at each of ``grid_points``. Nested
    (``nested_folds`` > 0), each training fold of each repeat runs the search again, by
    ``nested_folds``-fold CV, and the linear model's C search. ``linear_search``: it searches
    the linear model's C on all rows first (not where the baseline's is handed over)."""
    pairs = _pairs_factor(n_classes)
    train_share = (folds - 1) / folds
    tuning = rbf_tuning_seconds(
        tune_rows=tune_rows,
        n_classes=n_classes,
        grid_points=grid_points,
        gammas=gammas,
        folds=folds,
    )
    fold_entries = (train_share * rows) ** 2
    per_repeat = folds * (
        (KERNEL_SECONDS_PER_ENTRY * pairs + BUILD_SECONDS_PER_ENTRY) * fold_entries
        + linear_seconds(int(nnz * train_share), n_classes) / 10.0
    )
    if nested_folds > 0:
        per_repeat += folds * (
            rbf_tuning_seconds(
                tune_rows=int(train_share * rows),
                n_classes=n_classes,
                grid_points=grid_points,
                gammas=gammas,
                folds=nested_folds,
            )
            + linear_seconds(int(nnz * train_share), n_classes)
        )
    return (
        (linear_seconds(nnz, n_classes) if linear_search else 0.0)
        + DISTANCE_SECONDS_PER_WORK * rows * max(nnz, rows)
        + tuning
        + repeats * per_repeat
    )
