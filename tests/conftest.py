"""Shared fixtures: bundled data, a fixed-seed generator, and the real LIBSVM tools."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
DATASETS = ROOT / "datasets"


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture
def datasets() -> Path:
    return DATASETS


def require_tool(name: str) -> str:
    """Path of a LIBSVM/LIBLINEAR binary; skip without it, but fail in CI (KCHECK_REQUIRE_TOOLS)."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("KCHECK_REQUIRE_TOOLS"):
            pytest.fail(f"{name} is required here (apt-get install libsvm-tools liblinear-tools)")
        pytest.skip(f"{name} not installed")
    return path
