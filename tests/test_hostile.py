"""Hostile input through every entry point: a result or a one-line error, nothing else.

One parametrised test runs each case of the corpus (tests/data/hostile/, written by
tests/data/make_hostile.py; big cases are generated here in a temporary directory) through
``kcheck check``, ``scale``, ``predict`` and ``verify`` as a user would, in a subprocess with
its address space capped (so a runaway allocation is a MemoryError here, not the OOM killer on
the machine running the tests) and a wall-clock limit. Every run must end in:

* exit 0 and a result with the property the case names, or
* exit 2 and exactly one ``kcheck: error: ...`` line naming the file (and ``file:line`` where
  a line is at fault), nothing on stdout,

never a traceback, a hang, or another exit code. ``test_batch_over_the_corpus`` runs the same
files through ``kcheck batch``.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import runner
from runner import Run, slowdown

from kcheck.verdict import without_timing

CORPUS = Path(__file__).resolve().parent / "data" / "hostile"
#: Address-space cap of every kcheck run here: far above what any of these inputs needs
#: (the 50 MB line peaks near 0.9 GB), far below what would hurt a shared test machine.
ADDRESS_SPACE = 4 * 2**30
#: Wall-clock limit of one run unless the case sets its own.
DEFAULT_SECONDS = 20.0
BIG_LINE_BYTES = 50 * 2**20


# --- running kcheck ------------------------------------------------------------------------


def kcheck(*args: str, seconds: float = DEFAULT_SECONDS, **options: Any) -> Run:
    """Run ``python -m kcheck ARGS`` capped in memory and time; ``options`` (``cwd``,
    ``drop_root``, ``during``) as :func:`runner.kcheck` takes them."""
    return runner.kcheck(
        *args, timeout=seconds * slowdown(), address_space=ADDRESS_SPACE, **options
    )


# --- expected outcomes ---------------------------------------------------------------------


@dataclass(frozen=True)
class Ok:
    """Exit 0; ``check(run, ctx)`` asserts the case's property of the output."""

    check: Callable[[Run, Ctx], None] | None = None


@dataclass(frozen=True)
class Fails:
    """Exit 2 with one error line holding ``fragment`` (and ``path:line:`` if line is set)."""

    fragment: str
    line: int | None = None


@dataclass(frozen=True)
class Either:
    """Any of these outcomes is correct (for inputs where both a result and a refusal are)."""

    options: tuple[Ok | Fails, ...]


Outcome = Ok | Fails | Either


@dataclass
class Ctx:
    """What an expectation may need: the input path as passed, and reference runs."""

    path: str
    refs: References


def _stderr_lines(run: Run) -> list[str]:
    return [x for x in run.stderr.splitlines() if x.strip()]


def assert_outcome(run: Run, outcome: Outcome, ctx: Ctx) -> None:
    assert "Traceback" not in run.stderr, run.describe()
    if isinstance(outcome, Either):
        errors = []
        for option in outcome.options:
            try:
                assert_outcome(run, option, ctx)
                return
            except AssertionError as e:
                errors.append(str(e))
        raise AssertionError("no acceptable outcome:\n" + "\n".join(errors))
    if isinstance(outcome, Ok):
        assert run.code == 0, run.describe()
        # Nothing but warnings on stderr (every command runs with -q where it has one).
        assert all(x.startswith("kcheck: warning: ") for x in _stderr_lines(run)), run.describe()
        if outcome.check is not None:
            outcome.check(run, ctx)
        return
    assert run.code == 2, run.describe()
    assert run.stdout == b"", run.describe()
    errors = [x for x in _stderr_lines(run) if not x.startswith("kcheck: warning: ")]
    assert len(errors) == 1, run.describe()
    message = errors[0]
    assert message.startswith("kcheck: error: "), run.describe()
    assert len(message) < 400, f"error line of {len(message)} characters: {message[:400]}"
    assert outcome.fragment in message, run.describe()
    where = ctx.path if outcome.line is None else f"{ctx.path}:{outcome.line}:"
    assert where in message, f"the message does not name {where!r}: {message}"


# --- properties of successful runs ---------------------------------------------------------


def verdict_of(run: Run) -> dict:
    v = json.loads(run.stdout)
    assert v["verdict"] in ("linear", "kernel")
    return v


def scaled_rows(run: Run) -> list[tuple[str, dict[int, float]]]:
    """Parse ``kcheck scale`` output; every value must be finite and within [-1, 1]."""
    rows = []
    for line in run.stdout.decode("ascii").splitlines():
        label, *pairs = line.split()
        values = {int(i): float(v) for i, v in (p.split(":") for p in pairs)}
        assert all(math.isfinite(v) and -1.0 <= v <= 1.0 for v in values.values()), line
        rows.append((label, values))
    return rows


