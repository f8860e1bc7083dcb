"""The README's quick start is what CI runs, so the two cannot drift apart."""

import re

from conftest import ROOT


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
