"""``kcheck report``: one self-contained HTML page for a batch's JSON lines: a forest plot (inline
SVG) of each data set's checker gaps with 95% intervals, the epsilon line, verdict and margin as
colour and label; below, a table sortable by an inline script. Nothing loads from outside, so CI can
attach it.

The results file may come from anywhere: read line by line within a cap
(:mod:`kcheck.io.ownformat`), every line checked for the fields used (a bad one is an error naming
it), all text HTML-escaped and file-name characters (newlines, undecodable bytes) shown escaped."""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kcheck.checkers import registry
from kcheck.defaults import DEFAULT_METRIC, METRIC_NAMES, METRICS
from kcheck.errors import DataFormatError, printable
from kcheck.io.ownformat import (
    RESULTS_BYTES,
    RESULTS_LINE_BYTES,
    epsilon_problem,
    is_number,
    iter_lines,
    loads,
    open_input,
)

__all__ = ["Row", "read_lines", "render"]

VERDICT_COLOURS = {"kernel": "#c0392b", "linear": "#1e8449"}


def colours() -> dict[str, str]:
    """The plotted methods in order with their colours: the registry's, read at call time."""
    return {name: entry.colour for name in registry.methods() if (entry := registry.spec(name))}


#: A results file larger than this is not one batch wrote (a million data sets).
MAX_BYTES = RESULTS_BYTES


@dataclass(frozen=True)
class Row:
    """One line of the results, as the page shows it."""

    name: str
    status: str
    verdict: str | None
    margin: str | None
    epsilon: float | None
    deciding: str | None
    gaps: dict[str, tuple[float, float, float]]
    note: str | None
    rows: int | None
    seconds: float | None
    #: The line's ``--metric`` (schema-1 lines have none: accuracy); gaps are in its points.
    metric: str = DEFAULT_METRIC


def _number(x: Any) -> float | None:
    """A finite number as a float; None for anything else (a bool, a string, 1e999)."""
    return float(x) if is_number(x) else None


def _row(line: Any, path: str, lineno: int) -> Row:
    """One parsed line; a line without the fields the page uses is an error naming it."""

    def bad(why: str) -> DataFormatError:
        return DataFormatError(path, lineno, f"not a kcheck batch line: {why}")

    if not isinstance(line, dict):
        raise bad("not a JSON object")
    name, status = line.get("name"), line.get("status")
    if not isinstance(name, str) or status not in ("ok", "error", "skipped"):
        raise bad('"name" and "status" (ok, error or skipped) are required')
    if status != "ok":
        note = line.get("error") if status == "error" else line.get("reason")
        text = note if isinstance(note, str) and note else status
        return Row(name, status, None, None, None, None, {}, text, None, None)
    return _ok_row(line, name, bad)


def _ok_row(line: dict[str, Any], name: str, bad: Callable[[str], DataFormatError]) -> Row:
    """A checked data set's line: verdict, epsilon and every shown checker's gap are required; rows,
    deciding checker and time shown where usable."""
    verdict, margin = line.get("verdict"), line.get("margin")
    epsilon = _number(line.get("epsilon"))
    checkers = line.get("checkers")
    if not isinstance(verdict, str) or verdict not in VERDICT_COLOURS:
        raise bad('"verdict" is missing or unknown')
    if margin not in ("clear", "borderline"):
        raise bad('"margin" is missing or unknown')
    if epsilon is None or not isinstance(checkers, dict):
        raise bad('"epsilon" and "checkers" are required on an ok line')
    problem = epsilon_problem(epsilon)
    if problem is not None:
        raise bad(problem)
    gaps = _gaps(checkers, bad)
    data = line.get("data")
    rows = data.get("rows") if isinstance(data, dict) else None
    deciding = line.get("deciding_checker")
    metric = line.get("metric", DEFAULT_METRIC)
    if metric not in METRICS:
        raise bad(f'"metric" must be one of {", ".join(METRICS)}')
    return Row(
        name,
        "ok",
        str(verdict),
        str(margin),
        epsilon,
        deciding if isinstance(deciding, str) else None,
        gaps,
        None,
        rows if type(rows) is int and rows >= 0 else None,
        _number(line.get("seconds")),
        str(metric),
    )


