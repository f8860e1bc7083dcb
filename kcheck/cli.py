"""Command line: thin click commands that build a config, call the core and present the result.

Status goes to stderr (rich), data to stdout (JSON). Exit codes are decided in one place,
:func:`main`: 0 done, 1 a ``--fail-on`` gate tripped, 2 usage error or bad input, 3 some data
sets of a batch failed, 130 SIGINT, 143 SIGTERM. Domain errors (:class:`KcheckError`) become
one-line messages there and only there.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import stat
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click
from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from kcheck import __version__, atomic
from kcheck.atomic import atomic_open
from kcheck.errors import KcheckError, KcheckWarning, recorded_warnings

EXIT_OK = 0
EXIT_GATE = 1
EXIT_USAGE = 2
EXIT_SIGINT = 130
EXIT_SIGTERM = 143

T = TypeVar("T")

#: ``--seed``: what LIBLINEAR's and LIBSVM's srand take, an unsigned 32-bit integer.
SEED = click.IntRange(0, 2**32 - 1)

#: Set by the command's Ui: with -q, main() prints no warnings (they are in the JSON).
_quiet = False
#: Standard streams that were closed when kcheck started (see _guard_standard_streams).
_closed_streams: set[str] = set()


class GateTripped(Exception):
    """The verdict matched ``--fail-on``: the run succeeded, the gate says no."""


class Terminated(BaseException):
    """SIGTERM arrived; handled like Ctrl-C but with exit code 143."""


class Ui:
    """What the user sees on stderr: nothing with -q, rich on a terminal, plain lines otherwise."""

    def __init__(self, quiet: bool) -> None:
        global _quiet
        _quiet = quiet  # main() reports the warnings left over only without -q
        self.quiet = quiet
        self.console = Console(stderr=True, highlight=False)
        self.interactive = self.console.is_terminal and not quiet

    def info(self, message: str) -> None:
        if not self.quiet:
            self.console.print(message, markup=False, soft_wrap=True)

    def warn(self, message: str) -> None:
        if not self.quiet:
            self.console.print(f"warning: {message}", markup=False, style="yellow",
                               soft_wrap=True)

    def run(self, fn: Callable[[Callable[[str, int | None, int | None], None]], T]) -> T:
        """Run ``fn(progress)`` in a worker thread, so Ctrl-C is seen at once.

        A SIGINT that arrives while LIBLINEAR runs in the main thread is raised inside the
        binding's print callback, where ctypes swallows it. With the solver in a worker, the
        main thread only waits, and the signal interrupts the wait.
        """
        box: dict[str, Any] = {}
        if not self.interactive:
            # Off a terminal (logs, CI), progress would only be noise; the result says it all.
            return _in_worker(lambda: fn(lambda stage, done, total: None), box)
        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        task = progress.add_task("starting", total=None, count="")
        last = [""]

        def report(stage: str, done: int | None, total: int | None) -> None:
            count = "" if total is None else f"{done or 0}/{total}"
            if stage != last[0]:
                # A new stage restarts the clock, so the ETA is not averaged over earlier ones.
                last[0] = stage
                progress.reset(task, total=total, completed=done or 0, description=stage,
                               count=count)
            else:
                progress.update(task, completed=done or 0, total=total, count=count)

        with progress:
            return _in_worker(lambda: fn(report), box)


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
    return box["value"]


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


def _json_destination(output: str | None, as_json: bool) -> tuple[str | None, bool]:
    """(file to write, whether to print on stdout) for ``-o`` / ``--json``.

    ``-o -`` is stdout. Without ``-o``, the JSON goes to stdout when asked (``--json``) or when
    stdout is not a terminal, ``-q`` or not: ``-o FILE -q`` is the silent form. A closed stdout
    is refused now rather than after the work.
    """
    if output == "-":
        output, as_json = None, True
    to_stdout = as_json or (output is None and not sys.stdout.isatty())
    if to_stdout:
        _require_stdout()
    if output is not None:
        _check_writable(output, "-o")
    return output, to_stdout


def _require_stdout() -> None:
    if "stdout" in _closed_streams:
        raise KcheckError("stdout is closed, so there is nowhere to write the JSON; "
                          "use -o FILE")


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


def _fmt_gap(c: dict[str, Any]) -> tuple[str, str]:
    """Gap and its 95% interval, in accuracy points."""
    if c.get("gap") is None:
        return "-", ""
    lo, hi = c["gap_ci95"]
    return f"{100 * c['gap']:+.2f}", f"[{100 * lo:+.1f}, {100 * hi:+.1f}]"


def verdict_table(v: dict[str, Any]) -> Table:
    table = Table(title=f"kcheck: {v['data']['path']}", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False, padding=(0, 1),
                  caption="gap and 95% interval in accuracy points, checker minus linear: on V "
                          "(rbf: repeated CV on all rows)",
                  caption_justify="left")
    for col, justify in (
        ("method", "left"),
        ("val.", "right"),
        ("gap", "right"),
        ("95% CI", "right"),
        ("C / K", "right"),
        ("status", "left"),
        ("s", "right"),
    ):
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    lin = v["linear"]
    table.add_row("linear", _fmt_acc(lin["val_accuracy"]), "", "", f"C={lin['C']:.3g}", "ok",
                  f"{lin['seconds']:.2f}")
    for name, c in v["checkers"].items():
        if name == "multilinear":
            param = f"K={c.get('clusters', '-')}"
        elif name == "rff" and c.get("D") is not None:
            param = f"D={c['D']} g={c['gamma']:.2g}"
        elif name == "rbf" and c.get("gamma") is not None:
            param = f"C={c['C']:.2g} g={c['gamma']:.2g}"
        else:
            param = f"C={c['C']:.3g}" if c.get("C") is not None else "-"
        status = c["status"]
        if status == "subsampled":
            status = f"{100 * c.get('fraction', 0):.2g}% of T"
        table.add_row(name, _fmt_acc(c["val_accuracy"]), *_fmt_gap(c), param, status,
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
        acc = t["accuracy"]
        parts = [f"{k} {_fmt_acc(acc[k])}" for k in ("linear", *v["checkers"]) if k in acc]
        ui.info(f"test ({t['rows']} rows): " + ", ".join(parts))
    for w in v.get("warnings", []):
        ui.warn(w)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kcheck")
def cli() -> None:
    """Is a Gaussian (RBF) kernel classifier clearly better than a linear one for this data?"""


_CHECK_OPTIONS = [
    click.option("--epsilon", type=float, default=0.02, show_default=True,
                 help="Smallest accuracy gain that makes the kernel worth it."),
    click.option("--checkers", default="degree2,multilinear", show_default=True,
                 help="Comma-separated checkers to run, of degree2, multilinear, rff."),
    click.option("--scaling", type=click.Choice(["maxabs", "minmax"]), default="maxabs",
                 show_default=True, help="Feature scaling, fitted on the training file."),
    click.option("--seed", type=SEED, default=0, show_default=True,
                 help="Seed of the split, folds and samples: 0 to 2^32-1."),
    click.option("--memory-limit", type=str, default=None,
                 help="Memory budget, e.g. 8G [default: half the physical memory]; "
                      "a batch divides it between its workers."),
    click.option("--time-limit", type=float, default=None,
                 help="Seconds for one check; checkers not done by then are skipped."),
    click.option("--zero-based", is_flag=True, help="Feature indices in the files start at 0."),
    click.option("--exact", type=click.Choice(["auto", "always", "never"]), default="auto",
                 show_default=True,
                 help="Run the real RBF-vs-linear comparison (auto: where it is cheap, i.e. "
                      "small data); where it runs, it decides the verdict."),
    click.option("--fail-on", type=click.Choice(["kernel", "linear"]), default=None,
                 help="Exit with code 1 when a verdict is this (for CI gates)."),
    click.option("-q", "--quiet", is_flag=True, help="Nothing on stderr except errors."),
]


def check_options(f: Callable[..., None]) -> Callable[..., None]:
    """The options that ``check`` and ``batch`` share: what one check is, and the gate."""
    for option in reversed(_CHECK_OPTIONS):
        f = option(f)
    return f


def check_config(train: str, jobs: int, opts: dict[str, Any], **extra: Any) -> Any:
    """A validated CheckConfig from the shared options (``fail_on`` and ``quiet`` excluded)."""
    from kcheck.pipeline import CheckConfig

    return CheckConfig(
        train=train,
        epsilon=opts["epsilon"],
        checkers=tuple(c.strip() for c in opts["checkers"].split(",") if c.strip()),
        scaling=opts["scaling"],
        seed=opts["seed"],
        jobs=jobs,
        memory_limit=parse_size(opts["memory_limit"]) if opts["memory_limit"] else None,
        zero_based=opts["zero_based"],
        time_limit=opts["time_limit"],
        exact=opts["exact"],
        **extra,
    ).validated()


@cli.command()
@click.argument("train", type=str)
@click.option("--test", "test", type=str, default=None, help="Also score every model on FILE.")
@click.option("--jobs", "-j", type=int, default=None,
              help="Worker processes for MultiLinear's clusters [default: CPU count].")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON verdict on stdout.")
@click.option("-o", "--output", type=str, default=None,
              help="Write the JSON verdict to FILE (atomically); - is stdout.")
@click.option("--model-out", type=str, default=None,
              help="Train the recommended model on all of TRAIN; save it to PATH (+ PATH.range).")
@click.option("--model", "model_kind", type=click.Choice(["linear", "kernel"]), default=None,
              help="With --model-out: save this kind whatever the verdict.")
@click.option("--probability", is_flag=True,
              help="With --model kernel: train with -b 1, for svm-predict -b 1 and "
                   "kcheck predict -b 1.")
@check_options
def check(
    train: str,
    test: str | None,
    jobs: int | None,
    as_json: bool,
    output: str | None,
    model_out: str | None,
    model_kind: str | None,
    probability: bool,
    **opts: Any,
) -> None:
    """Decide whether TRAIN needs a Gaussian kernel or a linear model is enough."""
    from kcheck import models
    from kcheck.pipeline import run

    ui = Ui(opts["quiet"])
    fail_on = opts["fail_on"]
    config = check_config(
        train,
        jobs if jobs is not None else (os.cpu_count() or 1),
        opts,
        test=test,
        model_out=model_out,
        model_kind=model_kind,
        model_probability=probability,
    )
    if model_kind and not model_out:
        raise click.UsageError("--model needs --model-out")
    if probability and model_kind != "kernel":
        raise click.UsageError("--probability needs --model-out and --model kernel (a linear "
                               "model has no probability outputs)")
    # Fail now, not after a long check (and not after --model-out has replaced a model).
    output, to_stdout = _json_destination(output, as_json)
    if model_out is not None:
        _check_writable(model_out, "--model-out")
    inputs = [train, test]
    if model_out is not None:
        _refuse_input_as_output(model_out, "--model-out", inputs)
        _refuse_input_as_output(model_out + ".range", "--model-out", inputs)
    if output is not None:
        _refuse_input_as_output(output, "-o", inputs, [model_out, model_out and
                                                       model_out + ".range"])
    with recorded_warnings() as notes:
        report = ui.run(lambda progress: run(config, progress))
        if config.model_out is not None:
            ui.run(lambda progress: models.train_model(report, config, progress))
    verdict = report.json
    verdict["warnings"] = [*verdict.get("warnings", []), *notes]
    _show_verdict(ui, verdict)
    _emit_json(verdict, output, to_stdout=to_stdout)
    if fail_on is not None and verdict["verdict"] == fail_on:
        raise GateTripped(f"verdict is {fail_on} (--fail-on {fail_on})")


@cli.command()
@click.argument("file", type=str)
@click.option("-l", "lower", type=float, default=None, help="Lower bound (default -1).")
@click.option("-u", "upper", type=float, default=None, help="Upper bound (default 1).")
@click.option("-y", "y_bounds", type=float, nargs=2, default=None,
              metavar="Y_LOWER Y_UPPER", help="Also scale the labels to [Y_LOWER, Y_UPPER].")
@click.option("--maxabs", is_flag=True, help="Divide each feature by its max |x| instead.")
@click.option("-s", "save_range", type=str, default=None, metavar="RANGE",
              help="Save the scaling to RANGE.")
@click.option("-r", "restore_range", type=str, default=None, metavar="RANGE",
              help="Apply the scaling in RANGE (its y section scales the labels).")
@click.option("--full-precision", is_flag=True,
              help="Print values with 17 significant digits (exact) instead of svm-scale's 6.")
@click.option("--zero-based", is_flag=True, help="Feature indices in FILE start at 0.")
@click.option("-o", "--output", type=str, default=None, metavar="OUT",
              help="Write to OUT (atomically) instead of stdout.")
@click.option("-q", "--quiet", is_flag=True, help="Nothing on stderr except errors.")
def scale(
    file: str,
    lower: float | None,
    upper: float | None,
    y_bounds: tuple[float, float] | None,
    maxabs: bool,
    save_range: str | None,
    restore_range: str | None,
    full_precision: bool,
    zero_based: bool,
    output: str | None,
    quiet: bool,
) -> None:
    """Scale FILE like svm-scale (min-max to [-1, 1] by default); data to stdout or -o.

    The output is svm-scale's to the byte (values with %g, 6 significant digits), and so are
    the range files of -s; --full-precision keeps every digit instead. -r applies a range
    file with svm-scale's arithmetic, whichever tool wrote it.
    """
    from dataclasses import replace

    from kcheck.data import read_libsvm
    from kcheck.scaling import (
        densify_warning,
        fit_label_scaling,
        fit_scaler,
        read_range_file,
        scaled_text,
        write_range_file,
    )

    Ui(quiet)  # with -q, warnings (such as dropped features) are not printed either
    if save_range and restore_range:
        raise click.UsageError("-s and -r cannot be used together")
    if restore_range and (maxabs or lower is not None or upper is not None or y_bounds):
        raise click.UsageError(
            "-r takes the bounds from the range file; drop -l, -u, -y and --maxabs"
        )
    if maxabs and (lower is not None or upper is not None):
        raise click.UsageError("--maxabs scales to [-1, 1]; it takes no -l or -u")
    if output is not None:
        _refuse_input_as_output(output, "-o", [file, restore_range], [save_range])
    if save_range is not None:
        _refuse_input_as_output(save_range, "-s", [file])
    if restore_range:
        # svm-scale's own arithmetic for any range file, so the output is svm-scale -r's.
        scaler = read_range_file(restore_range, method="minmax")
        y, X = read_libsvm(file, n_features=scaler.n_features, zero_based=zero_based)
    else:
        y, X = read_libsvm(file, zero_based=zero_based)
        scaler = fit_scaler(
            X,
            method="maxabs" if maxabs else "minmax",
            lower=-1.0 if lower is None else lower,
            upper=1.0 if upper is None else upper,
            source=file,
        )
        if y_bounds:
            scaler = replace(
                scaler, y_scaling=fit_label_scaling(y, y_bounds[0], y_bounds[1])
            )
    warning = densify_warning(X.nnz, scaler.nnz_after(X))
    if warning and not quiet:
        # svm-scale's own wording, so scripts that grep for it keep working.
        sys.stderr.write(warning + "\n")
    Xs = scaler.transform(X)
    if scaler.y_scaling is not None:
        y = scaler.y_scaling.apply(y)
    blocks = scaled_text(y, Xs, full_precision=full_precision)
    if save_range:
        write_range_file(save_range, scaler)
    if output is None or output == "-":
        for block in blocks:
            sys.stdout.write(block)
        sys.stdout.flush()
    else:
        with atomic_open(output, "w", "the file", encoding="ascii", newline="\n") as f:
            for block in blocks:
                f.write(block)


# --- batch (kcheck/batch.py) -------------------------------------------------------------------


EXIT_BATCH_ERRORS = 3


class BatchFailed(Exception):
    """Some data sets of a batch could not be checked (exit code 3, before any gate)."""


def deciding_gap(line: dict[str, Any]) -> str:
    """The gap that decided the verdict, in points, with its checker.

    ``kernel``: the deciding checker's gap. ``linear``: the largest gap, labelled as the
    closest checker; where the exact comparison ran, it alone decided, so it is the one shown.
    The largest gap of any checker would mislead: a proxy's gap above epsilon next to a
    ``linear`` verdict that the exact comparison decided.
    """
    checkers = line.get("checkers") or {}
    gaps = {name: c["gap"] for name, c in checkers.items() if c.get("gap") is not None}
    if not gaps:
        return "-"
    deciding = line.get("deciding_checker")
    if line.get("verdict") == "kernel" and deciding in gaps:
        return f"{100 * gaps[deciding]:+.2f} {deciding}"
    pool = {"rbf": gaps["rbf"]} if "rbf" in gaps else gaps
    name = max(pool, key=lambda k: (pool[k], k))
    return f"{100 * pool[name]:+.2f} {name} (closest)"


def batch_table(lines: list[dict[str, Any]], resumed: set[str], wall: float) -> Table:
    """The summary of a batch: one row per data set and skipped file, totals in the caption."""
    from rich import box
    sets = [x for x in lines if x["status"] != "skipped"]
    ok = [x for x in sets if x["status"] == "ok"]
    n_kernel = sum(x["verdict"] == "kernel" for x in ok)
    n_err = len(sets) - len(ok)
    n_skip = len(lines) - len(sets)
    total = sum(x.get("seconds") or 0.0 for x in lines)
    table = Table(
        title="kcheck batch", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
        caption=(f"{len(sets)} data sets: {len(ok)} ok ({n_kernel} kernel, "
                 f"{len(ok) - n_kernel} linear), {n_err} error{'' if n_err == 1 else 's'}; "
                 f"{n_skip} file{'' if n_skip == 1 else 's'} skipped; "
                 f"{total:.2f}s checking, {wall:.1f}s wall time. gap: the deciding checker's, "
                 "for linear the closest one's"),
        caption_justify="left",
    )
    longest = max((len(x["name"]) for x in lines), default=4)
    for col in ("name", "rows", "features", "verdict", "margin", "gap, pts", "seconds"):
        # On a narrow terminal a long name folds (up to 24 columns kept) rather than vanishing.
        name = col == "name"
        table.add_column(col, no_wrap=not name, overflow="fold" if name else "ellipsis",
                         min_width=min(24, longest) if name else None,
                         justify="left" if col in ("name", "verdict", "margin") else "right")
    for x in lines:
        name = x["name"] + (" (resumed)" if x["name"] in resumed else "")
        seconds = f"{x['seconds']:.2f}" if x.get("seconds") is not None else "-"
        if x["status"] == "skipped":
            table.add_row(name, "-", "-", "[yellow]skipped[/]", "-", "-", "-")
            continue
        if x["status"] != "ok":
            table.add_row(name, "-", "-", "[red]error[/]", "-", "-", seconds)
            continue
        style = "red" if x["verdict"] == "kernel" else "green"
        table.add_row(name, f"{x['data']['rows']:,}", f"{x['data']['features']:,}",
                      f"[{style}]{x['verdict']}[/]", x["margin"], deciding_gap(x), seconds)
    return table


def _names(lines: list[dict[str, Any]], limit: int = 5) -> str:
    names = [x["name"] for x in lines]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit
                                       else "")


def _read_path_list(source: str) -> list[str]:
    """``--files-from``: one path a line (``-``: stdin); blank lines are ignored."""
    try:
        if source == "-":
            text = sys.stdin.read()
        else:
            with open(source, encoding="utf-8") as f:
                text = f.read()
    except OSError as e:
        raise KcheckError(f"--files-from {source}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise KcheckError(f"--files-from {source}: not UTF-8 text ({e.reason})") from None
    return [line.rstrip("\r") for line in text.split("\n") if line.strip()]


@cli.command()
@click.argument("paths", nargs=-1, required=False, metavar="DIR|FILE...")
@click.option("--files-from", type=str, default=None, metavar="FILE",
              help="Also check the paths listed in FILE, one a line (- for stdin).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Data sets checked at once, each in its own process; they share the "
                   "memory budget.")
@click.option("-o", "--output", type=str, default=None,
              help="Write the JSON lines to FILE (via FILE.partial, renamed at the end, under a "
                   "lock on FILE.lock); - is stdout.")
@click.option("--resume", is_flag=True,
              help="With -o: reuse the ok lines of FILE and FILE.partial whose data, test "
                   "file, options and kcheck version are unchanged; check the rest.")
@click.option("--strict", is_flag=True,
              help="A skipped file is an error (exit 3): every file looked at must be data.")
@check_options
def batch(
    paths: tuple[str, ...],
    files_from: str | None,
    jobs: int,
    output: str | None,
    resume: bool,
    strict: bool,
    **opts: Any,
) -> None:
    """Check every data set in DIRs (walked in sorted order) and FILEs.

    A named file, and a file under a DIR with a data-file extension (.svm, .libsvm, .txt, .t,
    .scale...) or none, is always checked: a broken one is an error. Files plainly not data
    (README.md, images, .json, .py...) are skipped; other files under a DIR are checked when
    their first line is LIBSVM data. Every skipped file gets a line with status "skipped" and
    its reason (--strict makes it an error). .gz, .bz2 and .xz files are read directly; - is
    stdin. NAME.t or NAME.test beside NAME (NAME.t.scale beside NAME.scale) is its test
    file. One JSON line per data set: the JSON of `kcheck check` plus "name", "status" ("ok",
    "error" or "skipped") and "error". Without -o, the lines go to stdout unless it is a
    terminal, where the summary table is shown instead.

    \b
    Exit codes:
      0  every data set was checked (and no --fail-on match)
      1  --fail-on matched at least one data set
      2  usage error: bad option, no data files found, --resume without -o,
         FILE locked by another batch
      3  at least one data set could not be checked, or (--strict) a file was
         skipped; errors take precedence over --fail-on
    Ctrl-C ends the batch (exit 130); FILE keeps its old content and the lines
    already written stay in FILE.partial, so --resume carries on from there.
    """
    from kcheck.batch import discover, run_batch

    quiet, fail_on = opts["quiet"], opts["fail_on"]
    ui = Ui(quiet)
    named = list(paths)
    if files_from is not None:
        if files_from == "-" and "-" in named:
            raise click.UsageError("--files-from - and - (data on stdin) cannot both read stdin")
        named += _read_path_list(files_from)
    if not named:
        raise click.UsageError("give DIRs or FILEs to check, or --files-from FILE")
    if output == "-":
        destination: str | None = "-"
    elif output is not None:
        destination = output
        _check_writable(output, "-o")
    else:
        destination = None if sys.stdout.isatty() else "-"
    if destination == "-":
        _require_stdout()
    if resume and destination in (None, "-"):
        raise click.UsageError("--resume needs -o FILE: the results to resume from")
    template = check_config("", os.cpu_count() or 1, opts)
    own = [] if destination in (None, "-") else [output, f"{output}.partial", f"{output}.lock"]
    found = discover(named, exclude=own)
    for path, reason in found.skipped:
        ui.info(f"kcheck: skipping {path} ({reason})" + (": an error under --strict"
                                                          if strict else ""))
    if not found.datasets:
        raise KcheckError(f"no LIBSVM data files found in {' '.join(named)}")

    total = len(found.datasets)

    def announce(line: dict[str, Any], print_: Callable[[str], None]) -> None:
        if line["status"] == "ok":
            what = f"{line['verdict']} ({line['margin']})"
        else:
            what = f"error: {line['error']}"
        print_(f"kcheck: {line['name']}: {what}, {line['seconds']:.2f}s")

    def go(progress: Any = None, on_line: Any = None) -> Any:
        return run_batch(found.datasets, template, jobs=jobs, output=destination,
                         resume=resume, skipped=found.skipped, strict=strict,
                         progress=progress, on_line=on_line)

    # JSON lines on a terminal's stdout would land in the middle of a live progress display.
    if ui.interactive and not (destination == "-" and sys.stdout.isatty()):
        bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                       TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                       console=ui.console, transient=True, redirect_stdout=False)
        task = bar.add_task("starting", total=None)

        def report(stage: str, d: int | None, t: int | None) -> None:
            bar.update(task, description=stage, completed=d or 0, total=t)

        def show(line: dict[str, Any]) -> None:
            announce(line, lambda m: bar.console.print(m, markup=False, highlight=False))

        with bar:
            result = go(report, show)
    else:
        result = go(None, None if quiet else lambda x: announce(x, ui.info))
    if resume:
        ui.info(f"kcheck: reused {len(result.resumed)} of {total} results from {output} "
                f"(--resume); checked {total - len(result.resumed)} again, "
                f"{len(result.stale)} of them because their data, test file, options or "
                "kcheck version changed")
    if not ui.quiet:
        table = batch_table(result.lines, result.resumed, result.seconds)
        if ui.console.is_terminal:
            ui.console.print(table)
        else:  # logs (CI) do not wrap: give the table the room it needs
            wide = Console(stderr=True, highlight=False, width=max(ui.console.width, 160))
            wide.print(table, width=wide.measure(table).maximum)
        for x in result.skipped:
            ui.console.print(f"skipped {x['name']}: {x['reason']}", markup=False,
                             style="yellow", soft_wrap=True)
        for x in result.errors:
            ui.console.print(f"{x['name']}: {x['error']}", markup=False, style="red",
                             soft_wrap=True)
        for x in result.lines:
            for w in x.get("warnings") or []:
                ui.warn(f"{x['name']}: {w}")
    if result.errors:
        n = len(result.errors)
        raise BatchFailed(
            f"{n} of {total + len(result.skipped) if strict else total} "
            f"{'files' if strict else 'data sets'} could not be checked: "
            f"{_names(result.errors)}"
        )
    if fail_on is not None and (hits := result.matching(fail_on)):
        raise GateTripped(
            f"verdict is {fail_on} for {len(hits)} of {total} data sets "
            f"(--fail-on {fail_on}): {_names(hits)}"
        )


# --- end batch -----------------------------------------------------------------------------------


# --- predict and verify (kcheck/models.py) -------------------------------------------------------


@cli.command()
@click.argument("model", type=str)
@click.argument("file", type=str)
@click.option("-r", "range_path", type=str, default=None, metavar="RANGE",
              help="Scale FILE with RANGE (e.g. from svm-scale -s) instead of MODEL.range.")
@click.option("--no-scale", is_flag=True,
              help="FILE is already scaled (e.g. svm-scale -r output); read no range file.")
@click.option("-b", "probability", type=click.Choice(["0", "1"]), default="0",
              show_default=True,
              help="1: print each class's probability, as svm-predict -b 1 (models trained "
                   "with -b 1, or LIBLINEAR logistic regression).")
@click.option("-o", "--output", type=str, default=None, metavar="OUT",
              help="Write the labels to OUT instead of stdout.")
@click.option("--zero-based", is_flag=True, help="Feature indices in FILE start at 0.")
@click.option("--memory-limit", type=str, default=None,
              help="Memory budget, e.g. 2G [default: half the physical memory]; a model or "
                   "range file that needs more is refused before it is loaded.")
@click.option("-q", "--quiet", is_flag=True, help="Nothing on stderr except errors.")
def predict(model: str, file: str, range_path: str | None, no_scale: bool, probability: str,
            output: str | None, zero_based: bool, memory_limit: str | None,
            quiet: bool) -> None:
    """Label FILE with a saved MODEL; one label a line, as svm-predict writes them.

    FILE is scaled with MODEL.range (kcheck check --model-out writes it), with -r RANGE, or
    not at all with --no-scale, so models of svm-train and liblinear-train work too. MODEL
    and the range file are checked in full before they are loaded; regression, one-class and
    precomputed-kernel models are refused.
    """
    from kcheck import predict as predicting

    ui = Ui(quiet)
    if range_path is not None and no_scale:
        raise click.UsageError("-r and --no-scale cannot be used together")
    limit = parse_size(memory_limit) if memory_limit else None
    if output is not None:
        inputs = [model, file, range_path if range_path is not None else model + ".range"]
        _refuse_input_as_output(output, "-o", inputs)
    result = ui.run(
        lambda progress: predicting.predict_file(
            model, file, range_path=range_path, scale=not no_scale,
            probability=probability == "1", zero_based=zero_based,
            progress=progress if ui.interactive else None, memory_limit=limit,
        )
    )
    if result.probabilities is not None:
        assert result.classes is not None
        text = predicting.format_probabilities(result.classes, result.labels,
                                               result.probabilities)
    else:
        text = predicting.format_labels(result.labels)
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with atomic_open(output) as f:
            f.write(text)
    if result.accuracy is not None:
        ui.info(f"Accuracy = {100 * result.accuracy:g}% ({result.correct}/{result.rows})")


@cli.command()
@click.argument("train", type=str)
@click.option("--test", "test", type=str, default=None,
              help="Also train both models on all of TRAIN and score them on FILE.")
@click.option("--jobs", "-j", type=int, default=None,
              help="Worker processes for the grid search [default: CPU count].")
@click.option("--max-rows", type=int, default=None,
              help="Cross-validate on a stratified sample of N rows [default: all].")
@click.option("--scaling", type=click.Choice(["maxabs", "minmax"]), default=None,
              help="Feature scaling fitted on TRAIN [default: the --check-json's, else maxabs].")
@click.option("--seed", type=SEED, default=None,
              help="Seed of the folds and samples, 0 to 2^32-1 [default: the --check-json's, "
                   "else 0].")
@click.option("--epsilon", type=float, default=None,
              help="Gap that means 'kernel' [default: the --check-json's, else 0.02].")
@click.option("--check-json", type=str, default=None,
              help="A saved 'kcheck check' JSON verdict on TRAIN: exit 1 unless this "
                   "confirms it.")
@click.option("--zero-based", is_flag=True, help="Feature indices in the files start at 0.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON result on stdout.")
@click.option("-o", "--output", type=str, default=None,
              help="Write the JSON result to FILE (atomically); - is stdout.")
@click.option("-q", "--quiet", is_flag=True, help="Nothing on stderr except errors.")
def verify(
    train: str,
    test: str | None,
    jobs: int | None,
    max_rows: int | None,
    scaling: str | None,
    seed: int | None,
    epsilon: float | None,
    check_json: str | None,
    zero_based: bool,
    as_json: bool,
    output: str | None,
    quiet: bool,
) -> None:
    """The expensive reference: RBF grid search (LIBSVM) next to the tuned linear model.

    With --check-json, the verdict must be about TRAIN (its data.sha256 must match; exit 2 if
    not), --scaling, --seed and --epsilon come from it, and the exit code is a gate: 0 if the
    reference confirms the check's verdict, 1 if it does not.
    """
    from kcheck import verify as verify_mod

    ui = Ui(quiet)
    output, to_stdout = _json_destination(output, as_json)
    if output is not None:
        _refuse_input_as_output(output, "-o", [train, test, check_json])
    config = verify_mod.VerifyConfig(
        train=train,
        test=test,
        jobs=jobs if jobs is not None else (os.cpu_count() or 1),
        max_rows=max_rows,
        scaling=scaling,
        seed=seed,
        epsilon=epsilon,
        check_json=check_json,
        zero_based=zero_based,
    ).validated()
    result = ui.run(lambda progress: verify_mod.verify(config, progress))
    _show_verify(ui, result)
    _emit_json(result, output, to_stdout=to_stdout)
    if result["confirms"] is False:
        raise GateTripped(
            f"the reference does not confirm the check's verdict: {result['check']['verdict']} "
            f"in {result['check']['path']}, {result['verdict']} here"
        )


def verify_table(v: dict[str, Any]) -> Table:
    table = Table(title=f"kcheck verify: {v['data']['path']}", title_justify="left")
    test = v.get("test")
    columns = ["model", "CV acc."] + (["test acc."] if test else []) + ["parameters", "seconds"]
    for col in columns:
        table.add_column(col, justify="left" if col in ("model", "parameters") else "right")
    lin, rbf = v["linear"], v["rbf"]
    rows = (
        ("linear", lin, f"C={lin['C']:g}"),
        ("RBF", rbf, f"C={rbf['C']:g} gamma={rbf['gamma']:g} ({rbf['grid_points']} points)"),
    )
    for name, r, params in rows:
        cells = [name, _fmt_acc(r["cv_accuracy"])]
        if test:
            cells.append(_fmt_acc(r["test_accuracy"]))
        table.add_row(*cells, params, f"{r['seconds']:.2f}")
    return table


def _verify_summary(v: dict[str, Any]) -> str:
    text = (
        f"gap (RBF - linear, CV): {100 * v['gap']:+.2f} pts -> verdict {v['verdict']} "
        f"(epsilon {v['epsilon']:g})"
    )
    if v.get("test_gap") is not None:
        text += f"; test gap {100 * v['test_gap']:+.2f} pts"
    if v["confirms"] is not None:
        word = "confirms" if v["confirms"] else "does NOT confirm"
        text += f"; {word} the check's verdict ({v['check']['verdict']})"
    return text


def _show_verify(ui: Ui, v: dict[str, Any]) -> None:
    if ui.quiet:
        return
    if ui.console.is_terminal:
        ui.console.print(verify_table(v))
        ui.info(_verify_summary(v) + f" [{v['seconds']:.1f}s]")
        return
    lin, rbf = v["linear"], v["rbf"]
    ui.info(
        f"kcheck verify: linear CV {_fmt_acc(lin['cv_accuracy'])} (C={lin['C']:g}), "
        f"RBF CV {_fmt_acc(rbf['cv_accuracy'])} (C={rbf['C']:g}, gamma={rbf['gamma']:g}); "
        + _verify_summary(v)
    )


# --- end predict and verify ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """Entry point: the one place that turns outcomes into exit codes and messages."""
    _guard_standard_streams()
    signal.signal(signal.SIGTERM, _on_sigterm)
    code = EXIT_OK
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", KcheckWarning)
        try:
            _invoke(sys.argv[1:] if argv is None else argv)
        except GateTripped as e:
            code = EXIT_GATE
            _err(f"kcheck: {e}")
        except BatchFailed as e:
            code = EXIT_BATCH_ERRORS
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
        except click.exceptions.Exit as e:
            code = e.exit_code  # --help, --version
        except BrokenPipeError:
            # `kcheck ... | head`: the reader left; not an error of ours.
            _silence_stdout()
            code = EXIT_OK
        except OSError as e:
            # Disk full or an I/O error on stdout or a file: say so in one line.
            code = EXIT_USAGE
            where = f" {e.filename}" if getattr(e, "filename", None) else ""
            _err(f"kcheck: error: cannot write or read{where}: {e.strerror or e}")
        except MemoryError:
            code = EXIT_USAGE
            _err("kcheck: error: out of memory; try a smaller --memory-limit or fewer --jobs")
        finally:
            for w in caught:
                if issubclass(w.category, KcheckWarning) and not _quiet:
                    _err(f"kcheck: warning: {w.message}")
    if code in (EXIT_SIGINT, EXIT_SIGTERM):
        # Solver threads cannot be stopped; end now. Outputs are written atomically at the
        # very end, so nothing partial exists. A second signal must not cut the clean-up
        # short. os._exit skips every clean-up, so remove the temporary files being written
        # (after renames under way finish), end the worker pools (none half started) and
        # release their semaphores, and remove the temporary directory of the fork server here.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        atomic.abandon()
        from kcheck.workers import end_all_pools

        end_all_pools()
        _remove_multiprocessing_tempdir()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


class _ClosedStream(io.TextIOBase):
    """Stands for a standard stream that was closed when kcheck started (``>&-``, ``<&-``).

    Using it is a usage error with one clear line (exit 2), never a traceback.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def _closed(self, *args: Any) -> Any:
        what = "nothing to read" if self.name == "stdin" else "nowhere to write; use -o FILE"
        raise KcheckError(f"{self.name} is closed: {what}")

    read = readline = write = fileno = _closed

    def isatty(self) -> bool:
        return False

    def flush(self) -> None:
        return None


