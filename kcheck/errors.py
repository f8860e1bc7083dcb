"""Domain errors: everything a user can cause is a :class:`KcheckError`, which the CLI alone turns
into one line and exit 2 (anything else is a bug with its traceback). It is a ValueError, so Python
callers of :func:`kcheck.check` catch bad input as usual."""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from collections.abc import Iterator


class KcheckError(ValueError):
    """An error caused by the user's input or options (exit code 2; a ValueError in Python)."""


#: What would break a one-line message or the terminal: control characters (C0, DEL, C1), Unicode
#: line and paragraph separators, lone surrogates (undecodable file-name bytes).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    code = ord(c)
    if c in _NAMED:
        return _NAMED[c]
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte of a file name: show the byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with such characters escaped as Python writes them (``\\n``, ``\\xff``)."""
    return _UNPRINTABLE.sub(_escape, text)


class DataFormatError(KcheckError):
    """A data, range or model file is wrong: path and line, as ``data.svm:17: ...``."""

    def __init__(self, path: str | os.PathLike[str] | None, line: int | None, message: str):
        self.path = os.fspath(path) if path is not None else None
        self.line = line
        self.message = message
        where = printable(self.path) if self.path else "<input>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}")


class EngineError(KcheckError):
    """LIBLINEAR or LIBSVM refused the problem or failed."""


class TimeLimitReached(Exception):
    """The ``--time-limit`` deadline passed; the step that raises it is reported as skipped."""


class KcheckWarning(UserWarning):
    """Something the user should know that does not stop the run (shown on stderr)."""


@contextlib.contextmanager
def recorded_warnings() -> Iterator[list[str]]:
    """Collect the KcheckWarnings' messages issued inside, for the JSON, so ``-q`` loses none."""
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", KcheckWarning)
        try:
            yield notes
        finally:
            others = []
            for w in caught:
                if issubclass(w.category, KcheckWarning):
                    notes.append(str(w.message))
                else:
                    others.append(w)
    for w in others:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
