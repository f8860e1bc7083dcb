"""kcheck's own formats read back (check JSON, batch lines, term specs, path lists), bounded because
anything may stand in their place on disk (tampering, ``/dev/zero``, a torn line, 100,000-deep
``[[[...]]]``). Before ``json`` sees the text: bytes are capped (read in chunks), nesting depth
checked (else RecursionError), integer digits bounded (Python refuses over 4,300). Readers then
type-check every field with the helpers below. Anything else is a
:class:`~kcheck.errors.DataFormatError` naming file and line (exit 2)."""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Iterator
from typing import IO, Any, TypeGuard

from kcheck.defaults import METRICS, MODEL_KINDS, check_common
from kcheck.errors import DataFormatError, KcheckError
from kcheck.memory import default_memory_limit, size_text
from kcheck.verdict import READABLE_CHECK_SCHEMAS

__all__ = [
    "CHECK_JSON_BYTES",
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "PATH_LIST_BYTES",
    "RESULTS_BYTES",
    "RESULTS_LINE_BYTES",
    "brief",
    "byte_cap",
    "epsilon_problem",
    "is_count",
    "is_int",
    "is_number",
    "iter_lines",
    "loads",
    "ok_line_problem",
    "open_input",
    "read_all",
    "read_json",
]

#: Bytes read at a time: what an endless stream costs before a cap stops it.
CHUNK = 1 << 20
#: Parsed JSON takes up to this many times its text's bytes; memory-derived caps divide by it.
PARSE_FACTOR = 32
#: Nesting deeper than this is not kcheck's: its deepest (a batch line's explain terms) is 5.
MAX_DEPTH = 32
#: Digits of an integer (a sign aside): kcheck writes none longer than 2**64 (20 digits).
MAX_INT_DIGITS = 24

#: A check verdict (``verify --check-json``, ``expand --from-check``): kilobytes as written.
CHECK_JSON_BYTES = 16 << 20
#: A batch's results file (``report``, ``batch --resume``): a million data sets.
RESULTS_BYTES = 1 << 30
#: One line of those results: one check's JSON.
RESULTS_LINE_BYTES = 64 << 20
#: A ``--files-from`` list: a million paths of PATH_MAX bytes would be 4 GiB; this is ample.
PATH_LIST_BYTES = 256 << 20

#: A JSON string, maybe unclosed: never backtracks, so many ``\"`` stay linear.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?', re.DOTALL)
#: Brackets as ( and ), every other byte deleted: a bytes.translate, at C speed.
_PARENS = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


_BRIEF = reprlib.Repr()
_BRIEF.maxlevel = 2
_BRIEF.maxstring = _BRIEF.maxother = _BRIEF.maxlong = 40
_BRIEF.maxlist = _BRIEF.maxdict = 4


class _Refused(ValueError):
    """A token kcheck never writes (a NaN, a huge integer), raised from inside ``json``."""


