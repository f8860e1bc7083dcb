"""Domain errors and the warning recorder (kcheck/errors.py)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from kcheck.errors import (
    DataFormatError,
    EngineError,
    KcheckError,
    KcheckWarning,
    TimeLimitReached,
    recorded_warnings,
)


def test_data_format_error_with_path_and_line() -> None:
    e = DataFormatError("data.svm", 17, "bad value 'x'")
    assert str(e) == "data.svm:17: bad value 'x'"
    assert (e.path, e.line, e.message) == ("data.svm", 17, "bad value 'x'")


def test_data_format_error_without_line() -> None:
    e = DataFormatError("data.svm", None, "expected data rows, got none")
    assert str(e) == "data.svm: expected data rows, got none"
    assert e.line is None


def test_data_format_error_without_path() -> None:
    e = DataFormatError(None, 3, "bad label")
    assert str(e) == "<input>:3: bad label"
    assert e.path is None
    assert str(DataFormatError(None, None, "empty")) == "<input>: empty"


def test_data_format_error_takes_a_path_object(tmp_path: Path) -> None:
    p = tmp_path / "train.svm"
    e = DataFormatError(p, 2, "oops")
    assert e.path == str(p) and isinstance(e.path, str)
    assert str(e) == f"{p}:2: oops"


def test_line_zero_is_still_shown() -> None:
    # 0 is a line number, not a missing one: only None leaves it out.
    assert str(DataFormatError("f", 0, "m")) == "f:0: m"


def test_error_hierarchy() -> None:
    # The CLI turns KcheckErrors (and only those) into exit code 2.
    assert issubclass(DataFormatError, KcheckError)
    assert issubclass(EngineError, KcheckError)
    assert not issubclass(TimeLimitReached, KcheckError)
    assert issubclass(KcheckWarning, UserWarning)
    with pytest.raises(KcheckError, match=r"^f:1: m$"):
        raise DataFormatError("f", 1, "m")


def test_recorded_warnings_collects_kcheck_warnings_in_order() -> None:
    with recorded_warnings() as notes:
        warnings.warn("first", KcheckWarning, stacklevel=1)
        warnings.warn("second", KcheckWarning, stacklevel=1)
        assert notes == []  # filled when the block ends
    assert notes == ["first", "second"]


def test_recorded_warnings_collects_repeated_warnings() -> None:
    # "always": the same message from the same line is recorded each time.
    with recorded_warnings() as notes:
        for _ in range(3):
            warnings.warn("again", KcheckWarning, stacklevel=1)
    assert notes == ["again"] * 3


def test_recorded_warnings_collects_subclasses() -> None:
    class Narrow(KcheckWarning):
        pass

    with recorded_warnings() as notes:
        warnings.warn("narrow", Narrow, stacklevel=1)
    assert notes == ["narrow"]


def test_recorded_warnings_re_emits_other_warnings() -> None:
    with pytest.warns(DeprecationWarning, match="old api") as outer:
        with recorded_warnings() as notes:
            warnings.warn("old api", DeprecationWarning, stacklevel=1)
            warnings.warn("mine", KcheckWarning, stacklevel=1)
    assert notes == ["mine"]
    # The KcheckWarning is consumed; only the other one reaches the caller.
    assert [type(w.message) for w in outer] == [DeprecationWarning]
    assert [str(w.message) for w in outer] == ["old api"]


def test_recorded_warnings_keeps_notes_when_the_block_raises() -> None:
    notes: list[str] = []
    with pytest.raises(KcheckError):
        with recorded_warnings() as notes:
            warnings.warn("before the failure", KcheckWarning, stacklevel=1)
            raise KcheckError("boom")
    assert notes == ["before the failure"]


def test_recorded_warnings_nested_blocks_record_separately() -> None:
    with recorded_warnings() as outer:
        warnings.warn("outer", KcheckWarning, stacklevel=1)
        with recorded_warnings() as inner:
            warnings.warn("inner", KcheckWarning, stacklevel=1)
    assert inner == ["inner"]
    assert outer == ["outer"]
