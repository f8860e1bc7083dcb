"""Signals at the edges: Ctrl-C (SIGINT) and SIGTERM from kcheck's first instruction to its last.

Whenever a signal lands, a run ends with the one line "kcheck: interrupted" and exit 130 (143
for SIGTERM), or, once every output is committed, with its normal exit. Outputs that belong
together (``scale -o FILE -s RANGE``; a model with its range and terms files) are committed
together or not at all, and no temporary file survives.

The fast tests put a signal where it once went wrong, deterministically: while the command line
is imported, inside a finaliser, between the renames of a pair, as the interpreter ends. The
sweeps (slow tier) send SIGINT to the process group, as a terminal's Ctrl-C does, at moments
drawn with a seeded generator across whole runs. They assert only what holds at any moment,
so they run beside other tests (not ``serial``): a busier machine moves the moments, each
drawn over a reference run timed just before, not what a run must leave behind.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from runner import alive, catches, descendants, start_kcheck, wait_for

ROOT = Path(__file__).resolve().parent.parent
DATASETS = ROOT / "datasets"
HEART = str(DATASETS / "heart_scale")
FOURCLASS = str(DATASETS / "fourclass")
OLD = b"old content\n"
INTERRUPTED = "kcheck: interrupted\n"


@dataclass
class Ended:
    code: int
    stderr: str
    children: set[int]

    def describe(self) -> str:
        return f"exit {self.code}\nstderr: {self.stderr[-3000:]}"


def run_until(
    proc: subprocess.Popen[bytes], ready: Callable[[], bool], sig: int, *, after: float = 0.0
) -> Ended:
    """Wait for ``ready()`` (a state of the run, never a time), then ``after`` seconds more, then
    send ``sig`` to the process group; return how the run ended. The signal is not sent if the
    run has ended by then."""
    children: set[int] = set()
    try:
        wait_for(lambda: proc.poll() is not None or ready(), "the moment to send the signal")
        deadline = time.monotonic() + after
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(min(0.002, max(0.0, deadline - time.monotonic())))
        if proc.poll() is None:
            children |= descendants(proc.pid)
            os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wait_for(lambda: not any(alive(p) for p in children), "the processes kcheck started to end")
    return Ended(proc.returncode, err.decode("utf-8", "replace"), children)


#: How each entry point starts kcheck: the ``kcheck`` command (``[project.scripts]``) imports
#: kcheck.__main__ and calls its main; ``python -m kcheck`` runs that module as __main__.
START = {
    "kcheck": "from kcheck.__main__ import main\nmain()\n",
    "python -m kcheck": "import runpy\nrunpy.run_module('kcheck', run_name='__main__')\n",
}


def driver(
    body: str, args: list[str], tmp_path: Path, entry: str = "kcheck"
) -> subprocess.Popen[bytes]:
    """Start Python on ``body`` (which sets a stage for the signal), then kcheck's own entry
    point ``entry`` on ``args``, in a process group of its own."""
    script = tmp_path / "driver.py"
    script.write_text(
        "import os, signal, sys, time\n"
        f"MARK = {str(tmp_path / 'mark')!r}\n"
        f"{body}\n"
        f"sys.argv = ['kcheck', *{args!r}]\n"
        f"{START[entry]}"
    )
    return start_kcheck([], command=[sys.executable, str(script)], cwd=ROOT)


def marked(tmp_path: Path) -> Callable[[], bool]:
    return lambda: (tmp_path / "mark").exists()


# --- while the command line is imported ----------------------------------------------------------

SLOW_IMPORT = """
import importlib.abc
class SlowClick(importlib.abc.MetaPathFinder):
    '''Holds the import of click (the command line's first) until the signal comes.'''
    def find_spec(self, name, path, target=None):
        if name == "click":
            sys.meta_path.remove(self)
            open(MARK, "w").close()
            time.sleep(600)
        return None
sys.meta_path.insert(0, SlowClick())
"""


@pytest.mark.timing
@pytest.mark.parametrize("entry", list(START))
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_the_command_line_is_imported(
    entry: str, sig: int, code: int, tmp_path: Path
) -> None:
    """Before main() installs its handlers the process had Python's: a KeyboardInterrupt
    traceback (exit 1 or -2), or SIGTERM's plain death. The entry point handles both first."""
    out = tmp_path / "v.json"
    proc = driver(SLOW_IMPORT, ["check", HEART, "-q", "-o", str(out)], tmp_path, entry)
    ended = run_until(proc, marked(tmp_path), sig)
    assert ended.code == code, ended.describe()
    assert ended.stderr == INTERRUPTED, ended.describe()
    assert not out.exists()


