"""The spool's own files: owner-only whatever the umask, never written through a
symbolic link someone planted next to them (issue 39, defect 9).

The spool's directory is where an attacker with a foothold on the machine
would plant a link (``<spool>.new`` pointing at a file of the producer's, say):
each test checks the link's target is unchanged and the spool still works or
refuses with an error naming the path. No server: the clients here answer
in-process, like the service would.
"""

from __future__ import annotations

import errno
import logging
import os
import stat

import pytest

from queuey.client import NotFound, Spool, spoolfile
from queuey.client import spool as spool_module
from tests.support import wait_until

pytestmark = pytest.mark.unit

SECRET = b"the producer's other data\n"


class Stores:
    """A client whose every batch is stored."""

    def post_batch(self, queue, messages):
        return []


class Refuses:
    """A client whose every batch names a queue that does not exist (404)."""

    def post_batch(self, queue, messages):
        raise NotFound("no such queue", status=404, error_msg={"queue": "not found"})


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def modes(directory) -> dict[str, int]:
    return {p.name: mode(p) for p in sorted(directory.iterdir())}


def victim(tmp_path):
    """A file of the producer's outside the spool's directory, and its bytes."""
    target = tmp_path / "elsewhere" / "keep.txt"
    target.parent.mkdir()
    target.write_bytes(SECRET)
    return target


def spooled(directory, client=None, count: int = 3, **options) -> Spool:
    spool = Spool(client, directory / "s", start=False, linger=0, **options)
    for n in range(count):
        spool.post("q", {"n": n, "pad": "x" * 100})
    return spool


def test_every_file_the_spool_makes_is_0600_under_umask_022(tmp_path, umask_022, monkeypatch):
    monkeypatch.setattr(spool_module, "COMPACT_MIN", 0)
    directory = tmp_path / "spool"
    directory.mkdir()
    spooled(directory).close()
    path = directory / "s"
    record = spoolfile.message_record(99, 0.0, "q", {"body": {}, "dedup_id": "d"})
    path.write_bytes(path.read_bytes() + record[:20])  # a torn tail: <file>.torn
    before = os.stat(path).st_ino
    spool = Spool(Refuses(), path, linger=0)  # everything rejected: <file>.rejected
    assert spool.flush(10)
    spool.close()
    assert os.stat(path).st_ino != before  # compacted: a new file renamed in
    assert modes(directory) == {"s": 0o600, "s.lock": 0o600, "s.rejected": 0o600, "s.torn": 0o600}


def test_files_an_earlier_version_left_0644_are_set_back_to_0600(tmp_path, umask_022):
    directory = tmp_path / "spool"
    directory.mkdir()
    spooled(directory).close()
    for name in ("s.torn", "s.rejected"):
        (directory / name).write_bytes(b"{}\n")
    for p in directory.iterdir():
        p.chmod(0o644)
    Spool(None, directory / "s", start=False).close()
    assert set(modes(directory).values()) == {0o600}


@pytest.mark.parametrize("temporary", [".new", ".compact"])
def test_a_link_planted_at_a_temporary_is_removed_not_followed(
    tmp_path, monkeypatch, temporary, caplog
):
    monkeypatch.setattr(spool_module, "COMPACT_MIN", 0)
    caplog.set_level(logging.WARNING, logger="queuey.client.spooldisk")
    target = victim(tmp_path)
    directory = tmp_path / "spool"
    directory.mkdir()
    (directory / f"s{temporary}").symlink_to(target)
    spool = spooled(directory, Stores())  # ".new": the spool is created through it
    spool.start()
    assert spool.flush(10)  # ".compact": every record acknowledged, then compacted
    spool.close()
    assert target.read_bytes() == SECRET
    path = directory / "s"
    assert stat.S_ISREG(os.lstat(path).st_mode) and mode(path) == 0o600
    assert spoolfile.scan(path).sent == 3
    assert not os.path.lexists(directory / f"s{temporary}")
    assert f"removing a symbolic link at {directory / f's{temporary}'}" in caplog.text


