"""The RBF grid, its refinement, the tie-break and the search (kcheck/tuning/rbf_grid.py).

tests/test_models.py covers grid.py's default grid, one refinement example, a tie-break
example, progress and worker processes; this module adds the properties and the check of the
search against LIBSVM's own cross-validation.
"""

from __future__ import annotations

import dataclasses
import itertools
import random

import numpy as np
import pytest
from conftest import DATASETS
from hypothesis import given
from hypothesis import strategies as st

from kcheck.bindings import engines
from kcheck.defaults import FOLDS
from kcheck.errors import KcheckError
from kcheck.memory import default_memory_limit
from kcheck.prepare import prepare
from kcheck.tuning import rbf_grid as rbf_search
from kcheck.tuning.rbf_grid import EXPORT_GRID, GRID, Grid, GridResult, best_point, rbf_grid_search

TINY = Grid(log2_C=(-1.0, 1.0), log2_gamma=(-3.0, -5.0))


@pytest.fixture(scope="module")
def heart() -> tuple:
    p = prepare(
        str(DATASETS / "heart_scale"), scaling="maxabs", memory_limit=default_memory_limit()
    )
    return p.X, p.y


# --- Grid -----------------------------------------------------------------------------------------


def test_coarse_is_every_pair_c_major() -> None:
    g = Grid(log2_C=(0.0, 2.0, 4.0), log2_gamma=(1.0, -1.0))
    assert g.coarse == [(0.0, 1.0), (0.0, -1.0), (2.0, 1.0), (2.0, -1.0), (4.0, 1.0), (4.0, -1.0)]
    assert len(GRID.coarse) == len(set(GRID.coarse)) == len(GRID.log2_C) * len(GRID.log2_gamma)


def test_refined_in_the_interior_is_a_full_square() -> None:
    g = Grid(refine=True, radius=1.0, step=0.25)
    pts = g.refined((5.0, -7.0))
    assert len(pts) == 9 * 9
    assert (5.0, -7.0) in pts
    assert min(p[0] for p in pts) == 4.0 and max(p[0] for p in pts) == 6.0
    assert {p[1] for p in pts} == {-7.0 + 0.25 * i for i in range(-4, 5)}


def test_refined_at_an_edge_is_clipped() -> None:
    pts = EXPORT_GRID.refined((-5.0, -7.0))  # smallest C: only offsets >= 0 in C survive
    assert len(pts) == 3 * 5
    assert all(c >= -5.0 for c, _ in pts)
    pts = EXPORT_GRID.refined((15.0, -15.0))  # largest C and smallest gamma: a corner
    assert sorted(pts) == sorted(
        (15.0 + dc, -15.0 + dg) for dc in (-1.0, -0.5, 0.0) for dg in (0.0, 0.5, 1.0)
    )


_axis = st.lists(st.integers(-20, 20).map(float), min_size=1, max_size=6, unique=True).map(tuple)


@given(
    _axis,
    _axis,
    st.sampled_from([(1.0, 0.5), (1.0, 0.25), (2.0, 1.0), (0.5, 0.5), (1.5, 0.5)]),
    st.data(),
)
def test_refined_points_properties(
    log2_C: tuple[float, ...],
    log2_gamma: tuple[float, ...],
    radius_step: tuple[float, float],
    data: st.DataObject,
) -> None:
    radius, step = radius_step
    g = Grid(log2_C=log2_C, log2_gamma=log2_gamma, refine=True, radius=radius, step=step)
    centre = data.draw(st.sampled_from(g.coarse))
    pts = g.refined(centre)
    assert centre in pts
    assert len(pts) == len(set(pts))
    for c, gm in pts:
        assert min(log2_C) <= c <= max(log2_C)
        assert min(log2_gamma) <= gm <= max(log2_gamma)
        for offset in (c - centre[0], gm - centre[1]):
            assert abs(offset) <= radius
            assert (offset / step) == round(offset / step)  # on the step's lattice
    k = round(radius / step)
    assert len(pts) <= (2 * k + 1) ** 2
    # max_points bounds what a refined search can evaluate.
    assert len(g.coarse) + len(set(pts) - set(g.coarse)) <= g.max_points


def test_max_points() -> None:
    assert GRID.max_points == 110
    assert EXPORT_GRID.max_points == 110 + 5 * 5 - 1
    assert Grid(refine=True, radius=1.0, step=0.25).max_points == 110 + 81 - 1
    assert Grid((1.0,), (2.0,), refine=False, radius=3.0, step=1.0).max_points == 1


# --- best_point -----------------------------------------------------------------------------------


