"""``--max-rows``: one meaning on check, batch and verify; what the JSON and the table say."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from runner import run_kcheck

from kcheck.config import CheckConfig
from kcheck.io.data import read_libsvm, write_libsvm
from kcheck.pipeline import run
from kcheck.verdict import without_timing
from kcheck.verify import VerifyConfig
from kcheck.verify import run as verify

QUIET = ("-q", "-j", "1", "--exact", "never")


@pytest.fixture(scope="module")
def ring(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4,000 rows, label by a circle: a kernel is needed, and a sample shows it too."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(4000, 2))
    y = np.where((X**2).sum(axis=1) < 0.5, 1.0, -1.0)
    path = tmp_path_factory.mktemp("ring") / "ring.svm"
    write_libsvm(path, y, X)
    return path


def test_check_on_a_sample_records_it_and_scales_on_it(ring: Path) -> None:
    report = run(CheckConfig(train=str(ring), max_rows=600, checkers=("multilinear",)))
    v = report.json
    assert v["data"]["rows"] == v["data"]["rows_used"] == 600
    assert v["data"]["rows_read"] == 4000
    assert v["data"]["sampling"] == {
        "method": "stratified-reservoir",
        "max_rows": 600,
        "sampled": True,
    }
    assert v["split"]["train"] + v["split"]["validation"] == 600
    assert v["verdict"] == "kernel"
    # The scaling is fitted on the sample: its rows are exactly in [-1, 1] with a 1 reached.
    assert abs(report.T.X).max() <= 1.0


@pytest.mark.slow
def test_a_max_rows_above_the_file_changes_only_the_added_fields(ring: Path) -> None:
    """Without --max-rows the JSON has no sampling fields; with one above the file's rows it
    has them, says nothing was sampled, and nothing else moves."""

    def strip(v: dict) -> dict:
        for k in ("rows_read", "rows_used", "sampling"):
            v["data"].pop(k, None)
        return without_timing(v)

    plain = run(CheckConfig(train=str(ring), checkers=("multilinear",))).json
    assert not {"rows_read", "rows_used", "sampling"} & set(plain["data"])
    big = run(CheckConfig(train=str(ring), checkers=("multilinear",), max_rows=10**6)).json
    assert big["data"]["sampling"]["sampled"] is False
    assert strip(big) == strip(plain)


@pytest.mark.slow
def test_cli_check_table_says_sample_and_model_out_says_so(ring: Path, tmp_path: Path) -> None:
    model = tmp_path / "m"
    r = run_kcheck(
        [
            "check",
            str(ring),
            "--max-rows",
            "500",
            "-j",
            "1",
            "--exact",
            "never",
            "--json",
            "--model-out",
            str(model),
            "--checkers",
            "multilinear",
        ],
        env={"COLUMNS": "200"},
    )
    assert r.code == 0, r.describe()
    err = r.stderr
    assert "on a sample of 500 of 4,000 rows" in err
    v = json.loads(r.stdout)
    assert any("trained on the sample of 500 of 4,000 rows" in w for w in v["warnings"])
    assert model.exists()


@pytest.mark.slow
def test_auto_samples_a_file_over_the_limit_and_says_so(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, size=(40_000, 60))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    path = tmp_path / "wide.svm"
    write_libsvm(path, y, X)
    limit = "80M"  # the whole file needs about 3 x 29 MB + 64 MB: over
    refused = run_kcheck(["check", str(path), "--memory-limit", limit, *QUIET])
    assert refused.code == 2 and "memory limit" in refused.stderr
    r = run_kcheck(
        [
            "check",
            str(path),
            "--memory-limit",
            limit,
            "--max-rows",
            "auto",
            "--json",
            *QUIET,
            "--checkers",
            "multilinear",
        ]
    )
    assert r.code == 0, r.describe()
    v = json.loads(r.stdout)
    assert v["data"]["sampling"]["max_rows"] == "auto" and v["data"]["sampling"]["sampled"]
    assert 1000 < v["data"]["rows"] < 40_000 and v["data"]["rows_read"] == 40_000
    assert any("(--max-rows auto)" in w for w in v["warnings"])


@pytest.mark.parametrize("value", ["3", "-5", "many"])
def test_bad_max_rows_is_a_usage_error(ring: Path, value: str) -> None:
    for command in ("check", "verify"):
        r = run_kcheck([command, str(ring), "--max-rows", value, "-q"])
        assert r.code == 2 and "--max-rows" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_verify_streams_the_same_sample_as_check(ring: Path) -> None:
    v = verify(VerifyConfig(train=str(ring), max_rows=300, jobs=1))
    j = v.to_json()
    assert j["data"]["rows"] == j["data"]["cv_rows"] == 300
    assert j["data"]["rows_read"] == 4000 and j["data"]["sampling"]["sampled"]
    c = run(CheckConfig(train=str(ring), max_rows=300, checkers=("multilinear",))).json
    assert c["data"]["nnz"] == j["data"]["nnz"]  # the same rows: seed 0 in both


@pytest.mark.slow
def test_batch_lines_carry_max_rows_in_options(ring: Path, tmp_path: Path) -> None:
    d = tmp_path / "sets"
    d.mkdir()
    y, X = read_libsvm(ring)
    write_libsvm(d / "ring", y, X)
    out = tmp_path / "out.jsonl"
    r = run_kcheck(["batch", str(d), "-o", str(out), "--max-rows", "400", *QUIET])
    assert r.code == 0, r.describe()
    line = json.loads(out.read_text().splitlines()[0])
    assert line["options"]["max_rows"] == 400 and line["data"]["rows"] == 400
    again = run_kcheck(["batch", str(d), "-o", str(out), "--max-rows", "500", "--resume", *QUIET])
    assert again.code == 0
    assert json.loads(out.read_text().splitlines()[0])["data"]["rows"] == 500
