"""The ``kcheck`` command and ``python -m kcheck``: Ctrl-C handled from the first instruction.

Importing the command line (click, rich, every command) takes a tenth of a second or more,
and a SIGINT meanwhile printed a KeyboardInterrupt traceback (or, caught in a finaliser, was
lost). So before anything else is imported, SIGINT and SIGTERM end the process at once with
"kcheck: interrupted" and 130 (143): nothing has been written and no worker runs yet. The
command line's :func:`~kcheck.cli.app.main` replaces these handlers with its own.

``_signal`` is the C module under :mod:`signal`: built into the interpreter, it is there at
once, where importing :mod:`signal` reads a file (and an interrupt could land in that).

A worker process of the ``kcheck`` command runs the command's script again (as
``__mp_main__``, which imports this module) while multiprocessing prepares it. There the
handlers are not installed, nor the command line imported: a worker is no command, and one
that caught SIGTERM this way ignored it for as long as a LIBLINEAR call ran (a Python handler
waits for the call to return), and said "kcheck: interrupted" a second time.
"""

import _signal
import os
import sys


def _interrupted_while_starting(signum: int, frame: object) -> None:
    """Before main() runs there is nothing to clean up: say so and end."""
    try:
        os.write(2, b"kcheck: interrupted\n")
    except OSError:
        pass
    os._exit(130 if signum == _signal.SIGINT else 143)


def _preparing_a_worker() -> bool:
    """Whether multiprocessing is preparing this process as a worker (it has imported itself
    by then; the command, this early, has not)."""
    process = sys.modules.get("multiprocessing.process")
    current = getattr(process, "current_process", None)
    return current is not None and bool(getattr(current(), "_inheriting", False))


if not _preparing_a_worker():
    _signal.signal(_signal.SIGINT, _interrupted_while_starting)
    _signal.signal(_signal.SIGTERM, _interrupted_while_starting)

    from kcheck.cli import main as _main  # after the handlers, on purpose


def main() -> None:
    """The ``kcheck`` command (``[project.scripts]``).

    The interpreters it starts (the fork server of its worker processes, a local Dask
    cluster's workers) run with the working directory off ``sys.path`` (PYTHONSAFEPATH): a
    fork server started with ``-c`` would put it first, and a ``kcheck/`` folder there (a
    checkout, a data directory of that name) would stand in for the installed package in every
    worker ("cannot import name '__version__' from 'kcheck'").
    """
    os.environ.setdefault("PYTHONSAFEPATH", "1")
    _main(whole_process=True)


if __name__ == "__main__":
    main()
