"""The typed results and their JSON (kcheck/result.py), built from real checker results."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from conftest import DATASETS

from kcheck import __version__, pipeline, verify
from kcheck.checkers import registry
from kcheck.checkers.base import CheckerResult
from kcheck.config import CheckConfig
from kcheck.errors import KcheckError
from kcheck.result import PARAMETER_KEYS, CheckResult, VerifyResult
from kcheck.tuning.rbf_grid import Grid
from kcheck.verdict import SCHEMA_VERSION, Decision, Gap, json_number


def sig6(x: float) -> float:
    """Six significant digits, as schema 2 writes every number but C and gamma."""
    return float(f"{x:.6g}")


HEART = str(DATASETS / "heart_scale")

CHECK_KEYS = {
    "metric",
    "class_weights",
    "schema_version",
    "kcheck_version",
    "verdict",
    "margin",
    "deciding_checker",
    "decision",
    "epsilon",
    "seed",
    "data",
    "scaling",
    "split",
    "linear",
    "checkers",
    "exact",
    "second_fold",
    "plan",
    "test",
    "model",
    "warnings",
    "read_seconds",
    "seconds",
}
VERIFY_KEYS = {
    "metric",
    "class_weights",
    "schema_version",
    "kcheck_version",
    "kind",
    "seed",
    "folds",
    "data",
    "scaling",
    "linear",
    "rbf",
    "test",
    "gap",
    "gap_ci95",
    "test_gap",
    "epsilon",
    "verdict",
    "margin",
    "check",
    "confirms",
    "both_borderline",
    "warnings",
    "seconds",
}


@pytest.fixture(scope="module")
def check() -> CheckResult:
    return pipeline.run(CheckConfig(train=HEART, exact="never")).result


@pytest.fixture(scope="module")
def verified() -> VerifyResult:
    return verify.run(verify.VerifyConfig(train=HEART, grid=Grid((1.0,), (-3.0,))))


def _gap(value: float, low: float, high: float) -> Gap:
    return Gap(value=value, low=low, high=high)


# --- CheckResult ----------------------------------------------------------------------------------


def test_check_json_keys_and_schema(check: CheckResult) -> None:
    out = check.to_json()
    assert set(out) == CHECK_KEYS
    assert out["schema_version"] == SCHEMA_VERSION == 3
    assert out["kcheck_version"] == __version__
    assert out["verdict"] == check.verdict and out["margin"] == check.margin
    assert out["deciding_checker"] == check.decision.deciding
    assert out["decision"] == check.decision.to_json()
    assert out["decision"]["deciding"] == out["deciding_checker"]
    assert out["split"] == {
        "train": check.split[0],
        "validation": check.split[1],
        "stratified": True,
    }
    assert sum(check.split) == 270
    assert set(out["linear"]) == {
        "val_score",
        "val_accuracy",
        "cv_accuracy",
        "C",
        "seconds",
        "cpu_seconds",
        "beside_seconds",
    }
    # Under accuracy the metric's score is the accuracy.
    assert out["metric"] == "accuracy" and out["class_weights"] is None
    assert out["linear"]["val_score"] == out["linear"]["val_accuracy"]
    assert out["exact"] == check.exact and out["exact"]["ran"] is False
    assert out["test"] is None and out["model"] is None
    json.dumps(out, allow_nan=False)  # valid JSON: no NaN or inf anywhere


def test_check_json_rounding_of_real_values(check: CheckResult) -> None:
    out = check.to_json()
    base = check.baseline
    assert out["linear"]["val_accuracy"] == sig6(base.val_accuracy)
    assert out["linear"]["cv_accuracy"] == sig6(base.cv_accuracy)
    assert out["linear"]["C"] == base.info["C"]  # exact: svm-train -c takes it as is
    assert out["linear"]["seconds"] == sig6(base.seconds)
    assert out["read_seconds"] == sig6(check.read_seconds)
    assert out["seconds"] == sig6(check.finished - check.started)
    for name, (r, gap) in check.checkers.items():
        block = out["checkers"][name]
        assert gap is not None
        assert block["val_accuracy"] == sig6(r.val_accuracy)
        assert block["gap"] == sig6(gap.value)
        assert block["gap_ci95"] == [sig6(gap.low), sig6(gap.high)]
        assert block["seconds"] == sig6(r.seconds)
        for key, value in r.info.items():
            if isinstance(value, float) and key in PARAMETER_KEYS:
                assert block[key] == value
            elif isinstance(value, float):
                assert block[key] == sig6(value)
            elif not isinstance(value, dict):
                assert block[key] == value


def test_checker_block_layout(check: CheckResult) -> None:
    out = check.to_json()
    for name, (r, _) in check.checkers.items():
        keys = list(out["checkers"][name])
        assert keys[:6] == ["status", "reason", "val_score", "val_accuracy", "gap", "gap_ci95"]
        assert keys[-1] == "seconds"
        assert set(r.info) <= set(keys)
        assert ("cv_accuracy" in keys) == (r.cv_accuracy is not None)


def _with_baseline(check: CheckResult, **changes: object) -> CheckResult:
    return dataclasses.replace(check, baseline=dataclasses.replace(check.baseline, **changes))


def test_rounding_digits(check: CheckResult) -> None:
    changed = _with_baseline(
        check,
        val_accuracy=0.12345678912,
        cv_accuracy=0.98765432198,
        seconds=1.234567891,
        cpu_seconds=0.987654321,
        info={"C": 0.012345678901234567, "beside": True},
    )
    out = changed.to_json()["linear"]
    assert out == {
        "val_score": sig6(check.values["linear"]),
        "val_accuracy": 0.123457,
        "cv_accuracy": 0.987654,
        "C": 0.012345678901234567,
        "seconds": 1.23457,
        "cpu_seconds": 0.987654,
        "beside_seconds": 1.23457,  # all of it: it trained beside the checkers
    }
    assert json_number(0.12345678912) == 0.123457


def test_checker_info_keeps_parameters_exact_and_rounds_the_rest(check: CheckResult) -> None:
    name = next(iter(check.checkers))
    r, gap = check.checkers[name]
    fake = dataclasses.replace(
        r,
        info={"C": 1 / 3, "nested": {"1": 2 / 3, "k": 5}, "count": 7, "text": "orthogonal"},
        seconds=0.000049,
        val_accuracy=2 / 3,
    )
    out = dataclasses.replace(check, checkers={name: (fake, gap)}).to_json()["checkers"][name]
    assert out["C"] == 1 / 3
    assert out["nested"] == {"1": 0.666667, "k": 5}
    assert out["count"] == 7 and out["text"] == "orthogonal"
    assert out["val_accuracy"] == 0.666667
    assert out["seconds"] == 0.000049


def test_nan_and_inf_become_null(check: CheckResult) -> None:
    name = next(iter(check.checkers))
    r, _ = check.checkers[name]
    fake = dataclasses.replace(
        r,
        val_accuracy=math.nan,
        cv_accuracy=math.inf,
        info={"gamma": math.nan, "by": {"1": -math.inf}},
    )
    changed = dataclasses.replace(
        _with_baseline(check, val_accuracy=math.nan, cv_accuracy=-math.inf),
        checkers={name: (fake, _gap(math.nan, -math.inf, math.inf))},
        test={
            "path": "t",
            "sha256": "0" * 64,
            "rows": 0,
            "seconds": 0.5,
            "accuracy": {"linear": math.nan, name: 0.123456789},
            "score": {"linear": math.inf, name: 0.987654321},
        },
    )
    out = changed.to_json()
    assert out["linear"]["val_accuracy"] is None and out["linear"]["cv_accuracy"] is None
    block = out["checkers"][name]
    assert block["val_accuracy"] is None and block["cv_accuracy"] is None
    assert block["gap"] is None and block["gap_ci95"] == [None, None]
    assert block["gamma"] is None and block["by"] == {"1": None}
    assert out["test"] == {
        "path": "t",
        "sha256": "0" * 64,
        "rows": 0,
        "seconds": 0.5,
        "accuracy": {"linear": None, name: 0.123457},
        "score": {"linear": None, name: 0.987654},
    }
    json.dumps(out, allow_nan=False)


def test_a_skipped_checker_has_a_null_gap(check: CheckResult) -> None:
    skipped = CheckerResult.skipped("degree2", "ran out of memory", 0.123456)
    out = dataclasses.replace(check, checkers={"degree2": (skipped, None)}).to_json()
    assert out["checkers"]["degree2"] == {
        "status": "skipped",
        "reason": "ran out of memory",
        "val_score": None,
        "val_accuracy": None,
        "gap": None,
        "gap_ci95": None,
        "seconds": 0.123456,
    }


def test_a_checker_skipped_in_a_real_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> CheckerResult:
        raise KcheckError("refused for this test")

    spec = registry.CHECKERS["degree2"]
    monkeypatch.setitem(registry.CHECKERS, "degree2", dataclasses.replace(spec, run=refuse))
    out = pipeline.run(CheckConfig(train=HEART, exact="never")).json
    block = out["checkers"]["degree2"]
    assert block["status"] == "skipped" and block["reason"] == "refused for this test"
    assert block["gap"] is None and block["gap_ci95"] is None and block["val_accuracy"] is None
    assert out["checkers"]["multilinear"]["gap"] is not None


@pytest.mark.slow
def test_checkers_follow_the_users_order_with_rbf_last() -> None:
    # Neither registry order (multilinear, degree2, rff) nor alphabetical order.
    order = ("rff", "degree2", "multilinear")
    config = CheckConfig(train=HEART, checkers=order, exact="always")
    out = pipeline.run(config).json
    assert list(out["checkers"]) == [*order, "rbf"]
    assert out["checkers"]["rbf"]["status"] == "exact"


def test_to_json_keeps_the_checkers_dict_order(check: CheckResult) -> None:
    items = list(check.checkers.items())
    reordered = dataclasses.replace(check, checkers=dict(reversed(items)))
    assert list(reordered.to_json()["checkers"]) == [n for n, _ in reversed(items)]


# --- VerifyResult ---------------------------------------------------------------------------------


def test_verify_json_keys_and_values(verified: VerifyResult) -> None:
    out = verified.to_json()
    assert set(out) == VERIFY_KEYS
    assert out["schema_version"] == SCHEMA_VERSION and out["kind"] == "verify"
    assert out["kcheck_version"] == __version__
    assert out["verdict"] == verified.verdict == verified.decision.verdict
    assert out["margin"] == verified.decision.margin
    assert out["gap"] == sig6(verified.gap.value)
    assert out["gap_ci95"] == [sig6(verified.gap.low), sig6(verified.gap.high)]
    assert out["linear"] == {
        "cv_score": sig6(verified.linear["cv_score"]),
        "cv_accuracy": sig6(verified.linear["cv_accuracy"]),
        "C": verified.linear["C"],
        "seconds": sig6(verified.linear["seconds"]),
        "test_accuracy": None,
        "test_score": None,
    }
    assert out["metric"] == "accuracy" and out["class_weights"] is None
    assert set(out["rbf"]) == {
        "cv_score",
        "test_score",
        "cv_accuracy",
        "C",
        "gamma",
        "grid_points",
        "seconds",
        "test_accuracy",
    }
    assert (out["rbf"]["C"], out["rbf"]["gamma"], out["rbf"]["grid_points"]) == (2.0, 0.125, 1)
    assert out["test"] is None and out["test_gap"] is None
    assert out["check"] is None and out["confirms"] is None and out["both_borderline"] is None
    assert out["seconds"] == sig6(verified.finished - verified.started)
    json.dumps(out, allow_nan=False)


def test_verify_confirms(verified: VerifyResult) -> None:
    same = dataclasses.replace(verified, check={"path": "c.json", "verdict": verified.verdict})
    assert same.to_json()["confirms"] is True
    other = "kernel" if verified.verdict == "linear" else "linear"
    differs = dataclasses.replace(verified, check={"path": "c.json", "verdict": other})
    assert differs.to_json()["confirms"] is False
    assert differs.to_json()["check"] == {"path": "c.json", "verdict": other}


def test_verify_rounding_and_nulls(verified: VerifyResult) -> None:
    changed = dataclasses.replace(
        verified,
        linear={**verified.linear, "test_accuracy": 0.87654321, "seconds": 2.000049},
        rbf={**verified.rbf, "test_accuracy": math.nan, "cv_accuracy": 0.5555555555},
        test_gap=math.inf,
        decision=Decision("kernel", "borderline", "rbf"),
    )
    out = changed.to_json()
    assert out["linear"]["test_accuracy"] == 0.876543 and out["linear"]["seconds"] == 2.00005
    assert out["rbf"]["test_accuracy"] is None and out["rbf"]["cv_accuracy"] == 0.555556
    assert out["test_gap"] is None
    assert (out["verdict"], out["margin"]) == ("kernel", "borderline")
