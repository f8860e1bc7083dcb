"""kcheck's own formats read back as untrusted input: check JSON, batch lines, term specs and
``--files-from`` lists (kcheck/io/ownformat.py and its readers).

Each reproduction of issue 38 is here: an endless stream, a 100,000-deep ``[[[...]]]``, a
5,000-digit integer, a field of the wrong type, an undecodable byte or a newline in a name.
Every one must end in exit 2 with exactly one ``kcheck: error:`` line naming the file (or, for
``batch --resume``, in the line being checked again), never a traceback or a runaway. The
hypothesis tests at the end feed each format mutated documents and raw bytes.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import runner
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console
from runner import Run, one_error_line, slowdown

from kcheck import verify
from kcheck.batch import resume, writer
from kcheck.batch.discovery import DataSet, read_path_list
from kcheck.cli.app import main
from kcheck.cli.render import batch_caption, batch_table
from kcheck.config import CheckConfig
from kcheck.errors import DataFormatError, KcheckError, printable
from kcheck.io import ownformat
from kcheck.prepare import parse_max_rows
from kcheck.reports import html as report
from kcheck.terms import expand

ROOT = Path(__file__).resolve().parent.parent
HEART = ROOT / "datasets" / "heart_scale"
GOLDEN = ROOT / "tests" / "golden" / "heart_scale.exact-auto.json"
#: What a run may map: far above what any case here needs, far below what hurts the machine.
ADDRESS_SPACE = 4 * 2**30
#: A ceiling against a hang or a read of the whole stream, not a timing assertion.
SECONDS = 120.0
DEEP = "[" * 100_000 + "]" * 100_000
HUGE_INT = "9" * 5000


# --- running kcheck -----------------------------------------------------------------------------


def kcheck(*args: object) -> Run:
    """``python -m kcheck ARGS`` in a subprocess, capped in memory and time."""
    return runner.kcheck(*args, timeout=SECONDS * slowdown(), address_space=ADDRESS_SPACE)


def in_process(capsys: pytest.CaptureFixture[str], *args: object) -> Run:
    """``kcheck ARGS`` through :func:`kcheck.cli.app.main` in this process, as a :class:`Run`
    of what it printed. An exception other than SystemExit (a bug: a traceback) fails the
    test."""
    capsys.readouterr()
    try:
        main([str(a) for a in args])
    except SystemExit as e:
        code = int(e.code or 0)
    else:
        code = 0
    said = capsys.readouterr()
    return Run(tuple(map(str, args)), code, said.out.encode("utf-8", "replace"), said.err)


# --- documents kcheck writes --------------------------------------------------------------------


def check_json() -> dict[str, Any]:
    """A real check verdict (the golden one of heart_scale), with an explain block."""
    v = json.loads(GOLDEN.read_text())
    v["explain"] = {
        "available": True,
        "reason": None,
        "index_base": 1,
        "terms": [{"features": [2, 4]}, {"features": [1, 1]}, {"features": [3, 7]}],
    }
    return v


def batch_line() -> dict[str, Any]:
    """heart_scale's ok line as ``kcheck batch`` writes it, keyed for ``--resume`` under the
    default options."""
    v = json.loads(GOLDEN.read_text())
    line = {"name": "heart_scale", "status": "ok", "error": None, **v, "seconds": 0.5}
    return resume.with_key(line, CheckConfig(train=str(HEART)))


def spec_text() -> str:
    return json.dumps(
        {"format": "kcheck-terms", "version": 1, "width": 13, "index_base": 1, "terms": [[1, 2]]}
    )


def liblinear_model(path: Path, n_features: int) -> None:
    """A valid LIBLINEAR model file, as liblinear-train writes one (no bias)."""
    head = ["solver_type L2R_L2LOSS_SVC_DUAL", "nr_class 2", "label 1 -1"]
    head += [f"nr_feature {n_features}", "bias -1", "w"]
    path.write_text("\n".join(head + ["0.1"] * n_features) + "\n")


# --- unbounded input: refused at the cap, quickly ---------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_as_the_check_json_is_refused_at_the_cap(device: str) -> None:
    """In a process of its own, capped in memory: it ends (within a ceiling that only a
    read of the whole stream would pass) with one line."""
    r = kcheck("verify", "-q", HEART, "--check-json", device)
    one_error_line(r, device, "too large for a kcheck check verdict", stages=False)


def test_a_device_as_results_or_spec_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    r = in_process(capsys, "verify", HEART, "--check-json", "/dev/zero", "-q")
    one_error_line(r, "/dev/zero", "larger than 16.0 MiB", stages=False)
    r = in_process(capsys, "report", "/dev/zero", "-o", tmp_path / "p.html")
    one_error_line(r, "/dev/zero:1", "longer than", stages=False)
    r = in_process(capsys, "report", "/dev/urandom", "-o", tmp_path / "p.html")
    # Blank lines are skipped, so the random stream's first line that is not blank is named
    # (line 2 where its first byte was a newline: about one run in 256).
    line = one_error_line(r, "/dev/urandom:", stages=False)
    assert re.search(r"/dev/urandom:\d+: ", line), line
    r = in_process(
        capsys, "expand", HEART, "--spec", "/dev/zero", "--fit-scaling", HEART, "-o", "-"
    )
    one_error_line(r, "/dev/zero", "too large for a term spec", stages=False)
    r = in_process(
        capsys, "expand", HEART, "--from-check", "/dev/urandom", "--top", "1",
        "--fit-scaling", HEART, "-o", tmp_path / "x",
    )  # fmt: skip
    one_error_line(r, "/dev/urandom", "too large", stages=False)
    assert not (tmp_path / "p.html").exists() and not (tmp_path / "x").exists()


@pytest.mark.slow
def test_resume_over_a_partial_file_linked_to_dev_zero(tmp_path: Path) -> None:
    data = tmp_path / "d"
    data.mkdir()
    shutil.copy(HEART, data / "heart_scale")
    out = tmp_path / "r.jsonl"
    out.write_text(json.dumps(batch_line()) + "\n")
    os.symlink("/dev/zero", f"{out}.partial")
    r = kcheck("batch", data, "-o", out, "--resume", "-q")
    one_error_line(r, "r.jsonl.partial", "too large for a batch's results", stages=False)


@pytest.mark.slow
def test_resume_over_a_results_file_larger_than_the_limit_allows(tmp_path: Path) -> None:
    """One 300 MB output line once made --resume under --memory-limit 500M peak at 656 MB:
    the results are read within a 32nd of the limit, so a 4 MB line is over 100M's cap."""
    data = tmp_path / "d"
    data.mkdir()
    shutil.copy(HEART, data / "heart_scale")
    out = tmp_path / "r.jsonl"
    out.write_text(json.dumps({**batch_line(), "junk": "a" * 4_000_000}) + "\n")
    before = out.read_bytes()
    r = kcheck("batch", data, "-o", out, "--resume", "--memory-limit", "100M", "-q")
    one_error_line(r, "r.jsonl", "too large for a batch's results", stages=False)
    assert "3.1 MiB" in r.stderr
    assert out.read_bytes() == before


