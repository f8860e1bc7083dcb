"""`kcheck batch`: discovery and pairing, serial vs parallel lines, resume, exit codes, Ctrl-C."""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import json
import lzma
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from runner import Run, alive, descendants, kcheck, on_a_terminal, startup_seconds, wait_for

from kcheck import batch
from kcheck.batch import DataSet, discover, name_skip_reason, sniff, strip_compression
from kcheck.config import CheckConfig
from kcheck.errors import KcheckError
from kcheck.io.data import write_libsvm
from kcheck.verdict import without_timing

# exact auto runs by a timed probe, so on a loaded machine its verdict JSON can differ between
# runs; these tests are about batch, not about that decision.
FAST = ("--checkers", "multilinear", "--exact", "never")


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def assert_batch_failed(r: Run) -> None:
    """Exit code 3. Until main() maps BatchFailed, the contract is that BatchFailed escapes."""
    assert r.returncode == 3 or (r.returncode == 1 and "BatchFailed" in r.stderr), r.stderr


def touch(path: Path, text: str = "1 1:0.5 2:1\n-1 1:-0.5\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}.get(path.suffix)
    if opener is None:
        path.write_text(text)
    else:
        with opener(path, "wt") as f:
            f.write(text)
    return path


def linear_set(rng: np.random.Generator, rows: int, features: int = 5):
    X = rng.normal(size=(rows, features))
    w = rng.normal(size=features)
    y = np.where(X @ w + 0.3 * rng.normal(size=rows) > 0, 1.0, -1.0)
    return y, sp.csr_matrix(X)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, datasets=Path(__file__).parent.parent / "datasets") -> Path:
    """Three data sets, a train/test pair (test compressed), a broken file and non-data."""
    d = tmp_path_factory.mktemp("sets")
    rng = np.random.default_rng(7)
    shutil.copy(datasets / "heart_scale", d / "heart_scale")
    shutil.copy(datasets / "fourclass", d / "fourclass")
    # 1,500 rows: with MultiLinear alone and no exact mode, a 300-row set leaves 75 rows in V,
    # where a 2-point gap is noise (the verdict flipped with the generator's seed).
    write_libsvm(str(d / "lin1500"), *linear_set(rng, 1500))
    y, X = linear_set(rng, 400, 4)
    write_libsvm(str(d / "pair"), y[:250], X[:250])
    write_libsvm(str(d / "pair.t"), y[250:], X[250:])
    with open(d / "pair.t", "rb") as f, gzip.open(d / "pair.t.gz", "wb") as g:
        g.write(f.read())
    (d / "pair.t").unlink()
    (d / "broken").write_text("1 1:0.5 2:0.25\n-1 1:-0.5 2:0.1\n1 1:0.3 2:zebra\n")
    (d / "README.md").write_text("# data\n")
    (d / "notes.dat").write_text("These are the data sets of the paper.\n")
    (d / "scores.json").write_text("{}\n")
    return d


NAMES = ["broken", "fourclass", "heart_scale", "lin1500", "pair"]


# --- discovery ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, stripped",
    [
        ("a9a", "a9a"),
        ("a9a.bz2", "a9a"),
        ("a9a.t.bz2", "a9a.t"),
        ("x.gz", "x"),
        ("y.xz", "y"),
        (".gz", ".gz"),
    ],
)
def test_strip_compression(name, stripped):
    assert strip_compression(name) == stripped


@pytest.mark.parametrize(
    "name, skipped",
    [
        ("a9a", False),
        ("a9a.t", False),
        ("news20.scale.bz2", False),
        ("train.txt", False),
        ("data.svm", False),
        ("README", True),
        ("README.md", True),
        ("readme.txt", True),
        ("LICENSE", True),
        ("MANIFEST.tsv", True),
        ("results.jsonl", True),
        ("x.csv.gz", True),
        ("model.range", True),
        ("plot.png", True),
        (".hidden", True),
        ("run.sh", True),
    ],
)
def test_name_filter(name, skipped):
    assert (name_skip_reason(name) is not None) == skipped


def test_sniff_accepts_libsvm_lines(tmp_path):
    assert sniff(touch(tmp_path / "a")) is None
    assert sniff(touch(tmp_path / "labels", "1\n-1\n")) is None  # a label alone is valid
    assert sniff(touch(tmp_path / "c", "# made by hand\n\n+1 3:1e-05 7:.5\n")) is None
    assert sniff(touch(tmp_path / "crlf", "2 1:1\r\n1 2:1\r\n")) is None
    for ext in (".gz", ".bz2", ".xz"):
        assert sniff(touch(tmp_path / f"z{ext}")) is None
    # A first line longer than the sniffed head: judged on its complete tokens.
    long = "1 " + " ".join(f"{i}:0.123456789" for i in range(1, 3000)) + "\n"
    assert sniff(touch(tmp_path / "long", long)) is None


