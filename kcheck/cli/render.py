"""Tables and plain-words summaries of a result dict; pure functions, nothing prints. A number is
never cut: a table too wide gives way with shorter headers, then fewer low-value columns, then one
line per row wrapping between cells, so every digit shows at 60 columns or in a CI log."""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from kcheck.defaults import METRIC_NAMES

if TYPE_CHECKING:
    from kcheck.checkers.registry import CheckerSpec, DecidingSpec


class _Words(Mapping[str, str]):
    """How sentences name a method (the table keeps JSON names), from the registry at first use, so
    ``kcheck --help`` does not import the numeric stack."""

    def __getitem__(self, name: str) -> str:
        from kcheck.checkers import registry

        return registry.words(name)

    def __iter__(self) -> Iterator[str]:
        return iter(("linear", *_methods()))

    def __len__(self) -> int:
        return 1 + len(_methods())


NAMES: Mapping[str, str] = _Words()


def _methods() -> tuple[str, ...]:
    from kcheck.checkers import registry

    return registry.methods()


def _spec(name: str) -> CheckerSpec | DecidingSpec | None:
    """A method's registry entry, imported where a result is shown (never for ``--help``)."""
    from kcheck.checkers import registry

    return registry.spec(name)


def _exact() -> str:
    """The exact comparison's name: its row reads as CV, its sentences as cross-validation."""
    from kcheck.checkers import registry

    return registry.EXACT.name


def fmt_acc(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def log2_text(x: float) -> str:
    """C and gamma as grid.py users read them: ``2^7``; off the grid ``0.354 (2^-1.5)``."""
    if not (x > 0 and math.isfinite(x)):
        return f"{x:g}"
    e = math.log2(x)
    if abs(e - round(e)) < 1e-6:
        return f"2^{int(round(e))}"
    return f"{x:.3g} (2^{e:.1f})"


def pts(x: float) -> str:
    """A fraction of accuracy as signed points: 0.2917 -> '+29.17'."""
    return f"{100 * x:+.2f}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 row``, ``2 rows``, ``1,000 rows``."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


#: Decimals tried, after a number's own, until it shows which side of epsilon it lies on.
_MORE_DECIMALS = (2, 3, 4, 5, 6)


def side_pts(x: float, epsilon: float, decimals: int = 1, sign: bool = True) -> str:
    """A fraction as points with ``decimals`` decimals, or more to show its side of ``epsilon``
    (0.020036 is '+2.004'); equal to epsilon (:func:`kcheck.verdict.reaches`): epsilon."""
    from kcheck.verdict import TIE_DECIMALS, reaches

    p, e = 100 * x, round(100 * epsilon, 9)
    at = reaches(x, epsilon)
    equal = at and round(x, TIE_DECIMALS) == round(epsilon, TIE_DECIMALS)
    fmt = "+" if sign else ""
    text = ""
    for d in (decimals, *(d for d in _MORE_DECIMALS if d > decimals)):
        text = f"{p:{fmt}.{d}f}"
        shown = round(float(text), 9)
        if (shown == e and equal) or (shown > e if at else shown < e):
            return text
    return text


def two_folds(v: dict[str, Any], name: str) -> bool:
    """Whether ``name``'s gap is the mean of two folds (a second fold re-measured it)."""
    second = v.get("second_fold")
    if not second or not second.get("used"):
        return False
    return (second["checkers"].get(name) or {}).get("gap") is not None


def ci_text(c: dict[str, Any], epsilon: float, sign: bool = True) -> str:
    """A gap's 95% interval in points, each end showing its side of epsilon: '+0.8 to +2.004'."""
    lo, hi = c["gap_ci95"]
    return f"{side_pts(lo, epsilon, sign=sign)} to {side_pts(hi, epsilon, sign=sign)}"


def gap_text(c: dict[str, Any], epsilon: float) -> str:
    """A gap in signed points, two decimals or as many as show its side of epsilon."""
    return side_pts(c["gap"], epsilon, 2)


#: A name column folds down to this many characters before columns are dropped.
WRAP_WIDTH = 12


@dataclass
class Column:
    """A table column: its header, a shorter one for narrow widths, and when it may go."""

    header: str
    short: str
    justify: str = "left"
    #: Columns with a rank are dropped, lowest rank first, before the table turns vertical.
    drop: int | None = None
    #: Free text that may wrap (a data set's name); never set for a number.
    wrap: bool = False


def _table(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], short: bool, *, least: bool = True
) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1))
    for col in columns:
        table.add_column(
            col.short if short else col.header,
            justify=col.justify,  # type: ignore[arg-type]
            no_wrap=True,
            overflow="ellipsis",
            min_width=WRAP_WIDTH if col.wrap and least else None,
        )
    for row in rows:
        table.add_row(*row)
    return table


