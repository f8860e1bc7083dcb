"""The README's example sessions, made by running them: the README shows what kcheck prints.

Each example is a list of shell-like steps run in a scratch directory that holds copies of the
bundled data sets (``fourclass``, ``heart_scale``, ``data/`` with three sets, ``datasets/``).
What a step shows is its stderr as a terminal keeps it: the stage lines a log gets, which a
terminal shows as a transient progress line, are left out.

    python scripts/readme_examples.py            # rewrite the README's generated blocks
    python scripts/readme_examples.py --check    # exit 1 where a block has drifted
    python scripts/readme_examples.py --report   # docs/report.html, and docs/report.png

The report page is ``kcheck report`` over the batch example's results; its screenshot
(``docs/report.png``, which the README shows) is taken by headless Chromium where it is
installed. The test compares the page's HTML, not the picture's pixels.

A block sits between ``<!-- example: NAME -->`` and ``<!-- /example -->``. tests/test_readme.py
compares each block with a fresh run, with times and spacing set aside (:func:`normal`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
REPORT_HTML = ROOT / "docs" / "report.html"
REPORT_PNG = ROOT / "docs" / "report.png"
DATASETS = ROOT / "datasets"
BATCH_SETS = ("fourclass", "german.numer", "heart_scale")


@dataclass(frozen=True)
class Step:
    """One command as the README shows it. ``show``: ``stderr`` (the status kcheck prints),
    or ``file:NAME`` (the first lines of a file it wrote, as ``head -3 NAME`` shows them)."""

    shown: str
    argv: tuple[str, ...]
    show: str = "stderr"
    #: The file its stdout goes to (``> labels``).
    to: str | None = None


@dataclass(frozen=True)
class Example:
    name: str
    columns: int
    steps: tuple[Step, ...]
    #: In the fast test tier (seconds, not tens of seconds).
    quick: bool = False


def _kcheck(*args: str) -> tuple[str, ...]:
    return ("kcheck", *args)


_BATCH = _kcheck("batch", "data", "-o", "results.jsonl")
EXAMPLES = (
    Example("check-80", 80, (Step("kcheck check fourclass", _kcheck("check", "fourclass")),), True),
    Example("check-120", 120, (Step("kcheck check fourclass", _kcheck("check", "fourclass")),)),
    Example(
        "batch-80",
        80,
        (Step("kcheck batch data -o results.jsonl", _BATCH),),
    ),
    Example(
        "batch-120",
        120,
        (Step("kcheck batch data -o results.jsonl", _BATCH),),
    ),
    Example(
        "verify",
        80,
        (Step("kcheck verify heart_scale -j 2", _kcheck("verify", "heart_scale", "-j", "2")),),
    ),
    Example(
        "model",
        80,
        (
            Step(
                "kcheck check datasets/fourclass --model-out m",
                _kcheck("check", "datasets/fourclass", "--model-out", "m"),
            ),
            Step(
                "kcheck predict m datasets/fourclass > labels",
                _kcheck("predict", "m", "datasets/fourclass"),
                to="labels",
            ),
            Step("head -3 labels", (), show="file:labels"),
        ),
    ),
    Example(
        "usage-error",
        200,
        (
            Step(
                "kcheck check data.svm --epsilon 2",
                _kcheck("check", "data.svm", "--epsilon", "2"),
            ),
        ),
        True,
    ),
)


def scratch() -> Path:
    """A directory with the data sets where the examples name them."""
    d = Path(tempfile.mkdtemp(prefix="kcheck-readme-"))
    (d / "data").mkdir()
    (d / "datasets").mkdir()
    for name in BATCH_SETS:
        shutil.copy(DATASETS / name, d / name)
        shutil.copy(DATASETS / name, d / "data" / name)
        shutil.copy(DATASETS / name, d / "datasets" / name)
    (d / "data.svm").write_bytes((DATASETS / "heart_scale").read_bytes())
    return d


_DONE = re.compile(r"^kcheck: (.+): done in [\d.]+s(?: \([^)]*\))?$")
_PREDICTED = re.compile(r" \(about [^)]*predicted\)$")


#: A log's progress lines that a terminal shows in its progress line instead: a batch's data
#: set starting, and a long stage's "still running" (kcheck.cli.ui).
_PROGRESS = re.compile(
    r"^kcheck: (\[\d+/\d+\] .+: checking|\d+/\d+ done; checking .+|.+: still running, .+)$"
)


def terminal_view(stderr: str) -> str:
    """``stderr`` of a run off a terminal as a terminal leaves it: without the stage lines
    (``kcheck: STAGE`` and ``kcheck: STAGE: done in 1.2s``), which a terminal shows as a
    progress line that goes away. A stage line the log folded at its width (a long stage's
    note) is one line again first: its folds are indented by two spaces."""
    raw, lines = stderr.splitlines(), []
    i = 0
    while i < len(raw):
        lines.append(raw[i])
        joined, j = raw[i], i + 1
        while raw[i].startswith("kcheck: ") and j < len(raw) and raw[j].startswith("  "):
            joined, j = joined + " " + raw[j].strip(), j + 1
            if _DONE.match(joined):  # a folded stage line, as one
                lines[-1], i = joined, j - 1
                break
        i += 1
    stages = {m.group(1) for x in lines if (m := _DONE.match(x))}
    kept = [
        x
        for x in lines
        if not _DONE.match(x)
        and not _PROGRESS.match(x)
        and not (x.startswith("kcheck: ") and _PREDICTED.sub("", x[8:]) in stages)
    ]
    return "\n".join(kept).rstrip() + "\n"


def run(example: Example, where: Path) -> str:
    """The example's session, as the README shows it."""
    env = {**os.environ, "COLUMNS": str(example.columns), "PYTHONSAFEPATH": "1"}
    env.pop("KCHECK_TIME_SCALE", None)
    out = []
    for step in example.steps:
        out.append(f"$ {step.shown}\n")
        if step.show.startswith("file:"):
            lines = (where / step.show[5:]).read_text().splitlines(keepends=True)
            out.append("".join(lines[:3]))
            continue
        argv = [sys.executable, "-m", "kcheck", *step.argv[1:]]
        r = subprocess.run(
            argv, cwd=where, env=env, capture_output=True, text=True, timeout=900, check=False
        )
        if step.to is not None:
            (where / step.to).write_text(r.stdout)
        out.append(terminal_view(r.stderr))
    return "".join(out)


