"""When a saved line may be reused (``--resume``): its key, and every field read typed."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
from typing import Any

from kcheck import __version__
from kcheck.batch.discovery import STDIN, DataSet
from kcheck.config import CheckConfig
from kcheck.errors import KcheckError
from kcheck.io.data import content_sha256
from kcheck.io.ownformat import ok_line_problem

#: CheckConfig fields that change only a line's timing: files (hashes stand in), CPUs, outputs.
NOT_KEYED = frozenset({"train", "test", "jobs", "model_out", "model_kind", "model_probability"})


#: Fields keyed only when not these defaults, so lines saved before the option keep their keys.
KEYED_WHEN_SET: dict[str, Any] = {"max_rows": None, "metric": "accuracy"}


def keyed_options(config: CheckConfig) -> dict[str, Any]:
    """The options that can change a check's JSON, by CheckConfig field name."""
    return {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if f.name not in NOT_KEYED
        and not (f.name in KEYED_WHEN_SET and getattr(config, f.name) == KEYED_WHEN_SET[f.name])
    }


def resume_key(config: CheckConfig, data_sha256: str, test_sha256: str | None) -> str:
    """A saved line's reuse key: data and test content, JSON-changing options, kcheck version."""
    material = {
        "kcheck_version": __version__,
        "data_sha256": data_sha256,
        "test_sha256": test_sha256,
        "options": keyed_options(config),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def with_key(line: dict[str, Any], template: CheckConfig) -> dict[str, Any]:
    """An ok line with its ``options`` and ``resume_key``; other lines unchanged."""
    if line.get("status") != "ok":
        return line
    data_sha = (line.get("data") or {}).get("sha256")
    test_sha = (line.get("test") or {}).get("sha256")
    if not data_sha:
        return line
    return {
        **line,
        "options": keyed_options(template),
        "resume_key": resume_key(template, data_sha, test_sha),
    }


def _rereadable(path: str) -> bool:
    """Standard input and pipes cannot be hashed without consuming them: never reused."""
    if path == STDIN:
        return False
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def current_key(ds: DataSet, template: CheckConfig) -> str | None:
    """The key a line for ``ds`` would have now; None if it cannot be known before checking."""
    files = [ds.train] + ([ds.test] if ds.test is not None else [])
    if not all(_rereadable(f) for f in files):
        return None
    try:
        data_sha = content_sha256(ds.train)
        test_sha = None if ds.test is None else content_sha256(ds.test)
    except KcheckError:
        return None  # unreadable now: checking it records the error
    return resume_key(template, data_sha, test_sha)


def reusable(line: dict[str, Any], ds: DataSet, template: CheckConfig) -> bool:
    """Whether a saved ok line stands for ``ds`` now: fields typed
    (:func:`kcheck.io.ownformat.ok_line_problem`; else checked again) and the same key."""
    key = line.get("resume_key")
    if not isinstance(key, str) or ok_line_problem(line) is not None:
        return False
    return key == current_key(ds, template)