ENTRIES = {
    "python -m kcheck": [sys.executable, "-m", "kcheck"],
    "kcheck": [str(Path(sys.executable).with_name("kcheck"))],
}


@pytest.mark.timing
@pytest.mark.parametrize("entry", list(ENTRIES))
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_as_soon_as_kcheck_handles_it(
    entry: str, sig: int, code: int, tmp_path: Path
) -> None:
    """The real entry points (``[project.scripts]`` and ``python -m``), a signal the moment
    the first thing kcheck does (its start-up handlers) is done: the imports are still to
    come."""
    command = ENTRIES[entry]
    if not Path(command[0]).exists():
        pytest.skip(f"{command[0]} is not installed")
    out = tmp_path / "v.json"
    proc = start_kcheck(["check", HEART, "-q", "-o", str(out)], command=command)
    ended = run_until(proc, lambda: catches(proc.pid, signal.SIGTERM), sig)
    assert ended.code == code, ended.describe()
    assert ended.stderr == INTERRUPTED, ended.describe()
    assert not out.exists()


# --- while a binding loads its C library --------------------------------------------------------


def at_binding_load(action: str) -> str:
    """A stage that does ``action`` as a binding loads its own C library (``clib.*``)."""
    return (
        "import ctypes\n"
        "_load = ctypes.CDLL.__init__\n"
        "def load(self, name, *args, **kwargs):\n"
        "    if os.path.basename(str(name)).startswith('clib.'):\n"
        f"        {action}\n"
        "    _load(self, name, *args, **kwargs)\n"
        "ctypes.CDLL.__init__ = load\n"
    )


def finished(proc: subprocess.Popen[bytes]) -> Ended:
    """How a run that needs no signal from the test ended."""
    _, err = proc.communicate(timeout=600)
    return Ended(proc.returncode, err.decode("utf-8", "replace"), set())


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_a_binding_loads_its_library(sig: int, code: int, tmp_path: Path) -> None:
    """The bindings load their C library inside a bare ``except:`` that then tries any other
    copy: the interrupt was taken for a failed load, and a system LIBLINEAR of another version
    ended the run with a traceback ("undefined symbol: get_decfun_rho")."""
    out = tmp_path / "v.json"
    once = f"os.path.exists(MARK) or (open(MARK, 'w').close(), os.kill(os.getpid(), {int(sig)}))"
    proc = driver(at_binding_load(once), ["check", HEART, "-q", "-o", str(out)], tmp_path)
    ended = finished(proc)
    assert (tmp_path / "mark").exists(), ended.describe()
    assert ended.code == code, ended.describe()
    assert ended.stderr == INTERRUPTED, ended.describe()
    assert not out.exists()


def test_a_binding_whose_library_does_not_load_is_one_line(tmp_path: Path) -> None:
    """Its bare ``except:`` goes on to a system LIBLINEAR (another version: a missing symbol)
    or to none (a plain Exception): a traceback either way."""
    fails = "raise OSError('clib: cannot open shared object file')"
    ended = finished(driver(at_binding_load(fails), ["check", HEART, "-q"], tmp_path))
    assert ended.code == 2, ended.describe()
    assert ended.stderr.startswith("kcheck: error: cannot load liblinear: "), ended.describe()
    assert ended.stderr.count("\n") == 1, ended.describe()


# --- inside a finaliser ------------------------------------------------------------------------

SWALLOWING_FINALISER = """
import kcheck.cli.ui as ui
class Finalised:
    def __del__(self):
        open(MARK, "w").close()
        time.sleep(600)  # the Ctrl-C lands here, in a finaliser of the main thread
_real = ui.in_worker
def in_worker(fn, box):
    Finalised()  # freed at once: its __del__ runs now
    return _real(fn, box)
ui.in_worker = in_worker
"""


WRAPPING_SET_NAME = """
import kcheck.cli.ui as ui
class Field:
    def __set_name__(self, owner, name):
        open(MARK, "w").close()
        time.sleep(600)  # the Ctrl-C lands here, as a lazy import creates a class
_real = ui.in_worker
def in_worker(fn, box):
    type("Record", (), {"field": Field()})
    return _real(fn, box)
ui.in_worker = in_worker
"""


@pytest.mark.timing
@pytest.mark.parametrize(
    "stage", [SWALLOWING_FINALISER, WRAPPING_SET_NAME], ids=["__del__", "__set_name__"]
)
def test_ctrl_c_where_python_turns_it_into_something_else(stage: str, tmp_path: Path) -> None:
    """A KeyboardInterrupt raised in a ``__del__`` cannot propagate: Python reports it to
    sys.unraisablehook, which kcheck quiets once a signal came, and the run went on to its end
    and exit 0, the Ctrl-C lost; now the signal is sent again, outside the finaliser. One
    raised in ``__set_name__`` (a lazy import creating a dataclass) became "RuntimeError:
    Error calling __set_name__", a traceback and exit 1."""
    out = tmp_path / "v.json"
    proc = driver(stage, ["check", HEART, "-q", "-o", str(out)], tmp_path)
    ended = run_until(proc, marked(tmp_path), signal.SIGINT)
    assert ended.code == 130, ended.describe()
    assert ended.stderr == INTERRUPTED, ended.describe()
    assert not out.exists()


