"""A checker added through the registry alone reaches the JSON, its schema, the table, the
sentences and the HTML report: nothing downstream names the checkers itself."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import DATASETS, ROOT
from referencing import Registry, Resource
from rich.console import Console

from kcheck import defaults, pipeline
from kcheck.checkers import registry
from kcheck.checkers.base import CheckerResult, Context, Dataset, Sized, score
from kcheck.cli import render, words
from kcheck.config import CheckConfig
from kcheck.reports import html as report
from kcheck.tuning import linear_c as tuning

TOY = "toy"
WORDS = "the toy linear model"
COLOUR = "#123456"


def toy_check(T: Dataset, V: Dataset, ctx: Context, sized: Sized) -> CheckerResult:
    """LIBLINEAR at C = 1 without a C search: a real model, trained on T, scored on V. Its
    table shows a count beside C, which no checker's hard-coded formatting would."""
    t0 = time.perf_counter()
    model, _ = tuning.fit_linear(T.X, T.y, seed=ctx.seed, C=1.0, class_weight=ctx.class_weight)
    s = score(model, V)
    return CheckerResult(
        name=TOY,
        status="ok",
        val_accuracy=s.accuracy,
        correct=s.correct,
        predicted=s.predicted,
        scores=s.scores,
        seconds=time.perf_counter() - t0,
        info={"C": model.C, "rows": T.rows},
        predict=model.predict,
    )


def schema_script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "schema_checkers", ROOT / "scripts" / "schema_checkers.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def with_toy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy in the registry's table and in the one list of names (kcheck.defaults, which
    the registry's NAMES and the pipeline's CHECKERS copy at import)."""
    spec = registry.CheckerSpec(
        TOY,
        toy_check,
        (registry.Param("C", "C"), registry.Param("n", "rows", log2=False)),
        False,
        "a linear model at C = 1",
        words=WORDS,
        colour=COLOUR,
    )
    names = (*defaults.CHECKER_NAMES, TOY)
    monkeypatch.setitem(registry.CHECKERS, TOY, spec)
    monkeypatch.setattr(defaults, "CHECKER_NAMES", names)
    monkeypatch.setattr(registry, "NAMES", names)


def test_a_checker_added_to_the_registry_alone_is_shown_everywhere(
    with_toy: None, tmp_path: Path
) -> None:
    config = CheckConfig(
        train=str(DATASETS / "heart_scale"), checkers=("degree2", TOY), exact="never"
    )
    v = json.loads(json.dumps(pipeline.run(config).json))
    toy = v["checkers"][TOY]
    assert toy["status"] == "ok" and toy["C"] == 1 and toy["gap"] is not None
    # The plan gives it all of T, as a proxy, after degree-2 (registry order).
    steps = [s["name"] for s in v["plan"]["steps"]]
    assert steps == ["linear", "rbf", "degree2", TOY]
    (planned,) = [s for s in v["plan"]["steps"] if s["name"] == TOY]
    assert planned["runs"] and planned["role"] == "proxy" and planned["rows"] == toy["rows"]

    # The JSON is valid against the schemas the script writes from the patched registry, and
    # not against the shipped ones, which do not know the toy.
    script = schema_script()
    written = {n: json.loads(t) for n, t in script.schemas().items()}
    assert written["check.schema.json"]["$defs"][TOY]["description"] == "a linear model at C = 1"
    verify = json.loads((ROOT / "kcheck" / "schema" / "verify.schema.json").read_text())
    schemas = [*written.values(), verify]
    refs = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas)
    check = jsonschema.Draft202012Validator(written["check.schema.json"], registry=refs)
    assert [e.message for e in check.iter_errors(v)] == []
    shipped = json.loads((ROOT / "kcheck" / "schema" / "check.schema.json").read_text())
    assert not jsonschema.Draft202012Validator(shipped).is_valid(v)

    # The table shows its row and its parameter as the registry says.
    out = io.StringIO()
    Console(width=200, file=out, color_system=None).print(render.verdict_table(v, 200))
    row = [x for x in out.getvalue().splitlines() if x.split()[:1] == [TOY]]
    assert len(row) == 1 and f"C=2^0 n={toy['rows']}" in row[0] and " ok " in row[0]

    # The sentences name it in its words: as a checker that did not finish, and as the closest.
    assert render.NAMES[TOY] == WORDS
    unfinished = json.loads(json.dumps(v))
    unfinished["checkers"][TOY]["gap"] = None
    unfinished["verdict"], unfinished["margin"] = "linear", "borderline"
    assert f"{WORDS} did not finish" in words.verdict_summary(unfinished)
    closest = json.loads(json.dumps(v))
    closest["verdict"], closest["margin"] = "linear", "clear"
    closest["checkers"][TOY]["gap"] = 0.019
    closest["checkers"][TOY]["gap_ci95"] = [0.0, 0.038]
    assert f"{WORDS} +1.90" in words.verdict_summary(closest)

    # The HTML report plots it in its colour, and its table has a column for it.
    line = tmp_path / "lines.jsonl"
    line.write_text(json.dumps({"name": "heart_scale", "status": "ok", **v}) + "\n")
    rows = report.read_lines(str(line))
    assert TOY in rows[0].gaps
    page = report.render(rows, "toy")
    assert f'fill="{COLOUR}"' in page and f"<th>{TOY} gap</th>" in page
