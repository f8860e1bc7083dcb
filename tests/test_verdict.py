import numpy as np
import pytest

from kcheck.verdict import (
    Gap,
    Outcome,
    accuracy,
    decide,
    json_number,
    label_value,
    paired_gap,
    remeasure,
    rule,
    settled,
)


def test_paired_gap_against_hand_computation():
    checker = np.array([1, 1, 1, 0, 1, 1, 0, 1], dtype=bool)
    linear = np.array([1, 0, 1, 0, 0, 1, 1, 1], dtype=bool)
    d = checker.astype(float) - linear
    g = paired_gap(checker, linear)
    se = d.std(ddof=1) / np.sqrt(d.size)
    assert g.value == pytest.approx(1 / 8)
    assert g.low == pytest.approx(1 / 8 - 1.959964 * se, abs=1e-6)
    assert g.high == pytest.approx(1 / 8 + 1.959964 * se, abs=1e-6)


def test_identical_predictions_have_the_floor_of_their_points_not_zero_width():
    """Alike on every point: a zero variance said +0.0 [+0.0, +0.0], whatever the points."""
    a = np.array([1, 0, 1, 1], dtype=bool)
    g = paired_gap(a, a)
    assert g.high == pytest.approx(1.959964 / 5)
    assert g.low == pytest.approx(-1.959964 / 5) and g.value == 0.0
    many = np.ones(1000, dtype=bool)
    assert paired_gap(many, many).high == pytest.approx(1.959964 / 1001)


@pytest.mark.parametrize("n", [3, 10, 68, 250, 5000])
def test_the_floor_binds_only_where_no_pair_differs(n: int) -> None:
    a = np.zeros(n, dtype=bool)
    b = a.copy()
    b[0] = True  # one discordant pair: the normal interval is wider than the floor
    g = paired_gap(a, b)
    se = (a.astype(float) - b).std(ddof=1) / np.sqrt(n)
    assert g.high - g.value == pytest.approx(1.959964 * se)


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


def _exact(gap: Gap) -> Outcome:
    return Outcome("rbf", "deciding", "exact", gap)


def _proxy(name: str, gap: Gap | None, status: str = "ok", **kw: str) -> Outcome:
    return Outcome(name, "proxy", status, gap, **kw)


def test_exact_mode_decides_unless_a_proxy_is_clear_of_epsilon():
    exact = _exact(Gap(0.003, -0.009, 0.015))
    # A proxy's point estimate alone does not overrule exact mode's linear verdict.
    d = rule([_proxy("degree2", Gap(0.05, 0.01, 0.09)), exact], 0.02)
    assert (d.verdict, d.margin, d.by, d.notes()) == ("linear", "clear", "exact", [])
    # A whole interval at or above epsilon does, with the reason.
    proxies = [_proxy("degree2", Gap(0.116, 0.085, 0.147)), _proxy("ml", Gap(0.03, 0.021, 0.04))]
    d = rule([*proxies, exact], 0.02)
    assert (d.verdict, d.margin, d.deciding, d.by) == ("kernel", "clear", "degree2", "overrule")
    (why,) = d.notes()
    assert "degree2 gained +11.6 [+8.5, +14.7]" in why and "+0.3" in why
    # Exact mode's own kernel verdict stands, whatever the proxies say.
    d = rule([*proxies, _exact(Gap(0.03, 0.01, 0.05))], 0.02)
    assert (d.verdict, d.margin, d.deciding, d.by, d.notes()) == (
        "kernel",
        "borderline",
        "rbf",
        "exact",
        [],
    )
    assert d.margin_reason == "interval-reaches-epsilon" and d.straddling == ("rbf",)