# --- between the renames of a pair -------------------------------------------------------------

SIGNAL_AFTER_FIRST_RENAME = """
import kcheck.io.atomic as atomic
_replace = os.replace
_sent = []
def replace(src, dst):
    _replace(src, dst)
    if os.path.dirname(dst) == os.path.dirname(MARK) and not _sent:  # a target, renamed
        _sent.append(dst)
        os.kill(os.getpid(), SIG)  # one file of the pair is in place, the other not yet
atomic.os.replace = replace
"""


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_between_the_renames_of_a_pair_waits_for_the_pair(
    sig: int, code: int, tmp_path: Path
) -> None:
    """``scale -o s.txt -s r.range`` renames both in the main thread. A signal between the two
    renames left a new s.txt beside the old r.range (or the other way round): the signal now
    takes effect once the pair is complete."""
    out, ranges = tmp_path / "s.txt", tmp_path / "r.range"
    out.write_bytes(OLD)
    ranges.write_bytes(OLD)
    body = f"SIG = {int(sig)}\n{SIGNAL_AFTER_FIRST_RENAME}"
    proc = driver(body, ["scale", FOURCLASS, "-o", str(out), "-s", str(ranges)], tmp_path)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == code, err
    assert err.decode() == INTERRUPTED
    assert out.read_bytes() != OLD and ranges.read_bytes() != OLD  # the whole pair
    assert ranges.read_text().startswith("x\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["driver.py", "r.range", "s.txt"]


# --- as the interpreter ends -------------------------------------------------------------------

SIGNAL_AT_EXIT = """
import atexit
def ctrl_c_at_exit():
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)  # time for a handler to run, had the signal one
atexit.register(ctrl_c_at_exit)
"""


def test_ctrl_c_as_the_interpreter_ends_changes_nothing(tmp_path: Path) -> None:
    """Once every output is written the exit is the normal one. A SIGINT during the
    interpreter's own ending raised KeyboardInterrupt in its exit handlers, or (after Python put
    back the default action of handled signals) killed the process with no message."""
    out = tmp_path / "s.txt"
    proc = driver(SIGNAL_AT_EXIT, ["scale", FOURCLASS, "-o", str(out)], tmp_path)
    _, err = proc.communicate(timeout=600)
    assert (proc.returncode, err.decode()) == (0, "")
    assert out.read_bytes().startswith(b"-1 1:")


def test_main_in_process_gives_back_the_callers_signal_handlers() -> None:
    """In-process (tests, scripts), main() leaves the caller's handlers as they were: only the
    ``kcheck`` process itself ignores signals as it ends."""
    from kcheck.cli.app import main

    def mine(signum: int, frame: object) -> None: ...

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, mine)
    try:
        with pytest.raises(SystemExit) as e:
            main(["--version"])
        assert e.value.code == 0
        assert signal.getsignal(signal.SIGINT) is before[0]
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before[1])


# --- sweeps: SIGINT at random moments across whole runs (slow tier) ---------------------------


@dataclass
class Sweep:
    """One command: what it writes, and which of its outputs are committed together."""

    args: Callable[[Path], list[str]]
    outputs: list[str]
    #: Sets of outputs that are committed together: all old or all new.
    together: list[list[str]]


