"""The ``kcheck`` group and its entry point: the one place that turns outcomes into exit codes.

Status to stderr (rich), data to stdout (JSON). Exit codes (:func:`main`): 0 done, 1 a gate tripped,
2 usage error or bad input, 3 some batch data sets failed, 130 SIGINT, 143 SIGTERM.
:class:`KcheckError` becomes a one-line message here only."""

from __future__ import annotations

import contextlib
import io
import os
import resource
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

import click

import kcheck
from kcheck import __version__
from kcheck.cli.outputs import closed_streams
from kcheck.cli.ui import state
from kcheck.errors import KcheckError, KcheckWarning
from kcheck.io import atomic

EXIT_OK = 0
EXIT_GATE = 1
EXIT_USAGE = 2
EXIT_BATCH_ERRORS = 3
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


class GateTripped(Exception):
    """The verdict matched ``--fail-on``: the run succeeded, the gate says no."""


class BatchFailed(Exception):
    """Some data sets of a batch could not be checked (exit code 3, before any gate)."""


class Terminated(BaseException):
    """SIGTERM arrived; handled like Ctrl-C but with exit code 143."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.version_option(__version__, "-V", "--version", prog_name="kcheck")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Is a Gaussian (RBF) kernel classifier clearly better than a linear one for this data?

    \b
    Shell completion (bash; zsh and fish likewise with zsh_source, fish_source):
      eval "$(_KCHECK_COMPLETE=bash_source kcheck)"
    """
    # Bare ``kcheck`` prints help and exits 0 as ``git`` does (no_args_is_help would exit 2).
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())
        ctx.exit(0)


#: The environment variable of click's shell completion: _KCHECK_COMPLETE=bash_source kcheck.
COMPLETE_VAR = "_KCHECK_COMPLETE"


def usage_message(e: click.ClickException) -> str:
    """A click usage error in kcheck's one style: ``kcheck: error: --epsilon: ...``."""
    if (
        isinstance(e, click.BadParameter)
        and not isinstance(e, click.MissingParameter)
        and e.param is not None
    ):
        names = e.param.opts if isinstance(e.param, click.Option) else [e.param.human_readable_name]
        return f"{' / '.join(names)}: {e.message}"
    text = e.format_message()
    return text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text


def _quiet_missing_hashes() -> None:
    """Drop hashlib's traceback per hash whose C module did not load (``ulimit -v``; kcheck uses
    none). Only the command does this: logging set-up is the process's."""
    import logging

    # hashlib logs through the module-level logging.exception: on the root logger itself.
    logging.getLogger().addFilter(lambda record: not str(record.msg).startswith("code for hash"))


def main(argv: list[str] | None = None, *, whole_process: bool = False) -> None:
    """Entry point: the one place that turns outcomes into exit codes and messages.

    A SIGINT or SIGTERM before the outcome is settled ends the run with "kcheck: interrupted" and
    130 (143); after, it changes nothing (every output is committed). ``whole_process`` keeps it so
    until the interpreter ends; an in-process caller gets its signal handlers back."""
    global _settled, _caught
    _settled = _caught = False
    if whole_process:
        _quiet_missing_hashes()
    _ENDING.clear()
    _lost.clear()
    hooks = sys.unraisablehook, threading.excepthook
    sys.unraisablehook = _quiet_when_ending(hooks[0])
    threading.excepthook = _quiet_when_ending(hooks[1])
    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, _on_sigint)
    code = EXIT_OK
    try:
        try:
            guard_standard_streams()
            code = _outcome(argv)
            # From here a signal changes nothing (the handlers look): the outputs are written.
            _settled = True
        except (KeyboardInterrupt, click.exceptions.Abort):
            _caught = True
            code = EXIT_SIGINT
        except Terminated:
            _caught = True
            code = EXIT_SIGTERM
    # A second signal while the first's exception was being caught: the run ends all the same.
    except KeyboardInterrupt:
        _caught = True
        code = EXIT_SIGINT
    except Terminated:
        _caught = True
        code = EXIT_SIGTERM
    if _caught:
        _end_interrupted(code)
    if whole_process:
        # Ignored, not handled: at shutdown Python restores default actions for handled signals (a
        # Ctrl-C then killed us silently) but leaves ignored ones ignored.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        # In-process (tests): restore the caller's handlers and hooks, or each call re-wraps them.
        for signum, handler in zip((signal.SIGINT, signal.SIGTERM), previous, strict=True):
            if handler is not None:
                signal.signal(signum, handler)
        sys.unraisablehook, threading.excepthook = hooks
    sys.exit(code)


def _outcome(argv: list[str] | None) -> int:
    """Run the command; its exit code, with its message said. KeyboardInterrupt and Terminated go to
    :func:`main`, also where another exception stands for them."""
    code = EXIT_OK
    state["quiet"] = False  # until the command's Ui says otherwise
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", KcheckWarning)
        try:
            if COMPLETE_VAR in os.environ:
                from click.shell_completion import shell_complete

                code = shell_complete(cli, {}, "kcheck", COMPLETE_VAR, os.environ[COMPLETE_VAR])
            else:
                _invoke(sys.argv[1:] if argv is None else argv)
        except Exception as e:
            signalled = _from_a_signal(e)
            if signalled is not None:
                raise signalled from e
            code = _said(e)
        finally:
            # Warnings said so far, also on an interrupt: "kcheck: interrupted" comes last.
            for w in caught:
                if issubclass(w.category, KcheckWarning) and not state["quiet"]:
                    _err(f"kcheck: warning: {w.message}")
    return code


