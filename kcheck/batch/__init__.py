"""Batch runs: find the LIBSVM files under directories, check each data set, write JSON lines.
Nothing prints; progress goes through callbacks.

* :mod:`~kcheck.batch.discovery`: :func:`discover` walks directories (sorted), decides which
  files are data (every skip reported) and pairs ``name`` with ``name.t`` / ``name.test``.
* :mod:`~kcheck.batch.lines`: :func:`check_one` checks one data set into its JSON line,
  recording (never raising) that data set's problems.
* :mod:`~kcheck.batch.runners`: :func:`run_batch` checks every data set (here, in workers or on
  Dask) and writes each line when done through :class:`LineWriter` (:mod:`~kcheck.batch.writer`);
  ``resume`` reuses a line while its key (:mod:`~kcheck.batch.resume`) holds.
* :mod:`~kcheck.batch.progress`: what a batch reports while it runs, as typed events."""

from __future__ import annotations

from kcheck.batch.discovery import (
    COMPRESSION_SUFFIXES,
    DATA_EXTENSIONS,
    SCALE_SUFFIX,
    SKIP_EXTENSIONS,
    SKIP_STEMS,
    SNIFF_BYTES,
    STDIN,
    STDIN_NAME,
    TEST_SUFFIXES,
    DataSet,
    Discovery,
    discover,
    has_data_name,
    name_skip_reason,
    paired_test_names,
    paired_train_names,
    skip_reason,
    sniff,
    strip_compression,
)
from kcheck.batch.lines import check_one, error_line, error_message, skip_line
from kcheck.batch.progress import DATA_SETS, BatchProgress, BatchReport, no_report
from kcheck.batch.resume import KEYED_WHEN_SET, NOT_KEYED, keyed_options, resume_key
from kcheck.batch.runners import (
    BatchResult,
    CheckCancelled,
    check_remote,
    cluster_config,
    plan,
    run_batch,
)
from kcheck.batch.runners import _by_path as _by_path
from kcheck.batch.runners import _run_cluster as _run_cluster
from kcheck.batch.runners import _run_parallel as _run_parallel
from kcheck.batch.writer import LineWriter, read_results

# Runner internals stay importable here: tests drive the runners with tasks that kill their worker.
_noop = no_report

__all__ = [
    "COMPRESSION_SUFFIXES",
    "DATA_EXTENSIONS",
    "DATA_SETS",
    "KEYED_WHEN_SET",
    "NOT_KEYED",
    "SCALE_SUFFIX",
    "SKIP_EXTENSIONS",
    "SKIP_STEMS",
    "SNIFF_BYTES",
    "STDIN",
    "STDIN_NAME",
    "TEST_SUFFIXES",
    "BatchProgress",
    "BatchReport",
    "BatchResult",
    "CheckCancelled",
    "DataSet",
    "Discovery",
    "LineWriter",
    "check_one",
    "check_remote",
    "cluster_config",
    "discover",
    "error_line",
    "error_message",
    "has_data_name",
    "keyed_options",
    "name_skip_reason",
    "no_report",
    "paired_test_names",
    "paired_train_names",
    "plan",
    "read_results",
    "resume_key",
    "run_batch",
    "skip_line",
    "skip_reason",
    "sniff",
    "strip_compression",
]
