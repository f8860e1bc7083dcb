"""kcheck from Python: ``kcheck.check(X, y)`` and ``kcheck.check_file(path)``.

The API's ``to_dict()`` is the command's JSON for the same data (written to a LIBSVM file),
options and seed; the caller's arrays are left byte for byte as they were; bad input raises
ValueError or TypeError in the command line's words; nothing is printed unless asked; and
Ctrl-C raises KeyboardInterrupt, ends the workers and leaves the interpreter usable.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import DATASETS, ROOT
from runner import default_sigint, wait_for
from test_schema import assert_valid

import kcheck
from kcheck.config import CheckConfig
from kcheck.io.data import read_libsvm, write_libsvm

FAST = {"checkers": ("multilinear",), "exact": "never"}
FAST_CLI = ("--checkers", "multilinear", "--exact", "never")


def load(name: str) -> tuple[sp.csr_matrix, np.ndarray]:
    y, X = read_libsvm(str(DATASETS / name), memory_limit=1 << 30)
    return X, y


def cli_json(path: Path, *args: str) -> dict[str, Any]:
    r = subprocess.run(
        [sys.executable, "-m", "kcheck", "check", str(path), "--json", "-q", "-j", "1", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def comparable(value: Any) -> Any:
    """The JSON without what differs between a file and arrays: seconds, paths and hashes."""
    if isinstance(value, dict):
        return {
            k: comparable(v)
            for k, v in value.items()
            if not k.endswith("seconds") and k not in ("path", "sha256")
        }
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


class DuckFrame:
    """What kcheck needs of a DataFrame, without pandas: columns, their dtypes, to_numpy."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self._data = columns
        self.columns = list(columns)
        self.dtypes = [v.dtype for v in columns.values()]

    def to_numpy(self, dtype: Any = None) -> np.ndarray:
        return np.column_stack([v.astype(dtype) for v in self._data.values()])


def frame_of(X: sp.csr_matrix) -> Any:
    """A pandas DataFrame where pandas is installed, else a DuckFrame, of X's columns."""
    dense = X.toarray()
    columns = {f"f{j + 1}": dense[:, j].copy() for j in range(dense.shape[1])}
    try:
        import pandas as pd
    except ImportError:
        return DuckFrame(columns)
    return pd.DataFrame(columns)


# --- the JSON is the command's ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "form", "fast"),
    [
        # Each input form once, and the whole check (exact mode, nested on heart_scale) twice.
        ("fourclass", "csr", True),
        pytest.param("heart_scale", "frame", True, marks=pytest.mark.slow),
        pytest.param("svmguide1", "csc", True, marks=pytest.mark.slow),
        pytest.param("heart_scale", "dense", False, marks=pytest.mark.slow),
        pytest.param("german.numer", "frame", False, marks=pytest.mark.slow),
    ],
)
def test_to_dict_is_the_commands_json(name: str, form: str, fast: bool, tmp_path: Path) -> None:
    X, y = load(name)
    data = {
        "dense": lambda: X.toarray(),
        "csr": lambda: X.copy(),
        "csc": lambda: X.tocsc(),
        "frame": lambda: frame_of(X),
    }[form]()
    path = tmp_path / f"{name}.svm"
    write_libsvm(str(path), y, X)
    result = kcheck.check(data, y, **(FAST if fast else {}))  # type: ignore[arg-type]
    ours = result.to_dict()
    theirs = cli_json(path, *(FAST_CLI if fast else ()))
    assert comparable(ours) == comparable(theirs)
    assert ours["data"]["path"] is None and len(ours["data"]["sha256"]) == 64
    assert ours["data"]["features"] == X.shape[1]
    assert_valid("check.schema.json", ours)
    # The typed view reads the same JSON.
    assert (result.verdict, result.margin) == (ours["verdict"], ours["margin"])
    assert set(result.gaps) == set(ours["checkers"])
    assert result.plan == ours.get("plan")


@pytest.mark.slow
def test_check_file_is_the_command(tmp_path: Path) -> None:
    ours = kcheck.check_file(DATASETS / "heart_scale", **FAST).to_dict()  # type: ignore[arg-type]
    theirs = cli_json(DATASETS / "heart_scale", *FAST_CLI)
    assert comparable(ours) == comparable(theirs)
    assert ours["data"]["path"] == str(DATASETS / "heart_scale")
    assert ours["data"]["sha256"] == theirs["data"]["sha256"]


