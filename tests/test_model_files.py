"""Hostile model and range files: refused with one line and exit 2, never a crash.

The corpus (tests/model_corpus.py) is built from genuine models; every case runs through
``kcheck predict``'s entry point in a process of its own or shared with the cases before it
(runner.run_kcheck_many: a crash runs the case again alone), so a crash in a C loader is a
failed test here, not a dead test session. A hypothesis test then mutates genuine models in
many more ways: whatever a mutation makes, loading either refuses it or gives a model that
predicts its own labels (and, with probability fields, probabilities in [0, 1]).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import made_once
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_corpus import HEART, Case, heart_range, mutations_seed_models, write
from runner import Run, run_kcheck, run_kcheck_many

from kcheck import predict
from kcheck.errors import KcheckError
from kcheck.io.data import read_libsvm
from kcheck.modelfiles import load as model_load

CORPUS_CASES = 90  # at least; the corpus may grow


@pytest.fixture(scope="module")
def corpus_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Case, Path, Run]]:
    """Every case this run tests through ``kcheck predict`` (the runs are short: one process
    runs them all, a case that crashes it in its own; the fast tier tests part of the corpus,
    the whole suite all of it)."""
    wanted = {
        item.callspec.params["name"]
        for item in request.session.items
        if item.nodeid.startswith(request.node.nodeid)
        and item.originalname == "test_hostile_model_file_is_refused_in_one_line"
    }
    selected = any(i.originalname == "test_the_corpus_is_large" for i in request.session.items)

    def every() -> dict[str, tuple[Case, Path, Run]]:
        directory = tmp_path_factory.mktemp("model-corpus")
        written = [(c, p) for c, p in write(directory) if selected or c.name in wanted]
        runs = run_kcheck_many(
            [["predict", str(path), str(HEART), "-q", *case.options] for case, path in written],
            address_space=6 * 2**30,
        )
        return {
            case.name: (case, path, run) for (case, path), run in zip(written, runs, strict=True)
        }

    # Both processes of the whole suite may get this module's tests: the corpus runs once.
    names = "all" if selected else " ".join(sorted(wanted))
    key = "model-corpus-" + hashlib.sha256(names.encode()).hexdigest()[:16]
    return made_once(request.config, key, every)


@pytest.mark.slow
def test_the_corpus_is_large(corpus_runs: dict) -> None:
    assert len(corpus_runs) >= CORPUS_CASES


@pytest.mark.slow
def test_a_shared_process_says_what_a_process_of_its_own_says(tmp_path: Path) -> None:
    """The corpus shares one process (runner.run_kcheck_many): for three of its cases and a
    genuine model that predicts, a process of their own gives the same exit code, stdout and
    stderr."""
    written = write(tmp_path)
    argvs = [["predict", str(path), str(HEART), "-q", *case.options] for case, path in written[:3]]
    genuine = tmp_path / "genuine.model"
    genuine.write_bytes(mutations_seed_models(tmp_path)["linear"])
    Path(f"{genuine}.range").write_bytes(heart_range())
    argvs.append(["predict", str(genuine), str(HEART), "-q"])
    shared = run_kcheck_many(argvs, address_space=6 * 2**30)
    assert [r.code for r in shared] == [2, 2, 2, 0], [r.describe() for r in shared]
    for argv, one in zip(argvs, shared, strict=True):
        alone = run_kcheck(argv, timeout=600, address_space=6 * 2**30)
        assert (alone.code, alone.stdout, alone.stderr) == (one.code, one.stdout, one.stderr), (
            alone.describe(),
            one.describe(),
        )


def _names() -> list[str]:
    # The names are fixed by the generator; build them without training anything.
    import ast

    source = (Path(__file__).parent / "model_corpus.py").read_text()
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Case":
            first = node.args[0]
            assert isinstance(first, ast.Constant)
            names.append(first.value)
    return names


#: The fast tier leaves out every SLOW_EVERY-th case of the corpus; the whole suite tests all.
SLOW_EVERY = 3


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=[pytest.mark.slow] if i % SLOW_EVERY == 1 else [])
        for i, name in enumerate(_names())
    ],
)
def test_hostile_model_file_is_refused_in_one_line(corpus_runs: dict, name: str) -> None:
    case, path, run = corpus_runs[name]
    assert run.code >= 0, f"killed by signal {-run.code}\n{run.describe()}"
    assert run.code == 2, run.describe()
    assert run.stdout == b"", run.describe()
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.describe()
    line = lines[0]
    assert line.startswith("kcheck: error: "), run.describe()
    assert "Traceback" not in run.stderr and "Segmentation" not in run.stderr
    assert str(path) in line, run.describe()  # the model or its range file is named
    for word in case.words:
        assert word in line, run.describe()


def test_genuine_models_predict(tmp_path: Path) -> None:
    """The corpus's genuine classifiers load and predict heart_scale far above chance."""
    y, _ = read_libsvm(str(HEART))
    for name, text in mutations_seed_models(tmp_path).items():
        path = tmp_path / f"{name}.model"
        path.write_bytes(text)
        Path(f"{path}.range").write_bytes(heart_range())
        result = predict.predict_file(str(path), str(HEART))
        labels = set(np.unique(result.labels).tolist())
        assert labels <= {1.0, 2.0, 3.0, -1.0}, name
        if name in ("linear", "rbf", "crammer_singer", "poly_prob"):
            assert result.accuracy is not None and result.accuracy > 0.7, name
        if name in ("poly_prob", "rbf3_prob"):
            with_p = predict.predict_file(str(path), str(HEART), probability=True)
            assert with_p.probabilities is not None and with_p.classes is not None
            np.testing.assert_allclose(with_p.probabilities.sum(axis=1), 1.0, rtol=1e-9)
            best = with_p.classes[np.argmax(with_p.probabilities, axis=1)]
            np.testing.assert_array_equal(with_p.labels, best)


