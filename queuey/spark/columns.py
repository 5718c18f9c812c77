"""Message pages as columns: ids as hex text and timestamps, without a loop per row.

A :class:`~queuey.model.MessagePage` carries its ids as concatenated 16-byte
version-1 UUIDs; numpy reads their fields in place.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from queuey import ids
from queuey.model import MessagePage

#: Two hex digits for every byte value: ids become text without a per-row loop.
_HEX = np.array([f"{i:02x}".encode() for i in range(256)], dtype="S2")
#: A version-1 UUID's fields as stored (big-endian).
_UUID = np.dtype([("low", ">u4"), ("mid", ">u2"), ("high", ">u2"), ("rest", "V8")])


def page_micros(raw_ids: bytes) -> np.ndarray:
    """The timestamps (microseconds, int64) of concatenated 16-byte version-1 ids."""
    fields = np.frombuffer(raw_ids, dtype=_UUID)
    ticks = (
        ((fields["high"].astype(np.int64) & 0x0FFF) << 48)
        | (fields["mid"].astype(np.int64) << 32)
        | fields["low"].astype(np.int64)
    )
    return (ticks - ids.UUID_EPOCH_OFFSET) // 10


def page_hex(raw_ids: bytes) -> pa.Array:
    """Concatenated 16-byte ids as an Arrow string array of 32 hex digits each."""
    count = len(raw_ids) // 16
    digits = _HEX[np.frombuffer(raw_ids, dtype=np.uint8)].tobytes()
    offsets = np.arange(0, 32 * count + 1, 32, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(digits)]
    )


def page_bodies(bodies) -> pa.Array:
    """UTF-8 bodies as an Arrow string array (the store keeps valid text: no check)."""
    return pa.array(bodies, type=pa.binary()).view(pa.string())


def keep_ids(page: MessagePage, wanted: pa.Array) -> MessagePage | None:
    """The messages of ``page`` whose hex id is in ``wanted`` (None when none is)."""
    mask = pc.is_in(page_hex(page.ids), value_set=wanted).to_numpy(zero_copy_only=False)
    chosen = np.flatnonzero(mask)
    if not len(chosen):
        return None
    if len(chosen) == len(page):
        return page
    raw = np.frombuffer(page.ids, dtype="V16")[chosen].tobytes()
    return replace(page, ids=raw, bodies=[page.bodies[i] for i in chosen])