def test_a_files_from_list_is_read_within_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(DataFormatError, match="/dev/zero:1: longer than 4,096 bytes"):
        read_path_list("/dev/zero")
    with pytest.raises(DataFormatError, match="/dev/urandom:"):
        read_path_list("/dev/urandom")
    listing = tmp_path / "list"
    listing.write_bytes(b"a.svm\r\n\n  \nb\xff.svm\nc\nd.svm")
    assert read_path_list(str(listing)) == ["a.svm", "b\udcff.svm", "c", "d.svm"]
    listing.write_bytes(b"a.svm\nb\x00c\n")
    with pytest.raises(DataFormatError, match=r"list:2: a NUL byte"):
        read_path_list(str(listing))
    listing.write_bytes(b"a.svm\n" + b"x" * 5000 + b"\n")
    with pytest.raises(DataFormatError, match=r"list:2: longer than 4,096 bytes"):
        read_path_list(str(listing))
    with pytest.raises(DataFormatError, match="cannot read a --files-from list"):
        read_path_list(str(tmp_path / "missing"))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"x.svm\n\xfe\n")))
    assert read_path_list("-") == ["x.svm", "\udcfe"]


def test_an_endless_line_stream_is_stopped_at_the_total_cap(tmp_path: Path) -> None:
    """Short lines (not one long one) that never end: the total cap stops them."""
    path = tmp_path / "many"
    path.write_bytes(b"{}\n" * 10_000)
    with open(path, "rb") as f:
        lines = ownformat.iter_lines(f, str(path), line_cap=10, total_cap=1000, what="x")
        with pytest.raises(DataFormatError, match="too large for x"):
            list(lines)
    assert writer.read_results(str(path)) == {}
    # --resume's reader: its caps follow --memory-limit (a 64 MiB limit reads 2 MiB).
    with pytest.raises(DataFormatError, match="/dev/zero: larger than 2.0 MiB"):
        writer.read_results("/dev/zero", memory_limit=64 << 20)


