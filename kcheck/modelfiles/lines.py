"""The lines and tokens of a model file, checked, with file and line in every error: numbered lines
under a length cap, a ``key value...`` header with each key once, integer and number tokens in range
and finite. :mod:`kcheck.modelfiles.checked` reads each format with them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO, Protocol

import numpy as np

from kcheck.errors import DataFormatError
from kcheck.memory import line_too_long, size_text

INT_MAX = 2**31 - 1


_INT = re.compile(rb"[+-]?[0-9]+\Z")
_FLOAT = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_NONFINITE = re.compile(rb"[+-]?(?:nan|inf|infinity)(?:\([^)]*\))?\Z", re.IGNORECASE)
_BLOCK = 1 << 22


class Source(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...

    def readline(self, n: int = -1, /) -> bytes: ...


class Reader:
    """Numbered lines of a binary file, each at most ``max_line`` bytes (/dev/zero has none)."""

    def __init__(self, f: Source, path: str, max_line: int) -> None:
        self.f = f
        self.path = path
        self.max_line = max_line
        self.lineno = 0

    def error(self, message: str, line: int | None = -1) -> DataFormatError:
        return DataFormatError(self.path, self.lineno if line == -1 else line, message)

    def readline(self) -> bytes | None:
        """The next line without its end, or None at the end of the file."""
        line = self.f.readline(self.max_line + 1)
        if not line:
            return None
        self.lineno += 1
        if len(line) > self.max_line and not line.endswith(b"\n"):
            raise line_too_long(self.path, self.lineno, self.max_line)
        return line.rstrip(b"\r\n")

    def block(self) -> bytes:
        """About _BLOCK bytes ending at a line end (or the end of the file); b"" at the end."""
        data = self.f.read(_BLOCK)
        if not data:
            return b""
        if not data.endswith(b"\n"):
            tail = len(data) - (data.rfind(b"\n") + 1)
            rest = self.f.readline(max(0, self.max_line + 1 - tail))
            if tail + len(rest) > self.max_line:
                raise line_too_long(self.path, self.lineno + data.count(b"\n") + 1, self.max_line)
            data += rest
        return data

    def rest_is_blank(self) -> None:
        """After the body only blank lines may follow; the C loaders would read more."""
        while (line := self.readline()) is not None:
            if line.strip():
                raise self.error(f"expected the end of the file, found {shown(line)}")


def shown(token: bytes) -> str:
    text = token.decode("ascii", "replace")
    return repr(text if len(text) <= 40 else text[:37] + "...")


def int_value(r: Reader, token: bytes, what: str, lo: int, hi: int = INT_MAX) -> int:
    if not _INT.match(token):
        raise r.error(f"expected an integer for {what}, found {shown(token)}")
    value = int(token)
    if not lo <= value <= hi:
        raise r.error(f"{what} must lie in [{lo}, {hi}], found {value}")
    return value


def float_value(r: Reader, token: bytes, what: str) -> float:
    if _FLOAT.match(token):
        value = float(token)
        if np.isfinite(value):
            return value
    if _NONFINITE.match(token) or _FLOAT.match(token):
        raise r.error(f"expected a finite number for {what}, found {shown(token)}")
    raise r.error(f"expected a number for {what}, found {shown(token)}")


def float_values(r: Reader, tokens: list[bytes], count: int, what: str) -> np.ndarray:
    if len(tokens) != count:
        raise r.error(
            f"expected {count} value{'s' if count != 1 else ''} for {what}, found {len(tokens)}"
        )
    return np.array([float_value(r, t, what) for t in tokens], dtype=np.float64)


def int_values(r: Reader, tokens: list[bytes], count: int, what: str, lo: int) -> np.ndarray:
    if len(tokens) != count:
        raise r.error(
            f"expected {count} value{'s' if count != 1 else ''} for {what}, found {len(tokens)}"
        )
    return np.array([int_value(r, t, what, lo) for t in tokens], dtype=np.int64)


def over_limit(r: Reader, what: str, need: int, limit: int) -> DataFormatError:
    return r.error(
        f"{what} would need {size_text(need)}, over the memory limit of {size_text(limit)}"
    )


class Tee:
    """A binary reader that writes what it reads to a second file."""

    def __init__(self, src: BinaryIO, sink: BinaryIO) -> None:
        self.src = src
        self.sink = sink

    def read(self, n: int = -1) -> bytes:
        data = self.src.read(n)
        self.sink.write(data)
        return data

    def readline(self, n: int = -1) -> bytes:
        data = self.src.readline(n)
        self.sink.write(data)
        return data


def header_lines(r: Reader) -> Iterator[tuple[bytes, list[bytes], int]]:
    """(key, values, line) for each header line, blank lines skipped, each key at most once."""
    seen: dict[bytes, int] = {}
    while (line := r.readline()) is not None:
        tokens = line.split()
        if not tokens:
            continue
        key = tokens[0]
        if key in seen:
            raise r.error(f"{shown(key)} appears twice (first on line {seen[key]})")
        seen[key] = r.lineno
        yield key, tokens[1:], r.lineno


def one_value(r: Reader, key: bytes, values: list[bytes]) -> bytes:
    if len(values) != 1:
        raise r.error(f"expected one value after {key.decode()}, found {len(values)}")
    return values[0]
