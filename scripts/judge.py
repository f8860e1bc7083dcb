#!/usr/bin/env python3
"""A judged corpus: data sets with independent reference answers, and kcheck scored against them.

Usage:
    python scripts/judge.py make OUTDIR --shared ../shared/datasets
    python scripts/judge.py reference OUTDIR -o scripts/results/judge_reference.json
        [--only NAME ...] [--budget-minutes 75]
    python scripts/judge.py judge OUTDIR --reference scripts/results/judge_reference.json
        --seeds 0 [1 2 ...] -o scripts/results/judge.md [--kcheck PATH]

``make`` writes every case as LIBSVM files into OUTDIR: ``NAME`` (the training file that kcheck
checks) and, for cases of 3,000 rows or more, ``NAME.t`` (held-out rows), plus ``cases.json``.
Everything is seeded, so the files are the same on every run. The cases:

* the shared paper sets (a9a, cod-rna, dna.scale, fourclass, german.numer, heart_scale, ijcnn1,
  letter.scale, madelon, poker as class 0 vs rest, sector.scale, svmguide1), their training
  files; the ``.t`` file is the held-out set (at most 20,000 rows of it, stratified and seeded),
  and poker, which has none, holds out a stratified quarter of its rows;
* scikit-learn's bundled digits, breast cancer, wine and iris, in binary and multiclass tasks;
* generated sets: noisy linear controls (dense, sparse, binary, multiclass, and a wide sparse
  text-like set of 8,400 features), xor, parity, nested spheres, checkerboards, sinusoidal and
  wavy boundaries (one noise-free with 4 periods, where the RBF needs a large C), linear rules
  plus a small nonlinear term, label = sign of a sparse random quadratic form (pairwise
  interactions) in 20-80 dense, binary or mixed features, and an image-like 10-class set
  (mixtures of Gaussian clusters in 16 latent dims, mapped to 720 features) where the RBF gains
  a few points, from 100 to 100,000 rows.

``reference`` computes the real comparison for each case, independently of kcheck's code
(scikit-learn's ``SVC`` is LIBSVM, ``LinearSVC`` is LIBLINEAR): a tuned RBF SVM against the tuned
linear model (LIBLINEAR ``-s 2 -B 1``: L2-loss, L2-regularised, with a regularised bias), both
after max-|x| scaling fitted on the training rows.

* Linear C: log2 C in -5, -3, ..., 15, then the two odd neighbours of the best, by 5-fold
  stratified CV.
* RBF (C, gamma): gamma relative to g0 = 1 / median squared distance between rows; a coarse grid
  log2 C in -3, 0, ..., 15 by log2(gamma / g0) in -6, -3, 0, 3, 6 (35 points), then the 3 x 3
  neighbourhood of the best at half that step (8 more points), by 3-fold stratified CV, on
  precomputed kernel matrices (the same LIBSVM solver).
* Under 3,000 rows: stratified 5-fold CV on all rows, repeated (3 times up to 1,000 rows, twice
  above), with both models tuned inside each training fold (nested; the RBF on a stratified
  subsample of at most 1,000 of the fold's rows, the linear model on all of them). Each row's
  difference correct(RBF) - correct(linear) is averaged over the repeats; the gap is the mean
  over rows and its 95% interval is normal over rows.
* 3,000 rows or more: tuning on a stratified subsample of at most 5,000 training rows (linear:
  at most 20,000), then the linear model trained on the whole training file and the RBF model on
  at most 20,000 of its rows (stratified; 10,000 with over 1,000 features, where LIBSVM's sparse
  kernel is slow), both scored on the held-out file; paired 95% interval over the held-out
  points.
* label: ``kernel`` when the interval's low end is at least epsilon = 0.02, ``linear`` when its
  high end is below it, otherwise ``unclear`` (left out of the score).

Results are cached per case in the JSON (a re-run skips the cases done) with their seconds.

``judge`` runs the installed ``kcheck check FILE --json --seed S`` as a subprocess on every
case's training file and writes a markdown report: the reference next to kcheck's verdict, margin,
deciding checker and gaps, and the score on the clear cases.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import json
import lzma
import math
import os
import platform
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

EPSILON = 0.02
SEED = 20160505
CV_LIMIT = 3000  # rows: below, nested repeated CV; at or above, a held-out test set
TUNE_ROWS = 5000  # RBF tuning subsample for held-out cases
NESTED_TUNE_ROWS = 1000  # RBF tuning subsample of each outer training fold in nested CV
LINEAR_TUNE_ROWS = 20000  # linear tuning subsample for held-out cases
RBF_TRAIN_ROWS = 20000  # RBF final training rows for held-out cases
TEST_ROWS = 20000  # at most this many held-out rows are written and scored
PRECOMPUTED_ROWS = 10000  # up to this many rows, the RBF kernel matrix is computed once
WIDE = 1000  # features: above, LIBSVM's sparse kernel is slow, so the RBF trains on at most
WIDE_RBF_ROWS = 10000  # this many rows, with a precomputed kernel
LINEAR_LOG2C = list(range(-5, 16, 2))
RBF_LOG2C = [-3, 0, 3, 6, 9, 12, 15]
RBF_LOG2G = [-6, -3, 0, 3, 6]  # relative to g0 = 1 / median squared distance
REFINE = 1.5
#: LIBSVM iteration caps (scikit-learn's max_iter): tuning and nested CV fits stop after
#: TUNE_MAX_ITER iterations, which only bites in the slow corner (large C, small gamma, noisy
#: labels: 25 s instead of 3 s for one fit on 870 rows of parity3); final held-out fits after
#: FINAL_MAX_ITER.
TUNE_MAX_ITER = 100_000
FINAL_MAX_ITER = 1_000_000

Arrays = tuple[Any, np.ndarray]


# ---------------------------------------------------------------------------------------------
# Generated cases


def _balanced_sign(rng: np.random.Generator, f: np.ndarray, noise: float) -> np.ndarray:
    """sign(f - median(f) + noise * sd(f) * N(0, 1)), so the classes are about even."""
    f = f - np.median(f)
    g = f + noise * np.std(f) * rng.standard_normal(len(f))
    return np.where(g > 0, 1, -1)


def _flip(rng: np.random.Generator, y: np.ndarray, rate: float) -> np.ndarray:
    """Replace a fraction of the labels by random ones (label noise)."""
    y = y.copy()
    classes = np.unique(y)
    hit = rng.random(len(y)) < rate
    y[hit] = rng.choice(classes, hit.sum())
    return y


def linear_dense(d: int, noise: float) -> Callable[[np.random.Generator, int], Arrays]:
    def make(rng: np.random.Generator, n: int) -> Arrays:
        w = rng.standard_normal(d)
        X = rng.standard_normal((n, d)) + rng.uniform(-1, 1, d)
        return X, _balanced_sign(rng, X @ w, noise)

    return make


def linear_sparse(
    d: int, per_row: int, noise: float
) -> Callable[[np.random.Generator, int], Arrays]:
    """Text-like rows: about per_row nonzero counts among d features, Zipf-like popularity."""

    def make(rng: np.random.Generator, n: int) -> Arrays:
        pop = 1.0 / np.arange(1, d + 1) ** 0.8
        pop /= pop.sum()
        k = rng.poisson(per_row, n) + 1
        rows = np.repeat(np.arange(n), k)
        cols = rng.choice(d, k.sum(), p=pop)
        vals = rng.exponential(1.0, k.sum()) + 1.0
        X = sp.csr_matrix((vals, (rows, cols)), shape=(n, d))
        X.sum_duplicates()
        X.data = np.log1p(X.data)
        w = rng.standard_normal(d) * (rng.random(d) < 0.3)
        return X, _balanced_sign(rng, X @ w, noise)

    return make


def linear_binary(d: int, noise: float) -> Callable[[np.random.Generator, int], Arrays]:
    def make(rng: np.random.Generator, n: int) -> Arrays:
        X = (rng.random((n, d)) < rng.uniform(0.1, 0.6, d)).astype(float)
        w = rng.standard_normal(d)
        return X, _balanced_sign(rng, X @ w, noise)

    return make


def blobs(k: int, d: int, spread: float) -> Callable[[np.random.Generator, int], Arrays]:
    """k Gaussian classes with one shared covariance: the Bayes boundary is linear."""

    def make(rng: np.random.Generator, n: int) -> Arrays:
        means = spread * rng.standard_normal((k, d))
        A = rng.standard_normal((d, d)) / math.sqrt(d) + np.eye(d)
        y = rng.integers(0, k, n)
        X = means[y] + rng.standard_normal((n, d)) @ A
        return X, y + 1

    return make


def mixture(
    k: int, d: int, latent: int, per_class: int, spread: float, noise: float
) -> Callable[[np.random.Generator, int], Arrays]:
    """Image-like classes: in a latent space of ``latent`` dims, each of k classes is a mixture
    of ``per_class`` unit Gaussian clusters (centres spread * N(0, I)), so the classes are not
    linearly separable but locally simple; rows are mapped to d features by a random linear map,
    tanh, plus noise * N(0, 1) per feature, rounded to 3 decimals (like quantised pixels; it
    also halves the file and hides the last-bit differences of BLAS threading)."""

    def make(rng: np.random.Generator, n: int) -> Arrays:
        centres = spread * rng.standard_normal((k, per_class, latent))
        y = rng.integers(0, k, n)
        Z = centres[y, rng.integers(0, per_class, n)] + rng.standard_normal((n, latent))
        W = rng.standard_normal((latent, d)) / math.sqrt(latent)
        H = np.tanh(Z @ W + 0.5 * rng.standard_normal(d))
        return np.round(H + noise * rng.standard_normal((n, d)), 3), y + 1

    return make


def xor(d: int, flip: float) -> Callable[[np.random.Generator, int], Arrays]:
    def make(rng: np.random.Generator, n: int) -> Arrays:
        X = rng.uniform(-1, 1, (n, d))
        return X, _flip(rng, np.where(X[:, 0] * X[:, 1] > 0, 1, -1), flip)

    return make


def parity(d: int, k: int, flip: float) -> Callable[[np.random.Generator, int], Arrays]:
    def make(rng: np.random.Generator, n: int) -> Arrays:
        X = rng.uniform(-1, 1, (n, d))
        return X, _flip(rng, np.where(np.prod(X[:, :k], axis=1) > 0, 1, -1), flip)

    return make


def spheres(d: int, noise: float) -> Callable[[np.random.Generator, int], Arrays]:
    def make(rng: np.random.Generator, n: int) -> Arrays:
        X = rng.standard_normal((n, d))
        return X, _balanced_sign(rng, np.einsum("ij,ij->i", X, X), noise)

    return make


def checkerboard(
    k: int, flip: float, extra: int = 0
) -> Callable[[np.random.Generator, int], Arrays]:
    def make(rng: np.random.Generator, n: int) -> Arrays:
        X = rng.uniform(0, 1, (n, 2 + extra))
        cell = np.floor(k * X[:, 0]) + np.floor(k * X[:, 1])
        return X, _flip(rng, np.where(cell % 2 == 0, 1, -1), flip)

    return make


def sinusoid(
    freq: float, amp: float, extra: int, flip: float
) -> Callable[[np.random.Generator, int], Arrays]:
    def make(rng: np.random.Generator, n: int) -> Arrays:
        X = rng.uniform(-1, 1, (n, 2 + extra))
        f = X[:, 1] - amp * np.sin(freq * math.pi * X[:, 0])
        return X, _flip(rng, np.where(f > 0, 1, -1), flip)

    return make


def rings(k: int, noise: float) -> Callable[[np.random.Generator, int], Arrays]:
    """k concentric rings in 2-D (multiclass), plus two noise features."""

    def make(rng: np.random.Generator, n: int) -> Arrays:
        y = rng.integers(0, k, n)
        r = 1.0 + y + noise * rng.standard_normal(n)
        t = rng.uniform(0, 2 * math.pi, n)
        X = np.column_stack([r * np.cos(t), r * np.sin(t), rng.standard_normal((n, 2))])
        return X, y + 1

    return make


def wavy(amp: float) -> Callable[[np.random.Generator, int], Arrays]:
    """A linear trend in three features plus waves in two more (5 uniform features)."""

    def make(rng: np.random.Generator, n: int) -> Arrays:
        X = rng.uniform(-1, 1, (n, 5))
        x1, x2, x3, x4, x5 = X.T
        f = x2 + 0.5 * x3 - 0.3 * x4 + amp * (np.sin(6.5 * x1) + np.cos(6.5 * x5))
        return X, _balanced_sign(rng, f, 0.0)

    return make


def _bench() -> Any:
    """scripts/bench.py, for its covtype-like generator only: the reference uses none of
    kcheck's code."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench

    return bench


