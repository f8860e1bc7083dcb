"""The CI gate end to end, as the README's "Use in CI" section runs it: a data directory with
good, corrupt, empty and non-data files, ``--fail-on kernel``, exact exit codes and JSON lines,
then the README's own shell gate and jq recipes over the result."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATASETS, ROOT, require_tool
from runner import kcheck

FAST = ("--checkers", "multilinear", "--exact", "never")


def lines_of(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def readme_block(heading: str, language: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = re.split(r"\n#{2,3} ", text.split(heading, 1)[1], maxsplit=1)[0]
    return re.findall(rf"```{language}\n(.*?)\n```", section, flags=re.S)[0]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """data/: two good data sets, one corrupt on line 2, one empty, and three non-data files."""
    d = tmp_path / "data"
    d.mkdir()
    shutil.copy(DATASETS / "fourclass", d / "fourclass")  # needs a kernel
    shutil.copy(DATASETS / "heart_scale", d / "heart_scale")  # linear is enough
    (d / "corrupt.svm").write_text("1 1:0.5 2:0.25\n-1 1:0.5 2:x\n1 1:0.1\n")
    (d / "empty.svm").write_text("")
    (d / "README.md").write_text("# our data\n")
    (d / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (d / "results.json").write_text("{}\n")
    return d


@pytest.mark.slow
def test_ci_scenario(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "kcheck.jsonl"
    r = kcheck("batch", str(data), "-o", str(out), "--fail-on", "kernel", "-q", *FAST)
    # Errors take precedence over the gate: 3, not 1 (and never 0).
    assert r.returncode == 3, r.stderr
    assert r.stdout == b""
    assert r.stderr.splitlines() == [
        "kcheck: 2 of 4 data sets could not be checked: corrupt.svm, empty.svm"
    ]
    lines = lines_of(out)
    got = {x["name"]: (x["status"], x["verdict"], x["error"], x.get("reason")) for x in lines}
    assert got == {
        str(data / "README.md"): ("skipped", None, None, ".md file"),
        str(data / "plot.png"): ("skipped", None, None, ".png file"),
        str(data / "results.json"): ("skipped", None, None, ".json file"),
        "corrupt.svm": (
            "error",
            None,
            f"{data / 'corrupt.svm'}:2: expected a numeric value, got 'x'",
            None,
        ),
        "empty.svm": (
            "error",
            None,
            f"{data / 'empty.svm'}: expected data rows, got none (empty file?)",
            None,
        ),
        "fourclass": ("ok", "kernel", None, None),
        "heart_scale": ("ok", "linear", None, None),
    }
    assert [x["status"] for x in lines[:3]] == ["skipped"] * 3  # skips first
    for x in lines:
        assert x["schema_version"] == 3 and x["kcheck_version"]
        if x["status"] == "ok":
            assert len(x["data"]["sha256"]) == 64 and len(x["resume_key"]) == 64
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "kcheck.jsonl"]

    # Fix the data: the gate now trips on the kernel verdict alone (exit 1); the results that
    # are still valid are reused.
    (data / "corrupt.svm").unlink()
    (data / "empty.svm").unlink()
    r = kcheck("batch", str(data), "-o", str(out), "--fail-on", "kernel", "--resume", *FAST)
    assert r.returncode == 1, r.stderr
    assert "reused 2 of 2 results" in r.stderr
    assert r.stderr.splitlines()[-1] == (
        "kcheck: verdict is kernel for 1 of 2 data sets (--fail-on kernel): fourclass"
    )
    assert sorted(x["name"] for x in lines_of(out) if x["status"] == "ok") == [
        "fourclass",
        "heart_scale",
    ]

    # The other gate, and --strict: every skip becomes an error.
    r = kcheck("batch", str(data), "-o", str(out), "--fail-on", "linear", "-q", *FAST)
    assert r.returncode == 1, r.stderr
    r = kcheck("batch", str(data), "-o", str(out), "--fail-on", "kernel", "--strict", "-q", *FAST)
    assert r.returncode == 3, r.stderr
    assert {x["status"] for x in lines_of(out) if x["name"].startswith(str(data))} == {"error"}

    # Only the linear data set: the gate passes.
    (data / "fourclass").unlink()
    r = kcheck("batch", str(data), "-o", str(out), "--fail-on", "kernel", "-q", *FAST)
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_readme_shell_gate_and_jq_recipes(data: Path, tmp_path: Path) -> None:
    """The README's shell gate, word for word, on the scenario's data; then its jq recipes."""
    jq = require_tool("jq")
    script = readme_block("### A plain shell gate", "sh")
    bindir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    r = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600
    )
    assert r.returncode == 1, r.stderr  # exit 3 from kcheck: the gate script fails
    assert r.stdout.splitlines() == [
        "these data sets could not be checked:",
        "corrupt.svm: data/corrupt.svm:2: expected a numeric value, got 'x'",
        "empty.svm: data/empty.svm: expected data rows, got none (empty file?)",
    ]
    out = tmp_path / "kcheck.jsonl"
    recipes = [
        x
        for x in readme_block("### jq over the JSON lines", "sh").splitlines()
        if x.startswith("jq ")
    ]
    assert len(recipes) == 6
    results = []
    for recipe in recipes:
        run = subprocess.run(
            ["bash", "-c", recipe.replace("jq ", f"{jq} ", 1)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=600,
        )
        assert run.stderr == "", (recipe, run.stderr)
        results.append((run.returncode, run.stdout.splitlines()))
    rows, kernel, errors, skipped, deciding, all_linear = results
    assert rows[0] == 0 and len(rows[1]) == 7
    assert kernel == (0, ["fourclass"])
    assert errors[0] == 0 and [x.split(":")[0] for x in errors[1]] == ["corrupt.svm", "empty.svm"]
    assert skipped == (
        0,
        ["data/README.md: .md file", "data/plot.png: .png file", "data/results.json: .json file"],
    )
    assert deciding[0] == 0 and deciding[1][0].startswith("fourclass\t")
    assert all_linear[0] == 1  # errors and a kernel verdict: not all ok and linear

    # After the fix, with only linear data, the last recipe succeeds: skipped files aside.
    for name in ("corrupt.svm", "empty.svm", "fourclass"):
        (data / name).unlink()
    assert kcheck("batch", "data", "-o", str(out), "-q", *FAST, cwd=tmp_path).returncode == 0
    last = subprocess.run(
        ["bash", "-c", recipes[-1].replace("jq ", f"{jq} ", 1)], cwd=tmp_path, timeout=600
    )
    assert last.returncode == 0
    assert {x["status"] for x in lines_of(out)} == {"ok", "skipped"}


def test_readme_documents_the_gate() -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Use in CI", 1)[1].split("\n## ", 1)[0]
    for needed in (
        "--strict",
        '"status": "skipped"',
        "FILE.partial",
        "FILE.lock",
        "--resume",
        "resume_key",
        "data.sha256",
        "kcheck verify",
        "exits `0`",
        "`1`",
        "`2`",
        "kcheck.jsonl.partial",
        "if: always()",
    ):
        assert needed in section, needed
    assert "appended as they finish" not in text


@pytest.mark.slow
def test_ci_scenario_junit_report(data: Path, tmp_path: Path) -> None:
    """The scenario's batch with --junit: a report that validates against the common JUnit
    schema, one test case per file looked at, with the gate's failure, the errors and skips."""
    import xml.etree.ElementTree as ET

    import xmlschema

    out, report = tmp_path / "kcheck.jsonl", tmp_path / "kcheck-junit.xml"
    r = kcheck(
        "batch", str(data), "-o", str(out), "--junit", str(report), "--fail-on", "kernel",
        "-q", *FAST,
    )  # fmt: skip
    assert r.returncode == 3, r.stderr
    xmlschema.XMLSchema(str(ROOT / "tests" / "data" / "junit-10.xsd")).validate(str(report))
    suite = ET.parse(report).getroot()
    assert suite.tag == "testsuite" and suite.attrib["name"] == "kcheck"
    assert {k: suite.attrib[k] for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "7",
        "failures": "1",
        "errors": "2",
        "skipped": "3",
    }
    outcome = {
        Path(c.attrib["name"]).name: [e.tag for e in c if e.tag != "system-out"]
        for c in suite.iter("testcase")
    }
    assert outcome == {
        "README.md": ["skipped"],
        "plot.png": ["skipped"],
        "results.json": ["skipped"],
        "corrupt.svm": ["error"],
        "empty.svm": ["error"],
        "fourclass": ["failure"],
        "heart_scale": [],
    }
    lines = {Path(x["data"]["path"]).name: x for x in lines_of(out)}
    for case in suite.iter("testcase"):
        line = lines[Path(case.attrib["name"]).name]
        if line["status"] == "ok":
            assert f"verdict: {line['verdict']}\nmargin: {line['margin']}\n" in (
                case.findtext("system-out") or ""
            )
        if line["status"] == "error":
            assert case.find("error").attrib["message"] == line["error"]  # type: ignore[union-attr]
    # Fixed data: no failure, no error; the report is replaced whole.
    for name in ("corrupt.svm", "empty.svm", "fourclass"):
        (data / name).unlink()
    r = kcheck("batch", str(data), "--junit", str(report), "--fail-on", "kernel", "-q", *FAST)
    assert r.returncode == 0, r.stderr
    suite = ET.parse(report).getroot()
    assert (suite.attrib["tests"], suite.attrib["failures"], suite.attrib["errors"]) == (
        "4",
        "0",
        "0",
    )
