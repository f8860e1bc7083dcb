"""The JSON of check, batch and verify against the shipped JSON Schemas and docs/json.md.

Every output validated here comes from a real run of ``python -m kcheck`` on real data, and
each run asserts that it exercised what it is there for (a skipped checker, a subsample, an
error line...), so a change of behaviour cannot quietly shrink what the schemas are held to.
The schemas are strict, so a field added to the output without a schema (and docs) update fails
here too.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from importlib import metadata
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from conftest import DATASETS, ROOT
from referencing import Registry, Resource
from runner import kcheck

SCHEMA_DIR = files("kcheck").joinpath("schema")
SCHEMA_NAMES = ("check.schema.json", "batch-line.schema.json", "verify.schema.json")
DOCS = ROOT / "docs" / "json.md"

Json = dict[str, Any]


# --- schemas ------------------------------------------------------------------------------


def load_schemas() -> dict[str, Json]:
    return {name: json.loads(SCHEMA_DIR.joinpath(name).read_text()) for name in SCHEMA_NAMES}


SCHEMAS = load_schemas()
REGISTRY: Registry = Registry().with_resources(
    (s["$id"], Resource.from_contents(s)) for s in SCHEMAS.values()
)


def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(SCHEMAS[name], registry=REGISTRY)


def problems(
    name: str, instance: Any, check: jsonschema.Draft202012Validator | None = None
) -> list[str]:
    """Each way ``instance`` fails schema ``name`` (or the validator ``check``), one line each."""
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:300]}"
        for e in (check or validator(name)).iter_errors(instance)
    ]


def assert_valid(name: str, instance: Any) -> None:
    found = problems(name, instance)
    assert not found, "\n".join(found)


def test_schema_files_are_valid_draft_2020_12() -> None:
    assert sorted(p.name for p in SCHEMA_DIR.iterdir() if p.name.endswith(".json")) == sorted(
        SCHEMA_NAMES
    )
    for name, schema in SCHEMAS.items():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["$id"].endswith("/" + name)


GOLDENS = sorted((ROOT / "tests" / "golden").glob("*.json"))


def _timings_optional(node: Any) -> Any:
    """The schema with every ``*seconds`` field optional: the goldens leave timings out."""
    if isinstance(node, dict):
        out = {k: _timings_optional(v) for k, v in node.items()}
        if isinstance(node.get("required"), list):
            out["required"] = [k for k in node["required"] if not k.endswith("seconds")]
        return out
    if isinstance(node, list):
        return [_timings_optional(v) for v in node]
    return node


LOOSE = {name: _timings_optional(s) for name, s in SCHEMAS.items()}
LOOSE_REGISTRY: Registry = Registry().with_resources(
    (s["$id"], Resource.from_contents(s)) for s in LOOSE.values()
)


@pytest.mark.parametrize("path", GOLDENS, ids=[p.name for p in GOLDENS])
def test_every_golden_matches_the_schema_but_its_timings(path: Path) -> None:
    """A field added to the output and the schema fails here at once, in the fast tier, for
    every golden, not only for the goldens whose runs are fast enough to be in it."""
    name = "verify.schema.json" if path.name.endswith(".verify.json") else "check.schema.json"
    check = jsonschema.Draft202012Validator(LOOSE[name], registry=LOOSE_REGISTRY)
    found = problems(name, json.loads(path.read_text()), check)
    assert not found, f"{path.name}: " + "\n".join(found)


def test_schema_files_ship_with_the_package() -> None:
    """``pip install .`` must install them: pyproject lists packages, not data, by default."""
    text = (ROOT / "pyproject.toml").read_text()
    section = re.search(r"^\[tool\.setuptools\.package-data\]\n(.*?)(?:^\[|\Z)", text, re.M | re.S)
    assert section is not None, "pyproject.toml has no [tool.setuptools.package-data]"
    globs = re.findall(
        r'"([^"]+)"', re.search(r"^kcheck\s*=\s*\[(.*?)\]", section.group(1), re.M | re.S).group(1)
    )
    for name in SCHEMA_NAMES:
        assert any(Path("schema", name).match(g) for g in globs), (name, globs)
    # Where kcheck is installed from a wheel (as in CI), its file list holds the schemas.
    installed = {str(f) for f in metadata.files("kcheck") or []}
    if "kcheck/__init__.py" in installed:
        for name in SCHEMA_NAMES:
            assert f"kcheck/schema/{name}" in installed


# --- real runs -----------------------------------------------------------------------------


def three_classes(path: Path) -> Path:
    """150 rows of 3 classes in 4 dense features: small enough for exact mode under auto."""
    rng = np.random.default_rng(7)
    with path.open("w") as f:
        for i in range(150):
            c = i % 3
            x = rng.normal(size=4) + np.array([c, -c, 0.5 * c, 0.0])
            f.write(f"{c + 1} " + " ".join(f"{j + 1}:{v:.4f}" for j, v in enumerate(x)) + "\n")
    return path


def both_classes(src: Path, dst: Path, each: int) -> Path:
    """The first and last ``each`` rows of a file sorted by label: both classes, few rows."""
    lines = src.read_text().splitlines(keepends=True)
    dst.write_text("".join(lines[:each] + lines[-each:]))
    return dst


H, F, G = DATASETS / "heart_scale", DATASETS / "fourclass", DATASETS / "german.numer"
S, ST = DATASETS / "svmguide1", DATASETS / "svmguide1.t"
QUIET = ("--json", "-q", "-j", "1")

#: label -> (arguments after "check", what the run must show). ``{tmp}`` is a scratch directory.
CHECKS: dict[str, tuple[tuple[str | Path, ...], Callable[[Json], bool]]] = {
    "heart_scale, exact always, every checker, --test": (
        (H, "--exact", "always", "--checkers", "degree2,multilinear,rff,kfactory", "--test", H),
        lambda v: (
            v["exact"]["ran"]
            and set(v["checkers"]) == {"degree2", "multilinear", "rff", "kfactory", "rbf"}
            and set(v["test"]["accuracy"])
            >= {"linear", "degree2", "multilinear", "rff", "kfactory", "rbf"}
        ),
    ),
    "fourclass, exact always, linear model": (
        (F, "--exact", "always", "--model-out", "{tmp}/fourclass.model", "--model", "linear"),
        lambda v: (
            v["verdict"] == "kernel"
            and v["deciding_checker"] == "rbf"
            and v["model"]["kind"] == "linear"
            and v["model"]["grid_points"] is None
        ),
    ),
    "german.numer, exact never": (
        (G, "--exact", "never"),
        lambda v: not v["exact"]["ran"] and "rbf" not in v["checkers"],
    ),
    "svmguide1, exact never, --test": (
        (S, "--exact", "never", "--test", ST),
        lambda v: v["test"]["rows"] == 4000 and "rbf" not in v["test"]["accuracy"],
    ),
    "memory limit skips degree2, rff and exact mode": (
        (G, "--memory-limit", "65M", "--checkers", "degree2,multilinear,rff"),
        lambda v: (
            v["checkers"]["degree2"]["status"] == "skipped"
            and v["checkers"]["rff"]["status"] == "skipped"
            and not v["exact"]["ran"]
            and v["margin"] == "borderline"
            and len(v["warnings"]) == 2
        ),
    ),
    "memory limit subsamples degree2, --test": (
        # 1,953 of 2,317 rows: what 1.4 MiB leaves beside the expansion's chunk.
        (S, "--memory-limit", "65.5M", "--exact", "never", "--test", ST),
        lambda v: (
            v["checkers"]["degree2"]["status"] == "subsampled"
            and v["checkers"]["degree2"]["limited_by"] == "memory"
        ),
    ),
    "svmguide1, --explain, linear+2 model": (
        (
            S,
            "--exact",
            "never",
            "--explain",
            "--model-out",
            "{tmp}/sg.model",
            "--model",
            "linear+2",
        ),
        lambda v: (
            v["model"]["kind"] == "linear+2"
            and v["model"]["terms_path"].endswith("sg.model.terms")
            and v["explain"]["available"]
            and len(v["explain"]["terms"]) == 10
            and [r["k"] for r in v["explain"]["recovered"]] == [1, 3, 10]
        ),
    ),
    "memory limit skips degree2, --explain": (
        (G, "--memory-limit", "65M", "--explain", "--exact", "never"),
        lambda v: not v["explain"]["available"] and v["explain"]["terms"] is None,
    ),
    "three classes, exact auto, kernel model": (
        (
            "{tmp}/three.svm",
            "--checkers",
            "degree2,multilinear,rff,kfactory",
            "--model-out",
            "{tmp}/three.model",
            "--model",
            "kernel",
        ),
        lambda v: (
            len(v["data"]["classes"]) == 3
            and v["checkers"]["kfactory"]["status"] == "ok"
            and v["exact"]["mode"] == "auto"
            and v["exact"]["ran"]
            and v["exact"]["estimated_seconds"] is not None
            and v["model"]["kind"] == "kernel"
        ),
    ),
}


class Runs:
    """Each check run once per module, on first use, so a selected test runs only its own."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        three_classes(tmp / "three.svm")
        self.done: dict[str, Json] = {}

    def check(self, label: str) -> Json:
        if label not in self.done:
            args, _ = CHECKS[label]
            filled = [str(a).replace("{tmp}", str(self.tmp)) for a in args]
            self.done[label] = kcheck("check", *filled, *QUIET, code=0).json
        return self.done[label]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("schema"))


