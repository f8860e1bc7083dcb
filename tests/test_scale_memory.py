"""``kcheck scale`` and ``kcheck expand`` within ``--memory-limit`` (issue 38): they stream, as
svm-scale does, and a run that cannot fit is refused before it starts, with the figure.

Real runs of ``python -m kcheck``. The peak memory of a run is its ``ru_maxrss``, read by a
fresh wrapper process (``RUSAGE_CHILDREN`` of the test process would hold every earlier child).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from runner import kcheck, one_error_line

from kcheck.errors import KcheckError
from kcheck.scaling.stream import ScaleConfig, scaled

#: The wide file: every feature is stored in two of its rows (so every one is kept, and -l -1
#: makes every row dense), 10M values once dense: 80 MB of doubles, and the old whole-matrix
#: scaling peaked at 2.8 GB on 200 such rows.
ROWS, WIDTH, PER_ROW = 100, 100_000, 2_000
#: The limit of the streaming runs, and what their peak must stay under: the limit itself,
#: which is what --memory-limit promises ("bounds the whole run"). They peak near 150 MB.
LIMIT = 200 * 2**20

_WRAPPER = """
import resource, subprocess, sys
with open(sys.argv[1], "wb") as out:
    code = subprocess.run(sys.argv[2:], stdout=out).returncode
sys.stderr.write("peak %d\\n" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024))
sys.exit(code)
"""


def run(
    *args: object, stdout: Path | None = None, timeout: float = 600
) -> tuple[int, str, int, float]:
    """``python -m kcheck ARGS``: its exit code, stderr, peak RSS in bytes and seconds."""
    out = stdout if stdout is not None else Path(os.devnull)
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-c", _WRAPPER, str(out), sys.executable, "-m", "kcheck"]
        + [str(a) for a in args],
        cwd=ROOT,
        capture_output=True,
        timeout=timeout,
    )
    seconds = time.monotonic() - t0
    *lines, last = r.stderr.decode().splitlines()
    assert last.startswith("peak "), r.stderr.decode()
    return r.returncode, "\n".join(lines), int(last.split()[1]), seconds


# --- refused before the run starts ------------------------------------------------------------


@pytest.fixture
def huge_range(tmp_path: Path) -> Path:
    """The issue's 40-byte range file claiming feature 1e8 (6.25 GB and 15 s before)."""
    path = tmp_path / "huge.range"
    path.write_text("x\n-1 1\n100000000 0 1\n")
    return path


@pytest.fixture
def small_data(tmp_path: Path) -> Path:
    path = tmp_path / "small.svm"
    path.write_text("1 1:0.5 3:2\n-1 2:1\n")
    return path


