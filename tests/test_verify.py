"""`kcheck verify --check-json` as a gate: the verdict must be about the same data, and the
exit code says whether the reference confirms it (0), does not (1), or cannot be run (2)."""

from __future__ import annotations

import dataclasses
import json
import lzma
from pathlib import Path

import pytest
from conftest import DATASETS
from runner import kcheck, one_error_line


@pytest.fixture(scope="module")
def heart_check(tmp_path_factory) -> Path:
    """A real check verdict on heart_scale, with a non-default seed and scaling."""
    out = tmp_path_factory.mktemp("check") / "heart.json"
    r = kcheck(
        "check",
        str(DATASETS / "heart_scale"),
        "--checkers",
        "multilinear",
        "--seed",
        "5",
        "--scaling",
        "minmax",
        "-q",
        "-o",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.slow
def test_confirmed_verdict_exits_0_and_takes_the_checks_settings(heart_check, tmp_path):
    check = json.loads(heart_check.read_text())
    out = tmp_path / "v.json"
    r = kcheck(
        "verify",
        str(DATASETS / "heart_scale"),
        "--check-json",
        str(heart_check),
        "-j",
        "1",
        "-q",
        "-o",
        str(out),
    )
    v = json.loads(out.read_text())
    assert v["seed"] == 5 and v["scaling"]["method"] == "minmax"
    assert v["epsilon"] == check["epsilon"]
    assert v["data"]["sha256"] == check["data"]["sha256"]
    assert v["check"]["verdict"] == check["verdict"]
    assert r.returncode == (0 if v["confirms"] else 1), r.stderr
    assert v["confirms"] is True  # heart_scale: linear is enough, by a clear margin


def test_unconfirmed_verdict_exits_1(heart_check, tmp_path):
    doctored = json.loads(heart_check.read_text())
    doctored["verdict"] = "kernel" if doctored["verdict"] == "linear" else "linear"
    path = tmp_path / "doctored.json"
    path.write_text(json.dumps(doctored))
    r = kcheck(
        "verify", str(DATASETS / "heart_scale"), "--check-json", str(path), "-j", "1", "--json"
    )
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["confirms"] is False
    assert "does not confirm" in r.stderr.splitlines()[-1]


def test_a_verdict_on_other_data_is_refused(heart_check):
    r = kcheck(
        "verify", str(DATASETS / "fourclass"), "--check-json", str(heart_check), "-j", "1", "--json"
    )
    one_error_line(r, "fourclass is not the data", "re-run kcheck check")
    assert r.stdout == b""


def test_compressed_data_is_the_same_data(heart_check, tmp_path):
    xz = tmp_path / "heart_scale.xz"
    with lzma.open(xz, "wb") as f:
        f.write((DATASETS / "heart_scale").read_bytes())
    r = kcheck("verify", str(xz), "--check-json", str(heart_check), "-j", "1", "--json", "-q")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["confirms"] is True


@pytest.mark.parametrize("change", ["missing", "not a hash"])
def test_a_verdict_without_a_hash_is_refused(heart_check, tmp_path, change):
    old = json.loads(heart_check.read_text())
    if change == "missing":
        del old["data"]["sha256"]
    else:
        old["data"]["sha256"] = "abc"
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    r = kcheck("verify", str(DATASETS / "heart_scale"), "--check-json", str(path), "-j", "1")
    one_error_line(r, str(path), "data.sha256", "re-run kcheck check")


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--seed", "6"], "--seed 6"),
        (["--scaling", "maxabs"], "--scaling maxabs"),
        (["--epsilon", "0.05"], "--epsilon 0.05"),
    ],
)
def test_an_option_that_contradicts_the_check_is_refused(heart_check, args, fragment):
    r = kcheck("verify", str(DATASETS / "heart_scale"), "--check-json", str(heart_check), *args)
    one_error_line(r, fragment, "leave out")


@pytest.mark.slow
def test_an_option_that_agrees_with_the_check_is_accepted(heart_check):
    r = kcheck(
        "verify",
        str(DATASETS / "heart_scale"),
        "--check-json",
        str(heart_check),
        "-j",
        "1",
        "--seed",
        "5",
        "--scaling",
        "minmax",
        "--json",
        "-q",
    )
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("command", ["check", "verify", "batch"])
@pytest.mark.parametrize("seed", ["-1", "4294967296", "x"])
def test_seed_out_of_range_is_a_usage_error(command, seed):
    r = kcheck(command, str(DATASETS / "heart_scale"), "--seed", seed)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "--seed" in r.stderr


def test_largest_seed_is_accepted():
    r = kcheck(
        "check",
        str(DATASETS / "heart_scale"),
        "--checkers",
        "multilinear",
        "--exact",
        "never",
        "--seed",
        str(2**32 - 1),
        "-q",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["seed"] == 2**32 - 1


@pytest.mark.parametrize(
    "field, value",
    [("epsilon", "x"), ("seed", 1.5), ("scaling", {"method": "zscore"}), ("scaling", 3)],
)
def test_a_check_json_with_bad_settings_is_refused(heart_check, tmp_path, field, value):
    doctored = json.loads(heart_check.read_text())
    doctored[field] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doctored))
    r = kcheck("verify", str(DATASETS / "heart_scale"), "--check-json", str(path), "-j", "1")
    one_error_line(r, str(path), "not a kcheck check verdict")


# --- what it will cost, said first ----------------------------------------------------------------