# --- nesting and digits -------------------------------------------------------------------------


@pytest.fixture
def hostile(tmp_path: Path) -> dict[str, Path]:
    """A deep document and one with a 5,000-digit integer, as a whole file and as a line."""
    files = {
        "deep": tmp_path / "deep.json",
        "digits": tmp_path / "digits.json",
    }
    files["deep"].write_text(DEEP + "\n")
    files["digits"].write_text('{"format": "kcheck-terms", "version": ' + HUGE_INT + "}\n")
    return files


@pytest.mark.parametrize("kind", ["deep", "digits"])
def test_deep_nesting_and_huge_integers_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, hostile: dict[str, Path], kind: str
) -> None:
    bad = hostile[kind]
    why = "nested more than 32 deep" if kind == "deep" else "an integer of 5,000 digits"
    out = tmp_path / "out"
    runs = [
        ("report", bad, "-o", out),
        ("expand", HEART, "--spec", bad, "--fit-scaling", HEART, "-o", out),
        ("expand", HEART, "--from-check", bad, "--top", "1", "--fit-scaling", HEART, "-o", out),
        ("verify", HEART, "--check-json", bad, "-q", "-o", out),
    ]
    for args in runs:
        r = in_process(capsys, *args)
        one_error_line(r, bad.name, why, stages=False)
    assert not out.exists()


@pytest.mark.parametrize("kind", ["deep", "digits"])
def test_predict_through_a_tampered_terms_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, hostile: dict[str, Path], kind: str
) -> None:
    model = tmp_path / "m"
    liblinear_model(model, 14)
    Path(f"{model}.terms").write_text(spec_text())
    out = tmp_path / "p"
    r = in_process(capsys, "predict", model, HEART, "--no-scale", "-q", "-o", out)
    assert r.code == 0 and len(out.read_text().splitlines()) == 270, r.stderr
    shutil.copy(hostile[kind], f"{model}.terms")
    r = in_process(capsys, "predict", model, HEART, "--no-scale", "-o", out)
    one_error_line(r, "m.terms", "not a term spec", stages=False)


def test_terms_of_huge_or_non_ascii_digits_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for terms, why in (
        (f"1:{HUGE_INT}", "names a feature outside 1..13"),
        ("\u0661:\u0662", "ASCII digits"),  # Arabic-Indic 1:2
        ("1:\uff12", "ASCII digits"),  # a fullwidth 2
        ("1:2\u2003", "ASCII digits"),  # a Unicode space
    ):
        r = in_process(capsys, "expand", HEART, "--terms", terms, "--fit-scaling", HEART)
        one_error_line(r, "--terms", why, stages=False)
    assert expand.parse_terms(" 1 : 2,3:3", 13) == ((0, 1), (2, 2))
    with pytest.raises(KcheckError, match="at most 10,000 terms"):
        expand.parse_terms(",".join(["1:2"] * 10_001), 13)


def test_resume_reads_past_a_deep_line(tmp_path: Path) -> None:
    """A line that is not kcheck's (as a torn one) is left out; the others are read."""
    out = tmp_path / "r.jsonl"
    good = batch_line()
    out.write_text(f"{json.dumps(good)}\n{DEEP}\n" + '{"name": "x", "n": ' + HUGE_INT + "}\n")
    assert writer.read_results(str(out)) == {"heart_scale": json.loads(json.dumps(good))}


@pytest.mark.slow
def test_resume_ignores_a_deep_line_and_reuses_the_rest(tmp_path: Path) -> None:
    data = tmp_path / "d"
    data.mkdir()
    shutil.copy(HEART, data / "heart_scale")
    out = tmp_path / "r.jsonl"
    good = json.dumps(batch_line())
    out.write_text(f"{good}\n{DEEP}\n" + '{"name": "x", "n": ' + HUGE_INT + "}\n")
    r = kcheck("batch", data, "-o", out, "--resume")
    assert r.code == 0 and "Traceback" not in r.stderr, r.describe()
    assert "reused 1 of 1 results" in r.stderr
    assert [json.loads(x)["resume_key"] for x in out.read_text().splitlines()] == [
        batch_line()["resume_key"]
    ]