_TIME = re.compile(r"\b\d+(?:\.\d+)?s\b|\babout [\d.,]+ (?:s|min)\b")
_SECONDS_CELL = re.compile(r"\s+\d+\.\d\d$")


#: A warning that a stage's CPU seconds fell outside half or twice its prediction: it follows
#: the machine's speed and load (kcheck.plan.off_prediction), not the data.
_OFF_PREDICTION = re.compile(r"^warning: \S+ took [\d.]+ CPU seconds against [\d.]+ predicted")


def normal(text: str) -> str:
    """``text`` with what changes from run to run set aside: times (``1.69s``, a table's last
    column of seconds), the spacing and wrapping that their widths move, and warnings that a
    stage took more or less than predicted on this machine."""
    kept: list[str] = []
    dropping = False
    for x in text.splitlines():
        # The warning, and the lines a log's width folded it onto ("  " first).
        dropping = bool(_OFF_PREDICTION.match(x)) or (dropping and x.startswith("  "))
        if not dropping:
            kept.append(x)
    lines = [_SECONDS_CELL.sub(" T", _TIME.sub("Ts", x)) for x in kept]
    return " ".join(t for x in lines for t in x.split() if set(t) != {"─"})


def report_page(where: Path) -> str:
    """``kcheck report`` over the batch example's results, made in ``where``."""
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    for argv in (_BATCH[1:] + ("-q",), ("report", "results.jsonl", "-o", "report.html", "-q")):
        subprocess.run(
            [sys.executable, "-m", "kcheck", *argv], cwd=where, env=env, check=True, timeout=900
        )
    return (where / "report.html").read_text()


_SECONDS_TD = re.compile(
    r'(<tr class="result">(?:<td[^>]*>[^<]*</td>){7})<td class="num" data-key="[^"]*">[^<]*</td>'
)


def normal_html(page: str) -> str:
    """The report page with each data set's seconds set aside."""
    return _SECONDS_TD.sub(r"\1<td>T</td>", page)


def screenshot(page: Path, png: Path) -> bool:
    """``page`` as headless Chromium draws it at 1400 px wide; False where there is none."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return False
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--screenshot={png}",
                "--window-size=1400,600",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    return True


def blocks(readme: str) -> dict[str, str]:
    """The generated blocks of the README by name, their text inside the fence."""
    found = re.findall(
        r"<!-- example: (\S+) -->\n```text\n(.*?)```\n<!-- /example -->", readme, flags=re.S
    )
    return dict(found)


def rewrite(readme: str, made: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        body = made.get(name, m.group(2))
        return f"<!-- example: {name} -->\n```text\n{body}```\n<!-- /example -->"

    return re.sub(
        r"<!-- example: (\S+) -->\n```text\n(.*?)```\n<!-- /example -->", one, readme, flags=re.S
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 where a block drifted")
    parser.add_argument("--report", action="store_true", help="docs/report.html and .png")
    parser.add_argument("names", nargs="*", help="only these examples")
    args = parser.parse_args()
    if args.report:
        where = scratch()
        try:
            page = report_page(where)
        finally:
            shutil.rmtree(where, ignore_errors=True)
        if args.check:
            drifted = normal_html(page) != normal_html(REPORT_HTML.read_text())
            print("docs/report.html drifted" if drifted else "docs/report.html is current")
            return 1 if drifted else 0
        tmp = REPORT_HTML.with_name(".report.html.tmp")
        tmp.write_text(page)
        tmp.replace(REPORT_HTML)
        shot = REPORT_PNG.with_name(".report.tmp.png")
        if screenshot(REPORT_HTML, shot):
            shot.replace(REPORT_PNG)
        else:
            print("no chromium: docs/report.png left as it was", file=sys.stderr)
        return 0
    chosen = [e for e in EXAMPLES if not args.names or e.name in args.names]
    where = scratch()
    try:
        made = {e.name: run(e, where) for e in chosen}
    finally:
        shutil.rmtree(where, ignore_errors=True)
    text = README.read_text()
    have = blocks(text)
    missing = [n for n in made if n not in have]
    if missing:
        print(f"README.md has no block for {', '.join(missing)}", file=sys.stderr)
        return 1
    if args.check:
        drifted = [n for n, body in made.items() if normal(body) != normal(have[n])]
        for n in drifted:
            print(f"README.md: example {n} drifted; now:\n{made[n]}", file=sys.stderr)
        return 1 if drifted else 0
    tmp = README.with_name(".README.md.tmp")
    tmp.write_text(rewrite(text, made))
    tmp.replace(README)
    return 0


if __name__ == "__main__":
    sys.exit(main())
