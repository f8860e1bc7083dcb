"""The verdict in plain words from the rule's record (the JSON's ``decision`` block): what decided,
why the margin is what it is, what to do next. Pure functions; kcheck.cli.check shows them. Deciding
numbers show their side of epsilon (:func:`kcheck.cli.render.side_pts`); remedies only where they
apply."""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

from kcheck.cli.render import (
    NAMES,
    _and,
    _exact,
    _in_metric,
    _spec,
    ci_text,
    gap_text,
    side_pts,
    two_folds,
)
from kcheck.memory import size_text


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _command(path: str) -> str:
    return "FILE" if path == "-" else shlex.quote(path)


def _verify_step(v: dict[str, Any], data: str, *, confirms: bool = False) -> str:
    """The ``kcheck verify`` a check suggests where the full grid is predicted over
    kcheck.verify.SUGGESTED_SECONDS here, with the fitting ``--max-rows`` and both times."""
    from kcheck import verify
    from kcheck.tuning import rbf_grid as rbf_search

    d = v["data"]
    rows = int(d.get("rows_read") or d["rows"])
    nnz = int(d["nnz"] * rows / max(int(d["rows"]), 1))
    classes = max(2, len(d.get("classes") or ()))
    jobs = os.cpu_count() or 1
    features = int(d.get("features") or 0)

    def seconds(n: int) -> float:
        """Predicted seconds of a verify on ``n`` of the ``rows``, with their share of values."""
        return verify.predicted_seconds(
            rbf_search.GRID,
            rows=n,
            nnz=nnz * n // max(rows, 1),
            n_classes=classes,
            jobs=jobs,
            features=features,
        )

    fit = verify.rows_within(verify.SUGGESTED_SECONDS, rows, seconds)
    what = "confirms" if confirms else "runs the RBF grid search"
    if fit is None:
        return f"`kcheck verify {data}` {what}" + ("" if confirms else " on all rows")
    about = rbf_search.duration_text
    return (
        f"`kcheck verify {data} --max-rows {fit}` {what} on a sample (about "
        f"{about(seconds(fit))} predicted; all {rows:,} rows, about {about(seconds(rows))})"
    )


def decision_record(v: dict[str, Any]) -> dict[str, Any]:
    """The rule's record of what decided (``decision``), which the words follow. One missing (older
    results) or not matching verdict, margin and gaps (hand-edited) is rebuilt from those fields."""
    d = v.get("decision")
    if isinstance(d, dict) and _agrees(v, d):
        return d
    return _rebuilt(v)


def _has_gap(v: dict[str, Any], name: str) -> bool:
    return (v["checkers"].get(name) or {}).get("gap") is not None


def _skipped_for_cost(v: dict[str, Any], name: str) -> bool:
    """A stand-in (rbfsvm) skipped for its cost: normal on large data, not a checker cut short."""
    spec = _spec(name)
    c = v["checkers"].get(name) or {}
    return spec is not None and spec.role == "stand-in" and c.get("limited_by") == "cost"


def _agrees(v: dict[str, Any], d: dict[str, Any]) -> bool:
    """Whether a ``decision`` block says what the rest of the result says."""
    if d.get("deciding") != v.get("deciding_checker"):
        return False
    if (d.get("margin_reason") == "interval") != (v["margin"] == "clear"):
        return False
    if not all(_has_gap(v, n) for n in d.get("straddling") or ()):
        return False
    if v["verdict"] == "linear" and d.get("by") == "proxies" and v["margin"] != "clear":
        listed = {c.get("checker") for c in d.get("cut_short") or ()}
        for name in v["checkers"]:
            if not _has_gap(v, name) and name not in listed and not _skipped_for_cost(v, name):
                return False
    return True