def test_best_point_prefers_smaller_gamma_at_equal_C() -> None:
    assert best_point({(1.0, 1.0): 5, (1.0, -1.0): 5, (1.0, 3.0): 5}) == (1.0, -1.0)


def test_best_point_count_beats_regularisation() -> None:
    assert best_point({(-5.0, -15.0): 10, (15.0, 3.0): 11}) == (15.0, 3.0)


_points = st.dictionaries(
    st.tuples(st.integers(-5, 15).map(float), st.integers(-15, 3).map(float)),
    st.integers(0, 4),
    min_size=1,
    max_size=30,
)


@given(_points, st.randoms(use_true_random=False))
def test_best_point_is_the_rule_whatever_the_order(
    scores: dict[tuple[float, float], int], shuffler: random.Random
) -> None:
    chosen = best_point(scores)
    top = max(scores.values())
    assert scores[chosen] == top
    ties = [p for p, v in scores.items() if v == top]
    smallest_C = min(c for c, _ in ties)
    assert chosen[0] == smallest_C
    assert chosen[1] == min(g for c, g in ties if c == smallest_C)
    items = list(scores.items())
    shuffler.shuffle(items)
    assert best_point(dict(items)) == chosen
    assert best_point(dict(reversed(items))) == chosen


# --- the search -----------------------------------------------------------------------------------


def test_every_point_is_libsvm_cross_validation_with_the_same_seed(heart) -> None:
    X, y = heart
    found = rbf_grid_search(X, y, TINY, seed=7)
    problem = engines.SvmProblem.from_data(X, y)
    assert set(found.scores) == set(TINY.coarse)
    for (c, g), correct in found.scores.items():
        assert correct == engines.cv_rbf(problem, 2.0**c, 2.0**g, folds=FOLDS, seed=7)
    chosen = (found.log2_C, found.log2_gamma)
    assert chosen == best_point(found.scores)
    assert found.correct == engines.cv_rbf(problem, found.C, found.gamma, folds=FOLDS, seed=7)


def test_grid_result_properties(heart) -> None:
    X, y = heart
    found = rbf_grid_search(X, y, TINY, seed=0)
    assert isinstance(found, GridResult)
    assert found.rows == y.size == 270
    assert found.C == 2.0**found.log2_C and found.gamma == 2.0**found.log2_gamma
    assert found.cv_accuracy == found.correct / 270
    assert 0.5 < found.cv_accuracy <= 1.0  # heart_scale: well above chance
    assert found.points == len(found.scores) == 4
    assert all(0 <= v <= 270 for v in found.scores.values())


def test_grid_result_from_hand() -> None:
    r = GridResult(log2_C=-1.0, log2_gamma=2.0, correct=30, rows=40, scores={(-1.0, 2.0): 30})
    assert (r.C, r.gamma, r.cv_accuracy, r.points) == (0.5, 4.0, 0.75, 1)


def test_the_same_seed_gives_the_same_search(heart) -> None:
    X, y = heart
    a = rbf_grid_search(X, y, TINY, seed=11)
    b = rbf_grid_search(X, y, TINY, seed=11)
    assert a.scores == b.scores


def test_refinement_searches_around_the_best_coarse_point(heart) -> None:
    X, y = heart
    grid = Grid(log2_C=(-1.0, 3.0), log2_gamma=(-3.0, -7.0), refine=True, radius=1.0, step=1.0)
    found = rbf_grid_search(X, y, grid, seed=0)
    coarse = {p: found.scores[p] for p in grid.coarse}
    centre = best_point(coarse)
    assert set(found.scores) == set(grid.coarse) | set(grid.refined(centre))
    assert found.points <= grid.max_points
    assert (found.log2_C, found.log2_gamma) == best_point(found.scores)
    assert found.correct >= max(coarse.values())


def test_too_few_rows_and_an_empty_grid_are_refused(heart) -> None:
    X, y = heart
    with pytest.raises(KcheckError, match=f"4 rows are too few for {FOLDS}-fold"):
        rbf_grid_search(X[:4], y[:4], TINY)
    with pytest.raises(KcheckError, match="the RBF grid is empty"):
        rbf_grid_search(X, y, Grid(log2_C=(), log2_gamma=(1.0,)))


def test_progress_counts_every_point_once(heart) -> None:
    X, y = heart
    seen: list[tuple[str, int | None, int | None]] = []
    found = rbf_grid_search(
        X, y, TINY, seed=0, progress=lambda e: seen.append((e.stage, e.done, e.total)), stage="grid"
    )
    assert [d for _, d, _ in seen] == list(range(found.points + 1))
    assert {s for s, _, _ in seen} == {"grid"} and {t for _, _, t in seen} == {4}