@pytest.mark.parametrize("command", ["scale", "expand"])
def test_a_range_file_claiming_a_huge_index_is_refused_at_once(
    command: str, huge_range: Path, small_data: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    args = ["-r", huge_range, small_data] if command == "scale" else [small_data, "-r", huge_range]
    extra = ["--terms", "1:2"] if command == "expand" else []
    code, stderr, peak, seconds = run(
        command, *args, *extra, "--memory-limit", "1G", "-o", out, timeout=60
    )
    assert code == 2, stderr
    line = one_error_line(stderr, stages=False)
    assert str(huge_range) in line and "100000000" in line, line
    assert "6.0 GiB" in line and "over the memory limit of 1.0 GiB" in line, line
    assert not out.exists()
    assert peak < 200 * 2**20 and seconds < 30, (peak, seconds)


def wide_range_file(path: Path, width: int) -> Path:
    """An svm-scale range file that keeps ``width`` features, each [0, 1]: -l -1 makes every
    output row hold ``width`` values."""
    with path.open("w") as f:
        f.write("x\n-1 1\n")
        f.writelines(f"{j} 0 1\n" for j in range(1, width + 1))
    return path


@pytest.mark.parametrize("command", ["scale", "expand"])
def test_a_row_that_cannot_fit_is_refused_before_the_data_is_read(
    command: str, tmp_path: Path
) -> None:
    """100,000 dense features need 25 MB a row; under 100M the program and the arrays leave
    less. The data is a FIFO nobody writes: reading it would hang, so the refusal is first."""
    ranges = wide_range_file(tmp_path / "wide.range", 100_000)
    fifo = tmp_path / "data.fifo"
    os.mkfifo(fifo)
    args = ["-r", ranges, fifo] if command == "scale" else [fifo, "-r", ranges, "--terms", "1:2"]
    code, stderr, _, _ = run(command, *args, "--memory-limit", "100M", timeout=60)
    assert code == 2, stderr
    line = one_error_line(stderr, stages=False)
    assert str(ranges) in line or str(fifo) in line, line
    assert "for the arrays of 100,000 features" in line and "one row of 100," in line, line
    assert "over the memory limit of 100.0 MiB" in line, line


def test_a_limit_below_the_program_is_refused_with_the_figure(small_data: Path) -> None:
    code, stderr, _, _ = run("scale", small_data, "--memory-limit", "10M", timeout=60)
    assert code == 2
    line = one_error_line(stderr, stages=False)
    assert f"{small_data}: scaling needs at least" in line, line
    assert "over the memory limit of 10.0 MiB" in line, line


def write_sparse(path: Path, rows: int, width: int, per_row: int) -> Path:
    """Row r stores features r*per_row/2 ... + per_row (mod width), values 1 to 13: each
    feature sits in two rows with implicit zeros elsewhere, so min is 0 and -l -1 densifies."""
    step = per_row // 2
    with path.open("w") as f:
        for r in range(rows):
            cols = np.sort((r * step + np.arange(per_row)) % width)
            vals = 1 + (r * 7 + cols) % 13
            cells = " ".join(
                f"{c + 1}:{v}" for c, v in zip(cols.tolist(), vals.tolist(), strict=True)
            )
            f.write(f"{1 if r % 2 else -1} {cells}\n")
    return path


def test_a_pipe_too_large_to_keep_is_refused(tmp_path: Path) -> None:
    """Standard input is read once and kept between the passes, within the limit: 1M values
    (12 MB in memory) are too many for what 100M leaves, and the message says what to do."""
    data = write_sparse(tmp_path / "big.svm", 500, 20_000, 2_000)
    with data.open("rb") as f:
        r = kcheck("scale", "-", "--memory-limit", "100M", stdin=f, timeout=120)
    assert r.returncode == 2 and r.stdout == b""
    line = one_error_line(r, stages=False)
    assert "<stdin>: not a regular file" in line and "give a regular file" in line, line


# --- streaming: the right bytes, within the limit ---------------------------------------------


def scaled_value(v: float, mn: float, mx: float, lo: float = -1.0, up: float = 1.0) -> float:
    """svm-scale's formula, in its order of evaluation, with its shortcuts."""
    if v == mn:
        return lo
    if v == mx:
        return up
    return min(max(lo + (up - lo) * (v - mn) / (mx - mn), lo), up)


def expected_rows(data: Path) -> tuple[list[float], list[dict[int, float]], np.ndarray]:
    """Labels, rows (0-based column -> value) and each column's max of ``data``."""
    labels, rows = [], []
    for line in data.read_text().splitlines():
        label, *cells = line.split()
        labels.append(float(label))
        rows.append({int(i) - 1: float(v) for i, v in (c.split(":") for c in cells)})
    fmax = np.zeros(WIDTH)
    for row in rows:
        for j, v in row.items():
            fmax[j] = max(fmax[j], v)
    return labels, rows, fmax


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sparse(tmp_path_factory.mktemp("wide") / "wide.svm", ROWS, WIDTH, PER_ROW)


CHECKED_ROWS = (0, 1, 57, ROWS - 1)


@pytest.mark.slow
def test_scale_l_minus_1_of_a_wide_sparse_file_streams_within_the_limit(
    wide: Path, tmp_path: Path
) -> None:
    out = tmp_path / "scaled"
    code, stderr, peak, _ = run("scale", wide, "--memory-limit", "200M", stdout=out)
    assert code == 0, stderr
    assert "use -l 0" in stderr  # svm-scale's warning, after the rows as svm-scale prints it
    assert peak < LIMIT, f"peak {peak / 2**20:.0f} MiB"
    labels, rows, fmax = expected_rows(wide)
    with out.open("rb") as f:
        lines = f.readlines()
    assert len(lines) == ROWS
    for r in CHECKED_ROWS:
        # Every column is kept (min 0 < max); its zeros become -1; a 0 result is not printed.
        values = [scaled_value(rows[r].get(j, 0.0), 0.0, fmax[j]) for j in range(WIDTH)]
        cells = "".join(f" {j + 1}:{v:g}" for j, v in enumerate(values) if v != 0)
        assert lines[r] == f"{labels[r]:.17g}{cells} \n".encode(), f"row {r}"


@pytest.mark.slow
def test_expand_of_a_wide_sparse_file_streams_within_the_limit(wide: Path, tmp_path: Path) -> None:
    out = tmp_path / "expanded"
    code, stderr, peak, _ = run(
        "expand",
        wide,
        "--terms",
        "1:2,3:3",
        "--fit-scaling",
        wide,
        "--scaling",
        "minmax",
        "--memory-limit",
        "200M",
        "-o",
        out,
        "-q",
    )
    assert code == 0, stderr
    assert peak < LIMIT, f"peak {peak / 2**20:.0f} MiB"
    labels, rows, fmax = expected_rows(wide)
    with out.open("rb") as f:
        lines = f.readlines()
    assert len(lines) == ROWS
    for r in CHECKED_ROWS:
        values = [scaled_value(rows[r].get(j, 0.0), 0.0, fmax[j]) for j in range(WIDTH)]
        values += [values[0] * values[1], values[2] * values[2]]
        cells = "".join(f" {j + 1}:{v:.17g}" for j, v in enumerate(values) if v != 0)
        assert lines[r] == f"{labels[r]:.0f}{cells}\n".encode(), f"row {r}"


def test_the_chunks_do_not_change_a_byte(tmp_path: Path) -> None:
    """Under a small limit the rows go out a few at a time, by default all at once: the same
    text, the same range file, the same warning; and the same from a pipe."""
    data = write_sparse(tmp_path / "d.svm", 300, 2_000, 60)
    outs = []
    for limit in ("90M", "8G"):
        out, ranges = tmp_path / f"out.{limit}", tmp_path / f"r.{limit}"
        code, stderr, _, _ = run(
            "scale", data, "-y", "0", "1", "-s", ranges, "--memory-limit", limit, "-o", out
        )
        assert code == 0, stderr
        outs.append((out.read_bytes(), ranges.read_bytes(), stderr))
    assert outs[0] == outs[1]
    with data.open("rb") as f:
        piped = kcheck("scale", "-", "-y", "0", "1", "--memory-limit", "90M", stdin=f, timeout=120)
    assert piped.returncode == 0 and piped.stdout == outs[0][0]
    # With the range file, in chunks: the rows of the first run again.
    code, stderr, _, _ = run(
        "scale", "-r", tmp_path / "r.90M", data, "--memory-limit", "90M", stdout=tmp_path / "again"
    )
    assert code == 0 and (tmp_path / "again").read_bytes() == outs[0][0], stderr


def test_a_file_changed_between_the_two_passes_is_an_error(tmp_path: Path) -> None:
    """The first pass fits the ranges, the second writes the rows: they must read the same."""
    data = write_sparse(tmp_path / "d.svm", 50, 300, 20)
    out = scaled(ScaleConfig(str(data)))  # the first pass is done
    text = data.read_text()
    assert ":8 " in text
    data.write_text(text.replace(":8 ", ":9 ", 1))
    with pytest.raises(KcheckError, match="changed while it was read"):
        for _ in out.blocks:
            pass
