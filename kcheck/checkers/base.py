"""Shared types of the checkers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp


@dataclass
class Dataset:
    """Rows of a scaled data set: a float64 CSR matrix with sorted indices and its labels."""

    X: sp.csr_matrix
    y: np.ndarray

    @property
    def rows(self) -> int:
        return int(self.X.shape[0])


Predictor = Callable[[sp.csr_matrix], np.ndarray]


@dataclass
class CheckerResult:
    """What a method achieved on V, plus a predictor to score other data (e.g. ``--test``).

    ``correct`` is the per-point correctness on V, kept for the paired interval of the gap.
    ``info`` holds method-specific JSON fields (C, K, dimension, ...).
    """

    name: str
    status: str  # "ok" | "subsampled" | "skipped"
    reason: str | None = None
    val_accuracy: float | None = None
    correct: np.ndarray | None = None
    seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    predict: Predictor | None = None
    cv_accuracy: float | None = None
    #: Per-point correctness on V of the linear model the gap is measured against, when it
    #: is not the baseline (e.g. a linear model trained on the same subsample).
    reference_correct: np.ndarray | None = None

    @classmethod
    def skipped(cls, name: str, reason: str, seconds: float = 0.0) -> CheckerResult:
        return cls(name=name, status="skipped", reason=reason, seconds=seconds)


def score(predict: Predictor, V: Dataset) -> tuple[float, np.ndarray]:
    """Accuracy on V and the per-point correctness vector."""
    correct = predict(V.X) == V.y
    return float(correct.mean()) if correct.size else float("nan"), correct
