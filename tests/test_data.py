"""Tests for kcheck.io.data: the LIBSVM reader and writer."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import stat
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import kcheck.io._parse as kp
import kcheck.io.data as kd
from kcheck.errors import DataFormatError, KcheckError, KcheckWarning
from kcheck.io.data import label_repr, read_libsvm, write_libsvm

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT / "datasets"
FAST = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def put(tmp_path: Path, content: bytes | str, name: str = "data.svm") -> Path:
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def dense(X: sp.csr_matrix) -> np.ndarray:
    return np.asarray(X.todense())


def check_csr(X: object) -> None:
    """The contract others rely on: csr_matrix, float64, int32 indices, sorted, canonical."""
    assert isinstance(X, sp.csr_matrix) and not isinstance(X, sp.csr_array)
    assert X.dtype == np.float64
    assert X.indices.dtype == np.int32 and X.indptr.dtype == np.int32
    for i in range(X.shape[0]):
        row = X.indices[X.indptr[i] : X.indptr[i + 1]]
        assert np.all(np.diff(row) > 0)


def slow_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Send every chunk through the careful per-line parser."""
    monkeypatch.setattr(kd, "fast_chunk", lambda text, zero_based: None)


# ----------------------------------------------------------------------------------------------
# Accepted input


def test_basic_file(tmp_path: Path) -> None:
    path = put(tmp_path, "+1 1:0.5 3:-2\n-1 2:1e-3\n1.0 0001:7\n2.5e0 3:.25\n")
    y, X = read_libsvm(path)
    check_csr(X)
    assert y.tolist() == [1.0, -1.0, 1.0, 2.5]
    assert X.shape == (4, 3)
    assert dense(X).tolist() == [[0.5, 0, -2], [0, 0.001, 0], [7, 0, 0], [0, 0, 0.25]]


def test_format_variants(tmp_path: Path) -> None:
    """Comments, blank lines, CRLF, tabs, a BOM, qid tokens and unsorted indices all read."""
    text = (
        b"\xef\xbb\xbf# a header comment\r\n"
        b"\r\n"
        b"+1\tqid:3 4:1.5 2:2.5   # trailing comment 9:9\r\n"
        b"   \t\r\n"
        b"-1 qid:3 1:1 # 5:5\r\n"
        b"1\r\n"
    )
    path = put(tmp_path, text)
    y, X = read_libsvm(path)
    check_csr(X)
    assert y.tolist() == [1.0, -1.0, 1.0]
    assert X.shape == (3, 4)
    assert dense(X).tolist() == [[0, 2.5, 0, 1.5], [1, 0, 0, 0], [0, 0, 0, 0]]


def test_classic_mac_line_ends(tmp_path: Path) -> None:
    y, X = read_libsvm(put(tmp_path, b"1 1:1\r-1 2:2\r"))
    assert y.tolist() == [1.0, -1.0]
    assert dense(X).tolist() == [[1, 0], [0, 2]]


def test_single_class_and_no_trailing_newline(tmp_path: Path) -> None:
    y, X = read_libsvm(put(tmp_path, "1 1:1\n1 2:1"))
    assert y.tolist() == [1.0, 1.0]
    assert X.shape == (2, 2)


def test_explicit_zeros_are_kept(tmp_path: Path) -> None:
    y, X = read_libsvm(put(tmp_path, "1 1:0 2:-0.0 3:1\n"))
    assert X.nnz == 3
    assert np.signbit(X.data[1])


@pytest.mark.parametrize(
    ("suffix", "compress"),
    [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)],
)
def test_compressed(tmp_path: Path, suffix: str, compress) -> None:  # noqa: ANN001
    text = b"".join(b"%d 1:%d.5 7:1e-3\n" % (i % 2, i) for i in range(3000))
    y0, X0 = read_libsvm(put(tmp_path, text))
    for name in ("data" + suffix, "misnamed.txt"):  # detected by magic bytes, not by name
        y, X = read_libsvm(put(tmp_path, compress(text), name))
        assert np.array_equal(y, y0) and (X != X0).nnz == 0


def test_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(gzip.compress(b"1 2:3\n-1 1:1\n")))
    monkeypatch.setattr(sys, "stdin", stdin)
    y, X = read_libsvm("-")
    assert y.tolist() == [1.0, -1.0]
    assert dense(X).tolist() == [[0, 3], [1, 0]]


