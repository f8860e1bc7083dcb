#!/usr/bin/env python3
"""Derive kcheck.costs.pace.REFERENCE_SECONDS from two runs of scripts/plan_bench.py.

Usage:
    python scripts/probe_reference.py REFERENCE_RUNS PROBED_RUNS

REFERENCE_RUNS: runs made on the reference machine (the speed scripts/stage_predictions.py's
factors were fitted at), before the probe existed; PROBED_RUNS: runs of the same cases, made
later on this machine, whose JSON carries ``plan.probe_cpu_seconds``. The machine's speed
between the two is the median ratio of the same stages' CPU seconds (stages of MIN_SECONDS or
more in either run, on the same rows: a stage whose plan moved between the runs did other work),
and the probe's reference seconds are its median CPU seconds in PROBED_RUNS over that ratio:
what the probe would have taken when REFERENCE_RUNS were made."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from statistics import median
from typing import Any

MIN_SECONDS = 0.5


def _cpu(runs: dict[str, dict[str, Any]]) -> dict[tuple[str, str, int], float]:
    out = {}
    for case, r in runs.items():
        for s in r.get("steps", []):
            cpu = s.get("cpu_seconds")
            if s.get("runs") and s.get("rows") and cpu:
                out[(case, s["name"], int(s["rows"]))] = float(cpu)
    return out


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    ref_runs, new_runs = (json.loads(Path(p).read_text()) for p in sys.argv[1:3])
    ref, new = _cpu(ref_runs), _cpu(new_runs)
    common = [k for k in ref if k in new and max(ref[k], new[k]) >= MIN_SECONDS]
    ratio = median(new[k] / ref[k] for k in common)
    probes = [r["probe"] for r in new_runs.values() if r.get("probe")]
    probe = median(probes)
    print(f"stages compared: {len(common)}; CPU seconds now / then: median {ratio:.3f}")
    print(f"probe now: median {probe:.5f} s over {len(probes)} checks")
    print(f"REFERENCE_SECONDS = {probe / ratio:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
