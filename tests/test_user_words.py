"""What the user reads matches what was computed: a log that is never silent for long, the
run's metric in every sentence, a report page that fits its window and marks the gate, JUnit
that stricter consumers accept, and annotations that users' type checkers see."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
import xmlschema
from conftest import DATASETS, ROOT, require_tool
from runner import Run, on_a_terminal, run_kcheck

# --- a fake clock: a long run in a few seconds --------------------------------------------------

#: Runs ``python -m kcheck ARGS`` with a clock that each RBF grid point moves on by STEP seconds
#: (``time.perf_counter``, which kcheck times its stages with), so that a search of 110 points
#: takes 11 minutes by that clock and seconds of the machine's. Each line of stderr is written
#: with the clock's time first. No test reads the machine's clock.
SLOWED_SEARCH = textwrap.dedent(
    '''
    import runpy
    import sys
    import time

    STEP = float(sys.argv.pop(1))
    real = time.perf_counter
    offset = [0.0]
    time.perf_counter = lambda: real() + offset[0]

    import kcheck.tuning.rbf_grid as rbf_search

    scored = rbf_search._cv_point_with

    def slowed(*args, **kwargs):
        offset[0] += STEP
        return scored(*args, **kwargs)

    rbf_search._cv_point_with = slowed


    class Stamped:
        """stderr as a log: each whole line with the clock's time first."""

        def __init__(self, out):
            self.out, self.part = out, ""

        def write(self, text):
            self.part += text
            *lines, self.part = self.part.split("\\n")
            for line in lines:
                self.out.write(f"{time.perf_counter():.3f}\\t{line}\\n")
            return len(text)

        def flush(self):
            self.out.flush()

        def isatty(self):
            return False

        def fileno(self):
            return self.out.fileno()


    sys.stderr = Stamped(sys.stderr)
    sys.argv = ["kcheck", *sys.argv[1:]]
    runpy.run_module("kcheck", run_name="__main__", alter_sys=True)
    '''
)


def slowed_run(tmp_path: Path, step: float, *args: str) -> tuple[int, list[tuple[float, str]]]:
    """kcheck ARGS with each grid point taking ``step`` seconds of the fake clock: the exit code
    and stderr's lines with their times on that clock."""
    script = tmp_path / "slowed.py"
    script.write_text(SLOWED_SEARCH)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    r = subprocess.run(
        [sys.executable, str(script), str(step), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = []
    for x in r.stderr.splitlines():
        at, _, text = x.partition("\t")
        lines.append((float(at), text))
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, lines


def longest_silence(lines: list[tuple[float, str]]) -> tuple[float, str]:
    """The longest time between two lines of the log, and the line that ended it."""
    gaps = [(b[0] - a[0], b[1]) for a, b in zip(lines, lines[1:], strict=False)]
    return max(gaps)


def shown(lines: list[tuple[float, str]]) -> str:
    start = lines[0][0]
    return "\n".join(f"{t - start:8.1f}  {x}" for t, x in lines)


# --- 5: the log of a long stage is never silent for long ----------------------------------------


@pytest.mark.slow
def test_a_ten_minute_verify_writes_a_line_at_least_every_minute(tmp_path: Path) -> None:
    """In a CI log, verify's grid search wrote at 1, 2, 4, 8, 16, 32 and 64 points only: the
    last 46 of 110 points ran without a line (4 min on a real run). Each point takes 6 s of a
    fake clock here: 11 minutes, and no minute without a line."""
    code, lines = slowed_run(
        tmp_path, 6.0, "verify", str(DATASETS / "heart_scale"), "-j", "1", "-o", "out.json"
    )
    assert code == 0, shown(lines)
    assert lines[-1][0] - lines[0][0] >= 600, shown(lines)  # the clock took the points' time
    silence, after = longest_silence(lines)
    assert silence <= 60, f"{silence:.0f}s without a line before {after!r}:\n{shown(lines)}"
    running = [x for _, x in lines if re.match(r"kcheck: RBF grid search: still running, ", x)]
    assert running, shown(lines)
    assert all(re.search(r", \d+/110 grid points, elapsed \d+:\d\d", x) for x in running)


@pytest.mark.slow
def test_a_long_model_search_writes_a_line_at_least_every_minute(tmp_path: Path) -> None:
    """``--model-out`` with a kernel model climbs from the check's point: 17 points at 20 s
    each of the fake clock (the issue saw 5.6 min of silence), with a line every minute."""
    code, lines = slowed_run(
        tmp_path,
        20.0,
        "check", str(DATASETS / "heart_scale"), "-j", "1", "-o", "v.json",
        "--model-out", "m", "--model", "kernel",
    )  # fmt: skip
    assert code == 0, shown(lines)
    search = [t for t, x in lines if x.startswith("kcheck: kernel model: grid search")]
    assert search[-1] - search[0] >= 300, shown(lines)
    silence, after = longest_silence(lines)
    assert silence <= 60, f"{silence:.0f}s without a line before {after!r}:\n{shown(lines)}"
    assert any(x.startswith("kcheck: kernel model: grid search: still running, ") for _, x in lines)


def test_a_stage_without_events_still_gets_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stage that reports nothing while it runs (one long training) is said by the log's tick,
    and a batch's pulse names its data set and its stage, with the time since the data set
    started. The clock is a fake one that the test moves."""
    from kcheck.batch.progress import starting, step
    from kcheck.cli import ui
    from kcheck.defaults import Event

    now = [1000.0]
    monkeypatch.setattr(ui.time, "perf_counter", lambda: now[0])
    lines: list[str] = []
    log = ui.StageLog(lines.append)
    log.report(Event("linear baseline (C search)"))
    now[0] += 29
    log.tick()
    assert lines == ["kcheck: linear baseline (C search)"]
    now[0] += 2
    log.tick()
    assert lines[1] == "kcheck: linear baseline (C search): still running, elapsed 0:31"
    now[0] += 10
    log.tick()  # not due: a line was written 10 s ago
    assert len(lines) == 2

    lines.clear()
    batch = ui.BatchLog(lines.append)
    batch.report(starting("[1/2] heart_scale", 0, 2))
    batch.report(step("[1/2] heart_scale: RBF grid search", 0, 110, "grid points"))
    now[0] += 45
    batch.report(step("[1/2] heart_scale: RBF grid search", 30, 110, "grid points"))
    batch.report(starting("[2/2] fourclass", 1, 2))
    assert lines == [
        "kcheck: [1/2] heart_scale: checking",
        "kcheck: [1/2] heart_scale: RBF grid search: still running, 30/110 grid points, "
        "elapsed 0:45, ETA 2:00",
        "kcheck: [2/2] fourclass: checking",
    ]


def _batch_log(tmp_path: Path, *extra: str) -> tuple[Run, list[str]]:
    sets = tmp_path / "sets"
    sets.mkdir(exist_ok=True)
    for name in ("heart_scale", "fourclass"):
        (sets / name).write_bytes((DATASETS / name).read_bytes())
    run = run_kcheck(
        ["batch", str(sets), "-o", str(tmp_path / "r.jsonl"), "--checkers", "degree2",
         "--exact", "never", *extra],
        cwd=tmp_path,
    )  # fmt: skip
    assert run.code == 0, run.describe()
    return run, run.stderr.splitlines()


@pytest.mark.slow
def test_a_batch_log_says_when_each_data_set_starts(tmp_path: Path) -> None:
    """A batch in a log wrote nothing when a data set started (a 30 s check was 30 s of
    silence): a line now says which one starts, before its verdict's line."""
    run, lines = _batch_log(tmp_path)
    for name in ("heart_scale", "fourclass"):
        start = [
            i for i, x in enumerate(lines) if re.fullmatch(rf"kcheck: \[\d/2\] {name}: checking", x)
        ]
        done = [i for i, x in enumerate(lines) if re.match(rf"kcheck: {name}: (kernel|linear) ", x)]
        assert len(start) == 1 and len(done) == 1 and start[0] < done[0], run.stderr
    # A check's own stages are not written one by one in a batch.
    assert not any("degree-2 checker" in x for x in lines), run.stderr


@pytest.mark.slow
def test_a_parallel_batch_log_says_which_data_sets_run(tmp_path: Path) -> None:
    run, lines = _batch_log(tmp_path, "-j", "2")
    for name in ("heart_scale", "fourclass"):
        start = [
            i for i, x in enumerate(lines) if re.match(rf"kcheck: \d/2 done; checking .*{name}", x)
        ]
        done = [i for i, x in enumerate(lines) if re.match(rf"kcheck: {name}: (kernel|linear) ", x)]
        assert start and len(done) == 1 and start[0] < done[0], run.stderr


# --- 6: the run's metric in every sentence -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["balanced", "auc"])
def test_the_footnote_quotes_linear_in_the_runs_metric(tmp_path: Path, metric: str) -> None:
    """Under --metric balanced the footnote said "linear's accuracy was 77.03% there" beside a
    table of balanced accuracies: it now says linear's score in the run's metric, the one the
    RBF SVM's gap was taken from."""
    out = tmp_path / "v.json"
    run = run_kcheck(
        ["check", str(DATASETS / "fourclass"), "--metric", metric, "--exact", "always",
         "--checkers", "degree2", "-o", str(out)],
    )  # fmt: skip
    assert run.code == 0, run.describe()
    v = json.loads(out.read_text())
    words = {"balanced": "balanced accuracy", "auc": "AUC"}[metric]
    rbf = v["checkers"]["rbf"]
    linear = 100 * (rbf["val_score"] - rbf["gap"])
    said = " ".join(run.stderr.split())
    assert f"linear's {words} was {linear:.2f}% there" in said, run.stderr
    assert "linear's accuracy was" not in said


@pytest.mark.slow
def test_verify_says_the_test_files_gap_in_the_runs_metric(tmp_path: Path) -> None:
    run = run_kcheck(
        ["verify", str(DATASETS / "heart_scale"), "--test", str(DATASETS / "heart_scale"),
         "--metric", "balanced", "-j", "1", "-o", str(tmp_path / "v.json")],
    )  # fmt: skip
    assert run.code == 0, run.describe()
    said = " ".join(run.stderr.split())
    assert re.search(r"on the test file [+-]\d+\.\d\d points of balanced accuracy", said), (
        run.stderr
    )


# --- 7 and 8: the report page and JUnit, from one real batch -------------------------------------

#: A name that, with an error's message beside it, made the table run off a 1,200-pixel window.
LONG_NAME = "broken_file_with_a_rather_long_name_from_a_nightly_export.svm"


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A batch over two data sets (one kernel, one linear), a broken file and a README, with
    --junit and --fail-on kernel, checked with three checkers (rbfsvm and mixlinear run on
    none), and its report page."""
    tmp = tmp_path_factory.mktemp("words")
    sets = tmp / "sets"
    sets.mkdir()
    for name in ("heart_scale", "fourclass"):
        (sets / name).write_bytes((DATASETS / name).read_bytes())
    (sets / LONG_NAME).write_text("this is not data\n1 2 3\n")
    (sets / "README.md").write_text("notes\n")
    results, junit_xml, page = tmp / "r.jsonl", tmp / "junit.xml", tmp / "report.html"
    run = run_kcheck(
        ["batch", str(sets), "-o", str(results), "--junit", str(junit_xml), "--fail-on",
         "kernel", "--checkers", "degree2,multilinear,rff", "-q"],
        cwd=tmp,
    )  # fmt: skip
    assert run.code == 3, run.describe()  # the broken file is an error
    made = run_kcheck(["report", str(results), "-o", str(page), "-q"], cwd=tmp)
    assert made.code == 0, made.describe()
    return {"dir": tmp, "results": results, "junit": junit_xml, "page": page}


def page_width(page: Path, tmp_path: Path, window: int = 1200) -> int:
    """The page's width in headless Chromium with a window ``window`` pixels wide: the DOM's
    scroll width, which an inline script writes into the page (its policy allows inline
    scripts)."""
    chromium = require_tool("chromium")
    probe = tmp_path / "probe.html"
    measure = (
        '<script>document.body.setAttribute("data-width", '
        "String(document.documentElement.scrollWidth));</script>"
    )
    probe.write_text(page.read_text().replace("</body>", measure + "</body>"))
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={window},800",
         "--dump-dom", probe.as_uri()],
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    found = re.search(r'data-width="(\d+)"', dom.stdout)
    assert found, dom.stderr[-2000:]
    return int(found.group(1))


@pytest.mark.slow
def test_the_report_fits_a_1200_pixel_window(batch: dict[str, Path], tmp_path: Path) -> None:
    """The table ran to 1,545 pixels: its last column off a 1,200-pixel window."""
    assert page_width(batch["page"], tmp_path) <= 1200


@pytest.mark.slow
def test_the_report_shows_the_checkers_that_ran_and_counts_in_words(
    batch: dict[str, Path],
) -> None:
    """Columns and legend entries only for the checkers with a gap on some data set; "1 error",
    not "1 errors"."""
    text = batch["page"].read_text()
    lines = [json.loads(x) for x in batch["results"].read_text().splitlines()]
    ran = {
        n for x in lines for n, c in (x.get("checkers") or {}).items() if c.get("gap") is not None
    }
    assert {"degree2", "multilinear", "rff"} <= ran and not {"rbfsvm", "mixlinear"} & ran
    columns = set(re.findall(r"<th>([^<]+) gap</th>", text))
    legend = set(
        re.findall(r'<text x="[\d.]+" y="18" font-size="11" fill="#333">([^<]+)</text>', text)
    )
    assert columns == ran and legend == ran
    assert "1 error," in text and "1 errors" not in text


@pytest.mark.slow
def test_the_report_marks_the_data_sets_that_tripped_fail_on(
    batch: dict[str, Path], tmp_path: Path
) -> None:
    """``kcheck report --fail-on kernel`` marks fourclass (kernel) and names it in the summary;
    heart_scale (linear) is not marked."""
    page = tmp_path / "gate.html"
    run = run_kcheck(["report", str(batch["results"]), "-o", str(page), "--fail-on", "kernel"])
    assert run.code == 0, run.describe()
    text = page.read_text()
    rows = re.findall(r'<tr class="([^"]+)"><td class="name" data-key="([^"]+)"', text)
    assert ("result tripped", "fourclass") in rows and ("result", "heart_scale") in rows
    assert re.search(r'class="forest-row tripped" data-name="fourclass"', text)
    assert not re.search(r'class="forest-row tripped" data-name="heart_scale"', text)
    assert "--fail-on kernel: 1 of 2 checked data sets tripped it (fourclass)" in text
    assert page_width(page, tmp_path) <= 1200


#: What Ant's JUnit schema (JUnit.xsd, the one stricter consumers validate with) requires of a
#: ``<testsuite>`` beyond the common schema: a ``timestamp`` in ISO 8601 without a time zone,
#: and a ``hostname`` that is not empty.
ANT_SUITE = """
    <xs:simpleType name="ISO8601_DATETIME_PATTERN">
        <xs:restriction base="xs:dateTime">
            <xs:pattern value="[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"/>
        </xs:restriction>
    </xs:simpleType>
    <xs:simpleType name="HOSTNAME">
        <xs:restriction base="xs:token"><xs:minLength value="1"/></xs:restriction>
    </xs:simpleType>
"""


def strict_schema() -> xmlschema.XMLSchema:
    """The common schema (tests/data/junit-10.xsd) with the suite's ``timestamp`` and
    ``hostname`` required as Ant's schema has them."""
    xsd = (ROOT / "tests" / "data" / "junit-10.xsd").read_text()
    for name, kind in (("timestamp", "ISO8601_DATETIME_PATTERN"), ("hostname", "HOSTNAME")):
        loose = f'<xs:attribute name="{name}" type="xs:string" />'
        assert xsd.count(loose) == 1
        xsd = xsd.replace(loose, f'<xs:attribute name="{name}" type="{kind}" use="required"/>')
    xsd = xsd.replace(
        '<xs:simpleType name="SUREFIRE_TIME">',
        ANT_SUITE + '<xs:simpleType name="SUREFIRE_TIME">',
        1,
    )
    return xmlschema.XMLSchema(xsd)


@pytest.mark.slow
def test_junit_is_what_stricter_consumers_accept(batch: dict[str, Path]) -> None:
    """The suite has Ant's ``timestamp`` and ``hostname``; each case is named by its line's
    data-set name; ``<system-out>`` says ``null`` where the JSON has null, never Python's
    None."""
    report = batch["junit"]
    xmlschema.XMLSchema(str(ROOT / "tests" / "data" / "junit-10.xsd")).validate(str(report))
    strict_schema().validate(str(report))
    suite = ET.parse(report).getroot()
    lines = [json.loads(x) for x in batch["results"].read_text().splitlines()]
    assert sorted(c.attrib["name"] for c in suite.iter("testcase")) == sorted(
        x["name"] for x in lines
    )
    cases = {c.attrib["name"]: c for c in suite.iter("testcase")}
    assert cases["fourclass"].find("failure") is not None
    out = cases["heart_scale"].findtext("system-out") or ""
    assert "deciding_checker: null\n" in out
    assert "None" not in report.read_text()


# --- 9: users' type checkers see the annotations -------------------------------------------------

USER_CODE = """
import kcheck
import kcheck.api

reveal_type(kcheck.api.check)
reveal_type(kcheck.check)
kcheck.api.check([[0.0]], [1], epsilon="2")
kcheck.check([[0.0]], [1], epsilon="2")
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    """The wheel as pip builds it (as tests/test_packaging.py does), unpacked where a user's
    site-packages would hold it, and its file list. It is built from a copy of the package and
    its pyproject.toml, so that no earlier build's files (setuptools' build/) slip into it."""
    tmp = tmp_path_factory.mktemp("typed")
    source = tmp / "source"
    shutil.copytree(
        ROOT / "kcheck", source / "kcheck", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = tmp.glob("kcheck-*.whl")
    site = tmp / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
        return site, set(z.namelist())


def mypy_on_user_code(site: Path, tmp_path: Path) -> str:
    """mypy on a user's file that imports the installed kcheck (not this source tree)."""
    user = tmp_path / "user.py"
    user.write_text(USER_CODE)
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--no-error-summary", str(user)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    return r.stdout + r.stderr


def revealed(output: str, line: int) -> str:
    found = re.search(rf"user\.py:{line}: note: Revealed type is \"(.*)\"", output)
    assert found, output
    return found.group(1)


@pytest.mark.slow
def test_the_wheel_ships_py_typed_and_type_checkers_see_kcheck_check_itself(
    installed: tuple[Path, set[str]], tmp_path: Path
) -> None:
    """Without kcheck/py.typed in the wheel, a user's mypy skips kcheck ("missing library stubs
    or py.typed marker") and every call is Any. And ``kcheck.check`` is found by the package's
    lazy ``__getattr__``, which a type checker reads as Any: the annotations must reach
    ``kcheck.check`` as they reach ``kcheck.api.check``. (One mypy run on the user's file
    shows both.)"""
    site, files = installed
    assert "kcheck/py.typed" in files
    output = mypy_on_user_code(site, tmp_path)
    assert "py.typed" not in output, output
    assert revealed(output, 5).startswith("def (X: "), output
    assert re.search(
        r'user\.py:7: error: Argument "epsilon" to "check" has incompatible type', output
    )
    assert revealed(output, 6) == revealed(output, 5), output
    assert re.search(
        r'user\.py:8: error: Argument "epsilon" to "check" has incompatible type', output
    )


# --- 1. the table adds up where a checker trained on a sample ----------------------------------


@pytest.mark.slow
def test_a_sampled_checkers_gap_names_the_linear_model_it_was_measured_against(
    tmp_path: Path,
) -> None:
    """Degree-2 on a sample that the memory limit allows: its gap is against a linear model
    trained on the same rows, which the table's linear row is not; the footnote said "gap:
    checker minus linear", and the row's numbers did not add up."""
    import numpy as np

    from kcheck.io.data import write_libsvm

    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (1800, 40))
    path = tmp_path / "ring.svm"
    write_libsvm(str(path), np.where(X[:, 0] ** 2 + X[:, 1] ** 2 > 0.6, 1.0, -1.0), X)
    out = tmp_path / "v.json"
    args = ["check", str(path), "--exact", "never", "--checkers", "degree2"]
    code, screen = on_a_terminal([*args, "--memory-limit", "100M", "-o", str(out)])
    assert code in (0, 1), screen
    degree2 = json.loads(out.read_text())["checkers"]["degree2"]
    assert degree2["status"] == "subsampled", degree2
    reference = degree2["val_score"] - degree2["gap"]
    said = " ".join(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen).split())
    assert (
        f"degree-2's gap is against a linear model trained on its "
        f"{degree2['reference']['rows']:,}-row sample ({100 * reference:.2f}%)"
    ) in said, said[-1500:]


# --- 2. linear (clear) where exact mode decided over a proxy's interval --------------------------


@pytest.mark.slow
def test_a_clear_linear_over_a_proxys_straddling_interval_names_the_proxy() -> None:
    """heart_scale: exact mode decides linear (clear) while degree-2's and MultiLinear's
    intervals on the validation split reach epsilon. The README and docs/json.md said a clear
    linear meant every method's interval below epsilon, and the sentence under the table said
    nothing of them."""
    out_code, screen = on_a_terminal(["check", str(DATASETS / "heart_scale")], columns=100)
    v = json.loads(run_kcheck(["check", str(DATASETS / "heart_scale"), "-q"]).stdout)
    assert out_code == 0 and (v["verdict"], v["margin"]) == ("linear", "clear"), screen
    assert v["decision"]["by"] == "exact"
    eps = v["epsilon"]
    near = [
        n
        for n, c in v["checkers"].items()
        if n != "rbf" and c.get("gap_ci95") and c["gap_ci95"][1] >= eps > c["gap"]
    ]
    assert near, v["checkers"]
    said = " ".join(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen).split())
    assert "on the validation split reach epsilon too" in said or (
        "on the validation split reaches epsilon too" in said
    ), said[-1500:]
    words = {"degree2": "degree-2's", "multilinear": "MultiLinear's"}
    assert all(words[n] in said for n in near), said[-1500:]
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "| `linear (clear)` | every method's 95% interval lies below epsilon" not in readme


# --- 4. "Next:" says what the next command costs and repeats the run's options ------------------


@pytest.mark.slow
def test_next_says_what_the_model_costs_and_keeps_the_runs_options(tmp_path: Path) -> None:
    """After a kernel verdict the suggested ``--model-out`` ran a grid search for minutes with
    no word of its cost beforehand, and dropped the run's ``--max-rows`` and ``--checkers``
    (a check on other rows, with other checkers)."""
    import numpy as np

    from kcheck.io.data import write_libsvm
    from kcheck.modelfiles import export
    from kcheck.tuning.rbf_grid import duration_text

    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, (700, 4))
    path = tmp_path / "ring.svm"
    write_libsvm(str(path), np.where(X[:, 0] ** 2 + X[:, 1] ** 2 > 0.5, 1.0, -1.0), X)
    out = tmp_path / "v.json"
    options = "--max-rows 600 --checkers degree2,multilinear"
    code, screen = on_a_terminal(
        ["check", str(path), "--explain", *options.split(), "-o", str(out)], columns=250
    )
    v = json.loads(out.read_text())
    assert code == 0 and v["verdict"] == "kernel", screen[-1500:]
    d = v["data"]
    kernel = export.seconds_of(
        "kernel",
        rows=d["rows"],
        nnz=d["nnz"],
        features=d["features"],
        n_classes=len(d["classes"]),
        jobs=os.cpu_count() or 1,
    )
    said = " ".join(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen).split())
    assert (
        f"Next: `kcheck check {path} {options} --model-out MODEL` trains it "
        f"(about {duration_text(kernel)} predicted)"
    ) in said, said[-2000:]
    assert f"`kcheck check {path} {options} --explain --model-out MODEL --model linear+" in said


# --- 3. tiny data is not clear on a degenerate interval ------------------------------------------


@pytest.mark.parametrize("rows", [10, 12, 30])
def test_a_few_rows_are_never_clear_on_an_interval_of_zero_width(rows: int, tmp_path: Path) -> None:
    """10, 12 and 30 rows: ``linear (clear)`` on +0.00 [+0.0, +0.0], linear and the checkers
    alike on every validation point. The interval now has the floor its points allow, and a
    warning names how few they are."""
    lines = (DATASETS / "heart_scale").read_text().splitlines()[:rows]
    path = tmp_path / "few.svm"
    path.write_text("\n".join(lines) + "\n")
    r = run_kcheck(["check", str(path), "-q", "--exact", "never"])
    v = json.loads(r.stdout)
    for name, c in v["checkers"].items():
        if c.get("gap_ci95") is not None:
            low, high = c["gap_ci95"]
            assert high - low > 0.1, (name, c)
    alike = [w for w in v["warnings"] if "right or wrong alike on all" in w]
    assert v["margin"] == "borderline" or not alike, v
    points = v["split"]["validation"]
    assert all(f"all {points:,} points" in w for w in alike), alike


# --- 10. -q at a terminal without -o ----------------------------------------------------------


def test_quiet_at_a_terminal_without_o_prints_the_verdict() -> None:
    """stdout a terminal, so no JSON; -q, so no table: the run printed nothing at all."""
    args = ["check", str(DATASETS / "heart_scale"), "--exact", "never"]
    code, screen = on_a_terminal([*args, "-q"])
    v = json.loads(run_kcheck([*args, "-q"]).stdout)
    assert code == 0
    assert screen.strip() == f"{v['verdict']} ({v['margin']})", screen


def test_verify_that_agrees_with_a_borderline_check_on_a_borderline_reference_says_so(
    tmp_path: Path,
) -> None:
    """The first 80 rows of heart_scale: check and verify both say linear (borderline), and
    verify said it "confirms" the check, which settles nothing."""
    lines = (DATASETS / "heart_scale").read_text().splitlines()[:80]
    path = tmp_path / "h80.svm"
    path.write_text("\n".join(lines) + "\n")
    check = tmp_path / "c.json"
    run_kcheck(["check", str(path), "-q", "--exact", "never", "-o", str(check)])
    c = json.loads(check.read_text())
    v = json.loads(run_kcheck(["verify", str(path), "--check-json", str(check), "-q"]).stdout)
    assert (c["margin"], v["margin"], v["confirms"]) == ("borderline", "borderline", True), v
    assert v["both_borderline"] is True and v["check"]["margin"] == "borderline"
    code, screen = on_a_terminal(["verify", str(path), "--check-json", str(check)], columns=200)
    said = " ".join(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen).split())
    assert "but both are borderline: neither settles it" in said, said[-1500:]
    assert "this confirms" not in said


# --- 6. the run's metric in the model line and the test-file line ------------------------------


def test_a_balanced_runs_model_and_test_file_lines_quote_balanced_accuracy(tmp_path: Path) -> None:
    """Under --metric balanced the saved model's line said "CV accuracy" of a number that is
    its CV balanced accuracy, and the test-file line quoted plain accuracy beside a table in
    balanced accuracy."""
    model, out = tmp_path / "m", tmp_path / "v.json"
    args = ["check", str(DATASETS / "svmguide1"), "--test", str(DATASETS / "svmguide1.t")]
    args += ["--metric", "balanced", "--exact", "never", "--checkers", "degree2"]
    code, screen = on_a_terminal([*args, "--model-out", str(model), "-o", str(out)], columns=200)
    v = json.loads(out.read_text())
    said = " ".join(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen).split())
    assert code == 0, said[-1500:]
    cv = 100 * v["model"]["cv_accuracy"]
    assert f"CV balanced accuracy {cv:.2f}%" in said, said[-1500:]
    linear = 100 * v["test"]["score"]["linear"]
    rows = v["test"]["rows"]
    assert f"test file ({rows:,} rows, balanced accuracy): linear {linear:.2f}%" in said
