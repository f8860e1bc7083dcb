"""The second fold: where a borderline small-data verdict hangs on one split, checkers whose
interval contains epsilon are measured again on another (kcheck.verdict.remeasure). The split and
the record; kcheck.pipeline trains."""

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
    """The second fold: the baseline and re-measured checkers trained on T2 and scored on V2."""

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
    """T2 and V2: a stratified part of T the size of V becomes V2; V joins the rest of T. T2 keeps
    the file's row order (LIBLINEAR depends on it). Copies T's rows once more, so only where the
    budget affords it (kcheck.plan.Plan.affords_second_fold)."""
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
