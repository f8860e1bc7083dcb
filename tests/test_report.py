"""``kcheck report``: the page from a real batch, read back, and rendered in headless chromium."""

from __future__ import annotations

import json
import re
import struct
import subprocess
from pathlib import Path

import pytest
import runner
from conftest import DATASETS, require_tool
from runner import Run

from kcheck.reports.html import read_lines


def kcheck(*args: object, code: int = 0) -> Run:
    """``python -m kcheck ARGS``, which must end with ``code`` and no traceback."""
    return runner.kcheck(*args, code=code)


@pytest.fixture(scope="module")
def batch_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict], Path]:
    """A batch over three data sets, a broken file and a README: ok, error and skipped."""
    tmp = tmp_path_factory.mktemp("report")
    sets = tmp / "sets"
    sets.mkdir()
    for name in ("heart_scale", "fourclass", "german.numer"):
        (sets / name).write_bytes((DATASETS / name).read_bytes())
    (sets / "broken.svm").write_text("1 1:0.5\n-1 2:x\n")
    (sets / "README.md").write_text("notes\n")
    results = tmp / "results.jsonl"
    kcheck("batch", sets, "-o", results, "-q", "-j", "1", "--exact", "never", code=3)
    page = tmp / "report.html"
    kcheck("report", results, "-o", page, "-q")
    lines = [json.loads(x) for x in results.read_text().splitlines()]
    return results, lines, page


@pytest.mark.slow
def test_the_page_has_one_row_per_line_and_loads_nothing(batch_page) -> None:
    _, lines, page = batch_page
    text = page.read_text()
    assert len(lines) == 5
    assert text.count('class="forest-row"') == 5
    assert text.count('<tr class="result">') == 5
    # Self-contained: no URL but the SVG namespace, no external script, style or image.
    urls = set(re.findall(r"https?://[^\"'\s<>]+", text))
    assert urls == {"http://www.w3.org/2000/svg"}
    assert not re.search(r"<(script|link|img)[^>]*(src|href)=", text)
    by_name = {x["name"]: x for x in lines}
    assert "error: " in text and "skipped: .md file" in text
    for name, line in by_name.items():
        if line["status"] == "ok":
            label = f"{line['verdict']} ({line['margin']})"
            assert re.search(rf'data-name="{re.escape(name)}".*?{re.escape(label)}', text, re.S)
            for checker, c in line["checkers"].items():
                g = c["gap"]
                assert f"{name} {checker}: {100 * g:+.1f}" in text


def test_bad_results_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "r.jsonl"
    bad.write_text('{"name": "a", "status": "ok"}\n')
    run = kcheck("report", bad, "-o", tmp_path / "p.html", code=2)
    assert run.stderr.strip().count("\n") == 0 and "r.jsonl:1" in run.stderr
    bad.write_text("not json\n")
    assert (
        "r.jsonl:1: not a JSON line"
        in kcheck("report", bad, "-o", tmp_path / "p.html", code=2).stderr
    )
    kcheck("report", bad, "-o", bad, code=2)
    assert bad.read_text() == "not json\n"
    assert not (tmp_path / "p.html").exists()


def test_a_resumed_name_keeps_its_latest_line(batch_page, tmp_path: Path) -> None:
    results, lines, _ = batch_page
    ok = next(x for x in lines if x["status"] == "ok")
    again = dict(ok, verdict="kernel", margin="borderline", deciding_checker="degree2")
    doubled = tmp_path / "r.jsonl"
    doubled.write_text(results.read_text() + json.dumps(again) + "\n")
    rows = read_lines(str(doubled))
    assert len(rows) == 5
    assert [r.verdict for r in rows if r.name == ok["name"]] == ["kernel"]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow
def test_the_page_in_a_headless_browser(batch_page, tmp_path: Path) -> None:
    chromium = require_tool("chromium")
    _, lines, page = batch_page
    base = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
    ]
    shot = tmp_path / "shot.png"
    run = subprocess.run(
        [*base, f"--screenshot={shot}", "--window-size=1100,800", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert shot.exists(), run.stderr[-2000:]
    assert png_size(shot) == (1100, 800)
    dom = subprocess.run(
        [*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=600
    )
    # The DOM after the inline script ran: it marks the page, so an exception would show.
    assert 'data-sortable="1"' in dom.stdout, dom.stderr[-2000:]
    assert dom.stdout.count('class="forest-row"') == len(lines) == 5
    assert dom.stdout.count('class="result"') == 5
    for out in (run.stderr, dom.stderr):
        console = [x for x in out.splitlines() if "CONSOLE" in x or "Uncaught" in x]
        assert not console, console


def test_the_page_names_the_metric_of_its_gaps(batch_page, tmp_path: Path) -> None:
    """Gaps under --metric auc are AUC points, not accuracy points: the axis and the table say
    which; lines of different metrics are named each; an unknown metric is refused."""
    results, lines, _ = batch_page
    ok = [x for x in lines if x["status"] == "ok"]
    auc = tmp_path / "auc.jsonl"
    auc.write_text("".join(json.dumps(dict(x, metric="auc")) + "\n" for x in ok))
    page = tmp_path / "auc.html"
    kcheck("report", auc, "-o", page, "-q")
    text = page.read_text()
    assert "AUC points" in text and "accuracy points" not in text
    assert text.count('<td data-key="AUC">AUC</td>') == len(ok)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(results.read_text() + json.dumps(dict(ok[0], name="x", metric="auc")) + "\n")
    kcheck("report", mixed, "-o", page, "-q")
    assert "each line&#x27;s metric (accuracy, AUC)" in page.read_text()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(dict(ok[0], metric="f1")) + "\n")
    assert '"metric" must be one of' in kcheck("report", bad, "-o", page, code=2).stderr