@pytest.mark.parametrize("label", list(CHECKS))
def test_check_output_matches_the_schema(runs: Runs, label: str) -> None:
    verdict = runs.check(label)
    assert CHECKS[label][1](verdict), json.dumps(verdict, indent=1)
    assert_valid("check.schema.json", verdict)


@pytest.fixture(scope="module")
def batch_lines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Json]]:
    """A directory with a data set, a train/test pair, a broken file and a README, as a
    batch sees it: the first run, a --resume run that reuses the ok lines, and --strict."""
    tmp = tmp_path_factory.mktemp("batch")
    top = tmp / "sets"
    top.mkdir()
    (top / "heart_scale").write_bytes(H.read_bytes())
    both_classes(S, top / "sg", 100)
    both_classes(ST, top / "sg.t", 50)
    (top / "broken.svm").write_text("1 1:0.5\n-1 2:x\n")
    (top / "README.md").write_text("Data for the schema tests.\n")
    out = tmp / "results.jsonl"

    def batch(*extra: str, to: Path | str = out) -> list[Json]:
        run = kcheck("batch", top, "-o", to, "-q", "-j", "1", "--exact", "never", *extra, code=3)
        text = run.stdout.decode() if to == "-" else Path(to).read_text()
        return [json.loads(line) for line in text.splitlines()]

    first = batch()
    resumed = batch("--resume")
    strict = batch("--strict", "--explain", to="-")
    return {"first": first, "resumed": resumed, "strict": strict}


