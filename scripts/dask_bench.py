"""verify's RBF grid on a Dask cluster against the local ``-j N`` runner, for dask.md.

Runs ``kcheck verify`` on a stratified sample of a data set twice in this process: with ``N``
local worker processes (``-j N``), then on a LocalCluster of ``N`` single-threaded worker
processes, the one ``--scheduler local:N`` starts, timed from before the cluster starts. It
checks that both give the same JSON apart from timing fields, records Dask's task stream for
each grid point's compute time, and from those times estimates the full data set's grid on a
larger cluster: a point's time grows about with rows squared (LIBSVM's kernel evaluations),
and the points are list-scheduled on the workers in the order kcheck submits them. On a busy
machine the tasks' wall times are scaled by the CPU time the workers used (``cpu_share``).

    python scripts/dask_bench.py /work/shared/datasets/a9a --max-rows 5000 --workers 2 \\
        --full-rows 32561 --cores 64
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import logging
import os
import time
from typing import Any

import distributed

from kcheck.verdict import without_timing
from kcheck.verify import VerifyConfig, verify


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _schedule(times: list[float], cores: int) -> float:
    """Makespan of the tasks, in this order, each on the first core free (as Dask does)."""
    free = [0.0] * cores
    for t in times:
        start = heapq.heappop(free)
        heapq.heappush(free, start + t)
    return max(free)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("train")
    parser.add_argument("--max-rows", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--full-rows", type=int, default=32561)
    parser.add_argument("--cores", type=int, default=64)
    parser.add_argument("--json-out", default=None, help="Write the measurements here.")
    parser.add_argument(
        "--dask-only",
        action="store_true",
        help="Skip the local run: only the per-task times, e.g. on a busy machine, where the "
        "workers' CPU time (not their wall time) is what a dedicated cluster would spend.",
    )
    args = parser.parse_args()

    base = VerifyConfig(train=args.train, max_rows=args.max_rows)
    print(f"load average before: {os.getloadavg()}", flush=True)

    local: dict[str, Any] | None = None
    local_seconds = None
    if not args.dask_only:
        t0 = time.perf_counter()
        local = verify(dataclasses.replace(base, jobs=args.workers))
        local_seconds = time.perf_counter() - t0
        print(f"-j {args.workers}: {local_seconds:.1f}s", flush=True)

    t0 = time.perf_counter()
    with (
        distributed.LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        started = time.perf_counter() - t0
        pids = list(client.run(os.getpid).values())
        cpu0 = sum(_cpu_seconds(p) for p in pids)
        with distributed.get_task_stream(client) as stream:
            remote = verify(dataclasses.replace(base, scheduler=cluster.scheduler_address))
        dask_seconds = time.perf_counter() - t0
        worker_cpu = sum(_cpu_seconds(p) for p in pids) - cpu0
        tasks = [t for t in stream.data if str(t["key"]).startswith("kcheck-")]
    print(f"Dask, {args.workers} workers: {dask_seconds:.1f}s ({started:.1f}s to start)")
    print(f"load average after: {os.getloadavg()}", flush=True)

    same = None if local is None else without_timing(local) == without_timing(remote)
    # Task keys end in the submission index: the order kcheck submits the points in.
    compute = {
        int(str(t["key"]).rsplit("-", 1)[1]): sum(
            s["stop"] - s["start"] for s in t["startstops"] if s["action"] == "compute"
        )
        for t in tasks
    }
    times = [compute[i] for i in sorted(compute)]
    # On a busy machine a task's wall time includes waiting for a CPU: scale the tasks' times
    # by the CPU time the workers spent over the same span (worker overhead included).
    cpu_share = min(1.0, worker_cpu / sum(times))
    scale = (args.full_rows / remote["data"]["cv_rows"]) ** 2
    full = [t * cpu_share * scale for t in times]
    out = {
        "train": args.train,
        "rows": remote["data"]["cv_rows"],
        "workers": args.workers,
        "local_seconds": local_seconds,
        "dask_seconds": dask_seconds,
        "dask_start_seconds": started,
        "overhead": None if local_seconds is None else dask_seconds / local_seconds - 1,
        "same_result": same,
        "grid_points": len(times),
        "task_seconds_sum": sum(times),
        "task_seconds_max": max(times),
        "task_seconds_median": sorted(times)[len(times) // 2],
        "worker_cpu_seconds": worker_cpu,
        "cpu_share": cpu_share,
        "full_rows": args.full_rows,
        "scale": scale,
        "full_task_seconds_sum": sum(full),
        "full_task_seconds_max": max(full),
        "full_cores": args.cores,
        "full_makespan_seconds": _schedule(full, args.cores),
        "full_on_two_cores_seconds": _schedule(full, 2),
        "verdict": remote["verdict"],
        "rbf": {k: remote["rbf"][k] for k in ("C", "gamma", "cv_accuracy")},
    }
    print(json.dumps(out, indent=2))
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2)
    if same is False:
        raise SystemExit("the two runs differ apart from timing")


if __name__ == "__main__":
    main()