def offsets_onehot(noise: float) -> Callable[[np.random.Generator, int], Arrays]:
    """The bench's covtype-like rule (:func:`bench.covtype_like`) made afresh with n rows: dense
    features on large offsets, one-hot groups, a sine and a product; the gain needs a large C."""

    def make(rng: np.random.Generator, n: int) -> Arrays:
        y, X = _bench().covtype_like(rng, n, noise)
        return X.toarray(), y.astype(int)

    return make


def covtype_like_sample() -> Callable[[np.random.Generator, int], Arrays]:
    """Rows drawn uniformly from ``scripts/bench.py``'s covtype-like set (581,012 rows, made
    with its own seed), as ``--max-rows`` would give them: there exact mode's search on a few
    hundred rows chose a small C and said linear where the RBF SVM on all rows gains 5 points."""

    def make(rng: np.random.Generator, n: int) -> Arrays:
        y, X = _bench().covtype_like(np.random.default_rng(0))
        take = np.sort(rng.choice(X.shape[0], size=n, replace=False))
        return X[take].toarray(), y[take].astype(int)

    return make


def linear_plus(
    d: int, amp: float, noise: float, kind: str
) -> Callable[[np.random.Generator, int], Arrays]:
    """A linear rule plus a small nonlinear term in the first two features."""

    def make(rng: np.random.Generator, n: int) -> Arrays:
        X = rng.standard_normal((n, d))
        w = rng.standard_normal(d)
        lin = X @ w / np.linalg.norm(w)
        if kind == "sin":
            extra = np.sin(2.5 * X[:, 0]) + np.sin(2.5 * X[:, 1])
        elif kind == "square":
            extra = X[:, 0] ** 2 - X[:, 1] ** 2
        else:
            extra = X[:, 0] * X[:, 1]
        return X, _balanced_sign(rng, lin + amp * extra, noise)

    return make