@pytest.mark.parametrize("run", ["first", "resumed", "strict"])
def test_batch_lines_match_the_schema(batch_lines: dict[str, list[Json]], run: str) -> None:
    lines = batch_lines[run]
    by_status: dict[str, list[Json]] = {}
    for line in lines:
        assert_valid("batch-line.schema.json", line)
        by_status.setdefault(line["status"], []).append(line)
    assert sorted(x["name"] for x in by_status["ok"]) == ["heart_scale", "sg"]
    assert [x["name"] for x in by_status["ok"] if x["test"]] == ["sg"]
    assert all(("explain" in x) == (run == "strict") for x in by_status["ok"])
    if run == "strict":
        assert "skipped" not in by_status
        assert sorted(bool(x.get("reason")) for x in by_status["error"]) == [False, True]
    else:
        assert [x["name"] for x in by_status["error"]] == ["broken.svm"]
        assert [x["reason"] for x in by_status["skipped"]] == [".md file"]


def test_resumed_lines_are_the_saved_ones(batch_lines: dict[str, list[Json]]) -> None:
    """--resume carries the ok lines over as they were, timing included."""

    def ok(run: str) -> dict[str, Json]:
        return {x["name"]: x for x in batch_lines[run] if x["status"] == "ok"}

    assert ok("resumed") == ok("first")


@pytest.fixture(scope="module")
def verify_outputs(runs: Runs, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Json]:
    tmp = tmp_path_factory.mktemp("verify")
    saved = tmp / "check.json"
    saved.write_text(json.dumps(runs.check("german.numer, exact never")))
    plain = kcheck("verify", G, "--max-rows", "120", *QUIET, code=0).json
    gated = kcheck(
        "verify", G, "--max-rows", "120", "--test", G, "--check-json", saved, *QUIET, code=(0, 1)
    )
    verdict = gated.json
    assert gated.code == (0 if verdict["confirms"] else 1), gated.describe()
    return {"plain": plain, "with --test and --check-json": verdict}


@pytest.mark.parametrize("which", ["plain", "with --test and --check-json"])
def test_verify_output_matches_the_schema(verify_outputs: dict[str, Json], which: str) -> None:
    v = verify_outputs[which]
    assert v["data"]["cv_rows"] == 120
    if which == "plain":
        assert v["test"] is None and v["check"] is None and v["confirms"] is None
    else:
        assert v["test"]["rows"] == 1000 and isinstance(v["confirms"], bool)
    assert_valid("verify.schema.json", v)