def test_stdin_without_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("1 1:1\n"))
    y, X = read_libsvm("-")
    assert y.tolist() == [1.0] and X.shape == (1, 1)


@pytest.mark.slow
def test_stdin_subprocess() -> None:
    code = (
        "from kcheck.io.data import read_libsvm; y, X = read_libsvm('-'); print(y.tolist(), X.nnz)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=b"1 1:1 2:2\n-1 3:3\n",
        capture_output=True,
        check=True,
        cwd=ROOT,
    )
    assert out.stdout.decode().strip() == "[1.0, -1.0] 3"


def test_n_features_truncates_with_warning(tmp_path: Path) -> None:
    path = put(tmp_path, "1 1:1 3:3 5:5\n-1 4:4 2:2\n")
    with pytest.warns(KcheckWarning) as record:
        y, X = read_libsvm(path, n_features=3)
    message = str(record[0].message)
    assert str(path) in message and "dropped 2 " in message
    check_csr(X)
    assert X.shape == (2, 3)
    assert dense(X).tolist() == [[1, 0, 3], [0, 2, 0]]


def test_n_features_zero(tmp_path: Path) -> None:
    with pytest.warns(KcheckWarning, match="dropped 3 "):
        y, X = read_libsvm(put(tmp_path, "1 1:1 2:1\n-1 2:2\n"), n_features=0)
    assert X.shape == (2, 0) and X.nnz == 0 and X.indptr.tolist() == [0, 0, 0]


