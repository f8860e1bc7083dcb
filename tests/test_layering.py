"""The import graph: layers that only import downwards, no cycle, no hidden imports.

An import inside a function hides a cycle from the reader and from tools; only the CLI keeps
deliberate lazy imports (start-up time of ``kcheck --help``). Every module must be placed in a
layer here, so a new module is a conscious decision about what it may depend on.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "kcheck"

#: Top to bottom. A module may import modules of its own layer or of any layer below it.
LAYERS: list[set[str]] = [
    {"kcheck.cli", "kcheck.__main__"},
    {
        "kcheck.batch",
        "kcheck.batch.discovery",
        "kcheck.batch.lines",
        "kcheck.batch.progress",
        "kcheck.batch.resume",
        "kcheck.batch.runners",
        "kcheck.batch.writer",
        "kcheck.api",
        "kcheck.verify",
        "kcheck.modelfiles.export",
        "kcheck.predict",
        "kcheck.terms.expand",
        "kcheck.reports.html",
        "kcheck.scaling.stream",
    },
    {"kcheck.pipeline", "kcheck.terms.explain"},
    {"kcheck.second_fold", "kcheck.config", "kcheck.plan"},
    {"kcheck.result"},
    {"kcheck.checkers.registry"},
    {
        "kcheck.checkers.degree2",
        "kcheck.checkers.multilinear",
        "kcheck.checkers.mixlinear",
        "kcheck.checkers.rff",
        "kcheck.checkers.kfactory",
        "kcheck.checkers.rbfsvm",
        "kcheck.checkers.exact",
        "kcheck.tuning.rbf_sample",
        "kcheck.checkers.linear",
        "kcheck.checkers.kmeans",
    },
    {"kcheck.checkers", "kcheck.checkers.base"},
    {"kcheck.tuning.rbf_grid"},
    {"kcheck.prepare", "kcheck.arrays"},
    {"kcheck.tuning.linear_c", "kcheck.modelfiles.load", "kcheck.costs.pace"},
    {"kcheck.bindings.engines", "kcheck.costs.budget", "kcheck.costs.solvers"},
    {
        "kcheck.io.ownformat",
        "kcheck.modelfiles.checked",
        "kcheck.modelfiles.lines",
        "kcheck.io.data",
        "kcheck.io.reference_parser",
        "kcheck.io._parse",
        "kcheck.scaling.fitting",
        "kcheck.scaling.scaler",
        "kcheck.io.reservoir",
        "kcheck.bindings.inputs",
        "kcheck.bindings.c_runtime",
        "kcheck.bindings.linear_weights",
    },
    {
        "kcheck.verdict",
        "kcheck.metrics",
        "kcheck.split",
        "kcheck.parallel.workers",
        "kcheck.parallel.cluster",
        "kcheck.io.atomic",
        "kcheck.memory",
        "kcheck.errors",
        "kcheck.reports.junit",
        "kcheck.defaults",
        "kcheck.scoring",
        "kcheck.seeds",
        "kcheck",
        # The wings' own __init__ modules: a docstring, no import.
        "kcheck.bindings",
        "kcheck.costs",
        "kcheck.io",
        "kcheck.modelfiles",
        "kcheck.parallel",
        "kcheck.reports",
        "kcheck.scaling",
        "kcheck.terms",
        "kcheck.tuning",
    },
]
#: The wings: each subpackage of kcheck is named for one thing. A module that fits none of them
#: stays in the root, which holds at most ROOT_MODULES of them.
WINGS = {
    "batch": "batch runs over directories",
    "bindings": "the one wrapper of the LIBLINEAR/LIBSVM bindings and what it hands them",
    "checkers": "the checkers and their registry",
    "cli": "the command line: the only user of click and rich",
    "costs": "what a step costs and this machine's pace",
    "io": "LIBSVM text, kcheck's own formats and atomic outputs",
    "modelfiles": "model files checked, loaded, trained and saved",
    "parallel": "worker processes and the Dask cluster",
    "reports": "the HTML report and JUnit XML",
    "scaling": "svm-scale's scaling: arithmetic, fitting, range files, streaming",
    "terms": "product terms: --explain and kcheck expand",
    "tuning": "C and (C, gamma) searches",
}
ROOT_MODULES = 20
#: Packages whose submodules all sit in the layer of the package (the command line).
WHOLE_PACKAGES = {"kcheck.cli"}
#: The one lazy import outside the CLI: ``kcheck.check`` is kcheck/__init__.py's module
#: ``__getattr__`` importing kcheck.api on first use, so that ``import kcheck`` (and
#: ``kcheck --help``) stays free of the numeric stack. It is left out of the graph.
LAZY_IMPORTS = {("kcheck", "kcheck.api")}


def test_the_root_holds_few_modules_and_every_folder_is_a_wing() -> None:
    """A new module goes into the wing it belongs to; a new wing is a decision made here."""
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= ROOT_MODULES, root
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders == set(WINGS), folders ^ set(WINGS)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _layer(module: str) -> int:
    for package in WHOLE_PACKAGES:
        if module == package or module.startswith(package + "."):
            module = package
    for i, layer in enumerate(LAYERS):
        if module in layer:
            return i
    raise KeyError(module)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports(module: str, path: Path, known: set[str]) -> tuple[set[str], list[int]]:
    """kcheck modules imported at module level, and the lines of imports inside functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    nested: list[int] = []

    def targets(node: ast.Import | ast.ImportFrom) -> set[str]:
        if isinstance(node, ast.Import):
            return {a.name for a in node.names if a.name.split(".")[0] == "kcheck"}
        base = _resolve(module, is_package, node)
        if base.split(".")[0] != "kcheck":
            return set()
        # ``from kcheck import engines`` imports the module kcheck.bindings.engines.
        subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known}
        return subs or {base}

    def visit(node: ast.AST, in_function: bool, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                t = targets(child)
                if in_function or typing_only:
                    t = {x for x in t if (module, x) not in LAZY_IMPORTS}
                if in_function and t:
                    nested.append(child.lineno)
                found.update(t)
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            # ``if TYPE_CHECKING:`` imports are read by type checkers only, never run.
            typing = typing_only or (
                isinstance(child, ast.If)
                and isinstance(child.test, ast.Name)
                and child.test.id == "TYPE_CHECKING"
            )
            visit(child, inside, typing)

    visit(tree, False, False)
    found.discard(module)
    return found, nested


@pytest.fixture(scope="module")
def graph() -> dict[str, tuple[set[str], list[int]]]:
    modules = _modules()
    known = set(modules)
    return {m: _imports(m, p, known) for m, p in modules.items()}


def test_every_module_has_a_layer(graph: dict[str, tuple[set[str], list[int]]]) -> None:
    missing = []
    for m in graph:
        try:
            _layer(m)
        except KeyError:
            missing.append(m)
    assert not missing, f"place these modules in LAYERS: {missing}"


def test_imports_only_go_down(graph: dict[str, tuple[set[str], list[int]]]) -> None:
    upward = [
        f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
        for m, (targets, _) in graph.items()
        for t in sorted(targets)
        if t in graph and _layer(t) < _layer(m)
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycle(graph: dict[str, tuple[set[str], list[int]]]) -> None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m][0]):
            if t not in graph:
                continue
            if state.get(t) == 1:
                return [*stack[stack.index(t) :], t]
            if t not in state:
                cycle = dfs(t)
                if cycle:
                    return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            cycle = dfs(m)
            assert cycle is None, " -> ".join(cycle)


