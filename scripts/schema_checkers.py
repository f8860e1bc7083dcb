"""Regenerate the checker-specific parts of the JSON schemas from the checker registry.

The schemas name every checker in enums and property lists; this writes those parts from
kcheck.checkers.registry, so that the registry stays the one place a checker is named. Only
those parts change: the rest of each file, and a checker's hand-written ``$defs`` entry (its
own fields), are kept byte for byte. A checker without an entry gets an open one to refine by
hand; the entry of a checker no longer in the registry goes.

    python scripts/schema_checkers.py          # rewrite the files
    python scripts/schema_checkers.py --check  # exit 1 where a file is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcheck.checkers import registry

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "kcheck" / "schema"
CHECK, LINE = "check.schema.json", "batch-line.schema.json"
Path_ = tuple[str, ...]


@dataclass(frozen=True)
class Checkers:
    """What the generated parts depend on: the ``--checkers`` names in the help's order, the
    exact comparison's name, and each checker's summary (a new ``$defs`` entry's text)."""

    names: tuple[str, ...]
    exact: str
    summaries: dict[str, str]

    @classmethod
    def from_registry(cls) -> Checkers:
        """Read at call time, so that a registry patched in a test is what is written."""
        summaries = {n: registry.CHECKERS[n].summary for n in registry.NAMES}
        return cls(tuple(registry.NAMES), registry.EXACT.name, summaries)

    @property
    def methods(self) -> tuple[str, ...]:
        return (*self.names, self.exact)


# --- where each value lies in the text ------------------------------------------------------

_SCALAR = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")
_SPACE = re.compile(r"\s*")


@dataclass
class Spans:
    """Each value's [start, end) in the text and, for an object's member, its key's start."""

    value: dict[Path_, tuple[int, int]]
    key: dict[Path_, int]


def spans(text: str) -> Spans:
    out = Spans({}, {})
    _scan(text, _SPACE.match(text, 0).end(), (), out)  # type: ignore[union-attr]
    return out


def _skip(text: str, i: int) -> int:
    return _SPACE.match(text, i).end()  # type: ignore[union-attr]


def _scan(text: str, i: int, path: Path_, out: Spans) -> int:
    """Record the value at ``i`` and everything in it; return where it ends."""
    start, c = i, text[i]
    if c == '"':
        _, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
    elif c in "[{":
        close, k = ("]" if c == "[" else "}"), 0
        i = _skip(text, i + 1)
        while text[i] != close:
            if c == "{":
                key_start = i
                key, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
                i = _skip(text, _skip(text, i) + 1)  # past the colon
                out.key[path + (key,)] = key_start
                i = _scan(text, i, (*path, key), out)
            else:
                i = _scan(text, i, (*path, str(k)), out)
                k += 1
            i = _skip(text, i)
            if text[i] == ",":
                i = _skip(text, i + 1)
        i += 1
    else:
        m = _SCALAR.match(text, i)
        if m is None:
            raise ValueError(f"not JSON at offset {i}")
        i = m.end()
    out.value[path] = (start, i)
    return i


# --- the generated parts ---------------------------------------------------------------------


def _indent(text: str, at: int) -> int:
    """The indentation of the line holding offset ``at``."""
    line = text[text.rfind("\n", 0, at) + 1 : at]
    return len(line) - len(line.lstrip(" "))


def _object(members: dict[str, Any], indent: int) -> str:
    """An object one member a line, each member's value on its line, as the files write it."""
    pad = " " * (indent + 2)
    inner = ",\n".join(f"{pad}{json.dumps(k)}: {json.dumps(v)}" for k, v in members.items())
    return "{\n" + inner + "\n" + " " * indent + "}"


def _parts(file: str, c: Checkers) -> dict[Path_, Any]:
    """Each generated value by its path: a list is written on one line, a dict one member a
    line."""
    if file == LINE:
        return {("$defs", "options", "properties", "checkers", "items", "enum"): list(c.names)}
    decision = ("$defs", "decision", "properties")
    check = ("$defs", "check", "properties")
    test = ("$defs", "test", "properties")
    own = {n: {"$ref": f"#/$defs/{n}"} for n in c.methods}
    return {
        (*decision, "deciding", "enum"): [None, *c.methods],
        (*decision, "straddling", "items", "enum"): list(c.methods),
        (*decision, "cut_short", "items", "properties", "checker", "enum"): list(c.names),
        (*check, "deciding_checker", "enum"): [None, *c.methods],
        (*check, "checkers", "properties"): own,
        ("$defs", "plan", "properties", "steps", "items", "properties", "name", "enum"): [
            "linear",
            *c.methods,
        ],
        ("$defs", "second_fold", "properties", "checkers", "properties"): {
            n: {"$ref": "#/$defs/second_fold_checker"} for n in c.names
        },
        (*test, "accuracy", "properties"): {
            "linear": {"$ref": "#/$defs/test_accuracy"},
            **{n: {"$ref": "#/$defs/test_accuracy"} for n in c.methods},
        },
        (*test, "score", "properties"): {
            "linear": {"$ref": "#/$defs/score"},
            **{n: {"$ref": "#/$defs/score"} for n in c.methods},
        },
    }


def _own_defs(text: str, where: Spans, c: Checkers) -> tuple[int, int, str]:
    """The span of the checkers' own ``$defs`` entries (one block, in the files' order) and
    what replaces it: each entry kept as written, a new checker's an open one."""
    old = list(json.loads(text)["$defs"]["check"]["properties"]["checkers"]["properties"])
    defs = list(json.loads(text)["$defs"])
    first = min(defs.index(n) for n in old)
    if sorted(defs[first : first + len(old)]) != sorted(old):
        raise ValueError(f"{CHECK}: the checkers' $defs entries are not one block")
    start = where.key[("$defs", defs[first])]
    end = where.value[("$defs", defs[first + len(old) - 1])][1]
    indent = _indent(text, start)
    entries = []
    for name in c.methods:
        if name in old:
            entries.append(text[where.key[("$defs", name)] : where.value[("$defs", name)][1]])
        else:
            stub = {"description": c.summaries.get(name, name), "$ref": "#/$defs/checker"}
            entries.append(f"{json.dumps(name)}: {_object(stub, indent)}")
    return start, end, (",\n\n" + " " * indent).join(entries)


def generate(file: str, text: str, c: Checkers) -> str:
    """``text`` (one of the two schema files) with its checker-specific parts from ``c``."""
    where = spans(text)
    edits = []
    for path, value in _parts(file, c).items():
        start, end = where.value[path]
        new = json.dumps(value) if isinstance(value, list) else _object(value, _indent(text, start))
        edits.append((start, end, new))
    if file == CHECK:
        edits.append(_own_defs(text, where, c))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def schemas(c: Checkers | None = None, directory: Path = SCHEMA_DIR) -> dict[str, str]:
    """The two files as generated from ``c`` (default: the registry), by file name."""
    c = c or Checkers.from_registry()
    return {f: generate(f, (directory / f).read_text(encoding="utf-8"), c) for f in (CHECK, LINE)}


def stale(directory: Path = SCHEMA_DIR) -> list[str]:
    """The files whose checker-specific parts differ from the registry's."""
    fresh = schemas(directory=directory)
    return [f for f, text in fresh.items() if (directory / f).read_text(encoding="utf-8") != text]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 where a file is stale")
    args = ap.parse_args(argv)
    if args.check:
        old = stale()
        for f in old:
            print(f"{f} is stale: run python scripts/schema_checkers.py", file=sys.stderr)
        return 1 if old else 0
    for f, text in schemas().items():
        (SCHEMA_DIR / f).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
