"""This machine's pace: a short fixed probe timed here, against its time on the reference machine.

kcheck.costs.budget counts each stage in seconds of the reference machine, so the JSON's plan is
the same everywhere. What a stage takes here also depends on the machine's speed, which moved
about 2x on this very machine between two quiet runs eight hours apart: the same 89 stages of
0.5 s or more took a median 0.50 of their CPU seconds (scripts/results/plan.md against
plan_runs_reference.json). Compared with the raw prediction, the faster run made 52 stages of
55 checks warn that "the cost model is off", and a slower one would hide a model that is off.
So a stage is compared with its prediction times this machine's pace: the probe's CPU seconds
here over its REFERENCE_SECONDS.

The probe trains LIBLINEAR (``-s 2``, four C values) and LIBSVM (RBF) on a fixed generated set
that stays in the CPU's cache, and keeps the fastest of three runs in this process's CPU
seconds: a CPU hog on the other core, or a pause, does not count. It measures the CPU, not
memory bandwidth, which moved less between those runs (a9a's degree-2 on 15,743 expanded rows:
0.91). Neither holds everywhere: one afternoon this machine ran LIBLINEAR on 24,000-75,000 rows
1.4-3.5 times slower than the probe's pace said, and the probe's reading moved 1.75x with the
moment it was taken, as the machine switched between two speeds (docs/method.md, "Predicted
against taken").
About 40 ms, run only where a stage is predicted to take 0.5 s or more. A check reads it again,
once, after each such stage that ran in its own process (:class:`Readings`), and its pace is
the median of its readings: a single reading at the start fell in one of the machine's two
speeds while the stages after it ran in both (on 2026-12-06, five checks whose start read a
pace of 0.85-1.05 where the others read 0.47-0.70 had stages take 0.28-0.48 of their
prediction). Display only: nothing a check computes reads it.
"""

from __future__ import annotations

import functools
import statistics
import time

import numpy as np
import scipy.sparse as sp

from kcheck.bindings import engines

__all__ = ["REFERENCE_SECONDS", "Readings", "pace", "probe_runs", "probe_seconds"]

#: The probe's CPU seconds on the reference machine, whose speed the stage predictions were
#: fitted at (scripts/stage_predictions.py, as kcheck showed them up to schema 2):
#: ``python scripts/probe_reference.py scripts/results/plan_runs_reference.json
#: scripts/results/plan_runs_probe.json``, its median 0.00917 s in the later runs' 55 checks
#: over 0.504, the median ratio of the same 89 stages' CPU seconds (on the same rows) between
#: them. The same derivation from a run two days later (scripts/results/plan_runs_0.6.2.json)
#: gives 0.0198: 0.00770 s over 0.388 on 89 stages; from two on 2026-12-02, kcheck 0.6.3's
#: 0.0184 (0.00915 s over 0.498) and 0.6.4's 0.0182 (0.00912 s over 0.502; that run's file
#: now holds 0.6.5's of the same day, scripts/results/plan_runs_0.6.5.json: 0.0189); from
#: 0.7.0's on 2026-12-06, on an Intel host where the others ran on AMD
#: (scripts/results/plan_runs.json), 0.0199.
REFERENCE_SECONDS = 0.0182
#: Rows and features of the generated set; LIBSVM trains on the first SVM_ROWS rows.
ROWS, FEATURES, SVM_ROWS = 3000, 16, 500


@functools.lru_cache(maxsize=1)
def _problems() -> tuple[engines.Problem, engines.SvmProblem]:
    rng = np.random.default_rng(0)
    X = rng.uniform(-1.0, 1.0, (ROWS, FEATURES))
    y = np.where(X[:, 0] * X[:, 1] + 0.2 * rng.standard_normal(ROWS) > 0, 1.0, -1.0)
    Xs = sp.csr_matrix(X)
    return engines.Problem.from_data(Xs, y), engines.SvmProblem.from_data(
        Xs[:SVM_ROWS], y[:SVM_ROWS]
    )


def probe_runs(runs: int) -> list[float]:
    """Each of ``runs`` runs of the probe, one after another, in this process's CPU seconds
    (docs/method.md, "Predicted against taken", says how they moved with the moment)."""
    linear, svm = _problems()
    took = []
    for _ in range(max(runs, 1)):
        t0 = time.process_time()
        for C in (0.25, 1.0, 4.0, 16.0):
            engines.train_linear(linear, C)
        engines.train_rbf(svm, 4.0, 0.5)
        took.append(time.process_time() - t0)
    return took


def probe_seconds(runs: int = 3) -> float:
    """The fastest of ``runs`` runs of the probe, in this process's CPU seconds."""
    return min(probe_runs(runs))


class Readings:
    """The probe's readings over one check: the fastest of three runs before its first stage,
    then one run after each stage of note (:meth:`again`). :attr:`seconds` is their median,
    the pace a finished check's stages are compared at (None where it never ran)."""

    def __init__(self, first: float | None) -> None:
        self.readings: list[float] = [] if first is None else [first]

    def again(self) -> None:
        """One more reading, where the check reads the probe at all."""
        if self.readings:
            self.readings.append(probe_seconds(1))

    @property
    def seconds(self) -> float | None:
        return statistics.median(self.readings) if self.readings else None


def pace(probe_cpu_seconds: float | None) -> float:
    """This machine's seconds per reference second, from the probe's CPU seconds here (1
    where it did not run)."""
    if probe_cpu_seconds is None or probe_cpu_seconds <= 0:
        return 1.0
    return probe_cpu_seconds / REFERENCE_SECONDS