@pytest.mark.slow
def test_a_test_pair_scores_as_a_test_file(tmp_path: Path) -> None:
    X, y = load("heart_scale")
    train, test = tmp_path / "train.svm", tmp_path / "test.svm"
    write_libsvm(str(train), y[:200], X[:200])
    write_libsvm(str(test), y[200:], X[200:])
    ours = kcheck.check(X[:200], y[:200], test=(X[200:], y[200:]), **FAST).to_dict()  # type: ignore[arg-type]
    theirs = cli_json(train, "--test", str(test), *FAST_CLI)
    assert ours["test"]["path"] is None
    assert ours["test"]["accuracy"] == theirs["test"]["accuracy"]
    assert ours["test"]["rows"] == 70
    assert_valid("check.schema.json", ours)


# --- the caller's data ------------------------------------------------------------------------


def _snapshot(obj: Any) -> Any:
    if sp.issparse(obj):
        parts = [getattr(obj, a, None) for a in ("data", "indices", "indptr", "row", "col")]
        return (
            type(obj),
            obj.format,
            obj.shape,
            [p.tobytes() + str(p.dtype).encode() for p in parts if isinstance(p, np.ndarray)],
            getattr(obj, "has_sorted_indices", None),
        )
    if isinstance(obj, np.ndarray):
        return (obj.tobytes(order="A"), obj.dtype, obj.shape, obj.strides, obj.flags.writeable)
    return (list(obj.columns), [obj[c].to_numpy().tobytes() for c in obj.columns])


def test_the_callers_arrays_stay_byte_identical() -> None:
    X, y = load("heart_scale")
    dense = np.asfortranarray(X.toarray().astype(np.float32))
    labels = y.astype(np.int64)
    # An unsorted CSR with a duplicate entry and an explicit zero: in-place canonicalisation
    # or scaling would show.
    rows, cols, vals = sp.find(X)
    order = np.random.default_rng(0).permutation(rows.size)
    rows = np.concatenate([rows[order], [0, 0]])
    cols = np.concatenate([cols[order], [0, 1]])
    vals = np.concatenate([vals[order], [0.25, 0.0]])
    coo = sp.coo_matrix((vals, (rows, cols)), shape=X.shape)
    messy = sp.csr_matrix((vals, cols, np.searchsorted(rows, np.arange(X.shape[0] + 1))))
    inputs: list[Any] = [dense, coo, messy, X.tocsc(), sp.csr_array(X)]
    try:
        import pandas as pd

        inputs.append(pd.DataFrame(X.toarray()))
    except ImportError:
        pass
    for data in inputs:
        before, labels_before = _snapshot(data), labels.tobytes()
        kcheck.check(data, labels, **FAST)  # type: ignore[arg-type]
        assert _snapshot(data) == before, type(data)
        assert labels.tobytes() == labels_before


def test_every_form_of_the_same_data_gives_the_same_hash_and_verdict() -> None:
    X, y = load("fourclass")
    forms = [X.toarray(), X.tocsc(), X.tocoo(), sp.csr_array(X), frame_of(X), X.toarray().tolist()]
    results = [kcheck.check(f, list(y), **FAST).to_dict() for f in forms]  # type: ignore[arg-type]
    assert len({r["data"]["sha256"] for r in results}) == 1
    assert all(comparable(r) == comparable(results[0]) for r in results)
    changed = y.copy()
    changed[0] = -changed[0]
    assert (
        kcheck.check(X, changed, **FAST).to_dict()["data"]["sha256"]
        != (  # type: ignore[arg-type]
            results[0]["data"]["sha256"]
        )
    )


def test_a_duck_typed_frame_works_without_pandas() -> None:
    X, y = load("heart_scale")
    dense = X.toarray()
    frame = DuckFrame({f"c{j}": dense[:, j] for j in range(dense.shape[1])})
    got = kcheck.check(frame, y, **FAST).to_dict()  # type: ignore[arg-type]
    assert comparable(got) == comparable(kcheck.check(dense, y, **FAST).to_dict())  # type: ignore[arg-type]


