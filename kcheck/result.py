"""``check`` and ``verify`` results as typed objects, and the one place they become JSON
(``kcheck.verdict.SCHEMA_VERSION``; fields in ``docs/json.md``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kcheck import __version__
from kcheck.checkers.base import CheckerResult
from kcheck.prepare import scaling_json
from kcheck.scaling.fitting import Scaler
from kcheck.scoring import ACCURACY, Scoring
from kcheck.verdict import (
    SCHEMA_VERSION,
    Decision,
    Gap,
    Margin,
    Verdict,
    json_number,
    json_parameter,
)

#: Method parameters are exact (for ``svm-train``/``liblinear-train``); others 6 digits.
PARAMETER_KEYS = frozenset({"C", "gamma", "linear_C"})


def _seconds(x: float) -> float | None:
    return json_number(x)


@dataclass(kw_only=True)
class _Finished:
    """What a finished ``check`` and ``verify`` both hold: the rule's decision, the settings it was
    made with, the data and its scaling, the test file's facts, the warnings and the clock."""

    decision: Decision
    epsilon: float
    seed: int
    data: dict[str, Any]
    scaler: Scaler
    test: dict[str, Any] | None
    warnings: list[str]
    started: float
    #: The metric and class weights of the run.
    scoring: Scoring = ACCURACY
    finished: float = field(default_factory=time.perf_counter)

    @property
    def verdict(self) -> Verdict:
        return self.decision.verdict

    @property
    def margin(self) -> Margin:
        return self.decision.margin


@dataclass
class CheckResult(_Finished):
    """A finished check: the decision, what every method scored, and the run's facts."""

    split: tuple[int, int]
    baseline: CheckerResult
    #: name -> (result, gap against linear or None if unfinished), in the user's order, exact last.
    checkers: dict[str, tuple[CheckerResult, Gap | None]]
    exact: dict[str, Any]
    read_seconds: float
    model: dict[str, Any] | None = None
    #: ``--explain``'s block (kcheck.terms.explain), JSON-ready; absent from the JSON without it.
    explain: dict[str, Any] | None = None
    #: Each model's score in the run's metric.
    values: dict[str, float | None] = field(default_factory=dict)
    #: The second fold's block (kcheck.second_fold.SecondFold.to_json), where one ran.
    second_fold: dict[str, Any] | None = None
    #: What ran, on which rows and budget, in which role (kcheck.plan.Plan.to_json).
    plan: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        base = self.baseline
        return {
            "schema_version": SCHEMA_VERSION,
            "kcheck_version": __version__,
            "verdict": self.decision.verdict,
            "margin": self.decision.margin,
            "deciding_checker": self.decision.deciding,
            "decision": self.decision.to_json(),
            "epsilon": self.epsilon,
            "metric": self.scoring.metric,
            "class_weights": class_weights_json(self.scoring),
            "seed": self.seed,
            "data": self.data,
            "scaling": scaling_json(self.scaler),
            "split": {"train": self.split[0], "validation": self.split[1], "stratified": True},
            "linear": {
                "val_score": json_number(self.values.get("linear")),
                "val_accuracy": json_number(base.val_accuracy),
                "cv_accuracy": json_number(base.cv_accuracy),
                "C": json_parameter(base.info["C"]),
                "seconds": _seconds(base.seconds),
                "cpu_seconds": None if base.cpu_seconds is None else _seconds(base.cpu_seconds),
                # Wall seconds the check's other work ran beside it (0: it trained alone).
                "beside_seconds": _seconds(base.seconds if base.info.get("beside") else 0.0),
            },
            "checkers": {
                n: _checker_json(r, g, self.values.get(n) if r.correct is not None else None)
                for n, (r, g) in self.checkers.items()
            },
            "exact": _json_value(self.exact),
            "second_fold": _json_value(self.second_fold),
            "plan": _json_value(self.plan),
            "test": None if self.test is None else _test_json(self.test),
            "model": self.model,
            **({} if self.explain is None else {"explain": self.explain}),
            "warnings": self.warnings,
            "read_seconds": _seconds(self.read_seconds),
            "seconds": _seconds(self.finished - self.started),
        }


