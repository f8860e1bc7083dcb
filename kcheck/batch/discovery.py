"""Which files under the named paths are data sets, and which test file goes with which. A CI gate
must not pass by omission: only plainly non-data files are skipped, each with a reason."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import re
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from kcheck.errors import DataFormatError, KcheckError
from kcheck.io.ownformat import PATH_LIST_BYTES, byte_cap, iter_lines, open_input

#: Suffixes read through transparent decompression; stripped from a data set's name.
COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz")
#: ``name`` + one of these is the test file of ``name``; the first found in this order wins.
TEST_SUFFIXES = (".t", ".test")
#: LIBSVM's naming puts the test mark before ``.scale``: ``sector.t.scale`` tests ``sector.scale``.
SCALE_SUFFIX = ".scale"
#: Data-file extensions (after compression suffixes): always checked, as are extensionless files.
DATA_EXTENSIONS = frozenset(".svm .libsvm .svmlight .txt .t .test .tr .train .val .scale".split())
#: Extensions (after any compression suffix is removed) that are never LIBSVM data.
SKIP_EXTENSIONS = frozenset(
    """
    .md .rst .json .jsonl .ndjson .yaml .yml .toml .ini .cfg .py .ipynb .sh .bash .r .m
    .c .h .cpp .js .html .htm .css .csv .tsv .range .model .log .pdf .ps .png .jpg .jpeg
    .gif .svg .zip .tar .tgz .npy .npz .pkl .pickle .h5 .hdf5 .mat .parquet .arff
    .partial .lock .tmp
    """.split()
)
#: File names (case-insensitive, with or without an extension) that are documentation.
SKIP_STEMS = frozenset(
    "readme license licence copying changelog changes news notice authors manifest "
    "makefile index".split()
)
#: How much of a file (after decompression) is read to decide whether it is LIBSVM data.
SNIFF_BYTES = 8192
#: Standard input as a data set: ``-`` among the paths, as in ``kcheck check -``.
STDIN = "-"
STDIN_NAME = "<stdin>"
#: The longest path a ``--files-from`` line may hold: Linux's PATH_MAX.
MAX_PATH_BYTES = 4096

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_LABEL_RE = re.compile(_NUMBER + r"\Z")
_FEATURE_RE = re.compile(r"(?:\d+|qid):" + _NUMBER + r"\Z")
_MAGIC = ((b"\x1f\x8b", gzip.open), (b"BZh", bz2.open), (b"\xfd7zXZ\x00", lzma.open))


@dataclass(frozen=True)
class DataSet:
    """One unit of work: a training file, its test file if one pairs up, and the line's name."""

    name: str
    train: str
    test: str | None = None


@dataclass
class Discovery:
    datasets: list[DataSet]
    #: (path, reason) for every file looked at and left out, in the order found.
    skipped: list[tuple[str, str]] = field(default_factory=list)


#: A file found: (path as the user spelled it, real path, named explicitly).
_Found = tuple[str, str, bool]


def strip_compression(name: str) -> str:
    """``a9a.t.bz2`` -> ``a9a.t``; other names unchanged."""
    for suffix in COMPRESSION_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def name_skip_reason(filename: str, *, explicit: bool = False) -> str | None:
    """Why a file is plainly not data by its name, else None; hidden ones skipped when walked."""
    if filename.startswith(".") and not explicit:
        return "hidden file"
    base = strip_compression(filename)
    stem, ext = os.path.splitext(base)
    if ext.lower() in SKIP_EXTENSIONS:
        return f"{ext} file"
    # README, NEWS.txt and LICENSE.md are documentation; news.scale is data.
    prose = ext.lower() not in DATA_EXTENSIONS or ext.lower() == ".txt"
    if (stem if ext else base).lower() in SKIP_STEMS and (prose or not ext):
        return "documentation"
    return None


def has_data_name(filename: str) -> bool:
    """True for a data-file extension (compression aside) or none: such a file is checked."""
    ext = os.path.splitext(strip_compression(filename))[1]
    return ext == "" or ext.lower() in DATA_EXTENSIONS


def skip_reason(path: str, *, explicit: bool) -> str | None:
    """Why ``path`` is not checked, or None. Named files and data-file names (:func:`has_data_name`)
    are checked unless plainly not data (a broken data file must be an error line); other extensions
    under a directory are checked if their first data line looks like LIBSVM."""
    filename = os.path.basename(path)
    reason = name_skip_reason(filename, explicit=explicit)
    if reason is not None or explicit or has_data_name(filename):
        return reason
    return sniff(path)


def _read_head(path: str, size: int) -> tuple[bytes, bool]:
    """The first ``size`` bytes of the file's content (decompressed); True if that is all of it."""
    with open(path, "rb") as raw:
        magic = raw.read(6)
    opener: Callable[..., Any] = open
    for prefix, fn in _MAGIC:
        if magic.startswith(prefix):
            opener = fn
            break
    with opener(path, "rb") as f:
        head = f.read(size + 1)
    return head[:size], len(head) <= size


