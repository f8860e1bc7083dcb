"""``kcheck expand`` and the term spec: products of :mod:`kcheck.terms.explain` (x_i*x_j or x_i^2 of
scaled features) appended as columns after the *training* width from the range file (never a file's
own last index), so test and training files agree and any tool (``liblinear-train``,
``liblinear-predict``) can use them. A term spec (``MODEL.terms`` beside a ``linear+K`` model)
records width and terms; it may come from anywhere, so :func:`read_spec` checks it in full within
:mod:`kcheck.io.ownformat`'s bounds (as for ``--from-check``'s JSON)."""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from kcheck.defaults import DEFAULT_SCALING
from kcheck.errors import DataFormatError, KcheckError, KcheckWarning
from kcheck.io.atomic import atomic_open

# _text_blocks: write_libsvm's text, here a chunk of rows at a time.
from kcheck.io.data import LibsvmBlocks, _text_blocks, dropped_warning
from kcheck.io.ownformat import CHECK_JSON_BYTES, brief, byte_cap, is_int, read_json
from kcheck.prepare import LOWER, UPPER
from kcheck.scaling.fitting import Scaler, read_range_file
from kcheck.scaling.stream import fit_file, plan, row_chunks, rows_of
from kcheck.terms.explain import append_products

__all__ = [
    "SPEC_SUFFIX",
    "TermSpec",
    "expand_file",
    "parse_terms",
    "read_spec",
    "scaler_for",
    "spec_path",
    "spec_text",
    "terms_from_check",
]

#: The term spec beside a ``linear+K`` model: ``MODEL.terms``.
SPEC_SUFFIX = ".terms"
#: What a spec says it is, and the one version read.
SPEC_FORMAT = "kcheck-terms"
SPEC_VERSION = 1
#: A spec larger than this is not one kcheck wrote (20 terms take a few hundred bytes).
MAX_SPEC_BYTES = 1 << 20
#: Terms a spec or ``--terms`` may list.
MAX_TERMS = 10_000
#: ``I:J``: ASCII digits only, as the data parser reads indices (``\\d`` would take ``١:٢``).
_TERM = re.compile(r"[ \t]*([0-9]+)[ \t]*:[ \t]*([0-9]+)[ \t]*", re.ASCII)
#: Digits of an index in ``--terms``: more name no feature (the width is below 2**31).
MAX_INDEX_DIGITS = 12


@dataclass(frozen=True)
class TermSpec:
    """Products of 0-based columns (i <= j) appended after ``width`` columns."""

    width: int
    terms: tuple[tuple[int, int], ...]

    def to_json(self, index_base: int) -> dict[str, Any]:
        return {
            "format": SPEC_FORMAT,
            "version": SPEC_VERSION,
            "width": self.width,
            "index_base": index_base,
            "terms": [[i + index_base, j + index_base] for i, j in self.terms],
        }

    def apply(self, X: sp.csr_matrix) -> sp.csr_matrix:
        """Scaled rows at the training width, with the products appended after it."""
        X = X[:, : self.width] if X.shape[1] > self.width else X
        if X.shape[1] < self.width:
            X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], self.width))
        return append_products(X, self.terms)


def _term(i: int, j: int, width: int, base: int, where: str) -> tuple[int, int]:
    """A term in the user's convention checked against the width, as 0-based (i <= j)."""
    lo, hi = sorted((i, j))
    if lo < base or hi >= width + base:
        raise KcheckError(
            f"{where}: term {i}:{j} names a feature outside {base}..{width - 1 + base}, the "
            "training width"
        )
    return lo - base, hi - base


def parse_terms(text: str, width: int, *, zero_based: bool = False) -> tuple[tuple[int, int], ...]:
    """``--terms 3:7,3:3`` (indices as in the files) -> 0-based column pairs."""
    base = 0 if zero_based else 1
    parts = text.split(",")
    if len(parts) > MAX_TERMS:
        raise KcheckError(f"--terms: at most {MAX_TERMS:,} terms")
    out = []
    for part in parts:
        m = _TERM.fullmatch(part)
        if m is None:
            raise KcheckError(
                f"--terms: expected I:J pairs of ASCII digits such as 3:7,3:3, got {brief(part)}"
            )
        if max(len(m.group(1)), len(m.group(2))) > MAX_INDEX_DIGITS:
            raise KcheckError(
                f"--terms: {brief(part.strip())} names a feature outside "
                f"{base}..{width - 1 + base}, the training width"
            )
        out.append(_term(int(m.group(1)), int(m.group(2)), width, base, "--terms"))
    return tuple(out)


def terms_from_check(
    path: str, top: int, width: int, *, zero_based: bool = False, memory_limit: int | None = None
) -> tuple[tuple[int, int], ...]:
    """The top ``top`` terms of a check's ``explain`` block, within CHECK_JSON_BYTES."""
    what = "a kcheck verdict (JSON)"
    v = read_json(path, cap=byte_cap(CHECK_JSON_BYTES, memory_limit), what=what)

    def bad(why: str) -> DataFormatError:
        return DataFormatError(path, None, why)

    ex = v.get("explain") if isinstance(v, dict) else None
    if not isinstance(ex, dict):
        raise bad(f"has no explain block; run kcheck check --explain -o {path}")
    if ex.get("available") is not True:
        reason = ex.get("reason")
        raise bad(f"no explanation is available ({reason if isinstance(reason, str) else '-'})")
    base = ex.get("index_base")
    terms = ex.get("terms")
    if not is_int(base) or base not in (0, 1) or not isinstance(terms, list):
        raise bad("explain.terms or explain.index_base is malformed")
    if base != (0 if zero_based else 1):
        raise bad(
            f"its indices are {base}-based; "
            + ("drop --zero-based" if zero_based else "give --zero-based")
        )
    if top < 1:
        raise KcheckError("--top must be at least 1")
    if top > len(terms):
        raise bad(f"--top {top}: it lists only {len(terms)} terms")
    out = []
    for t in terms[:top]:
        f = t.get("features") if isinstance(t, dict) else None
        if not (isinstance(f, list) and len(f) == 2 and all(is_int(x) for x in f)):
            raise bad(f"a term of explain.terms is malformed: {brief(t)}")
        out.append(_term(f[0], f[1], width, base, path))
    return tuple(out)