# --- bad input --------------------------------------------------------------------------------


def _good() -> tuple[np.ndarray, np.ndarray]:
    X, y = load("heart_scale")
    return X.toarray(), y.copy()


def _with(change: Any) -> tuple[Any, Any]:
    X, y = _good()
    return change(X, y)  # type: ignore[no-any-return]


def _nan(X: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
    X[5, 3] = np.nan
    return X, y


def _inf(X: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
    X[7, 0] = np.inf
    return sp.csr_matrix(X), y


def _string_column(X: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
    columns = {f"f{j}": X[:, j] for j in range(3)}
    columns["colour"] = np.array(["red"] * X.shape[0], dtype=object)
    return DuckFrame(columns), y


def _string_labels(X: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
    labels = y.astype(object)
    labels[4] = "cat"
    return X, labels


@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        (_nan, ValueError, "X[5, 3] is nan; kcheck needs finite values"),
        (_inf, ValueError, "X[7, 0] is inf; kcheck needs finite values"),
        (lambda X, y: (X, np.ones_like(y)), ValueError, "a classifier needs at least two classes"),
        (lambda X, y: (X, y[:-1]), ValueError, "X has 270 rows but y has 269 labels"),
        (_string_column, ValueError, "column 'colour' is not numeric (object)"),
        (lambda X, y: (X.reshape(270, 13, 1), y), ValueError, "X must be 2-D (rows, features)"),
        (lambda X, y: (X[:, 0], y), ValueError, "reshape(-1, 1) for a single feature"),
        (_string_labels, ValueError, "y[4] is 'cat'; labels must be numbers"),
        (lambda X, y: (X, y.reshape(-1, 1)), ValueError, "y must be 1-D"),
        (lambda X, y: (X.astype(str), y), TypeError, "X must hold numbers"),
        (lambda X, y: (X[:5], y[:5]), ValueError, "5 rows are too few to compare classifiers"),
    ],
)
def test_bad_input_raises_a_clear_error(make: Any, error: type, words: str) -> None:
    X, y = _with(make)
    with pytest.raises(error) as raised:
        kcheck.check(X, y, **FAST)  # type: ignore[arg-type]
    assert words in str(raised.value)
    assert isinstance(raised.value, kcheck.KcheckError) == (error is ValueError)


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"epsilon": 2}, ValueError, "for 2 points give 0.02"),
        ({"epsilon": -0.1}, ValueError, "--epsilon must lie in [0, 1)"),
        ({"epsilon": "0.02"}, TypeError, "epsilon must be a number"),
        ({"seed": -1}, ValueError, "--seed must lie in 0 to 2^32-1"),
        ({"seed": 1.5}, TypeError, "seed must be an integer"),
        ({"jobs": 0}, ValueError, "--jobs must be at least 1"),
        ({"checkers": "degree2,svm"}, ValueError, "--checkers takes a comma-separated subset"),
        ({"checkers": [1]}, TypeError, "checkers must be names"),
        ({"metric": "f1"}, ValueError, "f1"),
        ({"scaling": "zscore"}, ValueError, "--scaling must be one of maxabs, minmax"),
        ({"exact": "sometimes"}, ValueError, "--exact must be one of auto, always, never"),
        ({"time_limit": 0}, ValueError, "--time-limit must be a positive number of seconds"),
        ({"memory_limit": "8G"}, TypeError, "memory_limit must be an integer"),
        ({"test": ([[1.0]],)}, TypeError, "test must be a pair (X_test, y_test)"),
    ],
)
def test_bad_options_raise_in_the_command_lines_words(
    options: dict[str, Any], error: type, words: str
) -> None:
    X, y = _good()
    with pytest.raises(error) as raised:
        kcheck.check(X, y, **options)
    assert words in str(raised.value)


def test_the_defaults_are_the_commands() -> None:
    import inspect

    from kcheck.cli.options import DEFAULT_CHECKER_NAMES, DEFAULT_EPSILON, DEFAULT_SEED

    for call in (kcheck.check, kcheck.check_file):
        params = inspect.signature(call).parameters
        for name, p in params.items():
            if name in {f for f in CheckConfig.__dataclass_fields__} and name != "test":
                assert p.default == getattr(CheckConfig, name), (call.__name__, name)
        assert params["epsilon"].default == DEFAULT_EPSILON
        assert params["seed"].default == DEFAULT_SEED
        assert params["checkers"].default == DEFAULT_CHECKER_NAMES
        assert params["jobs"].default == 1


