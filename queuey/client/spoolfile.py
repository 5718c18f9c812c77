"""The spool's file format: an append-only log of framed, checksummed records.

A spool file is :data:`MAGIC` followed by records. Every record is framed as::

    length (4 bytes, big-endian) | crc32 (4 bytes) | kind (1 byte) | payload

where ``length`` counts the payload and the CRC-32 covers the kind byte and
the payload, so a record cut short by a crash (a torn write) or damaged on
disk is recognised and nothing after it is trusted. The kinds:

``H`` (header, always the first record)
    JSON: ``spool_id`` (random, kept for the file's life: every ``dedup_id``
    starts with it), ``first_seq`` (sequence numbers below it were used
    before the last compaction) and the running totals ``sent``,
    ``rejected`` and ``torn`` carried over by compactions.
``M`` (message)
    sequence number (8 bytes), the time it was spooled (a double, seconds
    since the epoch), then JSON ``{"q": queue, "e": entry}`` where ``entry``
    is the message as ``POST /queue/{name}/batch`` takes it, ``dedup_id``
    included.
``A`` (acknowledged) and ``R`` (rejected)
    the time (a double), then the sequence numbers (8 bytes each) the service
    stored, or refused for good. Their messages are dead from then on.
``T`` (torn)
    the time and the number of torn tails (1) dropped when the file was
    opened; they count in the ``torn`` total.

A record whose checksum fails ends the valid part of the file: it is the one
a crash cut short (the tail after it is torn). A record whose checksum holds
was written whole, so one that is malformed all the same (a field cut short,
a wrong type, bad JSON or UTF-8, an unknown kind, a value out of range, a
sequence number that does not grow) is no torn write: reading the file raises
:class:`BadSpoolFile`, naming the file and the record's offset, wherever the
record lies.

Reading (:func:`scan`) never writes, so ``queuey spool status`` may read a file
a producer is appending to: an incomplete last record is then simply the one
being written. :func:`rewrite` makes the compacted copy. The files are opened
through :mod:`queuey.client.spooldisk` (mode ``0600``, no symbolic links).
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from queuey.client import spooldisk
from queuey.client.errors import ClientError
from queuey.client.spoolentry import check_stored

MAGIC = b"QSPOOL1\n"
FRAME = struct.Struct(">IIc")
SEQ = struct.Struct(">Q")
STAMP = struct.Struct(">d")
MESSAGE_HEAD = struct.Struct(">Qd")
#: Longest payload a frame may announce; a larger length is damage, not data.
MAX_PAYLOAD = 64 * 2**20

HEADER, MESSAGE, ACKED, REJECTED, TORN = b"H", b"M", b"A", b"R", b"T"
KIND_NAMES = {
    HEADER: "header",
    MESSAGE: "message",
    ACKED: "acknowledged",
    REJECTED: "rejected",
    TORN: "torn",
}
#: Spool ids: what :func:`create` makes (16 hex digits), within reason.
SPOOL_ID = re.compile(r"[0-9A-Za-z]{1,64}")
#: Bound of sequence numbers and totals: ``next_seq`` must still pack in 8 bytes.
MAX_COUNT = 2**63 - 1
#: Seconds of acknowledgements the status command's ``send_rate`` covers.
RATE_WINDOW = 60.0


def frame(kind: bytes, payload: bytes) -> bytes:
    """One record, ready to append."""
    return FRAME.pack(len(payload), zlib.crc32(kind + payload), kind) + payload


def header_record(spool_id: str, first_seq: int, totals: dict[str, int]) -> bytes:
    info = {"spool_id": spool_id, "first_seq": first_seq, **totals}
    return frame(HEADER, json.dumps(info, sort_keys=True).encode())


def message_record(seq: int, spooled: float, queue: str, entry: dict) -> bytes:
    data = json.dumps({"q": queue, "e": entry}, separators=(",", ":"), allow_nan=False)
    return frame(MESSAGE, MESSAGE_HEAD.pack(seq, spooled) + data.encode())


def marks_record(kind: bytes, when: float, seqs: Iterable[int]) -> bytes:
    """An ``A`` (acknowledged) or ``R`` (rejected) record for ``seqs``."""
    return frame(kind, STAMP.pack(when) + b"".join(SEQ.pack(s) for s in seqs))


def torn_record(when: float) -> bytes:
    return frame(TORN, STAMP.pack(when) + SEQ.pack(1))


def decode_message(payload: bytes) -> tuple[int, float, str, dict]:
    """The sequence number, spool time, queue and batch entry of an ``M``
    record's payload. Raises ``ValueError`` saying what is malformed."""
    if len(payload) < MESSAGE_HEAD.size:
        raise ValueError(f"{len(payload)} bytes, shorter than its {MESSAGE_HEAD.size}-byte head")
    seq, spooled = MESSAGE_HEAD.unpack_from(payload)
    _check_count("sequence number", seq)
    _check_time(spooled)
    data = _json(memoryview(payload)[MESSAGE_HEAD.size :])
    if not isinstance(data, dict) or set(data) != {"q", "e"}:
        raise ValueError('not a {"q": queue, "e": entry} object')
    check_stored(data["q"], data["e"])
    return seq, spooled, data["q"], data["e"]


