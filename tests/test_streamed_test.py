"""``--test``: the test file is checked whole before any training, then scored block by block,
so it never has to fit in memory; per-row predictions are kept for every model."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from runner import run_kcheck

from kcheck import pipeline
from kcheck import prepare as prepare_module
from kcheck.config import CheckConfig
from kcheck.errors import DataFormatError, KcheckError
from kcheck.pipeline import run
from kcheck.prepare import open_test, prepare, read_scored
from kcheck.scoring import positive_scores

MiB = 2**20
QUIET = ("-q", "-j", "1", "--exact", "never")


def ring_rows(rng: np.random.Generator, n: int, labels: tuple[float, float] = (1.0, -1.0)) -> str:
    """Rows labelled by a circle in the first two of 12 features, values with 4 decimals."""
    X = rng.uniform(-1, 1, size=(n, 12))
    y = np.where((X[:, :2] ** 2).sum(axis=1) < 0.6, labels[0], labels[1])
    return "".join(
        f"{label:g} " + " ".join(f"{j}:{v:.4f}" for j, v in enumerate(row, 1)) + "\n"
        for label, row in zip(y.tolist(), X.tolist(), strict=True)
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    d = tmp_path_factory.mktemp("ring")
    (d / "train.svm").write_text(ring_rows(rng, 1500))
    (d / "test.svm").write_text(ring_rows(rng, 3000))
    return d / "train.svm", d / "test.svm"


def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 70 rows, nothing kept from the checking pass: the file is read again."""
    monkeypatch.setattr(prepare_module, "TEST_BLOCK_ROWS", 70)
    monkeypatch.setattr(prepare_module, "TEST_KEEP_BYTES", 0)