def test_sniff_rejects_other_files(tmp_path):
    assert "not LIBSVM" in sniff(touch(tmp_path / "prose", "These are notes.\n"))
    assert "not LIBSVM" in sniff(touch(tmp_path / "csv", "1,0.5,0.25\n"))
    assert "not LIBSVM" in sniff(touch(tmp_path / "model", "solver_type L2R_L2LOSS_SVC\n"))
    assert "not LIBSVM" in sniff(touch(tmp_path / "range", "x\n-1 1\n1 0 5\n"))
    assert "not LIBSVM" in sniff(touch(tmp_path / "prose.gz", "hello world\n"))
    assert sniff(touch(tmp_path / "empty", "")) == "empty"
    assert sniff(touch(tmp_path / "comments", "# nothing\n")) is not None
    (tmp_path / "bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    assert sniff(str(tmp_path / "bin")) is not None


def test_discover_pairs_and_skips(tmp_path):
    for name in (
        "a9a.bz2",
        "a9a.t.bz2",
        "b",
        "b.t.gz",
        "c.xz",
        "c.test",
        "d",
        "d.t",
        "d.test",
        "lonely.t",
        "sub/e",
        "sub/e.t",
        ".hidden/f",
        "zz.txt",
    ):
        touch(tmp_path / name)
    for name in ("README.md", "MANIFEST.tsv", "out.jsonl", ".DS_Store"):
        touch(tmp_path / name, "not data\n")
    touch(tmp_path / "notes.dat", "These are notes.\n")
    found = discover([str(tmp_path)])
    got = {ds.name: (ds.train, ds.test) for ds in found.datasets}
    p = lambda n: str(tmp_path / n)  # noqa: E731
    assert got == {
        "a9a": (p("a9a.bz2"), p("a9a.t.bz2")),
        "b": (p("b"), p("b.t.gz")),
        "c": (p("c.xz"), p("c.test")),
        "d": (p("d"), p("d.t")),
        "lonely.t": (p("lonely.t"), None),
        "e": (p("sub/e"), p("sub/e.t")),
        "zz.txt": (p("zz.txt"), None),
    }
    # Sorted, deterministic order: files of a directory first, then its subdirectories.
    assert [ds.name for ds in found.datasets] == ["a9a", "b", "c", "d", "lonely.t", "zz.txt", "e"]
    skipped = {os.path.basename(path): reason for path, reason in found.skipped}
    assert set(skipped) == {
        "README.md",
        "MANIFEST.tsv",
        "out.jsonl",
        ".DS_Store",
        "notes.dat",
        "d.test",
    }
    assert "not LIBSVM" in skipped["notes.dat"]


def test_discover_files_names_and_errors(tmp_path):
    touch(tmp_path / "x/heart")
    touch(tmp_path / "y/heart.gz")
    touch(tmp_path / "y/heart.t")
    touch(tmp_path / "y/README")
    # Explicit files go through the same filter (a shell glob brings README along).
    found = discover(
        [
            str(tmp_path / "x/heart"),
            str(tmp_path / "y/heart.gz"),
            str(tmp_path / "y/README"),
            str(tmp_path / "y/heart.t"),
        ]
    )
    # Same name in two directories: the path tells them apart.
    assert [ds.name for ds in found.datasets] == [
        str(tmp_path / "x/heart"),
        str(tmp_path / "y/heart"),
    ]
    assert found.datasets[1].test == str(tmp_path / "y/heart.t")
    # A file named twice (directly and through its directory) is one data set.
    assert len(discover([str(tmp_path / "x"), str(tmp_path / "x/heart")]).datasets) == 1
    # The output file is never taken as input.
    assert discover([str(tmp_path / "x")], exclude=[str(tmp_path / "x/heart")]).datasets == []
    with pytest.raises(KcheckError, match="no such file"):
        discover([str(tmp_path / "missing")])


# --- running -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def serial_run(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("serial") / "results.jsonl"
    r = kcheck("batch", str(data_dir), "-o", str(out), *FAST)
    return r, out


@pytest.mark.slow
def test_serial_run_lines_and_summary(serial_run, data_dir):
    r, out = serial_run
    assert_batch_failed(r)  # the broken file
    assert r.stdout == b""
    lines = {x["name"]: x for x in lines_of(out) if x["status"] != "skipped"}
    assert sorted(lines) == NAMES
    for name in NAMES:
        assert lines[name]["status"] == ("error" if name == "broken" else "ok")
    assert lines["fourclass"]["verdict"] == "kernel"
    assert lines["heart_scale"]["verdict"] == "linear"
    assert lines["lin1500"]["verdict"] == "linear"
    # The pair: checked once, scored on its (compressed) test file.
    pair = lines["pair"]
    assert pair["test"]["path"] == str(data_dir / "pair.t.gz") and pair["test"]["rows"] == 150
    assert pair["data"]["rows"] == 250
    # The broken file: file and line in a one-line message; a full line still.
    err = lines["broken"]
    assert err["error"].startswith(f"{data_dir / 'broken'}:3:"), err["error"]
    assert err["verdict"] is None and err["data"]["path"] == str(data_dir / "broken")
    # Summary on stderr, with totals; skipped files named.
    assert "kcheck batch" in r.stderr and "5 data sets" in r.stderr
    assert "1 kernel, 3 linear" in r.stderr and "4 ok" in r.stderr
    assert "skipping" in r.stderr and "README.md" in r.stderr and "notes.dat" in r.stderr
    skips = {x["name"]: x["reason"] for x in lines_of(out) if x["status"] == "skipped"}
    assert skips == {
        str(data_dir / "README.md"): ".md file",
        str(data_dir / "notes.dat"): skips[str(data_dir / "notes.dat")],
        str(data_dir / "scores.json"): ".json file",
    }
    assert "not LIBSVM data" in skips[str(data_dir / "notes.dat")]
    assert "3 files skipped" in r.stderr
    assert "1 of 5 data sets could not be checked: broken" in r.stderr


@pytest.mark.slow
def test_parallel_lines_match_serial(serial_run, data_dir, tmp_path):
    _, serial_out = serial_run
    out = tmp_path / "par.jsonl"
    r = kcheck("batch", str(data_dir), "-j", "2", "-o", str(out), *FAST, "-q")
    assert_batch_failed(r)
    serial = {x["name"]: without_timing(x) for x in lines_of(serial_out)}
    parallel = {x["name"]: without_timing(x) for x in lines_of(out)}
    assert parallel == serial


@pytest.mark.slow
def test_stdout_gets_the_lines_without_o(data_dir, tmp_path):
    d = tmp_path / "two"
    d.mkdir()
    for name in ("heart_scale", "lin1500"):
        shutil.copy(data_dir / name, d / name)
    r = kcheck("batch", str(d), *FAST)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["name"] for x in lines] == ["heart_scale", "lin1500"]
    assert all(x["status"] == "ok" and x["error"] is None for x in lines)
    assert "{" not in r.stderr and "kcheck batch" in r.stderr


