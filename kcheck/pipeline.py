"""The check: read, scale, split, run the baseline and the checkers, decide. Never prints.

``run(config, progress)`` returns a :class:`CheckReport` whose ``json`` is the schema-1 verdict.
Progress is reported through a callback so that the CLI alone decides what to show.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck import __version__, budget
from kcheck.checkers import degree2, exact, linear, multilinear, rff
from kcheck.checkers.base import CheckerResult, Dataset
from kcheck.data import read_libsvm
from kcheck.errors import KcheckError, TimeLimitReached
from kcheck.memory import (
    check_fits,
    checker_budget,
    csr_bytes,
    default_memory_limit,
    max_data_bytes,
)
from kcheck.scaling import Scaler, fit_scaler
from kcheck.split import stratified_split
from kcheck.verdict import (
    SCHEMA_VERSION,
    Decision,
    Gap,
    decide,
    json_number,
    label_value,
    paired_gap,
)
from kcheck.workers import run_until

#: Every checker there is; DEFAULT_CHECKERS run unless --checkers says otherwise. rff is
#: opt-in: it catches smooth low-dimensional boundaries the others miss (wavy 5-D set: +3.3
#: points where degree-2 and MultiLinear saw under 1), but costs 6-120x the linear model on data
#: up to ijcnn1's size (scripts/results/rff_hard_cases.md).
CHECKERS = ("degree2", "multilinear", "rff")
DEFAULT_CHECKERS = ("degree2", "multilinear")
SCALINGS = ("maxabs", "minmax")
EXACT_MODES = ("auto", "always", "never")
#: Fewer rows than this leave too few in V for any comparison to mean something.
MIN_ROWS = 10
#: Fewer rows per class than this (on average) leave most classes absent from V or T: 3,000
#: classes in 6,000 rows took minutes and scored 0.03% for every method.
MIN_ROWS_PER_CLASS = 5
#: Exact mode's relative budget: this many times the linear baseline's counted cost.
EXACT_LINEAR_FACTOR = 3.0
#: A CV accuracy this far above the accuracy on V points to a fault (see DESIGN.md hazards).
CV_VAL_ALARM = 0.10
#: A --time-limit of this many seconds (about 30 years) or more, inf included, is no limit.
MAX_TIME_LIMIT = 1e9

#: progress(stage, done, total): stage is a short description; done/total count steps or None.
Progress = Callable[[str, int | None, int | None], None]


@dataclass(frozen=True)
class CheckConfig:
    """Everything one check needs; built by the CLI (or a script) and passed to :func:`run`."""

    train: str
    test: str | None = None
    epsilon: float = 0.02
    checkers: tuple[str, ...] = DEFAULT_CHECKERS
    scaling: str = "maxabs"
    seed: int = 0
    jobs: int = 1
    memory_limit: int | None = None
    zero_based: bool = False
    #: Train the recommended (or ``model_kind``) model on all training rows and save it here.
    model_out: str | None = None
    model_kind: str | None = None
    #: Seconds for the whole check; checkers not finished by then are skipped.
    time_limit: float | None = None
    #: The real RBF-vs-linear comparison: "auto" runs it where it is cheap (small data).
    exact: str = "auto"

    def validated(self) -> CheckConfig:
        if not 0.0 <= self.epsilon < 1.0:
            raise KcheckError(f"--epsilon must lie in [0, 1), got {self.epsilon}")
        unknown = [c for c in self.checkers if c not in CHECKERS]
        if unknown or not self.checkers:
            raise KcheckError(
                f"--checkers takes a comma-separated subset of {','.join(CHECKERS)}, "
                f"got {','.join(self.checkers) or 'nothing'}"
            )
        if self.scaling not in SCALINGS:
            raise KcheckError(f"--scaling must be one of {', '.join(SCALINGS)}")
        if self.jobs < 1:
            raise KcheckError("--jobs must be at least 1")
        if self.memory_limit is not None and self.memory_limit <= 0:
            raise KcheckError("--memory-limit must be positive")
        if self.exact not in EXACT_MODES:
            raise KcheckError(f"--exact must be one of {', '.join(EXACT_MODES)}")
        if self.time_limit is not None and not self.time_limit > 0:
            raise KcheckError("--time-limit must be a positive number of seconds")
        if self.model_kind not in (None, "linear", "kernel"):
            raise KcheckError("--model must be linear or kernel")
        return self


@dataclass
class CheckReport:
    """The verdict as JSON-ready data, plus what a caller may reuse (scaler, predictors)."""

    json: dict[str, Any]
    scaler: Scaler
    results: dict[str, CheckerResult] = field(default_factory=dict)


def _noop(stage: str, done: int | None, total: int | None) -> None:
    return None


def _training_labels(y: np.ndarray) -> np.ndarray:
    """Labels LIBLINEAR can hold: it stores them as C ints, so 2.5 and 2.7 would merge.

    Integral labels are kept (saved models then carry the user's labels); others become
    class codes 0..k-1 for training, which only the accuracy comparison ever sees.
    """
    if np.all(np.floor(y) == y) and np.all(np.abs(y) < 2**31):
        return y
    _, codes = np.unique(y, return_inverse=True)
    return codes.astype(np.float64)


def run(
    config: CheckConfig,
    progress: Progress | None = None,
    on_decided: Callable[[dict[str, Any]], None] | None = None,
) -> CheckReport:
    """Run the whole check and return the verdict; raises KcheckError on bad input.

    ``on_decided(json)`` sees the verdict before the ``--model-out`` export, which can take
    much longer than the check.
    """
    config = config.validated()
    report = progress or _noop
    t_start = time.perf_counter()
    memory_limit = config.memory_limit or default_memory_limit()
    # An infinite (or absurdly long) limit is no limit: a deadline of inf overflows timeouts.
    limited = config.time_limit is not None and config.time_limit < MAX_TIME_LIMIT
    deadline = t_start + config.time_limit if limited and config.time_limit else None

    report("reading " + config.train, None, None)
    t0 = time.perf_counter()
    digest = hashlib.sha256()
    y_raw, X = read_libsvm(config.train, zero_based=config.zero_based,
                           memory_limit=memory_limit, digest=digest,
                           max_csr_bytes=max_data_bytes(memory_limit))
    read_seconds = time.perf_counter() - t0
    if config.model_out is not None:
        from kcheck import models

        # Refuse now, not after the whole check has run.
        models.require_integer_labels(y_raw)
    classes = np.unique(y_raw)
    if classes.size < 2:
        raise KcheckError(
            f"{config.train}: every row has label {label_value(classes[0])}; "
            "a classifier needs at least two classes"
        )
    if X.shape[0] < MIN_ROWS:
        raise KcheckError(
            f"{config.train}: {X.shape[0]} rows are too few to compare classifiers "
            f"(at least {MIN_ROWS} are needed)"
        )
    if X.shape[0] < MIN_ROWS_PER_CLASS * classes.size:
        raise KcheckError(
            f"{config.train}: {classes.size:,} classes in {X.shape[0]:,} rows; comparing "
            f"classifiers needs at least {MIN_ROWS_PER_CLASS} rows per class on average"
        )
    n_rows, n_features = X.shape
    data_info = data_summary(config.train, X, classes, digest.hexdigest())
    data_bytes = csr_bytes(X)
    check_fits(config.train, data_bytes, memory_limit)
    # What a checker may allocate on top of the data already in memory.
    checker_memory = checker_budget(memory_limit, data_bytes)

    report("scaling", None, None)
    lower, upper = (-1.0, 1.0)
    scaler = fit_scaler(X, method=config.scaling, lower=lower, upper=upper, source=config.train,
                        memory_limit=memory_limit)
    X = _scale(scaler, X, memory_limit, config.train)
    y = _training_labels(y_raw)

    train_idx, val_idx = stratified_split(y, seed=config.seed)
    T = Dataset(X[train_idx], y[train_idx])
    V = Dataset(X[val_idx], y[val_idx])
    del X

    results: dict[str, CheckerResult] = {}
    report("linear baseline (C search)", None, None)
    try:
        # With a time limit, in a worker process that is killed at the deadline: LIBLINEAR's
        # C search cannot be interrupted, and it took 50 s on 1,000 classes.
        base = run_until(deadline, linear.run, T, V, linear.LinearOptions(seed=config.seed))
    except TimeLimitReached:
        raise KcheckError(
            f"{config.train}: the time limit (--time-limit {config.time_limit:g}) passed before "
            "the linear baseline finished; every checker is compared with it, so nothing was "
            "decided"
        ) from None
    results["linear"] = base
    exact_json = _run_exact(
        config, T, V, checker_memory, deadline, results, report
    )
    # The floor of counted work is for the whole check: where exact mode ran, it decides
    # alone, so degree-2 keeps only its relative budget.
    degree2_floor = 0.0 if "rbf" in results else budget.FLOOR_SECONDS

    # MultiLinear first: the method leans on it most, so a time limit should cut degree-2.
    if "multilinear" in config.checkers:
        k = multilinear.km.n_clusters(T.rows)
        done = [0]
        report("MultiLinear checker", 0, k)

        def tick() -> None:
            done[0] += 1
            report("MultiLinear checker", done[0], k)

        opts = multilinear.MultiLinearOptions(
            seed=config.seed, jobs=config.jobs, fallback_C=float(base.info["C"]), deadline=deadline
        )
        results["multilinear"] = _guarded(
            "multilinear", deadline, lambda: multilinear.run(T, V, opts, tick)
        )

    if "degree2" in config.checkers:
        report("degree-2 checker", None, None)
        left = None if deadline is None else deadline - time.perf_counter()
        results["degree2"] = _guarded(
            "degree2",
            deadline,
            lambda: run_until(
                deadline,
                degree2.run,
                T,
                V,
                degree2.Degree2Options(
                    seed=config.seed,
                    memory_limit=checker_memory,
                    max_cost_nnz=int(
                        max(degree2.COST_FACTOR * T.X.nnz, degree2.MIN_COST_NNZ)
                    ),
                    time_budget=left,
                    seconds_per_nnz=base.seconds / max(T.X.nnz, 1),
                    floor_seconds=degree2_floor,
                ),
            ),
        )
    if "rff" in config.checkers:
        report("random-Fourier-features checker", None, None)
        results["rff"] = _guarded(
            "rff",
            deadline,
            lambda: run_until(
                deadline,
                rff.run,
                T,
                V,
                rff.RffOptions(
                    seed=config.seed, memory_limit=checker_memory,
                    linear_seconds=base.seconds,
                ),
            ),
        )

    gaps: dict[str, Gap] = {}
    for name in (*config.checkers, "rbf"):
        if name not in results:
            continue
        r = results[name]
        if r.correct is not None and base.correct is not None:
            reference = r.reference_correct if r.reference_correct is not None else base.correct
            gaps[name] = paired_gap(r.correct, reference)
    if not gaps:
        reasons = "; ".join(f"{n}: {results[n].reason}" for n in config.checkers)
        raise KcheckError(f"{config.train}: no checker finished ({reasons})")
    # The exact comparison is what the proxies approximate: where it ran, it alone decides.
    decision = decide({"rbf": gaps["rbf"]} if "rbf" in gaps else gaps, config.epsilon)
    decision, cut_short = _cut_short(decision, config.checkers, results)

    test_json = None
    if config.test is not None:
        report("scoring " + config.test, None, None)
        t_test = time.perf_counter()
        test_json = _score_test(config, n_features, scaler, y_raw, results)
        test_json["seconds"] = round(time.perf_counter() - t_test, 4)

    warnings = cut_short + _sanity_warnings(results)
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kcheck_version": __version__,
        "verdict": decision.verdict,
        "margin": decision.margin,
        "deciding_checker": decision.deciding,
        "epsilon": config.epsilon,
        "seed": config.seed,
        "data": data_info,
        "scaling": {"method": scaler.method, "lower": scaler.lower, "upper": scaler.upper},
        "split": {"train": T.rows, "validation": V.rows, "stratified": True},
        "linear": {
            "val_accuracy": json_number(base.val_accuracy),
            "cv_accuracy": json_number(base.cv_accuracy),
            "C": json_number(base.info["C"], 10),
            "seconds": round(base.seconds, 4),
        },
        "checkers": {
            n: _checker_json(results[n], gaps.get(n))
            for n in (*config.checkers, "rbf")
            if n in results
        },
        "exact": exact_json,
        "test": test_json,
        "model": None,
        "warnings": warnings,
        "read_seconds": round(read_seconds, 4),
        "seconds": round(time.perf_counter() - t_start, 4),
    }
    if on_decided is not None:
        # The verdict is known: a caller may show it before a long model export starts.
        on_decided(out)
    if config.model_out is not None:
        from kcheck import models

        kind = config.model_kind or decision.verdict
        report(f"training the {kind} model on all rows", None, None)
        out["model"] = models.export(
            sp.vstack([T.X, V.X], format="csr"),
            np.concatenate([y_raw[train_idx], y_raw[val_idx]]),
            scaler,
            kind,
            config.model_out,
            seed=config.seed,
            jobs=config.jobs,
            progress=report,
            deadline=deadline,
        )
        out["seconds"] = round(time.perf_counter() - t_start, 4)
    return CheckReport(json=out, scaler=scaler, results=results)


def _exact_budget(T: Dataset, V: Dataset) -> float:
    """Counted seconds exact mode may take: the floor, or 3x the linear baseline's counted cost."""
    n_classes = int(np.unique(T.y).size)
    return max(
        budget.FLOOR_SECONDS,
        EXACT_LINEAR_FACTOR * budget.linear_seconds(T.X.nnz + V.X.nnz, n_classes),
    )


def _run_exact(
    config: CheckConfig,
    T: Dataset,
    V: Dataset,
    memory_limit: int,
    deadline: float | None,
    results: dict[str, CheckerResult],
    report: Progress,
) -> dict[str, Any]:
    """Run the exact RBF comparison on all rows (T and V) where it is cheap or asked for.

    Whether ``auto`` runs it is decided from counted work (kcheck.budget), so the same data
    and options give the same decision on every machine.
    """
    opts = exact.ExactOptions(
        seed=config.seed, jobs=config.jobs, deadline=deadline, epsilon=config.epsilon
    )
    rows = T.rows + V.rows
    X_all = y_all = None
    if config.exact == "never":
        d = exact.RunDecision(False, "exact mode is off")
    elif config.exact == "auto" and rows > exact.MAX_ROWS:
        # Say no before stacking T and V: that would copy all of the data.
        d = exact.RunDecision(
            False, f"too large: {rows:,} rows (auto considers at most {exact.MAX_ROWS:,})"
        )
    else:
        X_all = sp.vstack([T.X, V.X], format="csr")
        y_all = np.concatenate([T.y, V.y])
        d = exact.decide_run(
            X_all,
            y_all,
            opts,
            budget_seconds=_exact_budget(T, V),
            memory_limit=memory_limit,
            mode=config.exact,
        )
    out: dict[str, Any] = {
        "mode": config.exact,
        "ran": d.run,
        "reason": d.reason,
        # Counted reference seconds (kcheck.budget), the same on every machine.
        "estimated_seconds": d.estimated_seconds,
        "budget_seconds": d.budget_seconds,
    }
    if d.run and X_all is not None and y_all is not None:
        Xa, ya = X_all, y_all
        results["rbf"] = _guarded("rbf", deadline, lambda: exact.run(Xa, ya, opts, report))
        if results["rbf"].status != "exact":
            out.update(ran=False, reason=f"{d.reason}; then {results['rbf'].reason}")
    return out


def data_summary(
    path: str, X: sp.csr_matrix, classes: np.ndarray, sha256: str | None = None
) -> dict[str, Any]:
    """The JSON ``data`` block: what was read, before any scaling or sampling.

    ``sha256`` is the hash of the file's decompressed content: it ties a verdict to its data
    (``verify --check-json``, ``batch --resume``).
    """
    n_rows, n_features = X.shape
    return {
        "path": path,
        "sha256": sha256,
        "rows": int(n_rows),
        "features": int(n_features),
        "nnz": int(X.nnz),
        "density": json_number(X.nnz / max(1, n_rows * n_features)),
        "classes": [label_value(c) for c in classes],
    }


def _scale(scaler: Scaler, X: sp.csr_matrix, memory_limit: int, path: str) -> sp.csr_matrix:
    """Scale in place when zeros stay zeros; refuse a densifying scaling that cannot fit."""
    try:
        return scaler.transform_inplace(X)
    except ValueError:
        pass
    nnz = scaler.nnz_after(X)
    if nnz * 12 > memory_limit:
        raise KcheckError(
            f"{path}: min-max scaling to [{scaler.lower:g}, {scaler.upper:g}] turns zeros into "
            f"non-zeros and would store {nnz:,} values; use --scaling maxabs"
        )
    return scaler.transform(X)


def _guarded(
    name: str, deadline: float | None, fn: Callable[[], CheckerResult]
) -> CheckerResult:
    """Run a checker; an engine failure, MemoryError or the time limit skips it, not the check."""
    t0 = time.perf_counter()
    if deadline is not None and t0 >= deadline:
        return CheckerResult.skipped(name, "time limit", 0.0)
    try:
        return fn()
    except TimeLimitReached:
        return CheckerResult.skipped(name, "time limit", time.perf_counter() - t0)
    except MemoryError:
        return CheckerResult.skipped(name, "ran out of memory", time.perf_counter() - t0)
    except KcheckError as e:
        return CheckerResult.skipped(name, str(e), time.perf_counter() - t0)


def _checker_json(r: CheckerResult, gap: Gap | None) -> dict[str, Any]:
    out: dict[str, Any] = {"status": r.status, "reason": r.reason}
    out["val_accuracy"] = json_number(r.val_accuracy)
    out["gap"] = json_number(gap.value) if gap else None
    out["gap_ci95"] = [json_number(gap.low), json_number(gap.high)] if gap else None
    for key, value in r.info.items():
        out[key] = _json_value(value)
    if r.cv_accuracy is not None:
        out["cv_accuracy"] = json_number(r.cv_accuracy)
    out["seconds"] = round(r.seconds, 4)
    return out


def _json_value(value: Any) -> Any:
    if isinstance(value, float):
        return json_number(value, 10)
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    return value


def _score_test(
    config: CheckConfig,
    n_features: int,
    scaler: Scaler,
    y_train_raw: np.ndarray,
    results: dict[str, CheckerResult],
) -> dict[str, Any]:
    """Accuracy on the test file of every model trained on T (same scaling as training)."""
    assert config.test is not None
    digest = hashlib.sha256()
    y_raw, X = read_libsvm(config.test, n_features=n_features, zero_based=config.zero_based,
                           memory_limit=config.memory_limit, digest=digest)
    X = scaler.transform(X)
    classes = np.unique(y_train_raw)
    if np.array_equal(_training_labels(y_train_raw), y_train_raw):
        y = y_raw
    else:
        # Map test labels to the training codes; unseen labels can never be predicted right.
        pos = np.searchsorted(classes, y_raw).clip(0, classes.size - 1)
        y = np.where(classes[pos] == y_raw, pos, -1).astype(np.float64)
    out: dict[str, Any] = {"path": config.test, "sha256": digest.hexdigest(),
                           "rows": int(X.shape[0])}
    for name, r in results.items():
        if r.predict is None:
            out[name] = None
            continue
        out[name] = json_number(float(np.mean(r.predict(X) == y))) if y.size else None
    return out


def _cut_short(
    decision: Decision, checkers: tuple[str, ...], results: dict[str, CheckerResult]
) -> tuple[Decision, list[str]]:
    """A linear verdict is not ``clear`` while a checker that might have overturned it did not
    run: skipped (budget, memory, time limit) or stopped. Where exact mode decided, the
    proxies do not matter; a degree-2 subsample under its budget is not cut short, its
    interval already reflects the subsample."""
    if decision.verdict != "linear" or "rbf" in results:
        return decision, []
    notes = []
    for name in checkers:
        r = results.get(name)
        if r is None:
            continue
        if r.status == "skipped":
            what = "did not run"
        elif r.info.get("limited_by") in ("time", "memory"):
            what = "was cut short"
        else:
            continue
        notes.append(f"{name} {what} ({r.reason}), so it cannot confirm the linear verdict")
    if notes and decision.margin == "clear":
        decision = Decision(decision.verdict, "borderline", decision.deciding)
    return decision, notes


def _sanity_warnings(results: dict[str, CheckerResult]) -> list[str]:
    """Flag a model that scores far below its own CV accuracy: a fault, not a result."""
    notes = []
    for name, r in results.items():
        if r.cv_accuracy is not None and r.val_accuracy is not None:
            if r.cv_accuracy - r.val_accuracy > CV_VAL_ALARM:
                notes.append(
                    f"{name}: validation accuracy {r.val_accuracy:.3f} is far below its CV "
                    f"accuracy {r.cv_accuracy:.3f}"
                )
    return notes
