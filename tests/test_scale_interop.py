"""kcheck's scaling against LIBSVM's own svm-scale (Debian's libsvm-tools).

svm-scale prints scaled values with ``%g`` (6 significant digits), so the library's full-precision
values are compared with a relative tolerance of 5e-6; range files carry ``%.17g`` and are
compared exactly, and so is ``kcheck scale``'s output, which prints as svm-scale does.
"""

from __future__ import annotations

import dataclasses
import io
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from runner import Run, kcheck
from sklearn.datasets import load_svmlight_file

from kcheck.scaling.fitting import (
    Scaler,
    densify_warning,
    fit_label_scaling,
    fit_scaler,
    read_range_file,
    write_range_file,
)

SVM_SCALE = shutil.which("svm-scale")

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(SVM_SCALE is None, reason="svm-scale (libsvm-tools) is not installed"),
]

DATASETS = Path(__file__).resolve().parent.parent / "datasets"
# Half a unit in the 6th significant digit, relative to the value.
RTOL = 5e-6
BOUNDS = [(-1.0, 1.0), (0.0, 1.0)]


@pytest.fixture(scope="module")
def sparse_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sparse file with the awkward cases: implicit zeros on both sides of the range,
    a feature stored in every row, a constant one, an absent one, explicit zeros only."""
    rng = np.random.default_rng(7)
    lines = []
    for i in range(80):
        feats = []
        for j in range(1, 13):
            if j == 3:
                v = rng.uniform(1, 5)
            elif j == 5:
                v = 2.5
            elif j == 7:
                continue
            elif j == 9:
                if i % 3:
                    continue
                v = 0.0
            elif j == 12 or rng.random() < 0.3:
                v = rng.normal() * 10.0 ** rng.integers(-3, 4)
            else:
                continue
            feats.append(f"{j}:{float(v):.10g}")
        lines.append(" ".join([f"{i % 3 - 1:+d}", *feats]))
    path = tmp_path_factory.mktemp("data") / "sparse"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(params=["heart_scale", "svmguide1", "sparse"])
def data_file(request: pytest.FixtureRequest, sparse_file: Path) -> Path:
    if request.param == "sparse":
        return sparse_file
    return DATASETS / request.param


def load(path: Path, n_features: int | None = None) -> tuple[np.ndarray, sp.csr_matrix]:
    X, y = load_svmlight_file(str(path), n_features=n_features)
    return y, X


def svm_scale(*args: object) -> subprocess.CompletedProcess[bytes]:
    assert SVM_SCALE is not None
    return subprocess.run(
        [SVM_SCALE, *(str(a) for a in args)], capture_output=True, check=True, timeout=600
    )


def parse(stdout: bytes, n_features: int) -> tuple[np.ndarray, sp.csr_matrix]:
    X, y = load_svmlight_file(io.BytesIO(stdout), n_features=n_features)
    return y, X


def assert_matches(ours: sp.csr_matrix, theirs: sp.csr_matrix, atol: float = 0.0) -> None:
    """Same pattern of non-zeros, values equal up to svm-scale's %g rounding."""
    assert ours.shape == theirs.shape
    theirs = sp.csr_matrix(theirs)
    theirs.sort_indices()
    np.testing.assert_array_equal(ours.indptr, theirs.indptr)
    np.testing.assert_array_equal(ours.indices, theirs.indices)
    np.testing.assert_allclose(theirs.data, ours.data, rtol=RTOL, atol=atol)


def test_sparse_file_has_the_awkward_cases(sparse_file: Path) -> None:
    _, X = load(sparse_file)
    dense = X.toarray()
    assert X.shape[1] == 12
    assert np.all(dense[:, 2] != 0) and np.all(dense[:, 4] == 2.5)
    assert np.all(dense[:, 6] == 0) and np.all(dense[:, 8] == 0)
    assert X.nnz > np.count_nonzero(dense)  # explicit zeros are stored


@pytest.mark.parametrize(("lower", "upper"), BOUNDS)
def test_minmax_matches_svm_scale(
    tmp_path: Path, data_file: Path, lower: float, upper: float
) -> None:
    y, X = load(data_file)
    ours = fit_scaler(X, "minmax", lower, upper)
    theirs_range = tmp_path / "theirs.range"
    run = svm_scale("-l", lower, "-u", upper, "-s", theirs_range, data_file)
    y_out, theirs = parse(run.stdout, X.shape[1])
    np.testing.assert_array_equal(y_out, y)
    scaled = ours.transform(X)
    assert_matches(scaled, theirs)
    # Same min and max (implicit zeros included), so byte-identical range files.
    ours_range = tmp_path / "ours.range"
    write_range_file(ours_range, ours)
    assert ours_range.read_bytes() == theirs_range.read_bytes()
    # And the densification warning, to the byte.
    warning = densify_warning(X.nnz, ours.nnz_after(X))
    assert run.stderr.decode() == ("" if warning is None else warning + "\n")
    assert ours.nnz_after(X) == scaled.nnz