def _gaps(
    checkers: dict[str, Any], bad: Callable[[str], DataFormatError]
) -> dict[str, tuple[float, float, float]]:
    """(gap, low, high) of each plotted checker; anything but three finite numbers is an error."""
    gaps = {}
    for c in colours():
        entry = checkers.get(c)
        if not isinstance(entry, dict) or entry.get("gap") is None:
            continue
        g, (lo, hi) = _number(entry.get("gap")), _interval(entry.get("gap_ci95"))
        if g is None or lo is None or hi is None or not all(map(math.isfinite, (g, lo, hi))):
            raise bad(f"checkers.{c}: gap and gap_ci95 must be numbers")
        gaps[c] = (g, lo, hi)
    return gaps


def _interval(ci: Any) -> tuple[float | None, float | None]:
    """The two ends of a ``gap_ci95``; None where it is not a pair of numbers."""
    if isinstance(ci, list) and len(ci) == 2:
        return _number(ci[0]), _number(ci[1])
    return None, None


def read_lines(path: str) -> list[Row]:
    """The latest line of each name in a batch's JSON lines (resumes append), streamed within
    MAX_BYTES and RESULTS_LINE_BYTES a line; only rows are kept."""
    rows: dict[str, Row] = {}
    what = "a batch's results"
    with open_input(path, what) as f:
        for lineno, text in iter_lines(
            f, path, line_cap=RESULTS_LINE_BYTES, total_cap=MAX_BYTES, what=what
        ):
            if text is None:
                raise DataFormatError(
                    path, lineno, f"not a JSON line: longer than {RESULTS_LINE_BYTES:,} bytes"
                )
            if not text.strip():
                continue
            row = _row(loads(text, path, lineno, "a JSON line"), path, lineno)
            rows.pop(row.name, None)
            rows[row.name] = row
    if not rows:
        raise DataFormatError(path, None, "no result lines (kcheck batch -o FILE writes them)")
    return list(rows.values())


# --- the page -------------------------------------------------------------------------------

ROW_H = 34
LEFT = 210
PLOT_W = 560
RIGHT = 190
TOP = 44


def _esc(x: object) -> str:
    """Text for HTML: markup, control characters and lone surrogates escaped (valid UTF-8)."""
    return html.escape(printable(str(x)), quote=True)


def _points(x: float) -> str:
    return f"{100 * x:+.1f}"


def _short(name: str, width: int = 28) -> str:
    """A long name (a skipped file's path) keeps its end, which tells files apart."""
    return name if len(name) <= width else "\u2026" + name[-(width - 1) :]


def _axis_label(rows: list[Row]) -> str:
    """The gap axis's unit: one metric's points, or the lines' own where they differ."""
    used = sorted({r.metric for r in rows if r.status == "ok"})
    if len(used) > 1:
        names = ", ".join(METRIC_NAMES[m] for m in used)
        return f"gap: checker minus linear, in points of each line's metric ({names})"
    unit = METRIC_NAMES[used[0]] if used else METRIC_NAMES[DEFAULT_METRIC]
    return f"gap: checker minus linear, {unit} points, with 95% interval"


@dataclass(frozen=True)
class _Scale:
    """Gap values to x: the span of intervals, epsilon and 0, padded, within +-105 points."""

    lo: float
    hi: float

    @classmethod
    def of(cls, rows: list[Row]) -> _Scale:
        values = [0.0] + [r.epsilon for r in rows if r.epsilon is not None]
        for r in rows:
            for _, lo, hi in r.gaps.values():
                values += [lo, hi]
        lo_x, hi_x = min(values), max(values)
        pad = max(0.01, 0.05 * (hi_x - lo_x))
        return cls(max(lo_x - pad, -1.05), min(hi_x + pad, 1.05))

    def __call__(self, x: float) -> float:
        return LEFT + (min(max(x, self.lo), self.hi) - self.lo) / (self.hi - self.lo) * PLOT_W


