"""The verdict in plain words says what the rule's record says (the JSON's ``decision`` block):
which gap or interval decided, which checker was skipped and why, and a remedy only where it
applies. Each verdict path is a real check, forced by options on bundled or generated data."""

from __future__ import annotations

import copy
import io
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import DATASETS
from rich.console import Console

from kcheck.checkers import registry
from kcheck.cli import render, words
from kcheck.config import CheckConfig
from kcheck.io.data import write_libsvm
from kcheck.memory import size_text
from kcheck.pipeline import run
from kcheck.verdict import Gap, Outcome, reaches, rule

GiB = 2**30
#: The phrases of each remedy.
MEMORY = "a larger --memory-limit"
TIME = "a larger --time-limit"
MORE_DATA = "more data would narrow"
TOO_LARGE = "too large to expand"


def _check(path: Path | str, **options: Any) -> dict[str, Any]:
    """A check as ``kcheck check PATH`` with ``options`` runs it (a fixed memory limit: the
    default depends on the machine)."""
    options.setdefault("memory_limit", 2 * GiB)
    json: dict[str, Any] = run(CheckConfig(train=str(path), jobs=1, **options)).json
    return json


def _linear_rule(path: Path, rows: int, features: int) -> Path:
    """A linear rule on ``rows`` dense rows: no checker gains anything on it."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-1.0, 1.0, (rows, features))
    w = np.linspace(1.0, 0.1, features)
    y = np.where(X @ w + rng.normal(0, 0.3, rows) > 0, 1.0, -1.0)
    write_libsvm(str(path), y, X)
    return path


# --- one check per verdict path -----------------------------------------------------------------


@pytest.fixture(scope="module")
def kernel_proxies() -> dict[str, Any]:
    """kernel, decided by a proxy: fourclass without exact mode (MultiLinear +29 points)."""
    return _check(DATASETS / "fourclass", exact="never")


@pytest.fixture(scope="module")
def kernel_exact() -> dict[str, Any]:
    """kernel, decided by exact mode: fourclass with --exact always."""
    return _check(DATASETS / "fourclass", exact="always")


@pytest.fixture(scope="module")
def linear_clear() -> dict[str, Any]:
    """linear (clear): svmguide1 with --checkers multilinear and --exact never, whose one
    interval lies below epsilon."""
    return _check(DATASETS / "svmguide1", exact="never", checkers=("multilinear",))


@pytest.fixture(scope="module")
def interval_proxies() -> dict[str, Any]:
    """linear (borderline) from intervals: heart_scale's 68 points of V leave the proxies'
    intervals wide enough to contain epsilon (--exact never)."""
    return _check(DATASETS / "heart_scale", exact="never")


@pytest.fixture(scope="module")
def interval_exact() -> dict[str, Any]:
    """linear (borderline) from exact mode's interval: heart_scale with --exact always at seed
    1 (at seed 0 the nested comparison's interval ends just short of epsilon: clear)."""
    return _check(DATASETS / "heart_scale", exact="always", seed=1)


@pytest.fixture(scope="module")
def skip_memory() -> dict[str, Any]:
    """Borderline from a skip by the memory limit: german.numer with --memory-limit 66M leaves
    degree-2 room for fewer rows than it needs."""
    return _check(
        DATASETS / "german.numer",
        memory_limit=66 * 2**20,
        checkers=("degree2", "multilinear"),
        exact="never",
    )


@pytest.fixture(scope="module")
def skip_too_large(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Borderline from a skip no memory limit could help: one stray feature index of 1,000,000
    makes degree-2's weight vectors alone need tens of thousands of GiB."""
    rng = np.random.default_rng(1)
    path = tmp_path_factory.mktemp("words") / "stray.svm"
    X = rng.uniform(-1.0, 1.0, (600, 5))
    y = np.where(X @ np.linspace(1.0, 0.2, 5) + rng.normal(0, 0.3, 600) > 0, 1, -1)
    with open(path, "w") as f:
        for i, (row, label) in enumerate(zip(X, y, strict=True)):
            values = " ".join(f"{j + 1}:{x:.4f}" for j, x in enumerate(row))
            f.write(f"{label} {values}{' 1000000:1' if i == 0 else ''}\n")
    return _check(path, checkers=("degree2", "multilinear"), exact="never")


@pytest.fixture(scope="module")
def skip_budget(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Borderline from a skip by the cost budget: 240 dense features make each row's expansion
    29,160 values, and T (408,000 values, over small data's bound) gets no floor."""
    path = _linear_rule(tmp_path_factory.mktemp("words") / "wide.svm", 1700, 240)
    return _check(path, checkers=("degree2", "multilinear"), exact="never")


@pytest.fixture(scope="module")
def skip_time(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Borderline from the time limit: degree-2 in full is about 7 seconds of work on these
    3,000 rows of T here (the floor of small data pays for it without a limit), MultiLinear and
    the baseline under half a second; --time-limit 4 leaves degree-2 time for about 1,300 rows.
    (At --time-limit 8 a quiet machine's pace let all 3,000 fit, and nothing was cut.)"""
    path = _linear_rule(tmp_path_factory.mktemp("words") / "t40.svm", 4000, 40)
    return _check(path, checkers=("degree2", "multilinear"), exact="never", time_limit=4.0)


@pytest.fixture(scope="module")
def exact_over_proxy() -> dict[str, Any]:
    """Exact mode decides over a proxy: fourclass with --exact always --epsilon 0.25, where
    MultiLinear's gain (+29 on V) reaches epsilon but its interval reaches below it, and the
    RBF SVM's gain in cross-validation (+21) does not."""
    return _check(DATASETS / "fourclass", exact="always", epsilon=0.25)


@pytest.fixture(scope="module")
def overrule() -> dict[str, Any]:
    """A proxy over exact mode: fourclass with --exact always --metric balanced --epsilon
    0.28, where MultiLinear's whole interval (+28.8 to +42.2) lies above epsilon and exact
    mode's gain (+27.2) does not reach it. (In plain accuracy exact mode's +23.2 now lies
    above MultiLinear's low end, +23.1, since it compares with the baseline's C.)"""
    return _check(DATASETS / "fourclass", exact="always", epsilon=0.28, metric="balanced")


FAST = [
    "kernel_proxies",
    "linear_clear",
    "interval_proxies",
    "interval_exact",
    "skip_memory",
    "skip_too_large",
]
SLOW = ["kernel_exact", "skip_budget", "skip_time", "exact_over_proxy", "overrule"]
PATHS = [*FAST, *(pytest.param(p, marks=pytest.mark.slow) for p in SLOW)]


# --- what the words must say, from the record ---------------------------------------------------


def _flat(text: str) -> str:
    return " ".join(text.split())


def _who(name: str) -> str:
    words = render.NAMES[name]
    return "An RBF SVM" if name == registry.EXACT.name else words[:1].upper() + words[1:]


def says_the_record(v: dict[str, Any]) -> str:
    """The summary of ``v``, checked against its ``decision`` block; returns it."""
    text = words.verdict_summary(v)
    d = v["decision"]
    names = render.NAMES
    if v["verdict"] == "kernel":
        assert text.startswith(f"{_who(d['deciding'])} beat linear by "), text
        assert ("decides over exact mode's linear verdict" in text) == (d["by"] == "overrule")
    elif d["by"] == "exact":
        assert text.startswith("An RBF SVM ") and "in cross-validation on all rows" in text
    else:
        assert text.startswith(f"No checker beat linear by {100 * v['epsilon']:g} points")
    assert ("not settled" in text.lower()) == (v["margin"] == "borderline"), text
    listed = set()
    for entry in d["cut_short"]:
        listed.add(entry["checker"])
        verb = "was skipped" if entry["what"] == "did not run" else "was cut short"
        assert f"{names[entry['checker']]} {verb} ({entry['reason']})" in text, text
    if v["verdict"] == "linear":
        for name in d["straddling"]:
            assert f"the interval of {names[name]}" in text, text
    # No checker is blamed that the record does not name, and nothing "did not finish".
    for name in v["checkers"]:
        if name not in listed:
            assert f"{names[name]} was skipped" not in text
            assert f"{names[name]} was cut short" not in text
    assert "did not finish" not in text
    return text


def test_kernel_from_a_proxy(kernel_proxies):
    v = kernel_proxies
    assert (v["verdict"], v["decision"]["by"], v["decision"]["deciding"]) == (
        "kernel",
        "proxies",
        "multilinear",
    )
    text = says_the_record(v)
    assert f"beat linear by {100 * v['checkers']['multilinear']['gap']:.1f} points" in text
    assert "an RBF SVM should win here" in text


@pytest.mark.slow
def test_kernel_from_exact_mode(kernel_exact):
    v = kernel_exact
    assert (v["verdict"], v["decision"]["by"], v["decision"]["deciding"]) == (
        "kernel",
        "exact",
        "rbf",
    )
    text = says_the_record(v)
    assert "in cross-validation on all rows" in text and "the kernel is worth it" in text


def test_linear_clear(linear_clear):
    v = linear_clear
    assert (v["verdict"], v["margin"], v["decision"]["margin_reason"]) == (
        "linear",
        "clear",
        "interval",
    )
    text = says_the_record(v)
    assert "A linear model is enough here" in text


def test_linear_borderline_from_the_proxies_intervals(interval_proxies):
    v = interval_proxies
    d = v["decision"]
    assert (v["margin"], d["margin_reason"], d["by"]) == (
        "borderline",
        "interval-reaches-epsilon",
        "proxies",
    )
    assert d["straddling"] and not d["cut_short"]
    text = says_the_record(v)
    for name in d["straddling"]:
        hi = v["checkers"][name]["gap_ci95"][1]
        assert f"the interval of {render.NAMES[name]} reaches 2 points (up to " in text
        assert render.side_pts(hi, v["epsilon"]) in text


def test_linear_borderline_from_exact_modes_interval(interval_exact):
    v = interval_exact
    d = v["decision"]
    assert (v["margin"], d["margin_reason"], d["by"], d["straddling"]) == (
        "borderline",
        "interval-reaches-epsilon",
        "exact",
        ["rbf"],
    )
    text = says_the_record(v)
    assert "the interval of the RBF SVM in cross-validation reaches 2 points" in text
    gap = v["checkers"]["rbf"]["gap"]
    assert gap > 0 and f"gained {100 * gap:.2f} points over linear" in text
    assert "short of the 2 the kernel needs" in text and "came within" not in text


def test_borderline_from_a_skip_by_the_memory_limit(skip_memory):
    v = skip_memory
    d = v["decision"]
    assert d["margin_reason"] == "cut-short" and [e["checker"] for e in d["cut_short"]] == [
        "degree2"
    ]
    assert "memory limit" in d["cut_short"][0]["reason"]
    text = says_the_record(v)
    assert (
        "degree-2 was skipped (only " in text and "so it cannot confirm the linear verdict" in text
    )


def test_borderline_from_a_skip_no_memory_limit_could_help(skip_too_large):
    v = skip_too_large
    (entry,) = v["decision"]["cut_short"]
    assert entry["checker"] == "degree2" and "weight vectors" in entry["reason"]
    # The size reads in whole GiB with separators, not "48428.9 GiB".
    need = re.search(r"need (\S+) GiB", entry["reason"])
    assert need is not None and re.fullmatch(r"\d{1,3}(,\d{3})+", need.group(1))
    text = says_the_record(v)
    assert f"degree-2 is too large to expand on this machine (it needs {need.group(1)} GiB)" in (
        text
    )


@pytest.mark.slow
def test_borderline_from_a_skip_by_the_cost_budget(skip_budget):
    v = skip_budget
    (entry,) = v["decision"]["cut_short"]
    step = next(s for s in v["plan"]["steps"] if s["name"] == "degree2")
    assert entry["checker"] == "degree2" and step["limited_by"] == "cost"
    text = says_the_record(v)
    assert f"degree-2 was skipped ({entry['reason']})" in text
    assert "cost budget" in text


@pytest.mark.slow
def test_borderline_from_the_time_limit(skip_time):
    v = skip_time
    d = v["decision"]
    assert d["margin_reason"] == "cut-short"
    assert [e["checker"] for e in d["cut_short"]] == ["degree2"]
    assert "time limit" in d["cut_short"][0]["reason"]
    says_the_record(v)


@pytest.mark.slow
def test_exact_mode_over_a_proxy_that_reached_epsilon(exact_over_proxy):
    v = exact_over_proxy
    d = v["decision"]
    ml = v["checkers"]["multilinear"]
    assert (v["verdict"], d["by"]) == ("linear", "exact")
    assert reaches(ml["gap"], v["epsilon"]) and not reaches(ml["gap_ci95"][0], v["epsilon"])
    text = says_the_record(v)
    assert f"MultiLinear's {render.gap_text(ml, v['epsilon'])} on the validation split" in text
    assert "exact mode's RBF comparison decides over it" in text
    assert f"short of the {100 * v['epsilon']:g} the kernel needs" in text


@pytest.mark.slow
def test_a_proxy_over_exact_modes_linear_verdict(overrule):
    v = overrule
    d = v["decision"]
    rbf = v["checkers"]["rbf"]
    assert (v["verdict"], d["by"], d["deciding"]) == ("kernel", "overrule", "multilinear")
    assert not reaches(rbf["gap"], v["epsilon"])
    text = says_the_record(v)
    assert "its whole interval lies at or above epsilon" in text
    gained = f"an RBF SVM gained {100 * rbf['gap']:.2f} points of balanced accuracy over linear"
    assert gained in text


# --- remedies only where they apply -------------------------------------------------------------

#: The remedies each forced path must suggest (and no other).
REMEDIES = {
    "kernel_proxies": set(),
    "kernel_exact": set(),
    "linear_clear": set(),
    "interval_proxies": {MORE_DATA},
    "interval_exact": {MORE_DATA},
    "skip_memory": {MEMORY},
    "skip_too_large": {TOO_LARGE},
    "skip_budget": set(),
    "skip_time": {TIME},
    "exact_over_proxy": set(),
    "overrule": set(),
}


def _remedies(request: pytest.FixtureRequest, path: str) -> tuple[dict[str, Any], str, set[str]]:
    v = request.getfixturevalue(path)
    expected = set(REMEDIES[path])
    if v["verdict"] == "linear" and v["decision"]["straddling"]:
        expected.add(MORE_DATA)  # an interval reaching epsilon, wherever the data gives one
    return v, words.verdict_summary(v), expected


@pytest.mark.parametrize("path", PATHS)
def test_a_memory_limit_only_where_the_memory_limit_cut_a_checker(request, path):
    v, text, expected = _remedies(request, path)
    assert ("--memory-limit" in text) == (MEMORY in expected), text
    if MEMORY in expected:
        assert any("memory limit" in e["reason"] for e in v["decision"]["cut_short"])


@pytest.mark.parametrize("path", PATHS)
def test_too_large_to_expand_only_where_no_memory_limit_could_help(request, path):
    v, text, expected = _remedies(request, path)
    assert (TOO_LARGE in text) == (TOO_LARGE in expected), text


@pytest.mark.parametrize("path", PATHS)
def test_a_time_limit_only_where_the_time_limit_cut_a_checker(request, path):
    v, text, expected = _remedies(request, path)
    assert ("--time-limit" in text) == (TIME in expected), text
    if TIME in expected:
        assert any("time limit" in e["reason"] for e in v["decision"]["cut_short"])


@pytest.mark.parametrize("path", PATHS)
def test_more_data_only_where_an_interval_reaches_epsilon(request, path):
    v, text, expected = _remedies(request, path)
    assert (MORE_DATA in text) == (MORE_DATA in expected), text
    if MORE_DATA in expected:
        assert (
            v["decision"]["margin_reason"] == "interval-reaches-epsilon"
            or (v["decision"]["straddling"])
        )


# --- digits that show the side of epsilon -------------------------------------------------------


@pytest.mark.parametrize(
    "x, decimals, text",
    [
        (0.020036, 1, "+2.004"),  # dna.scale's exact upper end: above epsilon
        (0.019869, 1, "+1.99"),  # svmguide1's: below it, in the fewest decimals that say so
        (0.02, 1, "+2.0"),  # epsilon itself
        (0.02, 2, "+2.00"),
        (0.0081, 1, "+0.8"),  # far from epsilon: one decimal, as before
        (0.019996, 2, "+1.9996"),
        (-0.0095, 2, "-0.95"),
    ],
)
def test_a_number_shows_its_side_of_epsilon(x, decimals, text):
    assert render.side_pts(x, 0.02, decimals) == text


def _table(v: dict[str, Any], width: int = 120) -> str:
    out = io.StringIO()
    Console(width=width, file=out, color_system=None).print(render.verdict_table(v, width))
    return out.getvalue()


def _ends(cell: str) -> list[float]:
    return [float(x) for x in re.findall(r"[+-]\d+\.\d+", cell)]


@pytest.mark.parametrize("path", PATHS)
def test_every_interval_in_the_table_shows_its_side_of_epsilon(request, path):
    v = request.getfixturevalue(path)
    eps = 100 * v["epsilon"]
    for line in _table(v).splitlines():
        name = line.split()[0] if line.split() else ""
        c = v["checkers"].get(name)
        if c is None or c.get("gap") is None:
            continue
        shown = _ends(line.split(" to ")[0])[-1:] + _ends(line.split(" to ")[1])[:1]
        for end, value in zip(shown, c["gap_ci95"], strict=True):
            assert (end >= eps) == reaches(value, v["epsilon"]), (line, value)
            assert end != eps or round(value, 12) == v["epsilon"], (line, value)


def rule_again(v: dict[str, Any]) -> dict[str, Any]:
    """``v`` with the fields the rule sets (verdict, margin, deciding_checker, decision,
    warnings) recomputed by the rule itself from its checkers' blocks, as a check does."""
    outcomes = []
    for name, c in v["checkers"].items():
        gap = None if c.get("gap") is None else Gap(c["gap"], *c["gap_ci95"])
        limited = c.get("limited_by")
        outcomes.append(
            Outcome(name, registry.role(name), c["status"], gap, limited, c.get("reason"))
        )
    d = rule(outcomes, v["epsilon"])
    return {
        **v,
        "verdict": d.verdict,
        "margin": d.margin,
        "deciding_checker": d.deciding,
        "decision": d.to_json(),
        "warnings": d.notes(registry.words),
    }


@pytest.fixture(scope="module")
def dna_like(interval_exact) -> dict[str, Any]:
    """dna.scale's record, which no bundled data set gives: exact mode's interval ends at
    +2.0036 points and degree-2 was skipped by its cost budget.

    Built from the real heart_scale check with --exact always, whose record has the same
    shape (by exact, straddling ["rbf"]): only exact mode's gap and interval and degree-2's
    block (as a cost skip writes it) are edited, and the rule's fields recomputed by the rule.
    """
    v = copy.deepcopy(interval_exact)
    v["checkers"]["rbf"].update(gap=0.014, gap_ci95=[0.0081, 0.020036])
    v["checkers"]["degree2"].update(
        status="skipped",
        gap=None,
        gap_ci95=None,
        val_score=None,
        val_accuracy=None,
        reason="only 5 rows of the expansion (20,300 nonzeros a row) fit the cost budget of "
        "120,000 expanded values",
    )
    return rule_again(v)


def test_a_borderline_from_an_interval_does_not_blame_a_skipped_checker(dna_like):
    v = dna_like
    d = v["decision"]
    assert (v["margin"], d["by"], d["straddling"], d["cut_short"]) == (
        "borderline",
        "exact",
        ["rbf"],
        [],
    )
    text = says_the_record(v)
    assert "degree-2" not in text
    assert "(95% CI +0.8 to +2.004)" in text and "(up to +2.004)" in text
    assert MORE_DATA in text and "--memory-limit" not in text and "--time-limit" not in text
    assert "+0.8 to +2.004" in _table(v)


def test_an_upper_end_just_below_epsilon_reads_below_it(interval_exact):
    """svmguide1's record (exact mode's interval ends at +1.9869 points, so the margin is
    clear), from the real heart_scale check with --exact always: only exact mode's gap and
    interval are edited, and the rule's fields recomputed by the rule."""
    v = copy.deepcopy(interval_exact)
    v["checkers"]["rbf"].update(gap=0.0141, gap_ci95=[0.0083, 0.019869])
    v = rule_again(v)
    assert v["margin"] == "clear"
    text = says_the_record(v)
    assert "(95% CI +0.8 to +1.99)" in text and "+0.8 to +1.99" in _table(v)


def test_an_rbf_svm_below_linear_is_said_to_score_below_it(interval_exact):
    """german.numer's exact gap (-0.95 points), from the real heart_scale check with --exact
    always: only exact mode's gap and interval are edited, and the rule's fields recomputed."""
    v = copy.deepcopy(interval_exact)
    v["checkers"]["rbf"].update(gap=-0.0095, gap_ci95=[-0.028, 0.009])
    text = says_the_record(rule_again(v))
    assert text.startswith("An RBF SVM scored 0.95 points below linear in cross-validation")
    assert "came within" not in text and "short of" not in text


# --- older results, vocabulary ------------------------------------------------------------------


def test_a_result_without_a_record_gets_one_rebuilt_from_its_fields(skip_memory, dna_like):
    for v in (skip_memory, dna_like):
        old = {k: x for k, x in v.items() if k != "decision"}
        assert words.decision_record(old) == v["decision"]
        assert words.verdict_summary(old) == words.verdict_summary(v)


def test_batch_caption_counts_in_words():
    ok = {"status": "ok", "verdict": "linear", "seconds": 1.0}
    caption = render.batch_caption([ok, {"status": "skipped", "name": "x"}], 1.0)
    assert caption.startswith("1 data set: 1 ok (0 kernel, 1 linear), 0 errors; 1 file skipped")
    caption = render.batch_caption([ok, ok, {"status": "error"}], 1.0)
    assert caption.startswith("3 data sets: 2 ok (0 kernel, 2 linear), 1 error; 0 files")


@pytest.mark.parametrize(
    "n, text",
    [
        (15493.4 * GiB, "15,493 GiB"),
        (999.94 * GiB, "999.9 GiB"),
        (3 * GiB, "3.0 GiB"),
        (2**20, "1.0 MiB"),
        (1000, "1,000 B"),
    ],
)
def test_sizes_read_in_whole_units_with_separators_when_large(n, text):
    assert size_text(n) == text


def test_prose_names_checkers_in_words_and_tables_by_name(skip_memory):
    text = words.verdict_summary(skip_memory)
    assert "degree-2" in text and "degree2" not in text
    assert "degree2" in _table(skip_memory)


@pytest.mark.slow
def test_the_command_says_the_forced_skip_and_its_remedy(datasets):
    """The memory path through ``kcheck check`` as a user types it: the JSON on stdout (a
    pipe) and the words on stderr say the same record."""
    from runner import run_kcheck

    args = ["check", str(datasets / "german.numer"), "--memory-limit", "66M"]
    r = run_kcheck([*args, "--checkers", "degree2,multilinear", "--exact", "never"])
    assert r.code == 0, r.describe()
    v = r.json
    assert v["decision"]["cut_short"][0]["checker"] == "degree2"
    err = _flat(r.stderr)
    assert _flat(says_the_record(v)) in err
    assert MEMORY in err and "--time-limit" not in err and MORE_DATA not in err


def test_the_suggested_verify_carries_a_max_rows_that_fits_about_ten_minutes(interval_proxies):
    """A borderline verdict suggests ``kcheck verify``; on data whose full grid is predicted
    over about 10 minutes (a9a's size) the command carries the ``--max-rows`` that fits them,
    with both predicted times; on small data it is the plain command."""
    from kcheck import verify as verifying
    from kcheck.tuning import rbf_grid as rbf_search

    small = _flat(words.verdict_summary(interval_proxies))
    path = interval_proxies["data"]["path"]
    assert f"`kcheck verify {path}` runs the RBF grid search on all rows" in small
    assert "--max-rows" not in small
    data = {**interval_proxies["data"], "rows": 32_561, "nnz": 451_592}
    text = _flat(words.verdict_summary({**interval_proxies, "data": data}))
    m = re.search(rf"`kcheck verify {path} --max-rows (\d+)` runs the RBF grid search on a", text)
    assert m is not None, text
    fit = int(m.group(1))
    jobs = os.cpu_count() or 1

    def predicted(rows: int) -> float:
        return verifying.predicted_seconds(
            rbf_search.GRID, rows=rows, nnz=451_592 * rows // 32_561, n_classes=2, jobs=jobs
        )

    assert predicted(fit) <= verifying.SUGGESTED_SECONDS < predicted(fit + 1)
    assert f"about {rbf_search.duration_text(predicted(32_561))})" in text
