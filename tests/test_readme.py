"""The README's quick start is what CI runs, so the two cannot drift apart."""

import re
import shutil

import pytest
from conftest import ROOT, load_script


def _quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", section, flags=re.S)


def test_quick_start_has_exactly_two_commands():
    commands = _quick_start_commands()
    assert commands == [
        "pip install . && kcheck check datasets/fourclass",
        "pip install '.[test]' && python -m pytest -q",
    ]


def test_ci_runs_the_readme_test_command_on_the_whole_suite():
    ci = (ROOT / ".ci" / "run").read_text()
    assert _quick_start_commands()[1] + " --slow\n" in ci


def test_the_testing_section_gives_the_command_of_each_tier():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Testing", 1)[1].split("\n## ", 1)[0]
    assert f"`{_quick_start_commands()[1].split(' && ')[1]}`" in section
    assert "`python -m pytest -q --slow`" in section


def test_bundled_data_sets_exist_and_stay_small():
    files = [p for p in (ROOT / "datasets").iterdir() if p.name != "README.md"]
    assert {p.name for p in files} >= {
        "fourclass",
        "german.numer",
        "heart_scale",
        "svmguide1",
        "svmguide1.t",
    }
    assert sum(p.stat().st_size for p in files) < 5 * 2**20


def _examples():
    """scripts/readme_examples.py, which makes the README's example sessions."""
    return load_script("readme_examples")


EXAMPLES = _examples()


def test_every_example_session_in_the_readme_is_generated():
    """Every ```text session that starts with ``$ kcheck`` is one the script makes."""
    text = (ROOT / "README.md").read_text()
    made = {e.name for e in EXAMPLES.EXAMPLES}
    assert set(EXAMPLES.blocks(text)) == made
    sessions = re.findall(r"```text\n\$ kcheck", text)
    assert len(sessions) == len(made)


@pytest.mark.parametrize(
    "example",
    [
        pytest.param(e, id=e.name, marks=[] if e.quick else [pytest.mark.slow])
        for e in EXAMPLES.EXAMPLES
    ],
)
def test_readme_example_is_what_kcheck_prints(example, tmp_path):
    """The README's session against a fresh run: the same words, tables and numbers (times and
    the spacing they move aside). ``python scripts/readme_examples.py`` regenerates them."""
    where = EXAMPLES.scratch()
    try:
        now = EXAMPLES.run(example, where)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    shown = EXAMPLES.blocks((ROOT / "README.md").read_text())[example.name]
    assert EXAMPLES.normal(now) == EXAMPLES.normal(shown), now


def test_normal_sets_aside_times_but_not_numbers():
    a = "verdict: kernel (clear; epsilon 2 points, 1.46s)\nlinear  70.37%  C=2^-5   0.01"
    b = "verdict: kernel (clear; epsilon 2 points,\n12.40s)\nlinear   70.37%  C=2^-5  10.31"
    assert EXAMPLES.normal(a) == EXAMPLES.normal(b)
    assert EXAMPLES.normal(a) != EXAMPLES.normal(a.replace("70.37%", "70.38%"))
    assert EXAMPLES.normal(a) != EXAMPLES.normal(a.replace("C=2^-5", "C=2^-4"))
    off = "\nwarning: rbf took 1.4 CPU seconds against 3.0 predicted (0.5x): the cost model is off"
    assert EXAMPLES.normal(a + off) == EXAMPLES.normal(a)
    folded = off.replace(" the cost model is off", "\n  the cost model is off")
    assert EXAMPLES.normal(a + folded + "\nmodel: kernel") == EXAMPLES.normal(a + "\nmodel: kernel")
    assert EXAMPLES.normal(a + "\nwarning: degree-2 did not run") != EXAMPLES.normal(a)


@pytest.mark.slow
def test_the_report_page_in_docs_is_what_kcheck_report_makes():
    """docs/report.html (and the screenshot made from it) against a fresh batch and report;
    ``python scripts/readme_examples.py --report`` regenerates both."""
    where = EXAMPLES.scratch()
    try:
        page = EXAMPLES.report_page(where)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    assert EXAMPLES.normal_html(page) == EXAMPLES.normal_html(EXAMPLES.REPORT_HTML.read_text())


def test_normal_html_sets_aside_only_the_seconds():
    row = (
        '<tr class="result"><td data-key="a">a</td>'
        + '<td data-key="x">x</td>' * 6
        + '<td class="num" data-key="1.67023">1.67</td><td class="num" data-key="0.04">+4.2</td>'
    )
    slower = row.replace('"1.67023">1.67', '"12.5">12.50')
    assert EXAMPLES.normal_html(row) == EXAMPLES.normal_html(slower)
    assert EXAMPLES.normal_html(row) != EXAMPLES.normal_html(row.replace("+4.2", "+4.3"))