def shown_checkers(rows: list[Row]) -> dict[str, str]:
    """Methods with a gap on some line, in registry order, with colours."""
    return {c: colour for c, colour in colours().items() if any(c in r.gaps for r in rows)}


def _forest(rows: list[Row], fail_on: str | None = None) -> str:
    """The SVG: gap axis in points, a band per data set (red frame: tripped ``fail_on``)."""
    sx = _Scale.of(rows)
    height = TOP + ROW_H * len(rows) + 40
    width = LEFT + PLOT_W + RIGHT
    bottom = TOP + ROW_H * len(rows)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="gaps with 95% intervals" '
        'style="max-width: 100%; height: auto">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>',
    ]
    out += _stripes(len(rows), width)
    out += _ticks(sx, bottom)
    out += _zero_and_epsilon_lines(rows, sx, bottom)
    out.append(
        f'<text x="{LEFT + PLOT_W / 2}" y="{bottom + 34}" font-size="12" text-anchor="middle" '
        'fill="#333">' + _esc(_axis_label(rows)) + "</text>"
    )
    out += _legend(shown_checkers(rows))
    for i, r in enumerate(rows):
        out += _forest_row(r, TOP + i * ROW_H, sx, width, tripped(r, fail_on))
    out.append("</svg>")
    return "\n".join(out)


def _stripes(n: int, width: int) -> list[str]:
    """A grey band behind every other data set, so a row is easy to follow across."""
    return [
        f'<rect x="0" y="{TOP + i * ROW_H}" width="{width}" height="{ROW_H}" fill="#f4f6f8"/>'
        for i in range(n)
        if i % 2
    ]


def _ticks(sx: _Scale, bottom: int) -> list[str]:
    """Vertical grid lines with their labels, every 5 points (10 on a wide axis)."""
    out = []
    step = 0.05 if sx.hi - sx.lo <= 0.6 else 0.1
    t = math.ceil(sx.lo / step) * step
    while t <= sx.hi + 1e-12:
        x = sx(t)
        out.append(
            f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{bottom}" stroke="#e3e6ea"/>'
            f'<text x="{x:.1f}" y="{bottom + 16}" font-size="11" text-anchor="middle" '
            f'fill="#555">{_points(t)}</text>'
        )
        t += step
    return out


def _zero_and_epsilon_lines(rows: list[Row], sx: _Scale, bottom: int) -> list[str]:
    """A solid line at no gap, and a dashed one at each epsilon the lines were checked with."""
    out = [f'<line x1="{sx(0):.1f}" y1="{TOP - 6}" x2="{sx(0):.1f}" y2="{bottom}" stroke="#333"/>']
    for e in sorted({r.epsilon for r in rows if r.epsilon is not None}):
        out.append(
            f'<line class="epsilon" x1="{sx(e):.1f}" y1="{TOP - 6}" x2="{sx(e):.1f}" '
            f'y2="{bottom}" stroke="#c0392b" stroke-dasharray="5,4"/>'
            f'<text x="{sx(e):.1f}" y="{TOP - 10}" font-size="11" text-anchor="middle" '
            f'fill="#c0392b">epsilon {_points(e)}</text>'
        )
    return out


def _legend(shown: dict[str, str]) -> list[str]:
    """The colour of each checker the plot shows, in a line above the plot."""
    return [
        f'<circle cx="{LEFT + 95 * k + 5}" cy="14" r="4" fill="{colour}"/>'
        f'<text x="{LEFT + 95 * k + 13}" y="18" font-size="11" fill="#333">{c}</text>'
        for k, (c, colour) in enumerate(shown.items())
    ]


def tripped(r: Row, fail_on: str | None) -> bool:
    """Whether the line's verdict is the ``--fail-on`` one (a checked line only)."""
    return fail_on is not None and r.status == "ok" and r.verdict == fail_on