def _guard_standard_streams() -> None:
    """Give closed standard file descriptors a /dev/null, and closed streams a stand-in.

    Python sets a closed standard stream to None, so the first use raised AttributeError
    (traceback, exit 1). Worse, the next file opened would get the free descriptor: LIBLINEAR
    printing to fd 1 would then write into an output file. Writes to a closed stderr are
    dropped (messages are lost, exit codes stay true); reads from a closed stdin and writes
    to a closed stdout fail with one line.
    """
    for fd, name, mode in ((0, "stdin", os.O_RDONLY), (1, "stdout", os.O_WRONLY),
                           (2, "stderr", os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            pass
        else:
            if getattr(sys, name) is not None:
                continue
        _closed_streams.add(name)
        try:
            null = os.open(os.devnull, mode)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        except OSError:
            pass
        if name == "stderr":
            sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
        else:
            setattr(sys, name, _ClosedStream(name))


def _check_writable(path: str, option: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise KcheckError(f"{option} {path}: cannot write there: No such file or directory")
    if not os.access(directory, os.W_OK):
        raise KcheckError(f"{option} {path}: cannot write there: Permission denied")


def _same_file(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` name one existing regular file (by inode, so links and
    other spellings count). Devices and pipes (``/dev/stdout``, ``-``) are never refused."""
    if "-" in (a, b):
        return False
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return stat.S_ISREG(sa.st_mode) and (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _refuse_input_as_output(
    output: str, option: str, inputs: Sequence[str | None], outputs: Sequence[str | None] = ()
) -> None:
    """Refuse to write ``output`` over one of the command's inputs, or over another output."""
    for path in inputs:
        if path is not None and _same_file(output, path):
            raise KcheckError(f"{option} {output} is the input file {path}; it would be "
                              "overwritten, so choose another output path")
    for path in outputs:
        if path is not None and (_same_file(output, path) or (
                os.path.abspath(output) == os.path.abspath(path))):
            raise KcheckError(f"{option} {output} is also the output {path}; choose "
                              "different paths")


def _invoke(args: list[str]) -> None:
    """Run the command without click's own ``main``, which turns a broken pipe into exit 1
    (our gate code) and would take exit codes out of :func:`main`'s hands."""
    with cli.make_context("kcheck", list(args)) as ctx:
        cli.invoke(ctx)


def _remove_multiprocessing_tempdir() -> None:
    import multiprocessing
    import shutil

    config = getattr(multiprocessing.current_process(), "_config", {})
    tempdir = config.get("tempdir")
    if tempdir:
        shutil.rmtree(tempdir, ignore_errors=True)


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