# --- the schema's types, before use -----------------------------------------------------------

#: A field kept, its value of the wrong type: each from issue 38.
WRONG_TYPES = {
    "seconds": ("seconds", "abc"),
    "data": ("data", None),
    "checkers": ("checkers", {"degree2": 5}),
    "margin": ("margin", ["clear"]),
    "features": ("data.features", "many"),
}


def with_field(line: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(line)
    *parents, last = dotted.split(".")
    block = out
    for p in parents:
        block = block[p]
    block[last] = value
    return out


@pytest.mark.parametrize("case", list(WRONG_TYPES))
def test_a_line_with_a_field_of_the_wrong_type_is_stale(case: str) -> None:
    ds = DataSet(name="heart_scale", train=str(HEART), test=None)
    template = CheckConfig(train=str(HEART)).validated()
    line = batch_line()
    assert ownformat.ok_line_problem(line) is None
    assert resume.reusable(line, ds, template)
    bad = with_field(line, *WRONG_TYPES[case])
    assert bad["resume_key"] == line["resume_key"]
    assert ownformat.ok_line_problem(bad) is not None
    assert not resume.reusable(bad, ds, template)


@pytest.mark.slow
def test_resume_checks_lines_of_the_wrong_type_again(tmp_path: Path) -> None:
    """Each of issue 38's lines, its resume key kept: checked again, not a crash in the
    summary table, and written back well formed."""
    data = tmp_path / "d"
    data.mkdir()
    lines = []
    for case, (dotted, value) in WRONG_TYPES.items():
        shutil.copy(HEART, data / case)
        line = dict(batch_line(), name=case)
        lines.append(with_field(line, dotted, value))
    out = tmp_path / "r.jsonl"
    out.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = kcheck("batch", data, "-o", out, "--resume", "-j", "1")
    assert r.code == 0 and "Traceback" not in r.stderr, r.describe()
    assert "reused 0 of 5 results" in r.stderr and "checked 5 again" in r.stderr
    again = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(x["name"] for x in again) == sorted(WRONG_TYPES)
    assert all(ownformat.ok_line_problem(x) is None for x in again)


@pytest.mark.parametrize(
    ("epsilon", "why"),
    [
        ("NaN", "NaN (JSON has no such number)"),
        ("Infinity", "Infinity (JSON has no such number)"),
        ("1e999", "epsilon must be a number, got inf"),
        ("5", "epsilon must lie in [0, 1)"),
        ("true", "epsilon must be a number, got True"),
        ("-0.5", "epsilon must lie in [0, 1)"),
        ('"0.02"', "epsilon must be a number"),
    ],
)
def test_a_check_json_epsilon_follows_the_options_rule(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, epsilon: str, why: str
) -> None:
    text = json.dumps(check_json())
    text, n = re.subn(r'"epsilon": [0-9.]+', f'"epsilon": {epsilon}', text)
    assert n == 1
    path = tmp_path / "v.json"
    path.write_text(text)
    r = in_process(capsys, "verify", HEART, "--check-json", path, "-q")
    one_error_line(r, "v.json", why, stages=False)
    r = in_process(capsys, "check", HEART, "--epsilon", epsilon.lower(), "-q")
    assert r.code == 2 and "--epsilon" in r.stderr, r.stderr  # the same rule on the command line


@pytest.mark.parametrize(
    ("field", "value"),
    [("schema_version", True), ("seed", True), ("seed", 2**32), ("metric", ["auc"])],
)
def test_a_check_json_setting_of_the_wrong_type_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, field: str, value: Any
) -> None:
    path = tmp_path / "v.json"
    path.write_text(json.dumps(check_json() | {field: value}))
    r = in_process(capsys, "verify", HEART, "--check-json", path, "-q")
    one_error_line(r, "v.json", "not a kcheck check verdict", stages=False)


def test_from_check_index_base_true_is_not_one(tmp_path: Path) -> None:
    v = check_json()
    v["explain"]["index_base"] = True
    path = tmp_path / "v.json"
    path.write_text(json.dumps(v))
    with pytest.raises(DataFormatError, match="index_base is malformed"):
        expand.terms_from_check(str(path), 1, 13)


# --- any byte in a name -------------------------------------------------------------------------