def test_search_accepts_dense_input(heart) -> None:
    X, y = heart
    sparse = rbf_grid_search(X, y, TINY, seed=2)
    dense = rbf_grid_search(np.asarray(X.todense()), y, TINY, seed=2)
    assert sparse.scores == dense.scores


def test_coarse_order_is_independent_of_axis_order(heart) -> None:
    X, y = heart
    a = rbf_grid_search(X, y, TINY, seed=3)
    b = rbf_grid_search(
        X, y, Grid(log2_C=tuple(reversed(TINY.log2_C)), log2_gamma=TINY.log2_gamma[::-1]), seed=3
    )
    assert a.scores == b.scores
    assert (a.log2_C, a.log2_gamma) == (b.log2_C, b.log2_gamma)
    assert list(itertools.product(TINY.log2_C, TINY.log2_gamma)) == TINY.coarse


# --- a search that starts at a tuned point ----------------------------------------------------


def test_a_started_grid_scores_the_start_and_its_four_neighbours_first() -> None:
    g = GRID.starting_at((5.0, 0.784111))
    assert g.start == (5.0, 0.784111) and not g.refine
    assert g.first_points == [
        (5.0, 0.784111),
        (7.0, 0.784111),
        (3.0, 0.784111),
        (5.0, 2.784111),
        (5.0, -1.215889),
    ]
    # grid.py's bounds on C; gamma widened to the start's first neighbours (a check places
    # gamma by the data: fourclass's 2^5.28 lies beyond grid.py's 2^3).
    high = GRID.starting_at((15.0, 5.27957))
    assert high.bounds == ((-5.0, 15.0), (-15.0, 7.27957))
    assert high.first_points == [(15.0, 5.27957), (13.0, 5.27957), (15.0, 7.27957), (15.0, 3.27957)]
    assert GRID.first_points == GRID.coarse


def test_the_climb_starts_at_the_point_and_ends_at_a_local_best(heart) -> None:
    X, y = heart
    grid = GRID.starting_at((1.0, -6.5))
    seen: list[tuple[int | None, int | None]] = []
    found = rbf_grid_search(X, y, grid, seed=0, progress=lambda e: seen.append((e.done, e.total)))
    assert set(list(found.scores)[:5]) == set(grid.first_points)
    assert 13 <= found.points <= grid.climb_limit < len(GRID.coarse)
    best = (found.log2_C, found.log2_gamma)
    assert best == best_point(found.scores)
    # It stopped because every neighbour of the chosen point at the finest step was scored,
    # and none beat it (the best of all scores, by the tie rule).
    assert set(grid.neighbours(best, grid.climb[-1])) <= set(found.scores)
    assert seen[0] == (0, grid.expected_points)
    assert seen[-1] == (found.points, found.points)


def test_the_climb_stops_at_its_limit(heart) -> None:
    X, y = heart
    grid = dataclasses.replace(GRID, climb_limit=7).starting_at((-5.0, 3.0))
    found = rbf_grid_search(X, y, grid, seed=0)
    assert found.points == 7
    assert all(-5.0 <= c <= 15.0 and -15.0 <= g <= 5.0 for c, g in found.scores)


@pytest.mark.slow
def test_the_climb_is_the_same_in_worker_processes(heart, monkeypatch) -> None:
    X, y = heart
    grid = GRID.starting_at((3.0, -3.0))
    serial = rbf_grid_search(X, y, grid, seed=4, jobs=1)
    monkeypatch.setattr(rbf_search, "MIN_PARALLEL_WORK", 0)
    parallel = rbf_grid_search(X, y, grid, seed=4, jobs=2)
    assert serial.scores == parallel.scores


def test_estimates_from_the_points_done() -> None:
    early = rbf_search._estimate("grid", 4, 10, 2.0)
    assert early.predicted_seconds is None and early.line is None  # under 5 s: none yet
    e = rbf_search._estimate("grid", 4, 10, 20.0)
    assert e.predicted_seconds == pytest.approx(50.0)
    assert e.text == "grid: 4/10 grid points in 20 s; about 30 s left at this pace"
    assert rbf_search._estimate("grid", 5, 10, 20.0).predicted_seconds is None  # not a power of 2
    assert rbf_search._estimate("grid", 8, 8, 20.0).predicted_seconds is None  # done