def _rebuilt(v: dict[str, Any]) -> dict[str, Any]:
    """A ``decision`` block rebuilt from verdict, margin and gaps (:func:`decision_record`)."""
    from kcheck.verdict import reaches

    eps, exact = v["epsilon"], _exact()
    gaps = {n: c for n, c in v["checkers"].items() if c.get("gap") is not None}
    deciding = v.get("deciding_checker")
    by = "proxies"
    if exact in gaps:
        by = "overrule" if v["verdict"] == "kernel" and deciding != exact else "exact"
    straddling: list[str] = []
    cut: list[dict[str, Any]] = []
    if v["margin"] != "clear":
        if v["verdict"] == "kernel":
            straddling = [str(deciding)] if deciding in gaps else []
        else:
            pool = [exact] if by == "exact" else list(gaps)
            straddling = [n for n in pool if reaches(gaps[n]["gap_ci95"][1], eps)]
            if by == "proxies":
                cut = [
                    {
                        "checker": n,
                        "what": "did not run" if c.get("status") == "skipped" else "did not finish",
                        "reason": c.get("reason"),
                    }
                    for n, c in v["checkers"].items()
                    if n not in gaps and not _skipped_for_cost(v, n)
                ]
    reason = "interval"
    if v["margin"] != "clear":
        reason = "cut-short" if cut else "interval-reaches-epsilon"
    return {
        "by": by,
        "deciding": deciding,
        "margin_reason": reason,
        "straddling": straddling,
        "cut_short": cut,
    }


def _limit(v: dict[str, Any], entry: dict[str, Any]) -> str | None:
    """What cut a checker short: ``time``, ``memory`` or ``cost``, from its reason, block and plan
    step; None where none says (an engine failure, the process out of memory)."""
    name, reason = entry.get("checker"), (entry.get("reason") or "").lower()
    if "time limit" in reason:
        return "time"
    c = v["checkers"].get(name) or {}
    steps: list[dict[str, Any]] = (v.get("plan") or {}).get("steps", [])
    step = next((s for s in steps if s["name"] == name), {})
    for limited in (c.get("limited_by"), step.get("limited_by")):
        if limited in ("time", "memory", "cost"):
            return str(limited)
    if "memory limit" in reason:
        return "memory"
    if "budget" in reason:
        return "cost"
    return None


_SIZE = re.compile(r"\bneeds? (?:about )?(\d[\d,]*(?:\.\d+)?) (GiB|MiB|KiB|B)\b")
_UNITS = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "B": 1}


def _needs(reason: str | None) -> int | None:
    """The bytes a reason says a method needs ('... need 15,493 GiB, over ...'), if it says."""
    m = _SIZE.search(reason or "")
    if m is None:
        return None
    return int(float(m.group(1).replace(",", "")) * _UNITS[m.group(2)])


def _too_large(entry: dict[str, Any]) -> int | None:
    """Bytes a memory-skipped checker needs beyond this machine's memory; else None."""
    from kcheck.memory import default_memory_limit

    need = _needs(entry.get("reason"))
    physical = 2 * default_memory_limit()  # the default limit is half of physical memory
    return need if need is not None and need > physical else None


def _cut_words(entry: dict[str, Any]) -> str:
    """'degree-2 was skipped (its reason)': a checker that did not run or was cut short."""
    verb = {"did not run": "was skipped"}.get(entry.get("what") or "", entry.get("what"))
    reason = entry.get("reason")
    return f"{NAMES[entry['checker']]} {verb}" + (f" ({reason})" if reason else "")


def _who(name: str) -> str:
    """A method at the start of a sentence."""
    return "An RBF SVM" if name == _exact() else _capital(NAMES[name])


def _moved(v: dict[str, Any], c: dict[str, Any]) -> str:
    """A gap's move in words: 'gained 1.41 points over linear', 'scored 0.95 points below'."""
    eps, gap = v["epsilon"], c["gap"]
    if gap == 0:
        return f"scored the same as linear{_in_metric(v)}"
    size = side_pts(abs(gap), eps, 2, sign=False)
    if gap > 0:
        return f"gained {size} points{_in_metric(v)} over linear"
    return f"scored {size} points{_in_metric(v)} below linear"


def same_run(v: dict[str, Any]) -> str:
    """Options a suggested ``kcheck check`` repeats: ``--max-rows``, non-default ``--checkers``."""
    from kcheck.defaults import DEFAULT_CHECKERS

    said = ""
    sampling = v["data"].get("sampling")
    if sampling:
        said += f" --max-rows {sampling['max_rows']}"
    # The plan names every checker asked for, a stand-in that did not run included.
    steps = (v.get("plan") or {}).get("steps") or ()
    names = [s["name"] for s in steps if s.get("role") in ("proxy", "stand-in")]
    if names and set(names) != set(DEFAULT_CHECKERS):
        order = dict.fromkeys(n for n in (*DEFAULT_CHECKERS, *names) if n in names)
        said += f" --checkers {','.join(order)}"
    return said