def test_n_features_pads(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y, X = read_libsvm(put(tmp_path, "1 1:1\n-1 2:2\n"), n_features=10)
    assert X.shape == (2, 10)


def test_zero_based(tmp_path: Path) -> None:
    path = put(tmp_path, "1 0:1 2:2\n-1 1:3\n")
    y, X = read_libsvm(path, zero_based=True)
    assert dense(X).tolist() == [[1, 0, 2], [0, 3, 0]]
    with pytest.raises(DataFormatError, match="--zero-based"):
        read_libsvm(path)


def test_large_indices_and_labels(tmp_path: Path) -> None:
    path = put(tmp_path, "123456789 2147483647:1 99999999:2\n-7 1000000000:3\n")
    y, X = read_libsvm(path)
    assert y.tolist() == [123456789.0, -7.0]
    assert X.shape == (2, 2147483647)
    assert X.indices.tolist() == [99999998, 2147483646, 999999999]


def test_many_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunk borders, including a line longer than a chunk, do not change the result."""
    rng = np.random.default_rng(1)
    lines = []
    for i in range(400):
        k = 300 if i == 77 else int(rng.integers(0, 6))
        idx = np.sort(rng.choice(1000, k, replace=False)) + 1
        feats = " ".join(f"{j}:{v:g}" for j, v in zip(idx, rng.standard_normal(k), strict=True))
        lines.append(f"{i % 3} {feats}  # row {i}" if i % 7 == 0 else f"{i % 3} {feats}")
    path = put(tmp_path, "\n".join(lines) + "\n")
    y0, X0 = read_libsvm(path)
    monkeypatch.setattr(kd, "_CHUNK", 97)
    y, X = read_libsvm(path)
    assert np.array_equal(y, y0) and np.array_equal(X.indptr, X0.indptr)
    assert np.array_equal(X.indices, X0.indices) and np.array_equal(X.data, X0.data)


# ----------------------------------------------------------------------------------------------
# Rejected input: the message names the file and the line.

GOOD = "1 1:1 2:2\n-1 3:0.5\n\n# comment\n"  # four lines; the bad line is line 5

BAD_LINES = [
    ("abc 1:1", "expected a numeric label, got 'abc'"),
    ("1 2:x", "expected a numeric value, got 'x'"),
    ("1 3;0.5", "expected 'index:value', got '3;0.5'"),
    ("1 3:1 5:1 3:2", "got index 3 twice"),
    ("1 -3:1", "negative index '-3'"),
    ("1 0:1", "--zero-based"),
    ("1 2147483648:1", "too large"),
    ("1 99999999999999999999:1", "too large"),
    ("1 2:nan", "expected a finite value, got 'nan'"),
    ("1 2:NaN", "NaN"),
    ("1 2:-Infinity", "finite"),
    ("1 2:inf", "finite"),
    ("nan 2:1", "expected a finite label"),
    ("1 2:1e999", "overflows to infinity"),
    ("1,2 3:1", "multi-label is not supported"),
    ("1 2:", "expected 'index:value', got '2:'"),
    ("1 :2", "expected 'index:value', got ':2'"),
    ("1 2:3:4", "expected 'index:value', got '2:3:4'"),
    ("3:1 4:2", "expected a label first"),
    ("1 qid:x 2:1", "qid"),
    ("qid:1 2:1", "expected a label first"),
    ("1 2:0x10", "numeric value"),
    ("1 2:1_0", "numeric value"),
    ("1 1.5:2", "integer index"),
    ("1 +2:2", "integer index"),
    ("1 2:1.2.3", "numeric value"),
    ("1 2:--1", "numeric value"),
    ("1 2:1e", "numeric value"),
    ("1 2:.", "numeric value"),
    ("1 2:\x00", "control byte 0x00"),
    ("1 2:1 \x01", "control byte 0x01"),
    ("1 2:\u00e9", "numeric value"),
    ("1 2:1 # caf\xe9", "undecodable byte 0xe9"),
]


@pytest.mark.parametrize(("bad", "fragment"), BAD_LINES)
@pytest.mark.parametrize("path_kind", ["fast", "slow"])
def test_rejected_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str, fragment: str, path_kind: str
) -> None:
    if path_kind == "slow":
        slow_only(monkeypatch)
    raw = bad.encode("latin-1") if "\xe9" in bad and "#" in bad else bad.encode()
    path = put(tmp_path, GOOD.encode() + raw + b"\n1 1:1\n")
    with pytest.raises(DataFormatError) as err:
        read_libsvm(path)
    assert err.value.line == 5
    assert err.value.path == str(path)
    assert str(err.value).startswith(f"{path}:5: ")
    assert fragment in str(err.value)


def test_error_line_after_many_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kd, "_CHUNK", 64)
    path = put(tmp_path, "1 1:1 2:2\n" * 5000 + "# note\n\n" + "1 1:1 1:2\n")
    with pytest.raises(DataFormatError) as err:
        read_libsvm(path)
    assert err.value.line == 5003


def test_missing_colon_message(tmp_path: Path) -> None:
    path = put(tmp_path, "1 1:1\n" * 16 + "1 3;0.5\n")
    with pytest.raises(DataFormatError, match=r"data\.svm:17: expected 'index:value', got '3;0.5'"):
        read_libsvm(path)


@pytest.mark.parametrize(
    "content", [b"", b"\n\n", b"# only a comment\n", b"\xef\xbb\xbf", b"  \t\n"]
)
def test_no_rows(tmp_path: Path, content: bytes) -> None:
    path = put(tmp_path, content)
    with pytest.raises(DataFormatError) as err:
        read_libsvm(path)
    assert err.value.line is None and str(path) in str(err.value)


def test_binary_garbage(tmp_path: Path) -> None:
    path = put(tmp_path, bytes(range(256)) * 4)
    with pytest.raises(DataFormatError, match="binary data"):
        read_libsvm(path)


@pytest.mark.parametrize(
    ("compress", "kind"), [(gzip.compress, "gzip"), (bz2.compress, "bzip2"), (lzma.compress, "xz")]
)
def test_truncated_compressed(tmp_path: Path, compress, kind: str) -> None:  # noqa: ANN001
    data = compress(b"".join(b"1 1:%d 2:0.5\n" % i for i in range(20000)))
    for cut in (len(data) // 2, len(data) - 3):
        path = put(tmp_path, data[:cut], "data.gz")
        with pytest.raises(DataFormatError, match=f"{kind} data is truncated or corrupt"):
            read_libsvm(path)
    corrupt = bytearray(data)
    corrupt[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
    with pytest.raises(DataFormatError, match="truncated or corrupt"):
        read_libsvm(put(tmp_path, bytes(corrupt)))


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="No such file") as err:
        read_libsvm(tmp_path / "nope.svm")
    assert err.value.line is None and "nope.svm" in str(err.value)
    with pytest.raises(DataFormatError, match="Is a directory"):
        read_libsvm(tmp_path)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads anything")
def test_unreadable_file(tmp_path: Path) -> None:
    path = put(tmp_path, "1 1:1\n")
    path.chmod(0)
    with pytest.raises(DataFormatError, match="Permission denied"):
        read_libsvm(path)


def test_permission_error_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As test_unreadable_file, but also when running as root (who may read anything)."""
    path = put(tmp_path, "1 1:1\n")

    def denied(file: object, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(file))

    monkeypatch.setattr(kd, "open", denied, raising=False)
    with pytest.raises(DataFormatError, match="cannot read the file: Permission denied") as err:
        read_libsvm(path)
    assert err.value.path == str(path) and err.value.line is None


def test_bad_n_features(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        read_libsvm(put(tmp_path, "1 1:1\n"), n_features=-1)


# ----------------------------------------------------------------------------------------------
# Numbers: every value equals float(token), bit for bit.


def bits(a: np.ndarray) -> list[int]:
    return np.asarray(a, dtype=np.float64).view(np.int64).tolist()


finite = st.floats(allow_nan=False, allow_infinity=False)
FORMATS = [repr, *(f"{{:{spec}}}".format for spec in (".17g", "g", ".6e", ".3f", ".15g"))]


@FAST
@given(values=st.lists(finite, min_size=1, max_size=40))
def test_values_equal_float(tmp_path_factory: pytest.TempPathFactory, values: list[float]) -> None:
    tokens = [fmt(v) for v in values for fmt in FORMATS]
    tokens = [t for t in tokens if float(t) not in (float("inf"), float("-inf"))]
    line = "1 " + " ".join(f"{i + 1}:{t}" for i, t in enumerate(tokens)) + "\n"
    labels = "".join(f"{t} 1:1\n" for t in tokens)
    path = put(tmp_path_factory.mktemp("v"), line + labels)
    y, X = read_libsvm(path)
    expect = [float(t) for t in tokens]
    assert bits(X.data[: X.indptr[1]]) == bits(expect)
    assert bits(y[1:]) == bits(expect)


number_text = st.from_regex(
    r"\A[+-]?([0-9]{1,20}\.?[0-9]{0,20}|\.[0-9]{1,20})([eE][+-]?[0-9]{1,4})?\Z"
)


@pytest.mark.slow
@FAST
@given(tokens=st.lists(number_text, min_size=1, max_size=30))
def test_decimal_strings_equal_float(
    tmp_path_factory: pytest.TempPathFactory, tokens: list[str]
) -> None:
    tokens = [t for t in tokens if abs(float(t)) != float("inf")]
    assume(tokens)
    text = "".join(f"{t} 1:{t} 2:{t}\n" for t in tokens)
    y, X = read_libsvm(put(tmp_path_factory.mktemp("d"), text))
    expect = [float(t) for t in tokens]
    assert bits(y) == bits(expect)
    assert bits(X.data) == bits([v for v in expect for _ in range(2)])


def test_number_edge_cases(tmp_path: Path) -> None:
    tokens = [
        "0",
        "-0",
        "+0.0",
        "-0.0",
        ".5",
        "5.",
        "-.5e-3",
        "1e22",
        "1e23",
        "1e-22",
        "5e-324",
        "1e-320",
        "2.2250738585072014e-308",
        "1.7976931348623157e308",
        "9007199254740993",
        "123456789012345",
        "1234567890123456",
        "0.000000000000000000000000001",
        "1e-400",
        "00000000000000000000001.5",
        "4.35",
        "0.1",
        "+7",
        "1E5",
        "1e+05",
        "1e0005",
    ]
    text = "1 " + " ".join(f"{i + 1}:{t}" for i, t in enumerate(tokens)) + "\n"
    y, X = read_libsvm(put(tmp_path, text))
    assert bits(X.data) == bits([float(t) for t in tokens])


# ----------------------------------------------------------------------------------------------
# Writer


def test_label_repr() -> None:
    assert label_repr(1.0) == "1"
    assert label_repr(-1.0) == "-1"
    assert label_repr(0.0) == "0"
    assert label_repr(2.5) == "2.5"
    assert label_repr(0.1) == "0.10000000000000001"
    assert float(label_repr(1e300)) == 1e300
    assert label_repr(np.float64(3)) == "3"


def test_write_format(tmp_path: Path) -> None:
    path = tmp_path / "out.svm"
    X = np.array([[0.0, 1.5, 0.0], [0.1, 0.0, -0.0], [0.0, 0.0, 0.0]])
    write_libsvm(path, np.array([1.0, -1.0, 2.5]), X)
    assert path.read_text() == "1 2:1.5\n-1 1:0.10000000000000001\n2.5\n"


def test_write_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    write_libsvm("-", np.array([1, 0]), sp.csr_array(np.array([[0.0, 2.0], [3.0, 0.0]])))
    assert capsys.readouterr().out == "1 2:2\n0 1:3\n"


def test_write_does_not_touch_input(tmp_path: Path) -> None:
    X = sp.csr_matrix((np.array([2.0, 1.0]), np.array([1, 0]), np.array([0, 2])), shape=(1, 2))
    before = (X.indices.copy(), X.data.copy())
    write_libsvm(tmp_path / "out.svm", np.array([1.0]), X)
    assert np.array_equal(X.indices, before[0]) and np.array_equal(X.data, before[1])
    assert (tmp_path / "out.svm").read_text() == "1 1:1 2:2\n"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_write_to_pipe_keeps_the_pipe(tmp_path: Path) -> None:
    """A device or FIFO target is written in place, never renamed over."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    write_libsvm(fifo, np.array([1.0]), np.array([[0.5]]))
    reader.join(timeout=600)
    assert received == ["1 1:0.5\n"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["fifo"]


def test_write_through_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real.svm"
    real.write_text("old\n")
    link = tmp_path / "link.svm"
    link.symlink_to(real)
    write_libsvm(link, np.array([2.0]), np.array([[1.0]]))
    assert link.is_symlink() and real.read_text() == "2 1:1\n"


def test_write_rejects_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "out.svm"
    with pytest.raises(ValueError, match="NaN"):
        write_libsvm(path, np.array([1.0]), np.array([[np.nan]]))
    with pytest.raises(ValueError, match="rows"):
        write_libsvm(path, np.array([1.0, 2.0]), np.array([[1.0]]))
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out.svm"
    path.write_text("old content\n")

    def failing_blocks(y, X):  # noqa: ANN001, ANN202
        yield "1 1:1\n" * 1000
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(kd, "_text_blocks", failing_blocks)
    with pytest.raises(RuntimeError, match="disk on fire"):
        write_libsvm(path, np.ones(3), np.ones((3, 2)))
    assert path.read_text() == "old content\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.svm"]


def test_write_replaces_and_keeps_mode(tmp_path: Path) -> None:
    path = tmp_path / "out.svm"
    path.write_text("old\n")
    path.chmod(0o640)
    write_libsvm(path, np.array([1.0]), np.array([[2.0]]))
    assert path.read_text() == "1 1:2\n"
    assert path.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["out.svm"]


def test_write_unwritable_directory(tmp_path: Path) -> None:
    with pytest.raises(KcheckError, match="cannot write the file .*missing/out.svm"):
        write_libsvm(tmp_path / "missing" / "out.svm", np.array([1.0]), np.array([[1.0]]))


SHAPES = hnp.array_shapes(min_dims=2, max_dims=2, max_side=12)
special = st.sampled_from([0.0, -0.0, 1e-320, 5e-324, -2.5, 1e300, -1e-300, 0.1, 3.0])
entries = st.one_of(special, finite)


@pytest.mark.slow
@FAST
@given(
    X=hnp.arrays(np.float64, SHAPES, elements=entries),
    fmt=st.sampled_from(["dense", "csr", "csc", "coo", "csr_array"]),
    data=st.data(),
)
def test_round_trip(
    tmp_path_factory: pytest.TempPathFactory, X: np.ndarray, fmt: str, data: st.DataObject
) -> None:
    """write -> read gives back the labels and the matrix exactly (zeros are not stored)."""
    y = data.draw(hnp.arrays(np.float64, X.shape[0], elements=entries))
    path = tmp_path_factory.mktemp("rt") / "rt.svm"
    M = {
        "dense": X,
        "csr": sp.csr_matrix(X),
        "csc": sp.csc_matrix(X),
        "coo": sp.coo_matrix(X),
        "csr_array": sp.csr_array(X),
    }[fmt]
    write_libsvm(path, y, M)
    y2, X2 = read_libsvm(path, n_features=X.shape[1])
    check_csr(X2)
    assert np.array_equal(y2, y)
    assert X2.shape == X.shape
    assert np.array_equal(dense(X2), X)
    assert np.all(X2.data != 0)


# ----------------------------------------------------------------------------------------------
# Agreement with scikit-learn, and the fast path against the careful one


@pytest.mark.parametrize("name", ["fourclass", "german.numer", "heart_scale", "svmguide1"])
def test_agrees_with_sklearn(name: str) -> None:
    load_svmlight_file = pytest.importorskip("sklearn.datasets").load_svmlight_file
    y, X = read_libsvm(DATASETS / name)
    X2, y2 = load_svmlight_file(str(DATASETS / name))
    check_csr(X)
    assert np.array_equal(y, y2)
    assert X.shape == X2.shape
    assert (X != X2).nnz == 0


def test_typical_files_take_the_fast_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Speed guard: common files never need the per-line parser."""
    rng = np.random.default_rng(0)
    pairs = [(j, v) for j, v in zip(range(1, 30, 3), rng.standard_normal(10), strict=True)]
    rows = [
        f"{label} " + " ".join(f"{j}:{v:{fmt}}" for j, v in pairs)
        for fmt in ("g", ".6f", ".6e", ".15g")
        for label in ("+1", "-1", "3")
    ]
    generated = put(tmp_path, "\n".join(rows) + "\n")

    def fail(*args: object) -> None:
        raise AssertionError("slow path used")

    monkeypatch.setattr(kd, "_slow_chunk", fail)
    for path in [generated, *(DATASETS / n for n in ("fourclass", "heart_scale", "svmguide1"))]:
        read_libsvm(path)


def test_fast_path_gives_the_careful_parsers_part() -> None:
    text = b"1 3:2 1:0.5 # comment\n\n-1 qid:3 2:1e-3\n2.5\n"
    part = kp.fast_chunk(text, False)
    assert part is not None
    careful = kd._slow_chunk(text, 1, "x", False)
    for got, want in zip(part, careful, strict=True):
        np.testing.assert_array_equal(got, want)
    assert part.counts.tolist() == [2, 1, 0] and part.nlines == 4


@pytest.mark.parametrize(
    "text",
    [
        b"1 1:0.5 3:x\n",  # not a number
        b"1 1:0.5 1:2\n",  # index twice
        b"1 0:0.5\n",  # index 0 in a 1-based file
        b"1 1:0.5 \xc3\xa9\n",  # non-ASCII byte
        b"1 1:0.5\x00\n",  # control byte
        b"1 2:1 qid:x\n",  # malformed qid
        b"1,2 1:1\n",  # multi-label
    ],
)
def test_fast_path_declines_what_it_cannot_prove(text: bytes) -> None:
    """The fast path's contract: None, never an error, so the careful parser names the line."""
    assert kp.fast_chunk(text, False) is None
    with pytest.raises(DataFormatError, match=r"^x:1: "):
        kd._slow_chunk(text, 1, "x", False)


def outcome(path: Path) -> tuple[str, object]:
    try:
        y, X = read_libsvm(path)
    except DataFormatError as e:
        return "error", str(e)
    check_csr(X)
    return "ok", (bits(y), X.shape, X.indptr.tolist(), X.indices.tolist(), bits(X.data))


piece = st.one_of(
    st.sampled_from(
        [
            "1",
            "-1",
            "+1",
            "0",
            "2.5",
            "1e3",
            " ",
            "  ",
            "\t",
            "\n",
            "\r\n",
            ":",
            "3:",
            ":4",
            "#",
            "qid:",
            "qid:7 ",
            "e",
            "E",
            ".",
            "-",
            "+",
            "0:",
            "12:",
            "1.5",
            "-0",
            "1e-05",
            "nan",
            "inf",
            ",",
            "\x00",
            "\xff",
            "\xc3\xa9",
            "1:1 ",
            "2:0.5 ",
            "12345678901234567890",
        ]
    ),
    st.from_regex(r"\A[0-9]{1,3}:[+-]?[0-9]{0,4}\.?[0-9]{0,18}(e[+-]?[0-9]{1,3})? \Z"),
)


FUZZ = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.mark.slow
@FUZZ
@given(parts=st.lists(piece, max_size=40))
def test_fast_path_matches_careful_parser(
    tmp_path_factory: pytest.TempPathFactory, parts: list[str]
) -> None:
    """On LIBSVM-like noise, the result (or error) is the one the per-line parser gives."""
    path = put(tmp_path_factory.mktemp("f"), "".join(parts).encode("latin-1"))
    normal = outcome(path)
    with pytest.MonkeyPatch.context() as mp:
        slow_only(mp)
        careful = outcome(path)
    assert normal == careful


@pytest.mark.slow
@FUZZ
@given(raw=st.binary(max_size=300))
def test_random_bytes(tmp_path_factory: pytest.TempPathFactory, raw: bytes) -> None:
    """Any bytes either parse or raise DataFormatError, nothing else."""
    path = put(tmp_path_factory.mktemp("b"), raw)
    try:
        read_libsvm(path)
    except DataFormatError:
        pass
