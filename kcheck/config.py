"""The options of one check, validated; read by :func:`kcheck.pipeline.run`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kcheck.checkers import registry
from kcheck.defaults import (
    DEFAULT_EXACT,
    DEFAULT_METRIC,
    DEFAULT_SCALING,
    EPSILON,
    EXACT_MODES,
    MODEL_KINDS,
    check_common,
    products_of,
)
from kcheck.errors import KcheckError
from kcheck.memory import default_memory_limit
from kcheck.prepare import parse_max_rows
from kcheck.scoring import validate_metric

#: The names ``--checkers`` takes, and those that run by default (kcheck.checkers.registry).
CHECKERS = registry.NAMES
DEFAULT_CHECKERS = registry.DEFAULT_NAMES
#: A --time-limit of this many seconds (about 30 years) or more, inf included, is no limit.
MAX_TIME_LIMIT = 1e9


@dataclass(frozen=True)
class CheckConfig:
    """Everything one check needs; built by the CLI (or a script) and passed to :func:`run`."""

    train: str
    test: str | None = None
    epsilon: float = EPSILON
    checkers: tuple[str, ...] = DEFAULT_CHECKERS
    scaling: str = DEFAULT_SCALING
    seed: int = 0
    jobs: int = 1
    memory_limit: int | None = None
    zero_based: bool = False
    #: Train the recommended (or ``model_kind``) model on all training rows and save it here.
    model_out: str | None = None
    model_kind: str | None = None
    #: Train the kernel model with probability outputs (LIBSVM -b 1).
    model_probability: bool = False
    #: Seconds for the whole check; checkers not finished by then are skipped.
    time_limit: float | None = None
    #: The real RBF-vs-linear comparison: "auto" runs it where it is cheap (small data).
    exact: str = DEFAULT_EXACT
    #: Rank degree-2's product terms and score linear + top-k products (advice only).
    explain: bool = False
    #: Check a stratified streaming sample of this many rows; "auto": what the memory limit holds.
    max_rows: int | str | None = None
    #: The score: accuracy, balanced (class-weighted models, mean recall) or auc (two classes).
    metric: str = DEFAULT_METRIC

    @property
    def memory_bytes(self) -> int:
        """The limit kept to: ``memory_limit``, or half of RAM (the field stays None for resume)."""
        return self.memory_limit or default_memory_limit()

    def validated(self) -> CheckConfig:
        if self.max_rows is not None:
            max_rows = parse_max_rows(self.max_rows)
            if max_rows != self.max_rows:
                return dataclasses.replace(self, max_rows=max_rows).validated()
        check_common(
            epsilon=self.epsilon,
            scaling=self.scaling,
            jobs=self.jobs,
            memory_limit=self.memory_limit,
        )
        names = registry.NAMES  # read now: the registry is the one list of checkers
        unknown = [c for c in self.checkers if c not in names]
        if unknown or not self.checkers:
            raise KcheckError(
                f"--checkers takes a comma-separated subset of {','.join(names)}, "
                f"got {','.join(self.checkers) or 'nothing'}"
            )
        validate_metric(self.metric)
        if self.exact not in EXACT_MODES:
            raise KcheckError(f"--exact must be one of {', '.join(EXACT_MODES)}")
        if self.exact == "never" and all(registry.role(c) == "stand-in" for c in self.checkers):
            raise KcheckError(
                f"--checkers {','.join(self.checkers)} with --exact never runs no checker: "
                "rbfsvm stands in for exact mode only under --exact auto; add degree2 or "
                "multilinear, or use --exact auto"
            )
        if self.time_limit is not None and not self.time_limit > 0:
            raise KcheckError("--time-limit must be a positive number of seconds")
        if self.model_kind not in (None, *MODEL_KINDS) and products_of(self.model_kind) is None:
            raise KcheckError(f"--model must be one of {', '.join(MODEL_KINDS)} or linear+K")
        if products_of(self.model_kind) is not None and not self.explain:
            raise KcheckError(f"--model {self.model_kind} needs --explain (it names the terms)")
        return self
