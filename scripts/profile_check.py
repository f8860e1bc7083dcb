#!/usr/bin/env python3
"""Where a check's time goes on large data, step by step, against the linear baseline.

Usage:
    python scripts/profile_check.py FILE [--jobs 2] [--profile degree2] [--top 25]

Runs the steps of ``kcheck check FILE`` (default checkers, exact mode off as on large data)
one after another in this process: read and scale, the linear baseline, each checker as the
pipeline runs it, and prints the seconds of each (wall and CPU: on a shared machine the CPU
seconds of a ``--jobs 1`` run are the steadier measure) and their sum over the baseline's. The
checker named by --profile runs under cProfile, and its most expensive functions (cumulative
time) are printed; within degree-2, the split between planning, the subsample's linear
reference, the expansion, LIBLINEAR on it and scoring V shows which of them a budget moves.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kcheck import plan  # noqa: E402
from kcheck.checkers import linear, registry  # noqa: E402
from kcheck.checkers.base import Context, Counts, Dataset  # noqa: E402
from kcheck.costs import budget  # noqa: E402
from kcheck.memory import checker_budget, default_memory_limit  # noqa: E402
from kcheck.prepare import prepare  # noqa: E402
from kcheck.split import stratified_split  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", default="degree2", help="checker to run under cProfile")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    limit = default_memory_limit()

    t0, c0 = time.perf_counter(), time.process_time()
    data = prepare(args.path, scaling="maxabs", memory_limit=limit, seed=args.seed)
    tr, va = stratified_split(data.y, seed=args.seed)
    T, V = Dataset(data.X[tr], data.y[tr]), Dataset(data.X[va], data.y[va])
    data.X = data.X[:0]
    steps = {"read+scale+split": time.perf_counter() - t0}
    cpu = {"read+scale+split": time.process_time() - c0}

    t0, c0 = time.perf_counter(), time.process_time()
    base = linear.run(T, V, linear.LinearOptions(seed=args.seed))
    steps["linear"] = time.perf_counter() - t0
    cpu["linear"] = time.process_time() - c0
    ctx = Context(
        seed=args.seed,
        jobs=args.jobs,
        epsilon=0.02,
        memory_limit=checker_budget(limit, data.data_bytes),
        deadline=None,
        baseline=base,
    )
    # Each checker sized as the plan sizes it within small data's first share of the floor.
    first = budget.FIRST_SHARE * budget.FLOOR_SECONDS
    steps = plan.checker_steps(Counts.of(T, V), registry.DEFAULT_NAMES, first, ctx.memory_limit)
    planned = {s.name: s.sized for s in steps if s.sized is not None}
    profiles: dict[str, str] = {}
    for name in registry.DEFAULT_NAMES:
        spec = registry.CHECKERS[name]
        prof = cProfile.Profile() if name == args.profile else None
        t0, c0 = time.perf_counter(), time.process_time()
        if prof is not None:
            prof.enable()
        r = spec.run(T, V, ctx, planned[name])
        if prof is not None:
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(args.top)
            profiles[name] = out.getvalue()
        steps[name] = time.perf_counter() - t0
        cpu[name] = time.process_time() - c0
        print(
            f"{name}: {r.status} {r.reason or ''} "
            + " ".join(f"{k}={v}" for k, v in r.info.items() if not isinstance(v, dict)),
            file=sys.stderr,
        )
    print(f"{args.path}: {T.rows:,} rows in T, {V.rows:,} in V, {T.X.nnz:,} values in T")
    print(f"  {'step':<18} {'wall s':>8} {'x linear':>9} {'CPU s':>8} {'x linear':>9}")
    steps["check (no read)"] = sum(v for k, v in steps.items() if k != "read+scale+split")
    cpu["check (no read)"] = sum(v for k, v in cpu.items() if k != "read+scale+split")
    for k, v in steps.items():
        c = cpu[k]
        print(f"  {k:<18} {v:8.2f} {v / steps['linear']:9.2f} {c:8.2f} {c / cpu['linear']:9.2f}")
    for name, text in profiles.items():
        print(f"\n--- cProfile of {name} (cumulative) ---\n{text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
