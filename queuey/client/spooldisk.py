"""How the spool opens its files: owner-only, never through a symbolic link.

A spool's files hold message bodies, and its directory may be shared (or
writable by someone else), so every file the spool creates or opens, the
spool itself, ``<file>.lock``, ``<file>.torn``, ``<file>.rejected`` and the
temporaries ``<file>.new`` and ``<file>.compact``, goes through this module:

* created mode ``0600`` whatever the umask, and a file of ours found with
  another mode (an earlier version made them ``0644``) is set back to
  ``0600`` when a spool opens it (:func:`guard` at start for the sidecars);
* opened with ``O_NOFOLLOW``: a symbolic link in the file's place is refused
  (``OSError``, ``ELOOP``) and its target is neither read nor written, and
  anything but a regular file (a directory, a FIFO) is refused too;
* a temporary is created with ``O_CREAT | O_EXCL``, after removing what a
  crash (or anyone) left at its name: ``unlink`` removes a link itself, never
  its target, and a link planted again in between makes the create fail.

The spool's directory may itself be reached through a link (``/var/spool``
often is); only the files' own names are never followed.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

#: The mode of every file the spool creates.
MODE = 0o600
#: Added to every open: no link followed, no descriptor leaked to children,
#: no wait on a FIFO planted in the file's place.
SAFE = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
#: The files kept next to a spool, by suffix (the temporaries ``.new`` and
#: ``.compact`` are made anew each time).
SIDECARS = (".lock", ".torn", ".rejected")


def sidecar(path: Path, suffix: str) -> Path:
    """``<file><suffix>``: a file kept next to the spool ``path``."""
    return path.with_name(path.name + suffix)


LINK = "a symbolic link (the spool follows none)"


def _refused(path: Path | str, why: str, code: int = errno.ELOOP) -> OSError:
    return OSError(code, f"refused: {why}", str(path))


def guard(*paths: Path) -> None:
    """Refuse (``OSError``) a symbolic link or other non-regular file at any
    of ``paths``; set those that are ours back to ``0600``. Missing ones are
    fine, and so is one this process may not read (it is not a link)."""
    for path in paths:
        try:
            os.close(open_file(path, os.O_RDONLY))
        except FileNotFoundError:
            continue
        except PermissionError:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                raise _refused(path, LINK) from None


def open_file(path: Path | str, flags: int, *, keep_mode: bool = False) -> int:
    """A descriptor on the regular file ``path`` (created ``0600`` with
    ``O_CREAT``; set back to ``0600`` if ours, unless ``keep_mode``), never
    through a symbolic link. Raises ``OSError``: the file's own
    (``FileNotFoundError``...) or a refusal naming the path."""
    try:
        fd = os.open(path, flags | SAFE, MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refused(path, LINK) from None
        raise
    with closed_on_error(fd):
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refused(path, "not a regular file", errno.EINVAL)
        mode = stat.S_IMODE(info.st_mode)
        if not keep_mode and mode != MODE and info.st_uid == os.geteuid():
            os.fchmod(fd, MODE)
    return fd


@contextlib.contextmanager
def closed_on_error(fd: int) -> Iterator[int]:
    """Close the descriptor ``fd`` when the block raises, and let the error through."""
    try:
        yield fd
    except BaseException:
        os.close(fd)
        raise


def open_temporary(path: Path) -> int:
    """A new, empty file at ``path`` (read-write, appending), created
    exclusively with mode ``0600`` after removing whatever was there."""
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            log.warning("removing a symbolic link at %s (not followed)", path)
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | SAFE, MODE)
    with closed_on_error(fd):
        os.fchmod(fd, MODE)  # the umask may have taken bits away
    return fd


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_all(fd: int) -> bytes:
    """Every byte of the file from its start (whatever is appended meanwhile
    up to the end found)."""
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def append_durably(path: Path, data: bytes) -> None:
    """Append ``data`` to the sidecar ``path`` and fsync it (and the directory
    when the file is new, so the entry survives a crash too)."""
    fd = open_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        new = os.fstat(fd).st_size == 0
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    if new:
        sync_directory(path.parent)


def sync_directory(directory: Path) -> None:
    """fsync a directory, so a file created or renamed in it survives a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
