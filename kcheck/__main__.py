"""The ``kcheck`` command and ``python -m kcheck``: Ctrl-C handled from the first instruction.

Importing the command line takes 0.1 s or more, and a SIGINT then printed a traceback, so before
anything else SIGINT and SIGTERM end the process at once with "kcheck: interrupted" and 130 (143);
:func:`~kcheck.cli.app.main` later installs its own. ``_signal`` is the built-in C module under
:mod:`signal` (no file read). A worker re-running the script as ``__mp_main__`` installs none and
imports no CLI: a Python handler there ignored SIGTERM during a LIBLINEAR call and said
"interrupted" twice."""

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
    """Whether multiprocessing is preparing this process as a worker (the command has not)."""
    process = sys.modules.get("multiprocessing.process")
    current = getattr(process, "current_process", None)
    return current is not None and bool(getattr(current(), "_inheriting", False))


if not _preparing_a_worker():
    _signal.signal(_signal.SIGINT, _interrupted_while_starting)
    _signal.signal(_signal.SIGTERM, _interrupted_while_starting)

    from kcheck.cli import main as _main  # after the handlers, on purpose


def main() -> None:
    """The ``kcheck`` command (``[project.scripts]``). Its interpreters (fork server, Dask workers)
    run with PYTHONSAFEPATH, so a local ``kcheck/`` folder cannot shadow the package."""
    os.environ.setdefault("PYTHONSAFEPATH", "1")
    _main(whole_process=True)


if __name__ == "__main__":
    main()
