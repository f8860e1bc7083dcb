"""scripts/same_counts.py compares rows the cost model must predict the same: every variant it
times keeps T's counts (rows, width, stored values, class shares), or its comparison says
nothing."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT, load_script


def test_every_variant_keeps_the_counts() -> None:
    sc = load_script("same_counts")
    rng = np.random.default_rng(0)
    T = sc.max_abs_scaled(rng.uniform(1.0, 5.0, (120, 7)))
    y = np.where(rng.uniform(size=120) < 0.3, 1.0, -1.0)
    shares = {c: int((y == c).sum()) for c in np.unique(y)}
    labels_seen = []
    for label, make in sc.variants(T, y, seed=0):
        rows, labels = make()
        labels_seen.append(label)
        assert rows.shape == T.shape, label
        assert np.count_nonzero(rows) == T.size, label
        assert {c: int((labels == c).sum()) for c in np.unique(labels)} == shares, label
        # Scaled as kcheck scales: every feature's max |x| is 1.
        np.testing.assert_allclose(np.abs(rows).max(axis=0), 1.0, err_msg=label)
    assert len(labels_seen) == len(set(labels_seen)) == 13


def test_sparse_data_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Centred or Gaussian rows store every value: on sparse T they would not share its counts."""
    sc = load_script("same_counts")
    assert sc.main([str(ROOT / "datasets" / "german.numer")]) == 2
    assert "german.numer" in capsys.readouterr().err
