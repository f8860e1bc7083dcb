"""What the terminal shows, from real check, batch and verify results: no number is ever cut,
at 60, 80 or 120 columns, and the words say what the numbers are and what to do next."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from kcheck.cli import render, words
from kcheck.cli.ui import count_text, new_progress
from kcheck.config import CheckConfig
from kcheck.defaults import Event
from kcheck.pipeline import run

WIDTHS = [60, 80, 120]


def _check(path, **kw):
    return run(CheckConfig(train=str(path), jobs=1, memory_limit=2 * 2**30, **kw)).json


@pytest.fixture(scope="module")
def fourclass_exact():
    from conftest import DATASETS

    return _check(DATASETS / "fourclass", exact="always")


@pytest.fixture(scope="module")
def fourclass_proxies():
    from conftest import DATASETS

    return _check(DATASETS / "fourclass", exact="never")


@pytest.fixture(scope="module")
def linear_proxies(tmp_path_factory):
    """A linear verdict from the proxies alone: a linear rule on 3,000 dense rows, whose 750
    points of V keep every proxy's interval below epsilon."""
    import numpy as np

    from kcheck.io.data import write_libsvm

    rng = np.random.default_rng(0)
    X = rng.uniform(-1.0, 1.0, (3000, 10))
    y = np.where(X @ np.linspace(1.0, 0.1, 10) + rng.normal(0, 0.3, 3000) > 0, 1.0, -1.0)
    path = tmp_path_factory.mktemp("render") / "linear.svm"
    write_libsvm(str(path), y, X)
    return _check(path, exact="never")


def _text(renderable, width: int) -> str:
    out = io.StringIO()
    Console(width=width, file=out, color_system=None).print(renderable)
    return out.getvalue()


def _numbers_of(v) -> list[str]:
    """Every number the check table must show in full (an interval's ends with the digits that
    show their side of epsilon)."""
    nums = [render.fmt_acc(v["linear"]["val_accuracy"])]
    for c in v["checkers"].values():
        if c.get("gap") is not None:
            nums += [
                render.fmt_acc(c["val_accuracy"]),
                render.gap_text(c, v["epsilon"]),
                *render.ci_text(c, v["epsilon"]).split(" to "),
            ]
    return nums


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", ["fourclass_exact", "fourclass_proxies", "linear_proxies"])
def test_check_table_never_cuts_a_number(case, width, request):
    v = request.getfixturevalue(case)
    text = _text(render.verdict_table(v, width), width)
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    flat = " ".join(text.split())
    for number in _numbers_of(v):
        assert number in flat, (number, text)


def test_check_table_gives_way_in_order(fourclass_exact):
    wide = _text(render.verdict_table(fourclass_exact, 120), 120)
    assert "parameters" in wide and "seconds" in wide and "C=2^-5" in wide
    # Narrower, low-value columns go first, and at 60 the parameters too; numbers stay.
    narrow = _text(render.verdict_table(fourclass_exact, 60), 60)
    assert "seconds" not in narrow and "C=2^-5" not in narrow


def test_rbf_row_is_labelled_cross_validated(fourclass_exact, fourclass_proxies):
    text = _text(render.verdict_table(fourclass_exact, 120), 120)
    rbf = next(line for line in text.splitlines() if line.startswith("rbf"))
    assert re.search(r"100\.00% CV", rbf)
    assert "g=" in rbf and "(2^" in rbf  # gamma off the grid: value and log2
    note = render.verdict_footnote(fourclass_exact)
    assert "cross-validation" in note and "rbf" in note
    # Without an rbf row the footnote does not mention it, and never says "V" unexplained.
    plain = render.verdict_footnote(fourclass_proxies)
    assert "rbf" not in plain.lower() and "validation split" in plain
    assert not re.search(r"\bV\b", plain + note)
    # fourclass's 862 rows are not nested (it does not fit the budget); a nested comparison
    # says so.
    assert fourclass_exact["checkers"]["rbf"]["nested"] is False
    assert "tuned again inside each fold" not in note
    nested = {**fourclass_exact, "checkers": {**fourclass_exact["checkers"]}}
    nested["checkers"]["rbf"] = {**fourclass_exact["checkers"]["rbf"], "nested": True}
    assert "both tuned again inside each fold" in render.verdict_footnote(nested)