@pytest.mark.slow
def test_blockwise_scoring_equals_scoring_the_whole_file(
    files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    train, test = files
    config = CheckConfig(train=str(train), test=str(test), checkers=("multilinear", "degree2"))
    whole = run(config).json["test"]
    small_blocks(monkeypatch)
    blocks = run(config).json["test"]
    assert blocks["rows"] == whole["rows"] == 3000
    assert blocks["sha256"] == whole["sha256"]
    assert blocks["accuracy"] == whole["accuracy"]
    assert set(whole["accuracy"]) == {"linear", "multilinear", "degree2", "rbf"}  # exact: auto
    assert all(0.5 < a <= 1.0 for a in whole["accuracy"].values())


@pytest.mark.slow
def test_per_row_predictions_and_decision_values_are_kept(
    files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    train, test = files
    small_blocks(monkeypatch)
    report = run(CheckConfig(train=str(train), checkers=("multilinear",)))
    data = report.prepared
    opened = open_test(str(test), data, memory_limit=None)
    assert opened.kept is None  # scored from a second read, 70 rows at a time
    tested = pipeline._score_test(opened, report.results, lambda *a: None)
    whole = read_scored(str(test), data, memory_limit=None)
    for name, r in report.results.items():
        p = tested.predictions[name]
        assert p is not None and p.predicted.shape == (3000,)
        assert r.predict is not None
        expected = r.predict(whole.X)
        # Class indices into the training classes [-1, 1].
        np.testing.assert_array_equal(data.classes[p.predicted], expected)
        assert tested.accuracy(name) == float(np.mean(expected == whole.y))
    linear = tested.predictions["linear"]
    assert linear is not None and linear.scores is not None  # LIBLINEAR's decision values
    model = report.results["linear"].predict.__self__  # type: ignore[union-attr]
    # For two classes: each row's decision value for the larger label.
    np.testing.assert_array_equal(
        linear.scores, positive_scores(model.labels, model.decision_function(whole.X))
    )
    ml = tested.predictions["multilinear"]
    assert ml is not None and ml.scores is None  # one linear model per cluster: not comparable


@pytest.mark.slow
def test_fractional_labels_are_matched_through_their_codes(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    (tmp_path / "train.svm").write_text(ring_rows(rng, 600, labels=(0.5, 2.25)))
    test_text = ring_rows(rng, 400, labels=(0.5, 2.25)) + "7.5 1:0.1\n"
    (tmp_path / "test.svm").write_text(test_text)
    data = prepare(str(tmp_path / "train.svm"), scaling="maxabs", memory_limit=2**30)
    opened = open_test(str(tmp_path / "test.svm"), data, memory_limit=None)
    assert opened.unseen == 1 and opened.y[-1] == -1 and set(opened.y[:-1].tolist()) == {0, 1}
    v = run(CheckConfig(train=str(tmp_path / "train.svm"), test=str(tmp_path / "test.svm"))).json
    assert v["test"]["rows"] == 401
    assert v["test"]["accuracy"]["linear"] > 0.5  # 2.25 and 0.5 rows are told apart
    assert any("1 of 401 rows have a label that never occurs" in w for w in v["warnings"])


def test_a_bad_line_deep_in_the_test_file_stops_the_check_before_training(
    files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    train, test = files
    lines = test.read_text().splitlines(keepends=True) * 8  # 24,000 rows, 2 MB: many chunks
    lines[20_000] = "1 1:0.5 2:oops\n"
    bad = tmp_path / "bad.svm"
    bad.write_text("".join(lines))

    def no_training(*args: object) -> None:
        raise AssertionError("training started before the test file was checked")

    monkeypatch.setattr(pipeline, "_baseline", no_training)
    with pytest.raises(DataFormatError) as info:
        run(CheckConfig(train=str(train), test=str(bad)))
    assert str(info.value) == f"{bad}:20001: expected a numeric value, got 'oops'"

    out, model = tmp_path / "v.json", tmp_path / "m"
    r = run_kcheck(
        ["check", str(train), "--test", str(bad), "-o", str(out), "--model-out", str(model)]
        + list(QUIET)
    )
    assert r.code == 2 and r.stdout == b""
    assert f"{bad}:20001: expected a numeric value, got 'oops'" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not out.exists() and not model.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.svm"]


def test_a_test_file_that_changes_after_the_check_is_refused(
    files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    train, test = files
    small_blocks(monkeypatch)
    copy = tmp_path / "test.svm"
    copy.write_bytes(test.read_bytes())
    data = prepare(str(train), scaling="maxabs", memory_limit=2**30)
    opened = open_test(str(copy), data, memory_limit=None)
    assert sum(X.shape[0] for _, X in opened.blocks()) == 3000  # unchanged: reads again fine
    copy.write_bytes(test.read_bytes().replace(b"1:0.", b"1:0.0", 1))
    with pytest.raises(KcheckError, match="the file changed while it was being read"):
        list(opened.blocks())
    copy.write_bytes(test.read_bytes() * 2)  # more rows than were checked
    with pytest.raises(KcheckError, match="the file changed while it was being read"):
        list(opened.blocks())


def test_a_test_file_on_standard_input(files: tuple[Path, Path]) -> None:
    train, test = files
    with open(test, "rb") as stdin:
        r = run_kcheck(
            ["check", str(train), "--test", "-", "--json", "--checkers", "multilinear", *QUIET],
            stdin=stdin,
        )
    assert r.code == 0, r.describe()
    config = CheckConfig(train=str(train), test=str(test), checkers=("multilinear",), exact="never")
    from_file = run(config)
    assert r.json["test"]["accuracy"] == from_file.json["test"]["accuracy"]
    assert r.json["test"]["sha256"] == from_file.json["test"]["sha256"]


# --- a test file larger than the memory the process may use ----------------------------------

#: The child's address-space cap: ``kcheck check`` with its imports takes about 200 MB of it,
#: and its peak (threads' stacks and malloc arenas included) about 470 MB uncapped. At 320 MB a
#: thread for a LIBLINEAR call could not start in about one run in three; 400 MB leaves room.
ADDRESS_SPACE = 400 * MiB


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


@pytest.mark.slow
def test_a_test_file_larger_than_the_address_space_limit(tmp_path: Path) -> None:
    """The same 40,000 rows repeated: the accuracy on the big file is the one on the block.
    The file's text alone is more than the whole address space (its rows would take more still
    as CSR), which already holds kcheck's 200 MB: only a file read block by block fits. (It was
    twice the limit: the same blocks, read twice as many times.)"""
    rng = np.random.default_rng(7)
    train, block = tmp_path / "train.svm", tmp_path / "block.svm"
    train.write_text(ring_rows(rng, 2000))
    text = ring_rows(rng, 40_000).encode()
    block.write_bytes(text)
    big = tmp_path / "big.svm"
    copies = ADDRESS_SPACE // len(text) + 1
    with open(big, "wb") as f:
        for _ in range(copies):
            f.write(text)
    assert big.stat().st_size > ADDRESS_SPACE
    args = ["check", str(train), "--json", "--checkers", "multilinear", *QUIET]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    capped = subprocess.run(
        [sys.executable, "-m", "kcheck", *args, "--test", str(big)],
        capture_output=True,
        env=env,
        preexec_fn=_capped,
        timeout=900,
    )
    assert capped.returncode == 0, capped.stderr.decode()[-2000:]
    v = json.loads(capped.stdout)
    big.unlink()
    assert v["test"]["rows"] == 40_000 * copies
    reference = run_kcheck([*args, "--test", str(block)])
    assert reference.code == 0, reference.describe()
    # Each model is right on the same rows of every copy: the shares agree exactly.
    assert v["test"]["accuracy"] == reference.json["test"]["accuracy"]
    assert v["verdict"] == reference.json["verdict"]