def test_kcheck_error_is_a_value_error() -> None:
    assert issubclass(kcheck.KcheckError, ValueError)
    with pytest.raises(ValueError, match="no such file|cannot read|No such file"):
        kcheck.check_file("/nonexistent/data.svm")


# --- quiet, and light to import ---------------------------------------------------------------


def test_nothing_is_printed_unless_asked(capfd: pytest.CaptureFixture[str]) -> None:
    X, y = load("heart_scale")
    kcheck.check(X, y, **FAST)  # type: ignore[arg-type]
    assert capfd.readouterr() == ("", "")
    seen: list[str] = []
    kcheck.check(X, y, progress=lambda event: seen.append(event.stage), **FAST)  # type: ignore[arg-type]
    assert any("MultiLinear" in s or "multilinear" in s.lower() for s in seen)
    assert capfd.readouterr() == ("", "")
    kcheck.check(X, y, verbose=True, **FAST)  # type: ignore[arg-type]
    out, err = capfd.readouterr()
    assert out == "" and err.startswith("kcheck: ")


def test_progress_says_once_that_a_skipped_stage_ended_skipped() -> None:
    """docs/python.md: one event with ``ended`` (``skipped (REASON)``), of the stage that a
    limit skipped; every other event has none."""
    X, y = load("german.numer")
    events: list[kcheck.Event] = []
    kcheck.check(
        X,
        y,
        checkers="degree2,multilinear",
        exact="never",
        memory_limit=66 * 2**20,
        progress=events.append,
    )
    (end,) = [e for e in events if e.ended is not None]
    assert end.stage == "degree-2 checker" and end.ended is not None
    assert end.ended.startswith("skipped (") and "memory limit" in end.ended
    assert [e.stage for e in events].index("degree-2 checker") < events.index(end)


def test_import_kcheck_stays_light_and_reaches_the_api() -> None:
    code = textwrap.dedent(
        """
        import sys
        import kcheck
        heavy = [m for m in ("numpy", "scipy", "kcheck.pipeline", "kcheck.api") if m in sys.modules]
        assert not heavy, heavy
        assert "check" in dir(kcheck)
        assert callable(kcheck.check) and callable(kcheck.check_file)
        assert "kcheck.api" in sys.modules
        try:
            kcheck.nothing_here
        except AttributeError as e:
            print(e)
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "module 'kcheck' has no attribute 'nothing_here'"


# --- the model --------------------------------------------------------------------------------


@pytest.mark.slow
def test_fit_model_predicts_and_saves_what_model_out_saves(tmp_path: Path) -> None:
    X, y = load("heart_scale")
    path = tmp_path / "heart.svm"
    write_libsvm(str(path), y, X)
    result = kcheck.check(X, y, **FAST)  # type: ignore[arg-type]
    model = result.fit_model("linear")
    assert repr(model).startswith("<kcheck.Model linear C=")
    predicted = model.predict(X.toarray())
    assert predicted.shape == y.shape and set(np.unique(predicted)) <= set(np.unique(y))
    assert np.mean(predicted == y) > 0.8
    model.save(tmp_path / "api.model")
    r = subprocess.run(
        [sys.executable, "-m", "kcheck", "check", str(path), "-q", "-j", "1", *FAST_CLI]
        + ["--model-out", str(tmp_path / "cli.model"), "--model", "linear", "-o", os.devnull],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    for suffix in ("", ".range"):
        ours = (tmp_path / f"api.model{suffix}").read_bytes()
        assert ours == (tmp_path / f"cli.model{suffix}").read_bytes(), suffix
    # What the command predicts with the saved model is what the object predicts.
    r = subprocess.run(
        [sys.executable, "-m", "kcheck", "predict", str(tmp_path / "api.model"), str(path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert [float(v) for v in r.stdout.split()] == predicted.tolist()
    # The result itself is unchanged by training a model.
    assert result.to_dict()["model"] is None


def test_result_repr_is_short() -> None:
    X, y = load("fourclass")
    text = repr(kcheck.check(X, y, **FAST))  # type: ignore[arg-type]
    assert text.startswith("<kcheck.Result kernel (clear) by multilinear +")
    assert text.endswith("862 rows x 2 features>") and len(text) < 120


# --- Ctrl-C -----------------------------------------------------------------------------------

_INTERRUPTED = """
import os, sys
import numpy as np
import kcheck

def descendants():
    kids = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(pid))
    direct = kids.get(os.getpid(), [])
    # The fork server and the resource tracker (our children) stay for the interpreter's
    # life; the workers are their children.
    return [k for d in direct for k in kids.get(d, [])]