def class_weights_json(
    weights: Scoring | tuple[tuple[float, float], ...] | None,
) -> dict[str, float] | None:
    """``{label: weight}`` of the ``-wi`` options every model trained with; None: unweighted."""
    if isinstance(weights, Scoring):
        weights = weights.class_weight
    if weights is None:
        return None
    return {_label_key(v): json_number(w) or 0.0 for v, w in weights}


def _label_key(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _checker_json(r: CheckerResult, gap: Gap | None, value: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {"status": r.status, "reason": r.reason}
    out["val_score"] = json_number(value)
    out["val_accuracy"] = json_number(r.val_accuracy)
    out["gap"] = json_number(gap.value) if gap else None
    out["gap_ci95"] = [json_number(gap.low), json_number(gap.high)] if gap else None
    for key, value in r.info.items():
        out[key] = json_parameter(value) if key in PARAMETER_KEYS else _json_value(value)
    if r.cv_accuracy is not None:
        out["cv_accuracy"] = json_number(r.cv_accuracy)
    out["seconds"] = _seconds(r.seconds)
    return out


def _test_json(test: dict[str, Any]) -> dict[str, Any]:
    """The test file's facts, then each model's accuracy on it under ``accuracy``."""
    return {
        "path": test["path"],
        "sha256": test["sha256"],
        "rows": test["rows"],
        "seconds": _seconds(test["seconds"]),
        "accuracy": {k: json_number(v) for k, v in test["accuracy"].items()},
        "score": {k: json_number(v) for k, v in test["score"].items()},
    }


def _json_value(value: Any) -> Any:
    if isinstance(value, float):
        return json_number(value)
    if isinstance(value, dict):
        return {
            k: json_parameter(v) if k in PARAMETER_KEYS else _json_value(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value


@dataclass
class VerifyResult(_Finished):
    """A finished ``kcheck verify``: both models' CV results and the rule's decision."""

    gap: Gap
    folds: int
    linear: dict[str, Any]
    rbf: dict[str, Any]
    test_gap: float | None
    check: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        lin, rbf = self.linear, self.rbf
        return {
            "schema_version": SCHEMA_VERSION,
            "kcheck_version": __version__,
            "kind": "verify",
            "seed": self.seed,
            "folds": self.folds,
            "data": self.data,
            "scaling": scaling_json(self.scaler),
            "metric": self.scoring.metric,
            "class_weights": class_weights_json(self.scoring),
            "linear": {
                "cv_score": json_number(lin["cv_score"]),
                "cv_accuracy": json_number(lin["cv_accuracy"]),
                "C": json_parameter(lin["C"]),
                "seconds": _seconds(lin["seconds"]),
                "test_accuracy": json_number(lin["test_accuracy"]),
                "test_score": json_number(lin["test_score"]),
            },
            "rbf": {
                "cv_score": json_number(rbf["cv_score"]),
                "cv_accuracy": json_number(rbf["cv_accuracy"]),
                "C": json_parameter(rbf["C"]),
                "gamma": json_parameter(rbf["gamma"]),
                "grid_points": rbf["grid_points"],
                "seconds": _seconds(rbf["seconds"]),
                "test_accuracy": json_number(rbf["test_accuracy"]),
                "test_score": json_number(rbf["test_score"]),
            },
            "test": self.test,
            "gap": json_number(self.gap.value),
            "gap_ci95": [json_number(self.gap.low), json_number(self.gap.high)],
            "test_gap": json_number(self.test_gap),
            "epsilon": self.epsilon,
            "verdict": self.decision.verdict,
            "margin": self.decision.margin,
            "check": self.check,
            "confirms": None if self.check is None else self.check["verdict"] == self.verdict,
            # Agreeing verdicts that are both borderline settle nothing: the words say so.
            "both_borderline": None
            if self.check is None
            else self.check.get("margin") == "borderline" == self.decision.margin,
            "warnings": self.warnings,
            "seconds": _seconds(self.finished - self.started),
        }
