"""``--scheduler``: batch and verify on a real Dask cluster of separate worker processes.

The results must be those of a local run apart from timing, a worker killed mid-batch must
cost no line, a data set that kills its workers gets an error line after three tries, and
Ctrl-C must leave nothing running. Skipped without the ``dask`` extra, except in CI
(``KCHECK_REQUIRE_TOOLS``), where ``pip install '.[test]'`` installs it.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from runner import alive, descendants, run_kcheck, start_kcheck, wait_for, without_stage_lines

from kcheck import batch
from kcheck.batch import DataSet, discover, run_batch
from kcheck.config import CheckConfig
from kcheck.errors import KcheckError
from kcheck.io.data import write_libsvm
from kcheck.parallel import cluster
from kcheck.tuning.rbf_grid import EXPORT_GRID, rbf_grid_search
from kcheck.verdict import without_timing
from kcheck.verify import VerifyConfig, verify

ROOT = Path(__file__).resolve().parent.parent
DATASETS = ROOT / "datasets"
#: As in test_batch: the exact checker's auto mode is a timed probe, not what is tested here.
FAST = {"checkers": ("multilinear",), "exact": "never"}
FAST_ARGS = ("--checkers", "multilinear", "--exact", "never")

distributed: Any
try:
    import distributed
except ImportError:  # pragma: no cover - the dask extra is missing
    if os.environ.get("KCHECK_REQUIRE_TOOLS"):
        raise  # CI installs the test extra, which has it
    distributed = None

#: The test clusters' schedulers keep off Dask's port 8787, as kcheck's own local:N does.
NO_HTTP_PORT = {"dashboard": False, "dashboard_address": "127.0.0.1:0"}

#: Tests that need a cluster; the others also run without the extra.
needs_dask = pytest.mark.skipif(
    distributed is None, reason="Dask's distributed is not installed (pip install '.[dask]')"
)
#: A test that starts a Dask cluster (processes, ports) or uses the module's: never beside
#: another test.
serial = pytest.mark.serial


def linear_file(path: Path, rows: int, seed: int, features: int = 5) -> Path:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, features))
    w = rng.normal(size=features)
    y = np.where(X @ w + 0.3 * rng.normal(size=rows) > 0, 1.0, -1.0)
    write_libsvm(str(path), y, sp.csr_matrix(X))
    return path


@pytest.fixture(scope="module")
def dask_cluster() -> Iterator[tuple[str, Any]]:
    """Two single-threaded worker processes (not threads), and a client of them for the tests."""
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            scheduler_kwargs=NO_HTTP_PORT,
            silence_logs=40,
        ) as c,
        distributed.Client(c, set_as_default=False) as client,
    ):
        yield c.scheduler_address, client


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real data, a train/test pair (the test file compressed), a broken file, non-data."""
    d = tmp_path_factory.mktemp("cluster-sets")
    for name in ("heart_scale", "fourclass"):
        (d / name).write_bytes((DATASETS / name).read_bytes())
    linear_file(d / "lin1500", 1500, seed=7)
    linear_file(d / "pair", 300, seed=8)
    pair_test = linear_file(d / "pair.t", 200, seed=9)
    os.system(f"gzip -q {pair_test}")
    (d / "broken").write_text("1 1:0.5 2:0.25\n-1 1:-0.5 2:0.1\n1 1:0.3 2:zebra\n")
    (d / "README.md").write_text("# data\n")
    return d


def by_name(lines: list[dict[str, Any]]) -> dict[str, Any]:
    return {x["name"]: without_timing(x) for x in lines}