def test_report_on_a_name_with_an_undecodable_byte_and_a_lone_surrogate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``a\\xff.svm`` as batch writes it (``"a\\udcff.svm"`` in JSON), and a ``"\\ud800"``."""
    first = dict(batch_line(), name="a\udcff.svm")
    second = dict(batch_line(), name="b\ud800<i>", warnings=["\ud800"])
    skipped = {"name": "c\udcfe\n.md", "status": "skipped", "reason": "x\ud800"}
    results = tmp_path / "r\udcff.jsonl"
    results.write_text("".join(json.dumps(x) + "\n" for x in (first, second, skipped)))
    page = tmp_path / "p.html"
    r = in_process(capsys, "report", results, "-o", page)
    assert r.code == 0, r.stderr
    text = page.read_bytes().decode("utf-8")
    assert 'data-name="a\\xff.svm"' in text and 'data-name="b\\ud800&lt;i&gt;"' in text
    assert "c\\xfe\\n.md" in text and "r\\xff.jsonl" in text
    assert not re.search("[\ud800-\udfff]", text)


@pytest.mark.slow
def test_report_on_genuine_batch_output_for_an_undecodable_name(tmp_path: Path) -> None:
    data = tmp_path / "d"
    data.mkdir()
    shutil.copy(HEART, os.fsdecode(bytes(data) + b"/a\xff.svm"))
    out = tmp_path / "r.jsonl"
    r = kcheck("batch", data, "-o", out, "--exact", "never", "-q")
    assert r.code == 0, r.describe()
    assert json.loads(out.read_text())["name"] == "a\udcff.svm"
    r = kcheck("report", out, "-o", tmp_path / "p.html")
    assert r.code == 0, r.describe()
    assert 'data-name="a\\xff.svm"' in (tmp_path / "p.html").read_text("utf-8")


def test_a_newline_in_a_file_name_keeps_the_error_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    name = tmp_path / "a\nb\x1b[31m\udcff.jsonl"
    r = in_process(capsys, "report", name, "-o", tmp_path / "p.html")
    one_error_line(r, "a\\nb\\x1b[31m\\xff.jsonl: cannot read", stages=False)
    r = in_process(capsys, "verify", HEART, "--check-json", name, "-q")
    one_error_line(r, "a\\nb\\x1b[31m\\xff.jsonl: cannot read", stages=False)
    name.write_text("{}\n")
    r = in_process(capsys, "report", name, "-o", tmp_path / "p.html")
    one_error_line(r, "a\\nb\\x1b[31m\\xff.jsonl:1: not a kcheck batch line", stages=False)


def test_printable_escapes_what_would_break_a_line() -> None:
    assert printable("a\nb\r\t\x00\x7f\x85\u2028\udcff\ud800é✓") == (
        "a\\nb\\r\\t\\x00\\x7f\\x85\\u2028\\xff\\ud800é✓"
    )
    assert str(DataFormatError("x\ny", 3, "bad")) == "x\\ny:3: bad"


# --- --max-rows ---------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["check", "verify", "batch"])
def test_max_rows_of_400_digits_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    r = in_process(capsys, command, HEART, "--max-rows", "9" * 400, "-q")
    one_error_line(r, "--max-rows", "at most 9,007,199,254,740,992", stages=False)


def test_parse_max_rows_bounds() -> None:
    assert parse_max_rows(" 1_000 ") == 1000 and parse_max_rows("AUTO") == "auto"
    assert parse_max_rows(2**53) == 2**53
    for bad in ("9" * 400, "9" * 5000, 2**53 + 1, "\u0661\u0662", "-5", True, 12.5, "1e9"):
        with pytest.raises(KcheckError, match="--max-rows"):
            parse_max_rows(bad)  # type: ignore[arg-type]


# --- the reader's bounds ------------------------------------------------------------------------

#: Any string: control characters and lone surrogates (as a file name's bytes become) too.
any_text = st.text(st.characters(exclude_categories=()), max_size=8)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | any_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner),
    max_leaves=40,
)


def true_depth(v: Any) -> int:
    if isinstance(v, list):
        return 1 + max(map(true_depth, v), default=0)
    if isinstance(v, dict):
        return 1 + max(map(true_depth, v.values()), default=0)
    return 0


@settings(max_examples=50, deadline=None)
@given(v=json_values, wrap=st.integers(0, 40))
def test_nesting_depth_is_exact_where_it_matters(v: Any, wrap: int) -> None:
    """The depth scan agrees with the structure: a document within MAX_DEPTH parses to the
    same value as json gives, a deeper one is refused."""
    v = [v] if wrap == 0 else json.loads("[" * wrap + json.dumps(v) + "]" * wrap)
    text = json.dumps(v).encode()
    depth = true_depth(v)
    scanned = ownformat.nesting_depth(text.decode())
    assert (
        scanned == depth
        or (scanned == 0 and depth <= ownformat.MAX_DEPTH)
        or (depth > ownformat.MAX_DEPTH and scanned > ownformat.MAX_DEPTH)
    )
    fits = depth <= ownformat.MAX_DEPTH and not _has_big_int(v)
    if fits:
        assert ownformat.loads(text, "f", 1, "x") == json.loads(text)
    else:
        with pytest.raises(DataFormatError, match="^f:1: not x: "):
            ownformat.loads(text, "f", 1, "x")


def _has_big_int(v: Any) -> bool:
    if isinstance(v, list):
        return any(map(_has_big_int, v))
    if isinstance(v, dict):
        return any(map(_has_big_int, v.values()))
    return type(v) is int and len(str(abs(v))) > ownformat.MAX_INT_DIGITS


@settings(max_examples=200, deadline=None)
@given(
    raw=st.binary(max_size=400),
    line_cap=st.integers(1, 50),
)
def test_iter_lines_gives_every_line_or_none_for_a_long_one(raw: bytes, line_cap: int) -> None:
    got = list(
        ownformat.iter_lines(io.BytesIO(raw), "f", line_cap=line_cap, total_cap=10**6, what="x")
    )
    expected = raw.split(b"\n")
    if expected[-1] == b"":
        expected.pop()
    assert [n for n, _ in got] == list(range(1, len(expected) + 1))
    for (_, line), want in zip(got, expected, strict=True):
        assert line == (want if len(want) <= line_cap else None)


# --- fuzz: each format, never a traceback -------------------------------------------------------

#: Tokens kcheck never writes, and values of every JSON type.
hostile_values = (
    json_values
    | st.sampled_from([True, False, None, 2**70, -(2**70), 1e308, "", "\ud800", "a\udcff\n"])
    | st.builds(lambda n: json.loads("[" * n + "]" * n), st.integers(30, 40))
)
#: Text spliced into a serialized document: what json alone would turn into a traceback.
splices = st.sampled_from(
    ["NaN", "Infinity", "-Infinity", "1e999", HUGE_INT, "[" * 2000, DEEP, "\\ud800", "\x00", ""]
)


@st.composite
def mutated(draw: st.DrawFn, seed: dict[str, Any], focus: tuple[str, ...] = ()) -> bytes:
    """``seed`` with some fields replaced, removed or retyped, serialized; sometimes with
    hostile text spliced into it, sometimes as raw bytes. Half of the changes go to a
    top-level field of ``focus`` (those that kcheck reads), the others anywhere."""
    doc: Any = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, 4))):
        block, key = doc, None
        if focus and draw(st.booleans()):
            key = draw(st.sampled_from(focus))
        else:
            for _level in range(draw(st.integers(0, 3))):
                child = block[key] if key is not None else block
                if not isinstance(child, (dict, list)) or not child:
                    break
                block = child
                key = draw(
                    st.sampled_from(sorted(block) if isinstance(block, dict) else range(len(block)))
                )
            if key is None:
                continue
        if isinstance(block, dict) and draw(st.integers(0, 5)) == 0:
            block.pop(key, None)
        else:
            block[key] = draw(hostile_values)
    text = json.dumps(doc)
    how = draw(st.integers(0, 5))
    if how == 0:
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(splices) + text[at:]
    if how == 1:
        return draw(st.binary(max_size=200))
    return text.encode("utf-8", "surrogatepass")


SUPPRESS = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
TEMPLATE = CheckConfig(train=str(HEART)).validated()
#: Examples of each fuzz test: a few in the fast tier, many in the whole suite.
FAST_EXAMPLES, SLOW_EXAMPLES = 60, 1000


def fuzz_check_json(tmp_path: Path, raw: bytes) -> None:
    """verify --check-json and expand --from-check: a verdict or one clear error."""
    path = tmp_path / "v.json"
    path.write_bytes(raw)
    try:
        check = verify._read_check_json(str(path))
        config, epsilon = verify._settings(
            verify.VerifyConfig(train=str(HEART), check_json=str(path)), check
        )
        assert 0 <= epsilon < 1 and config.seed is not None
    except KcheckError as e:
        assert "\n" not in str(e)
    try:
        terms = expand.terms_from_check(str(path), 2, 13)
        assert all(0 <= i <= j < 13 for i, j in terms)
    except KcheckError as e:
        assert "\n" not in str(e)


def fuzz_batch_line(tmp_path: Path, raw: bytes, other: bytes) -> None:
    """A results file as --resume and report read it: a line either passes the type check
    and then shows in the summary table and the HTML page, or is stale / one clear error."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(other + raw + b"\n")
    ds = DataSet(name="heart_scale", train=str(HEART), test=None)
    for line in writer.read_results(str(path)).values():
        reused = resume.reusable(line, ds, TEMPLATE)
        if reused or ownformat.ok_line_problem(line) is None:
            console = Console(file=io.StringIO(), width=80)
            console.print(batch_table([line], {line["name"]} if reused else set(), 80))
            console.print(batch_caption([line], 1.0))
    try:
        rows = report.read_lines(str(path))
    except KcheckError as e:
        assert "\n" not in str(e)
    else:
        report.render(rows, "r").encode("utf-8")