def spec_text(spec: TermSpec, *, zero_based: bool = False) -> str:
    """The spec file's text: one JSON object, indices in the user's convention."""
    return json.dumps(spec.to_json(0 if zero_based else 1)) + "\n"


def read_spec(path: str, *, width: int | None = None) -> TermSpec:
    """A term spec checked in full (format, version, width matching ``width``, every term within
    it), read within MAX_SPEC_BYTES; else one error naming the file."""
    v = read_json(path, cap=MAX_SPEC_BYTES, what="a term spec (JSON)")

    def bad(why: str) -> DataFormatError:
        return DataFormatError(path, None, f"not a valid term spec: {why}")

    if not isinstance(v, dict) or v.get("format") != SPEC_FORMAT:
        raise bad(f'"format" must be "{SPEC_FORMAT}"')
    if not is_int(v.get("version")) or v.get("version") != SPEC_VERSION:
        raise bad(f"version {brief(v.get('version'))} is not {SPEC_VERSION}")
    n, base, terms = v.get("width"), v.get("index_base"), v.get("terms")
    if not is_int(n) or n < 1 or n >= 2**31:
        raise bad(f'"width" must be a positive integer, got {brief(n)}')
    if width is not None and n != width:
        raise bad(f"its width {n} is not the range file's {width}")
    if base not in (0, 1) or type(base) is not int:
        raise bad('"index_base" must be 0 or 1')
    if not isinstance(terms, list) or not terms or len(terms) > MAX_TERMS:
        raise bad(f'"terms" must list 1 to {MAX_TERMS:,} [i, j] pairs')
    out = []
    for t in terms:
        if not (isinstance(t, list) and len(t) == 2 and all(is_int(x) for x in t)):
            raise bad(f"term {brief(t)} is not an [i, j] pair of integers")
        try:
            out.append(_term(t[0], t[1], n, base, path))
        except KcheckError as e:
            raise bad(str(e).split(": ", 1)[1]) from None
    return TermSpec(n, tuple(out))


def scaler_for(
    range_path: str | None,
    fit_path: str | None,
    *,
    scaling: str = DEFAULT_SCALING,
    zero_based: bool = False,
    memory_limit: int,
) -> Scaler:
    """The training scaling: a range file (``-r``), or fitted (``--fit-scaling``) streaming."""
    if (range_path is None) == (fit_path is None):
        raise KcheckError(
            "give -r RANGE (the check's --model-out writes MODEL.range) or --fit-scaling TRAIN"
        )
    if range_path is not None:
        return read_range_file(range_path, memory_limit=memory_limit)
    assert fit_path is not None
    return fit_file(
        fit_path,
        method=scaling,
        lower=LOWER,
        upper=UPPER,
        zero_based=zero_based,
        memory_limit=memory_limit,
    )


def expand_file(
    path: str,
    out: str,
    spec: TermSpec,
    scaler: Scaler,
    *,
    zero_based: bool = False,
    memory_limit: int,
) -> int:
    """Scale ``path``, append the products and write 1-based LIBSVM data to ``out`` (``-``: stdout)
    atomically, a chunk at a time (:func:`kcheck.scaling.stream.plan`); returns the rows written."""
    width = max(scaler.n_features, spec.width)
    per_row = scaler.n_dense + len(spec.terms)
    budget = plan(path, memory_limit, width, per_row, what="expanding it")
    blocks = LibsvmBlocks(
        path,
        n_features=spec.width,
        zero_based=zero_based,
        memory_limit=memory_limit,
        block_bytes=budget.block_bytes,
    )

    def text() -> Iterator[str]:
        for y, X in blocks:
            for start, stop in row_chunks(X, per_row, budget.chunk_values):
                P = spec.apply(scaler.transform(rows_of(X, start, stop)))
                if P.nnz and not np.isfinite(P.data).all():
                    raise KcheckError(
                        f"{path}: a product overflows (values beyond the range file's)"
                    )
                P.sum_duplicates()  # canonical: sorted, as the writer needs
                P.eliminate_zeros()  # a product that underflows to 0 is not written
                yield from _text_blocks(y[start:stop], P)

    if out == "-":
        for block in text():
            sys.stdout.write(block)
        sys.stdout.flush()
    else:
        with atomic_open(out, "w", "the file", encoding="ascii", newline="\n") as f:
            for block in text():
                f.write(block)
    if blocks.dropped:
        warning = dropped_warning(blocks.name, blocks.dropped, spec.width)
        warnings.warn(warning, KcheckWarning, stacklevel=2)
    return blocks.rows


def spec_path(model_path: str) -> str:
    return os.fspath(model_path) + SPEC_SUFFIX
