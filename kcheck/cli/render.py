"""Tables and summaries of a result dict, as rich renderables and strings; nothing prints here."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table


def fmt_acc(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def _fmt_gap(c: dict[str, Any]) -> tuple[str, str]:
    """Gap and its 95% interval, in accuracy points."""
    if c.get("gap") is None:
        return "-", ""
    lo, hi = c["gap_ci95"]
    return f"{100 * c['gap']:+.2f}", f"[{100 * lo:+.1f}, {100 * hi:+.1f}]"


def verdict_table(v: dict[str, Any]) -> Table:
    table = Table(title=f"kcheck: {v['data']['path']}", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False, padding=(0, 1),
                  caption="gap and 95% interval in accuracy points, checker minus linear: on V "
                          "(rbf: repeated CV on all rows)",
                  caption_justify="left")
    for col, justify in (
        ("method", "left"),
        ("val.", "right"),
        ("gap", "right"),
        ("95% CI", "right"),
        ("C / K", "right"),
        ("status", "left"),
        ("s", "right"),
    ):
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    lin = v["linear"]
    table.add_row("linear", fmt_acc(lin["val_accuracy"]), "", "", f"C={lin['C']:.3g}", "ok",
                  f"{lin['seconds']:.2f}")
    for name, c in v["checkers"].items():
        if name == "multilinear":
            param = f"K={c.get('clusters', '-')}"
        elif name == "rff" and c.get("D") is not None:
            param = f"D={c['D']} g={c['gamma']:.2g}"
        elif name == "rbf" and c.get("gamma") is not None:
            param = f"C={c['C']:.2g} g={c['gamma']:.2g}"
        else:
            param = f"C={c['C']:.3g}" if c.get("C") is not None else "-"
        status = c["status"]
        if status == "subsampled":
            status = f"{100 * c.get('fraction', 0):.2g}% of T"
        table.add_row(name, fmt_acc(c["val_accuracy"]), *_fmt_gap(c), param, status,
                      f"{c['seconds']:.2f}")
    return table


def deciding_gap(line: dict[str, Any]) -> str:
    """The gap that decided the verdict, in points, with its checker.

    ``kernel``: the deciding checker's gap. ``linear``: the largest gap, labelled as the
    closest checker; where the exact comparison ran, it alone decided, so it is the one shown.
    The largest gap of any checker would mislead: a proxy's gap above epsilon next to a
    ``linear`` verdict that the exact comparison decided.
    """
    checkers = line.get("checkers") or {}
    gaps = {name: c["gap"] for name, c in checkers.items() if c.get("gap") is not None}
    if not gaps:
        return "-"
    deciding = line.get("deciding_checker")
    if line.get("verdict") == "kernel" and deciding in gaps:
        return f"{100 * gaps[deciding]:+.2f} {deciding}"
    pool = {"rbf": gaps["rbf"]} if "rbf" in gaps else gaps
    name = max(pool, key=lambda k: (pool[k], k))
    return f"{100 * pool[name]:+.2f} {name} (closest)"


def batch_table(lines: list[dict[str, Any]], resumed: set[str], wall: float) -> Table:
    """The summary of a batch: one row per data set and skipped file, totals in the caption."""
    sets = [x for x in lines if x["status"] != "skipped"]
    ok = [x for x in sets if x["status"] == "ok"]
    n_kernel = sum(x["verdict"] == "kernel" for x in ok)
    n_err = len(sets) - len(ok)
    n_skip = len(lines) - len(sets)
    total = sum(x.get("seconds") or 0.0 for x in lines)
    table = Table(
        title="kcheck batch", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
        caption=(f"{len(sets)} data sets: {len(ok)} ok ({n_kernel} kernel, "
                 f"{len(ok) - n_kernel} linear), {n_err} error{'' if n_err == 1 else 's'}; "
                 f"{n_skip} file{'' if n_skip == 1 else 's'} skipped; "
                 f"{total:.2f}s checking, {wall:.1f}s wall time. gap: the deciding checker's, "
                 "for linear the closest one's"),
        caption_justify="left",
    )
    longest = max((len(x["name"]) for x in lines), default=4)
    for col in ("name", "rows", "features", "verdict", "margin", "gap, pts", "seconds"):
        # On a narrow terminal a long name folds (up to 24 columns kept) rather than vanishing.
        name = col == "name"
        table.add_column(col, no_wrap=not name, overflow="fold" if name else "ellipsis",
                         min_width=min(24, longest) if name else None,
                         justify="left" if col in ("name", "verdict", "margin") else "right")
    for x in lines:
        name = x["name"] + (" (resumed)" if x["name"] in resumed else "")
        seconds = f"{x['seconds']:.2f}" if x.get("seconds") is not None else "-"
        if x["status"] == "skipped":
            table.add_row(name, "-", "-", "[yellow]skipped[/]", "-", "-", "-")
            continue
        if x["status"] != "ok":
            table.add_row(name, "-", "-", "[red]error[/]", "-", "-", seconds)
            continue
        style = "red" if x["verdict"] == "kernel" else "green"
        table.add_row(name, f"{x['data']['rows']:,}", f"{x['data']['features']:,}",
                      f"[{style}]{x['verdict']}[/]", x["margin"], deciding_gap(x), seconds)
    return table


def verify_table(v: dict[str, Any]) -> Table:
    table = Table(title=f"kcheck verify: {v['data']['path']}", title_justify="left")
    test = v.get("test")
    columns = ["model", "CV acc."] + (["test acc."] if test else []) + ["parameters", "seconds"]
    for col in columns:
        table.add_column(col, justify="left" if col in ("model", "parameters") else "right")
    lin, rbf = v["linear"], v["rbf"]
    rows = (
        ("linear", lin, f"C={lin['C']:g}"),
        ("RBF", rbf, f"C={rbf['C']:g} gamma={rbf['gamma']:g} ({rbf['grid_points']} points)"),
    )
    for name, r, params in rows:
        cells = [name, fmt_acc(r["cv_accuracy"])]
        if test:
            cells.append(fmt_acc(r["test_accuracy"]))
        table.add_row(*cells, params, f"{r['seconds']:.2f}")
    return table


def verify_summary(v: dict[str, Any]) -> str:
    text = (
        f"gap (RBF - linear, CV): {100 * v['gap']:+.2f} pts -> verdict {v['verdict']} "
        f"(epsilon {v['epsilon']:g})"
    )
    if v.get("test_gap") is not None:
        text += f"; test gap {100 * v['test_gap']:+.2f} pts"
    if v["confirms"] is not None:
        word = "confirms" if v["confirms"] else "does NOT confirm"
        text += f"; {word} the check's verdict ({v['check']['verdict']})"
    return text
