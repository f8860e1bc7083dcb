"""Degree-2's cost budget on large data: a smaller share, no step down at the threshold, and no
skip where the full share would run it."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from kcheck import budget
from kcheck.checkers import degree2
from kcheck.checkers.base import Dataset
from kcheck.checkers.degree2 import COST_FACTOR, LARGE_COST_FACTOR, MIN_COST_NNZ, cost_budget


def test_below_large_data_the_budget_is_a_third_of_the_values() -> None:
    for nnz in (0, 10_000, 300_000, 1_500_000, budget.LARGE_NNZ):
        assert cost_budget(nnz) == int(max(COST_FACTOR * nnz, MIN_COST_NNZ))


def test_large_data_gets_a_smaller_share_and_the_budget_never_falls() -> None:
    large = budget.LARGE_NNZ
    # From the threshold to 8/3 of it the budget stays at the threshold's ...
    assert cost_budget(large + 1) == cost_budget(int(2.6 * large)) == cost_budget(large)
    # ... and beyond it grows as an eighth of T's values.
    assert cost_budget(5_229_108) == int(5_229_108 / 8)  # covtype-like T
    grid = np.linspace(0, 20 * large, 2001).astype(int)
    budgets = np.array([cost_budget(int(n)) for n in grid])
    assert np.all(np.diff(budgets) >= 0)
    assert np.all(budgets <= np.maximum(COST_FACTOR * grid, MIN_COST_NNZ) + 1)


def test_the_smaller_share_does_not_skip_the_checker() -> None:
    """Webspam-like rows (84 values, 3,654 expanded): where a third of T affords the 1,000 rows
    below which degree-2 is skipped, the budget keeps them."""
    row = 84 + 84 * 85 // 2
    for rows_t in (150_000, 200_000, 260_000):
        nnz = 84 * rows_t
        assert int(COST_FACTOR * nnz) >= degree2.MIN_ROWS * row  # the full share runs it
        assert LARGE_COST_FACTOR * nnz < degree2.MIN_ROWS * row  # an eighth would not
        assert cost_budget(nnz, row) == degree2.MIN_ROWS * row
    # Where even the full share cannot afford them, nothing is added: it is skipped as before.
    assert cost_budget(84 * 100_000, row) == cost_budget(84 * 100_000) == 84 * 100_000 // 8
    # Without a row size, or with small rows, the share alone counts.
    assert cost_budget(5_229_108, 90.0) == cost_budget(5_229_108) == int(5_229_108 / 8)


def test_the_threshold_is_a_binary_baseline_of_five_counted_seconds() -> None:
    assert abs(budget.linear_seconds(budget.LARGE_NNZ, 2) - budget.LARGE_SECONDS) < 1e-5


def test_the_checker_plans_its_subsample_from_the_budget() -> None:
    """On a large T the planned subsample is smaller than the small-data share would give."""
    rng = np.random.default_rng(0)
    rows, n = 180_000, 12  # 2.16 million values in T: large data
    X = sp.random(rows, n, density=1.0, format="csr", random_state=1)
    y = np.where(rng.random(rows) < 0.5, 1.0, -1.0)
    T = Dataset(X, y)
    old = degree2.plan_rows(
        T, 2, degree2.Degree2Options(max_cost_nnz=int(COST_FACTOR * X.nnz), memory_limit=2**32)
    )
    new = degree2.plan_rows(
        T, 2, degree2.Degree2Options(max_cost_nnz=cost_budget(X.nnz), memory_limit=2**32)
    )
    assert old.limited_by == new.limited_by == "cost"
    assert new.rows == int(cost_budget(X.nnz) // degree2.row_expanded_nnz(X).mean())
    assert abs(new.rows / old.rows - 0.77) < 0.01  # 2.16 M is below 8/3 of the threshold
