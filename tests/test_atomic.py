import os
import stat
import threading

import pytest

from kcheck.errors import KcheckError
from kcheck.io.atomic import atomic_open, atomic_path, write_text


def test_replaces_whole_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    write_text(target, "new")
    assert target.read_text() == "new"
    assert os.listdir(tmp_path) == ["out.json"]


def test_failure_keeps_old_file(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_open(target) as f:
        f.write("half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.json"]


def test_keeps_permissions_of_replaced_file(tmp_path):
    target = tmp_path / "out"
    target.write_text("old")
    os.chmod(target, 0o640)
    write_text(target, "new")
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640


def test_symlink_target_is_replaced_not_the_link(tmp_path):
    real = tmp_path / "real"
    real.write_text("old")
    link = tmp_path / "link"
    link.symlink_to(real)
    write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_fifo_is_written_in_place(tmp_path):
    # Renaming over a device or pipe would replace the node itself (think -o /dev/null).
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()))
    reader.start()
    write_text(fifo, "through the pipe")
    reader.join(10)
    assert got == ["through the pipe"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(KcheckError, match=r"cannot write model file .*nodir/m: No such file"):
        with atomic_path(tmp_path / "nodir" / "m", "model file"):
            pass


def test_disk_full_is_a_clear_error(tmp_path, monkeypatch):
    real_open = open

    class Full:
        def __init__(self, f):
            self.f = f

        def write(self, s):
            raise OSError(28, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

    def fake_open(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        return Full(f) if "w" in mode else f

    target = tmp_path / "out"
    target.write_text("old")
    monkeypatch.setattr("builtins.open", fake_open)
    with pytest.raises(KcheckError, match="No space left on device"):
        write_text(target, "new")
    monkeypatch.undo()
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out"]


def test_a_temporary_lives_alone_in_a_private_directory(tmp_path):
    """So that an interrupted run can remove it for good (below)."""
    with atomic_path(tmp_path / "m", "model file") as tmp:
        directory = os.path.dirname(tmp)
        assert os.path.dirname(directory) == str(tmp_path)
        assert os.path.basename(directory).startswith(".m.") and directory.endswith(".tmp")
        assert os.listdir(directory) == ["m"]
        with open(tmp, "w") as f:
            f.write("model")
    assert os.listdir(tmp_path) == ["m"]


def test_nothing_can_appear_after_abandon(tmp_path, monkeypatch):
    """An interrupted run deletes its temporaries (abandon) and ends with os._exit; meanwhile a
    solver in a worker thread may finish and save to the temporary path it was given, or a
    writer ask for a new temporary. Neither may leave a file behind (``.m.XXXX.tmp`` did)."""
    from kcheck.io import atomic

    monkeypatch.setattr(atomic, "_commit_lock", threading.Lock())
    monkeypatch.setattr(atomic, "_live", set())
    with pytest.raises(atomic.Abandoned):
        with atomic.atomic_path(tmp_path / "m", "model file") as tmp:
            with open(tmp, "w") as f:
                f.write("half a model")
            atomic.abandon()
            with pytest.raises(FileNotFoundError):
                open(tmp, "w")  # what LIBSVM's svm_save_model does with the path it was given
            with atomic.atomic_path(tmp_path / "m.range", "range file"):
                pass  # not reached: no new temporary once abandoned
    with pytest.raises(atomic.Abandoned):
        with atomic.scratch_directory("kcheck-test-"):
            pass
    assert os.listdir(tmp_path) == []


def test_abandon_ends_with_the_lock_it_took(tmp_path, monkeypatch):
    """abandon() holds the commit lock for good; the state is that lock's, so a process that
    goes on (a test) with another lock writes as before."""
    from kcheck.io import atomic

    monkeypatch.setattr(atomic, "_commit_lock", threading.Lock())
    monkeypatch.setattr(atomic, "_live", set())
    atomic.abandon()
    monkeypatch.setattr(atomic, "_commit_lock", threading.Lock())
    write_text(tmp_path / "out", "new")
    assert (tmp_path / "out").read_text() == "new"
    assert os.listdir(tmp_path) == ["out"]


def test_a_signal_while_a_staging_directory_is_made_waits_until_abandon_can_find_it(
    tmp_path, monkeypatch
):
    """A Ctrl-C that lands between making a temporary's private directory and tracking it
    left the directory behind: the handler now holds it (atomic.defer_signal) until the
    directory is tracked, so the interrupt's clean-up (atomic.abandon) removes it."""
    import signal
    import tempfile

    from kcheck.io import atomic

    def handler(signum, frame):  # as kcheck's own: a held signal returns, else it interrupts
        if atomic.defer_signal(signum):
            return
        raise KeyboardInterrupt

    made = []
    real = tempfile.mkdtemp

    def mkdtemp(*args, **kwargs):
        made.append(real(*args, **kwargs))
        signal.raise_signal(signal.SIGINT)  # lands right after the directory exists
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    old = signal.signal(signal.SIGINT, handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            atomic._private_directory(str(tmp_path), ".out.")
    finally:
        signal.signal(signal.SIGINT, old)
    (directory,) = made
    try:
        assert directory in atomic._live  # what abandon() removes
    finally:
        atomic._track(directory, False)
        os.rmdir(directory)