# --- fuzzing ------------------------------------------------------------------------------------


HOSTILE_TOKENS = [
    "",
    "0",
    "-1",
    "1",
    "2",
    "3",
    "1e12",
    "2147483647",
    "2147483648",
    "-2147483648",
    "nan",
    "-inf",
    "1e308",
    "1e-320",
    "abc",
    "0:1",
    "1:1",
    "3:0.5",
    "2147483647:1",
    "1.5",
    "-0",
    "+7",
    "1:nan",
    "99999999999",
    "\x00",
    "w",
    "SV",
    "label",
    "nr_class",
    "rho",
    ":",
    "1:",
]


@st.composite
def mutated(draw: st.DrawFn, seeds: dict[str, bytes]) -> tuple[str, bytes]:
    name = draw(st.sampled_from(sorted(seeds)))
    lines = seeds[name].decode().split("\n")
    for _ in range(draw(st.integers(1, 3))):
        op = draw(
            st.sampled_from(
                ["token", "token", "token", "delete", "duplicate", "swap", "truncate", "insert"]
            )
        )
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        if op == "token":
            tokens = lines[i].split(" ")
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[j] = draw(st.one_of(st.sampled_from(HOSTILE_TOKENS), st.text(max_size=8)))
            lines[i] = " ".join(tokens)
        elif op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            k = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[k] = lines[k], lines[i]
        elif op == "truncate":
            text = "\n".join(lines)
            lines = text[: draw(st.integers(0, len(text)))].split("\n")
        else:
            lines.insert(i, " ".join(draw(st.lists(st.sampled_from(HOSTILE_TOKENS), max_size=4))))
    return name, "\n".join(lines).encode("utf-8", "surrogateescape")


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def seeds(fuzz_dir: Path) -> dict[str, bytes]:
    return mutations_seed_models(fuzz_dir)


@pytest.mark.slow
def test_mutated_models_are_refused_or_usable(fuzz_dir: Path, seeds: dict[str, bytes]) -> None:
    y, X = read_libsvm(str(HEART))
    scaled = X.multiply(1.0 / np.maximum(abs(X).max(axis=0).toarray(), 1e-300)).tocsr()
    path = fuzz_dir / "mutant.model"
    outcomes = {"refused": 0, "loaded": 0, "probabilities": 0}

    @settings(
        max_examples=300,
        deadline=None,
        database=None,
        # The same 300 mutants every run: drawn at random, 12 loadable ones once held none
        # with probabilities (2 of the 7 seeds have them), and the count below failed.
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(mutated(seeds))
    def check(case: tuple[str, bytes]) -> None:
        _, text = case
        path.write_bytes(text)
        try:
            model = model_load.load_model(str(path), memory_limit=2**30)
        except KcheckError as e:
            assert str(e).startswith(str(path)), e
            outcomes["refused"] += 1
            return
        outcomes["loaded"] += 1
        predicted = model.predict(scaled)
        assert predicted.shape == y.shape
        assert set(np.unique(predicted).tolist()) <= set(model.labels.tolist())
        if model.has_probability:
            outcomes["probabilities"] += 1
            labels, probs = model.predict_probability(scaled)
            assert set(np.unique(labels).tolist()) <= set(model.labels.tolist())
            assert np.isfinite(probs).all() and ((probs >= 0) & (probs <= 1)).all()

    check()
    # Both outcomes happen: the mutations neither all miss nor all break the files.
    assert outcomes["refused"] > 0 and outcomes["loaded"] > 0, outcomes
    assert outcomes["probabilities"] > 0, outcomes
    assert not [p for p in os.listdir(fuzz_dir) if p.startswith("kcheck-model-")]
    shutil.rmtree(fuzz_dir / "mutant.model", ignore_errors=True)
