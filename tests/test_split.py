import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcheck.split import stratified_split, stratified_subsample


def test_split_is_three_to_one_per_class():
    y = np.array([1.0] * 400 + [-1.0] * 120 + [7.0] * 8)
    tr, va = stratified_split(y, seed=3)
    for c, n in ((1.0, 400), (-1.0, 120), (7.0, 8)):
        assert np.sum(y[va] == c) == round(n * 0.25)
        assert np.sum(y[tr] == c) == n - round(n * 0.25)


def test_split_partitions_rows_and_is_sorted():
    y = np.repeat([0.0, 1.0, 2.0], [50, 31, 9])
    tr, va = stratified_split(y, seed=0)
    assert np.array_equal(np.sort(np.concatenate([tr, va])), np.arange(y.size))
    assert np.all(np.diff(tr) > 0) and np.all(np.diff(va) > 0)


def test_split_is_seeded():
    y = np.tile([0.0, 1.0], 100)
    a = stratified_split(y, seed=5)
    b = stratified_split(y, seed=5)
    c = stratified_split(y, seed=6)
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
    assert not np.array_equal(a[1], c[1])


def test_singleton_class_stays_in_training():
    y = np.array([1.0] * 20 + [2.0])
    tr, va = stratified_split(y, seed=0)
    assert 20 in tr and 20 not in va


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=200), st.integers(0, 2**31))
def test_split_properties(labels, seed):
    y = np.array(labels, dtype=float)
    tr, va = stratified_split(y, seed=seed)
    assert np.intersect1d(tr, va).size == 0
    assert tr.size + va.size == y.size
    # Every class with at least two rows keeps at least one row in T.
    for c in np.unique(y):
        assert np.sum(y[tr] == c) >= 1


def test_subsample_keeps_every_class():
    y = np.array([0.0] * 990 + [1.0] * 10)
    idx = stratified_subsample(y, 100, seed=0)
    assert abs(idx.size - 100) <= 2
    assert set(np.unique(y[idx])) == {0.0, 1.0}


def test_bad_fraction():
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError):
            stratified_split(np.zeros(4), validation_fraction=bad)


def test_a_fraction_of_one_still_keeps_a_row_of_every_class_in_t():
    """The second fold asks for a V2 the size of V, which T can equal (two rows a class)."""
    y = np.repeat([0.0, 1.0, 2.0, 3.0], 2)
    train, val = stratified_split(y, validation_fraction=1.0)
    assert sorted(y[train]) == sorted(y[val]) == [0.0, 1.0, 2.0, 3.0]