def decode_header(payload: bytes) -> dict[str, Any]:
    """The header's fields: ``spool_id`` and ``first_seq``, the totals
    (0 when absent). Raises ``ValueError`` saying what is malformed."""
    info = _json(payload)
    if not isinstance(info, dict):
        raise ValueError("not a JSON object")
    spool_id = info.get("spool_id")
    if not isinstance(spool_id, str) or not SPOOL_ID.fullmatch(spool_id):
        raise ValueError("spool_id: must be 1 to 64 letters or digits")
    fields = {"spool_id": spool_id, "first_seq": info.get("first_seq")}
    for name in ("sent", "rejected", "torn"):
        fields[name] = info.get(name, 0)
    for name, value in fields.items():
        if name != "spool_id":
            _check_count(name, value)
    return fields


def _json(raw: bytes | memoryview) -> Any:
    """Strict JSON of UTF-8 text (no NaN or Infinity); ``ValueError`` otherwise."""
    try:
        return _DECODER.decode(str(raw, "utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise ValueError("not JSON (nested too deep)") from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def _check_count(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_COUNT:
        raise ValueError(f"{name}: must be a whole number, 0 to 2**63-1")


def _check_time(value: float) -> None:
    if not math.isfinite(value):
        raise ValueError(f"time: {value} is not a time")


@dataclass
class Pending:
    """A spooled message not yet acknowledged: where its record lies in the file."""

    seq: int
    queue: str
    spooled: float
    offset: int  # of the frame
    size: int  # of the frame, header included


@dataclass
class SpoolImage:
    """What a spool file holds, as :func:`scan` read it.

    ``pending``: live messages in spool order; ``end``: the length of the
    valid prefix; ``torn_bytes``: the bytes after it (a torn or damaged tail,
    or on a live file the record being written); ``dead_bytes``: bytes of
    records no longer needed (acknowledged or rejected messages, marks).
    """

    spool_id: str
    first_seq: int
    next_seq: int
    pending: dict[int, Pending]
    sent: int
    rejected: int
    torn: int
    end: int
    torn_bytes: int
    dead_bytes: int
    ack_times: list[tuple[float, int]] = field(default_factory=list)

    @property
    def live_bytes(self) -> int:
        return sum(p.size for p in self.pending.values())

    def send_rate(self, now: float, window: float = RATE_WINDOW) -> float:
        """Messages acknowledged per second over the last ``window`` seconds."""
        recent = sum(n for when, n in self.ack_times if now - when <= window)
        return recent / window


class BadSpoolFile(ClientError, ValueError):
    """The file is no spool file the spool can trust: no magic, no readable
    header, or a record whose checksum holds but whose content is malformed
    (truncated fields, wrong types, bad JSON or UTF-8, an unknown record type,
    values out of range), which no torn write makes. ``path`` names the file
    and ``offset`` the record's frame (None: the file as a whole)."""

    def __init__(self, reason: str, *, path: str | None = None, offset: int | None = None):
        where = path or "the spool file"
        if offset is not None:
            where += f", record at offset {offset}"
        text = f"{where}: {reason}".replace("\n", " ")
        super().__init__(text, error_msg={"spool": "bad file"})
        self.reason, self.path, self.offset = reason, path, offset


def frames(data: bytes | memoryview, start: int) -> Iterator[tuple[int, bytes, bytes]]:
    """``(offset, kind, payload)`` of every valid record from ``start`` on; stops
    at the first incomplete or damaged one."""
    offset, size = start, len(data)
    while offset + FRAME.size <= size:
        length, crc, kind = FRAME.unpack_from(data, offset)
        end = offset + FRAME.size + length
        if length > MAX_PAYLOAD or end > size:
            return
        payload = bytes(data[offset + FRAME.size : end])
        if zlib.crc32(kind + payload) != crc:
            return
        yield offset, kind, payload
        offset = end


def scan(path: str | Path) -> SpoolImage:
    """Read a whole spool file without changing it (see the module doc).
    Raises :class:`BadSpoolFile`, or ``OSError`` (a symbolic link is refused)."""
    fd = spooldisk.open_file(path, os.O_RDONLY, keep_mode=True)
    try:
        return scan_fd(fd, str(path))
    finally:
        os.close(fd)


def scan_fd(fd: int, path: str | None = None) -> SpoolImage:
    """:func:`scan` of the file open on ``fd``, named ``path`` in errors."""
    data = spooldisk.read_all(fd)
    if not data.startswith(MAGIC):
        raise BadSpoolFile("not a spool file (no QSPOOL1 magic)", path=path)
    records = frames(data, len(MAGIC))
    first = next(records, None)
    if first is None or first[1] != HEADER:
        raise BadSpoolFile("the spool file has no readable header", path=path)
    try:
        info = decode_header(first[2])
    except ValueError as exc:
        raise BadSpoolFile(f"header record: {exc}", path=path, offset=len(MAGIC)) from exc
    image = SpoolImage(
        **info,  # spool_id, first_seq and the totals
        next_seq=info["first_seq"],
        pending={},
        end=len(MAGIC) + FRAME.size + len(first[2]),
        torn_bytes=0,
        dead_bytes=FRAME.size + len(first[2]),
    )
    last_seq = -1
    for offset, kind, payload in records:
        try:
            if kind == MESSAGE:
                seq, spooled, queue, _ = decode_message(payload)
                if seq <= last_seq:
                    raise ValueError(f"sequence number {seq} after {last_seq}")
                last_seq = seq
                size = FRAME.size + len(payload)
                image.pending[seq] = Pending(seq, queue, spooled, offset, size)
                image.next_seq = max(image.next_seq, seq + 1)
            else:
                _apply_mark(image, kind, payload)
        except ValueError as exc:
            what = KIND_NAMES.get(kind, "a")
            raise BadSpoolFile(f"{what} record: {exc}", path=path, offset=offset) from exc
        image.end = offset + FRAME.size + len(payload)
    image.torn_bytes = len(data) - image.end
    return image


def _apply_mark(image: SpoolImage, kind: bytes, payload: bytes) -> None:
    """Count an ``A``, ``R`` or ``T`` record into ``image``; ``ValueError``
    for anything else or a malformed one."""
    if kind in (ACKED, REJECTED):
        seqs = len(payload) - STAMP.size
        if seqs < SEQ.size or seqs % SEQ.size:
            raise ValueError(f"{len(payload)} bytes: not a time and sequence numbers")
        (when,) = STAMP.unpack_from(payload)
        _check_time(when)
        count = 0
        for i in range(STAMP.size, len(payload), SEQ.size):
            (seq,) = SEQ.unpack_from(payload, i)
            if seq >= image.next_seq:
                raise ValueError(f"marks sequence number {seq}, never spooled")
            gone = image.pending.pop(seq, None)
            if gone is not None:
                image.dead_bytes += gone.size
                count += 1
        if kind == ACKED:
            image.sent += count
            image.ack_times.append((when, count))
        else:
            image.rejected += count
    elif kind == TORN:
        if len(payload) != STAMP.size + SEQ.size:
            raise ValueError(f"{len(payload)} bytes, not {STAMP.size + SEQ.size}")
        when, (tails,) = STAMP.unpack_from(payload)[0], SEQ.unpack_from(payload, STAMP.size)
        _check_time(when)
        if not 1 <= tails <= 2**32:
            raise ValueError(f"{tails} torn tails")
        image.torn += tails
    elif kind == HEADER:
        raise ValueError("a second header")
    else:
        raise ValueError(f"unknown record type {kind!r}")
    image.dead_bytes += FRAME.size + len(payload)


def create(path: Path, spool_id: str) -> int:
    """A new, empty spool file, durable (the file and its directory entry),
    made as ``<file>.new`` and renamed; returns a descriptor on it
    (read-write, appending)."""
    data = MAGIC + header_record(spool_id, 0, {"sent": 0, "rejected": 0, "torn": 0})
    return _replace(path, ".new", data, [])[1]


def rewrite(
    path: Path, source_fd: int, image_header: bytes, pending: list[Pending]
) -> tuple[dict[int, int], int]:
    """Compact: write ``image_header`` and the ``pending`` records (copied from
    ``source_fd``) to ``<file>.compact``, fsync it, rename it over ``path`` and
    fsync the directory. A crash at any point leaves either the old file or the
    new one, both complete. Returns each pending record's new offset, and a
    descriptor on the new file (read-write, appending)."""
    return _replace(path, ".compact", MAGIC + image_header, pending, source_fd)


def _replace(
    path: Path, suffix: str, head: bytes, pending: list[Pending], source_fd: int = -1
) -> tuple[dict[int, int], int]:
    tmp = spooldisk.sidecar(path, suffix)
    fd = spooldisk.open_temporary(tmp)
    offsets: dict[int, int] = {}
    with spooldisk.closed_on_error(fd):
        spooldisk.write_all(fd, head)
        position = len(head)
        for run in _runs(pending):
            start, stop = run[0].offset, run[-1].offset + run[-1].size
            spooldisk.write_all(fd, os.pread(source_fd, stop - start, start))
            for p in run:
                offsets[p.seq] = position + (p.offset - start)
            position += stop - start
        os.fsync(fd)
        os.replace(tmp, path)
    spooldisk.sync_directory(path.parent)
    return offsets, fd


def _runs(pending: list[Pending]) -> Iterator[list[Pending]]:
    """Records lying back to back, so each run is copied with one read."""
    run: list[Pending] = []
    for p in pending:
        if run and run[-1].offset + run[-1].size != p.offset:
            yield run
            run = []
        run.append(p)
    if run:
        yield run