def pairwise(
    d: int,
    pairs: int,
    lin: float,
    noise: float,
    binary: float = 0.0,
    zero_one: bool = False,
    classes: int = 2,
) -> Callable[[np.random.Generator, int], Arrays]:
    """label = sign(sparse random quadratic form + lin * linear term + noise).

    ``binary`` is the fraction of features that are binary (+-1, or 0/1 with ``zero_one``), the
    rest standard normal. The quadratic form has ``pairs`` random off-diagonal terms x_i x_j.
    With ``classes`` > 2, the label is the argmax of one such noisy score per class.
    """

    def make(rng: np.random.Generator, n: int) -> Arrays:
        nb = int(round(binary * d))
        X = rng.standard_normal((n, d))
        if nb:
            B = rng.random((n, nb)) < 0.5
            X[:, :nb] = B if zero_one else np.where(B, 1.0, -1.0)
        Z = X - X.mean(axis=0)
        scores = []
        for _ in range(classes if classes > 2 else 1):
            i = rng.integers(0, d, pairs)
            j = (i + rng.integers(1, d, pairs)) % d
            a = rng.standard_normal(pairs)
            q = (Z[:, i] * Z[:, j]) @ a
            w = rng.standard_normal(d)
            s = q / np.std(q) + lin * (Z @ w) / np.std(Z @ w)
            scores.append(s + noise * rng.standard_normal(n))
        if classes > 2:
            return X, np.argmax(np.column_stack(scores), axis=1) + 1
        return X, _balanced_sign(rng, scores[0], 0.0)

    return make


def ordinal(
    d: int, pairs: int, lin: float, noise: float, classes: int, levels: int = 5
) -> Callable[[np.random.Generator, int], Arrays]:
    """:func:`pairwise`'s classes on ``d`` columns rounded to ordinal levels 1..``levels``, as a
    questionnaire's or a grader's columns are: the labels come from the values before rounding."""
    base = pairwise(d, pairs, lin, noise, classes=classes)

    def make(rng: np.random.Generator, n: int) -> Arrays:
        X, y = base(rng, n)
        return np.clip(np.round(X * (levels / 4) + (levels + 1) / 2), 1, levels), y

    return make


@dataclass
class Generated:
    name: str
    make: Callable[[np.random.Generator, int], Arrays]
    rows: int
    test_rows: int
    seed: int
    about: str


