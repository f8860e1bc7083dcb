"""The linear baseline every checker is compared with: LIBLINEAR ``-s 2 -B 1``, C by ``-C`` on T."""

from __future__ import annotations

import time
from dataclasses import dataclass

from kcheck.bindings import engines
from kcheck.checkers.base import CheckerResult, Dataset, score
from kcheck.tuning import linear_c


@dataclass(frozen=True)
class LinearOptions:
    seed: int = 0
    class_weight: engines.ClassWeight | None = None


def run(T: Dataset, V: Dataset, options: LinearOptions) -> CheckerResult:
    """Tune C on T with 5-fold CV, train on T, score on V."""
    t0 = time.perf_counter()
    model, cv = linear_c.fit_linear(T.X, T.y, seed=options.seed, class_weight=options.class_weight)
    s = score(model, V)
    return CheckerResult.scored("linear", s, t0, model.predict, info={"C": model.C}, cv_accuracy=cv)