@pytest.mark.parametrize("temporary", [".new", ".compact"])
def test_a_stale_temporary_left_by_a_crash_is_replaced(tmp_path, monkeypatch, temporary):
    monkeypatch.setattr(spool_module, "COMPACT_MIN", 0)
    (tmp_path / f"s{temporary}").write_bytes(b"half a file from before the crash")
    spool = spooled(tmp_path, Stores())
    spool.start()
    assert spool.flush(10)
    spool.close()
    assert spoolfile.scan(tmp_path / "s").sent == 3
    assert not os.path.lexists(tmp_path / f"s{temporary}")


@pytest.mark.parametrize("sidecar", [".torn", ".rejected", ".lock"])
def test_a_link_planted_at_a_sidecar_is_refused_when_the_spool_opens(tmp_path, sidecar):
    target = victim(tmp_path)
    directory = tmp_path / "spool"
    directory.mkdir()
    spool = spooled(directory)
    spool.close()
    path = directory / "s"
    whole = path.read_bytes()
    record = spoolfile.message_record(99, 0.0, "q", {"body": {}, "dedup_id": "d"})
    path.write_bytes(whole + record[:20])  # a torn tail the next open would move aside
    (directory / f"s{sidecar}").unlink(missing_ok=True)
    (directory / f"s{sidecar}").symlink_to(target)
    with pytest.raises(OSError, match="symbolic link") as refused:
        Spool(Refuses(), path)
    assert refused.value.errno == errno.ELOOP
    assert refused.value.filename == str(directory / f"s{sidecar}")
    assert target.read_bytes() == SECRET
    assert path.read_bytes() == whole + record[:20]  # the spool file untouched too


def test_a_dangling_link_at_the_lock_creates_nothing(tmp_path):
    directory = tmp_path / "spool"
    directory.mkdir()
    target = tmp_path / "created-by-whom.txt"
    (directory / "s.lock").symlink_to(target)
    with pytest.raises(OSError, match="symbolic link"):
        Spool(None, directory / "s", start=False)
    assert not target.exists() and not (directory / "s").exists()


def test_a_link_planted_at_rejected_while_running_keeps_the_message(tmp_path):
    target = victim(tmp_path)
    directory = tmp_path / "spool"
    directory.mkdir()
    spool = spooled(directory, Refuses(), count=1, backoff=0.01, max_backoff=0.05)
    (directory / "s.rejected").symlink_to(target)
    spool.start()
    wait_until(lambda: spool.stats().last_error is not None, what="the refused write noticed")
    stats = spool.stats()
    spool.close()
    assert "symbolic link" in stats.last_error and str(directory / "s.rejected") in stats.last_error
    assert stats.spooled == 1 and stats.rejected == 0  # kept, not dropped
    assert target.read_bytes() == SECRET


@pytest.mark.parametrize("dangling", [False, True])
def test_a_symlinked_spool_path_is_refused(tmp_path, dangling):
    other = tmp_path / "elsewhere"
    other.mkdir()
    if not dangling:
        spooled(other).close()  # another producer's spool
    before = (other / "s").read_bytes() if not dangling else None
    directory = tmp_path / "spool"
    directory.mkdir()
    (directory / "s").symlink_to(other / "s")
    with pytest.raises(OSError, match="symbolic link") as refused:
        Spool(None, directory / "s", start=False)
    assert refused.value.filename == str(directory / "s")
    if dangling:
        assert not (other / "s").exists()
    else:
        assert (other / "s").read_bytes() == before
    assert (directory / "s").is_symlink()  # left as found


@pytest.mark.timeout(30)  # opening a FIFO to read waits for a writer: it must not
def test_a_fifo_in_place_of_the_spool_is_refused_without_waiting(tmp_path):
    os.mkfifo(tmp_path / "s")
    with pytest.raises(OSError, match="not a regular file"):
        Spool(None, tmp_path / "s", start=False)
    with pytest.raises(OSError, match="not a regular file"):
        spoolfile.scan(tmp_path / "s")
