"""``--junit FILE``: the verdicts as JUnit XML that validates against the common schema, one
test case per data set, with the failure, error and skipped elements CI systems read."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import xmlschema
from conftest import DATASETS, ROOT
from runner import kcheck

from kcheck.errors import KcheckError
from kcheck.reports import junit

XSD = ROOT / "tests" / "data" / "junit-10.xsd"
FAST = ("--checkers", "multilinear", "--exact", "never")


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(XSD))


def ok_line(name: str, verdict: str, gap: float) -> dict[str, Any]:
    return {
        "name": name,
        "status": "ok",
        "verdict": verdict,
        "margin": "clear",
        "deciding_checker": "multilinear" if verdict == "kernel" else None,
        "epsilon": 0.02,
        "metric": "accuracy",
        "data": {"path": f"data/{name}"},
        "checkers": {
            "multilinear": {"status": "ok", "reason": None, "gap": gap, "gap_ci95": [0.1, 0.3]}
        },
        "warnings": ["a warning"],
        "seconds": 1.25,
    }


LINES = [
    {
        "name": "data/README.md",
        "status": "skipped",
        "reason": ".md file",
        "data": {"path": "data/README.md"},
        "seconds": 0.0,
    },
    {
        "name": "bad.svm",
        "status": "error",
        "error": "data/bad.svm:2: expected a numeric value, got 'x'",
        "data": {"path": "data/bad.svm"},
        "seconds": 0.01,
    },
    ok_line("wavy", "kernel", 0.2),
    ok_line("flat", "linear", -0.01),
]


def cases(suite: ET.Element) -> dict[str, ET.Element]:
    return {c.attrib["name"]: c for c in suite.iter("testcase")}


def test_each_line_is_a_test_case_with_its_outcome(schema: xmlschema.XMLSchema) -> None:
    suite = junit.build(LINES, fail_on="kernel", summary=lambda v: f"words for {v['name']}")
    schema.validate(junit.render(suite).decode())
    assert suite.attrib["name"] == "kcheck"
    assert {k: suite.attrib[k] for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "4",
        "failures": "1",
        "errors": "1",
        "skipped": "1",
    }
    found = cases(suite)
    assert list(found) == ["data/README.md", "bad.svm", "wavy", "flat"]
    assert [child.tag for child in found["data/README.md"]] == ["skipped"]
    assert found["data/README.md"][0].attrib["message"] == ".md file"
    error = found["bad.svm"].find("error")
    assert error is not None and error.attrib["message"].endswith("got 'x'")
    failure = found["wavy"].find("failure")
    assert failure is not None and failure.text == "words for wavy"
    assert failure.attrib["message"] == "verdict is kernel (--fail-on kernel): words for wavy"
    assert found["flat"].find("failure") is None
    out = found["wavy"].findtext("system-out") or ""
    assert "verdict: kernel\nmargin: clear\ndeciding_checker: multilinear\n" in out
    assert "gap multilinear: +20.00 points (95% CI +10.00 to +30.00), ok" in out
    assert "warning: a warning" in out
    props = {p.attrib["name"]: p.attrib["value"] for p in suite.iter("property")}
    assert props["kcheck_version"]


def test_without_fail_on_nothing_fails_and_the_gate_can_trip_on_linear() -> None:
    assert junit.build(LINES).attrib["failures"] == "0"
    suite = junit.build(LINES, fail_on="linear")
    assert cases(suite)["flat"].find("failure") is not None


def test_text_xml_cannot_hold_is_replaced(schema: xmlschema.XMLSchema) -> None:
    line = {**LINES[1], "error": "bad byte \x00 and \x1b[31m here"}
    document = junit.render(junit.build([line]))
    schema.validate(document.decode())
    error = ET.fromstring(document).find("testcase/error")
    assert error is not None and error.attrib["message"] == "bad byte \ufffd and \ufffd[31m here"


def test_write_is_atomic_and_refuses_a_missing_directory(tmp_path: Path) -> None:
    target = tmp_path / "report.xml"
    target.write_text("old")
    junit.write(target, junit.build(LINES))
    assert ET.parse(target).getroot().attrib["tests"] == "4"
    assert [p.name for p in tmp_path.iterdir()] == ["report.xml"]
    with pytest.raises(KcheckError, match="cannot write JUnit file"):
        junit.write(tmp_path / "missing" / "report.xml", junit.build(LINES))


@pytest.mark.slow
def test_check_writes_a_failure_then_an_error(tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
    report = tmp_path / "check.xml"
    r = kcheck(
        "check", str(DATASETS / "fourclass"), "--junit", str(report), "--fail-on", "kernel",
        "-q", "-o", str(tmp_path / "v.json"), *FAST,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    schema.validate(str(report))
    (case,) = cases(ET.parse(report).getroot()).values()
    assert case.attrib["name"] == str(DATASETS / "fourclass")
    failure = case.find("failure")
    assert failure is not None and (failure.text or "").startswith("MultiLinear beat linear by")

    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:0.5\n-1 1:x\n")
    r = kcheck("check", str(bad), "--junit", str(report), "-q", *FAST)
    assert r.returncode == 2, r.stderr
    schema.validate(str(report))
    suite = ET.parse(report).getroot()
    assert (suite.attrib["tests"], suite.attrib["errors"]) == ("1", "1")
    assert (
        suite.find("testcase/error").attrib["message"]
        == f"{bad}:2: expected a numeric value, got 'x'"
    )  # type: ignore[union-attr]


@pytest.mark.slow
def test_junit_may_not_overwrite_an_input(tmp_path: Path) -> None:
    data = tmp_path / "d.svm"
    data.write_bytes((DATASETS / "heart_scale").read_bytes())
    r = kcheck("check", str(data), "--junit", str(data), "-q", *FAST)
    assert r.returncode == 2
    assert "is the input file" in r.stderr
    assert data.read_bytes() == (DATASETS / "heart_scale").read_bytes()
