"""The per-line reference parser of LIBSVM text, with the format's rules and every error message:
chunks :mod:`kcheck.io._parse` cannot prove well formed are parsed here, with the same result or a
:class:`DataFormatError` at the exact line."""

from __future__ import annotations

import math
import re

import numpy as np

from kcheck.errors import DataFormatError
from kcheck.io._parse import MAX_INDEX, Part

__all__ = ["slow_chunk"]

_NUMBER = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DIGITS = re.compile(rb"[0-9]+")
_CONTROL = re.compile(rb"[\x00-\x08\x0e-\x1f\x7f]")
_NONFINITE = (b"nan", b"inf", b"infinity")


def _show(tok: bytes) -> str:
    text = tok.decode("utf-8", "backslashreplace")
    if len(text) > 40:
        text = text[:37] + "..."
    return "'" + text + "'"


def _number(tok: bytes, name: str, line: int, what: str) -> float:
    if _NUMBER.fullmatch(tok):
        v = float(tok)
        if math.isinf(v):
            raise DataFormatError(
                name,
                line,
                f"expected a finite {what}, got {_show(tok)}, which overflows to infinity",
            )
        return v
    if tok.lower().lstrip(b"+-") in _NONFINITE:
        raise DataFormatError(
            name, line, f"expected a finite {what}, got {_show(tok)} (NaN and inf are not allowed)"
        )
    raise DataFormatError(name, line, f"expected a numeric {what}, got {_show(tok)}")


def _check_text(line: bytes, name: str, ln: int) -> None:
    bad = _CONTROL.search(line)
    if bad:
        raise DataFormatError(
            name,
            ln,
            f"expected text, got control byte 0x{line[bad.start()]:02x} at column "
            f"{bad.start() + 1} (binary data?)",
        )
    if not line.isascii():
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataFormatError(
                name,
                ln,
                f"expected UTF-8 text, got undecodable byte 0x{line[e.start]:02x} at column "
                f"{e.start + 1} (binary data?)",
            ) from None


def _index(tok: bytes, full: bytes, name: str, ln: int, zero_based: bool) -> int:
    if not _DIGITS.fullmatch(tok):
        if tok[:1] == b"-" and _DIGITS.fullmatch(tok[1:]):
            least = 0 if zero_based else 1
            raise DataFormatError(
                name, ln, f"expected an index >= {least}, got negative index {_show(tok)}"
            )
        if not tok:
            raise DataFormatError(name, ln, f"expected 'index:value', got {_show(full)}")
        raise DataFormatError(name, ln, f"expected an integer index, got {_show(tok)}")
    idx = int(tok)
    if idx > MAX_INDEX:
        raise DataFormatError(
            name, ln, f"expected an index of at most {MAX_INDEX}, got {idx} (too large)"
        )
    if zero_based:
        return idx
    if idx == 0:
        raise DataFormatError(
            name,
            ln,
            "expected indices starting at 1, got index 0; "
            "if this file is 0-based, read it with --zero-based",
        )
    return idx - 1


def slow_chunk(text: bytes, first_line: int, name: str, zero_based: bool) -> Part:
    """Parse text line by line; raises DataFormatError at the first bad line."""
    lines = text.split(b"\n")
    if text.endswith(b"\n"):
        lines.pop()
    labels: list[float] = []
    counts: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for i, line in enumerate(lines):
        ln = first_line + i
        _check_text(line, name, ln)
        hash_at = line.find(b"#")
        if hash_at >= 0:
            line = line[:hash_at]
        toks = line.split()
        if not toks:
            continue
        head = toks[0]
        if b"," in head:
            raise DataFormatError(
                name, ln, f"expected one label, got {_show(head)} (multi-label is not supported)"
            )
        if b":" in head:
            raise DataFormatError(name, ln, f"expected a label first, got {_show(head)}")
        label = _number(head, name, ln, "label")
        row: dict[int, float] = {}
        for tok in toks[1:]:
            if tok.startswith(b"qid:"):
                if not _DIGITS.fullmatch(tok[4:]):
                    raise DataFormatError(name, ln, f"expected 'qid:<integer>', got {_show(tok)}")
                continue
            if tok.count(b":") != 1:
                raise DataFormatError(name, ln, f"expected 'index:value', got {_show(tok)}")
            si, sv = tok.split(b":")
            j = _index(si, tok, name, ln, zero_based)
            if not sv:
                raise DataFormatError(name, ln, f"expected 'index:value', got {_show(tok)}")
            if j in row:
                raise DataFormatError(
                    name, ln, f"expected each index once, got index {int(si)} twice"
                )
            row[j] = _number(sv, name, ln, "value")
        labels.append(label)
        counts.append(len(row))
        for j in sorted(row):
            cols.append(j)
            vals.append(row[j])
    return Part(
        np.array(labels, dtype=np.float64),
        np.array(counts, dtype=np.int64),
        np.array(cols, dtype=np.int64),
        np.array(vals, dtype=np.float64),
        text.count(b"\n"),
    )
