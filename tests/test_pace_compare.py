"""scripts/pace_compare.py: a stage is compared between two runs only on the same work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import load_script


def _run(probe: float, *steps: tuple[str, int, float]) -> dict[str, Any]:
    return {
        "probe": probe,
        "steps": [
            {"name": name, "runs": True, "rows": rows, "cpu_seconds": cpu}
            for name, rows, cpu in steps
        ],
    }


def test_pairs_compare_the_same_rows_and_group_by_rows() -> None:
    pc = load_script("pace_compare")
    before = {
        "small": _run(0.01, ("linear", 1_000, 0.5), ("degree2", 1_000, 0.05)),
        "large": _run(0.01, ("linear", 40_000, 1.0), ("degree2", 8_000, 2.0)),
    }
    after = {
        "small": _run(0.02, ("linear", 1_000, 1.0), ("degree2", 1_000, 0.2)),
        # degree-2 fit other rows here: another plan, not the same work.
        "large": _run(0.02, ("linear", 40_000, 6.0), ("degree2", 9_000, 4.0)),
        "new": _run(0.02, ("linear", 500, 1.0)),
    }
    records = pc.pairs(before, after)
    got = {(r["case"], r["stage"]): r for r in records}
    # degree-2 on "small" took under MIN_SECONDS before; "large"'s ran on other rows.
    assert set(got) == {("small", "linear"), ("large", "linear")}
    assert got["small", "linear"]["stage_x"] / got["small", "linear"]["probe_x"] == 1.0
    assert got["large", "linear"]["stage_x"] / got["large", "linear"]["probe_x"] == 3.0
    text = pc.report(records, Path("a.json"), Path("b.json"))
    assert "| under 10,000 rows | 1 | 1.00, 1.00, 1.00 |" in text
    assert "| 30,000 rows or more | 1 | 3.00, 3.00, 3.00 |" in text
    assert "10,000-29,999" not in text