def _forest_row(r: Row, y0: int, sx: _Scale, width: int, failed: bool = False) -> list[str]:
    """One data set's band: name; status if not checked; each checker's gap and interval stacked;
    verdict, bold where clear; red frame where it tripped --fail-on."""
    mid = y0 + ROW_H / 2
    out = [
        f'<g class="forest-row{" tripped" if failed else ""}" data-name="{_esc(r.name)}">',
        f'<text x="{LEFT - 8}" y="{mid + 4}" font-size="12" text-anchor="end" '
        f'fill="#222">{_esc(_short(r.name))}</text>',
    ]
    if failed:
        out.append(
            f'<rect x="1" y="{y0 + 1}" width="{width - 2}" height="{ROW_H - 2}" fill="none" '
            'stroke="#c0392b" stroke-width="2"><title>the verdict tripped --fail-on</title></rect>'
        )
    if r.status != "ok":
        colour = "#b03a2e" if r.status == "error" else "#7f8c8d"
        out.append(
            f'<text x="{LEFT + 6}" y="{mid + 4}" font-size="12" font-style="italic" '
            f'fill="{colour}">{_esc(r.status)}: {_esc((r.note or "")[:90])}</text>'
        )
    palette = colours()
    shown = [c for c in palette if c in r.gaps]
    for k, c in enumerate(shown):
        g, lo, hi = r.gaps[c]
        y = y0 + ROW_H * (k + 1) / (len(shown) + 1)
        colour = palette[c]
        out.append(
            f'<line x1="{sx(lo):.1f}" y1="{y:.1f}" x2="{sx(hi):.1f}" y2="{y:.1f}" '
            f'stroke="{colour}" stroke-width="2"/>'
            f'<circle cx="{sx(g):.1f}" cy="{y:.1f}" r="3.5" fill="{colour}">'
            f"<title>{_esc(r.name)} {c}: {_points(g)} ({_points(lo)} to {_points(hi)})"
            "</title></circle>"
        )
    if r.verdict is not None:
        colour = VERDICT_COLOURS[r.verdict]
        weight = "bold" if r.margin == "clear" else "normal"
        label = f"{r.verdict} ({r.margin})"
        out.append(
            f'<text x="{LEFT + PLOT_W + 12}" y="{mid + 4}" font-size="12" fill="{colour}" '
            f'font-weight="{weight}">{_esc(label)}</text>'
        )
    out.append("</g>")
    return out


