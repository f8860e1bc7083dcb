import numpy as np
import pytest

from kcheck.verdict import Gap, decide, json_number, label_value, paired_gap


def test_paired_gap_against_hand_computation():
    checker = np.array([1, 1, 1, 0, 1, 1, 0, 1], dtype=bool)
    linear = np.array([1, 0, 1, 0, 0, 1, 1, 1], dtype=bool)
    d = checker.astype(float) - linear
    g = paired_gap(checker, linear)
    se = d.std(ddof=1) / np.sqrt(d.size)
    assert g.value == pytest.approx(1 / 8)
    assert g.low == pytest.approx(1 / 8 - 1.959964 * se, abs=1e-6)
    assert g.high == pytest.approx(1 / 8 + 1.959964 * se, abs=1e-6)


def test_identical_predictions_have_zero_width():
    a = np.array([1, 0, 1, 1], dtype=bool)
    g = paired_gap(a, a)
    assert g == Gap(0.0, 0.0, 0.0)


def test_rule_kernel_when_any_gap_reaches_epsilon():
    d = decide({"degree2": Gap(0.01, -0.01, 0.03), "multilinear": Gap(0.05, 0.03, 0.07)}, 0.02)
    assert (d.verdict, d.margin, d.deciding) == ("kernel", "clear", "multilinear")


def test_rule_gap_exactly_epsilon_is_kernel():
    assert decide({"m": Gap(0.02, 0.0, 0.04)}, 0.02).verdict == "kernel"


def test_rule_kernel_borderline_when_interval_straddles():
    d = decide({"multilinear": Gap(0.03, 0.01, 0.05)}, 0.02)
    assert (d.verdict, d.margin) == ("kernel", "borderline")


def test_rule_linear_clear_and_borderline():
    assert decide({"a": Gap(0.0, -0.01, 0.01)}, 0.02).margin == "clear"
    d = decide({"a": Gap(0.0, -0.01, 0.01), "b": Gap(0.01, -0.01, 0.03)}, 0.02)
    assert (d.verdict, d.margin) == ("linear", "borderline")


def test_rule_needs_a_gap():
    with pytest.raises(ValueError):
        decide({}, 0.02)


def test_json_helpers():
    assert json_number(float("nan")) is None
    assert json_number(0.1234567891) == 0.123457
    assert label_value(1.0) == 1 and isinstance(label_value(1.0), int)
    assert label_value(2.5) == 2.5