@pytest.mark.parametrize(
    "value, text",
    [
        (128.0, "2^7"),
        (2.0**-11, "2^-11"),
        (1.0, "2^0"),
        (2**-1.5, "0.354 (2^-1.5)"),
        (38.8427370773, "38.8 (2^5.3)"),
    ],
)
def test_log2_text(value, text):
    assert render.log2_text(value) == text


def test_summary_of_a_kernel_verdict_says_why_and_what_next(fourclass_proxies):
    v = fourclass_proxies
    assert v["verdict"] == "kernel" and v["deciding_checker"] == "multilinear"
    gap = v["checkers"]["multilinear"]["gap"]
    text = words.verdict_summary(v)
    assert f"MultiLinear beat linear by {100 * gap:.1f} points" in text
    assert "--model-out" in text and "kcheck verify" in text


def test_summary_of_a_linear_verdict_names_the_closest_checkers(linear_proxies):
    v = linear_proxies
    assert v["verdict"] == "linear"
    best = max(v["checkers"], key=lambda n: v["checkers"][n]["gap"])
    text = words.verdict_summary(v)
    assert f"{render.NAMES[best]} {render.pts(v['checkers'][best]['gap'])}" in text
    assert "No checker beat linear by 2 points" in text
    assert v["margin"] == "clear" and "A linear model is enough here" in text
    assert "Not settled" not in text and "more data" not in text


def test_a_borderline_verdict_says_what_would_settle_it(datasets):
    """heart_scale without exact mode: the proxies' intervals contain epsilon (the record's
    ``straddling``), so more data would settle it; nothing was skipped or cut short."""
    v = _check(datasets / "heart_scale", exact="never")
    assert v["decision"]["margin_reason"] == "interval-reaches-epsilon"
    text = words.verdict_summary(v)
    assert "Not settled" in text and "kcheck verify" in text and "more data" in text
    assert "--memory-limit" not in text and "--time-limit" not in text


def test_batch_table_never_cuts_a_number(fourclass_proxies, linear_proxies):
    lines = [
        dict(fourclass_proxies, name="a-rather-long-data-set-name/fourclass", status="ok"),
        dict(linear_proxies, name="linear.svm", status="ok"),
        {"name": "README.md", "status": "skipped", "reason": "not data"},
    ]
    for width in WIDTHS:
        text = _text(render.batch_table(lines, set(), width), width)
        flat = " ".join(text.split())
        for x in lines[:2]:
            assert render.deciding_gap(x).split()[0] in flat
            assert f"{x['data']['rows']:,}" in flat or width < 80
        # A name too long for the width is cut from the left, on one row, its file name whole.
        if "…" in text:
            (row,) = [r for r in text.splitlines() if "fourclass" in r]
            assert row.lstrip().startswith("…") and "a-rather" not in row


def test_batch_names_at_80_columns_stay_on_one_row_cut_with_an_ellipsis(fourclass_proxies):
    deep = "/home/someone/projects/data-quality/nightly/2026-11-27/incoming/"
    lines = [
        dict(fourclass_proxies, name=deep + "fourclass.svm", status="ok"),
        dict(fourclass_proxies, name="short.svm", status="ok"),
    ]
    text = _text(render.batch_table(lines, set(), 80), 80)
    body = [r for r in text.splitlines() if ".svm" in r]
    assert len(body) == 2 and all(len(r) <= 80 for r in text.splitlines()), text
    assert body[0].lstrip().startswith("…") and "/fourclass.svm" in body[0], text
    assert body[1].lstrip().startswith("short.svm") and "kernel" in body[0], text