def test_no_import_inside_functions_outside_the_cli(
    graph: dict[str, tuple[set[str], list[int]]],
) -> None:
    hidden = {
        m: lines
        for m, (_, lines) in graph.items()
        if lines and not (m == "kcheck.cli" or m.startswith("kcheck.cli."))
    }
    assert not hidden, f"imports inside functions (module: lines): {hidden}"


def _absolute_imports(path: Path) -> set[str]:
    """Top-level package names a module imports anywhere in it (relative imports aside)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add((node.module or "").split(".")[0])
    return names


@pytest.mark.parametrize(
    ("packages", "allowed"),
    [
        (("click", "rich"), "kcheck.cli"),
        (("liblinear", "libsvm"), "kcheck.bindings.engines"),
        (("dask", "distributed"), "kcheck.parallel.cluster"),
    ],
)
def test_only_one_module_imports(packages: tuple[str, ...], allowed: str) -> None:
    """click and rich only in the CLI package; the LIBLINEAR/LIBSVM bindings only in engines;
    Dask (an optional extra) only in the cluster module."""
    for m, path in _modules().items():
        if m == allowed or m.startswith(allowed + "."):
            continue
        bad = sorted(_absolute_imports(path) & set(packages))
        assert not bad, f"{m} imports {bad}: only {allowed} may"


#: The longest a function or method of kcheck may be, in lines from its ``def`` to its end.
MAX_FUNCTION_LINES = 80
#: Functions allowed past it, with why: each reads hostile input one field at a time, and its
#: checks read best in the order the format puts the fields in.
LONG_FUNCTIONS = {
    ("kcheck.modelfiles.checked", "_read_svm"): "LIBSVM model header and SVs, every field checked",
    ("kcheck.scaling.fitting", "_parse_range_file"): "svm-scale range file, line by line",
    ("kcheck.io._parse", "fast_chunk"): "LIBSVM data fast path, one pass over the bytes",
}


def _function_lengths(path: Path) -> dict[str, int]:
    """Every function and method in a module (nested ones too) by qualified name: its lines."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    assert child.end_lineno is not None
                    lengths[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return lengths


def test_no_function_is_longer_than_the_limit() -> None:
    """A long function is split into pieces that each do one thing; only the parsers named
    in LONG_FUNCTIONS stay whole."""
    found = {(m, f): n for m, p in _modules().items() for f, n in _function_lengths(p).items()}
    long = [
        f"{m}.{f}: {n} lines"
        for (m, f), n in sorted(found.items())
        if n > MAX_FUNCTION_LINES and (m, f) not in LONG_FUNCTIONS
    ]
    assert not long, f"over {MAX_FUNCTION_LINES} lines, split them:\n" + "\n".join(long)
    assert set(LONG_FUNCTIONS) <= set(found), set(LONG_FUNCTIONS) - set(found)


def test_the_checker_finds_a_planted_cycle_and_an_upward_import(tmp_path: Path) -> None:
    """The graph checks can fail: a fake upward import and a hidden one are both seen."""
    known = {"kcheck.verdict", "kcheck.pipeline"}
    planted = tmp_path / "verdict.py"
    planted.write_text("from kcheck import pipeline\n\ndef f():\n    import kcheck.pipeline\n")
    targets, nested = _imports("kcheck.verdict", planted, known)
    assert targets == {"kcheck.pipeline"} and nested == [4]
    assert _layer("kcheck.pipeline") < _layer("kcheck.verdict")