def sweep(variants: list[Sweep], runs: int, seed: int, tmp_path: Path) -> dict[str, int]:
    """``runs`` runs (the variants in turn) over old outputs, each sent SIGINT (to its process
    group) at a moment drawn uniformly over 1.2 times a reference run of the same variant,
    from the moment kcheck handles signals. Checks each run; returns how many ended each way.

    Each run ends with 130 and the one line, or with exit 0, no message and every output new.
    Each output is the old one or the reference run's (the JSON: any whole verdict); a set
    committed together is all old or all new; nothing else is left, in its directory or in
    TMPDIR."""
    rng = random.Random(seed)
    reference: list[tuple[float, dict[str, bytes]]] = []
    for i, command in enumerate(variants):
        d = tmp_path / f"reference{i}"
        d.mkdir()
        t, ended = run_once(command, d, None)
        assert (ended.code, ended.stderr) == (0, ""), ended.describe()
        reference.append((t, {name: (d / name).read_bytes() for name in command.outputs}))
    counts = {"interrupted": 0, "finished": 0}
    for i in range(runs):
        command = variants[i % len(variants)]
        seconds, expected = reference[i % len(variants)]
        d = tmp_path / f"run{i}"
        d.mkdir()
        for name in command.outputs:
            (d / name).write_bytes(OLD)
        _, ended = run_once(command, d, rng.uniform(0.0, 1.2 * seconds))
        what = f"run {i} ({' '.join(command.args(d))}): {ended.describe()}"
        if ended.code == 130:
            assert ended.stderr == INTERRUPTED, what
            counts["interrupted"] += 1
        else:
            assert (ended.code, ended.stderr) == (0, ""), what
            counts["finished"] += 1
        new = {}
        for name in command.outputs:
            data = (d / name).read_bytes()
            new[name] = data != OLD
            if name.endswith(".json") and new[name]:
                assert "verdict" in json.loads(data), what
            elif new[name]:
                assert data == expected[name], f"{what}\n{name} is neither old nor whole"
        if ended.code == 0:
            assert all(new.values()), f"{what}\nexit 0 with old outputs: {new}"
        for group in command.together:
            assert len({new[name] for name in group}) == 1, f"{what}\na mismatched set: {new}"
        assert sorted(p.name for p in d.iterdir()) == sorted([*command.outputs, "tmp"]), what
        assert list((d / "tmp").iterdir()) == [], f"{what}\nleft in TMPDIR"
    assert counts["interrupted"] > 0, counts
    return counts


def run_once(command: Sweep, d: Path, after: float | None) -> tuple[float, Ended]:
    """One run in ``d`` (TMPDIR ``d/tmp``), SIGINT ``after`` seconds from the moment kcheck
    handles signals (None: never); its seconds from that moment, and how it ended."""
    (d / "tmp").mkdir()
    env = dict(os.environ, TMPDIR=str(d / "tmp"))
    proc = start_kcheck(command.args(d), env=env, cwd=d)
    ready: list[float] = []

    def handles() -> bool:
        if catches(proc.pid, signal.SIGTERM):
            ready.append(time.monotonic())
            return True
        return False

    if after is None:
        wait_for(lambda: proc.poll() is not None or handles(), "kcheck to start")
        _, err = proc.communicate(timeout=600)
        ended = Ended(proc.returncode, err.decode("utf-8", "replace"), set())
    else:
        ended = run_until(proc, handles, signal.SIGINT, after=after)
    return time.monotonic() - (ready or [time.monotonic()])[0], ended


def check_args(d: Path, *extra: str) -> list[str]:
    return [
        "check",
        HEART,
        "-q",
        "--exact",
        "never",
        "-o",
        str(d / "v.json"),
        "--model-out",
        str(d / "m"),
        *extra,
    ]


#: ``check -o v.json --model-out m``: a linear model in one process; a kernel model with two
#: jobs; the linear model with product terms (three files committed together).
CHECKS = [
    Sweep(
        args=lambda d: check_args(d, "-j", "1"),
        outputs=["v.json", "m", "m.range"],
        together=[["m", "m.range"]],
    ),
    Sweep(
        args=lambda d: check_args(d, "-j", "2", "--model", "kernel"),
        outputs=["v.json", "m", "m.range"],
        together=[["m", "m.range"]],
    ),
    Sweep(
        args=lambda d: check_args(d, "--explain", "--model", "linear+2"),
        outputs=["v.json", "m", "m.range", "m.terms"],
        together=[["m", "m.range", "m.terms"]],
    ),
]

SCALE = Sweep(
    args=lambda d: ["scale", FOURCLASS, "-o", str(d / "s.txt"), "-s", str(d / "r.range")],
    outputs=["s.txt", "r.range"],
    together=[["s.txt", "r.range"]],
)


@pytest.mark.slow
@pytest.mark.timing
def test_interrupt_sweep_check_with_a_model(tmp_path: Path) -> None:
    """60 runs of ``check -o v.json --model-out m`` over old files, interrupted anywhere from
    the imports to the last rename: 3 of 60 left temporary files, 8 of 60 died by the signal
    with no message after writing everything."""
    print(sweep(CHECKS, 60, seed=38, tmp_path=tmp_path))


@pytest.mark.slow
@pytest.mark.timing
def test_interrupt_sweep_scale_with_a_range_file(tmp_path: Path) -> None:
    """100 runs of ``scale -o s.txt -s r.range`` over an old pair: 1 of 100 left a new range
    file beside the old data, 41 of 100 died by the signal with no message."""
    print(sweep([SCALE], 100, seed=40, tmp_path=tmp_path))