def _said(e: Exception) -> int:
    """The exit code of ``e``, its one line said; otherwise re-raised (a bug: its traceback)."""
    if isinstance(e, GateTripped):
        # -q is the silent form for a gate: the exit code says it.
        if not state["quiet"]:
            _err(f"kcheck: {e}")
        return EXIT_GATE
    if isinstance(e, BatchFailed):
        _err(f"kcheck: {e}")
        return EXIT_BATCH_ERRORS
    if isinstance(e, KcheckError):
        _err(f"kcheck: error: {e}")
        return EXIT_USAGE
    if isinstance(e, click.ClickException):
        hint = ""
        if isinstance(e, click.UsageError) and e.ctx is not None:
            hint = f" (see {e.ctx.command_path} --help)"
        _err(f"kcheck: error: {usage_message(e).rstrip('.')}{hint}")
        return EXIT_USAGE
    if isinstance(e, click.exceptions.Exit):
        return e.exit_code  # --help, --version
    if isinstance(e, BrokenPipeError):
        # `kcheck ... | head`: the reader left; not an error of ours.
        _silence_stdout()
        return EXIT_OK
    if isinstance(e, OSError):
        # Disk full or an I/O error on stdout or a file: say so in one line.
        where = f" {e.filename}" if getattr(e, "filename", None) else ""
        _err(f"kcheck: error: cannot write or read{where}: {e.strerror or e}")
        return EXIT_USAGE
    if isinstance(e, MemoryError) or _no_thread(e) or _no_room(e):
        _err("kcheck: error: out of memory; try a smaller --memory-limit or fewer --jobs")
        return EXIT_USAGE
    if isinstance(e, ImportError):
        failed = _failed_import(e)
        if failed is not None:
            _err(f"kcheck: error: {failed}")
            return EXIT_USAGE
    raise e


#: What importing a compiled module says where address space (``ulimit -v``) or memory ran out.
_OUT_OF_MEMORY = ("failed to map segment", "cannot allocate memory", "out of memory")


def _no_thread(e: Exception) -> bool:
    """Whether ``e`` is Python failing to start a thread (memory or ``ulimit -v``)."""
    return isinstance(e, RuntimeError) and str(e) == "can't start new thread"


def _no_room(e: Exception) -> bool:
    """Whether ``e`` is CPython out of memory without saying so: under ``ulimit -v`` an import or
    call can leave a SystemError ("error return without exception set", "returned NULL without
    setting an exception") and no MemoryError. Without a limit it stays a traceback: a bug."""
    text = str(e)
    return (
        isinstance(e, SystemError)
        and "without" in text
        and "exception" in text
        and resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY
    )


def _failed_import(e: ImportError) -> str | None:
    """The one line for a library that could not be loaded (numpy failing under ``ulimit -v``, a
    missing package); None where the failed import is kcheck's own (a bug: its traceback)."""
    package = _library(e)
    if package is None:
        return None
    chain: list[BaseException] = []
    cause: BaseException | None = e
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    texts = [str(x) for x in chain]
    # numpy wraps the loader's error in a page of advice that ends with it.
    said = [t.rsplit("Original error was:", 1)[-1].strip() for t in texts]
    reason = next((line for t in reversed(said) for line in t.splitlines() if line.strip()), "")
    if reason.startswith("/"):  # "/.../x.so: failed to map segment ...": the file's name will do
        reason = os.path.basename(reason)
    memory = any(isinstance(x, MemoryError) for x in chain) or any(
        m in t.lower() for t in texts for m in _OUT_OF_MEMORY
    )
    if memory:
        return (
            f"out of memory while loading {package} ({reason}); an address-space limit "
            "(ulimit -v) leaves too little room, see --memory-limit"
        )
    return f"cannot load {package}: {reason or type(e).__name__}"


def _library(e: ImportError) -> str | None:
    """The installed package whose import failed under kcheck's: the first frame past kcheck's last,
    or the module a kcheck import did not find; None where kcheck's own import failed."""
    own = os.path.dirname(os.path.abspath(kcheck.__file__))
    frames = [
        f.filename for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<")
    ]
    inside = [i for i, name in enumerate(frames) if os.path.abspath(name).startswith(own + os.sep)]
    for name in frames[inside[-1] + 1 if inside else 0 :]:
        parts = os.path.abspath(name).split(os.sep)
        for i, part in enumerate(parts[:-1]):
            if part in ("site-packages", "dist-packages"):
                return parts[i + 1].removesuffix(".py")
    top = (e.name or "").split(".")[0]
    return top if top and top != "kcheck" else None