@pytest.mark.parametrize(
    "exact, checkers, units",
    [
        ("never", ("multilinear", "mixlinear"), {"clusters", "EM rounds"}),
        ("always", ("degree2",), {"CV runs"}),
    ],
)
def test_every_count_names_its_unit_where_it_is_counted(
    exact: str, checkers: tuple[str, ...], units: set[str]
) -> None:
    """The unit comes with the count, from the code that counts: the display guessed it from
    the stage's words, and an RBF SVM search counted "steps" while exact mode's counted grid
    points as "CV runs"."""
    from conftest import DATASETS

    events: list[Event] = []
    config = CheckConfig(train=str(DATASETS / "fourclass"), exact=exact, checkers=checkers)
    run(config, events.append)
    counted = [e for e in events if e.total is not None]
    assert all(e.unit for e in counted), [e for e in counted if not e.unit]
    assert units <= {e.unit for e in counted}, counted


def test_the_rbf_svm_checker_counts_grid_points_then_trainings() -> None:
    from conftest import DATASETS, make_context, planned

    from kcheck.checkers import rbfsvm
    from kcheck.checkers.base import Dataset
    from kcheck.checkers.linear import LinearOptions
    from kcheck.checkers.linear import run as linear_run
    from kcheck.io.data import read_libsvm
    from kcheck.split import stratified_split

    y, X = read_libsvm(str(DATASETS / "fourclass"))
    tr, va = stratified_split(y, seed=0)
    T, V = Dataset(X[tr], y[tr]), Dataset(X[va], y[va])
    events: list[Event] = []
    ctx = make_context(baseline=linear_run(T, V, LinearOptions(seed=0)), progress=events.append)
    assert rbfsvm.check(T, V, ctx, planned("rbfsvm", T, V, 1e6)).status == "ok"
    units = [e.unit for e in events if e.total is not None]
    assert units and units[0] == "grid points" and units[-1] == "trainings", units
    assert set(units) == {"grid points", "trainings"}, units


def test_progress_counts_have_units_and_one_time_column():
    assert count_text(3, 12, "clusters") == "3/12 clusters"
    assert count_text(3, 12, None) == "3/12 steps"
    assert count_text(None, None, "grid points") == ""
    out = io.StringIO()
    console = Console(file=out, width=100, force_terminal=True, color_system=None)
    progress = new_progress(console)
    task = progress.add_task("degree-2 checker", total=None, count=count_text(None, None, None))
    progress.update(task)
    text = _text(progress.get_renderable(), 100)
    assert "None" not in text and "elapsed" in text and text.count(":") == 1
    progress.update(
        task,
        description="MultiLinear checker",
        total=4,
        completed=3,
        count=count_text(3, 4, "clusters"),
    )
    text = _text(progress.get_renderable(), 100)
    assert "3/4 clusters" in text and text.count("elapsed") == 1


def test_verify_summary_gives_the_interval_and_margin(datasets):
    from kcheck.tuning.rbf_grid import Grid
    from kcheck.verify import VerifyConfig, verify

    grid = Grid(log2_C=(1.0, 3.0), log2_gamma=(-3.0, -5.0))
    v = verify(VerifyConfig(str(datasets / "heart_scale"), grid=grid))
    text = render.verify_summary(v)
    eps = v["epsilon"]
    gap, ci = render.side_pts(v["gap"], eps, 2), render.ci_text(v, eps)
    assert f"{gap} points (95% CI {ci})" in text
    assert f"verdict {v['verdict']}, {v['margin']} (epsilon is 2 points)" in text


def test_a_summary_in_another_metric_names_it_and_carries_it_on(fourclass_proxies):
    v = {**fourclass_proxies, "metric": "balanced", "class_weights": {"-1": 0.8, "1": 1.4}}
    text = words.verdict_summary(v)
    assert "points of balanced accuracy" in text
    # The next commands train and verify in the same metric.
    assert "--model-out MODEL" in text and text.count("--metric balanced") == 2
    assert "balanced acc." in str(render.metric_words(v))
    assert "every model class-weighted" in render.verdict_footnote(v)
    plain = words.verdict_summary(fourclass_proxies)
    assert "--metric" not in plain and "points of" not in plain.split("(")[0]


