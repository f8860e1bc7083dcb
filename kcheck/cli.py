"""Command line: thin click commands that build a config, call the core and present the result.

Status goes to stderr (rich), data to stdout (JSON). Exit codes are decided in one place,
:func:`main`: 0 done, 1 a ``--fail-on`` gate tripped, 2 usage error or bad input, 130 SIGINT,
143 SIGTERM. Domain errors (:class:`KcheckError`) become one-line messages there and only there.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from kcheck import __version__
from kcheck.atomic import atomic_open
from kcheck.errors import KcheckError, KcheckWarning

EXIT_OK = 0
EXIT_GATE = 1
EXIT_USAGE = 2
EXIT_SIGINT = 130
EXIT_SIGTERM = 143

T = TypeVar("T")


class GateTripped(Exception):
    """The verdict matched ``--fail-on``: the run succeeded, the gate says no."""


class Terminated(BaseException):
    """SIGTERM arrived; handled like Ctrl-C but with exit code 143."""


class Ui:
    """What the user sees on stderr: nothing with -q, rich on a terminal, plain lines otherwise."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.console = Console(stderr=True, highlight=False)
        self.interactive = self.console.is_terminal and not quiet

    def info(self, message: str) -> None:
        if not self.quiet:
            self.console.print(message, markup=False)

    def warn(self, message: str) -> None:
        if not self.quiet:
            self.console.print(f"warning: {message}", markup=False, style="yellow")

    def run(self, fn: Callable[[Callable[[str, int | None, int | None], None]], T]) -> T:
        """Run ``fn(progress)`` in a worker thread, so Ctrl-C is seen at once.

        A SIGINT that arrives while LIBLINEAR runs in the main thread is raised inside the
        binding's print callback, where ctypes swallows it. With the solver in a worker, the
        main thread only waits, and the signal interrupts the wait.
        """
        box: dict[str, Any] = {}
        if self.interactive:
            progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            task = progress.add_task("starting", total=None)

            def report(stage: str, done: int | None, total: int | None) -> None:
                progress.update(task, description=stage, completed=done or 0, total=total)

            with progress:
                return _in_worker(lambda: fn(report), box)

        last = [""]

        def report_plain(stage: str, done: int | None, total: int | None) -> None:
            if stage != last[0]:
                last[0] = stage
                self.info(f"kcheck: {stage}")

        return _in_worker(lambda: fn(report_plain), box)


