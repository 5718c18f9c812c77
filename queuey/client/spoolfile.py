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

Reading (:func:`scan`) never writes, so ``queuey spool status`` may read a file
a producer is appending to: an incomplete last record is then simply the one
being written. :func:`rewrite` makes the compacted copy.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = b"QSPOOL1\n"
FRAME = struct.Struct(">IIc")
SEQ = struct.Struct(">Q")
STAMP = struct.Struct(">d")
MESSAGE_HEAD = struct.Struct(">Qd")
#: Longest payload a frame may announce; a larger length is damage, not data.
MAX_PAYLOAD = 64 * 2**20

HEADER, MESSAGE, ACKED, REJECTED, TORN = b"H", b"M", b"A", b"R", b"T"
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


def decode_message(payload: bytes) -> tuple[str, dict]:
    """The queue and the batch entry of an ``M`` record's payload."""
    data = json.loads(payload[MESSAGE_HEAD.size :])
    return data["q"], data["e"]


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


class BadSpoolFile(ValueError):
    """The file is not a spool file (no magic, or no readable header)."""


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
    """Read a whole spool file without changing it (see the module doc)."""
    with open(path, "rb") as f:
        data = f.read()
    return scan_bytes(data)


def scan_bytes(data: bytes) -> SpoolImage:
    if not data.startswith(MAGIC):
        raise BadSpoolFile("not a spool file (no QSPOOL1 magic)")
    records = frames(data, len(MAGIC))
    first = next(records, None)
    if first is None or first[1] != HEADER:
        raise BadSpoolFile("the spool file has no readable header")
    info = json.loads(first[2])
    image = SpoolImage(
        spool_id=info["spool_id"],
        first_seq=int(info["first_seq"]),
        next_seq=int(info["first_seq"]),
        pending={},
        sent=int(info.get("sent", 0)),
        rejected=int(info.get("rejected", 0)),
        torn=int(info.get("torn", 0)),
        end=len(MAGIC) + FRAME.size + len(first[2]),
        torn_bytes=0,
        dead_bytes=FRAME.size + len(first[2]),
    )
    for offset, kind, payload in records:
        size = FRAME.size + len(payload)
        image.end = offset + size
        if kind == MESSAGE:
            seq, spooled = MESSAGE_HEAD.unpack_from(payload)
            queue = json.loads(payload[MESSAGE_HEAD.size :])["q"]
            image.pending[seq] = Pending(seq, queue, spooled, offset, size)
            image.next_seq = max(image.next_seq, seq + 1)
            continue
        image.dead_bytes += size
        if kind in (ACKED, REJECTED):
            (when,) = STAMP.unpack_from(payload)
            count = 0
            for i in range(STAMP.size, len(payload), SEQ.size):
                gone = image.pending.pop(SEQ.unpack_from(payload, i)[0], None)
                if gone is not None:
                    image.dead_bytes += gone.size
                    count += 1
            if kind == ACKED:
                image.sent += count
                image.ack_times.append((when, count))
            else:
                image.rejected += count
        elif kind == TORN:
            image.torn += SEQ.unpack_from(payload, STAMP.size)[0]
    image.torn_bytes = len(data) - image.end
    return image


def create(path: Path, spool_id: str) -> None:
    """A new, empty spool file, durable (the file and its directory entry)."""
    tmp = path.with_name(path.name + ".new")
    with open(tmp, "wb") as f:
        f.write(MAGIC + header_record(spool_id, 0, {"sent": 0, "rejected": 0, "torn": 0}))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    sync_directory(path.parent)


def rewrite(
    path: Path, source_fd: int, image_header: bytes, pending: list[Pending]
) -> dict[int, int]:
    """Compact: write ``image_header`` and the ``pending`` records (copied from
    ``source_fd``) to a new file, fsync it, rename it over ``path`` and fsync
    the directory. A crash at any point leaves either the old file or the new
    one, both complete. Returns each pending record's new offset."""
    tmp = path.with_name(path.name + ".compact")
    offsets: dict[int, int] = {}
    with open(tmp, "wb") as out:
        out.write(MAGIC + image_header)
        position = len(MAGIC) + len(image_header)
        for run in _runs(pending):
            start, stop = run[0].offset, run[-1].offset + run[-1].size
            out.write(os.pread(source_fd, stop - start, start))
            for p in run:
                offsets[p.seq] = position + (p.offset - start)
            position += stop - start
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    sync_directory(path.parent)
    return offsets


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


def sync_directory(directory: Path) -> None:
    """fsync a directory, so a file created or renamed in it survives a crash."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