def _cut_names(
    cols: Sequence[Column], cells: list[list[str]], short: bool, width: int
) -> list[list[str]]:
    """Free-text cells (paths) cut from the left to fit beside the numbers, file name in sight."""
    blank = [["" if col.wrap else c for col, c in zip(cols, row, strict=True)] for row in cells]
    spare = width - _measure(_table(cols, blank, short, least=False)).maximum
    room = {
        i: max(WRAP_WIDTH, len(col.short if short else col.header) + spare)
        for i, col in enumerate(cols)
        if col.wrap
    }
    return [
        [
            "…" + c[len(c) - room[i] + 1 :] if i in room and len(c) > room[i] else c
            for i, c in enumerate(row)
        ]
        for row in cells
    ]


def _measure(table: Table) -> Measurement:
    console = Console(width=100_000, file=io.StringIO(), color_system=None)
    return Measurement.get(console, console.options, table)


def fit_table(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int, key: int = 0
) -> RenderableType:
    """The fullest layout of ``rows`` fitting ``width`` uncut: full headers; short headers; columns
    dropped by rank; last, one ``key: header value, ...`` line per row."""
    keep = list(range(len(columns)))
    layouts: list[tuple[list[int], bool]] = [(keep, False), (keep, True)]
    for rank in sorted({c.drop for c in columns if c.drop is not None}):
        keep = [i for i in keep if columns[i].drop != rank]
        layouts.append((keep, True))
    # Each layout with names whole, then short headers with names cut to WRAP_WIDTH.
    tries = [(*layouts[0], False)]
    tries += [(kept, short, cutting) for kept, short in layouts[1:] for cutting in (False, True)]
    for kept, short, cutting in tries:
        cols = [columns[i] for i in kept]
        cells = [[r[i] for i in kept] for r in rows]
        if cutting:
            cells = _cut_names(cols, cells, short, width)
        if _measure(_table(cols, cells, short)).maximum <= width:
            return _table(cols, cells, short)
    lines = []
    for row in rows:
        parts = [
            f"{columns[i].short} {row[i]}"
            for i in range(len(columns))
            if i != key and row[i] not in ("", "-")
        ]
        lines.append(Text(f"{row[key]}: " + ", ".join(parts)))
    return Group(*lines)


# --- check ---------------------------------------------------------------------------------------


def _param(name: str, c: dict[str, Any]) -> str:
    """A method's registry parameters from its JSON block, ``C=2^7 g=2^-3``; unknown: its C."""
    entry = _spec(name)
    if entry is None:
        return f"C={log2_text(c['C'])}" if c.get("C") is not None else "-"
    shown = [
        f"{p.label}={log2_text(c[p.key]) if p.log2 else c[p.key]}"
        for p in entry.table
        if c.get(p.key) is not None
    ]
    return " ".join(shown) if shown else entry.blank


def _status(c: dict[str, Any]) -> str:
    if c["status"] == "subsampled":
        return f"{100 * c.get('fraction', 0):.2g}% of rows"
    return str(c["status"])


#: How the table and the summary name each --metric: (in a header, short header, in a sentence).
METRIC_WORDS = {
    "accuracy": ("accuracy", "acc.", METRIC_NAMES["accuracy"]),
    "balanced": ("balanced acc.", "bal.", METRIC_NAMES["balanced"]),
    "auc": ("AUC", "AUC", METRIC_NAMES["auc"]),
}


