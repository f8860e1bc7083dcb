"""This machine's pace: a short fixed probe timed here against the reference machine. Display only:
nothing a check computes reads it.

kcheck.costs.budget counts stages in reference seconds, so the JSON's plan is the same everywhere;
but a machine's speed moves (about 2x on one machine between quiet runs), and raw predictions then
warned falsely or hid a bad model. So a stage is compared with its prediction times the pace: the
probe's CPU seconds here over REFERENCE_SECONDS.

The probe trains LIBLINEAR (``-s 2``, four C values) and LIBSVM (RBF) on a fixed in-cache set,
fastest of three runs in process CPU seconds (another core's load or a pause does not count); about
40 ms, run only where a stage is predicted at 0.5 s or more. It measures CPU, not memory bandwidth,
and machines switching speeds can still fool it (docs/method.md, "Predicted against taken"). A check
reads it again after each such stage run in its own process (:class:`Readings`); its pace is the
readings' median, as one reading at the start caught one of two speeds."""

from __future__ import annotations

import functools
import statistics
import time

import numpy as np
import scipy.sparse as sp

from kcheck.bindings import engines

__all__ = ["REFERENCE_SECONDS", "Readings", "pace", "probe_runs", "probe_seconds"]

#: The probe's CPU seconds on the reference machine the predictions were fitted at
#: (scripts/probe_reference.py; later runs gave 0.0182-0.0199).
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
    """Each of ``runs`` probe runs in turn, in this process's CPU seconds (see docs/method.md)."""
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
    """The probe's readings over one check: fastest of three before the first stage, then one after
    each stage of note (:meth:`again`). :attr:`seconds`: their median (None where it never ran)."""

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
    """This machine's seconds per reference second, from the probe here (1 where it did not run)."""
    if probe_cpu_seconds is None or probe_cpu_seconds <= 0:
        return 1.0
    return probe_cpu_seconds / REFERENCE_SECONDS
