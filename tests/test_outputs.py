"""What kcheck writes: never over one of its inputs, never half, never a mismatched pair."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import DATASETS
from runner import kcheck, one_error_line

from kcheck import predict
from kcheck.io import atomic
from kcheck.io.data import read_libsvm, write_libsvm
from kcheck.modelfiles import export as models
from kcheck.scaling.fitting import fit_scaler

OLD = b"old contents\n"


@pytest.fixture
def train(tmp_path: Path) -> Path:
    path = tmp_path / "x.svm"
    path.write_bytes((DATASETS / "heart_scale").read_bytes())
    return path


@pytest.mark.parametrize("how", ["same", "hard link", "symlink", "other spelling"])
def test_check_refuses_to_write_over_its_training_file(train: Path, how: str) -> None:
    before = train.read_bytes()
    target = train
    if how == "hard link":
        target = train.parent / "linked.svm"
        os.link(train, target)
    elif how == "symlink":
        target = train.parent / "sym.svm"
        target.symlink_to(train)
    elif how == "other spelling":
        target = train.parent / "." / ".." / train.parent.name / train.name
    for option in ("-o", "--model-out"):
        r = kcheck("check", train, option, target, "-q")
        one_error_line(r, option, "is the input file", stages=False)
        assert train.read_bytes() == before


def test_model_out_whose_range_file_is_an_input_is_refused(train: Path, tmp_path: Path) -> None:
    test = tmp_path / "m.range"
    test.write_bytes((DATASETS / "heart_scale").read_bytes())
    r = kcheck("check", train, "--test", test, "--model-out", tmp_path / "m", "-q")
    one_error_line(r, "--model-out", "is the input file", stages=False)
    assert not (tmp_path / "m").exists()


def test_json_output_over_the_model_is_refused(train: Path, tmp_path: Path) -> None:
    m = tmp_path / "m"
    r = kcheck("check", train, "--model-out", m, "-o", f"{m}.range", "-q")
    one_error_line(r, "is also the output", stages=False)


@pytest.mark.parametrize("command", ["scale", "scale -s", "predict", "verify"])
def test_other_commands_refuse_to_write_over_an_input(
    train: Path, tmp_path: Path, command: str
) -> None:
    before = train.read_bytes()
    if command == "scale":
        args = ["scale", str(train), "-o", str(train)]
    elif command == "scale -s":
        args = ["scale", str(train), "-s", str(train)]
    elif command == "verify":
        args = ["verify", str(train), "-o", str(train)]
    else:
        model = tmp_path / "m"
        r = kcheck(
            "check", train, "--model-out", model, "--model", "linear", "-q", "--exact", "never"
        )
        assert r.code == 0, r.describe()
        args = ["predict", str(model), str(train), "-o", f"{model}.range"]
    r = kcheck(*args, "-q")
    one_error_line(r, "is the input file", stages=False)
    assert train.read_bytes() == before


# --- interrupted while writing the model --------------------------------------------------


@pytest.fixture(scope="module")
def wide_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """400 rows of 4 features and one stray index of 4,000,000: the saved model has 4 million
    weight lines, so writing it takes long enough to be interrupted."""
    rng = np.random.default_rng(0)
    X = sp.lil_matrix((400, 4_000_000))
    Z = np.round(rng.normal(size=(400, 4)), 3)
    for j in range(4):
        X[:, j] = Z[:, j : j + 1]
    X[0, 3_999_999] = 1.0
    y = np.where(Z[:, 0] + Z[:, 1] > 0, 1.0, -1.0)
    path = tmp_path_factory.mktemp("wide") / "wide.svm"
    write_libsvm(str(path), y, sp.csr_matrix(X))
    return path


@pytest.mark.serial
@pytest.mark.timing
def test_interrupted_model_out_leaves_no_temporary_file(wide_data: Path, tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "m").write_bytes(OLD)
    (out / "m.range").write_bytes(OLD)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kcheck",
            "check",
            str(wide_data),
            "--checkers",
            "multilinear",
            "--exact",
            "never",
            "-q",
            "--model-out",
            str(out / "m"),
            "--model",
            "linear",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        # Wait until the model's temporary file has grown: LIBLINEAR is writing it.
        while time.monotonic() < deadline and proc.poll() is None:
            tmp = [p for p in out.iterdir() if p.name.startswith(".m.") and p.stat().st_size]
            if tmp:
                break
            time.sleep(0.002)
        assert proc.poll() is None, "kcheck ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert sorted(p.name for p in out.iterdir()) == ["m", "m.range"]
    assert (out / "m").read_bytes() == OLD and (out / "m.range").read_bytes() == OLD


@pytest.mark.slow
def test_export_on_wide_data_writes_the_full_width(wide_data: Path, tmp_path: Path) -> None:
    """Trained on the 5 columns in use, saved with all 4,000,000 (as full-width training
    would), and it predicts its training data as the in-memory model does."""
    y, X = read_libsvm(str(wide_data))
    scaler = fit_scaler(X, method="maxabs")
    Xs = scaler.transform(X)
    path = tmp_path / "m"
    entry = models.export(Xs, y, scaler, "linear", str(path))
    head = path.read_text().split("\nw\n")[0]
    assert "nr_feature 4000000" in head
    saved = predict.load(str(path))
    assert saved.model.n_features == 4_000_000
    result = predict.predict_file(str(path), str(wide_data))
    assert result.accuracy is not None and result.accuracy > 0.9
    assert entry["kind"] == "linear"


# --- the order and the lock of a pair of renames ------------------------------------------


def test_the_model_is_renamed_before_its_range_file(tmp_path: Path, monkeypatch) -> None:
    order: list[str] = []
    real = os.replace

    def spy(src: str, dst: str) -> None:
        order.append(os.path.basename(dst))
        real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", spy)
    with atomic.atomic_paths([(tmp_path / "m", "model"), (tmp_path / "m.range", "range")]) as (
        a,
        b,
    ):
        Path(a).write_text("model")
        Path(b).write_text("range")
    assert order == ["m", "m.range"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "m.range"]


@pytest.mark.timing
def test_an_interrupt_waits_for_the_renames_and_removes_temporaries(
    tmp_path: Path, monkeypatch
) -> None:
    """abandon() (what an interrupted run calls before os._exit) does not split a pair that is
    being renamed, and deletes temporaries still being written."""
    renamed = threading.Event()
    release = threading.Event()
    real = os.replace

    def slow(src: str, dst: str) -> None:
        real(src, dst)
        if dst.endswith("/m"):
            renamed.set()
            release.wait(600)

    monkeypatch.setattr(atomic.os, "replace", slow)
    monkeypatch.setattr(atomic, "_commit_lock", threading.Lock())

    def writer() -> None:
        with atomic.atomic_paths([(tmp_path / "m", "model"), (tmp_path / "m.range", "r")]) as (
            a,
            b,
        ):
            Path(a).write_text("model")
            Path(b).write_text("range")

    t = threading.Thread(target=writer)
    t.start()
    assert renamed.wait(600)

    class Stop(Exception):
        pass

    with pytest.raises(Stop), atomic.atomic_path(tmp_path / "other", "file") as pending:
        Path(pending).write_text("half")
        abandoner = threading.Thread(target=atomic.abandon)
        abandoner.start()
        time.sleep(0.2)
        assert abandoner.is_alive()  # waits for the pair being renamed
        release.set()
        abandoner.join(600)
        t.join(600)
        assert not os.path.exists(pending)
        raise Stop  # the process would end here (os._exit)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "m.range"]
