"""The JSON line of one data set: its check's JSON, or why it has none (an error, a skip)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from kcheck import __version__
from kcheck.batch.discovery import DataSet
from kcheck.config import CheckConfig
from kcheck.defaults import Progress
from kcheck.errors import KcheckError, recorded_warnings
from kcheck.pipeline import run
from kcheck.verdict import SCHEMA_VERSION, json_number


def error_message(exc: BaseException) -> str:
    """One line: a KcheckError's own message; anything else with its exception type."""
    if isinstance(exc, KcheckError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return " ".join(text.split())


def _unchecked_line(
    name: str,
    status: str,
    config: CheckConfig,
    train: str,
    test: str | None,
    seconds: float,
    **fields: Any,
) -> dict[str, Any]:
    """A line without a verdict (error or skip) with an ok line's leading keys (for jq recipes)."""
    return {
        "name": name,
        "status": status,
        **fields,
        "schema_version": SCHEMA_VERSION,
        "kcheck_version": __version__,
        "verdict": None,
        "margin": None,
        "epsilon": config.epsilon,
        "seed": config.seed,
        "data": {"path": train},
        "test": None if test is None else {"path": test},
        "seconds": json_number(seconds),
    }


def error_line(ds: DataSet, config: CheckConfig, message: str, seconds: float) -> dict[str, Any]:
    """The line of a data set that could not be checked."""
    return _unchecked_line(ds.name, "error", config, ds.train, ds.test, seconds, error=message)


def skip_line(path: str, reason: str, config: CheckConfig, *, strict: bool) -> dict[str, Any]:
    """A left-out file's line: ``status: skipped`` with the reason, or under ``strict`` an error."""
    return _unchecked_line(
        path,
        "error" if strict else "skipped",
        config,
        path,
        None,
        0.0,
        error=f"not checked: {reason} (--strict)" if strict else None,
        reason=reason,
    )


def check_one(ds: DataSet, config: CheckConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Check one data set; any Exception becomes an error line; warnings go in ``warnings``."""
    config = dataclasses.replace(config, train=ds.train, test=ds.test)
    t0 = time.perf_counter()
    try:
        with recorded_warnings() as notes:
            verdict = run(config, progress).json
    except Exception as e:  # noqa: BLE001 - recorded on the line; the batch goes on
        return error_line(ds, config, error_message(e), time.perf_counter() - t0)
    verdict["warnings"] = [*verdict.get("warnings", []), *notes]
    return {"name": ds.name, "status": "ok", "error": None, **verdict}