def sniff(path: str) -> str | None:
    """None if the first data line looks like ``label index:value ...``; else why not. Reads the
    first few KB (decompressed); an unreadable file is kept, so the check records the real error."""
    try:
        head, complete = _read_head(path, SNIFF_BYTES)
    except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error):
        return None
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]  # a UTF-8 BOM, which the reader skips too
    lines = head.decode("latin-1").split("\n")
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0]
        tokens = text.split()
        if not complete and number == len(lines):
            if text[-1:] and not text[-1:].isspace():
                tokens = tokens[:-1]  # the read may have cut the last token short
            if not tokens:
                return None  # one very long token: nothing to judge by, let the reader decide
        if not tokens:
            continue
        if "\x00" in line:
            # NUL before any data: binary. After a data line: corruption, for the check to report.
            return "binary file"
        if not _LABEL_RE.match(tokens[0]):
            return f"not LIBSVM data (line {number} starts {tokens[0][:20]!r})"
        bad = next((t for t in tokens[1:] if not _FEATURE_RE.match(t)), None)
        if bad is not None:
            return f"not LIBSVM data (line {number}: {bad[:20]!r} is not index:value)"
        return None
    return "empty" if not head.strip() else "no data line (only comments)"


def read_path_list(source: str, memory_limit: int | None = None) -> list[str]:
    """``--files-from``: one path a line (``-``: stdin), blanks ignored. Any bytes but NUL
    (undecodable ones as Python keeps file names), at most MAX_PATH_BYTES; read in chunks within
    :func:`kcheck.io.ownformat.byte_cap` of PATH_LIST_BYTES, so ``/dev/zero`` fails at line one and
    an endless stream at the cap."""
    what = "a --files-from list of paths"
    shown = "<stdin>" if source == STDIN else source
    f = _stdin_bytes() if source == STDIN else open_input(source, what)
    paths: list[str] = []
    try:
        lines = iter_lines(
            f,
            shown,
            line_cap=MAX_PATH_BYTES,
            total_cap=byte_cap(PATH_LIST_BYTES, memory_limit),
            what=what,
        )
        for lineno, raw in lines:
            if raw is None:
                raise DataFormatError(
                    shown, lineno, f"longer than {MAX_PATH_BYTES:,} bytes: not a path"
                )
            if b"\0" in raw:
                raise DataFormatError(shown, lineno, "a NUL byte: not a path")
            path = os.fsdecode(raw.removesuffix(b"\r"))
            if path.strip():
                paths.append(path)
    finally:
        if source != STDIN:
            f.close()
    return paths


