"""Seeded, stratified 3:1 split of the training rows into T (tuning/training) and V (scoring)."""

from __future__ import annotations

import numpy as np

from kcheck import seeds


def stratified_split(
    y: np.ndarray,
    *,
    seed: int = 0,
    stream: int | None = None,
    validation_fraction: float = 0.25,
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted index arrays (train, validation), each class split about 3:1 (``round(count *
    fraction)`` to V); a one-row class stays in T. Sorted, so slicing keeps the file's row order
    (LIBLINEAR depends on it). Drawn from ``stream`` of the seed (:func:`kcheck.seeds.rng`)."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError("y must be one-dimensional")
    if not 0.0 < validation_fraction <= 1.0:
        # 1 is allowed: every class keeps a row in T (a second fold of two-row classes asks for it).
        raise ValueError("validation_fraction must lie in (0, 1]")
    rng = seeds.rng(seed, stream)
    classes, inverse = np.unique(y, return_inverse=True)
    val_parts = []
    for c in range(classes.size):
        members = np.flatnonzero(inverse == c)
        n_val = int(np.floor(members.size * validation_fraction + 0.5))
        if members.size < 2:
            n_val = 0
        n_val = min(n_val, members.size - 1)
        if n_val > 0:
            val_parts.append(rng.choice(members, size=n_val, replace=False))
    val = np.sort(np.concatenate(val_parts)) if val_parts else np.empty(0, dtype=np.intp)
    mask = np.ones(y.size, dtype=bool)
    mask[val] = False
    return np.flatnonzero(mask), val


def stratified_subsample(y: np.ndarray, n: int, *, seed: int) -> np.ndarray:
    """Sorted indices of about ``n`` rows, each class kept in proportion (at least one row)."""
    y = np.asarray(y)
    if n >= y.size:
        return np.arange(y.size)
    rng = seeds.rng(seed)
    classes, inverse = np.unique(y, return_inverse=True)
    parts = []
    frac = n / y.size
    for c in range(classes.size):
        members = np.flatnonzero(inverse == c)
        k = max(1, int(round(members.size * frac)))
        parts.append(rng.choice(members, size=min(k, members.size), replace=False))
    return np.sort(np.concatenate(parts))


def stratified_folds(y: np.ndarray, folds: int, seed: int, repeat: int) -> np.ndarray:
    """Fold number (0..folds-1) of every row: shuffled within class, classes end to end, dealt
    round-robin, so sizes and class counts differ by at most one. Repeat r: stream r."""
    rng = seeds.rng(seed, repeat)
    _, inverse = np.unique(np.asarray(y), return_inverse=True)
    order = np.concatenate(
        [rng.permutation(np.flatnonzero(inverse == c)) for c in range(int(inverse.max()) + 1)]
    )
    fold = np.empty(order.size, dtype=np.intp)
    fold[order] = np.arange(order.size) % folds
    return fold
