"""The one way randomness comes from ``--seed``: every draw starts from the seed and a stream,
through :func:`rng` (a numpy Generator) or :func:`c_seed` (an int for the bindings and C
``rand()``), so the same file, options and seed give the same JSON (as scikit-learn's
``check_random_state``). Stream numbers are fixed, so results stay:

* no stream: ``default_rng(seed)``, drawn afresh by the T/V split, every stratified subsample,
  k-means' first centers and the ``--max-rows`` reservoir (the same as stream 0);
* stream r: ``SeedSequence([seed, r])`` (seed as uint32): repeat r of stratified CV folds, and
  the constants below."""

from __future__ import annotations

import numpy as np

__all__ = ["RFF_MAP", "RFF_SAMPLE", "SECOND_SPLIT", "c_seed", "rng"]

#: The second fold's split of T (stream 1 as CV repeat 1; renumbering changes every result).
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
    """The generator of ``stream`` of ``seed`` (none: the seed's own); streams are independent."""
    if stream is None:
        return np.random.default_rng(seed)
    return np.random.default_rng(np.random.SeedSequence([seed & _UINT32, stream]))


def c_seed(seed: int, task: int | None = None) -> int:
    """An int seed for the bindings: ``srand``'s for ``seed``, or with ``task`` that task's (a
    MultiLinear cluster), from seed and task number only, so parallel work gives serial results."""
    if task is None:
        return seed & _UINT32
    return (seed * 1_000_003 + task * 7919 + 1) & _INT31