def _stdin_bytes() -> IO[bytes]:
    """Standard input as bytes (a text stand-in, as in tests, through its text)."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        return buffer  # type: ignore[no-any-return]
    return io.BytesIO(sys.stdin.read().encode("utf-8", "surrogateescape"))


def _walk(top: str) -> Iterator[str]:
    for root, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(files):
            yield os.path.join(root, name)


def paired_test_names(base: str) -> list[str]:
    """Possible test file names of ``base`` (compression stripped), best first: ``a9a`` ->
    ``a9a.t``, ``a9a.test``; ``sector.scale`` also -> ``sector.t.scale``, ``sector.test.scale``."""
    names = [base + suffix for suffix in TEST_SUFFIXES]
    if base.endswith(SCALE_SUFFIX) and len(base) > len(SCALE_SUFFIX):
        stem = base[: -len(SCALE_SUFFIX)]
        names += [stem + suffix + SCALE_SUFFIX for suffix in TEST_SUFFIXES]
    return names


def paired_train_names(base: str) -> list[str]:
    """The inverse of :func:`paired_test_names`: the training files ``base`` may be a test of."""
    names = []
    for suffix in TEST_SUFFIXES:
        if base.endswith(suffix) and len(base) > len(suffix):
            names.append(base[: -len(suffix)])
        marked = suffix + SCALE_SUFFIX
        if base.endswith(marked) and len(base) > len(marked):
            names.append(base[: -len(marked)] + SCALE_SUFFIX)
    return names


def _test_on_disk(path: str, excluded: set[str]) -> str | None:
    """The test file beside an explicitly named training file, as a directory walk pairs it."""
    directory, base = os.path.dirname(path), strip_compression(os.path.basename(path))
    for name in paired_test_names(base):
        for compression in ("", *COMPRESSION_SUFFIXES):
            candidate = os.path.join(directory, name + compression)
            if os.path.isfile(candidate) and os.path.realpath(candidate) not in excluded:
                return candidate
    return None


def discover(paths: Iterable[str], *, exclude: Iterable[str] = ()) -> Discovery:
    """Find the data sets in ``paths``: directories walked, files taken as named.

    Checked (:func:`skip_reason`): named files, and under directories files with a data-file
    extension (``.svm``, ``.t``, ``.scale``...) or none, unless plainly not data (``README.md``,
    ``.json``, images); other files if their first line is LIBSVM data. Every file left out is in
    ``skipped`` with its reason. ``-`` is stdin, a data set of its own.

    Pairing: ``name.t`` or ``name.test`` (``name.t.scale`` for ``name.scale``) beside ``name`` is
    its test file, not checked alone (also when only ``name`` was named); one without a training
    file is checked alone. KcheckError for a missing path."""
    excluded = {os.path.realpath(p) for p in exclude}
    candidates, stdin = _candidates(paths, excluded)
    found, skipped = _sort_out(candidates)
    pairs = _pair(found, excluded, skipped)
    names = _unique_names([found[i][0] for i, _ in pairs])
    datasets = [
        DataSet(name=name, train=found[i][0], test=t)
        for name, (i, t) in zip(names, pairs, strict=True)
    ]
    if stdin:
        datasets.insert(0, DataSet(name=STDIN_NAME, train=STDIN))
    return Discovery(datasets=datasets, skipped=skipped)


def _candidates(
    paths: Iterable[str], excluded: set[str]
) -> tuple[dict[str, tuple[str, bool]], bool]:
    """Every file once (by real path) as spelled, whether named explicitly; whether ``-`` was."""
    candidates: dict[str, tuple[str, bool]] = {}
    stdin = False
    for top in paths:
        if top == STDIN:
            if stdin:
                raise KcheckError("- (standard input) is named twice")
            stdin = True
            continue
        if os.path.isdir(top):
            files = [(p, False) for p in _walk(top)]
        elif os.path.exists(top):
            files = [(top, True)]
        else:
            raise KcheckError(f"{top}: no such file or directory")
        for path, explicit in files:
            real = os.path.realpath(path)
            if real in excluded:
                continue
            if real in candidates:
                first, was_explicit = candidates[real]
                candidates[real] = (
                    path if explicit and not was_explicit else first,
                    was_explicit or explicit,
                )
            else:
                candidates[real] = (path, explicit)
    return candidates, stdin


def _sort_out(
    candidates: dict[str, tuple[str, bool]],
) -> tuple[list[_Found], list[tuple[str, str]]]:
    """The candidates that are checked, and (path, reason) for those that are not."""
    found: list[_Found] = []
    skipped: list[tuple[str, str]] = []
    for real, (path, explicit) in candidates.items():
        if not os.path.isfile(real) and not explicit:
            skipped.append((path, "not a regular file"))
            continue
        reason = skip_reason(path, explicit=explicit)
        if reason is not None:
            skipped.append((path, reason))
        else:
            found.append((path, real, explicit))
    return found, skipped


def _tests_beside(found: Sequence[_Found]) -> tuple[dict[int, list[tuple[int, int]]], set[int]]:
    """Per training file its test files as (rank in :func:`paired_test_names`, index); all tests."""
    # (directory, base name without compression) -> indices.
    by_dir: dict[tuple[str, str], list[int]] = {}
    for i, (_, real, _) in enumerate(found):
        key = (os.path.dirname(real), strip_compression(os.path.basename(real)))
        by_dir.setdefault(key, []).append(i)
    test_of: dict[int, list[tuple[int, int]]] = {}
    is_test: set[int] = set()
    for i, (_, real, _) in enumerate(found):
        directory, base = os.path.dirname(real), strip_compression(os.path.basename(real))
        for train_base in paired_train_names(base):
            trains = by_dir.get((directory, train_base), [])
            if trains:
                is_test.add(i)
                rank = paired_test_names(train_base).index(base)
                for t in trains:
                    test_of.setdefault(t, []).append((rank, i))
    return test_of, is_test


def _pair(
    found: Sequence[_Found], excluded: set[str], skipped: list[tuple[str, str]]
) -> list[tuple[int, str | None]]:
    """(index, test file) of every data set; a test file left unused is added to ``skipped``."""
    test_of, is_test = _tests_beside(found)
    pairs: list[tuple[int, str | None]] = []
    used_tests: set[int] = set()
    for i, (path, _, explicit) in enumerate(found):
        if i in is_test:
            continue
        options = sorted(test_of.get(i, []))
        test: str | None = None
        if options:
            used_tests.add(options[0][1])
            test = found[options[0][1]][0]
        elif explicit:
            test = _test_on_disk(path, excluded)
        pairs.append((i, test))
    for i in sorted(is_test - used_tests):
        skipped.append((found[i][0], "another test file of the same data set is used"))
    return pairs


def _unique_names(paths: Sequence[str]) -> list[str]:
    """File name without compression suffix; the path where that name would be ambiguous."""
    candidates: list[Callable[[str], str]] = [
        lambda p: strip_compression(os.path.basename(p)),
        lambda p: strip_compression(os.path.normpath(p)),
        lambda p: os.path.normpath(p),
    ]
    names = [candidates[0](p) for p in paths]
    for fn in candidates[1:]:
        counts: dict[str, int] = {}
        for n in names:
            counts[n] = counts.get(n, 0) + 1
        if all(c == 1 for c in counts.values()):
            break
        names = [fn(p) if counts[n] > 1 else n for p, n in zip(paths, names, strict=True)]
    return names