def test_densification_warning_is_exercised(sparse_file: Path) -> None:
    _, X = load(sparse_file)
    run = svm_scale(sparse_file)
    scaler = fit_scaler(X)
    warning = densify_warning(X.nnz, scaler.nnz_after(X))
    assert warning is not None
    assert run.stderr.decode() == warning + "\n"


@pytest.mark.parametrize(("lower", "upper"), BOUNDS)
@pytest.mark.parametrize("y_section", [False, True], ids=["x-only", "with-y"])
def test_we_read_svm_scale_range_files_exactly(
    tmp_path: Path, data_file: Path, lower: float, upper: float, y_section: bool
) -> None:
    y, X = load(data_file)
    theirs_range = tmp_path / "theirs.range"
    y_opts = ["-y", -3, 5] if y_section else []
    svm_scale(*y_opts, "-l", lower, "-u", upper, "-s", theirs_range, data_file)
    assert theirs_range.read_text().startswith("y\n" if y_section else "x\n")
    fitted = fit_scaler(X, "minmax", lower, upper)
    if y_section:
        fitted = dataclasses.replace(fitted, y_scaling=fit_label_scaling(y, -3, 5))
        ours_range = tmp_path / "ours.range"
        write_range_file(ours_range, fitted)
        assert ours_range.read_bytes() == theirs_range.read_bytes()
    read = read_range_file(theirs_range, n_features=X.shape[1], method="minmax")
    assert read == fitted
    # Without a method, heart_scale's [-1, 1] ranges read as max-abs: the same numbers.
    inferred = read_range_file(theirs_range, n_features=X.shape[1])
    np.testing.assert_array_equal(inferred.feature_min, fitted.feature_min)
    np.testing.assert_array_equal(inferred.feature_max, fitted.feature_max)


@pytest.mark.parametrize(("lower", "upper"), BOUNDS)
def test_svm_scale_reads_our_range_file(
    tmp_path: Path, data_file: Path, lower: float, upper: float
) -> None:
    _, X = load(data_file)
    scaler = fit_scaler(X, "minmax", lower, upper)
    path = tmp_path / "ours.range"
    write_range_file(path, scaler)
    _, theirs = parse(svm_scale("-r", path, data_file).stdout, X.shape[1])
    assert_matches(scaler.transform(X), theirs)


@pytest.mark.parametrize("method", ["minmax", "maxabs"])
def test_test_file_scaled_with_training_range(tmp_path: Path, method: str) -> None:
    """Values outside the training range, applied through svm-scale -r."""
    _, X = load(DATASETS / "svmguide1")
    _, X_test = load(DATASETS / "svmguide1.t", n_features=X.shape[1])
    scaler = fit_scaler(X, method)
    path = tmp_path / "ours.range"
    write_range_file(path, scaler)
    _, theirs = parse(svm_scale("-r", path, DATASETS / "svmguide1.t").stdout, X.shape[1])
    ours = scaler.transform(X_test)
    assert abs(ours).max() > 1  # the test file does leave the training range
    assert_matches(ours, theirs, atol=1e-15 if method == "maxabs" else 0.0)


def test_maxabs_through_svm_scale_r(tmp_path: Path, data_file: Path) -> None:
    _, X = load(data_file)
    scaler = fit_scaler(X, "maxabs")
    path = tmp_path / "maxabs.range"
    write_range_file(path, scaler)
    assert path.read_text().startswith("x\n-1 1\n")
    run = svm_scale("-r", path, data_file)
    assert b"#nonzeros" not in run.stderr  # svm-scale does not densify it either
    _, theirs = parse(run.stdout, X.shape[1])
    ours = scaler.transform(X)
    # svm-scale computes -1 + 2(x+m)/2m rather than x/m: a few ulps of absolute error.
    assert_matches(ours, theirs, atol=1e-15)
    kept = scaler.feature_max[X.indices] > 0
    assert ours.nnz == np.count_nonzero(X.data[kept])
    assert read_range_file(path, n_features=X.shape[1]) == scaler
    assert isinstance(scaler, Scaler) and scaler.method == "maxabs"


# --- kcheck scale against svm-scale, byte for byte ------------------------------------------------


