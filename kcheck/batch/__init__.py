"""Batch runs: find the LIBSVM files under directories, check each data set, write JSON lines.

The pieces, each usable on its own:

* :mod:`~kcheck.batch.discovery`: :func:`discover` walks directories (sorted, so the order is
  always the same), decides for every file whether it is data, and pairs ``name`` with
  ``name.t`` (or ``name.test``; ``name.scale`` with ``name.t.scale``) as training and test
  file. Only files that are plainly not data are skipped, and every skip is reported.
* :mod:`~kcheck.batch.lines`: :func:`check_one` runs the check on one data set and returns its
  JSON line; it never raises for a problem of that data set, it records it.
* :mod:`~kcheck.batch.runners`: :func:`run_batch` checks every data set, serially in this
  process, in worker processes or on a Dask cluster, and writes each line as soon as that
  data set is done, through :class:`LineWriter` (:mod:`~kcheck.batch.writer`: a lock, a
  ``FILE.partial`` synced line by line, renamed over ``FILE`` at the end). ``resume`` reuses
  a saved line only while its key (:mod:`~kcheck.batch.resume`) is the same.
* :mod:`~kcheck.batch.progress`: what a batch reports while it runs, as typed events.

Nothing here prints; progress goes through callbacks, so the CLI alone decides what to show.
"""

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

# The runners' internals above, and this, stay importable from here: the tests drive the
# runners directly, with tasks that kill their worker.
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