def model_cost(v: dict[str, Any], kind: str) -> str:
    """``about 34 min predicted``: ``--model-out``'s time for a ``kind`` model, from counts."""
    from kcheck.modelfiles import export
    from kcheck.tuning.rbf_grid import duration_text

    d = v["data"]
    seconds = export.seconds_of(
        "kernel" if kind == "kernel" else "linear",
        rows=int(d["rows"]),
        nnz=int(d["nnz"]),
        features=int(d.get("features") or 0),
        n_classes=max(2, len(d.get("classes") or ())),
        jobs=os.cpu_count() or 1,
    )
    return f"about {duration_text(seconds)} predicted"


def verdict_summary(v: dict[str, Any], model_out: str | None = None) -> str:
    """The verdict in plain words from the rule's record (:func:`decision_record`): which gap or
    skip and why, what next; ``model_out``: a model is being trained, use it next."""
    eps = v["epsilon"]
    bar = f"{100 * eps:g}"
    data = _command(v["data"]["path"])
    metric = v.get("metric") or "accuracy"
    if metric != "accuracy":  # the next commands train and verify in the same metric
        data += f" --metric {metric}"
    again = data + same_run(v)
    train = (
        f"`kcheck check {again} --model-out MODEL` trains it ({model_cost(v, str(v['verdict']))})"
        if model_out is None
        else "the model for --model-out is trained now, then "
        f"`kcheck predict {shlex.quote(model_out)} FILE` labels new data with it"
    )
    verify = _verify_step(v, data)
    d = decision_record(v)
    gaps = {n: c for n, c in v["checkers"].items() if c.get("gap") is not None}
    exact = _exact()
    deciding = str(d.get("deciding"))
    if v["verdict"] == "kernel" and deciding in gaps:
        c = gaps[deciding]
        where = " in cross-validation on all rows" if deciding == exact else ""
        if two_folds(v, deciding):
            where = " on average over two folds"
        text = (
            f"{_who(deciding)} beat linear by {side_pts(c['gap'], eps, sign=False)} points"
            f"{_in_metric(v)}{where} (95% CI {ci_text(c, eps, sign=False)}; epsilon is {bar} "
            "points)"
        )
        if d.get("by") == "overrule":
            text += (
                "; its whole interval lies at or above epsilon, so it decides over exact "
                "mode's linear verdict"
            )
            if exact in gaps:
                text += (
                    f" (an RBF SVM {_moved(v, gaps[exact])} in cross-validation on all rows, "
                    f"95% CI {ci_text(gaps[exact], eps)}; its tuning on a sample can miss a "
                    "gain that needs a larger C)"
                )
        if v["margin"] == "clear":
            win = "the kernel is worth it" if deciding == exact else "an RBF SVM should win"
            return text + f"; {win} here. Next: {train}; {_verify_step(v, data, confirms=True)}."
        low = side_pts(c["gap_ci95"][0], eps, sign=False)
        return (
            text + f", but the lower end of its interval, {low}, lies below {bar} points, so "
            f"this is not settled. To settle it: {verify}; more data would narrow the interval."
        )
    if not gaps:
        return "No checker finished, so nothing could overturn linear."
    if d.get("by") == "exact" and exact in gaps:
        r = gaps[exact]
        text = (
            f"An RBF SVM {_moved(v, r)} in cross-validation on all rows (95% CI {ci_text(r, eps)})"
        )
        text += (
            f", short of the {bar} the kernel needs"
            if r["gap"] > 0
            else f"; the kernel needs a gain of {bar}"
        )
        text += _exact_over(v, gaps)
    else:
        ranked = sorted(gaps, key=lambda n: -gaps[n]["gap"])
        closest = ", ".join(
            f"{NAMES[n]} {gap_text(gaps[n], eps)} (95% CI {ci_text(gaps[n], eps)})"
            for n in ranked[:2]
        )
        text = f"No checker beat linear by {bar} points{_in_metric(v)}; the closest: {closest}"
    if v["margin"] == "clear":
        return text + f". A linear model is enough here. Next: {train}."
    why, remedies = _unsettled(v, d)
    return text + f". Not settled: {why}. To settle it: " + "; ".join([verify, *remedies]) + "."