def test_resume_skips_ok_and_retries_errors(data_dir, tmp_path):
    sets = discover([str(data_dir)]).datasets
    config = CheckConfig(train="", checkers=("multilinear",), exact="never")
    out = tmp_path / "r.jsonl"
    first = batch.run_batch(sets, config, output=str(out))
    assert [x["name"] for x in first.lines] == NAMES
    assert len(lines_of(out)) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]  # no partial, no lock

    # Run again: nothing ok is redone; the broken set is tried again (and fails again). The
    # file then holds one line per data set: the reused ones first, then the new ones.
    again = batch.run_batch(sets, config, output=str(out), resume=True)
    after = lines_of(out)
    assert [x["name"] for x in after] == [n for n in NAMES if n != "broken"] + ["broken"]
    assert again.resumed == set(NAMES) - {"broken"} and again.stale == set()
    assert [x["name"] for x in again.lines] == NAMES and len(again.errors) == 1
    ok = {x["name"]: json.loads(json.dumps(x)) for x in first.lines if x["status"] == "ok"}
    assert {x["name"]: x for x in after if x["status"] == "ok"} == ok  # carried over verbatim

    # Damage the file: heart_scale's line now says error and a line is torn off mid-way.
    text = out.read_text().splitlines()
    fixed = [
        json.dumps({**json.loads(t), "status": "error"}) if '"heart_scale"' in t else t
        for t in text
        if '"fourclass"' not in t
    ]
    out.write_text("\n".join(fixed) + "\n" + text[1][:40])
    third = batch.run_batch(sets, config, output=str(out), resume=True)
    assert third.resumed == {"lin1500", "pair"}
    assert {x["name"]: x["status"] for x in third.lines}["heart_scale"] == "ok"
    assert sorted(x["name"] for x in lines_of(out)) == NAMES


def test_resume_cli_reports_what_it_reused(serial_run, data_dir, tmp_path):
    _, serial_out = serial_run
    out = tmp_path / "again.jsonl"
    shutil.copy(serial_out, out)
    r = kcheck("batch", str(data_dir), "-o", str(out), "--resume", *FAST)
    assert_batch_failed(r)
    lines = [x for x in lines_of(out) if x["status"] != "skipped"]
    assert len(lines) == 5 and lines[-1]["name"] == "broken"
    assert "reused 4 of 5 results" in r.stderr and "(resumed)" in r.stderr
    assert "1 again, 0 of them because" in r.stderr


# --- exit codes --------------------------------------------------------------------------------


def run_main(*args: str) -> int:
    from kcheck.cli.app import BatchFailed, main

    try:
        main(["batch", *args])
    except SystemExit as e:
        return int(e.code or 0)
    except BatchFailed:
        return 3  # the contract until main() maps BatchFailed itself
    return 0