def check_has(
    rows: int | None = None, classes: list | None = None, verdict: str | None = None
) -> Callable[[Run, Ctx], None]:
    def check(run: Run, ctx: Ctx) -> None:
        v = verdict_of(run)
        if rows is not None:
            assert v["data"]["rows"] == rows
        if classes is not None:
            assert v["data"]["classes"] == classes
        if verdict is not None:
            assert v["verdict"] == verdict, v

    return check


def scale_has(rows: int, labels: set[str] | None = None) -> Callable[[Run, Ctx], None]:
    def check(run: Run, ctx: Ctx) -> None:
        out = scaled_rows(run)
        assert len(out) == rows
        if labels is not None:
            assert {label for label, _ in out} == labels

    return check


def predict_has(rows: int) -> Callable[[Run, Ctx], None]:
    def check(run: Run, ctx: Ctx) -> None:
        labels = run.stdout.decode().split()
        assert len(labels) == rows
        assert set(labels) <= {"-1", "1"}

    return check


def same_as_plain(command: str) -> Callable[[Run, Ctx], None]:
    """The output equals that of the same rows without the BOM / with LF line ends."""

    def check(run: Run, ctx: Ctx) -> None:
        ref = ctx.refs.plain(command)
        if command == "check":
            ours, theirs = without_timing(verdict_of(run)), without_timing(verdict_of(ref))
            # The path differs, and so does the hash of the file's bytes (BOM, CR).
            for v in (ours, theirs):
                v["data"].pop("path")
                v["data"].pop("sha256")
            assert ours == theirs
        else:
            assert run.stdout == ref.stdout

    return check


def scores_test_file(run: Run, ctx: Ctx) -> None:
    v = verdict_of(run)
    assert v["test"]["rows"] == 12
    assert v["test"]["accuracy"]["linear"] is not None


# --- the cases -----------------------------------------------------------------------------


def _make_big_line(d: Path) -> Path:
    """One valid row of 50 MB (about 2.5 million features), then one more row."""
    path = d / "big_line.svm"
    digits = b"%.12f" % (1 / 3)  # 0.333333333333
    with open(path, "wb") as f:
        f.write(b"1")
        size, i = 1, 1
        while size < BIG_LINE_BYTES:
            block = b"".join([b" %d:%s" % (j, digits) for j in range(i, i + 100_000)])
            f.write(block)
            size += len(block)
            i += 100_000
        f.write(b"\n-1 1:0.5\n")
    return path


def _make_big_garbage(d: Path) -> Path:
    """50 MB of letters on one line, without a line end."""
    path = d / "big_garbage.svm"
    path.write_bytes(b"x" * BIG_LINE_BYTES)
    return path


def _make_classes(d: Path) -> Path:
    """3,000 classes in 6,000 rows: two examples per class."""
    rng = random.Random(1)
    path = d / "classes3000.svm"
    with open(path, "w") as f:
        for k in range(6000):
            c = k % 3000
            f.write(f"{c} 1:{rng.random():.4f} 2:{rng.random():.4f} 3:{c / 3000:.4f}\n")
    return path


def _make_unreadable(d: Path) -> Path:
    path = d / "unreadable.svm"
    shutil.copy(CORPUS / "plain.svm", path)
    path.chmod(0)
    return path


def _make_changing(d: Path) -> Path:
    """8 MB of rows; truncated to half by the test while kcheck reads it."""
    path = d / "changing.svm"
    row = " ".join(f"{j}:0.{(j * 7) % 10}5" for j in range(1, 101))
    block = "".join(f"{1 if k % 2 else -1} {row}\n" for k in range(1000))
    with open(path, "w") as f:
        while f.tell() < 8 * 2**20:
            f.write(block)
    return path