def _exact_over(v: dict[str, Any], gaps: dict[str, dict[str, Any]]) -> str:
    """Where exact mode decided ``linear`` over checkers whose gap or interval reached epsilon, the
    sentence naming them (its ``clear`` rests on its own interval)."""
    from kcheck.verdict import reaches

    eps = v["epsilon"]
    proxies = [n for n in gaps if n != _exact()]
    over = [n for n in proxies if reaches(gaps[n]["gap"], eps)]
    near = [n for n in proxies if n not in over and reaches(gaps[n]["gap_ci95"][1], eps)]
    text = ""
    if over:
        gains = _and(f"{NAMES[n]}'s {gap_text(gaps[n], eps)}" for n in over)
        intervals = _and(f"{ci_text(gaps[n], eps)}" for n in over)
        one = len(over) == 1
        text += (
            f". {_capital(gains)} on the validation split {'reaches' if one else 'reach'} "
            f"epsilon, but exact mode's RBF comparison decides over {'it' if one else 'them'}: "
            f"{'its interval' if one else 'their intervals'} ({intervals}) "
            f"{'reaches' if one else 'reach'} below {100 * eps:g} points, and cross-validation "
            "on all rows measures the kernel itself"
        )
    if near:
        intervals = _and(f"{NAMES[n]}'s ({ci_text(gaps[n], eps)})" for n in near)
        one = len(near) == 1
        text += (
            f". The interval{'' if one else 's'} of {intervals} on the validation split "
            f"{'reaches' if one else 'reach'} epsilon too; exact mode's measurement, repeated "
            "cross-validation on all rows, stands over " + ("it" if one else "them")
        )
    return text


def _unsettled(v: dict[str, Any], d: dict[str, Any]) -> tuple[str, list[str]]:
    """Why a linear verdict is borderline, from the record, with remedies (:func:`_remedies`)."""
    eps = v["epsilon"]
    bar = f"{100 * eps:g}"
    exact = _exact()
    why: list[str] = []
    cut = list(d.get("cut_short") or ())
    if cut:
        words = _and(_cut_words(e) for e in cut)
        why.append(
            f"{words}, so {'it' if len(cut) == 1 else 'they'} cannot confirm the linear verdict"
        )
    straddling = [n for n in d.get("straddling") or () if _has_gap(v, n)]
    for name in straddling:
        c = v["checkers"][name]
        who = f"{NAMES[name]} in cross-validation" if name == exact else NAMES[name]
        hi = side_pts(c["gap_ci95"][1], eps)
        why.append(f"the interval of {who} reaches {bar} points (up to {hi})")
    if not why:
        why.append(f"an interval reaches {bar} points")
    interval = bool(straddling) or d.get("margin_reason") == "interval-reaches-epsilon"
    return "; ".join(why), _remedies(v, cut, interval, len(straddling))


def _remedies(
    v: dict[str, Any], cut: list[dict[str, Any]], interval: bool, straddling: int
) -> list[str]:
    """--memory-limit where memory cut a checker that more could let run, --time-limit where time
    cut one, more data where an interval reaches epsilon."""
    remedies: list[str] = []
    memory = [e for e in cut if _limit(v, e) == "memory" and _too_large(e) is None]
    huge = [e for e in cut if _limit(v, e) == "memory" and _too_large(e) is not None]
    time = [e for e in cut if _limit(v, e) == "time"]
    if interval:
        remedies.append("more data would narrow the interval" + ("s" if straddling > 1 else ""))
    if memory:
        remedies.append(
            f"a larger --memory-limit would give {_and(NAMES[e['checker']] for e in memory)} "
            "the memory to run"
        )
    if time:
        remedies.append(
            f"a larger --time-limit would give {_and(NAMES[e['checker']] for e in time)} "
            "the time to finish"
        )
    for e in huge:
        need = size_text(_too_large(e) or 0)
        what = "to expand" if e["checker"] == "degree2" else "to run"
        remedies.append(
            f"{NAMES[e['checker']]} is too large {what} on this machine (it needs {need}), "
            "whatever the memory limit"
        )
    return remedies
