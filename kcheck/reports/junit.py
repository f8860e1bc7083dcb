"""``--junit FILE``: the verdicts as JUnit XML, which CI systems show as test results. One
``<testsuite name="kcheck">`` with the ``timestamp`` (run start, UTC, no zone) and ``hostname``
Ant's schema requires; a ``<testcase>`` per ``check`` or ``batch`` line, named by its ``name``. A
``--fail-on`` match is a ``<failure>`` (message: the verdict in plain words), an unchecked data set
an ``<error>``, a file left out ``<skipped>``. Verdict, margin and gaps go in ``<system-out>`` (JSON
null as ``null``, a missing gap ``-``), since the common schema (tests/data/junit-10.xsd) has
``<properties>`` only on the suite, where the options go. The plain words come in as a function: no
CLI import."""

from __future__ import annotations

import datetime
import os
import socket
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from typing import Any

from kcheck import __version__
from kcheck.io.atomic import atomic_open

#: The verdict of one line in plain words (the CLI's ``verdict_summary``).
Summary = Callable[[dict[str, Any]], str]


def _plain(line: dict[str, Any]) -> str:
    return f"verdict: {line['verdict']} ({line['margin']})"


def _seconds(x: Any) -> str:
    return f"{float(x or 0.0):.3f}"


def _text(value: Any) -> str:
    """Text XML 1.0 can hold: most control characters become U+FFFD; lone surrogates (a file name's
    undecodable bytes) show as ``\\xff`` as kcheck.errors.printable does, others as ``\\udXXX``."""
    return "".join(_character(c) for c in str(value))


def _character(c: str) -> str:
    code = ord(c)
    if 0xD800 <= code <= 0xDFFF:
        return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"
    if c in "\t\n\r" or code >= 0x20 and c not in "\ufffe\uffff":
        return c
    return "\ufffd"


def _points(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.2f}"


def _value(x: Any) -> str:
    """A JSON value as the JSON writes it where Python's text would differ: ``null``."""
    return "null" if x is None else str(x)


def case_output(line: dict[str, Any]) -> str:
    """An ok line's ``<system-out>``: verdict, margin, deciding checker, gaps (``-``: none)."""
    out = [
        f"verdict: {_value(line['verdict'])}",
        f"margin: {_value(line['margin'])}",
        f"deciding_checker: {_value(line.get('deciding_checker'))}",
        f"epsilon: {_value(line['epsilon'])}",
        f"metric: {line.get('metric') or 'accuracy'}",
    ]
    for name, c in (line.get("checkers") or {}).items():
        ci = c.get("gap_ci95")
        interval = f" (95% CI {_points(ci[0])} to {_points(ci[1])})" if ci else ""
        reason = f": {c['reason']}" if c.get("reason") else ""
        gap = "-" if c.get("gap") is None else f"{_points(c['gap'])} points"
        out.append(f"gap {name}: {gap}{interval}, {c['status']}{reason}")
    out.extend(f"warning: {w}" for w in line.get("warnings") or [])
    return "\n".join(out) + "\n"


def timestamp(at: datetime.datetime) -> str:
    """``2024-05-01T12:30:05``: Ant's ISO 8601 form, to the second and without a zone (UTC)."""
    return at.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def hostname() -> str:
    """This machine's name, as the suite's ``hostname`` (Ant's schema wants one, not empty)."""
    return _text(socket.gethostname()) or "localhost"


def build(
    lines: Iterable[dict[str, Any]],
    *,
    fail_on: str | None = None,
    summary: Summary = _plain,
    seconds: float | None = None,
    properties: dict[str, Any] | None = None,
    started: datetime.datetime | None = None,
) -> ET.Element:
    """The ``<testsuite>`` of batch ``lines`` or a named check JSON; ``started``: its timestamp."""
    lines = list(lines)
    total = sum(float(line.get("seconds") or 0.0) for line in lines)
    took = total if seconds is None else seconds
    if started is None:
        started = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(
            seconds=max(0.0, float(took))
        )
    suite = ET.Element(
        "testsuite", name="kcheck", timestamp=timestamp(started), hostname=hostname()
    )
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    props = ET.SubElement(suite, "properties")
    for key, value in {"kcheck_version": __version__, **(properties or {})}.items():
        if value is not None:
            ET.SubElement(props, "property", name=key, value=_text(value))
    for line in lines:
        counts["tests"] += 1
        case = ET.SubElement(
            suite,
            "testcase",
            name=_text(line.get("name") or (line.get("data") or {}).get("path") or "-"),
            classname="kcheck",
            time=_seconds(line.get("seconds")),
        )
        status = line.get("status", "ok")
        if status == "skipped":
            counts["skipped"] += 1
            reason = _text(line.get("reason") or "skipped")
            ET.SubElement(case, "skipped", message=reason).text = reason
            continue
        if status == "error":
            counts["errors"] += 1
            message = _text(line.get("error") or "error")
            ET.SubElement(case, "error", message=message, type="error").text = message
            continue
        if fail_on is not None and line.get("verdict") == fail_on:
            counts["failures"] += 1
            words = _text(summary(line))
            ET.SubElement(
                case,
                "failure",
                message=f"verdict is {fail_on} (--fail-on {fail_on}): {words}",
                type="fail-on",
            ).text = words
        ET.SubElement(case, "system-out").text = _text(case_output(line))
    for key, n in counts.items():
        suite.set(key, str(n))
    suite.set("time", _seconds(took))
    ET.indent(suite)
    return suite


def render(suite: ET.Element) -> bytes:
    """The document: XML declaration, then the suite, UTF-8."""
    document: bytes = ET.tostring(suite, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


def write(path: str | os.PathLike[str], suite: ET.Element) -> None:
    """Write the document atomically, as ``-o`` writes its JSON."""
    with atomic_open(path, "wb", "JUnit file") as f:
        f.write(render(suite))