def _in_worker(fn: Callable[[], T], box: dict[str, Any]) -> T:
    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    worker = threading.Thread(target=target, name="kcheck-worker", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'8G', '512M', '1.5g', '1000000' -> bytes (binary multiples, as memory is counted)."""
    m = _SIZE.match(text)
    if not m:
        raise click.BadParameter(f"expected a size like 8G or 512M, got {text!r}")
    factor = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}[m.group(2).lower()]
    value = int(float(m.group(1)) * factor)
    if value <= 0:
        raise click.BadParameter("must be positive")
    return value


def _emit_json(data: dict[str, Any], out_path: str | None, to_stdout: bool) -> None:
    """JSON to ``out_path`` (atomically, indented) and/or stdout (one line, for jq and JSONL)."""
    if out_path is not None:
        with atomic_open(out_path) as f:
            f.write(json.dumps(data, indent=2) + "\n")
    if to_stdout:
        sys.stdout.write(json.dumps(data) + "\n")
        sys.stdout.flush()


def _fmt_acc(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def _fmt_gap(c: dict[str, Any]) -> str:
    if c.get("gap") is None:
        return "-"
    lo, hi = c["gap_ci95"]
    return f"{100 * c['gap']:+.2f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def verdict_table(v: dict[str, Any]) -> Table:
    table = Table(title=f"kcheck: {v['data']['path']}", title_justify="left")
    for col, justify in (
        ("method", "left"),
        ("val. acc.", "right"),
        ("gap (95% CI), pts", "right"),
        ("C / K", "right"),
        ("status", "left"),
        ("seconds", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    lin = v["linear"]
    table.add_row("linear", _fmt_acc(lin["val_accuracy"]), "", f"C={lin['C']:g}", "ok",
                  f"{lin['seconds']:.2f}")
    for name, c in v["checkers"].items():
        if name == "multilinear":
            param = f"K={c.get('clusters', '-')}"
        else:
            param = f"C={c['C']:g}" if c.get("C") is not None else "-"
        status = c["status"]
        if status == "subsampled":
            status += f" ({100 * c.get('fraction', 0):.0f}%)"
        table.add_row(name, _fmt_acc(c["val_accuracy"]), _fmt_gap(c), param, status,
                      f"{c['seconds']:.2f}")
    return table


def _show_verdict(ui: Ui, v: dict[str, Any]) -> None:
    if ui.quiet:
        return
    ui.console.print(verdict_table(v))
    for name, c in v["checkers"].items():
        if c.get("reason"):
            ui.info(f"{name}: {c['status']}: {c['reason']}")
    style = "bold red" if v["verdict"] == "kernel" else "bold green"
    ui.console.print(
        f"verdict: [{style}]{v['verdict']}[/] ({v['margin']}; epsilon {v['epsilon']:g}, "
        f"{v['seconds']:.2f}s)"
    )
    if v.get("test"):
        t = v["test"]
        parts = [f"{k} {_fmt_acc(t[k])}" for k in ("linear", *v["checkers"]) if k in t]
        ui.info(f"test ({t['rows']} rows): " + ", ".join(parts))
    for w in v.get("warnings", []):
        ui.warn(w)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kcheck")
def cli() -> None:
    """Is a Gaussian (RBF) kernel classifier clearly better than a linear one for this data?"""


@cli.command()
@click.argument("train", type=str)
@click.option("--test", "test", type=str, default=None, help="Also score every model on FILE.")
@click.option("--epsilon", type=float, default=0.02, show_default=True,
              help="Smallest accuracy gain that makes the kernel worth it.")
@click.option("--checkers", default="degree2,multilinear", show_default=True,
              help="Comma-separated checkers to run.")
@click.option("--scaling", type=click.Choice(["maxabs", "minmax"]), default="maxabs",
              show_default=True, help="Feature scaling fitted on TRAIN.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--jobs", "-j", type=int, default=None,
              help="Worker processes for MultiLinear's clusters [default: CPU count].")
@click.option("--memory-limit", type=str, default=None,
              help="Memory budget, e.g. 8G [default: half the available memory].")
@click.option("--zero-based", is_flag=True, help="Feature indices in the files start at 0.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON verdict on stdout.")
@click.option("-o", "--output", type=str, default=None, help="Write the JSON verdict to FILE.")
@click.option("--fail-on", type=click.Choice(["kernel", "linear"]), default=None,
              help="Exit with code 1 when the verdict is this (for CI gates).")
@click.option("-q", "--quiet", is_flag=True, help="Nothing on stderr except errors.")
def check(
    train: str,
    test: str | None,
    epsilon: float,
    checkers: str,
    scaling: str,
    seed: int,
    jobs: int | None,
    memory_limit: str | None,
    zero_based: bool,
    as_json: bool,
    output: str | None,
    fail_on: str | None,
    quiet: bool,
) -> None:
    """Decide whether TRAIN needs a Gaussian kernel or a linear model is enough."""
    from kcheck.pipeline import CheckConfig, run

    ui = Ui(quiet)
    config = CheckConfig(
        train=train,
        test=test,
        epsilon=epsilon,
        checkers=tuple(c.strip() for c in checkers.split(",") if c.strip()),
        scaling=scaling,
        seed=seed,
        jobs=jobs if jobs is not None else (os.cpu_count() or 1),
        memory_limit=parse_size(memory_limit) if memory_limit else None,
        zero_based=zero_based,
    ).validated()
    report = ui.run(lambda progress: run(config, progress))
    verdict = report.json
    _show_verdict(ui, verdict)
    _emit_json(verdict, output, to_stdout=as_json or (output is None and not sys.stdout.isatty()))
    if fail_on is not None and verdict["verdict"] == fail_on:
        raise GateTripped(f"verdict is {fail_on} (--fail-on {fail_on})")


@cli.command()
@click.argument("file", type=str)
@click.option("-l", "lower", type=float, default=None, help="Lower bound (default -1).")
@click.option("-u", "upper", type=float, default=None, help="Upper bound (default 1).")
@click.option("--maxabs", is_flag=True, help="Divide each feature by its max |x| instead.")
@click.option("-s", "save_range", type=str, default=None, help="Save the scaling to RANGE.")
@click.option("-r", "restore_range", type=str, default=None, help="Apply the scaling in RANGE.")
@click.option("--zero-based", is_flag=True, help="Feature indices in FILE start at 0.")
@click.option("-o", "--output", type=str, default=None, help="Write to FILE instead of stdout.")
@click.option("-q", "--quiet", is_flag=True, help="Nothing on stderr except errors.")
def scale(
    file: str,
    lower: float | None,
    upper: float | None,
    maxabs: bool,
    save_range: str | None,
    restore_range: str | None,
    zero_based: bool,
    output: str | None,
    quiet: bool,
) -> None:
    """Scale FILE like svm-scale (min-max to [-1, 1] by default); data to stdout or -o."""
    from kcheck.data import read_libsvm, write_libsvm
    from kcheck.scaling import fit_scaler, read_range_file, write_range_file

    ui = Ui(quiet)
    if save_range and restore_range:
        raise click.UsageError("-s and -r cannot be used together")
    if restore_range and (maxabs or lower is not None or upper is not None):
        raise click.UsageError("-r takes the bounds from the range file; drop -l, -u and --maxabs")
    if maxabs and (lower is not None or upper is not None):
        raise click.UsageError("--maxabs scales to [-1, 1]; it takes no -l or -u")
    if restore_range:
        scaler = read_range_file(restore_range)
        y, X = read_libsvm(file, n_features=scaler.n_features, zero_based=zero_based)
    else:
        y, X = read_libsvm(file, zero_based=zero_based)
        scaler = fit_scaler(
            X,
            method="maxabs" if maxabs else "minmax",
            lower=-1.0 if lower is None else lower,
            upper=1.0 if upper is None else upper,
        )
    before, after = X.nnz, scaler.nnz_after(X)
    if after > before:
        ui.warn(
            f"original #nonzeros {before}, new #nonzeros {after}; if feature values are "
            f"non-negative and sparse, use -l 0 rather than the default -l -1"
        )
    Xs = scaler.transform(X)
    if save_range:
        write_range_file(save_range, scaler)
    write_libsvm(output or "-", y, Xs)


def main(argv: list[str] | None = None) -> None:
    """Entry point: the one place that turns outcomes into exit codes and messages."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    code = EXIT_OK
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", KcheckWarning)
        try:
            cli.main(args=argv, prog_name="kcheck", standalone_mode=False)
        except GateTripped as e:
            code = EXIT_GATE
            _err(f"kcheck: {e}")
        except KcheckError as e:
            code = EXIT_USAGE
            _err(f"kcheck: error: {e}")
        except click.exceptions.Abort:
            code = _interrupted(EXIT_SIGINT)
        except KeyboardInterrupt:
            code = _interrupted(EXIT_SIGINT)
        except Terminated:
            code = _interrupted(EXIT_SIGTERM)
        except click.ClickException as e:
            e.show()
            code = EXIT_USAGE
        except BrokenPipeError:
            # `kcheck ... | head`: the reader left; not an error of ours.
            _silence_stdout()
            code = EXIT_OK
        finally:
            for w in caught:
                if issubclass(w.category, KcheckWarning):
                    _err(f"kcheck: warning: {w.message}")
    if code in (EXIT_SIGINT, EXIT_SIGTERM):
        # Solver threads cannot be stopped; end now. Outputs are written atomically at the
        # very end, so nothing partial exists.
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def _interrupted(code: int) -> int:
    _err("kcheck: interrupted")
    return code


def _err(message: str) -> None:
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    except (BrokenPipeError, OSError):
        pass


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
