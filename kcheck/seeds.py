"""The one way randomness comes from the user's ``--seed``.

Modelled on scikit-learn's ``check_random_state``: every draw starts from the user's seed and
a stream, through :func:`rng` (a numpy Generator) or :func:`c_seed` (an int for the bindings
and the C ``rand()`` they draw folds from). Nothing else builds a generator or a seed, so the
same file, options and seed give the same JSON, and one place shows how the draws relate.

The streams are numbered as the derivations always were, so results are what they were:

* no stream: the seed's own generator, ``default_rng(seed)``. The T/V split, every stratified
  subsample, k-means' first centers and the ``--max-rows`` reservoir draw from it, each
  afresh. Within the seed range it is the same as stream 0.
* stream r: ``SeedSequence([seed, r])`` (the seed taken as an unsigned 32-bit integer). Repeat
  r of stratified CV folds draws stream r; the constants below name the others.
"""

from __future__ import annotations

import numpy as np

__all__ = ["RFF_MAP", "RFF_SAMPLE", "SECOND_SPLIT", "c_seed", "rng"]

#: The second fold's split of T (the same number as repeat 1 of CV folds and rff's sample:
#: each draws on other rows for another purpose, and a new number would change every result).
SECOND_SPLIT = 1
#: rff's sample of rows for the median distance.
RFF_SAMPLE = 1
#: rff's random directions and phases.
RFF_MAP = 2

#: What ``srand`` takes: an unsigned 32-bit integer.
_UINT32 = 0xFFFFFFFF
#: A task's own seed (:func:`c_seed` with a task) is a non-negative C ``int``.
_INT31 = 0x7FFFFFFF


def rng(seed: int, stream: int | None = None) -> np.random.Generator:
    """The generator of ``stream`` of ``seed`` (without a stream, the seed's own).

    Streams are independent of each other: a stage that draws more or fewer numbers never
    moves another stage's draws.
    """
    if stream is None:
        return np.random.default_rng(seed)
    return np.random.default_rng(np.random.SeedSequence([seed & _UINT32, stream]))


def c_seed(seed: int, task: int | None = None) -> int:
    """An int seed for the bindings: without ``task``, what ``srand`` takes for ``seed``;
    with one, the seed of task ``task`` (a MultiLinear cluster), itself a seed to derive from.

    A task's seed depends on the seed and the task's number only, never on which process or
    in what order tasks run, so parallel work gives the results of serial work.
    """
    if task is None:
        return seed & _UINT32
    return (seed * 1_000_003 + task * 7919 + 1) & _INT31