def test_a_checker_cut_short_leaves_a_linear_verdict_borderline_unless_exact_mode_ran():
    below = Gap(0.0, -0.01, 0.01)
    skipped = _proxy("degree2", None, "skipped", limited_by="memory", reason="ran out of memory")
    d = rule([_proxy("multilinear", below), skipped], 0.02)
    assert (d.verdict, d.margin, d.margin_reason) == ("linear", "borderline", "cut-short")
    assert d.notes() == [
        "degree2 did not run (ran out of memory), so it cannot confirm the linear verdict"
    ]
    assert d.to_json()["cut_short"] == [
        {"checker": "degree2", "what": "did not run", "reason": "ran out of memory"}
    ]
    stopped = _proxy("degree2", below, "subsampled", limited_by="time", reason="time limit")
    assert rule([stopped], 0.02).notes() == [
        "degree2 was cut short (time limit), so it cannot confirm the linear verdict"
    ]
    # A subsample under its cost budget is no cut: its interval reflects the sample.
    sampled = _proxy("degree2", below, "subsampled", limited_by="cost", reason="cost budget")
    assert rule([sampled], 0.02).margin == "clear"
    # A stand-in skipped for its cost is the normal case on large data.
    stand_in = Outcome("rbfsvm", "stand-in", "skipped", None, "cost", "over its budget")
    assert rule([_proxy("multilinear", below), stand_in], 0.02).margin == "clear"
    # Where exact mode ran, it decides: the proxies' absence does not matter.
    d = rule([_proxy("multilinear", below), skipped, _exact(below)], 0.02)
    assert (d.margin, d.cut_short) == ("clear", ())
    # A kernel verdict is not made borderline by a checker that did not run.
    assert rule([_proxy("ml", Gap(0.05, 0.03, 0.07)), skipped], 0.02).margin == "clear"


def test_the_rule_names_what_decided_and_why_the_margin_is_what_it_is():
    d = rule([_proxy("a", Gap(0.0, -0.01, 0.021)), _proxy("b", Gap(0.0, -0.01, 0.01))], 0.02)
    assert (d.verdict, d.margin, d.margin_reason, d.straddling) == (
        "linear",
        "borderline",
        "interval-reaches-epsilon",
        ("a",),
    )
    d = rule([_proxy("a", Gap(0.03, 0.025, 0.035)), _proxy("b", Gap(0.05, 0.01, 0.09))], 0.02)
    assert (d.verdict, d.deciding, d.margin, d.by) == ("kernel", "b", "borderline", "proxies")
    assert d.deciding_gap == Gap(0.05, 0.01, 0.09)
    with pytest.raises(ValueError, match="no checker finished"):
        rule([_proxy("a", None, "skipped")], 0.02)


def test_remeasure_asks_for_the_straddling_checkers_of_a_borderline_verdict_on_small_data():
    straddling = _proxy("degree2", Gap(0.01, -0.01, 0.03))
    clear = _proxy("multilinear", Gap(0.0, -0.01, 0.01))
    d = rule([straddling, clear], 0.02)
    assert remeasure(d, [straddling, clear], 0.02, affordable=True) == ("degree2",)
    assert remeasure(d, [straddling, clear], 0.02, affordable=False) == ()
    with_exact = [straddling, clear, _exact(Gap(0.01, -0.01, 0.03))]
    assert remeasure(rule(with_exact, 0.02), with_exact, 0.02, affordable=True) == ()
    kernel = [straddling, _proxy("ml", Gap(0.05, 0.03, 0.07))]
    assert remeasure(rule(kernel, 0.02), kernel, 0.02, affordable=True) == ()


def test_settled_is_the_rules_side_of_epsilon():
    assert settled(Gap(0.03, 0.02, 0.04), 0.02) and settled(Gap(0.0, -0.01, 0.0199), 0.02)
    assert not settled(Gap(0.02, 0.01, 0.03), 0.02)


def test_after_one_repeat_the_interval_must_clear_epsilon_widened_for_its_fold():
    """One fold assignment's gap varies by up to 0.88 of its interval's standard error: after
    one repeat the interval is widened ONE_REPEAT_WIDEN times about its middle first."""
    from kcheck.verdict import ONE_REPEAT_WIDEN

    assert ONE_REPEAT_WIDEN == 1.5
    # Clear by 0.001 on a half-width of 0.009: clear after two repeats, not after one.
    near = Gap(0.03, 0.021, 0.039)
    assert settled(near, 0.02, 2) and settled(near, 0.02) and not settled(near, 0.02, 1)
    # Widened 1.5 times, [0.0165, 0.0435]: epsilon 0.016 lies below it, 0.017 inside.
    assert settled(near, 0.016, 1) and not settled(near, 0.017, 1)
    # Below epsilon the same way: [-0.02, 0.0], widened [-0.025, 0.005].
    below = Gap(-0.01, -0.02, 0.0)
    assert settled(below, 0.006, 1) and not settled(below, 0.004, 1) and settled(below, 0.004)
    # Far from epsilon, one repeat is enough (offsets_onehot_n5000: +9.7 [+8.2, +11.2]).
    assert settled(Gap(0.0968, 0.0816, 0.112), 0.02, 1)
    # No repeat has run: nothing is settled.
    assert not settled(Gap(0.5, 0.4, 0.6), 0.02, 0)


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
