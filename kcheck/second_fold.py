"""The second fold: where a borderline verdict on small data hangs on one split, the checkers
whose interval contains epsilon are measured again on another (kcheck.verdict.remeasure says
which). This module holds the split and the record; kcheck.pipeline trains on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck import seeds
from kcheck.checkers.base import CheckerResult, Dataset
from kcheck.split import stratified_split
from kcheck.verdict import Gap, mean_gap


@dataclass
class SecondFold:
    """The second fold: the linear baseline and the re-measured checkers trained on T2 (T
    less a stratified part the size of V, plus V) and scored on that part, V2."""

    train: int
    validation: int
    #: The re-measured checkers' gaps on V (the first fold), in the order the user listed them.
    first: dict[str, Gap]
    results: dict[str, CheckerResult]
    gaps: dict[str, Gap]
    values: dict[str, float | None]
    #: Why the second fold did not count (None: it did).
    reason: str | None = None
    seconds: float = 0.0

    def combined(self) -> dict[str, Gap]:
        """The mean of both folds' gaps, for each checker that finished on both."""
        return {n: mean_gap(self.first[n], g) for n, g in self.gaps.items() if n in self.first}

    def to_json(self) -> dict[str, Any]:
        base = self.results.get("linear")

        def checker(name: str) -> dict[str, Any]:
            r = self.results.get(name)
            gap, first = self.gaps.get(name), self.first.get(name)
            return {
                "status": "skipped" if r is None else r.status,
                "reason": self.reason if r is None else r.reason,
                "val_score": self.values.get(name),
                "val_accuracy": None if r is None else r.val_accuracy,
                "gap": None if gap is None else gap.value,
                "gap_ci95": None if gap is None else [gap.low, gap.high],
                "first_fold_gap": None if first is None else first.value,
                "first_fold_gap_ci95": None if first is None else [first.low, first.high],
                "seconds": 0.0 if r is None else r.seconds,
            }

        return {
            "used": self.reason is None,
            "reason": self.reason,
            "train": self.train,
            "validation": self.validation,
            "linear": None
            if base is None
            else {
                "val_score": self.values.get("linear"),
                "val_accuracy": base.val_accuracy,
                "C": base.info["C"],
                "seconds": base.seconds,
            },
            "checkers": {n: checker(n) for n in self.first},
            "seconds": self.seconds,
        }


def second_split(
    T: Dataset, V: Dataset, split: tuple[np.ndarray, np.ndarray], seed: int
) -> tuple[Dataset, Dataset]:
    """T2 and V2: a stratified part of T the size of V becomes V2, and V joins the rest of T.

    T2's rows keep the file's order, as T's do (LIBLINEAR's results depend on it). Copies
    T's rows once more: only where what the first measurement left of the check's budget
    holds the linear baseline on T's counts (kcheck.plan.Plan.affords_second_fold: at most
    about 4M stored values in T) does a check get here.
    """
    train_idx, val_idx = split
    keep, part = stratified_split(
        T.y,
        seed=seed,
        stream=seeds.SECOND_SPLIT,
        validation_fraction=V.rows / T.rows,
    )
    origin = np.concatenate([train_idx[keep], val_idx])
    order = np.argsort(origin, kind="stable")
    X2 = sp.vstack([T.X[keep], V.X], format="csr")[order]
    X2.sort_indices()
    y2 = np.concatenate([T.y[keep], V.y])[order]
    return Dataset(X2, y2), Dataset(T.X[part], T.y[part])