# --- the schemas can fail ------------------------------------------------------------------


def _drop(*path: str) -> Callable[[Json], None]:
    def edit(d: Json) -> None:
        for key in path[:-1]:
            d = d[key]
        del d[path[-1]]

    return edit


def _set(value: Any, *path: str) -> Callable[[Json], None]:
    def edit(d: Json) -> None:
        for key in path[:-1]:
            d = d[key]
        d[path[-1]] = value

    return edit


ALL = "heart_scale, exact always, every checker, --test"
SUB = "memory limit subsamples degree2, --test"
#: (schema, which output, how it is broken)
BROKEN: dict[str, tuple[str, str, Callable[[Json], None]]] = {
    "check without margin": ("check", ALL, _drop("margin")),
    "check with an unknown verdict": ("check", ALL, _set("maybe", "verdict")),
    "check with an unknown top-level key": ("check", ALL, _set(1, "gap")),
    "accuracy in points": ("check", ALL, _set(82.35, "linear", "val_accuracy")),
    "kernel verdict without its deciding checker": ("check", ALL, _set("kernel", "verdict")),
    "degree2 with rbf's status": ("check", ALL, _set("exact", "checkers", "degree2", "status")),
    "skipped checker that kept its accuracy": (
        "check",
        ALL,
        _set("skipped", "checkers", "multilinear", "status"),
    ),
    "exact comparison without its C": ("check", ALL, _drop("checkers", "rbf", "C")),
    "unknown checker": ("check", ALL, _set({}, "checkers", "svm")),
    "test block without the baseline": ("check", ALL, _drop("test", "accuracy", "linear")),
    "verify without its interval": ("verify", "plain", _drop("gap_ci95")),
    "subsample without its reference": ("check", SUB, _drop("checkers", "degree2", "reference")),
    "margin in the data block": ("check", SUB, _set("clear", "data", "margin")),
    "batch line with an unknown status": ("batch", "ok", _set("done", "status")),
    "ok batch line without its resume key": ("batch", "ok", _drop("resume_key")),
    "error batch line without its message": ("batch", "error", _set(None, "error")),
    "skipped batch line with a verdict": ("batch", "skipped", _set("linear", "verdict")),
    "verify without kind": ("verify", "plain", _drop("kind")),
    "verify with confirms but no check": ("verify", "plain", _set(True, "confirms")),
    "verify test accuracy without a test": (
        "verify",
        "plain",
        _set(0.9, "linear", "test_accuracy"),
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_output_fails_validation(
    case: str, runs: Runs, batch_lines: dict[str, list[Json]], verify_outputs: dict[str, Json]
) -> None:
    kind, which, edit = BROKEN[case]
    if kind == "check":
        name, good = "check.schema.json", runs.check(which)
    elif kind == "batch":
        name = "batch-line.schema.json"
        good = next(x for x in batch_lines["first"] if x["status"] == which)
    else:
        name, good = "verify.schema.json", verify_outputs[which]
    assert not problems(name, good)
    broken = copy.deepcopy(good)
    edit(broken)
    assert problems(name, broken), f"{case}: still valid"


# --- the docs cover the schemas -------------------------------------------------------------


def property_paths(
    schema: Any, resolver: Any, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    """Every named property the schema can describe, as a path of keys (through $ref,
    allOf/anyOf/oneOf and if/then/else branches; not into arrays or free-form maps)."""
    if not isinstance(schema, dict):
        return
    if "$ref" in schema:
        resolved = resolver.lookup(schema["$ref"])
        yield from property_paths(resolved.contents, resolved.resolver, prefix)
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key, []):
            yield from property_paths(sub, resolver, prefix)
    for key in ("then", "else"):
        yield from property_paths(schema.get(key), resolver, prefix)
    for name, sub in schema.get("properties", {}).items():
        yield (*prefix, name)
        yield from property_paths(sub, resolver, (*prefix, name))


def schema_paths(name: str) -> set[str]:
    schema = SCHEMAS[name]
    resolver = REGISTRY.resolver(base_uri=schema["$id"])
    return {".".join(p) for p in property_paths(schema, resolver)}


def doc_sections() -> dict[str, str]:
    text = DOCS.read_text()
    parts = re.split(r"^## ", text, flags=re.M)
    return {part.split("\n", 1)[0].strip(): part for part in parts[1:]}


#: Which sections of docs/json.md describe each schema's fields (a batch ok line is the check's
#: JSON plus batch keys, and verify shares the data and scaling blocks).
SECTIONS = {
    "check.schema.json": ["`kcheck check`"],
    "batch-line.schema.json": ["`kcheck batch`", "`kcheck check`"],
    "verify.schema.json": ["`kcheck verify`", "`kcheck check`"],
}


def documented(path: str, tokens: set[str]) -> bool:
    """``path`` or one of its sub-fields is named in the docs; a field every checker has may
    be named once as ``checkers.*.field``."""
    parts = path.split(".")
    forms = {path}
    for i, part in enumerate(parts):  # checkers.X.field and second_fold.checkers.X.field
        if part == "checkers" and len(parts) > i + 2:
            forms.add(".".join([*parts[: i + 1], "*", *parts[i + 2 :]]))
    return any(t == f or t.startswith(f + ".") for f in forms for t in tokens)


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_every_schema_field_is_documented(name: str) -> None:
    sections = doc_sections()
    text = "".join(sections[s] for s in SECTIONS[name])
    tokens = set(re.findall(r"`([A-Za-z_][\w*]*(?:\.[\w*]+)*)`", text))
    paths = schema_paths(name)
    assert len(paths) > 20
    missing = sorted(p for p in paths if not documented(p, tokens))
    assert not missing, f"fields of {name} not in docs/json.md: {missing}"


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_every_documented_field_is_in_the_schema(name: str) -> None:
    """The other way round: a field that a table names (first column) exists."""
    section = doc_sections()[SECTIONS[name][0]]
    named = {
        token
        for row in re.findall(r"^\| (`[^|]*) \|", section, flags=re.M)
        for token in re.findall(r"`([^`]+)`", row)
    }
    assert named
    paths = schema_paths(name)
    stale = sorted(
        t
        for t in named
        if t not in paths
        and not any(re.fullmatch(re.escape(t).replace(r"\*", r"[^.]+"), p) for p in paths)
    )
    assert not stale, f"docs/json.md names fields {name} does not have: {stale}"


def test_docs_state_the_units_and_the_version_policy() -> None:
    text = DOCS.read_text()
    assert "fractions, not points" in text
    assert "wall-clock" in text
    sections = doc_sections()
    assert "Schema versions" in sections and "Changelog" in sections
    assert "**schema 1**" in sections["Changelog"]


# --- the parts the registry writes ------------------------------------------------------------


def schema_script() -> Any:
    """scripts/schema_checkers.py, which writes the schemas' checker enums from the registry."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "schema_checkers", ROOT / "scripts" / "schema_checkers.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_checker_parts_of_the_schemas_are_the_registrys() -> None:
    """A checker added to or dropped from the registry without rerunning the script fails."""
    script = schema_script()
    assert script.stale() == [], "run `python scripts/schema_checkers.py`"
    assert script.main(["--check"]) == 0


def test_the_script_rewrites_only_the_checker_parts(tmp_path: Path) -> None:
    script = schema_script()
    for name in script.schemas():
        tmp_path.joinpath(name).write_text(SCHEMA_DIR.joinpath(name).read_text())
    names = ("degree2", "multilinear", "rbfsvm", "toy")
    fresh = script.schemas(script.Checkers(names, "rbf", {"toy": "a toy"}), tmp_path)
    check = json.loads(fresh["check.schema.json"])
    old = SCHEMAS["check.schema.json"]
    assert set(check["$defs"]) == set(old["$defs"]) - {"rff", "mixlinear", "kfactory"} | {"toy"}
    assert check["$defs"]["toy"] == {"description": "a toy", "$ref": "#/$defs/checker"}
    for kept in ("degree2", "rbf", "checker", "exact", "model"):
        assert check["$defs"][kept] == old["$defs"][kept]
    assert check["$defs"]["decision"]["properties"]["deciding"]["enum"] == [None, *names, "rbf"]
    line = json.loads(fresh["batch-line.schema.json"])
    assert line["$defs"]["options"]["properties"]["checkers"]["items"]["enum"] == list(names)
    jsonschema.Draft202012Validator.check_schema(check)
    # Written back, the generated text is a fixed point.
    tmp_path.joinpath("check.schema.json").write_text(fresh["check.schema.json"])
    again = script.schemas(script.Checkers(names, "rbf", {}), tmp_path)
    assert again["check.schema.json"] == fresh["check.schema.json"]
