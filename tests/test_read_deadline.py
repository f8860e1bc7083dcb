"""--time-limit covers the read: a small file that expands to a huge one (a gzip bomb) is
stopped between two chunks of the read, with one error line, instead of read to its end."""

from __future__ import annotations

import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from kcheck.errors import TimeLimitReached
from kcheck.io import data


def _bomb(path: Path, copies: int) -> Path:
    """A gzip of copies x 7.5 MB of rows, a few kB on disk: one member, written again and
    again (gzip members concatenate)."""
    c = zlib.compressobj(9, 8, 31)
    member = c.compress(b"1 1:1 2:0.5\n-1 1:0.5 2:1\n" * 300_000) + c.flush()
    path.write_bytes(member * copies)
    return path


def test_a_read_past_its_deadline_stops_between_chunks(tmp_path: Path) -> None:
    path = _bomb(tmp_path / "bomb.gz", 2)
    with data.read_until(0.0), pytest.raises(TimeLimitReached, match="reading"):
        data.read_libsvm(str(path))
    with data.read_until(None):
        y, X = data.read_libsvm(str(path))  # no deadline: the whole file
    assert X.shape[0] == 1_200_000
    y, X = data.read_libsvm(str(path))  # outside the block, none either


@pytest.mark.parametrize("sample", [[], ["--max-rows", "1000"]])
def test_check_stops_reading_a_bomb_at_its_time_limit(tmp_path: Path, sample: list[str]) -> None:
    """About 1.9 GB of rows: read to the end, the sample of 1,000 rows would be checked and
    exit 0 (or the whole file refused for memory). With the limit, the read stops."""
    path = _bomb(tmp_path / "bomb.gz", 256)
    r = subprocess.run(
        [sys.executable, "-m", "kcheck", "check", str(path), "-q", "--time-limit", "1", *sample],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.splitlines() == [
        f"kcheck: error: {path}: the time limit (--time-limit 1) passed while reading the data, "
        "so nothing was decided"
    ]