def metric_words(v: dict[str, Any]) -> tuple[str, str, str]:
    """A result's metric in words (results written before ``metric`` existed: accuracy)."""
    return METRIC_WORDS.get(str(v.get("metric") or "accuracy"), METRIC_WORDS["accuracy"])


def _in_metric(v: dict[str, Any]) -> str:
    """ " of balanced accuracy" after "points" where the metric is not plain accuracy."""
    metric = v.get("metric") or "accuracy"
    return "" if metric == "accuracy" else f" of {metric_words(v)[2]}"


def verdict_table(v: dict[str, Any], width: int) -> RenderableType:
    """The check's table: each method's score and gap, never cut, at any ``width``."""
    header, short, _ = metric_words(v)
    columns = [
        Column("method", "method"),
        Column(header, short, "right"),
        Column("gap, pts", "gap", "right"),
        Column("95% CI", "95% CI", "right"),
        Column("parameters", "params", "left", drop=3),
        Column("status", "status", "left", drop=2),
        Column("seconds", "s", "right", drop=1),
    ]
    lin = v["linear"]
    rows = [
        [
            "linear",
            fmt_acc(lin.get("val_score", lin["val_accuracy"])),
            "",
            "",
            f"C={log2_text(lin['C'])}",
            "ok",
            f"{lin['seconds']:.2f}",
        ]
    ]
    for name, c in v["checkers"].items():
        acc = fmt_acc(c.get("val_score", c["val_accuracy"]))
        if name == _exact() and c["val_accuracy"] is not None:
            acc += " CV"
        gap = (
            [gap_text(c, v["epsilon"]), ci_text(c, v["epsilon"])]
            if c.get("gap") is not None
            else ["-", ""]
        )
        if two_folds(v, name):
            gap[0] += "*"
        rows.append([name, acc, *gap, _param(name, c), _status(c), f"{c['seconds']:.2f}"])
    return fit_table(columns, rows, width)


def sample_text(data: dict[str, Any]) -> str:
    """ "on a sample of N of M rows" where --max-rows dropped rows, else nothing."""
    sampling = data.get("sampling")
    if not sampling or not sampling.get("sampled"):
        return ""
    return f"on a sample of {data['rows_used']:,} of {data['rows_read']:,} rows"


def verdict_footnote(v: dict[str, Any]) -> str:
    """What the table's numbers are, in a user's words; rbf only where it has a row."""
    split = v["split"]
    sample = sample_text(v["data"])
    text = (f"{sample} (--max-rows {v['data']['sampling']['max_rows']}); " if sample else "") + (
        f"{metric_words(v)[2]}: on the validation split ({split['validation']:,} of "
        f"{split['train'] + split['validation']:,} rows, the models trained on the rest"
        + ("" if v.get("class_weights") is None else ", every model class-weighted")
        + "); gap: checker minus linear, in points, with its 95% interval"
        + _sample_references(v)
    )
    second = v.get("second_fold")
    again = [n for n in v["checkers"] if two_folds(v, n)]
    if second and again:
        there = ", ".join(
            f"{NAMES[n]} {fmt_acc(second['checkers'][n]['val_score'])}" for n in again
        )
        text += (
            "; *: the mean of two folds' gaps. The verdict hung on "
            f"{_and(NAMES[n] for n in again)}, so {'it was' if len(again) == 1 else 'they were'} "
            f"also trained on another {plural(second['train'], 'row')} and scored on the other "
            f"{second['validation']:,} (linear {fmt_acc(second['linear']['val_score'])}, "
            f"{there} there)"
        )
    text += _bought(v)
    exact = _exact()
    rbf = v["checkers"].get(exact)
    if rbf is not None and rbf.get("gap") is not None:
        text += (
            f". {exact}, CV: an RBF SVM against linear in {rbf.get('folds', 5)}-fold "
            f"cross-validation on all {plural(rbf.get('rows', 0), 'row')} "
            f"({plural(rbf.get('repeats', 1), 'repeat')}"
            # Nested: no row was scored by a model tuned on it.
            + ("; both tuned again inside each fold" if rbf.get("nested") else "")
            + _linear_there(v, rbf)
            + ")"
        )
    return text


