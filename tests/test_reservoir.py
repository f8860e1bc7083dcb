"""The streaming stratified sample behind --max-rows: proportions, uniformity, determinism,
the whole file's hash, the "auto" byte budget, and memory bounded by the sample, not the file."""

from __future__ import annotations

import hashlib
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from kcheck.errors import KcheckError
from kcheck.io import data as data_module
from kcheck.io.data import content_sha256, read_libsvm, sample_libsvm
from kcheck.io.reservoir import allocate
from kcheck.memory import csr_bytes


def write_rows(path: Path, labels: np.ndarray, seed: int = 0) -> None:
    """One row per label; feature 1 holds the row's position, so a sample shows where it came
    from; features 2-4 are noise."""
    rng = np.random.default_rng(seed)
    noise = rng.random((labels.size, 3))
    with open(path, "w") as f:
        for i, (label, (a, b, c)) in enumerate(zip(labels.tolist(), noise.tolist(), strict=True)):
            f.write(f"{label:g} 1:{i} 2:{a:.4f} 3:{b:.4f} 4:{c:.4f}\n")


def three_classes(n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.choice(np.array([-1.0, 1.0, 7.0]), size=n, p=[0.7, 0.25, 0.05])


def test_allocate_is_proportional_with_one_row_per_class() -> None:
    assert allocate(10, np.array([700, 250, 50])).tolist() == [7, 2, 1]
    assert allocate(100, np.array([9990, 5, 5])).tolist() == [98, 1, 1]
    assert allocate(5000, np.array([30, 10])).tolist() == [30, 10]
    assert allocate(7, np.array([3, 3, 3])).sum() == 7


def test_each_class_keeps_its_share(tmp_path: Path) -> None:
    labels = three_classes(20_000)
    path = tmp_path / "three.svm"
    write_rows(path, labels)
    s = sample_libsvm(path, 1000, seed=3)
    classes, seen = np.unique(labels, return_counts=True)
    kept = np.array([np.count_nonzero(s.y == c) for c in classes])
    assert kept.tolist() == allocate(1000, seen).tolist()
    assert s.rows_read == 20_000 and s.sampled and s.X.shape == (1000, 4)
    # The rows are real rows of the file, with their own labels, in file order.
    position = s.X[:, 0].toarray().ravel().astype(int)
    assert np.all(np.diff(position) > 0)
    assert np.array_equal(labels[position], s.y)


@pytest.mark.parametrize("order", ["shuffled", "sorted by label"])
def test_within_a_class_the_sample_is_spread_over_the_file(tmp_path: Path, order: str) -> None:
    labels = three_classes(30_000)
    if order != "shuffled":
        labels = np.sort(labels)
    path = tmp_path / "rows.svm"
    write_rows(path, labels)
    s = sample_libsvm(path, 2000, seed=0)
    position = s.X[:, 0].toarray().ravel()
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        picked = position[s.y == c]
        # A uniform sample's mean position is within 4 standard errors of the class's mean.
        se = members.std() / np.sqrt(picked.size)
        assert abs(picked.mean() - members.mean()) < 4 * se, (c, picked.mean(), members.mean())
        # And it reaches both ends of the class's rows.
        span = members[-1] - members[0]
        assert picked.min() < members[0] + 0.1 * span and picked.max() > members[-1] - 0.1 * span


def test_the_same_seed_gives_the_same_sample_whatever_the_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rows.svm"
    write_rows(path, three_classes(8000))
    a = sample_libsvm(path, 500, seed=11)
    monkeypatch.setattr(data_module, "_CHUNK", 4096)  # many more, smaller chunks
    b = sample_libsvm(path, 500, seed=11)
    other = sample_libsvm(path, 500, seed=12)
    assert np.array_equal(a.y, b.y) and (a.X != b.X).nnz == 0
    assert a.X.shape == other.X.shape and (a.X != other.X).nnz > 0


def test_a_sample_as_large_as_the_file_is_the_file(tmp_path: Path) -> None:
    path = tmp_path / "rows.svm"
    write_rows(path, three_classes(3000))
    y, X = read_libsvm(path)
    s = sample_libsvm(path, 3000, seed=5)
    assert not s.sampled and np.array_equal(s.y, y) and (s.X != X).nnz == 0
    assert s.X.indices.dtype == X.indices.dtype and s.X.shape == X.shape


def test_the_hash_is_of_the_whole_file_and_the_width_too(tmp_path: Path) -> None:
    path = tmp_path / "rows.svm"
    labels = three_classes(4000)
    write_rows(path, labels)
    with open(path, "a") as f:
        f.write("1 9:1\n")  # the widest row, which a small sample almost surely misses
    digest = hashlib.sha256()
    s = sample_libsvm(path, 50, seed=0, digest=digest)
    assert digest.hexdigest() == content_sha256(path)
    assert s.X.shape == (50, 9)


def test_auto_fills_the_byte_budget_and_keeps_a_file_that_fits(tmp_path: Path) -> None:
    path = tmp_path / "rows.svm"
    write_rows(path, three_classes(20_000))
    y, X = read_libsvm(path)
    budget = csr_bytes(X) // 4
    s = sample_libsvm(path, None, seed=0, max_csr_bytes=budget)
    assert s.auto and s.sampled and csr_bytes(s.X) <= budget
    assert s.X.shape[0] > 0.8 * X.shape[0] / 4  # the budget is used, not wasted
    whole = sample_libsvm(path, None, seed=0, max_csr_bytes=2 * csr_bytes(X))
    assert not whole.sampled and (whole.X != X).nnz == 0


def test_auto_follows_rows_that_grow_denser(tmp_path: Path) -> None:
    """Sparse rows first, dense rows last: the first chunk's density would overfill memory."""
    path = tmp_path / "skewed.svm"
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        for i in range(20_000):
            width = 2 if i < 10_000 else 60
            feats = " ".join(f"{j}:{v:.3f}" for j, v in enumerate(rng.random(width), 1))
            f.write(f"{1 if rng.random() < 0.5 else -1} {feats}\n")
    _, X = read_libsvm(path)
    budget = csr_bytes(X) // 5
    s = sample_libsvm(path, None, seed=0, max_csr_bytes=budget)
    assert s.sampled and csr_bytes(s.X) <= budget


def test_a_fixed_sample_too_large_for_the_budget_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rows.svm"
    write_rows(path, three_classes(20_000))
    with pytest.raises(KcheckError, match="a sample of 15,000 rows needs more than"):
        sample_libsvm(path, 15_000, seed=0, max_csr_bytes=50_000)


def test_the_heap_is_trimmed_only_once_settles_have_cut_enough(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """malloc_trim walks the whole heap: after every settle of a small pool it made sampling a
    2 MB file take 1.9x the plain read. It now runs once settles have cut TRIM_BYTES of pool
    since the last trim; the sample is the same either way."""
    from kcheck.io import reservoir

    path = tmp_path / "rows.svm"
    write_rows(path, three_classes(20_000))
    trims: list[int] = []
    monkeypatch.setattr(reservoir, "release_free_memory", lambda: trims.append(1))
    monkeypatch.setattr(data_module, "_CHUNK", 1 << 14)  # many chunks, so many settles
    small = sample_libsvm(path, 500, seed=0)
    assert trims == []  # a few hundred kB cut: nothing to hand back
    monkeypatch.setattr(reservoir, "TRIM_BYTES", 1)
    trimmed = sample_libsvm(path, 500, seed=0)
    assert len(trims) >= 10  # every settle cut something, so each trimmed
    assert np.array_equal(small.y, trimmed.y) and (small.X != trimmed.X).nnz == 0


# --- memory bounded by the sample -----------------------------------------------------------

MiB = 2**20
#: The child's address-space cap: the interpreter with numpy and scipy takes about 130 MB.
ADDRESS_SPACE = 320 * MiB
FILE_BYTES = 4 * ADDRESS_SPACE


def big_file(path: Path) -> tuple[int, float]:
    """About FILE_BYTES of rows, written as one random block of 4 MB repeated; returns the
    rows and the share of label 1."""
    rng = np.random.default_rng(0)
    rows = 20_000
    X = rng.random((rows, 12))
    y = np.where(X[:, 0] * X[:, 1] > 0.25, 1, -1)
    lines = [
        f"{label} " + " ".join(f"{j}:{v:.5f}" for j, v in enumerate(row, 1)) + "\n"
        for label, row in zip(y.tolist(), X.tolist(), strict=True)
    ]
    block = "".join(lines).encode()
    copies = FILE_BYTES // len(block) + 1
    with open(path, "wb") as f:
        for _ in range(copies):
            f.write(block)
    return rows * copies, float(np.mean(y == 1))


CHILD = textwrap.dedent(
    """
    import sys
    from kcheck.io.data import sample_libsvm
    s = sample_libsvm(sys.argv[1], 20_000, seed=0)
    # VmHWM is this process's own high-water mark: ru_maxrss would carry the forking test
    # runner's resident set across fork and exec, which grows over a long serial run.
    with open("/proc/self/status") as status:
        hwm_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    peak = hwm_kb * 1024
    print(s.rows_read, s.X.shape[0], int((s.y == 1).sum()), peak)
    """
)


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


@pytest.mark.slow
def test_sampling_a_file_four_times_the_address_space_limit(tmp_path: Path) -> None:
    path = tmp_path / "big.svm"
    rows, share = big_file(path)
    assert path.stat().st_size > 4 * ADDRESS_SPACE
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=_capped,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    rows_read, kept, positives, peak = map(int, run.stdout.split())
    assert rows_read == rows and kept == 20_000
    assert peak < ADDRESS_SPACE
    # The reading process never held the file: the plain reader cannot do it under the cap.
    plain = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from kcheck.io.data import read_libsvm; read_libsvm(sys.argv[1])",
            str(path),
        ],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=_capped,
        timeout=600,
    )
    assert plain.returncode != 0 and "MemoryError" in plain.stderr
    assert abs(positives - 20_000 * share) <= 1  # the positives keep their share
    path.unlink()
