"""The seed idiom: kcheck.seeds gives exactly the draws the old per-module expressions gave
(every golden depends on it), and different purposes get different streams."""

from __future__ import annotations

import ctypes

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kcheck import seeds
from kcheck.bindings.c_runtime import seed_c_rand
from kcheck.split import stratified_folds, stratified_split

#: The user's seed: 0 to 2**32 - 1 (defaults.MAX_SEED).
user_seeds = st.integers(0, 2**32 - 1)
#: Anything an internal caller could pass, negative and wider than 32 bits included.
any_seeds = st.integers(-(2**40), 2**70)
streams = st.integers(0, 10_000)


def _state(g: np.random.Generator) -> dict[str, object]:
    return g.bit_generator.state


def _same(a: np.random.Generator, b: np.random.Generator) -> bool:
    return _state(a) == _state(b)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**70))
def test_the_seeds_own_stream_is_default_rng(seed: int) -> None:
    """kmeans, the T/V split, subsamples and the reservoir: ``np.random.default_rng(seed)``."""
    assert _same(seeds.rng(seed), np.random.default_rng(seed))


@settings(max_examples=200, deadline=None)
@given(any_seeds, streams)
def test_a_stream_is_the_old_seed_sequence(seed: int, stream: int) -> None:
    """rff, the second fold and CV folds: ``SeedSequence([seed & 0xFFFFFFFF, stream])``."""
    old = np.random.default_rng(np.random.SeedSequence([seed & 0xFFFFFFFF, stream]))
    assert _same(seeds.rng(seed, stream), old)


def test_the_named_streams_keep_their_numbers() -> None:
    """rff drew its sample from stream 1 and its map from 2; the second split from stream 1."""
    assert (seeds.RFF_SAMPLE, seeds.RFF_MAP, seeds.SECOND_SPLIT) == (1, 2, 1)


@settings(max_examples=200, deadline=None)
@given(any_seeds, st.integers(0, 100_000))
def test_c_seeds_are_the_old_expressions(seed: int, cluster: int) -> None:
    """``srand(seed & 0xFFFFFFFF)``, and MultiLinear's per-cluster seed."""
    assert seeds.c_seed(seed) == seed & 0xFFFFFFFF
    assert seeds.c_seed(seed, cluster) == (seed * 1_000_003 + cluster * 7919 + 1) & 0x7FFFFFFF


def test_seed_c_rand_seeds_rand_as_srand_did() -> None:
    libc = ctypes.CDLL(None)
    libc.srand.argtypes = [ctypes.c_uint]
    for seed in (0, 1, 2**31, 2**32 - 1, 2**32 + 5):
        seed_c_rand(seed)
        ours = [libc.rand() for _ in range(3)]
        libc.srand(ctypes.c_uint(seed & 0xFFFFFFFF))
        assert ours == [libc.rand() for _ in range(3)]


Y = np.repeat([0.0, 1.0, 2.0], [40, 25, 7])


def _old_validation_rows(rng: np.random.Generator) -> np.ndarray:
    """stratified_split's V as the old code drew it from the generator it was given."""
    _, inverse = np.unique(Y, return_inverse=True)
    parts = []
    for c in range(3):
        members = np.flatnonzero(inverse == c)
        n_val = min(int(np.floor(members.size * 0.25 + 0.5)), members.size - 1)
        parts.append(rng.choice(members, size=n_val, replace=False))
    return np.sort(np.concatenate(parts))


@settings(max_examples=100, deadline=None)
@given(user_seeds, st.integers(0, 5))
def test_callers_draw_what_they_drew(seed: int, repeat: int) -> None:
    """CV folds of repeat r, the T/V split and the second fold's split, against the old
    code's generators."""
    old = np.random.default_rng(np.random.SeedSequence([seed & 0xFFFFFFFF, repeat]))
    _, inverse = np.unique(Y, return_inverse=True)
    order = np.concatenate([old.permutation(np.flatnonzero(inverse == c)) for c in range(3)])
    fold = np.empty(order.size, dtype=np.intp)
    fold[order] = np.arange(order.size) % 5
    assert np.array_equal(stratified_folds(Y, 5, seed, repeat), fold)
    first = _old_validation_rows(np.random.default_rng(seed))
    assert np.array_equal(stratified_split(Y, seed=seed)[1], first)
    second = _old_validation_rows(
        np.random.default_rng(np.random.SeedSequence([seed & 0xFFFFFFFF, 1]))
    )
    assert np.array_equal(stratified_split(Y, seed=seed, stream=seeds.SECOND_SPLIT)[1], second)


@settings(max_examples=200, deadline=None)
@given(user_seeds, st.integers(1, 10_000), st.integers(1, 10_000))
def test_different_purposes_draw_different_streams(seed: int, a: int, b: int) -> None:
    draws = {
        None: seeds.rng(seed).integers(0, 2**62, 4).tolist(),
        a: seeds.rng(seed, a).integers(0, 2**62, 4).tolist(),
        b: seeds.rng(seed, b).integers(0, 2**62, 4).tolist(),
    }
    assert draws[None] != draws[a] and draws[None] != draws[b]
    assert (a == b) == (draws[a] == draws[b])
    assert seeds.rng(seed, seeds.RFF_SAMPLE).random() != seeds.rng(seed, seeds.RFF_MAP).random()


@settings(max_examples=200, deadline=None)
@given(user_seeds, st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1))
def test_different_tasks_get_different_c_seeds(seed: int, a: int, b: int) -> None:
    """7919 is odd, so no two of 2**31 tasks share a seed."""
    assert (a == b) == (seeds.c_seed(seed, a) == seeds.c_seed(seed, b))


@settings(max_examples=100, deadline=None)
@given(user_seeds)
def test_the_seeds_own_stream_is_stream_zero(seed: int) -> None:
    """Within the seed range ``default_rng(s)`` and ``SeedSequence([s, 0])`` coincide: folds of
    repeat 0 draw what the T/V split draws (on other rows, so nothing depends on it)."""
    assert _same(seeds.rng(seed), seeds.rng(seed, 0))
