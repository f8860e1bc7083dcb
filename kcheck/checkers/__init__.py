"""Checkers: cheap proxies for a Gaussian-kernel classifier, scored against the linear baseline.

Each checker is a pure function ``(T, V, options) -> CheckerResult``; none prints or writes.
"""

from kcheck.checkers.base import CheckerResult, Dataset

__all__ = ["CheckerResult", "Dataset"]
