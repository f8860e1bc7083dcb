"""The ``kcheck`` group and its entry point: the one place that turns outcomes into exit codes.

Status goes to stderr (rich), data to stdout (JSON). Exit codes are decided here, in
:func:`main`: 0 done, 1 a gate tripped, 2 usage error or bad input, 3 some data sets of a
batch failed, 130 SIGINT, 143 SIGTERM. Domain errors (:class:`KcheckError`) become one-line
messages here and only here.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

import click

from kcheck import __version__, atomic
from kcheck.cli.outputs import closed_streams
from kcheck.cli.ui import state
from kcheck.errors import KcheckError, KcheckWarning

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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="kcheck")
def cli() -> None:
    """Is a Gaussian (RBF) kernel classifier clearly better than a linear one for this data?

    \b
    Shell completion (bash; zsh and fish likewise with zsh_source, fish_source):
      eval "$(_KCHECK_COMPLETE=bash_source kcheck)"
    """


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


def main(argv: list[str] | None = None) -> None:
    """Entry point: the one place that turns outcomes into exit codes and messages."""
    guard_standard_streams()
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, _on_sigint)
    hooks = sys.unraisablehook, threading.excepthook
    sys.unraisablehook = _quiet_when_ending(hooks[0])
    threading.excepthook = _quiet_when_ending(hooks[1])
    code = EXIT_OK
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", KcheckWarning)
        try:
            if COMPLETE_VAR in os.environ:
                from click.shell_completion import shell_complete

                code = shell_complete(cli, {}, "kcheck", COMPLETE_VAR, os.environ[COMPLETE_VAR])
            else:
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
            code = EXIT_USAGE
            hint = ""
            if isinstance(e, click.UsageError) and e.ctx is not None:
                hint = f" (see {e.ctx.command_path} --help)"
            _err(f"kcheck: error: {usage_message(e).rstrip('.')}{hint}")
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
                if issubclass(w.category, KcheckWarning) and not state["quiet"]:
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
        # An exception a pool's own thread meets while the pools are torn down under it (a
        # pipe closed from another thread: EBADF, seen once under load) is silenced by the
        # hooks installed above, as the signal set _ENDING.
        from kcheck.workers import end_all_pools

        end_all_pools()
        _remove_multiprocessing_tempdir()
        sys.stderr.flush()
        os._exit(code)
    # No signal came: the caller's hooks again (main runs in-process in tests and would wrap
    # them once more at each call).
    sys.unraisablehook, threading.excepthook = hooks
    sys.exit(code)


#: Set by the first SIGINT or SIGTERM: from then on the run is ending, and what is torn down
#: under it is not news to the user.
_ENDING = threading.Event()


def _quiet_when_ending(hook: Callable[[Any], object]) -> Callable[[Any], None]:
    """Wrap sys.unraisablehook or threading.excepthook so that, once a signal has arrived,
    they print nothing: "kcheck: interrupted" is the one line a Ctrl-C gives. While the
    KeyboardInterrupt unwinds, objects of the run are freed and may fail in ``__del__`` (a Dask
    client whose event loop was closed first printed "Exception ignored in ... IOLoop is
    closed" before that line); before a signal they print as usual."""

    def quiet(args: Any) -> None:
        if not _ENDING.is_set():
            hook(args)

    return quiet


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


def guard_standard_streams() -> None:
    """Give closed standard file descriptors a /dev/null, and closed streams a stand-in.

    Python sets a closed standard stream to None, so the first use raised AttributeError
    (traceback, exit 1). Worse, the next file opened would get the free descriptor: LIBLINEAR
    printing to fd 1 would then write into an output file. Writes to a closed stderr are
    dropped (messages are lost, exit codes stay true); reads from a closed stdin and writes
    to a closed stdout fail with one line.
    """
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
    _ENDING.set()
    raise Terminated()


def _on_sigint(signum: int, frame: object) -> None:
    """As Python's own handler (a KeyboardInterrupt), and marks the run as ending."""
    _ENDING.set()
    raise KeyboardInterrupt


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