#: The page keeps to the window: the plot shrinks; long text wraps in its cell and intervals go
#: under gaps when narrow; numbers and words never break.
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; }
table { border-collapse: collapse; margin-top: 18px; font-size: 13px; max-width: 100%; }
th, td { border-bottom: 1px solid #ddd; padding: 4px 8px; text-align: left; }
td { white-space: nowrap; }
td.name, td.note { white-space: normal; overflow-wrap: anywhere; min-width: 8em; }
td.note { max-width: 28em; }
td.gap { white-space: normal; }
th { cursor: pointer; background: #f4f6f8; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.kernel { color: #c0392b; } .linear { color: #1e8449; }
.error { color: #b03a2e; font-style: italic; } .skipped { color: #7f8c8d; font-style: italic; }
tr.tripped td { background: #fdecea; } td.gate { color: #c0392b; font-weight: bold; }
"""

_SCRIPT = """
document.querySelectorAll("th").forEach(function (th, col) {
  th.addEventListener("click", function () {
    var body = th.closest("table").tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var up = th.getAttribute("data-up") !== "1";
    th.setAttribute("data-up", up ? "1" : "0");
    rows.sort(function (a, b) {
      var x = a.cells[col].getAttribute("data-key"), y = b.cells[col].getAttribute("data-key");
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = (isNaN(nx) || isNaN(ny)) ? x.localeCompare(y) : nx - ny;
      return up ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
document.body.setAttribute("data-sortable", "1");
"""


def _cell(text: str, key: object = None, cls: str = "") -> str:
    k = text if key is None else key
    c = f' class="{cls}"' if cls else ""
    return f'<td{c} data-key="{_esc(k)}">{_esc(text)}</td>'


def _number_cell(value: float | None, fmt: str) -> str:
    """A number right-aligned; an empty cell sorts before every number."""
    if value is None:
        return _cell("", -1, "num")
    return _cell(fmt.format(value), value, "num")


def _table(rows: list[Row], fail_on: str | None = None) -> str:
    """One row per line; ``fail_on`` adds a column marking (and tinting) rows that tripped it."""
    head = ["data set", "status", "verdict", "margin", "deciding", "metric", "rows", "seconds"]
    shown = shown_checkers(rows)
    head += [f"{c} gap" for c in shown]
    if fail_on is not None:
        head.insert(1, f"--fail-on {fail_on}")
    out = ["<table><thead><tr>", *(f"<th>{_esc(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for r in rows:
        failed = tripped(r, fail_on)
        gate = [] if fail_on is None else [_cell("fails" if failed else "", cls="gate")]
        cells = [
            _cell(r.name, cls="name"),
            *gate,
            _cell(
                r.status if r.note is None else f"{r.status}: {r.note}",
                r.status,
                r.status if r.note is None else f"{r.status} note",
            ),
            _cell(r.verdict or "", cls=r.verdict or ""),
            _cell(r.margin or ""),
            _cell(r.deciding or ""),
            _cell(METRIC_NAMES[r.metric] if r.status == "ok" else ""),
            _number_cell(r.rows, "{:,}"),
            _number_cell(r.seconds, "{:.2f}"),
        ]
        for c in shown:
            if c in r.gaps:
                g, lo, hi = r.gaps[c]
                # One place to wrap: between the gap and its interval.
                text = f"{_points(g)} [{_points(lo)},\u00a0{_points(hi)}]"
                cells.append(_cell(text, g, "num gap"))
            else:
                cells.append(_cell("", -9, "num"))
        row_class = "result tripped" if failed else "result"
        out.append(f'<tr class="{row_class}">{"".join(cells)}</tr>')
    out.append("</tbody></table>")
    return "\n".join(out)


def _names(names: list[str], limit: int = 10) -> str:
    """``a, b and 3 more``: the first ``limit`` names."""
    more = f" and {len(names) - limit:,} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _count(n: int, word: str) -> str:
    """``1 error``, ``2 errors``."""
    return f"{n:,} {word if n == 1 else word + 's'}"


def render(rows: list[Row], title: str, fail_on: str | None = None) -> str:
    """The whole page: no external resource, one inline script (sorting). ``fail_on``
    (``--fail-on``): tripping data sets are named in the summary and marked in plot and table."""
    counts = {s: sum(r.status == s for r in rows) for s in ("ok", "error", "skipped")}
    verdicts = {v: sum(r.verdict == v for r in rows) for v in VERDICT_COLOURS}
    summary = (
        f"{_count(len(rows), 'line')}: {counts['ok']:,} checked ({verdicts['kernel']:,} kernel, "
        f"{verdicts['linear']:,} linear), {_count(counts['error'], 'error')}, "
        f"{counts['skipped']:,} skipped. Bold verdicts are clear, plain ones borderline."
    )
    if fail_on is not None:
        hits = [r.name for r in rows if tripped(r, fail_on)]
        summary += (
            f" --fail-on {fail_on}: {len(hits):,} of {counts['ok']:,} checked data sets tripped it"
            + (f" ({_names(hits)}), framed in red" if hits else "")
            + "."
        )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">",
            f"<title>kcheck report: {_esc(title)}</title>",
            f"<style>{_STYLE}</style></head><body>",
            f"<h1>kcheck report: {_esc(title)}</h1>",
            f"<p>{_esc(summary)}</p>",
            _forest(rows, fail_on),
            _table(rows, fail_on),
            f"<script>{_SCRIPT}</script>",
            "</body></html>",
            "",
        ]
    )
