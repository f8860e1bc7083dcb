"""scripts/sd_spread.py: the spread of the scaled features' SDs it sets beside the baseline's
cost, on dense and sparse input, and its rank correlation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import DATASETS, load_script


@pytest.fixture(scope="module")
def script() -> Any:
    return load_script("sd_spread")


def test_the_spread_is_the_scaled_sds_90th_over_10th_percentile(
    script: Any, rng: np.random.Generator
) -> None:
    # Eleven features: each a scaled +-1 column times a factor, so its SD after max |x|
    # scaling is known; the factors do not matter (scaling takes them out), the zeros do.
    n = 400
    signs = np.where(rng.uniform(size=(n, 11)) < 0.5, -1.0, 1.0)
    keep = np.arange(n)[:, None] < (np.arange(1, 12) * n // 11)[None, :]  # 1/11 .. 11/11 stored
    X = signs * keep * rng.uniform(0.5, 50.0, size=11)
    sd = (signs * keep).std(axis=0)
    q10, q90 = np.quantile(sd, [0.1, 0.9])
    assert script.sd_spread(X) == pytest.approx(q90 / q10)
    assert script.sd_spread(sp.csr_matrix(X)) == pytest.approx(q90 / q10)
    # A constant or empty feature is left out; under two varying features it is 1.
    with_constant = np.hstack([X, np.ones((n, 1)), np.zeros((n, 1))])
    assert script.sd_spread(with_constant) == pytest.approx(q90 / q10)
    assert script.sd_spread(np.ones((n, 3))) == 1.0


def test_spearman_ranks_ties_and_order(script: Any) -> None:
    assert script.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert script.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert list(script.ranks([5.0, 1.0, 5.0])) == [1.5, 0.0, 1.5]
    assert np.isnan(script.spearman([1, 2], [2, 1]))


def test_the_report_sets_each_case_beside_its_baselines_ratio(
    script: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(DATASETS / "heart_scale", corpus / "heart_scale")
    step = {"name": "linear", "runs": True, "rows": 202, "done": None}
    runs = tmp_path / "runs.json"
    runs.write_text(
        json.dumps(
            {
                "heart_scale": {
                    "probe": 0.0182,
                    "steps": [{**step, "predicted_seconds": 1.0, "cpu_seconds": 0.6}],
                }
            }
        )
    )
    out = tmp_path / "out.md"
    assert script.main([str(corpus), str(runs), "--names", "here", "-o", str(out)]) == 0
    text = out.read_text()
    # heart_scale's 13 features vary: its spread is theirs, and its ratio 0.6 at pace 1.
    assert "| heart_scale | 0.96 | 2.9 | 0.60* |" in text  # 202 rows of 270 are its T
    assert "baseline cpu / predicted, here" in text
    # One name for two runs files is refused, before any reading.
    assert script.main([str(corpus), str(runs), str(runs), "--names", "one"]) == 2
    assert "--names" in capsys.readouterr().err