if __name__ == "__main__":
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40_000, 40))
    y = np.where((X[:, :3] ** 2).sum(1) > 3, 1, -1)
    print("ready", flush=True)
    said = []

    def progress(event):
        # Mid-check: MultiLinear's first cluster is done, with the baseline and degree-2 each
        # training in a worker process beside it. The check then waits here for the signal, so
        # that on a busy machine it cannot end before the signal comes (once, in CI, it did).
        if not said and event.stage.startswith("MultiLinear") and (event.done or 0) >= 1:
            said.append(event.stage)
            print("mid-check", flush=True)
            import time
            until = time.monotonic() + 120
            while time.monotonic() < until:
                time.sleep(0.01)

    try:
        kcheck.check(X, y, jobs=2, progress=progress)
        print("finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    import time
    # The workers end on their own; on a busy machine that can take a while (the test waits
    # for the event, with a ceiling that only stops a hang).
    deadline = time.monotonic() + 300
    while descendants() and time.monotonic() < deadline:
        time.sleep(0.1)
    print("workers", len(descendants()), flush=True)
    print("still here", sum(range(5)), flush=True)
"""


def _workers(pid: int) -> list[int]:
    """The grandchildren of ``pid``: the workers its fork server started."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    return [w for child in parents.get(pid, []) for w in parents.get(child, [])]


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timing
def test_ctrl_c_raises_keyboard_interrupt_and_ends_the_workers(tmp_path: Path) -> None:
    script = tmp_path / "interrupted.py"
    script.write_text(_INTERRUPTED)
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        preexec_fn=default_sigint,  # as a terminal starts it, whatever started the suite
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    # Well into the work, with the baseline and degree-2 in worker processes: the script says
    # when MultiLinear's first cluster is done, so the signal cannot come after the check's end
    # (on a busy machine, waiting for the parent's CPU seconds once sent it after "finished").
    assert proc.stdout.readline().strip() == "mid-check"
    wait_for(lambda: _workers(proc.pid) or proc.poll() is not None, "a worker process")
    assert proc.poll() is None, "the check finished before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert out.splitlines() == ["interrupted", "workers 0", "still here 10"], err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


@pytest.mark.slow
def test_docs_python_example_runs(tmp_path: Path) -> None:
    """docs/python.md's example, as a script, in a fresh interpreter."""
    text = (ROOT / "docs" / "python.md").read_text()
    blocks = [b.split("\n", 1)[1] for b in text.split("```python")[1:]]
    code = "\n".join(b.split("```", 1)[0] for b in blocks)
    script = tmp_path / "example.py"
    script.write_text(code)
    r = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    expected = [
        line.removeprefix("# ")
        for b in blocks
        for line in b.split("```", 1)[0].splitlines()
        if line.startswith("# -> ")
    ]
    got = r.stdout.splitlines()
    assert expected and got == [e.removeprefix("-> ") for e in expected]


def test_two_jobs_give_the_result_of_one() -> None:
    """docs/python.md: with ``jobs=2`` the RBF SVM's CV folds train in threads of the caller's
    process (from 500 rows); the result is that of one job, number for number."""
    from kcheck.verdict import without_timing

    rng = np.random.default_rng(5)
    X = rng.uniform(-1.0, 1.0, size=(640, 3))
    y = np.where(np.sin(3 * X[:, 0]) + X[:, 1] > 0, 1, -1)
    one, two = (
        kcheck.check(X, y, jobs=jobs, exact="always", checkers="multilinear") for jobs in (1, 2)
    )
    assert one.to_dict()["checkers"]["rbf"]["status"] == "exact"
    assert without_timing(two.to_dict()) == without_timing(one.to_dict())
