"""Memory limits and the checks that keep a run within them (kcheck/memory.py)."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

from kcheck import memory
from kcheck.errors import DataFormatError, KcheckError

MB = 2**20


def _sysconf_memory() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_default_memory_limit_is_positive_and_within_physical_memory() -> None:
    limit = memory.default_memory_limit()
    assert isinstance(limit, int)
    assert limit > 0
    assert limit <= _sysconf_memory()
    # Half of RAM or of the cgroup's limit, whichever is lower.
    assert limit <= _sysconf_memory() // 2


def test_default_memory_limit_is_half_of_what_is_there() -> None:
    assert memory.default_memory_limit() == memory._physical_memory() // 2
    # The same on every call (what a check skips must not depend on the moment).
    assert memory.default_memory_limit() == memory.default_memory_limit()


def _fake_cgroup(monkeypatch: pytest.MonkeyPatch, text: str | None) -> None:
    """Make memory.py read ``text`` as the cgroup v2 limit (None: no cgroup files)."""
    real_open = open

    def fake_open(path: str, *args: object, **kwargs: object) -> object:
        if str(path).startswith("/sys/fs/cgroup/"):
            if text is None or not str(path).endswith("memory.max"):
                raise FileNotFoundError(path)
            return io.StringIO(text)
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(memory, "open", fake_open, raising=False)


def test_a_cgroup_limit_below_ram_halves_the_cgroup_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    cap = min(256 * MB, _sysconf_memory() // 4)
    _fake_cgroup(monkeypatch, f"{cap}\n")
    assert memory.default_memory_limit() == cap // 2


def test_an_unlimited_cgroup_leaves_ram(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cgroup(monkeypatch, "max\n")
    assert memory.default_memory_limit() == _sysconf_memory() // 2
    _fake_cgroup(monkeypatch, None)
    assert memory.default_memory_limit() == _sysconf_memory() // 2


def test_a_cgroup_limit_above_ram_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cgroup(monkeypatch, str(_sysconf_memory() * 4))
    assert memory.default_memory_limit() == _sysconf_memory() // 2


# --- csr_bytes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_csr_bytes_is_the_three_arrays(index_dtype: type) -> None:
    X = sp.random(40, 30, density=0.2, format="csr", random_state=np.random.RandomState(1))
    X.indices = X.indices.astype(index_dtype)
    X.indptr = X.indptr.astype(index_dtype)
    expected = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    assert memory.csr_bytes(X) == expected
    # Hand count: 8 bytes a value, 4 or 8 an index, rows + 1 pointers.
    width = np.dtype(index_dtype).itemsize
    assert expected == 8 * X.nnz + width * X.nnz + width * (X.shape[0] + 1)


def test_csr_bytes_of_an_empty_matrix() -> None:
    X = sp.csr_matrix((5, 3))
    assert memory.csr_bytes(X) == X.indptr.nbytes


def test_csr_bytes_of_real_data(datasets) -> None:
    from kcheck.io.data import read_libsvm

    _, X = read_libsvm(str(datasets / "heart_scale"))
    assert memory.csr_bytes(X) == sum(a.nbytes for a in (X.data, X.indices, X.indptr))


# --- check_fits, max_data_bytes, checker_budget ---------------------------------------------------


def test_check_fits_accepts_exactly_the_limit() -> None:
    data = 10 * MB
    need = memory.CHECK_BYTES_PER_CSR_BYTE * data + memory.FIXED_BYTES
    memory.check_fits("d.svm", data, need)  # exactly enough: accepted
    with pytest.raises(KcheckError) as info:
        memory.check_fits("d.svm", data, need - 1)
    message = str(info.value)
    assert message.startswith("d.svm: ")
    assert f"{need / MB:.1f} MiB" in message
    assert f"over the memory limit of {(need - 1) / MB:.1f} MiB" in message


def test_check_fits_message_names_its_parts() -> None:
    with pytest.raises(KcheckError) as info:
        memory.check_fits("big.svm", 100 * MB, 50 * MB)
    message = str(info.value)
    assert "364.0 MiB" in message  # 3 x 100 MiB + 64 MiB
    assert f"{memory.CHECK_BYTES_PER_CSR_BYTE}x its 100.0 MiB" in message
    assert f"plus {memory.FIXED_BYTES // MB}.0 MiB" in message


@given(st.integers(min_value=memory.FIXED_BYTES, max_value=2**40))
def test_max_data_bytes_is_the_largest_that_fits(limit: int) -> None:
    largest = memory.max_data_bytes(limit)
    memory.check_fits("x", largest, limit)
    with pytest.raises(KcheckError):
        memory.check_fits("x", largest + 1, limit)


def test_max_data_bytes_below_the_fixed_part_is_negative() -> None:
    assert memory.max_data_bytes(memory.FIXED_BYTES) == 0
    assert memory.max_data_bytes(memory.FIXED_BYTES - 1) < 0


def test_checker_budget_arithmetic() -> None:
    limit, data = 1024 * MB, 100 * MB
    assert memory.checker_budget(limit, data) == limit - 2 * data - memory.FIXED_BYTES
    assert memory.checker_budget(limit, 0) == limit - memory.FIXED_BYTES


def test_checker_budget_is_never_negative() -> None:
    assert memory.checker_budget(memory.FIXED_BYTES, 1) == 0
    assert memory.checker_budget(10 * MB, 500 * MB) == 0


@given(st.integers(min_value=0, max_value=2**40), st.integers(min_value=0, max_value=2**38))
def test_checker_budget_never_exceeds_the_limit(limit: int, data: int) -> None:
    budget = memory.checker_budget(limit, data)
    assert 0 <= budget <= limit
    assert budget == 0 or budget + 2 * data + memory.FIXED_BYTES == limit


def test_a_time_limited_check_leaves_room_for_the_worker_each_method_runs_in() -> None:
    """Under --time-limit a method trains in a stoppable worker with a copy of the rows: the
    check is sized for two more bytes per CSR byte and a second interpreter, and what it
    accepts, what --max-rows auto takes and what the checkers get all follow."""
    per_csr_byte, fixed = memory.check_footprint(True)
    assert (per_csr_byte, fixed) == (
        memory.CHECK_BYTES_PER_CSR_BYTE + 2,
        2 * memory.FIXED_BYTES,
    )
    assert memory.check_footprint(False) == (memory.CHECK_BYTES_PER_CSR_BYTE, memory.FIXED_BYTES)
    limit = 200 * MB
    largest = memory.max_data_bytes(limit, per_csr_byte, fixed)
    assert largest == (limit - fixed) // per_csr_byte < memory.max_data_bytes(limit)
    memory.check_fits("x", largest, limit, per_csr_byte, "a check", fixed)
    with pytest.raises(KcheckError, match=r"5x its .* plus 128\.0 MiB"):
        memory.check_fits("x", largest + 1, limit, per_csr_byte, "a check", fixed)
    data = 10 * MB
    assert memory.checker_budget(limit, data, True) == limit - 4 * data - fixed
    assert memory.checker_budget(limit, data, True) < memory.checker_budget(limit, data)


# --- max_line_bytes, check_width, line_too_long ---------------------------------------------------


def test_max_line_bytes_follows_the_limit() -> None:
    limit = 4096 * MB
    assert memory.max_line_bytes(limit) == limit // memory.LINE_COST


def test_max_line_bytes_has_a_floor() -> None:
    assert memory.max_line_bytes(1) == memory.MIN_LINE_CAP
    assert memory.max_line_bytes(memory.MIN_LINE_CAP * memory.LINE_COST) == memory.MIN_LINE_CAP


def test_max_line_bytes_defaults_to_the_default_limit() -> None:
    expected = max(memory.MIN_LINE_CAP, memory.default_memory_limit() // memory.LINE_COST)
    assert memory.max_line_bytes() == expected
    assert memory.max_line_bytes(None) == expected


def test_check_width_refuses_a_width_whose_columns_cannot_fit() -> None:
    limit = 64 * MB
    fits = limit // memory.BYTES_PER_COLUMN
    memory.check_width("w.svm", fits, limit)
    with pytest.raises(KcheckError, match=r"^w\.svm: the largest feature index is"):
        memory.check_width("w.svm", fits + 1, limit)


def test_line_too_long_is_a_data_format_error() -> None:
    e = memory.line_too_long("f.svm", 3, 1 << 20)
    assert isinstance(e, DataFormatError)
    assert str(e).startswith("f.svm:3: line longer than 1,048,576 bytes")
