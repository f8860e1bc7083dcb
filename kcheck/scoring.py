"""What a method's score is: accuracy, balanced accuracy or AUC (``--metric``). One :class:`Scoring`
per run, made from T's labels, sets every model's class weights (``-wi``) and turns per-point
results into a score and a paired gap with its 95% interval. The rule never sees the metric: epsilon
is in the metric's units."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kcheck import metrics
from kcheck.defaults import DEFAULT_METRIC, METRICS
from kcheck.errors import KcheckError
from kcheck.verdict import Gap, interval_floor, paired_gap

#: Per-class multipliers of C: ((label, weight), ...), as the engines take them.
ClassWeight = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class PointResults:
    """One model on a set of points: 1/0 (or a fraction of repeats) right, and for two classes each
    point's larger-label score where it has one."""

    correct: np.ndarray
    scores: np.ndarray | None = None


@dataclass(frozen=True)
class Scoring:
    """The run's metric and the class weights its models train with. ``classes``: label values as
    models see them (sorted); ``class_weight`` None under ``accuracy`` (unweighted training)."""

    metric: str = DEFAULT_METRIC
    classes: tuple[float, ...] = ()
    class_weight: ClassWeight | None = None

    @classmethod
    def for_training(cls, metric: str, y: np.ndarray, classes: np.ndarray) -> Scoring:
        """Weights n / (k n_c) from training labels ``y``, shared by all the run's models."""
        validate_metric(metric, int(np.asarray(classes).size))
        values = tuple(float(c) for c in np.sort(np.asarray(classes, dtype=np.float64)))
        if metric == "accuracy":
            return cls(metric, values, None)
        codes = np.searchsorted(np.asarray(values), np.asarray(y, dtype=np.float64))
        w = metrics.class_weights(codes, len(values))
        weight = tuple((v, float(w[i])) for i, v in enumerate(values) if w[i] > 0)
        return cls(metric, values, weight)

    @property
    def weighted(self) -> bool:
        return self.class_weight is not None

    @property
    def needs_scores(self) -> bool:
        """Whether every model must give per-point scores (AUC ranks them)."""
        return self.metric == "auc"

    @property
    def positive(self) -> float:
        """The label AUC calls positive: the larger (only the scores' direction depends on it)."""
        return self.classes[-1] if self.classes else 1.0

    def value(self, y: np.ndarray, r: PointResults) -> float:
        """The metric of one model on points with labels ``y``."""
        if self.metric == "auc":
            return float(metrics.auc(self._positive_mask(y), self._scores(r)))
        if self.metric == "balanced":
            w = self._point_weights(y)
            return float(np.sum(w * np.asarray(r.correct, dtype=np.float64)) / np.sum(w))
        c = np.asarray(r.correct, dtype=np.float64)
        return float(c.mean()) if c.size else float("nan")

    def gap(self, y: np.ndarray, checker: PointResults, linear: PointResults) -> Gap:
        """Metric(checker) - metric(linear) on the same points with its paired 95% interval
        (weighted per point for balanced accuracy; DeLong's for AUC)."""
        if self.metric == "auc":
            d, (low, high) = metrics.auc_gap(
                self._positive_mask(y), self._scores(checker), self._scores(linear)
            )
            half = max((high - low) / 2, interval_floor(float(np.size(y))))
            return Gap(d, min(low, d - half), max(high, d + half))
        weights = self._point_weights(y) if self.metric == "balanced" else None
        return paired_gap(checker.correct, linear.correct, weights=weights)

    def value_on_file(
        self, y: np.ndarray, predicted: np.ndarray, scores: np.ndarray | None
    ) -> float | None:
        """The metric on a test file from class indices (-1: unseen in training). Under accuracy
        such rows are wrong (for every model); balanced accuracy and AUC cover training's classes.
        None where undefined (no rows, or AUC with one class)."""
        y = np.asarray(y)
        if y.size == 0:
            return None
        correct = np.asarray(predicted) == y
        if self.metric == "accuracy":
            return float(np.mean(correct))
        seen = y >= 0
        labels = np.asarray(self.classes)[y[seen]]
        kept = None if scores is None else np.asarray(scores)[seen]
        try:
            return self.value(labels, PointResults(correct[seen], kept))
        except KcheckError:
            return None

    def _point_weights(self, y: np.ndarray) -> np.ndarray:
        codes = np.searchsorted(np.asarray(self.classes), np.asarray(y, dtype=np.float64))
        return np.asarray(metrics.point_weights(codes, len(self.classes)), dtype=np.float64)

    def _positive_mask(self, y: np.ndarray) -> np.ndarray:
        return np.asarray(np.asarray(y) == self.positive, dtype=bool)

    def _scores(self, r: PointResults) -> np.ndarray:
        if r.scores is None:
            raise KcheckError("this model gives no scores to rank, so it has no AUC")
        return np.asarray(r.scores, dtype=np.float64)


ACCURACY = Scoring()


def validate_metric(metric: str, n_classes: int | None = None) -> None:
    """``--metric`` is one of METRICS; AUC is defined here for two classes only."""
    if metric not in METRICS:
        raise KcheckError(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if metric == "auc" and n_classes is not None and n_classes != 2:
        raise KcheckError(
            f"--metric auc needs two classes, and the data has {n_classes}; use --metric "
            "balanced for more than two"
        )


def oriented(
    model: Any,
) -> Callable[[Any], tuple[np.ndarray, np.ndarray | None]]:
    """A model's block predictor: labels and, for two classes, each row's larger-label score:
    decision values from ``predict_scored`` oriented by ``labels``, or the model's own one score a
    row (MultiLinear's probabilities); without ``predict_scored``, labels only."""
    scored = getattr(model, "predict_scored", None)
    labels = getattr(model, "labels", None)

    def predict(X: Any) -> tuple[np.ndarray, np.ndarray | None]:
        if scored is None:
            return np.asarray(model.predict(X)), None
        predicted, dec = scored(X)
        if dec is None:
            return predicted, None
        if labels is not None:
            return predicted, positive_scores(labels, dec)
        d = np.asarray(dec)
        return predicted, d if d.ndim == 1 else None

    return predict


def positive_scores(labels: np.ndarray, dec: np.ndarray | None) -> np.ndarray | None:
    """Decision values for the larger of two labels (the library's single value means ``labels[0]``,
    first met in training); None beyond two classes or without values."""
    if dec is None:
        return None
    labels = np.asarray(labels)
    d = np.asarray(dec, dtype=np.float64)
    if labels.size != 2 or (d.ndim == 2 and d.shape[1] != 1):
        return None
    d = d.reshape(-1)
    return d if labels[0] > labels[1] else -d