def assert_all_end(started: set[int], seconds: float = 300.0) -> None:
    """Every process in ``started`` ends within ``seconds`` (workers may take a moment)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in started):
        time.sleep(0.2)
    assert not [p for p in started if alive(p)]


@pytest.fixture(scope="module")
def local_lines(data_dir: Path) -> dict[str, Any]:
    """The local run's lines, with paths relative to the data's parent as given."""
    cwd = os.getcwd()
    os.chdir(data_dir.parent)
    try:
        found = discover([data_dir.name])
        result = run_batch(found.datasets, CheckConfig(train="", **FAST), skipped=found.skipped)
    finally:
        os.chdir(cwd)
    return by_name(result.lines)


# --- the address, the extra, the options -----------------------------------------------------


@pytest.mark.parametrize(
    "text, address, workers",
    [
        ("tcp://10.0.0.5:8786", "tcp://10.0.0.5:8786", None),
        ("tls://sched.example.org:8786", "tls://sched.example.org:8786", None),
        ("tcp://[::1]:8786", "tcp://[::1]:8786", None),
        ("local:3", None, 3),
    ],
)
def test_scheduler_addresses(text: str, address: str | None, workers: int | None) -> None:
    s = cluster.parse_scheduler(text)
    assert (s.address, s.local_workers) == (address, workers)


@pytest.mark.parametrize("text", ["local:0", "local:", "8786", "http://host:8786", "tcp://", ""])
def test_bad_scheduler_addresses(text: str) -> None:
    with pytest.raises(KcheckError, match="--scheduler"):
        cluster.parse_scheduler(text)


def run_main(*args: str) -> int:
    from kcheck.cli.app import main

    try:
        main(list(args))
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def test_without_the_extra_scheduler_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed fails
    heart = str(DATASETS / "heart_scale")
    for args in (
        ["batch", heart, "--scheduler", "local:2"],
        ["verify", heart, "--scheduler", "local:2"],
    ):
        assert run_main(*args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            "kcheck: error: --scheduler needs Dask's distributed, which is not "
            "installed: pip install 'kcheck[dask]'"
        ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["batch", "-j", "2", "--scheduler", "local:2"], "--scheduler replaces -j"),
        (["verify", "-j", "2", "--scheduler", "local:2"], "--scheduler replaces -j"),
        (["batch", "--scheduler", "udp://x:1"], "expected a scheduler address"),
        (["batch", "--no-shared-fs"], "go with --scheduler"),
        (["batch", "--scheduler", "local:2", "--time-limit", "5"], "--time-limit cannot"),
    ],
)
def test_option_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(*args[:1], str(DATASETS / "heart_scale"), *args[1:]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@needs_dask
def test_an_unreachable_scheduler_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(cluster, "CONNECT_SECONDS", 1.0)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "out.jsonl"
    address = f"tcp://127.0.0.1:{port}"
    heart = str(DATASETS / "heart_scale")
    assert run_main("batch", heart, "--scheduler", address, "-o", str(out)) == 2
    err = without_stage_lines(capsys.readouterr().err)  # a log says it is connecting
    assert len(err) == 1 and "cannot reach the scheduler" in err[0], err
    assert not list(tmp_path.iterdir())  # no output, no partial file, no lock


class Listener:
    """Something on a TCP port that is not a Dask scheduler: ``silent`` accepts and says
    nothing, ``http`` is Python's HTTP server (it waits for a request line), ``400`` answers
    every connection with an HTTP error at once."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.server: Any = None
        if kind == "http":
            self.sock.close()
            self.server = http.server.HTTPServer(("127.0.0.1", self.port), _Quiet)
            threading.Thread(target=self.server.serve_forever, daemon=True).start()
        else:
            self.sock.listen()
            if kind == "400":
                threading.Thread(target=self._answer, daemon=True).start()

    def _answer(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                with conn:
                    conn.sendall(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        self.sock.close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


SILENT = "it accepted the connection and said nothing for {seconds}s; a scheduler greets at once"


@needs_dask
@pytest.mark.parametrize(
    "kind, found",
    [
        ("silent", SILENT.format(seconds=1)),
        ("http", SILENT.format(seconds=1)),
        ("400", "it answered 'HTTP/1.0 400 Bad Request'"),
    ],
)
@pytest.mark.parametrize("command", ["batch", "verify"])
def test_what_is_not_a_scheduler_is_said_in_one_line(
    kind: str,
    found: str,
    command: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """A listener that says nothing (or an HTTP server, waiting for a request) hung batch and
    verify for good, under a message that promised 10 s; an HTTP error reply was read as a
    Dask frame of 3 EiB and said "out of memory". Now: what is there, within the time."""
    monkeypatch.setattr(cluster, "CONNECT_SECONDS", 1.0)
    listener = Listener(kind)
    try:
        out = tmp_path / "out"
        args = [command, str(DATASETS / "heart_scale"), "--scheduler", listener.address]
        assert run_main(*args, "-o", str(out)) == 2
    finally:
        listener.close()
    err = without_stage_lines(capsys.readouterr().err)  # a log says it is connecting
    assert err == [
        f"kcheck: error: --scheduler {listener.address}: not a Dask scheduler at "
        f"127.0.0.1:{listener.port} ({found})"
    ]
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.timing
@needs_dask
def test_a_silent_listener_ends_the_run_after_the_promised_time(tmp_path: Path) -> None:
    """The reproduction as a user meets it, in a process: exit 2 and one line, once the
    10 s that the message names have passed (the ceiling is for a busy machine only)."""
    listener = Listener("silent")
    try:
        r = run_kcheck(
            ["batch", str(DATASETS / "heart_scale"), "--scheduler", listener.address, "-q"],
            timeout=300,
        )
    finally:
        listener.close()
    assert r.code == 2, r.describe()
    assert r.stderr.splitlines() == [
        f"kcheck: error: --scheduler {listener.address}: not a Dask scheduler at "
        f"127.0.0.1:{listener.port} ({SILENT.format(seconds=10)})"
    ], r.describe()


CORES = os.cpu_count() or 1


@pytest.mark.parametrize(
    "workers, memory, refused",
    [
        (CORES, 64 * 2**30, None),
        (CORES + 1, 64 * 2**30, rf"has {CORES} cores?; start at most local:{CORES}$"),
        (1, cluster.LOCAL_WORKER_BYTES, None),
        (2, cluster.LOCAL_WORKER_BYTES, "over the memory limit of .*; start at most local:1$"),
        (1, cluster.LOCAL_WORKER_BYTES - 1, "over the memory limit of .*; raise --memory-limit$"),
    ],
)
def test_local_workers_are_bounded_by_the_cores_and_memory(
    workers: int, memory: int, refused: str | None
) -> None:
    """``local:99999999`` set up every worker's spec before it failed (13 GB): N is refused
    at once beyond the cores, or beyond what the memory limit holds, with the bound."""
    scheduler = cluster.parse_scheduler(f"local:{workers}")
    if workers > CORES and refused is None or (workers == 2 and CORES < 2):
        pytest.skip("needs a machine of two cores or more")
    if refused is None:
        cluster.check_local(scheduler, memory)
    else:
        with pytest.raises(KcheckError, match=refused):
            cluster.check_local(scheduler, memory)


@pytest.mark.parametrize("command", ["batch", "verify"])
def test_a_huge_local_cluster_is_refused_in_a_small_address_space(command: str) -> None:
    """In a process that may not take 1 GB more than it needs, exit 2 with one line."""
    r = run_kcheck(
        [command, str(DATASETS / "heart_scale"), "--scheduler", "local:99999999"],
        address_space=3 * 2**30,
        timeout=300,
    )
    assert r.code == 2, r.describe()
    cores = os.cpu_count() or 1
    assert r.stderr.splitlines() == [
        f"kcheck: error: --scheduler local:99999999: this machine has {cores} "
        f"core{'s' if cores != 1 else ''}; start at most local:{cores}"
    ], r.describe()


def test_batch_bounds_local_workers_by_its_memory_limit() -> None:
    """batch's --memory-limit reaches the bound: local:2 in 300 MB is refused with the count
    that fits, before any worker starts."""
    if CORES < 2:
        pytest.skip("needs a machine of two cores or more")
    r = run_kcheck(
        ["batch", str(DATASETS / "heart_scale"), "--scheduler", "local:2"]
        + ["--memory-limit", "300M", "-q"],
        timeout=300,
    )
    assert r.code == 2, r.describe()
    (line,) = r.stderr.splitlines()
    assert "over the memory limit of 300.0 MiB; start at most local:1" in line, r.describe()


@pytest.mark.slow
def test_the_core_runs_without_dask() -> None:
    """``pip install kcheck`` has no Dask: every module imports and a check runs without it."""
    code = (
        "import sys; sys.modules['distributed'] = sys.modules['dask'] = None\n"
        "import pkgutil, importlib, kcheck\n"
        "for m in pkgutil.walk_packages(kcheck.__path__, 'kcheck.'):\n"
        "    importlib.import_module(m.name)\n"
        "from kcheck.cli.app import main\n"
        "main(['check', 'datasets/heart_scale', '--json', '-q', '--exact', 'never'])\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert r.returncode == 0, r.stderr
    assert '"verdict"' in r.stdout
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith(("dask", "distributed")) for d in project["dependencies"])
    extras = project["optional-dependencies"]
    assert any(d.startswith("distributed") for d in extras["dask"])
    assert any(d.startswith("distributed") for d in extras["test"])  # the README's test command


def test_each_check_gets_this_machines_memory_budget() -> None:
    """Never a worker's own free memory: --memory-limit (or this machine's default), divided
    between local:N's workers as -j N divides it; one job each."""
    from kcheck.memory import default_memory_limit

    template = CheckConfig(train="", jobs=8, memory_limit=8 * 2**30)
    remote = batch.cluster_config(template, cluster.parse_scheduler("tcp://h:8786"))
    assert (remote.jobs, remote.memory_limit) == (1, 8 * 2**30)
    local = batch.cluster_config(template, cluster.parse_scheduler("local:4"))
    assert (local.jobs, local.memory_limit) == (1, 2 * 2**30)
    default = batch.cluster_config(CheckConfig(train=""), cluster.parse_scheduler("tcp://h:1"))
    assert default.memory_limit == default_memory_limit()


@pytest.mark.slow
@serial
@needs_dask
def test_workers_must_have_one_thread_and_this_version(
    dask_cluster: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    with (
        distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=False,
            protocol="tcp://",
            dashboard_address=None,
            scheduler_kwargs=NO_HTTP_PORT,
        ) as threaded,
        pytest.raises(KcheckError, match="has 2 threads.*--nthreads 1"),
    ):
        cluster.Session(threaded.scheduler_address)
    monkeypatch.setattr(cluster, "__version__", "0.0.1")
    with pytest.raises(KcheckError, match="runs kcheck .*, this is 0.0.1"):
        cluster.Session(dask_cluster[0])


# --- the same results -------------------------------------------------------------------------


@serial
@needs_dask
# None: kcheck finds that the workers see the files as this process does, and sends paths as
# True does (test_batch_shared_fs_is_detected_on_a_worker asserts what None finds).
@pytest.mark.parametrize("shared_fs", [None, False])
def test_batch_lines_are_those_of_a_local_run(
    dask_cluster: tuple[str, Any],
    data_dir: Path,
    local_lines: dict[str, Any],
    shared_fs: bool | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Relative paths, a test file, a broken file and a skipped one; by path or by bytes."""
    address, _ = dask_cluster
    monkeypatch.chdir(data_dir.parent)
    found = discover([data_dir.name])
    seen: list[str] = []
    result = run_batch(
        found.datasets,
        CheckConfig(train="", **FAST),
        skipped=found.skipped,
        scheduler=address,
        shared_fs=shared_fs,
        progress=lambda event: seen.append(event.text),
    )
    got = by_name(result.lines)
    assert got == local_lines
    assert got["broken"]["status"] == "error" and "zebra" in got["broken"]["error"]
    assert got["pair"]["test"]["path"] == f"{data_dir.name}/pair.t.gz"
    assert any("; checking " in s for s in seen) and seen[-1] == "done"


@serial
@needs_dask
def test_batch_shared_fs_is_detected_on_a_worker(
    dask_cluster: tuple[str, Any], data_dir: Path, tmp_path: Path
) -> None:
    """Files the workers see alike go by path; a file that differs there goes by its bytes."""
    address, _ = dask_cluster
    sets = discover([str(data_dir)]).datasets
    with cluster.Session(address) as session:
        assert batch._by_path(sets, session, None) == [True] * len(sets)
        assert batch._by_path(sets, session, False) == [False] * len(sets)
        path, size, mtime = cluster.shared_path(sets[0].train) or ("", 0, 0)
        assert session.probe(cluster.same_files, [(path, size + 1, mtime)]) == [False]
        assert session.probe(cluster.same_files, [(path, size, mtime + 5)]) == [False]
    unseen = DataSet("x", "/nonexistent-on-every-worker/x")
    facts = [("/nonexistent-on-every-worker/x", 10, 0)]
    with cluster.Session(address) as session:
        assert session.probe(cluster.same_files, facts) == [False]
        assert batch._by_path([unseen], session, None) == [True]  # unreadable here: by path


@pytest.mark.slow
@serial
@needs_dask
def test_resume_and_exit_codes_are_those_of_a_local_run(
    dask_cluster: tuple[str, Any], data_dir: Path, tmp_path: Path
) -> None:
    """The CLI on a cluster: exit 3 for the broken file; --resume reuses the saved lines and
    checks on the cluster only the data set whose file changed."""
    address, _ = dask_cluster
    d = tmp_path / "sets"
    d.mkdir()
    for name in ("heart_scale", "fourclass", "broken"):
        (d / name).write_bytes((data_dir / name).read_bytes())
    out = tmp_path / "out.jsonl"
    args = ["batch", str(d), "-o", str(out), "-q", *FAST_ARGS]
    assert run_main(*args, "--scheduler", address) == 3
    first = by_name([json.loads(x) for x in out.read_text().splitlines()])
    assert sorted(first) == ["broken", "fourclass", "heart_scale"]
    (d / "fourclass").write_bytes((data_dir / "lin1500").read_bytes())
    (d / "broken").unlink()
    found = discover([str(d)])
    result = run_batch(
        found.datasets,
        CheckConfig(train="", **FAST),
        output=str(out),
        resume=True,
        scheduler=address,
    )
    assert result.resumed == {"heart_scale"} and result.stale == {"fourclass"}
    assert by_name(result.lines)["heart_scale"] == first["heart_scale"]
    local = run_batch(
        [ds for ds in found.datasets if ds.name == "fourclass"], CheckConfig(train="", **FAST)
    )
    assert by_name(result.lines)["fourclass"] == by_name(local.lines)["fourclass"]


@pytest.mark.slow
@serial
@needs_dask
def test_the_readme_commands_start_a_cluster_kcheck_runs_on(tmp_path: Path) -> None:
    """``dask scheduler`` and ``dask worker --nthreads 1`` as the README has them."""
    dask = Path(sys.executable).parent / "dask"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    logs = open(tmp_path / "dask.log", "w")  # noqa: SIM115 - closed below
    procs = [
        subprocess.Popen(
            [str(dask), "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
            stdout=logs,
            stderr=logs,
        )
    ]
    started: set[int] = set()
    try:
        deadline = time.monotonic() + 600
        while True:  # kcheck gives a scheduler CONNECT_SECONDS; this one may be slow to start
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "dask.log").read_text()
                time.sleep(0.2)
        procs.append(
            subprocess.Popen(
                [
                    str(dask),
                    "worker",
                    address,
                    "--nthreads",
                    "1",
                    "--nworkers",
                    "2",
                    "--no-dashboard",
                ],
                stdout=logs,
                stderr=logs,
            )
        )
        out = tmp_path / "out.jsonl"
        heart = str(DATASETS / "heart_scale")
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "kcheck",
                "batch",
                heart,
                "--scheduler",
                address,
                "-o",
                str(out),
                "-q",
                *FAST_ARGS,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, r.stderr
        (line,) = [json.loads(x) for x in out.read_text().splitlines()]
        assert line["status"] == "ok" and line["data"]["path"] == heart
        started = set().union(*(descendants(p.pid) for p in procs))
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        logs.close()
    assert_all_end(started, 30.0)


@pytest.mark.slow
@serial
@needs_dask
def test_verify_is_that_of_a_local_run(dask_cluster: tuple[str, Any]) -> None:
    address, client = dask_cluster
    config = VerifyConfig(train=str(DATASETS / "heart_scale"), jobs=1)
    here = verify(config)
    there = verify(VerifyConfig(train=config.train, scheduler=address))
    assert without_timing(there) == without_timing(here)
    # One task per grid point, and none left behind.
    assert there["rbf"]["grid_points"] == 110
    assert not client.run_on_scheduler(_kcheck_tasks)


@pytest.mark.slow
@serial
@needs_dask
def test_grid_scores_are_those_of_local_processes(
    dask_cluster: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every point's CV count, not only the best: the folds come from the same seeds. The
    scaled rows are sent to the cluster once."""
    address, _ = dask_cluster
    from kcheck.prepare import prepare

    data = prepare(str(DATASETS / "heart_scale"), scaling="minmax", memory_limit=2**30)
    local = rbf_grid_search(data.X, data.y, seed=3, jobs=2)
    sent: list[Any] = []
    scatter = cluster.Session.scatter
    monkeypatch.setattr(
        cluster.Session, "scatter", lambda self, x: sent.append(x) or scatter(self, x)
    )
    remote = rbf_grid_search(data.X, data.y, seed=3, scheduler=address)
    assert len(sent) == 1
    assert remote.scores == local.scores and len(remote.scores) == 110
    # With a refinement (a second round of tasks), as the kernel model export runs it.
    refined = rbf_grid_search(data.X, data.y, EXPORT_GRID, seed=3, scheduler=address)
    assert refined.scores == rbf_grid_search(data.X, data.y, EXPORT_GRID, seed=3).scores
    assert (remote.log2_C, remote.log2_gamma) == (local.log2_C, local.log2_gamma)
    # Class weights (--metric balanced) reach the workers' problems, and points are ranked
    # by balanced accuracy there as here.
    weight = ((-1.0, 0.9), (1.0, 1.125))
    here = rbf_grid_search(data.X, data.y, seed=3, class_weight=weight, balanced=True)
    there = rbf_grid_search(
        data.X, data.y, seed=3, scheduler=address, class_weight=weight, balanced=True
    )
    assert there.scores == here.scores and here.scores != local.scores
    assert all(0 < v <= 1 for v in here.scores.values())


def _kcheck_tasks(dask_scheduler: Any) -> list[str]:
    return [str(k) for k in dask_scheduler.tasks if str(k).startswith("kcheck-")]


# --- faults -----------------------------------------------------------------------------------


@pytest.mark.slow
@serial
@needs_dask
def test_a_killed_worker_loses_no_line(dask_cluster: tuple[str, Any], tmp_path: Path) -> None:
    address, client = dask_cluster
    d = tmp_path / "many"
    d.mkdir()
    for i in range(6):
        linear_file(d / f"set{i}", 1500, seed=20 + i)
    found = discover([str(d)])
    template = CheckConfig(train="", **FAST)
    local = by_name(run_batch(found.datasets, template).lines)
    with cluster.Session(address) as session:
        gen = batch._run_cluster(found.datasets, template, session, batch._noop, None, die_once)
        lines = by_name(list(gen))
    assert (d / ".died").read_text() == "set3\n", "the worker running set3 did not die once"
    batch_keys = ("options", "resume_key")  # run_batch adds these around each task's line
    expected = {n: {k: v for k, v in x.items() if k not in batch_keys} for n, x in local.items()}
    assert lines == expected
    client.wait_for_workers(2, timeout=600)  # the nanny restarts it, for the next tests


def die_once(ds: DataSet, config: CheckConfig) -> dict[str, Any]:
    """The real check, except that the worker running set3 dies mid-task (as under the OOM
    killer) the first time; the marker file makes it deterministic, unlike killing from outside."""
    marker = Path(ds.train).parent / ".died"  # hidden: not a data set
    if ds.name == "set3" and not marker.exists():
        marker.write_text("set3\n")
        os._exit(9)
    return batch.check_one(ds, config)


def crash_on_broken(ds: DataSet, config: CheckConfig) -> dict[str, Any]:
    """A check whose worker dies on one data set (as under the OOM killer), counting its tries."""
    if ds.name == "broken":
        with open(Path(ds.train).parent / ".tries", "a") as f:
            f.write("x\n")
        os._exit(9)
    return {"name": ds.name, "status": "ok", "error": None, "seconds": 0.0}


@pytest.mark.timing
@serial
@needs_dask
def test_a_data_set_that_kills_workers_is_an_error_after_three_tries(
    dask_cluster: tuple[str, Any], data_dir: Path, tmp_path: Path
) -> None:
    address, client = dask_cluster
    for name in ("heart_scale", "fourclass", "broken"):
        (tmp_path / name).write_bytes((data_dir / name).read_bytes())
    tries = tmp_path / ".tries"  # hidden: not a data set
    sets = discover([str(tmp_path)]).datasets
    config = CheckConfig(train="")
    with cluster.Session(address) as session:
        gen = batch._run_cluster(sets, config, session, batch._noop, None, crash_on_broken)
        lines = {x["name"]: x for x in gen}
    assert sorted(lines) == sorted(ds.name for ds in sets)
    assert lines["broken"]["status"] == "error"
    assert "died each of the 3 times" in lines["broken"]["error"]
    assert all(x["status"] == "ok" for n, x in lines.items() if n != "broken")
    assert tries.read_text().count("x") == 3
    client.wait_for_workers(2, timeout=600)


# --- Ctrl-C -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slow_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Data sets that take a few seconds each, so that an interrupt lands mid-batch."""
    d = tmp_path_factory.mktemp("cluster-slow")
    (d / "a_quick").write_bytes((DATASETS / "heart_scale").read_bytes())
    for i in range(4):
        linear_file(d / f"b_slow{i}", 5000, seed=30 + i, features=20)
    return d


def interrupt_after_first_line(args: list[str], out: Path) -> tuple[int, str, set[int]]:
    """Run kcheck in its own process group, send the group SIGINT (as a terminal's Ctrl-C
    does) once a line is written; the exit code, stderr, and every process it started."""
    started: set[int] = set()
    partial = Path(f"{out}.partial")

    def ctrl_c_after_a_line(proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            started.update(descendants(proc.pid))
            if partial.exists() and partial.read_text().count("\n") >= 1:
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the batch ended before it could be interrupted"
        started.update(descendants(proc.pid))
        os.killpg(proc.pid, signal.SIGINT)

    r = run_kcheck(args, cwd=ROOT, timeout=600, during=ctrl_c_after_a_line)
    return r.code, r.stderr, started


@pytest.mark.slow
@pytest.mark.timing
@serial
@needs_dask
def test_ctrl_c_with_a_local_cluster_leaves_no_process(slow_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    code, err, started = interrupt_after_first_line(
        ["batch", str(slow_dir), "--scheduler", "local:2", "-o", str(out), "-q", *FAST_ARGS], out
    )
    assert code == 130, err
    assert err.strip().splitlines() == ["kcheck: interrupted"], err
    assert started, "the local cluster started no process"
    assert_all_end(started)
    assert not out.exists()  # the lines done stay in out.jsonl.partial for --resume
    assert Path(f"{out}.partial").read_text().count("\n") >= 1


@pytest.mark.slow
@pytest.mark.timing
@serial
@needs_dask
def test_ctrl_c_while_the_local_cluster_starts(slow_dir: Path, tmp_path: Path) -> None:
    """Ctrl-C in the first seconds of ``--scheduler local:2``, as its workers start (once
    kcheck has started 1, 2 or 3 processes: the resource tracker, then each worker), for batch
    and verify. It was ignored (SIGINT was SIG_IGN for the whole process while Dask started
    them) and the run went on to its end and exit 0. Now: exit 130, the one line (no worker's
    traceback, no leaked semaphore), and no process left. Both commands start the cluster
    through the same code: batch is stopped at each of the three moments, verify at one."""
    for command, processes in (("batch", 1), ("batch", 2), ("batch", 3), ("verify", 2)):
        what = f"{command}, after {processes} processes started"
        out = tmp_path / f"{command}{processes}.out"
        data = str(slow_dir) if command == "batch" else str(DATASETS / "svmguide1")
        args = [command, data, "--scheduler", "local:2", "-o", str(out), "-q"]
        if command == "batch":
            args += FAST_ARGS
        code, err, started = ctrl_c_once_started(args, processes, tmp_path)
        assert code == 130, f"{what}: {err}"
        assert err == "kcheck: interrupted\n", what
        assert_all_end(started)
        assert not out.exists(), what


def ctrl_c_once_started(args: list[str], processes: int, cwd: Path) -> tuple[int, str, set[int]]:
    """Start kcheck in its own process group, send the group SIGINT once it has started
    ``processes`` processes; the exit code, stderr, and every process it started."""
    proc = start_kcheck(args, cwd=cwd)
    started: set[int] = set()

    def starting() -> bool:
        started.update(descendants(proc.pid))
        return len(started) >= processes

    try:
        wait_for(lambda: proc.poll() is not None or starting(), "processes to start")
        assert proc.poll() is None, "kcheck ended before the cluster started"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, err.decode("utf-8", "replace"), started


LATE_CLIENT_SCRIPT = """
import pathlib, socket, sys, time
import distributed
from kcheck.parallel.cluster import Session

def late_client(marker):
    pathlib.Path(marker).touch()
    time.sleep(1.5)
    return distributed.get_client().get_metadata(["x"], default=0)

if __name__ == "__main__":
    here = pathlib.Path(sys.argv[1])
    held = socket.socket()
    try:  # Dask's well-known port, as another cluster on this machine would hold it
        held.bind(("127.0.0.1", 8787))
        held.listen()
    except OSError:
        pass  # something holds it already
    s = Session("local:2")
    http = s._cluster.scheduler.http_server
    print(http.address, http.port != 8787)
    s._client.wait_for_workers(2, timeout=600)
    futures = [s._client.submit(late_client, str(here / f"m{i}"), pure=False) for i in range(2)]
    deadline = time.monotonic() + 600
    while len(list(here.glob("m*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    print(len(list(here.glob("m*"))))
    s.close()
"""


@pytest.mark.slow
@pytest.mark.timing
@serial
@needs_dask
def test_a_task_that_asks_for_its_client_as_the_local_cluster_closes_prints_nothing(
    tmp_path: Path,
) -> None:
    """The worker processes of local:N share the user's stderr. A task asking for its worker's
    client while the cluster closes (as after a Ctrl-C) got a client whose ``__del__`` printed
    "Exception ignored ... IOLoop is closed" under "kcheck: interrupted" (CI, once in 1,400).
    And the cluster's scheduler took Dask's port 8787, warning where another cluster held it."""
    script = tmp_path / "late_client.py"
    script.write_text(LATE_CLIENT_SCRIPT)
    r = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    # The scheduler's HTTP server: this host only, not on the port another cluster holds.
    assert r.stdout.split()[:2] == ["127.0.0.1", "True"], r.stdout
    assert r.stdout.split()[2:] == ["2"], r.stdout  # both tasks were running when it closed
    assert r.stderr == "", r.stderr  # no port warning, no closed client's traceback


@needs_dask
def test_a_workers_other_unraisable_errors_still_print() -> None:
    seen: list[Any] = []
    hook = cluster._without_closed_client_errors(seen.append)
    Client = distributed.Client

    class Other:
        def __del__(self) -> None: ...

    def args(obj: Any, exc: BaseException) -> Any:
        return type("Args", (), {"object": obj, "exc_value": exc})()

    hook(args(Client.__del__, RuntimeError("IOLoop is closed")))
    assert seen == []
    for a in (args(Client.__del__, ValueError("x")), args(Other.__del__, RuntimeError("y"))):
        hook(a)
    assert len(seen) == 2


@pytest.mark.slow
@pytest.mark.timing
@serial
@needs_dask
def test_ctrl_c_in_verify_ends_the_local_cluster(tmp_path: Path) -> None:
    """The grid runs in a thread; Ctrl-C in the main thread cancels it and ends the workers.
    SIGINT is sent every 2 s until kcheck exits, as a user would press Ctrl-C again: a second
    one while the first is being handled changes nothing."""
    started: set[int] = set()

    def ctrl_c_until_it_ends(proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and len(started) < 3:  # the workers are up
            started.update(descendants(proc.pid))
            time.sleep(0.1)
        while proc.poll() is None and time.monotonic() < deadline:
            started.update(descendants(proc.pid))
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(2)

    args = ["verify", "datasets/svmguide1", "--scheduler", "local:2"]
    r = run_kcheck(args, cwd=ROOT, timeout=600, during=ctrl_c_until_it_ends)
    assert r.code == 130, r.stderr
    assert r.stderr.strip().splitlines() == ["kcheck: interrupted"], r.stderr
    assert_all_end(started)


@pytest.mark.slow
@pytest.mark.timing
@serial
@needs_dask
def test_ctrl_c_on_a_shared_cluster_cancels_its_tasks(
    dask_cluster: tuple[str, Any], slow_dir: Path, tmp_path: Path
) -> None:
    """The cluster stays up; the run's queued tasks are cancelled and a running one is
    dropped when it finishes, so that the cluster ends up with no task of the run."""
    address, client = dask_cluster
    out = tmp_path / "out.jsonl"
    code, err, _ = interrupt_after_first_line(
        ["batch", str(slow_dir), "--scheduler", address, "-o", str(out), "-q", *FAST_ARGS], out
    )
    assert code == 130, err
    assert err.strip().splitlines() == ["kcheck: interrupted"], err
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and (
        client.run_on_scheduler(_kcheck_tasks) or any(client.processing().values())
    ):
        time.sleep(0.2)
    assert not client.run_on_scheduler(_kcheck_tasks)
    assert not any(client.processing().values())
    assert len(client.nthreads()) == 2  # no worker was harmed


@pytest.mark.parametrize("cancelled", ["asyncio", "concurrent"])
def test_a_task_the_scheduler_dropped_is_one_line_that_says_so(cancelled: str) -> None:
    """Dask's futures raise asyncio's CancelledError (or concurrent.futures') when the
    scheduler drops a task; asyncio is imported only once a session has one, not by a check
    without a cluster."""
    import asyncio
    import concurrent.futures

    error = asyncio.CancelledError if cancelled == "asyncio" else concurrent.futures.CancelledError

    class Dropped:
        def done(self) -> bool:
            return True

        def result(self) -> None:
            raise error()

    session = cluster.Session.__new__(cluster.Session)
    session._done = threading.Event()
    session._killed = type("KilledWorker", (Exception,), {})
    session.scheduler = cluster.parse_scheduler("tcp://127.0.0.1:8786")
    with pytest.raises(KcheckError, match="the cluster dropped the run's tasks"):
        session.finished({Dropped(): 0}, timeout=0.0)


def test_a_check_without_a_cluster_does_not_import_asyncio() -> None:
    """asyncio (60 ms of every start) is for Dask sessions only."""
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, kcheck.cli, kcheck.pipeline; print('asyncio' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.stdout.strip() == "False", r.stdout + r.stderr