def truncate_while_read(path: Path) -> Callable[[subprocess.Popen], None]:
    """Once the child has read part of ``path`` (its file offset is past 0), cut the file."""

    def during(proc: subprocess.Popen) -> None:
        target = os.path.realpath(path)
        size = os.path.getsize(path)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            if _read_offset(proc.pid, target):
                break
            time.sleep(0.001)
        os.truncate(path, size // 2 + 13)  # mid-line, somewhere in the middle of the file

    return during


def _read_offset(pid: int, target: str) -> int:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    return int(f.readline().split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return 0


@dataclass(frozen=True)
class Case:
    name: str
    #: A corpus file name, or a function making the input in a temporary directory.
    source: str | Callable[[Path], Path]
    check: Outcome
    scale: Outcome
    predict: Outcome | None = None
    verify: Outcome | None = None
    check_args: tuple[str, ...] = ()
    scale_args: tuple[str, ...] = ()
    seconds: float = DEFAULT_SECONDS
    #: command -> reason: a known failure (xfail, strict).
    known: dict[str, str] = field(default_factory=dict)
    drop_root: bool = False
    during: Callable[[Path], Callable[[subprocess.Popen], None]] | None = None
    #: Its input is tens of megabytes: in the whole suite only (``--slow``).
    slow: bool = False


def _same(outcome: Outcome, predict: bool = True, verify: bool = True) -> dict[str, Outcome]:
    """The same outcome from check and scale (and predict, verify): a file none can read.

    predict and verify read through the same reader; they run on a selection of cases.
    """
    return {
        "check": outcome,
        "scale": outcome,
        "predict": outcome if predict else None,
        "verify": outcome if verify else None,
    }


TRUNCATED = "data is truncated or corrupt"

CASES = [
    *[
        Case(
            f"truncated_{kind}",
            f"truncated.svm.{suffix}",
            **_same(Fails(f"{kind} {TRUNCATED}"), predict=kind == "gzip", verify=kind == "xz"),
        )
        for kind, suffix in (("gzip", "gz"), ("bzip2", "bz2"), ("xz", "xz"))
    ],
    Case(
        "index_over_int32",
        "index_over_int32.svm",
        **_same(Fails("expected an index of at most 2147483647", line=3), predict=False),
    ),
    Case(
        "index_int32_max",
        "index_int32_max.svm",
        check=Either((Ok(check_has(rows=40)), Fails("2147483647"))),
        scale=Either((Ok(scale_has(rows=40)), Fails("2147483647"))),
        predict=Ok(predict_has(rows=40)),
        verify=Either((Ok(), Fails("2147483647"))),
    ),
    Case(
        "huge_values",
        "huge_values.svm",
        check=Ok(check_has(rows=40)),
        scale=Either((Ok(scale_has(rows=40)), Fails("too wide"))),
        predict=Ok(predict_has(rows=40)),
        verify=Ok(),
    ),
    Case(
        "subnormal_and_negative_zero",
        "subnormal_values.svm",
        check=Ok(check_has(rows=40)),
        scale=Ok(scale_has(rows=40)),
        predict=Ok(predict_has(rows=40)),
    ),
    Case(
        "label_spellings",
        "label_spellings.svm",
        check=Ok(check_has(rows=40, classes=[-1, 1])),
        scale=Ok(scale_has(rows=40, labels={"-1", "1"})),
        predict=Ok(predict_has(rows=40)),
    ),
    Case(
        "nine_rows",
        "nine_rows.svm",
        check=Fails("9 rows are too few"),
        scale=Ok(scale_has(rows=9)),
        predict=Ok(predict_has(rows=9)),
        verify=Fails("9 rows are too few"),
    ),
    Case(
        "class_with_one_example",
        "singleton_class.svm",
        check=Ok(check_has(rows=40, classes=[-1, 1, 2])),
        scale=Ok(scale_has(rows=40)),
        verify=Ok(),
    ),
    Case(
        "all_zero_rows",
        "all_zero_rows.svm",
        check=Ok(check_has(rows=40, verdict="linear")),
        scale=Ok(scale_has(rows=40)),
        verify=Ok(),
    ),
    Case(
        "duplicate_rows",
        "duplicate_rows.svm",
        check=Ok(check_has(rows=40)),
        scale=Ok(scale_has(rows=40)),
    ),
    Case(
        "every_feature_constant",
        "constant_features.svm",
        check=Ok(check_has(rows=40, verdict="linear")),
        scale=Ok(scale_has(rows=40)),
        verify=Ok(),
    ),
    Case(
        "feature_only_in_test_file",
        "unseen_feature.svm",
        check=Ok(scores_test_file),
        scale=Ok(scale_has(rows=40)),
        check_args=("--test", str(CORPUS / "unseen_feature.svm.t")),
    ),
    Case(
        "utf8_bom",
        "bom.svm",
        check=Ok(same_as_plain("check")),
        scale=Ok(same_as_plain("scale")),
        predict=Ok(same_as_plain("predict")),
    ),
    Case(
        "windows_line_ends",
        "crlf.svm",
        check=Ok(same_as_plain("check")),
        scale=Ok(same_as_plain("scale")),
        predict=Ok(same_as_plain("predict")),
    ),
    Case("empty_file", "empty.svm", **_same(Fails("expected data rows, got none"), verify=False)),
    Case("binary_garbage", "garbage.bin", **_same(Fails("binary data?", line=1), predict=False)),
    Case(
        "binary_from_line_5",
        "binary_line5.svm",
        **_same(Fails("control byte 0x00", line=5), verify=False),
    ),
    Case(
        "directory",
        lambda d: d,
        # check points to the command that reads a directory; the others say what it is.
        **{**_same(Fails("Is a directory"), verify=False), "check": Fails("kcheck batch ")},
    ),
    Case("unreadable_file", _make_unreadable, **_same(Fails("Permission denied")), drop_root=True),
    Case(
        "line_of_50_mb",
        _make_big_line,
        check=Fails("2 rows are too few"),
        scale=Ok(scale_has(rows=2)),
        predict=Ok(predict_has(rows=2)),
        seconds=10.0,
        scale_args=("-l", "0"),
        slow=True,
    ),  # keeps the 2.5 million zeros of row 2 out of the output
    Case(
        "garbage_line_of_50_mb",
        _make_big_garbage,
        **_same(Fails("expected a numeric label", line=1), predict=False, verify=False),
        seconds=10.0,
        slow=True,
    ),
    Case(
        "3000_classes_in_6000_rows",
        _make_classes,
        check=Fails("3,000 classes in 6,000 rows"),
        scale=Ok(scale_has(rows=6000)),
        seconds=6.0,
    ),
    Case(
        "file_cut_while_read",
        _make_changing,
        check=Either((Ok(), Fails("changing.svm"))),
        scale=Either((Ok(), Fails("changing.svm"))),
        check_args=("--exact", "never"),
        during=truncate_while_read,
        slow=True,
    ),
]


def _params() -> list:
    out = []
    for case in CASES:
        for command in ("check", "scale", "predict", "verify"):
            if getattr(case, command) is None:
                continue
            marks = [pytest.mark.slow] if case.slow else []
            if command in case.known:
                marks.append(pytest.mark.xfail(strict=True, reason=case.known[command]))
            out.append(pytest.param(case, command, id=f"{case.name}-{command}", marks=marks))
    return out


# --- fixtures ------------------------------------------------------------------------------


class References:
    """Runs on the corpus's plain file, and the model that predict uses; made once, lazily."""

    def __init__(self, d: Path) -> None:
        self.dir = d
        self._runs: dict[str, Run] = {}
        self._model: Path | None = None

    @property
    def model(self) -> Path:
        if self._model is None:
            model = self.dir / "plain.model"
            r = kcheck(
                "check",
                str(CORPUS / "plain.svm"),
                "--checkers",
                "multilinear",
                "-q",
                "--model-out",
                str(model),
                "--model",
                "linear",
            )
            assert r.code == 0, r.describe()
            self._model = model
        return self._model

    def plain(self, command: str) -> Run:
        if command not in self._runs:
            self._runs[command] = kcheck(
                *command_args(command, str(CORPUS / "plain.svm"), None, self)
            )
        return self._runs[command]


@pytest.fixture(scope="module")
def refs(tmp_path_factory: pytest.TempPathFactory) -> References:
    return References(tmp_path_factory.mktemp("refs"))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Big inputs, made once per module (keyed by the maker's name)."""
    return {}


def command_args(command: str, path: str, case: Case | None, refs: References) -> list:
    if command == "check":
        return [
            "check",
            path,
            "--checkers",
            "multilinear",
            "-q",
            *(case.check_args if case else ()),
        ]
    if command == "scale":
        return ["scale", path, "-q", *(case.scale_args if case else ())]
    if command == "predict":
        return ["predict", str(refs.model), path, "-q"]
    return ["verify", path, "-q", "-j", "1"]


@pytest.mark.parametrize(("case", "command"), _params())
def test_hostile_input(
    case: Case,
    command: str,
    refs: References,
    generated: dict,
    tmp_path_factory: pytest.TempPathFactory,
    can_drop_root: bool,
) -> None:
    if case.drop_root and not can_drop_root:
        pytest.skip("cannot run without root's file access here")
    if isinstance(case.source, str):
        path = CORPUS / case.source
    elif case.during is not None:
        path = case.source(tmp_path_factory.mktemp(case.name))  # changed by the run: fresh
    else:
        key = case.source.__name__
        if key not in generated:
            generated[key] = case.source(tmp_path_factory.mktemp(case.name))
        path = generated[key]
    # Run from the file's directory with a relative path, so messages are easy to match.
    cwd, shown = path.parent, path.name
    args = command_args(command, shown, case, refs)
    run = kcheck(
        *args,
        seconds=case.seconds,
        cwd=cwd,
        drop_root=case.drop_root,
        during=case.during(path) if case.during else None,
    )
    assert_outcome(run, getattr(case, command), Ctx(path=shown, refs=refs))


# --- batch over the corpus -----------------------------------------------------------------


@pytest.mark.slow
def test_batch_over_the_corpus(tmp_path: Path) -> None:
    """Every corpus file that looks like data gets a line; broken ones an error with file:line."""
    d = tmp_path / "corpus"
    shutil.copytree(CORPUS, d)
    for name in ("index_int32_max.svm", "huge_values.svm"):  # known failures, tested above
        (d / name).unlink()
    out = tmp_path / "out.jsonl"
    r = kcheck(
        "batch", str(d), "-o", str(out), "--checkers", "multilinear", "-q", "-j", "2", seconds=120
    )
    assert "Traceback" not in r.stderr, r.describe()
    assert r.code == 3, r.describe()  # some data sets could not be checked
    lines = {x["name"]: x for x in map(json.loads, out.read_text().splitlines())}
    errors = {name: x["error"] for name, x in lines.items() if x["status"] == "error"}
    assert f"{d / 'index_over_int32.svm'}:3: expected an index" in errors["index_over_int32.svm"]
    assert sum(TRUNCATED in e for e in errors.values()) == 3  # .gz, .bz2, .xz
    assert "too few" in errors["nine_rows.svm"]
    assert all("\n" not in e for e in errors.values())
    for name in (
        "plain.svm",
        "crlf.svm",
        "label_spellings.svm",
        "all_zero_rows.svm",
        "singleton_class.svm",
        "duplicate_rows.svm",
        "constant_features.svm",
        "subnormal_values.svm",
    ):
        assert lines[name]["status"] == "ok", lines[name]
    # unseen_feature.svm.t is the test file of unseen_feature.svm (NAME.t pairs with NAME).
    assert lines["unseen_feature.svm"]["test"]["rows"] == 12


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("bom.svm", "ok"),
        ("binary_line5.svm", ":5:"),
    ],
)
def test_batch_checks_what_check_reads(tmp_path: Path, name: str, expected: str) -> None:
    """A file whose first line is LIBSVM data gets a line of its own, ok or error."""
    shutil.copy(CORPUS / "plain.svm", tmp_path / "plain.svm")
    shutil.copy(CORPUS / name, tmp_path / name)
    out = tmp_path / "out.jsonl"
    r = kcheck(
        "batch",
        str(tmp_path / "plain.svm"),
        str(tmp_path / name),
        "-o",
        str(out),
        "--checkers",
        "multilinear",
        "-q",
    )
    assert "Traceback" not in r.stderr, r.describe()
    lines = {x["name"]: x for x in map(json.loads, out.read_text().splitlines())}
    assert name in lines, r.describe()
    if expected == "ok":
        assert lines[name]["status"] == "ok" and r.code == 0
    else:
        assert expected in lines[name]["error"] and r.code == 3


# --- FIFOs ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_named_pipe_input(tmp_path: Path) -> None:
    """A FIFO (as from a shell's process substitution) reads like a file."""
    fifo = tmp_path / "data.fifo"
    os.mkfifo(fifo)
    data = (CORPUS / "plain.svm").read_bytes()

    def feed() -> None:
        with open(fifo, "wb") as f:
            f.write(data)

    for command in ("check", "scale"):
        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        args = (
            ["check", str(fifo), "--checkers", "multilinear", "-q"]
            if command == "check"
            else ["scale", str(fifo), "-q"]
        )
        r = kcheck(*args, seconds=30)
        writer.join(5)
        assert r.code == 0, r.describe()
        if command == "check":
            assert json.loads(r.stdout)["data"]["rows"] == 40
        else:
            assert len(r.stdout.splitlines()) == 40


# --- standard input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "name", "outcome"),
    [
        ("check", "garbage.bin", Fails("binary data?", line=1)),
        ("scale", "truncated.svm.gz", Fails(f"gzip {TRUNCATED}")),
        ("check", "bom.svm", Ok(check_has(rows=40))),
    ],
)
def test_standard_input(command: str, name: str, outcome: Outcome, refs: References) -> None:
    """``-`` reads standard input, which cannot be peeked at: the same outcomes, as <stdin>."""
    args = (
        ["check", "-", "--checkers", "multilinear", "-q"]
        if command == "check"
        else ["scale", "-", "-q"]
    )
    with open(CORPUS / name, "rb") as f:
        run = runner.kcheck(*args, address_space=ADDRESS_SPACE, stdin=f)
    assert_outcome(run, outcome, Ctx(path="<stdin>", refs=refs))