@pytest.fixture(scope="module")
def gate_dirs(data_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("gates")
    for sub, names in (
        ("linear", ["heart_scale"]),
        ("kernel", ["fourclass", "heart_scale"]),
        ("mixed", ["fourclass", "broken"]),
        ("empty", []),
    ):
        (root / sub).mkdir()
        for name in names:
            shutil.copy(data_dir / name, root / sub / name)
    (root / "empty" / "README.md").write_text("nothing here\n")
    return root


@pytest.mark.parametrize(
    "sub, fail_on, code",
    [
        ("linear", "kernel", 0),
        ("linear", None, 0),
        ("kernel", "kernel", 1),
        ("kernel", "linear", 1),
        ("mixed", None, 3),
        ("mixed", "kernel", 3),
        ("empty", None, 2),
    ],
)
def test_exit_codes(gate_dirs, tmp_path, sub, fail_on, code, capsys):
    gate = ["--fail-on", fail_on] if fail_on else []
    out = tmp_path / "o.jsonl"
    assert run_main(str(gate_dirs / sub), "-o", str(out), *gate, *FAST, "-q") == code
    err = capsys.readouterr().err
    if code == 2:
        assert "no LIBSVM data files found" in err


def test_usage_errors(gate_dirs, tmp_path, capsys):
    assert run_main(str(gate_dirs / "linear"), "--resume") == 2
    assert "--resume needs -o" in capsys.readouterr().err
    assert run_main(str(gate_dirs / "linear"), "-j", "0") == 2
    assert run_main(str(gate_dirs / "linear"), "--checkers", "rbf", "-o", "x.jsonl") == 2
    assert run_main(str(tmp_path / "nowhere")) == 2
    assert not (tmp_path / "x.jsonl").exists()


# --- workers -----------------------------------------------------------------------------------


def crash_on_broken(ds: DataSet, config: CheckConfig) -> dict[str, Any]:
    """A task whose worker dies on one data set, as under the OOM killer."""
    if ds.name == "broken":
        os._exit(9)
    return {"name": ds.name, "status": "ok", "error": None, "seconds": 0.0}


@pytest.mark.slow
def test_a_dying_worker_costs_only_its_own_data_set(data_dir):
    sets = discover([str(data_dir)]).datasets
    gen = batch._run_parallel(sets, CheckConfig(train=""), 2, batch._noop, crash_on_broken)
    lines = {x["name"]: x for x in gen}
    assert sorted(lines) == NAMES
    assert lines["broken"]["status"] == "error"
    assert "worker process died" in lines["broken"]["error"]
    assert all(lines[n]["status"] == "ok" for n in NAMES if n != "broken")


def test_a_pool_broken_before_its_future_says_so_is_handled_as_broken(data_dir, monkeypatch):
    """A worker can die between the wait and the next submit: the pool then refuses the
    submit (BrokenProcessPool) before the dead worker's future has failed. That data set waits
    and the batch goes on as for a future that failed (a clean-clone CI run once failed here on
    the real pool, in test_a_dying_worker_costs_only_its_own_data_set)."""
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    class Pool:
        """Runs a task at submit, but the broken set's future fails only when the next submit
        finds the pool broken, as a real pool's may; alone in its pool, at once."""

        def __init__(self, workers: int) -> None:
            self.workers = workers
            self.dead: Future[dict[str, Any]] | None = None

        def submit(self, fn, ds, config):  # type: ignore[no-untyped-def]
            if self.dead is not None:
                self.dead.set_exception(BrokenProcessPool("a child process terminated"))
                raise BrokenProcessPool("a child process terminated")
            f: Future[dict[str, Any]] = Future()
            if ds.name == "broken" and self.workers == 1:
                f.set_exception(BrokenProcessPool("a child process terminated"))
            elif ds.name == "broken":
                self.dead = f
            else:
                f.set_result(fn(ds, config))
            return f

    pools: list[Pool] = []

    def new_pool(workers: int) -> Pool:
        pools.append(Pool(workers))
        return pools[-1]

    from kcheck.batch import runners

    monkeypatch.setattr(runners, "_new_pool", new_pool)
    monkeypatch.setattr(runners, "_end_pool", lambda pool: None)
    sets = discover([str(data_dir)]).datasets
    assert "broken" in [ds.name for ds in sets[:-1]]  # a set is submitted after it
    gen = batch._run_parallel(sets, CheckConfig(train=""), 2, batch._noop, crash_free)
    lines = [x for x in gen]
    assert sorted(x["name"] for x in lines) == NAMES
    by_name = {x["name"]: x for x in lines}
    assert "worker process died" in by_name["broken"]["error"]
    assert all(by_name[n]["status"] == "ok" for n in NAMES if n != "broken")
    assert len(pools) >= 2  # the broken pool was replaced


def crash_free(ds: DataSet, config: CheckConfig) -> dict[str, Any]:
    return {"name": ds.name, "status": "ok", "error": None, "seconds": 0.0}


def test_plan_divides_memory_and_cpus():
    config = CheckConfig(train="", jobs=8, memory_limit=8 * 2**30)
    assert batch.plan(config, 1, 10) == (1, config)
    workers, each = batch.plan(config, 4, 10)
    assert workers == 4 and each.jobs == 1 and each.memory_limit == 2 * 2**30
    workers, each = batch.plan(config, 4, 2)  # fewer data sets than -j: they share the CPUs
    assert workers == 2 and each.jobs == 2 and each.memory_limit == 4 * 2**30


@pytest.fixture(scope="module")
def slow_dir(data_dir, tmp_path_factory) -> Path:
    """One quick data set, then three that take about a minute each."""
    d = tmp_path_factory.mktemp("slow")
    shutil.copy(data_dir / "heart_scale", d / "a_quick")
    rng = np.random.default_rng(3)
    for name in ("b_slow", "c_slow", "d_slow"):
        write_libsvm(str(d / name), *linear_set(rng, 60_000, 20))
    return d


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timing
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize(
    "jobs, sig, code",
    [("2", signal.SIGINT, 130), ("2", signal.SIGTERM, 143), ("1", signal.SIGINT, 130)],
)
def test_interrupt_ends_workers_and_keeps_whole_lines(slow_dir, tmp_path, jobs, sig, code):
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kcheck", "batch", str(slow_dir), "-j", jobs, "-o", str(out), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        partial = tmp_path / "out.jsonl.partial"
        wait_for(lambda: partial.exists() and partial.read_text(), "the quick data set's line")
        assert not out.exists(), "the output is renamed into place only at the end"
        time.sleep(0.3)  # the slow ones are under way
        workers = descendants(proc.pid) if jobs != "1" else set()
        assert workers or jobs == "1"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert "interrupted" in err and "Traceback" not in err and "leaked" not in err
    # The old output is as it was (there was none); the partial file keeps the whole lines.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl.partial"]
    text = partial.read_text()
    assert text.endswith("\n")
    names = [json.loads(t)["name"] for t in text.splitlines()]
    assert names == ["a_quick"]
    # The workers, busy with checks that take a minute, were ended with the batch.
    wait_for(lambda: not any(alive(p) for p in workers), "the workers to end")


def test_read_results_takes_each_names_latest_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(
        '{"name": "a", "status": "ok"}\n'
        '{"name": "b", "status": "error"}\n'
        '{"name": "c", "status": "ok"}\n'
        '{"name": "b", "status": "ok"}\n'
        '{"name": "c", "status": "error"}\n'
        '{"name": "d", "stat'
    )
    assert sorted(batch.read_results(str(path))) == ["a", "b"]
    assert batch.read_results(str(tmp_path / "missing.jsonl")) == {}


# --- which files are checked: no silent skips ---------------------------------------------------


def test_directory_checks_data_names_and_skips_only_plain_non_data(tmp_path):
    good = "1 1:0.5 2:1\n-1 1:-0.5\n"
    touch(tmp_path / "good.svm", good)
    touch(tmp_path / "broken.svm", "1 1:0.5 2:abc\n")  # corrupt on line 1
    touch(tmp_path / "empty.svm", "")
    touch(tmp_path / "prose", "These are notes.\n")  # no extension: data by name
    touch(tmp_path / "a.scale.bz2", good)
    touch(tmp_path / "german.numer", good)  # other extension, LIBSVM inside: checked
    touch(tmp_path / "notes.dat", "These are notes.\n")  # other extension, not LIBSVM: skipped
    for name in ("README.md", "plot.png", "scores.json", "make.py", ".hidden"):
        touch(tmp_path / name, "not data\n")
    found = discover([str(tmp_path)])
    assert [ds.name for ds in found.datasets] == [
        "a.scale",
        "broken.svm",
        "empty.svm",
        "german.numer",
        "good.svm",
        "prose",
    ]
    skipped = {os.path.basename(p): reason for p, reason in found.skipped}
    assert skipped == {
        ".hidden": "hidden file",
        "README.md": ".md file",
        "make.py": ".py file",
        "notes.dat": skipped["notes.dat"],
        "plot.png": ".png file",
        "scores.json": ".json file",
    }
    assert "not LIBSVM data" in skipped["notes.dat"]


def test_a_named_file_is_checked_unless_its_name_says_it_is_not_data(tmp_path):
    touch(tmp_path / "notes.dat", "These are notes.\n")
    touch(tmp_path / ".x.svm")
    touch(tmp_path / "README.md", "# data\n")
    found = discover([str(tmp_path / n) for n in ("notes.dat", ".x.svm", "README.md")])
    assert [ds.name for ds in found.datasets] == ["notes.dat", ".x.svm"]
    assert found.skipped == [(str(tmp_path / "README.md"), ".md file")]


@pytest.mark.parametrize(
    "files, named, pairs",
    [
        # LIBSVM's naming: NAME.scale goes with NAME.t.scale, compressed or not.
        (
            ["sector.scale.bz2", "sector.t.scale.bz2"],
            None,
            {"sector.scale": ("sector.scale.bz2", "sector.t.scale.bz2")},
        ),
        (["news.scale", "news.t.scale"], None, {"news.scale": ("news.scale", "news.t.scale")}),
        # A named file finds its test file on disk, as in a directory walk.
        (["a9a", "a9a.t.gz", "other"], ["a9a"], {"a9a": ("a9a", "a9a.t.gz")}),
        (
            ["sector.scale.bz2", "sector.t.scale.bz2"],
            ["sector.scale.bz2"],
            {"sector.scale": ("sector.scale.bz2", "sector.t.scale.bz2")},
        ),
        (["w1a", "w1a.test"], ["w1a", "w1a.test"], {"w1a": ("w1a", "w1a.test")}),
        # A test file named on its own is a data set of its own.
        (["w1a", "w1a.t"], ["w1a.t"], {"w1a.t": ("w1a.t", None)}),
    ],
)
def test_pairing(tmp_path, files, named, pairs):
    for name in files:
        touch(tmp_path / name)
    found = discover([str(tmp_path / n) for n in named] if named else [str(tmp_path)])
    p = lambda n: None if n is None else str(tmp_path / n)  # noqa: E731
    assert {ds.name: (ds.train, ds.test) for ds in found.datasets} == {
        name: (p(train), p(test)) for name, (train, test) in pairs.items()
    }
    assert found.skipped == []


def test_stdin_is_a_data_set(tmp_path):
    found = discover(["-", str(touch(tmp_path / "x"))])
    assert found.datasets[0] == DataSet("<stdin>", "-") and len(found.datasets) == 2
    with pytest.raises(KcheckError, match="named twice"):
        discover(["-", "-"])


@pytest.fixture
def issue_dir(tmp_path) -> Path:
    """The reported case: a file corrupt on line 1 named beside a good one."""
    bd = tmp_path / "bd"
    bd.mkdir()
    (bd / "broken.svm").write_text("1 1:0.5 2:abc\n-1 1:0.25\n")
    shutil.copy(Path(__file__).parent.parent / "datasets" / "heart_scale", bd / "sg")
    return bd


@pytest.mark.slow
def test_a_named_corrupt_file_is_an_error_not_a_skip(issue_dir, tmp_path):
    out = tmp_path / "o.jsonl"
    r = kcheck("batch", str(issue_dir / "broken.svm"), str(issue_dir / "sg"), "-o", str(out), *FAST)
    assert r.returncode == 3, r.stderr
    assert "skipping" not in r.stderr
    lines = {x["name"]: x for x in lines_of(out)}
    assert lines["broken.svm"]["status"] == "error"
    assert lines["broken.svm"]["error"].startswith(f"{issue_dir / 'broken.svm'}:1: ")
    assert lines["sg"]["status"] == "ok"


@pytest.mark.slow
def test_strict_turns_a_skip_into_an_error(issue_dir, tmp_path):
    (issue_dir / "broken.svm").unlink()
    (issue_dir / "README.md").write_text("# data\n")
    out = tmp_path / "o.jsonl"
    r = kcheck("batch", str(issue_dir), "-o", str(out), *FAST)
    assert r.returncode == 0, r.stderr
    readme = {x["name"]: x for x in lines_of(out)}[str(issue_dir / "README.md")]
    assert readme["status"] == "skipped" and readme["reason"] == ".md file"
    r = kcheck("batch", str(issue_dir), "-o", str(out), "--strict", *FAST)
    assert r.returncode == 3, r.stderr
    readme = {x["name"]: x for x in lines_of(out)}[str(issue_dir / "README.md")]
    assert readme["status"] == "error" and ".md file" in readme["error"]
    assert "README.md" in r.stderr.splitlines()[-1]


@pytest.mark.slow
def test_files_from_a_list_and_from_stdin(issue_dir, tmp_path):
    (issue_dir / "broken.svm").unlink()
    shutil.copy(Path(__file__).parent.parent / "datasets" / "fourclass", issue_dir / "fc")
    listing = tmp_path / "list.txt"
    listing.write_text(f"{issue_dir / 'sg'}\n\n{issue_dir / 'fc'}\n")
    r = kcheck("batch", "--files-from", str(listing), *FAST)
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["name"] for x in r.stdout.splitlines()] == ["sg", "fc"]
    r = kcheck("batch", "--files-from", "-", *FAST, input=f"{issue_dir / 'fc'}\n".encode())
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["name"] for x in r.stdout.splitlines()] == ["fc"]
    r = kcheck("batch", "-", "--files-from", "-")
    assert r.returncode == 2 and "stdin" in r.stderr