def byte_cap(fixed: int, memory_limit: int | None = None) -> int:
    """A read's cap: ``fixed``, and no more than ``memory_limit`` (None: half RAM) holds parsed."""
    limit = memory_limit or default_memory_limit()
    return max(1 << 16, min(fixed, limit // PARSE_FACTOR))


def open_input(path: str, what: str) -> IO[bytes]:
    """``path`` opened for reading bytes; a failure is an error naming the file."""
    try:
        return open(path, "rb")
    except OSError as e:
        raise DataFormatError(path, None, f"cannot read {what}: {e.strerror or e}") from None


def _too_large(path: str, cap: int, what: str) -> DataFormatError:
    return DataFormatError(path, None, f"larger than {size_text(cap)}, too large for {what}")


def read_all(path: str, *, cap: int, what: str, stream: IO[bytes] | None = None) -> bytes:
    """All of ``path`` (or ``stream``) in chunks, refused once past ``cap`` (``/dev/zero``)."""
    f = stream if stream is not None else open_input(path, what)
    parts: list[bytes] = []
    n = 0
    try:
        while True:
            chunk = f.read(min(CHUNK, cap + 1 - n))
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)
            n += len(chunk)
            if n > cap:
                raise _too_large(path, cap, what)
    except OSError as e:
        raise DataFormatError(path, None, f"cannot read {what}: {e.strerror or e}") from None
    finally:
        if stream is None:
            f.close()


def iter_lines(
    f: IO[bytes], path: str, *, line_cap: int, total_cap: int, what: str
) -> Iterator[tuple[int, bytes | None]]:
    """Each line of ``f`` (no line end) with its 1-based number, in chunks. Over ``line_cap``: None,
    rest skipped; over ``total_cap`` in all: an error naming the file."""
    pending: list[bytes] = []
    held = 0
    lineno = 0
    skipping = False
    total = 0
    while True:
        try:
            chunk = f.read(CHUNK)
        except OSError as e:
            raise DataFormatError(path, None, f"cannot read {what}: {e.strerror or e}") from None
        if not chunk:
            break
        total += len(chunk)
        if total > total_cap:
            raise _too_large(path, total_cap, what)
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if not skipping:
                pending.append(piece)
                held += len(piece)
                if held > line_cap:
                    pending.clear()
                    held = 0
                    skipping = True
                    lineno += 1
                    yield lineno, None
            if end < 0:
                break
            if skipping:
                skipping = False
            else:
                lineno += 1
                yield lineno, b"".join(pending)
                pending.clear()
                held = 0
            start = end + 1
    if pending and not skipping:
        yield lineno + 1, b"".join(pending)


def nesting_depth(text: str) -> int:
    """How deep ``[`` and ``{`` nest outside strings as far as parsing goes: the depth up to
    MAX_DEPTH (0 where too few brackets), more than MAX_DEPTH beyond. Each C-speed pass removes
    every innermost pair, so passes equal the depth; the remainder has no pair (a stray closer stops
    a parser, unclosed openers each recurse a level)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0
    outside = _STRING.sub("", text).encode("utf-8", "surrogatepass")
    brackets = outside.translate(_PARENS, _NOT_BRACKETS).decode("ascii")
    passes = 0
    while "()" in brackets:
        if passes == MAX_DEPTH:
            return MAX_DEPTH + 1
        brackets = brackets.replace("()", "")
        passes += 1
    return passes if brackets.startswith(")") else passes + len(brackets)


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(text.lstrip('-')):,} digits")
    return int(text)


def _constant(name: str) -> float:
    raise _Refused(f"{name} (JSON has no such number)")


def loads(raw: bytes, path: str, line: int | None, what: str) -> Any:
    """One kcheck JSON document, bounded in depth and digits; else an error at ``path``:``line``."""

    def bad(why: str, at: int | None = line) -> DataFormatError:
        return DataFormatError(path, at, f"not {what}: {why}")

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("not UTF-8 text") from None
    if nesting_depth(text) > MAX_DEPTH:
        raise bad(f"nested more than {MAX_DEPTH} deep")
    try:
        return json.loads(text, parse_int=_int, parse_constant=_constant)
    except _Refused as e:
        raise bad(str(e)) from None
    except json.JSONDecodeError as e:
        raise bad(e.msg, line if line is not None else e.lineno) from None
    except RecursionError:
        raise bad(f"nested more than {MAX_DEPTH} deep") from None


def read_json(path: str, *, cap: int, what: str, stream: IO[bytes] | None = None) -> Any:
    """A whole file holding one JSON document (a check verdict, a term spec)."""
    return loads(read_all(path, cap=cap, what=what, stream=stream), path, None, what)


# --- types, before use ------------------------------------------------------------------------


def is_int(x: Any) -> TypeGuard[int]:
    """An integer, and not a bool (``True == 1`` in Python, not in kcheck's formats)."""
    return type(x) is int


def is_count(x: Any) -> TypeGuard[int]:
    return is_int(x) and x >= 0


def is_number(x: Any) -> TypeGuard[int | float]:
    """A finite real number, not a bool."""
    return (type(x) is int or type(x) is float) and math.isfinite(x)


def brief(x: Any) -> str:
    """A value as a message shows it: its repr, cut short (a field may hold megabytes)."""
    return _BRIEF.repr(x)


def epsilon_problem(x: Any) -> str | None:
    """What is wrong with a recorded epsilon, by the rule ``--epsilon`` is checked with."""
    if not is_number(x):
        return f"epsilon must be a number, got {brief(x)}"
    try:
        check_common(epsilon=float(x), scaling=None, jobs=1, memory_limit=None)
    except KcheckError as e:
        return str(e).removeprefix("--")
    return None


def _gap_problem(name: str, c: Any) -> str | None:
    if not isinstance(c, dict):
        return f"checkers.{name} is not an object"
    if not isinstance(c.get("status", ""), str):
        return f"checkers.{name}.status is not a string"
    gap, ci = c.get("gap"), c.get("gap_ci95")
    if gap is not None and not is_number(gap):
        return f"checkers.{name}.gap is not a number"
    if ci is not None and not (isinstance(ci, list) and len(ci) == 2 and all(map(is_number, ci))):
        return f"checkers.{name}.gap_ci95 is not two numbers"
    if gap is not None and ci is None:
        return f"checkers.{name} has a gap without its gap_ci95"
    return None


def _data_problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return "data is not an object"
    for key in ("rows", "features"):
        if not is_count(data.get(key)):
            return f"data.{key} is not a count"
    if not isinstance(data.get("sha256"), str):
        return "data.sha256 is not a string"
    sampling = data.get("sampling")
    if sampling is not None:
        if not isinstance(sampling, dict) or not isinstance(sampling.get("sampled"), bool):
            return "data.sampling is not a sampling block"
        if sampling["sampled"] and not all(
            is_count(data.get(k)) for k in ("rows_used", "rows_read")
        ):
            return "data.rows_used and data.rows_read must be counts"
    return None


def ok_line_problem(line: dict[str, Any]) -> str | None:
    """What keeps an ok batch line from use, or None: every field read is of its type."""
    if not isinstance(line.get("name"), str) or line.get("status") != "ok":
        return '"name" and "status" must be a string and "ok"'
    version = line.get("schema_version")
    if not is_int(version) or version not in READABLE_CHECK_SCHEMAS:
        return f"schema_version {brief(version)} is not one this kcheck reads"
    if line.get("verdict") not in MODEL_KINDS or line.get("margin") not in ("clear", "borderline"):
        return '"verdict" and "margin" are missing or unknown'
    if line.get("metric", METRICS[0]) not in METRICS:
        return f'"metric" must be one of {", ".join(METRICS)}'
    if not isinstance(line.get("deciding_checker"), (str, type(None))):
        return '"deciding_checker" is not a string'
    problem = epsilon_problem(line.get("epsilon"))
    if problem is not None:
        return problem
    seconds = line.get("seconds")
    if seconds is not None and not (is_number(seconds) and seconds >= 0):
        return '"seconds" is not a number of seconds'
    if not is_int(line.get("seed", 0)):
        return '"seed" is not an integer'
    problem = _data_problem(line.get("data"))
    if problem is not None:
        return problem
    test = line.get("test")
    if test is not None and not isinstance(test, dict):
        return '"test" is not an object'
    checkers = line.get("checkers")
    if not isinstance(checkers, dict):
        return '"checkers" is not an object'
    for name, c in checkers.items():
        problem = _gap_problem(name, c)
        if problem is not None:
            return problem
    warnings = line.get("warnings", [])
    if not (isinstance(warnings, list) and all(isinstance(w, str) for w in warnings)):
        return '"warnings" is not a list of strings'
    return None