def fuzz_terms_file(tmp_path: Path, raw: bytes) -> None:
    """MODEL.terms as predict and expand --spec read it: a spec that applies, or one error."""
    path = tmp_path / "m.terms"
    path.write_bytes(raw)
    try:
        spec = expand.read_spec(str(path), width=13)
    except KcheckError as e:
        assert "\n" not in str(e)
    else:
        X = sp.random(5, 13, density=0.5, format="csr", random_state=0)
        assert spec.apply(X).shape == (5, 13 + len(spec.terms))


def fuzzed(examples: int, body: Any, **strategies: Any) -> Any:
    """``body`` as a hypothesis test of ``examples`` examples."""
    rules = settings(max_examples=examples, deadline=None, suppress_health_check=SUPPRESS)
    return rules(given(**strategies)(body))


#: The fields each reader uses.
CHECK_FIELDS = ("schema_version", "kind", "verdict", "epsilon", "seed", "scaling", "metric")
CHECK_JSONS = {"raw": mutated(check_json(), (*CHECK_FIELDS, "data", "explain"))}
LINE_FIELDS = ("name", "status", "margin", "seconds", "checkers", "warnings", "error", "reason")
BATCH_LINES = {
    "raw": mutated(batch_line(), (*LINE_FIELDS, *CHECK_FIELDS, "data", "deciding_checker")),
    "other": st.sampled_from([b"", b"\n", b"{}\n", b"[\n"]),
}
TERMS_FILES = {"raw": mutated(json.loads(spec_text()), ("format", "version", "width", "terms"))}