def _from_a_signal(e: BaseException) -> BaseException | None:
    """The signal's exception (KeyboardInterrupt or Terminated) behind ``e``, once a signal came:
    Python wraps a KeyboardInterrupt in some places (``__set_name__`` during a lazy import:
    RuntimeError), and interrupted clean-up may fail otherwise."""
    if not _ENDING.is_set():
        return None
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, (KeyboardInterrupt, Terminated, click.exceptions.Abort)):
            return Terminated() if isinstance(cause, Terminated) else KeyboardInterrupt()
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _end_interrupted(code: int) -> NoReturn:
    """Say "kcheck: interrupted" and end the process now with ``code`` (130 or 143).

    Solver threads cannot be stopped, so it ends with ``os._exit``, which skips all clean-up: so
    first remove temporaries (after renames under way), end the worker pools and release their
    semaphores, and remove the fork server's temporary directory. A second signal must not cut this
    short."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _err("kcheck: interrupted")
    atomic.abandon()
    # Pool threads' errors during tear-down (EBADF) are silenced by main's hooks (_ENDING).
    from kcheck.parallel.workers import end_all_pools

    end_all_pools()
    _remove_multiprocessing_tempdir()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(code)


#: Set by the first SIGINT or SIGTERM: the run is ending, and what fails in tear-down is no news.
_ENDING = threading.Event()
#: Set where the exception a signal raised was lost (in a finaliser): the next one is raised.
_lost = threading.Event()
#: Set by main: outcome decided and outputs written, or the signal's exception caught.
_settled = False
_caught = False


def _quiet_when_ending(hook: Callable[[Any], object]) -> Callable[[Any], None]:
    """Wrap sys.unraisablehook or threading.excepthook to print nothing once a signal has arrived:
    "kcheck: interrupted" is a Ctrl-C's one line, though objects freed while it unwinds may fail in
    ``__del__`` (a Dask client's "IOLoop is closed"). Before a signal they print as usual."""

    def quiet(args: Any) -> None:
        if not _ENDING.is_set():
            hook(args)
        elif isinstance(args.exc_value, (KeyboardInterrupt, Terminated)):
            # Raised inside a __del__ or callback, which cannot pass it on: send it again.
            interrupt = isinstance(args.exc_value, KeyboardInterrupt)
            _lost.set()
            _send_again(signal.SIGINT if interrupt else signal.SIGTERM)

    return quiet


def _send_again(signum: int) -> None:
    """Re-deliver ``signum`` to the main thread, outside the finaliser that swallowed it."""

    def send() -> None:
        time.sleep(0.05)
        if not (_settled or _caught):
            signal.pthread_kill(threading.main_thread().ident or 0, signum)

    threading.Thread(target=send, name="kcheck-signal", daemon=True).start()


class _ClosedStream(io.TextIOBase):
    """Stands for a standard stream closed when kcheck started (``>&-``, ``<&-``): using it is a
    one-line usage error (exit 2), never a traceback."""

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


def guard_standard_streams() -> None:
    """Give closed standard file descriptors a /dev/null, and closed streams a stand-in: Python sets
    them to None (AttributeError on use), and the next open would take the free descriptor
    (LIBLINEAR printing to fd 1 into an output file). Writes to a closed stderr are dropped; reads
    from a closed stdin and writes to a closed stdout fail with one line."""
    for fd, name, mode in (
        (0, "stdin", os.O_RDONLY),
        (1, "stdout", os.O_WRONLY),
        (2, "stderr", os.O_WRONLY),
    ):
        try:
            os.fstat(fd)
        except OSError:
            pass
        else:
            if getattr(sys, name) is not None:
                continue
        closed_streams.add(name)
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


def _invoke(args: list[str]) -> None:
    """Run without click's ``main``, which exits 1 on a broken pipe and would own the exit codes."""
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
    """Terminated, as :func:`_on_sigint` raises KeyboardInterrupt."""
    if not _ignore(signum):
        _raised_now()
        raise Terminated()


def _on_sigint(signum: int, frame: object) -> None:
    """As Python's own handler (a KeyboardInterrupt), and marks the run as ending.

    Does nothing once main has settled the outcome or caught an interrupt; nothing yet while the
    main thread renames a set of outputs (the signal comes again after); nothing while the first
    one's clean-up runs (a Dask cluster closing or starting), unless the first was lost in a
    finaliser or the clean-up has taken :data:`CLEAN_UP_SECONDS`: then it is raised again."""
    if not _ignore(signum):
        _raised_now()
        raise KeyboardInterrupt


#: Seconds that the clean-up of an interrupt has before a further signal interrupts it too.
CLEAN_UP_SECONDS = 30.0
_raised_at = [0.0]


def _ignore(signum: int) -> bool:
    """Whether a signal handler does nothing now (see :func:`_on_sigint`)."""
    if _settled or _caught or atomic.defer_signal(signum):
        return True
    cleaning_up = time.monotonic() - _raised_at[0] < CLEAN_UP_SECONDS
    return _ENDING.is_set() and not _lost.is_set() and cleaning_up


def _raised_now() -> None:
    """Mark the run as ending, from now: a handler is about to raise."""
    _lost.clear()
    _raised_at[0] = time.monotonic()
    _ENDING.set()


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