def kcheck_scale(*args: object) -> Run:
    """``kcheck scale ARGS``, which must succeed."""
    return kcheck("scale", *args, code=0)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "lower"),
    # The cases that differ: sparse data at both lower bounds (-1 densifies it and warns, 0
    # keeps its zeros), a training file applied to its test file, and dense data at 0.
    [("heart_scale", "-1"), ("heart_scale", "0"), ("svmguide1", "-1"), ("german.numer", "0")],
)
def test_scale_output_is_svm_scales_to_the_byte(tmp_path: Path, name: str, lower: str) -> None:
    """Fit (-s), apply (-r, to the test file where there is one) and scale labels (-y): the
    same bytes as svm-scale on stdout, in the range file, and in the densification warning."""
    data = DATASETS / name
    other = DATASETS / "svmguide1.t" if name == "svmguide1" else data
    for y_opts in ([], ["-y", "-3", "5"]):
        ours_range, theirs_range = tmp_path / "ours.range", tmp_path / "theirs.range"
        ours = kcheck_scale(*y_opts, "-l", lower, "-s", ours_range, data)
        theirs = svm_scale(*y_opts, "-l", lower, "-s", theirs_range, data)
        assert ours.stdout == theirs.stdout, (name, y_opts)
        assert ours.stdout.count(b"\n") == len(data.read_bytes().splitlines())
        assert ours_range.read_bytes() == theirs_range.read_bytes()
        assert ours.stderr_bytes == theirs.stderr
        # Each applies the other's range file; both give svm-scale -r's bytes.
        applied = kcheck_scale("-r", theirs_range, other)
        assert applied.stdout == svm_scale("-r", ours_range, other).stdout, (name, y_opts)
        written = tmp_path / "out"
        kcheck_scale("-r", theirs_range, other, "-o", written)
        assert written.read_bytes() == applied.stdout


def test_scale_y_changes_the_labels_like_svm_scale(tmp_path: Path) -> None:
    data = DATASETS / "heart_scale"
    ours = kcheck_scale("-y", "0", "1", data).stdout
    assert ours == svm_scale("-y", "0", "1", data).stdout
    labels = {line.split(b" ")[0] for line in ours.splitlines()}
    assert labels == {b"0", b"1"}  # heart_scale's -1 and +1


@pytest.mark.slow
def test_label_range_of_a_test_file_comes_from_the_range_file(tmp_path: Path) -> None:
    """Labels outside the training labels' range scale past the bounds, as in svm-scale."""
    train = tmp_path / "train"
    train.write_text("1 1:1\n3 1:2\n2 1:4\n")
    test = tmp_path / "test"
    test.write_text("5 1:3\n0 1:0.5\n2.5 1:8\n")
    path = tmp_path / "r"
    kcheck_scale("-y", "-1", "1", "-s", path, train)
    assert path.read_text().startswith("y\n-1 1\n1 3\nx\n")
    ours = kcheck_scale("-r", path, test).stdout
    assert ours == svm_scale("-r", path, test).stdout
    assert ours.split(b"\n")[0].split(b" ")[0] == b"3"


@pytest.mark.slow
def test_full_precision_keeps_every_digit(tmp_path: Path) -> None:
    data = DATASETS / "svmguide1"
    short = kcheck_scale(data).stdout
    full = kcheck_scale("--full-precision", data).stdout
    assert len(full) > len(short)
    y_s, X_s = parse(short, 4)
    y_f, X_f = parse(full, 4)
    y, X = load(data)
    exact = fit_scaler(X).transform(X)
    np.testing.assert_array_equal(y_f, y)
    np.testing.assert_array_equal(X_f.toarray(), exact.toarray())  # exact round trip
    assert not np.array_equal(X_s.toarray(), exact.toarray())  # %g rounds
    assert_matches(exact, X_s)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-y", "1", "0"], "y_lower < y_upper"),
        (["-y", "0"], "-y"),
        (["-r", "RANGE", "-y", "0", "1"], "drop -l, -u, -y"),
    ],
)
def test_scale_y_usage_errors(tmp_path: Path, args: list[str], words: str) -> None:
    path = tmp_path / "range"
    path.write_text("x\n-1 1\n1 0 1\n")
    args = [str(path) if a == "RANGE" else a for a in args]
    r = kcheck("scale", *args, DATASETS / "heart_scale")
    assert r.returncode == 2 and r.stdout == b""
    assert words in r.stderr and "Traceback" not in r.stderr


def test_scale_help_names_the_svm_scale_options() -> None:
    r = kcheck("scale", "--help")
    assert r.returncode == 0
    for option in ("-y Y_LOWER Y_UPPER", "--full-precision", "-s RANGE", "-r RANGE"):
        assert option in r.stdout_text


@pytest.mark.parametrize("name", ["heart_scale", "sparse"])
def test_a_maxabs_range_file_is_applied_as_svm_scale_applies_it(
    tmp_path: Path, sparse_file: Path, name: str
) -> None:
    """-r uses svm-scale's arithmetic even for a max-abs range file, where kcheck's own
    scaling divides by max |x|: the bytes are svm-scale -r's."""
    data = sparse_file if name == "sparse" else DATASETS / name
    path = tmp_path / "maxabs.range"
    kcheck_scale("--maxabs", "-s", path, data)
    assert kcheck_scale("-r", path, data).stdout == svm_scale("-r", path, data).stdout