def _g(
    name: str,
    make: Callable[[np.random.Generator, int], Arrays],
    rows: int,
    seed: int,
    about: str,
    test_rows: int | None = None,
) -> Generated:
    if test_rows is None:
        test_rows = 0 if rows < CV_LIMIT else max(2000, min(10000, rows // 2))
    return Generated(name, make, rows, test_rows, seed, about)


GENERATED = [
    # pairwise interactions
    _g(
        "pair_d20_n1000",
        pairwise(20, 5, 0.0, 0.3),
        1000,
        31,
        "quadratic form, 5 pairs, 20 dense features",
    ),
    _g(
        "pair_d40_n1500",
        pairwise(40, 8, 1.0, 0.3),
        1500,
        32,
        "quadratic form (8 pairs) + linear term, 40 dense features",
    ),
    _g(
        "pair_d80_n2000",
        pairwise(80, 10, 1.5, 0.3),
        2000,
        33,
        "quadratic form (10 pairs) + stronger linear term, 80 dense features",
    ),
    _g(
        "pair_d30_n500",
        pairwise(30, 6, 2.0, 0.3),
        500,
        34,
        "quadratic form (6 pairs) + dominant linear term, 30 dense features",
    ),
    _g(
        "pair_bin30_n1000",
        pairwise(30, 6, 1.0, 0.3, binary=1.0),
        1000,
        35,
        "quadratic form (6 pairs) + linear term, 30 binary (+-1) features",
    ),
    _g(
        "pair_bin60_n2000",
        pairwise(60, 10, 1.5, 0.3, binary=1.0, zero_one=True),
        2000,
        36,
        "quadratic form (10 pairs) + linear term, 60 binary (0/1) features",
    ),
    _g(
        "pair_mix50_n800",
        pairwise(50, 8, 1.0, 0.3, binary=0.5),
        800,
        37,
        "quadratic form (8 pairs) + linear term, 25 binary + 25 dense features",
    ),
    _g(
        "pair_d25_n2000",
        pairwise(25, 4, 3.0, 0.3),
        2000,
        38,
        "quadratic form (4 pairs) under a dominant linear term, 25 dense features",
    ),
    _g(
        "pair_multi3_d30_n1500",
        pairwise(30, 6, 1.0, 0.3, classes=3),
        1500,
        39,
        "3 classes: argmax of three quadratic forms + linear terms, 30 dense features",
    ),
    _g(
        "pair_d40_n5000",
        pairwise(40, 8, 1.0, 0.3),
        5000,
        40,
        "quadratic form (8 pairs) + linear term, 40 dense features, 5,000 rows",
    ),
    # linear rule plus a small nonlinear term
    _g(
        "linsin_d10_n2000",
        linear_plus(10, 0.25, 0.2, "sin"),
        2000,
        21,
        "linear rule + small sine term",
    ),
    _g(
        "linsq_d10_n1500",
        linear_plus(10, 0.2, 0.2, "square"),
        1500,
        22,
        "linear rule + small x1^2 - x2^2 term",
    ),
    _g(
        "linprod_d10_n800",
        linear_plus(10, 0.4, 0.2, "product"),
        800,
        23,
        "linear rule + small x1 x2 term",
    ),
    _g(
        "linsin_d10_n10000",
        linear_plus(10, 0.5, 0.2, "sin"),
        10000,
        24,
        "linear rule + small sine term, 10,000 rows",
    ),
    # clearly nonlinear
    _g("xor_d10_n500", xor(10, 0.03), 500, 11, "xor of two features, 8 noise features"),
    _g("parity3_d10_n2000", parity(10, 3, 0.03), 2000, 12, "parity of three signs, 10 features"),
    _g("spheres_d10_n1000", spheres(10, 0.2), 1000, 13, "nested spheres, 10 features"),
    _g("checker4_n2000", checkerboard(4, 0.03), 2000, 14, "4x4 checkerboard, 2 features"),
    _g(
        "checker4_n50000",
        checkerboard(4, 0.05, extra=2),
        50000,
        15,
        "4x4 checkerboard, 2 features + 2 noise, 50,000 rows",
    ),
    _g(
        "sinus_n1500",
        sinusoid(2.0, 0.5, 3, 0.05),
        1500,
        16,
        "sinusoidal boundary, 3 noise features",
    ),
    _g("rings3_n900", rings(3, 0.25), 900, 17, "3 concentric rings (3 classes)"),
    _g("wavy5d_n12000", wavy(0.28), 12000, 18, "linear trend plus waves in 5 features"),
    _g(
        "sinus_n8000",
        sinusoid(2.0, 0.3, 3, 0.05),
        8000,
        27,
        "sinusoidal boundary of smaller amplitude, 3 noise features, 8,000 rows",
    ),
    _g(
        "offsets_onehot_n5000",
        offsets_onehot(0.3),
        5000,
        28,
        "covtype-like: 10 dense features on large offsets, one-hot groups, sine and product",
    ),
    _g(
        "covtype_like_n5000",
        covtype_like_sample(),
        5000,
        29,
        "5,000 rows drawn from the bench's covtype-like set (offset features, one-hot groups)",
    ),
    # linear controls
    _g("lin_d5_n100", linear_dense(5, 0.3), 100, 1, "linear control, 5 dense features"),
    _g("lin_d10_n500", linear_dense(10, 0.4), 500, 2, "linear control, 10 dense features"),
    _g("lin_d50_n2000", linear_dense(50, 0.3), 2000, 3, "linear control, 50 dense features"),
    _g("lin_bin40_n1000", linear_binary(40, 0.3), 1000, 4, "linear control, 40 binary features"),
    _g(
        "lin_sparse1k_n1500",
        linear_sparse(1000, 30, 0.2),
        1500,
        5,
        "linear control, sparse text-like, 1,000 features",
    ),
    _g(
        "lin_sparse20k_n20000",
        linear_sparse(20000, 60, 0.2),
        20000,
        6,
        "linear control, sparse text-like, 20,000 features",
    ),
    _g(
        "lin_d20_n100000",
        linear_dense(20, 0.25),
        100000,
        7,
        "linear control, 20 dense features, 100,000 rows",
    ),
    _g(
        "lin_d10_n8000",
        linear_dense(10, 0.4),
        8000,
        25,
        "linear control, 10 dense features, 8,000 rows",
    ),
    _g(
        "blobs3_d8_n9000",
        blobs(3, 8, 0.3),
        9000,
        26,
        "3 Gaussian classes with a shared covariance, 9,000 rows",
    ),
    _g(
        "blobs4_d10_n1200",
        blobs(4, 10, 0.7),
        1200,
        8,
        "4 Gaussian classes with a shared covariance (linear Bayes boundary)",
    ),
    _g(
        "text_d8400_n7800",
        linear_sparse(8400, 52, 0.3),
        7800,
        41,
        "linear control, sparse text-like: 8,400 features, about 50 stored values a row, "
        "labels from a noisy linear rule",
    ),
    # a gain of a few points that shows on many rows only (an RBF SVM on 2,000 rows shows <1)
    _g(
        "pair_bin68_n8400",
        pairwise(68, 30, 2.5, 0.3, 1.0, zero_one=True),
        8400,
        44,
        "30 weak pairwise terms under a linear term, 68 binary (0/1) features, 8,400 rows",
    ),
    _g(
        "ord12_c9_n7000",
        ordinal(12, 2, 4.5, 0.5, 9),
        7000,
        45,
        "9 classes: argmax of quadratic forms + linear terms, 12 ordinal columns (1..5)",
    ),
    # a gain of a few points in many dimensions, and a fine boundary that needs a large C
    _g(
        "mix10_d720_n10000",
        mixture(10, 720, 16, 3, 1.1, 0.3),
        10000,
        42,
        "image-like, 10 classes, each a mixture of 3 Gaussian clusters in 16 latent dims, "
        "mapped to 720 features by a random linear map, tanh and noise",
    ),
    _g(
        "sinus4_n4000",
        sinusoid(4.0, 0.4, 0, 0.0),
        4000,
        43,
        "noise-free sinusoidal boundary (4 periods, amplitude 0.4) in 2 features, no label "
        "flips: the RBF needs a large C",
    ),
]


# ---------------------------------------------------------------------------------------------
# Real cases

#: name -> (train file, test file or None, note, paper's answer)
SHARED = {
    "a9a": ("a9a", "a9a.t", "adult census, 123 binary features", "N"),
    "cod-rna": ("cod-rna.xz", "cod-rna.t.xz", "RNA, 8 features", "U"),
    "dna.scale": ("dna.scale", None, "3 classes, 180 binary features", ""),
    "fourclass": ("fourclass", None, "2-D", "Y"),
    "german.numer": ("german.numer", None, "credit, 24 features", "N"),
    "heart_scale": ("heart_scale", None, "LIBSVM sample, 13 features", ""),
    "ijcnn1": ("ijcnn1.bz2", "ijcnn1.t.bz2", "22 features", "Y"),
    "letter.scale": ("letter.scale.xz", "letter.scale.t.xz", "26 classes, 16 features", ""),
    "madelon": ("madelon.xz", None, "500 features, 20 useful", "Y"),
    "poker0": ("poker", None, "poker hand, class 0 vs rest, 10 features", "Y"),
    "sector.scale": (
        "sector.scale.bz2",
        "sector.t.scale.bz2",
        "105 classes, sparse text, 55,197 features",
        "",
    ),
    "svmguide1": ("svmguide1", "svmguide1.t", "4 features", "Y (bias-free linear)"),
}

SKLEARN = ["digits_oddeven", "digits_3v8", "digits10", "breast_cancer", "wine", "iris3", "iris_vv"]
SKLEARN_ABOUT = {
    "digits_oddeven": "8x8 digits, odd vs even",
    "digits_3v8": "8x8 digits, 3 vs 8",
    "digits10": "8x8 digits, 10 classes",
    "breast_cancer": "Wisconsin breast cancer",
    "wine": "wine, 3 classes",
    "iris3": "iris, 3 classes",
    "iris_vv": "iris, versicolor vs virginica",
}


def _open(path: Path):
    s = str(path)
    if s.endswith(".xz"):
        return lzma.open(s, "rb")
    if s.endswith(".bz2"):
        return bz2.open(s, "rb")
    if s.endswith(".gz"):
        return gzip.open(s, "rb")
    return open(s, "rb")


def load(path: Path, n_features: int | None = None) -> tuple[sp.csr_matrix, np.ndarray]:
    from sklearn.datasets import load_svmlight_file

    with _open(path) as f:
        X, y = load_svmlight_file(f, n_features=n_features)
    return sp.csr_matrix(X), y


def save(path: Path, X: Any, y: np.ndarray) -> None:
    from sklearn.datasets import dump_svmlight_file

    y = np.asarray(y)
    if np.all(y == np.round(y)):
        y = y.astype(np.int64)
    X = sp.csr_matrix(X)
    X.eliminate_zeros()
    tmp = path.with_name(path.name + ".tmp")
    dump_svmlight_file(X, y, str(tmp), zero_based=False)
    os.replace(tmp, path)


def stratified_take(y: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Sorted indices of a stratified, seeded subsample of k rows (all rows if k >= len(y))."""
    n = len(y)
    if k >= n:
        return np.arange(n)
    from sklearn.model_selection import train_test_split

    idx = np.arange(n)
    try:
        take, _ = train_test_split(idx, train_size=k, stratify=y, random_state=seed)
    except ValueError:  # a class with a single row
        take = np.random.default_rng(seed).choice(n, k, replace=False)
    return np.sort(take)


def make_cases(outdir: Path, shared: Path | None) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    manifest: list[dict[str, Any]] = []

    def record(
        name: str,
        source: str,
        about: str,
        X: Any,
        y: np.ndarray,
        Xt: Any = None,
        yt: np.ndarray | None = None,
        paper: str = "",
    ) -> None:
        save(outdir / name, X, y)
        if Xt is not None:
            save(outdir / f"{name}.t", Xt, yt)
        elif (outdir / f"{name}.t").exists():
            (outdir / f"{name}.t").unlink()
        manifest.append(
            {
                "name": name,
                "source": source,
                "about": about,
                "rows": int(X.shape[0]),
                "features": int(X.shape[1]),
                "classes": int(len(np.unique(y))),
                "test_rows": 0 if Xt is None else int(Xt.shape[0]),
                "paper": paper,
            }
        )
        print(
            f"{name}: {X.shape[0]} x {X.shape[1]}"
            + ("" if Xt is None else f", test {Xt.shape[0]}"),
            file=sys.stderr,
        )

    if shared is not None:
        for name, (train, test, about, paper) in SHARED.items():
            if not (shared / train).exists():
                print(f"{name}: {shared / train} not found, left out", file=sys.stderr)
                continue
            X, y = load(shared / train)
            Xt = yt = None
            if test is not None:
                Xt, yt = load(shared / test)
                nf = max(X.shape[1], Xt.shape[1])
                X.resize((X.shape[0], nf))
                Xt.resize((Xt.shape[0], nf))
                keep = stratified_take(yt, TEST_ROWS, SEED)
                Xt, yt = Xt[keep], yt[keep]
            if name == "poker0":
                y = np.where(y == 0, 1, -1)
                out = stratified_take(y, len(y) // 4, SEED)
                rest = np.setdiff1d(np.arange(len(y)), out)
                X, y, Xt, yt = X[rest], y[rest], X[out], y[out]
            if X.shape[0] < CV_LIMIT:
                Xt = yt = None
            record(name, "shared", about, X, y, Xt, yt, paper)

    from sklearn import datasets as skd

    digits = skd.load_digits()
    dX, dy = digits.data, digits.target
    record(
        "digits_oddeven",
        "sklearn",
        SKLEARN_ABOUT["digits_oddeven"],
        dX,
        np.where(dy % 2 == 1, 1, -1),
    )
    m = (dy == 3) | (dy == 8)
    record("digits_3v8", "sklearn", SKLEARN_ABOUT["digits_3v8"], dX[m], np.where(dy[m] == 3, 1, -1))
    record("digits10", "sklearn", SKLEARN_ABOUT["digits10"], dX, dy + 1)
    bc = skd.load_breast_cancer()
    record(
        "breast_cancer",
        "sklearn",
        SKLEARN_ABOUT["breast_cancer"],
        bc.data,
        np.where(bc.target == 1, 1, -1),
    )
    wine = skd.load_wine()
    record("wine", "sklearn", SKLEARN_ABOUT["wine"], wine.data, wine.target + 1)
    iris = skd.load_iris()
    record("iris3", "sklearn", SKLEARN_ABOUT["iris3"], iris.data, iris.target + 1)
    m = iris.target > 0
    record(
        "iris_vv",
        "sklearn",
        SKLEARN_ABOUT["iris_vv"],
        iris.data[m],
        np.where(iris.target[m] == 1, 1, -1),
    )

    for g in GENERATED:
        rng = np.random.default_rng(SEED + g.seed)
        X, y = g.make(rng, g.rows + g.test_rows)
        if g.test_rows:
            record(g.name, "generated", g.about, X[: g.rows], y[: g.rows], X[g.rows :], y[g.rows :])
        else:
            record(g.name, "generated", g.about, X, y)

    (outdir / "cases.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{len(manifest)} cases in {outdir}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Reference answers


def maxabs_fit(X: sp.csr_matrix) -> np.ndarray:
    m = np.asarray(abs(X).max(axis=0).todense()).ravel()
    m[m == 0] = 1.0
    return m


def maxabs_apply(X: sp.csr_matrix, m: np.ndarray) -> sp.csr_matrix:
    return sp.csr_matrix(X @ sp.diags(1.0 / m))


def sq_dist(A: sp.csr_matrix, B: sp.csr_matrix) -> np.ndarray:
    """Dense matrix of squared Euclidean distances between the rows of A and of B."""
    G = A @ B.T
    G = G.toarray() if sp.issparse(G) else np.asarray(G)
    a = np.asarray(A.multiply(A).sum(axis=1)).ravel()
    b = np.asarray(B.multiply(B).sum(axis=1)).ravel()
    G *= -2.0
    G += a[:, None]
    G += b[None, :]
    np.maximum(G, 0.0, out=G)
    return G


def rbf_kernel(A: sp.csr_matrix, B: sp.csr_matrix, gamma: float) -> np.ndarray:
    """exp(-gamma ||a - b||^2) for the rows of A and B, computed in place."""
    K = sq_dist(A, B)
    K *= -gamma
    return np.exp(K, out=K)


def median_gamma(D2: np.ndarray, seed: int) -> float:
    """g0 = 1 / median squared distance between distinct rows (a seeded sample of pairs)."""
    n = D2.shape[0]
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, 20000)
    j = rng.integers(0, n, 20000)
    d = D2[i[i != j], j[i != j]]
    d = d[d > 0]
    return 1.0 / float(np.median(d)) if len(d) else 1.0


def kfold(y: np.ndarray, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    from sklearn.model_selection import KFold, StratifiedKFold

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counts = np.unique(y, return_counts=True)[1]
        if counts.min() >= 2:
            splitter: Any = StratifiedKFold(k, shuffle=True, random_state=seed)
        else:
            splitter = KFold(k, shuffle=True, random_state=seed)
        return list(splitter.split(np.zeros(len(y)), y))


def linear_model(C: float, X: Any) -> Any:
    from sklearn.svm import LinearSVC

    # LIBLINEAR -s 2 (primal) with -B 1; the dual (-s 1) solves the same problem faster when
    # the features outnumber the rows.
    dual = X.shape[1] > X.shape[0]
    return LinearSVC(
        C=C,
        loss="squared_hinge",
        dual=dual,
        fit_intercept=True,
        intercept_scaling=1.0,
        tol=1e-4 if not dual else 1e-3,
        max_iter=5000,
    )


def tune_linear(X: sp.csr_matrix, y: np.ndarray, seed: int) -> tuple[float, float]:
    """(best log2 C, its 5-fold CV accuracy): the coarse grid, then the best's neighbours."""
    folds = kfold(y, 5, seed)
    scores: dict[float, float] = {}

    def score(lc: float) -> None:
        if lc in scores or lc < -5 or lc > 15:
            return
        right = 0
        for tr, va in folds:
            m = linear_model(2.0**lc, X[tr]).fit(X[tr], y[tr])
            right += int((m.predict(X[va]) == y[va]).sum())
        scores[lc] = right / len(y)

    for lc in LINEAR_LOG2C:
        score(lc)
    best = max(scores, key=lambda c: (scores[c], -c))
    score(best - 1)
    score(best + 1)
    best = max(scores, key=lambda c: (scores[c], -c))
    return best, scores[best]


def tune_rbf(
    D2: np.ndarray, y: np.ndarray, g0: float, folds: int, seed: int
) -> tuple[float, float, float]:
    """(log2 C, log2 gamma/g0, CV accuracy) of the best grid point; kernel precomputed."""
    from sklearn.svm import SVC

    splits = kfold(y, folds, seed)
    scores: dict[tuple[float, float], float] = {}

    def run(points: list[tuple[float, float]]) -> None:
        todo = [p for p in points if p not in scores and -5 <= p[0] <= 15]
        for lg in sorted({p[1] for p in todo}):
            K = np.exp(-(g0 * 2.0**lg) * D2)
            parts = [(K[np.ix_(tr, tr)], K[np.ix_(va, tr)], tr, va) for tr, va in splits]
            del K
            for lc in sorted(p[0] for p in todo if p[1] == lg):
                right = 0
                for Ktr, Kva, tr, va in parts:
                    m = SVC(
                        C=2.0**lc, kernel="precomputed", cache_size=500, max_iter=TUNE_MAX_ITER
                    ).fit(Ktr, y[tr])
                    right += int((m.predict(Kva) == y[va]).sum())
                scores[(lc, lg)] = right / len(y)

    def best() -> tuple[float, float]:
        return max(scores, key=lambda p: (scores[p], -p[0], -p[1]))

    run([(lc, lg) for lc in RBF_LOG2C for lg in RBF_LOG2G])
    bc, bg = best()
    run([(bc + dc, bg + dg) for dc in (-REFINE, 0, REFINE) for dg in (-REFINE, 0, REFINE)])
    bc, bg = best()
    return bc, bg, scores[(bc, bg)]


def paired(diff: np.ndarray) -> tuple[float, float, float]:
    """Mean of per-point differences and its 95% normal interval."""
    n = len(diff)
    mean = float(diff.mean())
    se = float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    return mean, mean - 1.96 * se, mean + 1.96 * se


def label_of(lo: float, hi: float) -> str:
    if lo >= EPSILON:
        return "kernel"
    if hi < EPSILON:
        return "linear"
    return "unclear"


def reference_cv(X: sp.csr_matrix, y: np.ndarray, log: Callable[[str], None]) -> dict[str, Any]:
    """Repeated stratified 5-fold CV on all rows, both models tuned inside each training fold."""
    from sklearn.svm import SVC

    n = len(y)
    repeats = 3 if n <= 1000 else 2
    D2 = sq_dist(X, X)
    g0 = median_gamma(D2, SEED)
    right_rbf = np.zeros((repeats, n))
    right_lin = np.zeros((repeats, n))
    params = []
    for r in range(repeats):
        for f, (tr, te) in enumerate(kfold(y, 5, SEED + 100 * r)):
            sub = tr[stratified_take(y[tr], NESTED_TUNE_ROWS, SEED + 100 * r + f)]
            lc, lg, _ = tune_rbf(D2[np.ix_(sub, sub)], y[sub], g0, 3, SEED + 100 * r + f)
            gamma = g0 * 2.0**lg
            m = SVC(C=2.0**lc, kernel="precomputed", cache_size=500, max_iter=TUNE_MAX_ITER).fit(
                np.exp(-gamma * D2[np.ix_(tr, tr)]), y[tr]
            )
            right_rbf[r, te] = m.predict(np.exp(-gamma * D2[np.ix_(te, tr)])) == y[te]
            llc, _ = tune_linear(X[tr], y[tr], SEED + 100 * r + f)
            lm = linear_model(2.0**llc, X[tr]).fit(X[tr], y[tr])
            right_lin[r, te] = lm.predict(X[te]) == y[te]
            params.append({"C": 2.0**lc, "gamma": gamma, "linear_C": 2.0**llc})
        log(f"repeat {r}: rbf {right_rbf[r].mean():.4f} linear {right_lin[r].mean():.4f}")
    diff = (right_rbf - right_lin).mean(axis=0)
    gap, lo, hi = paired(diff)
    return {
        "method": f"nested {repeats}x5-fold CV",
        "rows": n,
        "repeats": repeats,
        "rbf_tune_rows": min(NESTED_TUNE_ROWS, n - n // 5),
        "rbf_accuracy": float(right_rbf.mean()),
        "linear_accuracy": float(right_lin.mean()),
        "repeat_gaps": [float(v) for v in (right_rbf - right_lin).mean(axis=1)],
        "gap": gap,
        "ci95": [lo, hi],
        "g0": g0,
        "folds": params,
    }


def reference_holdout(
    X: sp.csr_matrix, y: np.ndarray, Xt: sp.csr_matrix, yt: np.ndarray, log: Callable[[str], None]
) -> dict[str, Any]:
    """Tune on subsamples of the training file, train on it, score on the held-out rows."""
    from sklearn.svm import SVC

    n = len(y)
    tune = stratified_take(y, TUNE_ROWS, SEED)
    D2 = sq_dist(X[tune], X[tune])
    g0 = median_gamma(D2, SEED)
    t0 = time.time()
    lc, lg, cv_rbf = tune_rbf(D2, y[tune], g0, 3, SEED)
    del D2
    gamma = g0 * 2.0**lg
    log(
        f"rbf tuned on {len(tune)} rows: log2 C {lc}, gamma {gamma:.4g}, cv {cv_rbf:.4f} "
        f"({time.time() - t0:.0f}s)"
    )
    lin_rows = stratified_take(y, LINEAR_TUNE_ROWS, SEED)
    llc, cv_lin = tune_linear(X[lin_rows], y[lin_rows], SEED)
    lm = linear_model(2.0**llc, X).fit(X, y)
    right_lin = lm.predict(Xt) == yt
    log(f"linear: log2 C {llc}, cv {cv_lin:.4f}, test {right_lin.mean():.4f}")
    t0 = time.time()
    fit = stratified_take(y, RBF_TRAIN_ROWS if X.shape[1] <= WIDE else WIDE_RBF_ROWS, SEED)
    if len(fit) <= PRECOMPUTED_ROWS:
        m = SVC(C=2.0**lc, kernel="precomputed", cache_size=500, max_iter=FINAL_MAX_ITER).fit(
            rbf_kernel(X[fit], X[fit], gamma), y[fit]
        )
        pred = np.concatenate(
            [
                m.predict(rbf_kernel(Xt[i : i + 2000], X[fit], gamma))
                for i in range(0, Xt.shape[0], 2000)
            ]
        )
    else:
        m = SVC(C=2.0**lc, gamma=gamma, kernel="rbf", cache_size=2000, max_iter=FINAL_MAX_ITER).fit(
            X[fit], y[fit]
        )
        pred = m.predict(Xt)
    right_rbf = pred == yt
    log(f"rbf trained on {len(fit)} rows ({time.time() - t0:.0f}s), test {right_rbf.mean():.4f}")
    gap, lo, hi = paired(right_rbf.astype(float) - right_lin.astype(float))
    return {
        "method": "held-out test",
        "rows": n,
        "test_rows": int(len(yt)),
        "tune_rows": int(len(tune)),
        "linear_tune_rows": int(len(lin_rows)),
        "rbf_train_rows": int(len(fit)),
        "rbf_accuracy": float(right_rbf.mean()),
        "linear_accuracy": float(right_lin.mean()),
        "rbf_cv_accuracy": cv_rbf,
        "linear_cv_accuracy": cv_lin,
        "gap": gap,
        "ci95": [lo, hi],
        "g0": g0,
        "C": 2.0**lc,
        "gamma": gamma,
        "linear_C": 2.0**llc,
    }


def setup_text() -> dict[str, Any]:
    import sklearn

    return {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared), "
        f"Python {platform.python_version()}, scikit-learn {sklearn.__version__}",
        "epsilon": EPSILON,
        "scaling": "max |x| per feature, fitted on the training rows",
        "linear": "LinearSVC (LIBLINEAR) squared hinge, L2, intercept (-s 2 -B 1; dual solver "
        "when features outnumber rows); log2 C in -5,-3,...,15 then the best's two "
        "neighbours, 5-fold stratified CV",
        "rbf": "SVC (LIBSVM C-SVC, RBF) on precomputed kernel matrices for tuning; log2 C in "
        f"{RBF_LOG2C} x log2(gamma/g0) in {RBF_LOG2G}, g0 = 1/median squared distance, "
        f"then the 3x3 neighbourhood of the best at step {REFINE}; 3-fold stratified CV",
        "small": f"under {CV_LIMIT} rows: stratified 5-fold CV on all rows repeated 3 times "
        "(up to 1,000 rows) or twice, nested tuning inside each training fold (RBF on "
        f"a stratified subsample of at most {NESTED_TUNE_ROWS} of its rows; cases "
        "without an rbf_tune_rows entry tuned on the whole fold); "
        "per-row differences averaged over repeats, 95% normal interval over rows",
        "large": f"from {CV_LIMIT} rows: RBF tuned on a stratified subsample of at most "
        f"{TUNE_ROWS} training rows, linear C on at most {LINEAR_TUNE_ROWS}; linear "
        f"trained on all training rows, RBF on at most {RBF_TRAIN_ROWS} ("
        f"{WIDE_RBF_ROWS} with over {WIDE} features); both scored on "
        f"the held-out file (at most {TEST_ROWS} rows); paired 95% interval",
        "iterations": f"LIBSVM stopped after {TUNE_MAX_ITER:,} iterations in tuning and "
        f"nested-CV fits, {FINAL_MAX_ITER:,} in final held-out fits (cases "
        "without a max_iter entry ran uncapped)",
        "label": "kernel if the interval's low end >= epsilon, linear if its high end < "
        "epsilon, otherwise unclear",
    }


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    os.replace(tmp, path)


def run_reference(
    outdir: Path, out: Path, only: list[str] | None, budget: float, retry: bool
) -> None:
    manifest = json.loads((outdir / "cases.json").read_text())
    db: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    db["setup"] = setup_text()
    cases = db.setdefault("cases", {})
    spent = sum(c.get("seconds", 0.0) for c in cases.values())
    warnings.filterwarnings("ignore")
    for case in manifest:
        name = case["name"]
        if only and name not in only:
            continue
        old = cases.get(name)
        if old and (old.get("status") == "ok" or (old.get("status") == "skipped" and not retry)):
            continue
        if spent > budget:
            cases[name] = {
                "status": "skipped",
                "reason": "the reference compute budget "
                f"({budget / 60:.0f} min) was spent before this case",
            }
            write_json(out, db)
            continue
        t0 = time.time()

        def log(msg: str, name: str = name) -> None:
            print(f"[{time.strftime('%H:%M:%S')}] {name}: {msg}", file=sys.stderr, flush=True)

        log(f"start ({case['rows']} rows, {case['features']} features, {case['classes']} classes)")
        X, y = load(outdir / name)
        test = outdir / f"{name}.t"
        if test.exists():
            Xt, yt = load(test)
            nf = max(X.shape[1], Xt.shape[1])
            X.resize((X.shape[0], nf))
            Xt.resize((Xt.shape[0], nf))
            scale = maxabs_fit(X)
            res = reference_holdout(maxabs_apply(X, scale), y, maxabs_apply(Xt, scale), yt, log)
        else:
            res = reference_cv(maxabs_apply(X, maxabs_fit(X)), y, log)
        res["status"] = "ok"
        res["max_iter"] = {"tuning": TUNE_MAX_ITER, "final": FINAL_MAX_ITER}
        res["label"] = label_of(*res["ci95"])
        res["seconds"] = round(time.time() - t0, 1)
        spent += res["seconds"]
        cases[name] = res
        write_json(out, db)
        log(
            f"gap {res['gap']:+.4f} [{res['ci95'][0]:+.4f}, {res['ci95'][1]:+.4f}] "
            f"-> {res['label']} ({res['seconds']:.0f}s; total {spent / 60:.1f} min)"
        )


# ---------------------------------------------------------------------------------------------
# Judging kcheck


def kcheck_command(given: str | None) -> str:
    if given:
        return given
    here = Path(sys.executable).parent / "kcheck"
    if here.exists():
        return str(here)
    found = shutil.which("kcheck")
    if not found:
        raise SystemExit("kcheck not found: install it or pass --kcheck")
    return found


def run_check(cmd: str, path: Path, seed: int, timeout: float, jobs: int | None) -> dict[str, Any]:
    t0 = time.time()
    load = os.getloadavg()[0]
    args = [cmd, "check", str(path), "--json", "--seed", str(seed)]
    if jobs:
        args += ["--jobs", str(jobs)]
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s", "wall": time.time() - t0}
    wall = time.time() - t0
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:200]}", "wall": wall}
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        return {"error": f"unreadable JSON: {e}", "wall": wall}
    out["wall"] = wall
    out["load"] = load
    return out


def _pts(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f}"


def _checker_cell(r: dict[str, Any], name: str) -> str:
    c = (r.get("checkers") or {}).get(name)
    if not c:
        return ""
    if c.get("gap") is None:
        return c.get("status", "-")
    mark = {"subsampled": "s", "exact": "x"}.get(c.get("status", ""), "")
    return _pts(c["gap"]) + mark


def _short(v: str | None) -> str:
    return {"kernel": "K", "linear": "L", "unclear": "?"}.get(v or "", "E")


def run_judge(
    outdir: Path,
    ref_path: Path,
    seeds: list[int],
    out: Path,
    kcheck: str | None,
    timeout: float,
    jobs: int | None,
    reuse: bool,
    only: list[str] | None = None,
) -> None:
    manifest = json.loads((outdir / "cases.json").read_text())
    cmd = kcheck_command(kcheck)
    version = subprocess.run([cmd, "--version"], capture_output=True, text=True).stdout.strip()
    # Every check's JSON is kept in OUTDIR; --reuse-runs takes those of the same kcheck version.
    cache_path = outdir / "judge_runs.json"
    cache: dict[str, Any] = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    t_all = time.time()
    refs_ok = {
        n for n, r in json.loads(ref_path.read_text())["cases"].items() if r.get("status") == "ok"
    }
    for case in manifest:
        name = case["name"]
        if name not in refs_ok or (only and name not in only):
            continue  # nothing to judge it against, or not asked for
        runs[name] = {}
        for s in seeds:
            key = f"{version}|{name}|{s}|{jobs}"
            if reuse and key in cache and "error" not in cache[key]:
                runs[name][s] = cache[key]
                continue
            r = run_check(cmd, outdir / name, s, timeout, jobs)
            runs[name][s] = cache[key] = r
            write_json(cache_path, cache)
            print(
                f"{name} seed {s}: {r.get('verdict', r.get('error'))} ({r['wall']:.1f}s)",
                file=sys.stderr,
                flush=True,
            )
    wall_all = time.time() - t_all
    checks_wall = sum(r["wall"] for per in runs.values() for r in per.values())
    ref = json.loads(ref_path.read_text())
    refs = ref.get("cases", {})

    checker_names: list[str] = []
    for per in runs.values():
        for r in per.values():
            for c in r.get("checkers") or {}:
                if c not in checker_names:
                    checker_names.append(c)

    s0 = seeds[0]
    manifest = [c for c in manifest if c["name"] in runs]  # the cases judged in this run
    clear = [
        c["name"] for c in manifest if refs.get(c["name"], {}).get("label") in ("kernel", "linear")
    ]
    n_kernel = sum(refs[n]["label"] == "kernel" for n in clear)
    per_seed_right = {}
    for s in seeds:
        per_seed_right[s] = [n for n in clear if runs[n][s].get("verdict") == refs[n]["label"]]
    wrong0 = [n for n in clear if runs[n][s0].get("verdict") != refs[n]["label"]]
    missed_kernel = [n for n in wrong0 if refs[n]["label"] == "kernel"]
    false_kernel = [
        n for n in wrong0 if refs[n]["label"] == "linear" and runs[n][s0].get("verdict") == "kernel"
    ]
    errors = [n for n in runs if any("error" in r for r in runs[n].values())]
    wrong_clear = [n for n in wrong0 if runs[n][s0].get("margin") == "clear"]

    L: list[str] = []
    L.append("# kcheck judged against reference answers")
    L.append("")
    L.append(
        f"Generated by `python scripts/judge.py judge` on {time.strftime('%Y-%m-%d')}: "
        f"`{Path(cmd).name} check FILE --json --seed S` ({version}) run as a subprocess "
        f"on every case's training file, seeds {', '.join(map(str, seeds))}"
        + (f", `--jobs {jobs}`" if jobs else "")
        + f", one case at a time; the checks took {checks_wall / 60:.1f} min in all"
        + (f" (this run: {wall_all / 60:.1f} min, reusing earlier checks)" if reuse else "")
        + ". The reference answers come from "
        f"`python scripts/judge.py reference` (`{ref_path.name}`), computed without "
        "kcheck's code."
    )
    L.append("")
    L.append("## Setup")
    L.append("")
    setup = ref.get("setup", {})
    for key in ("machine", "scaling", "linear", "rbf", "small", "large", "iterations", "label"):
        if key in setup:
            L.append(f"- **{key}**: {setup[key]}")
    ref_secs = sum(r.get("seconds", 0) for r in refs.values())
    lost = sum(r.get("spent_seconds", 0) for r in refs.values())
    L.append(
        f"- **reference time**: {ref_secs / 60:.1f} min of wall time for "
        f"{sum(r.get('status') == 'ok' for r in refs.values())} cases, with other work "
        "sharing the 2 cores"
        + (f", plus {lost / 60:.0f} min spent on cases given up" if lost else "")
    )
    skipped = {n: r for n, r in refs.items() if r.get("status") != "ok"}
    for n, r in skipped.items():
        L.append(f"- **no reference** for {n}: {r.get('reason', r.get('status'))}")
    L.append("")
    L.append("## Score")
    L.append("")
    L.append(
        f"- cases: {len(manifest)}; with a clear reference: {len(clear)} "
        f"({n_kernel} kernel, {len(clear) - n_kernel} linear); unclear: "
        f"{sum(refs.get(c['name'], {}).get('label') == 'unclear' for c in manifest)}"
    )
    L.append(f"- **seed {s0}: {len(per_seed_right[s0])} / {len(clear)} clear cases right**")
    L.append(
        f"- clear kernel cases called linear: {len(missed_kernel)}"
        + (f" ({', '.join(missed_kernel)})" if missed_kernel else "")
    )
    L.append(
        f"- clear linear cases called kernel: {len(false_kernel)}"
        + (f" ({', '.join(false_kernel)})" if false_kernel else "")
    )
    L.append(
        f"- clear cases called wrong with a `clear` margin: {len(wrong_clear)}"
        + (f" ({', '.join(wrong_clear)})" if wrong_clear else "")
    )
    if len(seeds) > 1:
        for s in seeds[1:]:
            L.append(f"- seed {s}: {len(per_seed_right[s])} / {len(clear)} right")
        agree = [n for n in clear if len({runs[n][s].get("verdict") for s in seeds}) == 1]
        flip = [n for n in clear if n not in agree]
        L.append(
            f"- verdicts identical over seeds {', '.join(map(str, seeds))}: "
            f"{len(agree)} / {len(clear)} clear cases"
            + (f"; they differ on {', '.join(flip)}" if flip else "")
        )
        total = sum(len(v) for v in per_seed_right.values())
        L.append(f"- all seeds together: {total} / {len(clear) * len(seeds)} right")
    L.append(f"- kcheck errors: {len(errors)}" + (f" ({', '.join(errors)})" if errors else ""))
    L.append("")
    L.append("## Cases")
    L.append("")
    L.append(
        "Reference: accuracies of the tuned RBF SVM and linear model, the gap (points, RBF "
        "minus linear) with its 95% interval, and the label (K kernel, L linear, ? unclear)."
        f" kcheck at seed {s0}: verdict (margin c clear, b borderline), the checker that "
        "decided a kernel verdict, each checker's gap in points (x: exact mode, s: "
        'subsampled), and the check\'s wall seconds. "ok": verdict equals a clear '
        'reference, "MISS": it does not.'
        + (' "seeds": the verdicts at every seed.' if len(seeds) > 1 else "")
    )
    L.append("")
    head = [
        "case",
        "rows x feat. (cl.)",
        "paper",
        "ref RBF / lin %",
        "ref gap [95%]",
        "ref",
        "kcheck",
        "decided by",
        *checker_names,
        "s",
        "ok?",
    ]
    if len(seeds) > 1:
        head.insert(-1, "seeds")
    L.append("| " + " | ".join(head) + " |")
    L.append("|" + "|".join("---" for _ in head) + "|")
    for case in manifest:
        n = case["name"]
        rf = refs.get(n, {})
        r = runs[n][s0]
        if rf.get("status") == "ok":
            racc = f"{100 * rf['rbf_accuracy']:.1f} / {100 * rf['linear_accuracy']:.1f}"
            rgap = f"{_pts(rf['gap'])} [{_pts(rf['ci95'][0])}, {_pts(rf['ci95'][1])}]"
            rlab = _short(rf["label"])
        else:
            racc, rgap, rlab = "-", "-", "none"
        if "error" in r:
            verdict = f"error: {r['error']}"
        else:
            verdict = f"{_short(r['verdict'])} ({(r.get('margin') or '-')[0]})"
        ok = ""
        if rf.get("label") in ("kernel", "linear"):
            ok = "ok" if r.get("verdict") == rf["label"] else "MISS"
        row = [
            n,
            f"{case['rows']} x {case['features']} ({case['classes']})",
            case.get("paper") or "",
            racc,
            rgap,
            rlab,
            verdict,
            r.get("deciding_checker") or "",
            *[_checker_cell(r, c) for c in checker_names],
            f"{r.get('seconds', r['wall']):.1f}",
            ok,
        ]
        if len(seeds) > 1:
            row.insert(-1, "".join(_short(runs[n][s].get("verdict")) for s in seeds))
        L.append("| " + " | ".join(str(x).replace("|", "/") for x in row) + " |")
    L.append("")
    L.append("## Sources")
    L.append("")
    for c in manifest:
        rf = refs.get(c["name"], {})
        how = ""
        if rf.get("status") == "ok":
            how = (
                f"; reference by {rf['method']}"
                + (
                    f" on {rf['test_rows']} held-out rows, RBF trained on "
                    f"{rf['rbf_train_rows']} rows"
                    if "test_rows" in rf
                    else ""
                )
                + f", {rf['seconds']:.0f}s"
            )
        L.append(f"- {c['name']} ({c['source']}): {c['about']}{how}")
    L.append("")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(L))
    print(
        f"wrote {out}: seed {s0}: {len(per_seed_right[s0])} / {len(clear)} clear cases right",
        file=sys.stderr,
    )


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pm = sub.add_parser("make", help="write the cases into OUTDIR")
    pm.add_argument("outdir", type=Path)
    pm.add_argument("--shared", type=Path, default=None, help="the shared data set directory")
    pr = sub.add_parser("reference", help="compute the reference answers")
    pr.add_argument("outdir", type=Path)
    pr.add_argument("-o", "--output", type=Path, required=True)
    pr.add_argument("--only", nargs="*", default=None)
    pr.add_argument("--budget-minutes", type=float, default=75.0)
    pr.add_argument("--retry-skipped", action="store_true")
    pj = sub.add_parser("judge", help="run kcheck on every case and write the report")
    pj.add_argument("outdir", type=Path)
    pj.add_argument("--reference", type=Path, required=True)
    pj.add_argument("--seeds", type=int, nargs="+", default=[0])
    pj.add_argument("-o", "--output", type=Path, required=True)
    pj.add_argument(
        "--kcheck",
        default=None,
        help="the kcheck command (default: on PATH or next to this Python)",
    )
    pj.add_argument("--timeout", type=float, default=1800.0, help="seconds per check")
    pj.add_argument("--jobs", type=int, default=1, help="kcheck --jobs (0: kcheck's default)")
    pj.add_argument("--only", nargs="*", default=None, help="judge only these cases")
    pj.add_argument(
        "--reuse-runs",
        action="store_true",
        help="reuse the checks kept in OUTDIR/judge_runs.json by the same version",
    )
    a = p.parse_args(argv)
    if a.cmd == "make":
        make_cases(a.outdir, a.shared)
    elif a.cmd == "reference":
        run_reference(a.outdir, a.output, a.only, a.budget_minutes * 60, a.retry_skipped)
    else:
        run_judge(
            a.outdir,
            a.reference,
            a.seeds,
            a.output,
            a.kcheck,
            a.timeout,
            a.jobs or None,
            a.reuse_runs,
            a.only,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