def test_the_predicted_time_grows_with_the_points_and_the_rows() -> None:
    small = rbf_search.search_seconds(GRID, rows=1_000, nnz=10_000, n_classes=2)
    assert small == pytest.approx(
        110 * rbf_search.point_seconds(rows=1_000, nnz=10_000, n_classes=2)
    )
    assert rbf_search.search_seconds(GRID, rows=2_000, nnz=20_000, n_classes=2) > 3.5 * small
    climb = rbf_search.search_seconds(
        GRID.starting_at((1.0, 1.0)), rows=1_000, nnz=10_000, n_classes=2
    )
    assert climb < small / 4
    # Two processes share the points where the work is large enough for them.
    assert rbf_search.search_seconds(
        GRID, rows=1_000, nnz=10_000, n_classes=2, jobs=2
    ) == pytest.approx(small / 2)


def test_grid_text() -> None:
    assert rbf_search.grid_text(GRID) == (
        "110 points (log2 C -5..15, step 2; log2 gamma 3..-15, step 2)"
    )
    assert "then up to 24 around the best" in rbf_search.grid_text(EXPORT_GRID)
    assert rbf_search.grid_text(GRID.starting_at((1.0, 1.0))).startswith(
        "a climb in log2 steps of 2, 1, 0.5"
    )


# --- the search under a memory limit ---------------------------------------------------------


def test_a_small_kernel_cache_gives_the_same_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """LIBSVM's cache only buys speed: a 1 MB cache (what a tight limit leaves; german.numer's
    kernel matrix of 800 training rows is 2.6 MB) scores every point as the default's 200 MB
    does, in this process and in worker processes alike."""
    p = prepare(
        str(DATASETS / "german.numer"), scaling="maxabs", memory_limit=default_memory_limit()
    )
    X, y = p.X, p.y
    assert engines._svm_parameter(1.0, 1.0, cache_mb=1.0).cache_size == 1.0
    assert engines._svm_parameter(1.0, 1.0).cache_size == engines.SVM_CACHE_MB
    default = rbf_grid_search(X, y, TINY, seed=3)
    monkeypatch.setattr(rbf_search, "MIN_PARALLEL_WORK", 0)  # workers even on small data
    for jobs in (1, 2):
        assert rbf_search.parallel_jobs(jobs, len(TINY.first_points), X) == jobs
        least = engines.SVM_MIN_CACHE_MB
        memory = rbf_search.SearchMemory(jobs, least, least)
        small = rbf_grid_search(X, y, TINY, seed=3, jobs=jobs, memory=memory)
        assert small.scores == default.scores
    problem = engines.SvmProblem.from_data(X, y, cache_mb=1.0)
    assert problem.cache_mb == 1.0
    assert engines.cv_rbf(problem, 2.0, 0.125, folds=FOLDS, seed=3) == engines.cv_rbf(
        engines.SvmProblem.from_data(X, y), 2.0, 0.125, folds=FOLDS, seed=3
    )


def test_search_memory_shrinks_the_cache_then_the_workers_then_refuses(heart) -> None:
    X, _ = heart
    MiB = 2**20
    problem = 16 * (X.nnz + X.shape[0]) + 96 * X.shape[0]  # nodes and solver arrays
    assert engines.svm_copy_bytes(X.nnz, X.shape[0]) == problem
    roomy = rbf_search.search_memory("f", X, 8 * 2**30, 0, 4)
    assert (roomy.jobs, roomy.cache_mb, roomy.alone_mb) == (4, 200.0, 200.0)
    # Two workers with 50 MB of cache each: what is left is shared, and each cache shrinks.
    held = 10 * MiB
    data = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    limit = held + 2 * (rbf_search.WORKER_BYTES + data + problem + 50 * MiB)
    two = rbf_search.search_memory("f", X, limit, held, 2)
    assert two.jobs == 2 and two.cache_mb == pytest.approx(50.0)
    # Alone (the CV at the chosen point, the model on all rows), it may use all that is left.
    assert two.alone_mb == pytest.approx(min(200.0, (limit - held - problem) / MiB))
    # Room for one worker's cache only: the search runs in this process, its cache what is left.
    one = rbf_search.search_memory("f", X, held + problem + 5 * MiB, held, 4)
    assert (one.jobs, one.cache_mb) == (1, pytest.approx(5.0))
    # Not even LIBSVM's copy of the rows fits: refused, with the figures and what to do.
    with pytest.raises(KcheckError) as e:
        rbf_search.search_memory("f.svm", X, held + problem // 2, held, 2)
    text = str(e.value)
    assert text.startswith("f.svm: the RBF grid search needs about")
    assert "a smaller --max-rows or a larger --memory-limit" in text
