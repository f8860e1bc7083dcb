"""kcheck from Python: :func:`check` on arrays and :func:`check_file` on a LIBSVM file. Both run
``kcheck check``'s pipeline with its options, names and defaults
(:class:`kcheck.config.CheckConfig`) and return a :class:`Result` whose :meth:`Result.to_dict` is
the command's JSON. They print only if asked (``progress=``, ``verbose=True``), never exit, and
raise :class:`kcheck.errors.KcheckError` (a ValueError) or TypeError in the command line's words.
Imported on first use of ``kcheck.check`` (kcheck/__init__.py), keeping ``import kcheck`` light."""

from __future__ import annotations

import copy
import dataclasses
import numbers
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kcheck import predict
from kcheck.arrays import ArrayTest, as_csr, prepare_arrays
from kcheck.bindings.c_runtime import wait_for_left_calls
from kcheck.config import CheckConfig
from kcheck.defaults import MAX_SEED, Event, Progress, no_progress
from kcheck.errors import KcheckError, recorded_warnings
from kcheck.io.atomic import atomic_paths
from kcheck.modelfiles import export
from kcheck.pipeline import CheckReport, run
from kcheck.scaling.fitting import RANGE_SUFFIX
from kcheck.terms.expand import spec_path

__all__ = ["Gap", "Model", "Result", "check", "check_file"]


@dataclass(frozen=True)
class Gap:
    """A checker's gap over linear in the metric's units (0.02 is 2 points) with its interval."""

    value: float
    low: float
    high: float

    def __repr__(self) -> str:
        return f"{100 * self.value:+.2f} pts [{100 * self.low:+.1f}, {100 * self.high:+.1f}]"


class Result:
    """A finished check, typed; :meth:`to_dict` is ``kcheck check``'s JSON for the same input."""

    def __init__(self, report: CheckReport, config: CheckConfig, verdict: dict[str, Any]):
        self._report = report
        self._config = config
        self._json = verdict

    @property
    def verdict(self) -> str:
        """``kernel`` or ``linear``."""
        return str(self._json["verdict"])

    @property
    def margin(self) -> str:
        """``clear`` or ``borderline``."""
        return str(self._json["margin"])

    @property
    def deciding_checker(self) -> str | None:
        return self._json["deciding_checker"]  # type: ignore[no-any-return]

    @property
    def epsilon(self) -> float:
        return float(self._json["epsilon"])

    @property
    def metric(self) -> str:
        return str(self._json["metric"])

    @property
    def gaps(self) -> dict[str, Gap | None]:
        """Each checker's gap over linear (None where it did not finish)."""
        out: dict[str, Gap | None] = {}
        for name, c in self._json["checkers"].items():
            ci = c.get("gap_ci95")
            out[name] = None if c.get("gap") is None or ci is None else Gap(c["gap"], *ci)
        return out

    @property
    def checkers(self) -> dict[str, dict[str, Any]]:
        """Each checker's JSON block: status, reason, scores, parameters, seconds."""
        checkers: dict[str, dict[str, Any]] = copy.deepcopy(self._json["checkers"])
        return checkers

    @property
    def plan(self) -> Any:
        """What the run planned to do, where the JSON records it (None otherwise)."""
        return copy.deepcopy(self._json.get("plan"))

    @property
    def warnings(self) -> list[str]:
        return list(self._json.get("warnings") or [])

    def to_dict(self) -> dict[str, Any]:
        """The JSON verdict (schema in kcheck/schema/check.schema.json), a fresh copy."""
        return copy.deepcopy(self._json)

    def __repr__(self) -> str:
        data = self._json["data"]
        by = self.deciding_checker
        gap = self.gaps.get(by) if by is not None else None
        decided = f" by {by} {gap!r}" if gap is not None else ""
        return (
            f"<kcheck.Result {self.verdict} ({self.margin}){decided}; epsilon "
            f"{100 * self.epsilon:g} pts; {data['rows']:,} rows x {data['features']:,} features>"
        )

    def fit_model(
        self,
        kind: str | None = None,
        *,
        probability: bool = False,
        progress: Progress | None = None,
    ) -> Model:
        """Train the recommended model (or ``kind``: linear, kernel, linear+K with explain) on all
        checked rows, as ``--model-out`` does; :meth:`Model.save` writes its files."""
        if kind is not None and not isinstance(kind, str):
            raise TypeError(f"kind must be a string such as 'linear' or 'kernel', got {kind!r}")
        report = dataclasses.replace(
            self._report,
            result=dataclasses.replace(
                self._report.result, warnings=list(self._report.result.warnings)
            ),
        )
        with tempfile.TemporaryDirectory(prefix="kcheck-model-") as tmp:
            path = os.path.join(tmp, "model")
            config = dataclasses.replace(
                self._config,
                model_out=path,
                model_kind=kind,
                model_probability=probability,
                time_limit=None,
            ).validated()
            with _quiet(progress, False):
                export.train_model(report, config, progress)
            saved = predict.load(path)
            files = {
                suffix: Path(path + suffix).read_bytes()
                for suffix in ("", RANGE_SUFFIX, spec_path("") if saved.spec else None)
                if suffix is not None
            }
        info = report.result.model or {}
        return Model(
            kind=str(info.get("kind")),
            params=dict(info.get("params") or {}),
            cv_accuracy=info.get("cv_accuracy"),
            saved=saved,
            files=files,
        )


