import numpy as np
import pytest

from kcheck.verdict import Gap, accuracy, decide, json_number, label_value, paired_gap


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


def test_rule_gap_equal_to_epsilon_after_binary_rounding_is_kernel():
    """3 of 150 rows is 0.02 exactly; computed as a mean it may land a hair below."""
    a = np.zeros(150)
    a[:3] = 1.0
    g = paired_gap(a, np.zeros(150))
    assert decide({"m": Gap(0.02 - 1e-15, -0.1, 0.1)}, 0.02).verdict == "kernel"
    assert decide({"m": g}, 0.02).verdict == "kernel"
    assert decide({"m": Gap(0.0199999, -0.1, 0.1)}, 0.02).verdict == "linear"


def test_weighted_gap_with_equal_weights_is_the_plain_gap(rng):
    a = rng.random(200) < 0.7
    b = rng.random(200) < 0.6
    plain = paired_gap(a, b)
    weighted = paired_gap(a, b, weights=np.full(200, 3.0))
    assert weighted.value == pytest.approx(plain.value, abs=1e-12)
    assert weighted.low == pytest.approx(plain.low, abs=1e-12)
    assert weighted.high == pytest.approx(plain.high, abs=1e-12)


def test_weighted_gap_against_hand_computation():
    """Class-balanced weights: the gap is the mean of the per-class gaps."""
    a = np.array([1, 1, 0, 1, 1, 1], dtype=float)  # class 0: rows 0-3, class 1: rows 4-5
    b = np.array([1, 0, 0, 1, 0, 1], dtype=float)
    w = np.array([1 / 4] * 4 + [1 / 2] * 2) / 2
    g = paired_gap(a, b, weights=w)
    per_class = (np.mean(a[:4] - b[:4]) + np.mean(a[4:] - b[4:])) / 2
    assert g.value == pytest.approx(per_class)
    d = a - b
    wn = w / w.sum()
    se = np.sqrt(np.sum(wn**2 * (d - per_class) ** 2) * 6 / 5)
    assert g.high - g.value == pytest.approx(1.959964 * se, abs=1e-6)


def test_weights_must_fit_the_points():
    a = np.ones(4)
    with pytest.raises(ValueError):
        paired_gap(a, a, weights=np.ones(3))
    with pytest.raises(ValueError):
        paired_gap(a, a, weights=np.zeros(4))


def test_accuracy_weighted_and_plain():
    c = np.array([1, 0, 1, 1], dtype=bool)
    assert accuracy(c) == 0.75
    assert accuracy(c, np.array([1.0, 3.0, 0.0, 0.0])) == 0.25
    assert np.isnan(accuracy(np.array([], dtype=bool)))


def test_json_number_keeps_six_significant_digits():
    assert json_number(0.000123456789) == 0.000123457
    assert json_number(123.456789) == 123.457
    assert json_number(float("nan")) is None and json_number(float("inf")) is None


def test_exact_mode_decides_unless_a_proxy_is_clear_of_epsilon():
    from kcheck.verdict import decide_with_exact

    exact = ("rbf", Gap(0.003, -0.009, 0.015))
    # A proxy's point estimate alone does not overrule exact mode's linear verdict.
    d, why = decide_with_exact(exact, {"degree2": Gap(0.05, 0.01, 0.09)}, 0.02)
    assert (d.verdict, d.margin, why) == ("linear", "clear", None)
    # A whole interval at or above epsilon does, with the reason.
    proxies = {"degree2": Gap(0.116, 0.085, 0.147), "multilinear": Gap(0.03, 0.021, 0.04)}
    d, why = decide_with_exact(exact, proxies, 0.02)
    assert (d.verdict, d.margin, d.deciding) == ("kernel", "clear", "degree2")
    assert why is not None and "degree2 gained +11.6 [+8.5, +14.7]" in why and "+0.3" in why
    # Exact mode's own kernel verdict stands, whatever the proxies say.
    d, why = decide_with_exact(("rbf", Gap(0.03, 0.01, 0.05)), proxies, 0.02)
    assert (d.verdict, d.margin, d.deciding, why) == ("kernel", "borderline", "rbf", None)


def test_mean_gap_of_two_folds_narrows_the_interval_by_sqrt_two():
    from kcheck.verdict import Z95, mean_gap

    first, second = Gap(0.02, 0.01, 0.03), Gap(0.04, 0.03, 0.05)
    g = mean_gap(first, second)
    assert g.value == pytest.approx(0.03)
    # Two independent estimates with se 0.01 / Z95 each: the mean's se is that / sqrt(2).
    assert (g.high - g.low) / 2 == pytest.approx(0.01 / np.sqrt(2))
    assert g.low == pytest.approx(0.03 - Z95 * (0.01 / Z95) / np.sqrt(2))
    # Unequal widths: the wider fold dominates the spread, not the mean.
    g = mean_gap(Gap(0.0, -0.03, 0.03), Gap(0.02, 0.02, 0.02))
    assert g.value == pytest.approx(0.01) and (g.high - g.low) / 2 == pytest.approx(0.015)


def test_straddles_means_epsilon_lies_inside_the_interval():
    from kcheck.verdict import straddles

    assert straddles(Gap(0.015, 0.005, 0.025), 0.02)
    assert straddles(Gap(0.025, 0.015, 0.035), 0.02)
    assert not straddles(Gap(0.03, 0.02, 0.04), 0.02)  # low at epsilon: clear kernel
    assert not straddles(Gap(0.0, -0.01, 0.0199), 0.02)  # wholly below: clear linear
    assert straddles(Gap(0.0, -0.01, 0.02), 0.02)  # high reaches epsilon: could be kernel
    # Rounded as the rule rounds: a high of epsilon in exact arithmetic reaches it.
    assert straddles(Gap(0.0, -0.01, 3 / 150 - 1e-17), 3 / 150)