test_fuzz_check_json = fuzzed(FAST_EXAMPLES, fuzz_check_json, **CHECK_JSONS)
test_fuzz_batch_line = fuzzed(FAST_EXAMPLES, fuzz_batch_line, **BATCH_LINES)
test_fuzz_terms_file = fuzzed(FAST_EXAMPLES, fuzz_terms_file, **TERMS_FILES)
test_fuzz_check_json_long = pytest.mark.slow(fuzzed(SLOW_EXAMPLES, fuzz_check_json, **CHECK_JSONS))
test_fuzz_batch_line_long = pytest.mark.slow(fuzzed(SLOW_EXAMPLES, fuzz_batch_line, **BATCH_LINES))
test_fuzz_terms_file_long = pytest.mark.slow(fuzzed(SLOW_EXAMPLES, fuzz_terms_file, **TERMS_FILES))


# --- options that leave nothing to run, and --files-from on the command line ------------------


def test_exact_never_with_only_the_stand_in_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """rbfsvm stands in for exact mode only under --exact auto: alone under never, nothing
    would run (it was a KeyError)."""
    r = in_process(capsys, "check", HEART, "--exact", "never", "--checkers", "rbfsvm", "-q")
    one_error_line(r, "--exact never", "rbfsvm", stages=False)


def test_files_from_a_device_is_refused_by_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    r = in_process(capsys, "batch", "--files-from", "/dev/zero", "-q")
    one_error_line(r, "/dev/zero:1:", "not a path", stages=False)