def test_the_grid_and_its_predicted_time_are_printed_before_the_first_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """In a log (stderr a pipe): the grid, rows, folds and predicted time are on stderr when
    the grid search starts."""
    from kcheck import verify as verifying
    from kcheck.cli.app import main
    from kcheck.tuning.rbf_grid import Grid

    seen: list[str] = []
    search = verifying.rbf_grid_search

    def watched(X, y, grid, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(capfd.readouterr().err)
        # The announcement is the test: the search itself runs on two points.
        return search(X, y, Grid((1.0, 3.0), (-3.0,)), **kwargs)

    monkeypatch.setattr(verifying, "rbf_grid_search", watched)
    out = tmp_path / "v.json"
    with pytest.raises(SystemExit) as ended:
        main(["verify", str(DATASETS / "heart_scale"), "-j", "1", "-o", str(out)])
    assert ended.value.code == 0
    assert len(seen) == 1
    text = " ".join(seen[0].split())  # the line wraps at the log's width
    assert (
        "verify: RBF grid of 110 points (log2 C -5..15, step 2; log2 gamma 3..-15, step 2), "
        "5-fold CV on 270 rows in 1 process; predicted about "
    ) in text
    assert json.loads(out.read_text())["rbf"]["grid_points"] == 2


def test_the_prediction_and_the_rows_that_fit_ten_minutes() -> None:
    from kcheck import verify as verifying
    from kcheck.tuning.rbf_grid import GRID

    def cost(rows: int) -> float:
        return verifying.predicted_seconds(GRID, rows=rows, nnz=rows * 14, n_classes=2)

    assert cost(20_000) > 3.9 * cost(10_000) > 0
    assert verifying.rows_within(600.0, 270, cost) is None
    n = verifying.rows_within(600.0, 100_000, cost)
    assert n is not None and 1_000 < n < 100_000
    assert cost(n) <= 600.0 < cost(n + 1)


def test_the_prediction_counts_libsvm_dearer_on_sparse_rows() -> None:
    """Rows of 44 words of 8,400 (a text set): LIBSVM's dot product merges two rows' index
    lists, five times the cost per value of dense rows (kcheck.costs.budget.sparse_merge_factor,
    which the check's rbfsvm counts). Verify's prediction, and the rows a suggested verify
    samples to fit ten minutes, count it too; dense rows are unchanged."""
    from kcheck import verify as verifying
    from kcheck.costs import budget
    from kcheck.tuning.rbf_grid import GRID

    rows, nnz = 7_800, 7_800 * 44
    factor = budget.sparse_merge_factor(8_400, nnz, rows)
    assert factor == pytest.approx(5.0)

    def cost(features: int) -> float:
        return verifying.predicted_seconds(
            GRID, rows=rows, nnz=nnz, n_classes=2, linear=False, features=features
        )

    assert cost(8_400) == pytest.approx(factor * cost(0))
    assert cost(44) == cost(0)

    def within(features: int) -> int | None:
        return verifying.rows_within(
            600.0,
            rows,
            lambda n: verifying.predicted_seconds(
                GRID, rows=n, nnz=nnz * n // rows, n_classes=2, features=features
            ),
        )

    sparse, dense = within(8_400), within(0)
    assert sparse is not None and (dense is None or sparse < dense)


def test_verify_takes_a_memory_limit_and_refuses_one_it_cannot_keep(tmp_path: Path) -> None:
    """--max-rows auto's help promises rows as many as --memory-limit holds; verify has the
    option, and a limit the rows cannot fit is one line, exit 2, with the figure."""
    # Below the fixed share: refused before a row is kept.
    r = kcheck("verify", str(DATASETS / "heart_scale"), "--memory-limit", "60M", "-q")
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.splitlines()
    assert "the memory limit leaves no room for the data" in line and "a verify 4x" in line
    # The rows fit, LIBSVM's copy of them beside them does not: refused before the grid.
    r = kcheck("verify", str(DATASETS / "heart_scale"), "--memory-limit", "65M", "-q")
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.splitlines()
    assert "the RBF grid search needs about" in line and "65.0 MiB" in line, line
    assert "Traceback" not in r.stderr


def test_auto_rows_keep_what_libsvms_copy_leaves_room_for() -> None:
    """--max-rows auto reads the rows the limit holds by their CSR bytes; rows of two values
    cost LIBSVM about 5x that, so verify keeps the largest stratified sample whose copy fits,
    and says so, instead of refusing the sample it chose."""
    import warnings

    import numpy as np
    import scipy.sparse as sp

    from kcheck.bindings import engines
    from kcheck.errors import KcheckError, KcheckWarning
    from kcheck.memory import FIXED_BYTES, csr_bytes
    from kcheck.tuning.rbf_grid import search_memory
    from kcheck.verify import VerifyConfig, _rows_the_search_holds

    rng = np.random.default_rng(0)
    X = engines.as_binding_csr(sp.csr_matrix(rng.uniform(0.1, 1.0, size=(40_000, 2))))
    y = np.where(rng.uniform(size=40_000) < 0.3, 1.0, -1.0)
    limit = FIXED_BYTES + 4 * csr_bytes(X)  # what auto's read allows for these rows
    config = VerifyConfig(train="f.svm", max_rows="auto", memory_limit=limit, seed=0)
    with pytest.raises(KcheckError):
        search_memory("f.svm", X, limit, 2 * csr_bytes(X) + FIXED_BYTES, 1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        Xs, ys = _rows_the_search_holds(config, X, y)
    assert 1_000 < ys.size < 40_000
    assert abs(ys.mean() - y.mean()) < 0.01  # stratified
    search_memory("f.svm", Xs, limit, 2 * csr_bytes(Xs) + FIXED_BYTES, 1)  # fits
    (w,) = [x for x in seen if issubclass(x.category, KcheckWarning)]
    assert f"stratified sample of {ys.size:,}" in str(w.message)
    # Rows that fit are kept whole, without a word.
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        Xa, ya = _rows_the_search_holds(dataclasses.replace(config, memory_limit=2**30), X, y)
    assert ya.size == 40_000 and not seen