def _bought(v: dict[str, Any]) -> str:
    """``; the RBF SVM's row was bought with what the first measurement left ...``: where an
    unsettled first verdict bought a checker more rows (``first_measurement``), what it had."""
    said = []
    for name, c in v["checkers"].items():
        first = c.get("first_measurement")
        if not isinstance(first, dict):
            continue
        had = (
            "had been skipped"
            if first.get("status") == "skipped" or first.get("gap") is None
            else f"had {plural(first['rows'], 'row')}, gap {gap_text(first, v['epsilon'])}"
        )
        said.append(
            f"; {NAMES[name]} trained on {plural(c.get('rows') or 0, 'row')} of T bought with "
            f"what the first measurement left, as more rows could move the verdict (it {had} "
            "there)"
        )
    return "".join(said)


def _sample_references(v: dict[str, Any]) -> str:
    """``; degree-2's gap is against a linear model trained on its 12,512-row sample (84.48%)``: a
    sampled checker's linear reference, scored as its score less its gap."""
    said = []
    for name, c in v["checkers"].items():
        ref, gap, score = c.get("reference"), c.get("gap"), c.get("val_score")
        if not isinstance(ref, dict) or gap is None or score is None:
            continue
        said.append(
            f"; {NAMES[name]}'s gap is against a linear model trained on its "
            f"{ref['rows']:,}-row sample ({fmt_acc(score - gap)}), not the linear row"
        )
    return "".join(said)


def _linear_there(v: dict[str, Any], rbf: dict[str, Any]) -> str:
    """``; linear's balanced accuracy was 82.69% there``: exact mode's linear model's CV score
    (``linear_accuracy``, else the RBF's less its gap), where the block has it."""
    linear: float | None = None
    if (v.get("metric") or "accuracy") == "accuracy":
        linear = rbf.get("linear_accuracy")
    elif rbf.get("val_score") is not None and rbf.get("gap") is not None:
        if not two_folds(v, _exact()):
            linear = float(rbf["val_score"]) - float(rbf["gap"])
    if linear is None:
        return ""
    return f"; linear's {metric_words(v)[2]} was {fmt_acc(linear)} there"