@pytest.fixture(scope="module")
def two_folds():
    """svmguide1 without exact mode: degree-2's interval contains epsilon on V, so it is
    measured on a second fold as well."""
    from conftest import DATASETS

    v = _check(DATASETS / "svmguide1", exact="never")
    assert v["second_fold"]["used"] and list(v["second_fold"]["checkers"]) == ["degree2"]
    return v


@pytest.mark.parametrize("width", WIDTHS)
def test_a_gap_over_two_folds_is_marked_and_explained(two_folds, width):
    v = two_folds
    table = _text(render.verdict_table(v, width), width)
    assert render.gap_text(v["checkers"]["degree2"], v["epsilon"]) + "*" in table
    assert render.pts(v["checkers"]["multilinear"]["gap"]) + "*" not in table
    note = render.verdict_footnote(v)
    second = v["second_fold"]
    assert "*: the mean of two folds' gaps" in note
    assert f"scored on the other {second['validation']:,}" in note
    # Prose names the checker in words; the table keeps its JSON name.
    assert f"hung on {render.NAMES['degree2']}, so it was" in note
    assert (
        f"{render.NAMES['degree2']} {render.fmt_acc(second['checkers']['degree2']['val_score'])}"
        in note
    )
    # A single fold says nothing of the kind.
    assert "two folds" not in render.verdict_footnote(dict(v, second_fold=None))


def test_a_kernel_summary_over_two_folds_says_so(two_folds):
    v = dict(two_folds, verdict="kernel", deciding_checker="degree2", margin="borderline")
    assert "beat linear by" in words.verdict_summary(v)
    assert "on average over two folds" in words.verdict_summary(v)
    assert "two folds" not in words.verdict_summary(dict(v, second_fold=None))


@pytest.mark.parametrize("width", WIDTHS)
def test_a_progress_line_never_wraps_and_never_cuts_its_numbers(width):
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=True, color_system=None)
    progress = new_progress(console)
    long = "second fold: RBF SVM on the training split"
    progress.add_task(long, total=28, completed=12, count=count_text(12, 28, "grid points"))
    progress.add_task("degree-2 checker", total=None, count="")
    lines = _text(progress.get_renderable(), width).rstrip("\n").split("\n")
    assert len(lines) == 2 and all(len(line) <= width for line in lines)
    assert "12/28 grid points" in lines[0] and "elapsed 0:00" in lines[0]
    assert "degree-2 checker" in lines[1]
    # The name gives way, with an ellipsis, only where the line would not fit.
    assert (long in lines[0]) == (width >= 100)
    assert (long in lines[0]) or "…" in lines[0]


def test_an_eta_counts_down_from_the_last_count_then_gives_way_to_elapsed_time():
    """A stage whose next count is late (sector's MultiLinear: "ETA 0:35" for minutes) shows
    its ETA running down, then elapsed time alone, never a frozen estimate."""
    from rich.progress import Progress

    from kcheck.cli.ui import TimeColumn, eta

    now = [0.0]
    progress = Progress(TimeColumn(), get_time=lambda: now[0], console=Console(file=io.StringIO()))
    task_id = progress.add_task("MultiLinear checker", total=12)
    task = progress.tasks[0]
    assert eta(task) is None  # no count yet: no rate to go on
    for step in range(1, 4):
        now[0] = 10.0 * step
        progress.update(task_id, completed=step)
    first = eta(task)
    assert first is not None and 80 <= first <= 100  # 9 clusters left at 10 s each
    now[0] += 30
    later = eta(task)
    assert later is not None and abs((first - later) - 30) < 1e-6
    now[0] += first  # past the estimate without a count
    assert eta(task) is None
    text = TimeColumn().render(task).plain
    assert text.startswith("elapsed ") and "ETA" not in text
