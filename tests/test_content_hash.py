"""The content hash (``data.sha256``): of the decompressed bytes, computed while reading."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
from pathlib import Path

import numpy as np
import pytest

from kcheck.config import CheckConfig
from kcheck.errors import DataFormatError
from kcheck.io.data import content_sha256, read_libsvm, write_libsvm
from kcheck.pipeline import run


@pytest.fixture
def compressed(tmp_path: Path, datasets: Path) -> dict[str, Path]:
    raw = (datasets / "svmguide1").read_bytes()  # about 100 KB: several read blocks
    out = {"plain": tmp_path / "s"}
    out["plain"].write_bytes(raw)
    for ext, opener in ((".gz", gzip.open), (".bz2", bz2.open), (".xz", lzma.open)):
        out[ext] = tmp_path / f"s{ext}"
        with opener(out[ext], "wb") as f:
            f.write(raw)
    return out


def test_hash_is_of_the_decompressed_content(compressed, datasets):
    expected = hashlib.sha256((datasets / "svmguide1").read_bytes()).hexdigest()
    for path in compressed.values():
        assert content_sha256(str(path)) == expected
        digest = hashlib.sha256()
        y, X = read_libsvm(str(path), digest=digest)
        assert digest.hexdigest() == expected and X.shape[0] == y.size == 3089


def test_hash_covers_a_file_larger_than_one_read_block(tmp_path, rng):
    path = tmp_path / "big"
    write_libsvm(str(path), np.sign(rng.normal(size=4000)) + 0.0, rng.normal(size=(4000, 30)))
    assert path.stat().st_size > 4 * (1 << 18)
    digest = hashlib.sha256()
    read_libsvm(str(path), digest=digest)
    assert digest.hexdigest() == hashlib.sha256(path.read_bytes()).hexdigest()
    assert content_sha256(str(path)) == digest.hexdigest()


def test_one_changed_byte_changes_the_hash(tmp_path, datasets):
    a, b = tmp_path / "a", tmp_path / "b"
    raw = (datasets / "heart_scale").read_bytes()
    a.write_bytes(raw)
    b.write_bytes(raw.replace(b"1:0.708333", b"1:0.708334", 1))
    assert raw != b.read_bytes()
    assert content_sha256(str(a)) != content_sha256(str(b))


def test_hash_of_a_corrupt_archive_is_an_error_with_the_file(tmp_path, compressed):
    bad = tmp_path / "cut.xz"
    bad.write_bytes(compressed[".xz"].read_bytes()[:-40])
    with pytest.raises(DataFormatError, match="cut.xz"):
        content_sha256(str(bad))


def test_check_json_carries_the_hashes(compressed, datasets):
    v = run(
        CheckConfig(
            train=str(compressed[".xz"]),
            test=str(datasets / "svmguide1.t"),
            checkers=("multilinear",),
            exact="never",
        )
    ).json
    assert v["data"]["sha256"] == content_sha256(str(compressed["plain"]))
    assert v["test"]["sha256"] == content_sha256(str(datasets / "svmguide1.t"))
