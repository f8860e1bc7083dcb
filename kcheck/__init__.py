"""kcheck: is a Gaussian-kernel classifier clearly better than a linear one for this data set? From
Python: ``kcheck.check(X, y)``, ``kcheck.check_file(path)`` (docs/python.md), in :mod:`kcheck.api`,
imported on first use to keep ``import kcheck`` light."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kcheck.errors import KcheckError

if TYPE_CHECKING:  # what type checkers see of the names __getattr__ imports on first use
    from kcheck.api import Gap as Gap
    from kcheck.api import Model as Model
    from kcheck.api import Result as Result
    from kcheck.api import check as check
    from kcheck.api import check_file as check_file
    from kcheck.defaults import Event as Event

__version__ = "0.7.1"

#: What ``kcheck.NAME`` finds in kcheck.api, imported on first use.
_API = ("check", "check_file", "Result", "Model", "Gap", "Event")

__all__ = ["KcheckError", "__version__", *_API]


def __getattr__(name: str) -> Any:
    """``kcheck.check`` and the rest of the API, imported when first asked for."""
    if name in _API:
        from kcheck import api

        return getattr(api, name)
    raise AttributeError(f"module 'kcheck' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
