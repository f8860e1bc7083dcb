"""The checkers' contract: a checker is ``run(T, V, ctx) -> CheckerResult``, training on T only and
scoring on V only. Everything else it needs (seed, jobs, memory, deadline, progress, the baseline's
facts) is in ``ctx``, so a new checker threads no parameter through the pipeline."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

import numpy as np
import scipy.sparse as sp

from kcheck.defaults import Event, Progress, no_progress
from kcheck.errors import KcheckError, TimeLimitReached
from kcheck.memory import csr_bytes
from kcheck.parallel.workers import process_cpu_seconds
from kcheck.scoring import ACCURACY, PointResults, Scoring, positive_scores
from kcheck.split import stratified_subsample
from kcheck.tuning import linear_c
from kcheck.verdict import accuracy

#: ``ok``: all of T; ``subsampled``: part; ``skipped``: unfinished; ``exact``: CV on all rows.
Status = Literal["ok", "subsampled", "skipped", "exact"]


@dataclass
class Dataset:
    """Rows of a scaled data set: a float64 CSR matrix with sorted indices and its labels."""

    X: sp.csr_matrix
    y: np.ndarray

    @property
    def rows(self) -> int:
        return int(self.X.shape[0])


@dataclass(frozen=True)
class Counts:
    """What a plan is decided from: counts of T and V, never a clock or model."""

    rows: int
    val_rows: int
    nnz: int
    val_nnz: int
    n_classes: int
    features: int
    #: Values of T's degree-2 expansion: k + k(k+1)/2 for a row of k stored values.
    expanded_nnz: int = 0
    #: Bytes of T's and V's CSR arrays.
    data_bytes: int = 0
    val_bytes: int = 0
    #: Classes of T and V together (the exact comparison trains on both).
    all_classes: int = 0

    @classmethod
    def of(cls, T: Dataset, V: Dataset) -> Counts:
        k = np.diff(T.X.indptr).astype(np.int64)
        return cls(
            rows=T.rows,
            val_rows=V.rows,
            nnz=int(T.X.nnz),
            val_nnz=int(V.X.nnz),
            n_classes=int(np.unique(T.y).size),
            features=int(T.X.shape[1]),
            expanded_nnz=int((k + k * (k + 1) // 2).sum()),
            data_bytes=csr_bytes(T.X),
            val_bytes=csr_bytes(V.X),
            all_classes=int(np.unique(np.concatenate([T.y, V.y])).size),
        )

    @property
    def all_rows(self) -> int:
        return self.rows + self.val_rows

    @property
    def all_nnz(self) -> int:
        return self.nnz + self.val_nnz


@dataclass(frozen=True)
class Allowance:
    """What the plan gives one method to size itself within: memory beyond the data, and what
    earlier methods left of its counted budget (None: none). Under ``--time-limit``
    (kcheck.plan.resized), also the seconds left and the baseline's time here: the one clock reading
    a size may read."""

    memory_limit: int
    budget_seconds: float | None = None
    seconds_left: float | None = None
    linear_seconds: float | None = None

    def bound(self) -> tuple[float, str]:
        """The counted budget, or the time left where ``--time-limit`` leaves less, and which."""
        budget = self.budget_seconds or 0.0
        if self.seconds_left is not None and self.seconds_left < budget:
            return max(self.seconds_left, 0.0), "the time left before the time limit"
        return budget, "the budget"


@dataclass(frozen=True)
class Sized:
    """What a method will do with its allowance, from counts: rows of T (0: skipped, with
    ``reason``), what cut them (``limited_by``: memory, cost or time), bytes it allocates beyond the
    data (None: unknown, so never beside the baseline), counted seconds, and ``sizing``, its own
    record that ``run`` obeys without re-sizing (None: all of T as it is)."""

    rows: int
    reason: str | None = None
    limited_by: str | None = None
    bytes: int | None = None
    #: What it will spend of the check's budget (0 where it is skipped) ...
    counted_seconds: float = 0.0
    #: ... and its estimate, run or not (None: it has none).
    estimated_seconds: float | None = None
    sizing: Any = None


S = TypeVar("S")


def sizing_of(sized: Sized, kind: type[S]) -> S:
    """The method's own record in ``sized``; another's (or none) is a plan bug."""
    if not isinstance(sized.sizing, kind):
        raise TypeError(f"expected a {kind.__name__} from the plan, got {sized.sizing!r}")
    return sized.sizing


Predictor = Callable[[sp.csr_matrix], np.ndarray]


class Predicts(Protocol):
    """A trained model: labels for rows, and optionally labels with decision values."""

    def predict(self, X: sp.csr_matrix) -> np.ndarray: ...


class Pieces(Predicts, Protocol):
    """A model of linear pieces (MultiLinear, mixlinear): labels, calibrated probabilities."""

    def predict_scored(self, X: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray | None]: ...


@dataclass
class CheckerResult:
    """What a method achieved on V, plus a predictor for other data (``--test``). Per V point:
    ``predicted``, ``correct`` (1/0, or exact's fraction of repeats), and for two classes ``scores``
    for the larger label where comparable (else None). ``info``: method-specific JSON fields."""

    name: str
    status: Status
    reason: str | None = None
    val_accuracy: float | None = None
    correct: np.ndarray | None = None
    seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    predict: Predictor | None = None
    cv_accuracy: float | None = None
    #: Per-point correctness on V of the linear reference, when not the baseline (a subsample's).
    reference_correct: np.ndarray | None = None
    #: That reference's per-point scores (``--metric auc``).
    reference_scores: np.ndarray | None = None
    #: Labels of the points ``correct`` is about, when not V's (exact scores every row by CV).
    truth: np.ndarray | None = None
    predicted: np.ndarray | None = None
    scores: np.ndarray | None = None
    #: The trained model itself, where a consumer reads more than predictions (``--explain``).
    model: Any = None
    #: Counted seconds (kcheck.costs.budget) it spent. Not in the JSON (the plan holds them).
    counted_seconds: float = 0.0
    #: CPU seconds it took here (:func:`cpu_seconds`); None where not measured.
    cpu_seconds: float | None = None

    @classmethod
    def skipped(cls, name: str, reason: str, seconds: float = 0.0) -> CheckerResult:
        return cls(name=name, status="skipped", reason=reason, seconds=seconds)

    @classmethod
    def scored(
        cls, name: str, s: Scored, started: float, predict: Predictor, **fields: Any
    ) -> CheckerResult:
        """A method that trained: V scores, predictor, seconds since ``started`` (perf_counter)."""
        fields.setdefault("status", "ok")
        return cls(
            name=name,
            val_accuracy=s.accuracy,
            correct=s.correct,
            predicted=s.predicted,
            scores=s.scores,
            seconds=time.perf_counter() - started,
            predict=predict,
            **fields,
        )

    @classmethod
    def of_pieces(
        cls, name: str, pieces: Pieces, V: Dataset, started: float, **fields: Any
    ) -> CheckerResult:
        """:meth:`scored` for linear pieces: calibrated probabilities or none (scales differ)."""
        predicted, probs = pieces.predict_scored(V.X)
        correct = predicted == V.y
        s = Scored(accuracy(correct), correct, predicted, probs)
        return cls.scored(name, s, started, pieces.predict, **fields)

    @property
    def points(self) -> PointResults | None:
        """This model's per-point results, for the metric (None if it did not finish)."""
        if self.correct is None:
            return None
        return PointResults(self.correct, self.scores)

    @property
    def reference_points(self) -> PointResults | None:
        """The per-point results of the linear model trained on the same rows, if any."""
        if self.reference_correct is None:
            return None
        return PointResults(self.reference_correct, self.reference_scores)


@dataclass(frozen=True)
class Context:
    """What the run gives every checker: settings, limits, and the linear baseline's facts.

    ``memory_limit``: what it may allocate beyond the data in memory. ``deadline``: a
    ``time.perf_counter()`` value (``--time-limit``) or None. What it trains on comes from the plan
    as its :class:`Sized`. ``baseline`` is None while the baseline still runs beside early checkers
    (:func:`kcheck.plan.early`); read it through :meth:`linear`, which waits."""

    seed: int
    jobs: int
    epsilon: float
    memory_limit: int
    deadline: float | None
    baseline: CheckerResult | None
    progress: Progress = no_progress
    #: The metric, and the class weights every model of the run trains with.
    scoring: Scoring = ACCURACY
    #: While the baseline trains beside the checkers: waits for it and returns it.
    await_baseline: Callable[[], CheckerResult] | None = None

    @property
    def class_weight(self) -> tuple[tuple[float, float], ...] | None:
        return self.scoring.class_weight

    def linear(self) -> CheckerResult:
        """The linear baseline's result; an error for a checker run before it finished."""
        if self.baseline is not None:
            return self.baseline
        if self.await_baseline is not None:
            return self.await_baseline()
        raise RuntimeError("the linear baseline has not finished")

    @property
    def baseline_C(self) -> float:
        return float(self.linear().info["C"])

    def seconds_left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.perf_counter()


@dataclass
class Scored:
    """One model's predictions on V, point by point."""

    accuracy: float
    correct: np.ndarray
    predicted: np.ndarray
    scores: np.ndarray | None


def score(model: Predicts | Predictor, V: Dataset) -> Scored:
    """Predict V once: labels, correctness, and for two classes larger-label decision values."""
    scored = getattr(model, "predict_scored", None)
    scores = None
    if scored is not None:
        predicted, dec = scored(V.X)
        labels = getattr(model, "labels", None)
        if labels is not None:
            scores = positive_scores(labels, dec)
    else:
        predict = model if callable(model) and not hasattr(model, "predict") else model.predict
        predicted = predict(V.X)
    correct = predicted == V.y
    return Scored(accuracy(correct), correct, predicted, scores)


def past(deadline: float | None) -> bool:
    """Whether ``deadline`` (perf_counter; None: none) passed: the one clock read of a checker."""
    return deadline is not None and time.perf_counter() >= deadline


def stop_if_past(deadline: float | None, what: str) -> None:
    """Raise TimeLimitReached(``what``) once ``deadline`` passed (:func:`guarded` skips it)."""
    if past(deadline):
        raise TimeLimitReached(what)


@dataclass
class SearchThenStage:
    """Progress over an RBF grid search's points, then over the stage after it (exact's repeats,
    rbfsvm's trainings), announced with its predicted seconds, and the time limit between steps.
    Steps count on from the search; each stage shows its own count."""

    report: Progress
    deadline: float | None
    #: How the time limit names the checker (``exact comparison``).
    what: str
    stage: str
    #: The steps of the search and the stage together.
    total: int
    #: The search's own total where the next stage is separate (None: one stage of ``total`` steps).
    search_points: int | None = None
    #: What the search (or the whole run, where it is one stage) counts ...
    unit: str = "grid points"
    offset: int = 0
    predicted: float | None = None

    def tick(self, done: int, note: str | None = None) -> None:
        """``done`` steps in; ``note``: why the stage did less than announced (its "done" line)."""
        searching = self.offset == 0
        total = self.search_points if searching and self.search_points is not None else self.total
        self.report(
            Event(
                self.stage,
                done - self.offset,
                total - self.offset,
                self.unit,
                self.predicted,
                note=note,
            )
        )

    def then(self, stage: str, done: int, predicted_seconds: float, unit: str) -> None:
        """From the search, ``done`` steps in, to ``stage`` (counting ``unit``), predicted."""
        self.stage, self.offset, self.unit = stage, done, unit
        self.predicted = round(predicted_seconds, 3)
        self.tick(done)

    def check_time(self) -> None:
        stop_if_past(self.deadline, self.what)


def guarded(name: str, deadline: float | None, fn: Callable[[], CheckerResult]) -> CheckerResult:
    """Run a checker; an engine failure, MemoryError or the time limit skips it, not the check. Its
    CPU seconds (workers included) go into the result."""
    t0, c0 = time.perf_counter(), cpu_seconds()
    if past(deadline):
        return CheckerResult.skipped(name, "time limit", 0.0)
    try:
        result = fn()
    except TimeLimitReached:
        result = CheckerResult.skipped(name, "time limit", time.perf_counter() - t0)
    except MemoryError:
        result = CheckerResult.skipped(name, "ran out of memory", time.perf_counter() - t0)
    except KcheckError as e:
        result = CheckerResult.skipped(name, str(e), time.perf_counter() - t0)
    result.cpu_seconds = cpu_seconds() - c0
    return result


def cpu_seconds() -> float:
    """CPU seconds of this process, ended children, pools and stoppable workers
    (process_cpu_seconds)."""
    return process_cpu_seconds()


@dataclass
class SampleReference:
    """A stratified sample of T and a linear model tuned and trained on it, scored on V: the
    reference for a checker trained on that sample, not on all of T."""

    data: Dataset
    correct: np.ndarray
    scores: np.ndarray | None
    #: The JSON's ``reference`` block: the sample's rows, the linear model's accuracy and C.
    info: dict[str, object]

    def fill(self, result: CheckerResult) -> CheckerResult:
        """``result`` with this reference as its gap's."""
        result.reference_correct = self.correct
        result.reference_scores = self.scores
        result.info["reference"] = self.info
        return result


def stratified_sample(T: Dataset, rows: int, *, seed: int) -> Dataset:
    """A stratified sample of ``rows`` rows of T (kcheck.split.stratified_subsample)."""
    keep = stratified_subsample(T.y, rows, seed=seed)
    return Dataset(T.X[keep], T.y[keep])


def sample_reference(
    S: Dataset, V: Dataset, *, seed: int, class_weight: Any = None
) -> SampleReference:
    """The :class:`SampleReference` of the sample ``S``: a linear model tuned on it, scored on V."""
    ref, _ = linear_c.fit_linear(S.X, S.y, seed=seed, class_weight=class_weight)
    scored = score(ref, V)
    info: dict[str, object] = {"rows": S.rows, "val_accuracy": scored.accuracy, "C": ref.C}
    return SampleReference(S, scored.correct, scored.scores, info)
