"""``kcheck scale``: a LIBSVM file scaled as svm-scale scales it, to the byte.

The arithmetic, the range files and the text are :mod:`kcheck.scaling`'s; this reads the file,
fits the scaling or restores it from a range file, and yields the scaled text. Nothing here
prints: svm-scale's warning goes to a ``warn`` callback, the text to the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from kcheck.data import read_libsvm
from kcheck.scaling import (
    Scaler,
    densify_warning,
    fit_label_scaling,
    fit_scaler,
    read_range_file,
    scaled_text,
    write_range_file,
)

__all__ = ["ScaleConfig", "Scaled", "scale", "scaled"]


@dataclass(frozen=True)
class ScaleConfig:
    """svm-scale's options: ``-l``, ``-u`` (None: -1 and 1), ``-y``, ``-s`` and ``-r``, and
    ``maxabs`` (divide by max |x| instead of min-max)."""

    file: str
    lower: float | None = None
    upper: float | None = None
    y_bounds: tuple[float, float] | None = None
    maxabs: bool = False
    save_range: str | None = None
    restore_range: str | None = None
    #: Values with 17 significant digits instead of svm-scale's 6.
    full_precision: bool = False
    zero_based: bool = False


@dataclass(frozen=True)
class Scaled:
    """The scaling and the scaled text, in blocks, before anything is written: a caller that
    writes both the text and ``-s``'s range file to files commits them together."""

    scaler: Scaler
    blocks: Iterator[str]


def scaled(config: ScaleConfig, warn: Callable[[str], None] | None = None) -> Scaled:
    """The scaling of ``config.file`` and its scaled text; ``config.save_range`` is not
    written here.

    svm-scale's warning when scaling adds non-zeros goes to ``warn`` (if given) in its own
    wording, so scripts that look for it keep working.
    """
    scaler, y, X = _scaler_and_data(config)
    warning = densify_warning(X.nnz, scaler.nnz_after(X))
    if warning and warn is not None:
        warn(warning)
    Xs = scaler.transform(X)
    if scaler.y_scaling is not None:
        y = scaler.y_scaling.apply(y)
    return Scaled(scaler, scaled_text(y, Xs, full_precision=config.full_precision))


def scale(config: ScaleConfig, warn: Callable[[str], None] | None = None) -> Iterator[str]:
    """The scaled text of ``config.file``, in blocks; the range file of ``-s`` is written
    before the first block, as svm-scale writes it before printing."""
    out = scaled(config, warn)
    if config.save_range:
        write_range_file(config.save_range, out.scaler)
    return out.blocks


def _scaler_and_data(config: ScaleConfig) -> tuple[Scaler, np.ndarray, sp.csr_matrix]:
    """The scaling (read from ``-r``'s range file, else fitted on the file) and the file's
    (y, X); with a range file, X has at least its width."""
    if config.restore_range:
        # svm-scale's own arithmetic for any range file, so the output is svm-scale -r's.
        scaler = read_range_file(config.restore_range, method="minmax")
        y, X = read_libsvm(config.file, n_features=scaler.n_features, zero_based=config.zero_based)
        return scaler, y, X
    y, X = read_libsvm(config.file, zero_based=config.zero_based)
    scaler = fit_scaler(
        X,
        method="maxabs" if config.maxabs else "minmax",
        lower=-1.0 if config.lower is None else config.lower,
        upper=1.0 if config.upper is None else config.upper,
        source=config.file,
    )
    if config.y_bounds:
        lower, upper = config.y_bounds
        scaler = replace(scaler, y_scaling=fit_label_scaling(y, lower, upper))
    return scaler, y, X