def _and(words: Iterable[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = list(words)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# --- batch ---------------------------------------------------------------------------------------


def deciding_gap(line: dict[str, Any]) -> str:
    """The gap that decided the verdict, in points, with its checker: ``kernel``, the deciding gap;
    ``linear``, the largest as the closest checker, or exact mode's where it decided alone (a
    proxy's larger gap beside its linear verdict would mislead)."""
    checkers = line.get("checkers") or {}
    gaps = {name: c["gap"] for name, c in checkers.items() if c.get("gap") is not None}
    if not gaps:
        return "-"
    eps = float(line.get("epsilon", 0.02))
    deciding = line.get("deciding_checker")
    if line.get("verdict") == "kernel" and deciding in gaps:
        return f"{side_pts(gaps[deciding], eps, 2)} {deciding}"
    exact = _exact()
    pool = {exact: gaps[exact]} if exact in gaps else gaps
    name = max(pool, key=lambda k: (pool[k], k))
    return f"{side_pts(pool[name], eps, 2)} {name} (closest)"


def batch_table(lines: list[dict[str, Any]], resumed: set[str], width: int) -> RenderableType:
    """The summary of a batch: one row per data set and skipped file."""
    columns = [
        Column("name", "name", wrap=True),
        Column("rows", "rows", "right", drop=2),
        Column("features", "feat.", "right", drop=2),
        Column("verdict", "verdict"),
        Column("margin", "margin", drop=3),
        Column("gap, pts", "gap", "right"),
        Column("seconds", "s", "right", drop=1),
    ]
    rows = []
    for x in lines:
        name = x["name"] + (" (resumed)" if x["name"] in resumed else "")
        seconds = f"{x['seconds']:.2f}" if x.get("seconds") is not None else "-"
        if x["status"] == "skipped":
            rows.append([name, "-", "-", "skipped", "-", "-", "-"])
        elif x["status"] != "ok":
            rows.append([name, "-", "-", "error", "-", "-", seconds])
        else:
            rows.append(
                [
                    name,
                    _rows_cell(x["data"]),
                    f"{x['data']['features']:,}",
                    x["verdict"],
                    x["margin"],
                    deciding_gap(x),
                    seconds,
                ]
            )
    return fit_table(columns, rows, width)


def _rows_cell(data: dict[str, Any]) -> str:
    if sample_text(data):
        return f"{data['rows_used']:,} of {data['rows_read']:,}"
    return f"{data['rows']:,}"


def batch_caption(lines: list[dict[str, Any]], wall: float) -> str:
    sets = [x for x in lines if x["status"] != "skipped"]
    ok = [x for x in sets if x["status"] == "ok"]
    n_kernel = sum(x["verdict"] == "kernel" for x in ok)
    n_err = len(sets) - len(ok)
    n_skip = len(lines) - len(sets)
    total = sum(x.get("seconds") or 0.0 for x in lines)
    return (
        f"{plural(len(sets), 'data set')}: {len(ok)} ok ({n_kernel} kernel, "
        f"{len(ok) - n_kernel} linear), {plural(n_err, 'error')}; "
        f"{plural(n_skip, 'file')} skipped; "
        f"{total:.2f}s checking, {wall:.1f}s wall time. gap: the deciding checker's, "
        "in points; for a linear verdict the closest checker's"
    )


# --- verify --------------------------------------------------------------------------------------


def verify_table(v: dict[str, Any], width: int) -> RenderableType:
    test = v.get("test")
    header, short, _ = metric_words(v)
    columns = [Column(f"CV {header}", f"CV {short}", "right")]
    columns.insert(0, Column("model", "model"))
    if test:
        columns.append(Column(f"test {header}", f"test {short}", "right"))
    columns += [
        Column("parameters", "params"),
        Column("grid", "grid", "right", drop=2),
        Column("seconds", "s", "right", drop=1),
    ]
    lin, rbf = v["linear"], v["rbf"]
    rows = []
    for name, r, params, grid in (
        ("linear", lin, f"C={log2_text(lin['C'])}", ""),
        (
            "RBF",
            rbf,
            f"C={log2_text(rbf['C'])} g={log2_text(rbf['gamma'])}",
            plural(rbf["grid_points"], "point"),
        ),
    ):
        cells = [name, fmt_acc(r.get("cv_score", r["cv_accuracy"]))]
        if test:
            cells.append(fmt_acc(r.get("test_score", r["test_accuracy"])))
        rows.append([*cells, params, grid, f"{r['seconds']:.2f}"])
    return fit_table(columns, rows, width)


def verify_summary(v: dict[str, Any]) -> str:
    eps = v["epsilon"]
    sample = sample_text(v["data"])
    text = (f"{sample}: " if sample else "") + (
        f"gap (RBF minus linear, cross-validated): {side_pts(v['gap'], eps, 2)} points"
        f"{_in_metric(v)} (95% CI {ci_text(v, eps)}) -> verdict {v['verdict']}, "
        f"{v['margin']} (epsilon is {100 * eps:g} points)"
    )
    if v.get("test_gap") is not None:
        text += f"; on the test file {100 * v['test_gap']:+.2f} points{_in_metric(v)}"
    if v["confirms"] is not None:
        if v["confirms"] and v.get("both_borderline"):
            text += (
                f"; this agrees with the check's verdict ({v['check']['verdict']}), but both "
                "are borderline: neither settles it (more data would)"
            )
        else:
            word = "confirms" if v["confirms"] else "does NOT confirm"
            text += f"; this {word} the check's verdict ({v['check']['verdict']})"
    return text