@pytest.mark.slow
def test_a_bare_dash_is_data_on_stdin(issue_dir, tmp_path):
    (issue_dir / "broken.svm").unlink()
    data = (Path(__file__).parent.parent / "datasets" / "fourclass").read_bytes()
    r = kcheck("batch", "-", str(issue_dir / "sg"), "-j", "2", *FAST, input=data)
    assert r.returncode == 0, r.stderr
    lines = {x["name"]: x for x in map(json.loads, r.stdout.splitlines())}
    assert lines["<stdin>"]["data"]["rows"] == 862 and lines["<stdin>"]["verdict"] == "kernel"
    assert lines["sg"]["status"] == "ok"


@pytest.mark.slow
def test_dash_o_is_stdout_not_a_file(issue_dir, tmp_path):
    (issue_dir / "broken.svm").unlink()
    r = kcheck("batch", str(issue_dir), "-o", "-", *FAST, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["name"] for x in r.stdout.splitlines()] == ["sg"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bd"]


@pytest.mark.slow
def test_on_a_terminal_without_o_the_table_is_shown_not_json(issue_dir):
    """stdout and stderr on a terminal: the summary table, and no JSON glued to the spinner."""
    (issue_dir / "broken.svm").unlink()
    code, screen = on_a_terminal(["batch", str(issue_dir), *FAST])
    assert code == 0, screen
    assert "kcheck batch" in screen and "sg" in screen and "linear" in screen
    assert '{"name"' not in screen and "schema_version" not in screen


# --- the output file: locked, renamed into place, resumable --------------------------------------


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timing
def test_a_second_run_on_the_same_output_is_refused_at_once(slow_pair, tmp_path):
    out = tmp_path / "same.jsonl"
    args = [
        sys.executable,
        "-m",
        "kcheck",
        "batch",
        str(slow_pair),
        "-o",
        str(out),
        "-j",
        "1",
        *FAST,
        "-q",
    ]
    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock = tmp_path / "same.jsonl.lock"
        wait_for(lambda: lock.exists() or first.poll() is not None, "the first run's lock")
        assert lock.exists() and first.poll() is None
        t0 = time.monotonic()
        second = subprocess.run(args, capture_output=True, text=True, timeout=600)
        refusal = time.monotonic() - t0
        assert second.returncode == 2, second.stderr
        assert "being written by another kcheck batch" in second.stderr
        assert first.poll() is None, "the first run must still be going"
        # "At once": about as long as starting kcheck and refusing a missing file, timed now,
        # under the same load (the first run still computes beside both).
        assert refusal < 3 * startup_seconds() + 1.0
        _, err = first.communicate(timeout=600)
    finally:
        first.kill()
    assert first.returncode == 0, err
    assert [x["name"] for x in lines_of(out)] == ["a_quick", "b_slow"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.jsonl"]


@pytest.mark.slow
def test_two_batches_started_together_lose_and_tear_nothing(data_dir, tmp_path):
    """Started at the same moment on one output: one refuses (exit 2) or, if they did not
    overlap, both finish; either way the file holds every data set's line, each whole."""
    d = tmp_path / "sets"
    d.mkdir()
    for name in ("heart_scale", "fourclass", "lin1500", "pair", "pair.t.gz"):
        shutil.copy(data_dir / name, d / name)
    out = tmp_path / "same.jsonl"
    args = [
        sys.executable,
        "-m",
        "kcheck",
        "batch",
        str(d),
        "-o",
        str(out),
        "-q",
        "--checkers",
        "degree2,multilinear",
        "--exact",
        "never",
    ]
    procs = [
        subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    codes = sorted(code for code, _ in results)
    assert codes in ([0, 0], [0, 2]), results
    if codes == [0, 2]:
        assert any("being written by another kcheck batch" in err for _, err in results)
    text = out.read_text()
    assert text.endswith("\n")
    assert sorted(json.loads(x)["name"] for x in text.splitlines()) == [
        "fourclass",
        "heart_scale",
        "lin1500",
        "pair",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.jsonl", "sets"]


@pytest.fixture(scope="module")
def slow_pair(data_dir, tmp_path_factory) -> Path:
    """A quick data set, then one that takes several seconds."""
    d = tmp_path_factory.mktemp("slowpair")
    shutil.copy(data_dir / "heart_scale", d / "a_quick")
    write_libsvm(str(d / "b_slow"), *linear_set(np.random.default_rng(5), 40_000, 20))
    return d


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timing
def test_interrupted_run_keeps_the_old_file_and_resume_finishes_it(slow_pair, tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"old results\n")
    partial = tmp_path / "out.jsonl.partial"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kcheck", "batch", str(slow_pair), "-o", str(out), *FAST, "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: partial.exists() and partial.read_text(), "the quick data set's line")
        assert out.read_bytes() == b"old results\n"  # untouched while the run goes on
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert out.read_bytes() == b"old results\n"
    assert [x["name"] for x in lines_of(partial)] == ["a_quick"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "out.jsonl.partial"]

    r = kcheck("batch", str(slow_pair), "-o", str(out), "--resume", *FAST)
    assert r.returncode == 0, r.stderr
    assert "reused 1 of 2 results" in r.stderr
    assert [x["name"] for x in lines_of(out)] == ["a_quick", "b_slow"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


# --- resume reuses only what is still valid ------------------------------------------------------


def test_resume_key_follows_every_option_and_the_version(monkeypatch):
    base = CheckConfig(train="a", test="b", jobs=2)
    key = batch.resume_key(base, "d" * 64, None)
    changed = {
        "epsilon": 0.05,
        "checkers": ("degree2",),
        "scaling": "minmax",
        "seed": 1,
        "memory_limit": 2**30,
        "zero_based": True,
        "time_limit": 5.0,
        "exact": "never",
        "explain": True,
        "max_rows": 5000,
        "metric": "balanced",
    }
    # max_rows and metric are keyed only when not their defaults, so lines saved before they
    # existed keep their key.
    keyed = set(batch.keyed_options(base)) | set(batch.KEYED_WHEN_SET)
    assert keyed == set(changed), "a new CheckConfig field joins the key: give it a value here"
    auto = batch.resume_key(dataclasses.replace(base, max_rows="auto"), "d" * 64, None)
    assert auto not in (
        key,
        batch.resume_key(dataclasses.replace(base, max_rows=5000), "d" * 64, None),
    )
    for name, value in changed.items():
        assert batch.resume_key(dataclasses.replace(base, **{name: value}), "d" * 64, None) != key
    auc = batch.resume_key(dataclasses.replace(base, metric="auc"), "d" * 64, None)
    assert auc not in (
        key,
        batch.resume_key(dataclasses.replace(base, metric="balanced"), "d" * 64, None),
    )
    for name, value in {"train": "x", "test": None, "jobs": 7, "model_out": "m"}.items():
        assert batch.resume_key(dataclasses.replace(base, **{name: value}), "d" * 64, None) == key
    assert batch.resume_key(base, "e" * 64, None) != key
    assert batch.resume_key(base, "d" * 64, "f" * 64) != key
    monkeypatch.setattr(batch.resume, "__version__", "99.0")
    assert batch.resume_key(base, "d" * 64, None) != key


def test_resume_rechecks_what_changed(data_dir, tmp_path, datasets):
    d = tmp_path / "sets"
    d.mkdir()
    for name in ("heart_scale", "lin1500", "pair", "pair.t.gz"):
        shutil.copy(data_dir / name, d / name)
    sets = discover([str(d)]).datasets
    config = CheckConfig(train="", checkers=("multilinear",), exact="never")
    out = tmp_path / "r.jsonl"
    first = batch.run_batch(sets, config, output=str(out))
    assert len(first.lines) == 3 and not first.errors

    same = batch.run_batch(sets, config, output=str(out), resume=True)
    assert same.resumed == {"heart_scale", "lin1500", "pair"} and same.stale == set()

    # Another epsilon: nothing is valid any more.
    eps = batch.run_batch(
        sets, dataclasses.replace(config, epsilon=0.05), output=str(out), resume=True
    )
    assert eps.resumed == set() and eps.stale == {"heart_scale", "lin1500", "pair"}
    assert {x["epsilon"] for x in lines_of(out)} == {0.05}

    # A replaced data file and a changed test file: those two are checked again.
    shutil.copy(datasets / "fourclass", d / "heart_scale")
    with gzip.open(d / "pair.t.gz", "rb") as f:
        rows = f.read().splitlines(keepends=True)
    with gzip.open(d / "pair.t.gz", "wb") as f:
        f.write(b"".join(rows[:100]))
    again = batch.run_batch(
        sets, dataclasses.replace(config, epsilon=0.05), output=str(out), resume=True
    )
    assert again.resumed == {"lin1500"} and again.stale == {"heart_scale", "pair"}
    lines = {x["name"]: x for x in lines_of(out)}
    assert lines["heart_scale"]["data"]["rows"] == 862  # fourclass now
    assert lines["pair"]["test"]["rows"] == 100
    assert len(lines_of(out)) == 3


def test_resume_never_reuses_stdin(tmp_path, datasets, monkeypatch):
    out = tmp_path / "r.jsonl"
    config = CheckConfig(train="", checkers=("multilinear",), exact="never")
    ds = [DataSet("<stdin>", "-")]
    import io

    for _ in range(2):
        fake = io.TextIOWrapper(io.BytesIO((datasets / "heart_scale").read_bytes()))
        monkeypatch.setattr(sys, "stdin", fake)
        result = batch.run_batch(ds, config, output=str(out), resume=True)
        assert result.resumed == set() and result.lines[0]["status"] == "ok"


# --- the summary ---------------------------------------------------------------------------------


def _line(verdict: str, deciding: str | None, **gaps: float) -> dict[str, Any]:
    return {
        "verdict": verdict,
        "deciding_checker": deciding,
        "checkers": {n: {"gap": g} for n, g in gaps.items()},
    }


def test_summary_gap_is_the_deciding_checkers():
    from kcheck.cli.render import deciding_gap

    # kernel: the deciding checker's gap, even when another checker's is larger.
    assert deciding_gap(_line("kernel", "rbf", rbf=0.03, multilinear=0.2)) == "+3.00 rbf"
    assert (
        deciding_gap(_line("kernel", "degree2", degree2=0.05, multilinear=0.01)) == "+5.00 degree2"
    )
    # linear: the largest gap, labelled as the closest checker; the exact comparison decides
    # alone where it ran.
    assert (
        deciding_gap(_line("linear", None, degree2=0.01, multilinear=-0.02))
        == "+1.00 degree2 (closest)"
    )
    assert deciding_gap(_line("linear", None, rbf=0.005, degree2=0.04)) == "+0.50 rbf (closest)"
    assert deciding_gap(_line("linear", None)) == "-"


def test_a_line_on_disk_is_kept_when_an_interrupt_beats_its_count(tmp_path, monkeypatch):
    """Signals are held only in the writing thread; one delivered to another thread (the Dask
    client's) raises KeyboardInterrupt at any point of the write, here just after the line is
    synced and before it is counted. close() must keep FILE.partial for --resume all the same;
    an interrupt before any line still removes the empty one."""
    out = tmp_path / "out.jsonl"
    writer = batch.LineWriter(str(out))
    writer.start()
    real_fsync = os.fsync

    def interrupted(fd: int) -> None:
        real_fsync(fd)
        raise KeyboardInterrupt

    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        m.setattr(batch.writer.os, "fsync", interrupted)
        writer.write({"name": "a", "status": "ok"})
    writer.close()
    assert [x["name"] for x in lines_of(tmp_path / "out.jsonl.partial")] == ["a"]
    assert not out.exists()

    empty = batch.LineWriter(str(tmp_path / "empty.jsonl"))
    empty.start()
    empty.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl.partial"]