class Model:
    """A trained model with its scaling: :meth:`predict` takes unscaled rows, as the check did;
    :meth:`save` writes ``--model-out``'s files (PATH, PATH.range, for linear+K PATH.terms) for
    svm-predict, liblinear-predict and ``kcheck predict``."""

    def __init__(
        self,
        *,
        kind: str,
        params: dict[str, Any],
        cv_accuracy: float | None,
        saved: predict.SavedModel,
        files: dict[str, bytes],
    ) -> None:
        self.kind = kind
        self.params = params
        self.cv_accuracy = cv_accuracy
        self._saved = saved
        self._files = files

    def predict(self, X: Any) -> np.ndarray:
        """The predicted label of each row of ``X`` (array, sparse matrix or frame)."""
        A = as_csr(X)
        scaler = self._saved.scaler
        assert scaler is not None  # a model trained here always has its range
        if A.shape[1] != scaler.n_features:
            raise KcheckError(
                f"X has {A.shape[1]:,} features, the model was trained on {scaler.n_features:,}"
            )
        return self._saved.predict_scaled(scaler.transform(A))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model and its companions atomically: all of them, or none."""
        target = os.fspath(path)
        names = {"": "model file", RANGE_SUFFIX: "range file"}
        suffixes = list(self._files)
        targets: list[tuple[str | os.PathLike[str], str]] = [
            (target + s, names.get(s, "term spec")) for s in suffixes
        ]
        with atomic_paths(targets) as tmps:
            for s, tmp in zip(suffixes, tmps, strict=True):
                with open(tmp, "wb") as f:
                    f.write(self._files[s])

    def __repr__(self) -> str:
        params = " ".join(f"{k}={v:g}" for k, v in self.params.items())
        return f"<kcheck.Model {self.kind} {params}>"


# --- the calls --------------------------------------------------------------------------------


def check(
    X: Any,
    y: Any,
    *,
    test: tuple[Any, Any] | None = None,
    epsilon: float = CheckConfig.epsilon,
    metric: str = CheckConfig.metric,
    checkers: Iterable[str] | str = CheckConfig.checkers,
    scaling: str = CheckConfig.scaling,
    exact: str = CheckConfig.exact,
    seed: int = CheckConfig.seed,
    jobs: int = CheckConfig.jobs,
    memory_limit: int | None = CheckConfig.memory_limit,
    time_limit: float | None = CheckConfig.time_limit,
    explain: bool = CheckConfig.explain,
    progress: Progress | None = None,
    verbose: bool = False,
) -> Result:
    """Is an RBF kernel clearly better than linear on rows ``X`` with labels ``y``?

    ``X``: a dense numpy array, a scipy sparse matrix or array (CSR, CSC, COO...) or a pandas
    DataFrame of numeric columns; ``y``: one number a row. ``test=(X_test, y_test)`` also
    scores every model on those rows. Worker processes (``jobs`` > 1) re-import the calling
    script: guard it with ``if __name__ == "__main__":``.
    """
    config = _config(
        arrays_name(),
        None,
        epsilon=epsilon,
        metric=metric,
        checkers=checkers,
        scaling=scaling,
        exact=exact,
        seed=seed,
        jobs=jobs,
        memory_limit=memory_limit,
        time_limit=time_limit,
        explain=explain,
    )
    if test is not None and (not isinstance(test, tuple) or len(test) != 2):
        raise TypeError("test must be a pair (X_test, y_test)")
    with _quiet(progress, verbose) as report:
        prepared = prepare_arrays(
            X, y, scaling=config.scaling, memory_limit=config.memory_bytes, name=config.train
        )
        test_data = None if test is None else ArrayTest(test[0], test[1], prepared)
        with recorded_warnings() as notes:
            checked = run(config, report, prepared=prepared, test_data=test_data)
    verdict = checked.json
    if verdict.get("test"):
        verdict["test"]["path"] = None
    return _result(checked, config, verdict, notes, verbose)


def check_file(
    path: str | os.PathLike[str],
    *,
    test: str | os.PathLike[str] | None = None,
    epsilon: float = CheckConfig.epsilon,
    metric: str = CheckConfig.metric,
    checkers: Iterable[str] | str = CheckConfig.checkers,
    scaling: str = CheckConfig.scaling,
    exact: str = CheckConfig.exact,
    seed: int = CheckConfig.seed,
    jobs: int = CheckConfig.jobs,
    memory_limit: int | None = CheckConfig.memory_limit,
    time_limit: float | None = CheckConfig.time_limit,
    explain: bool = CheckConfig.explain,
    max_rows: int | str | None = CheckConfig.max_rows,
    zero_based: bool = CheckConfig.zero_based,
    progress: Progress | None = None,
    verbose: bool = False,
) -> Result:
    """:func:`check` on a LIBSVM file (.gz, .bz2, .xz read directly), as ``kcheck check``."""
    config = _config(
        _path(path, "path"),
        None if test is None else _path(test, "test"),
        epsilon=epsilon,
        metric=metric,
        checkers=checkers,
        scaling=scaling,
        exact=exact,
        seed=seed,
        jobs=jobs,
        memory_limit=memory_limit,
        time_limit=time_limit,
        explain=explain,
        max_rows=max_rows,
        zero_based=_flag(zero_based, "zero_based"),
    )
    with _quiet(progress, verbose) as report:
        with recorded_warnings() as notes:
            checked = run(config, report)
    return _result(checked, config, checked.json, notes, verbose)


def arrays_name() -> str:
    """What the training arrays are called in messages (a file is named by its path)."""
    return "<arrays>"


def _result(
    checked: CheckReport,
    config: CheckConfig,
    verdict: dict[str, Any],
    notes: list[str],
    verbose: bool,
) -> Result:
    """The result, with the warnings issued outside the pipeline added as the CLI adds them."""
    verdict["warnings"] = [*verdict.get("warnings", []), *notes]
    if verbose:
        for w in verdict["warnings"]:
            print(f"kcheck: warning: {w}", file=sys.stderr)
    return Result(checked, config, verdict)


# --- options ----------------------------------------------------------------------------------


def _config(train: str, test: str | None, **options: Any) -> CheckConfig:
    """A validated CheckConfig; the checks click makes on the command line are made here."""
    given = options["epsilon"]
    if isinstance(given, bool) or not isinstance(given, numbers.Real):
        raise TypeError(f"epsilon must be a number such as 0.02 (2 points), got {given!r}")
    epsilon = float(given)
    if epsilon >= 1:
        raise KcheckError(
            f"a fraction of accuracy is expected (0.02 = 2 points), got {given}; "
            f"for {epsilon:g} points give {epsilon / 100:g}"
        )
    seed = _integer(options["seed"], "seed")
    if not 0 <= seed <= MAX_SEED:
        raise KcheckError(f"--seed must lie in 0 to 2^32-1, got {seed}")
    jobs = _integer(options["jobs"], "jobs")
    memory_limit = options["memory_limit"]
    if memory_limit is not None:
        memory_limit = _integer(memory_limit, "memory_limit")
    time_limit = options["time_limit"]
    if time_limit is not None:
        if isinstance(time_limit, bool) or not isinstance(time_limit, numbers.Real):
            raise TypeError(f"time_limit must be a number of seconds, got {time_limit!r}")
        time_limit = float(time_limit)
    for name in ("metric", "scaling", "exact"):
        if not isinstance(options[name], str):
            raise TypeError(f"{name} must be a string, got {options[name]!r}")
    max_rows = options.get("max_rows")
    if isinstance(max_rows, bool) or not isinstance(max_rows, (int, str, type(None))):
        raise TypeError(f"max_rows must be a number of rows or 'auto', got {max_rows!r}")
    return CheckConfig(
        train=train,
        test=test,
        epsilon=epsilon,
        checkers=_checkers(options["checkers"]),
        scaling=options["scaling"],
        seed=seed,
        jobs=jobs,
        memory_limit=memory_limit,
        zero_based=options.get("zero_based", False),
        time_limit=time_limit,
        exact=options["exact"],
        explain=_flag(options["explain"], "explain"),
        max_rows=max_rows,
        metric=options["metric"],
    ).validated()


def _integer(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    return int(value)


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _path(value: Any, name: str) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path, got {type(value).__name__}")
    return str(os.fspath(value))


def _checkers(value: Iterable[str] | str) -> tuple[str, ...]:
    """``checkers``: a sequence of names, or one string as ``--checkers`` takes it."""
    if isinstance(value, str):
        return tuple(c.strip() for c in value.split(",") if c.strip())
    names = tuple(value)
    bad = [c for c in names if not isinstance(c, str)]
    if bad:
        raise TypeError(f"checkers must be names (strings), got {bad[0]!r}")
    return names


# --- quiet by default, interruptible ----------------------------------------------------------


@contextmanager
def _quiet(progress: Progress | None, verbose: bool) -> Iterator[Progress]:
    """The progress callback to pass down (the caller's, a stderr line a stage with ``verbose``, or
    none), which also stops the call once Ctrl-C has come."""
    if progress is not None and not callable(progress):
        raise TypeError("progress must be a function of one kcheck.Event")
    shown = progress or (_stage_lines() if verbose else no_progress)
    with _interruptible() as interrupted:
        # A C call a previous Ctrl-C left running ends first, so its draws never mix with ours.
        wait_for_left_calls()

        def report(event: Event) -> None:
            if interrupted.is_set():
                raise KeyboardInterrupt
            shown(event)

        yield report
        if interrupted.is_set():
            raise KeyboardInterrupt


def _stage_lines() -> Progress:
    last = [""]

    def say(event: Event) -> None:
        if event.stage != last[0]:
            last[0] = event.stage
            print(f"kcheck: {event.stage}", file=sys.stderr)

    return say


@contextmanager
def _interruptible() -> Iterator[threading.Event]:
    """Ctrl-C ends the call with KeyboardInterrupt even inside a LIBSVM callback (which swallows
    it): the flag stays set and the next progress report, or the end, raises it. C calls run off the
    main thread meanwhile (c_runtime.interruptible). A caller's own handler, or a non-main thread,
    is left alone."""
    flag = threading.Event()
    ours = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )

    def on_sigint(signum: int, frame: Any) -> None:
        flag.set()
        raise KeyboardInterrupt

    hook = sys.unraisablehook

    def unraisable(args: Any) -> None:
        # The swallowed KeyboardInterrupt is raised again; its traceback is not news.
        if not (flag.is_set() and isinstance(args.exc_value, KeyboardInterrupt)):
            hook(args)

    if ours:
        signal.signal(signal.SIGINT, on_sigint)
        sys.unraisablehook = unraisable
    try:
        yield flag
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            sys.unraisablehook = hook
