"""Domain errors.

Every error a user can cause is a :class:`KcheckError`. The CLI turns these, and only these,
into a one-line message and exit code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os


class KcheckError(Exception):
    """An error caused by the user's input or options (exit code 2)."""


class DataFormatError(KcheckError):
    """A data, range or model file is not what it should be.

    Carries the path and 1-based line number so the message reads ``data.svm:17: ...``.
    """

    def __init__(self, path: str | os.PathLike[str] | None, line: int | None, message: str):
        self.path = os.fspath(path) if path is not None else None
        self.line = line
        self.message = message
        where = self.path or "<input>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}")


class EngineError(KcheckError):
    """LIBLINEAR or LIBSVM refused the problem or failed."""


class TimeLimitReached(Exception):
    """The ``--time-limit`` deadline passed; the step that raises it is reported as skipped."""


class KcheckWarning(UserWarning):
    """Something the user should know that does not stop the run (shown on stderr)."""
