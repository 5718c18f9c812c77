"""Pure logic of the slice descriptors: planning, positions, time parsing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from queuey import ids
from queuey.ids import to_micros
from queuey.model import QueueMeta
from queuey.spark.connections import StorageConnection
from queuey.spark.positions import check_position, position_key
from queuey.spark.slices import Bounds, Slice, plan_partition

pytestmark = pytest.mark.unit

CONNECTION = StorageConnection("queuey.storage.sqlite", (("queuey.sqlite.path", "x"),))
META = QueueMeta("app", "q", partitions=2)


def covered(pieces: list[Slice], micros: int) -> list[Slice]:
    """The slices whose time bounds take a message at ``micros``."""
    return [
        p
        for p in pieces
        if (p.after_micros is None or micros > p.after_micros)
        and (p.until_micros is None or micros < p.until_micros)
    ]


@pytest.mark.parametrize("count", [1, 2, 3, 7, 50])
def test_slices_tile_the_range_exactly(count):
    first, last = 1_000_000, 1_000_997
    pieces = plan_partition(CONNECTION, META, Bounds(2, first, last), 5, 10, 2_000_000, count)
    assert len(pieces) == count
    assert pieces[0].after_micros == 10 and pieces[-1].until_micros == 2_000_000
    for micros in [11, first - 1, first, *range(first, last + 2), 1_999_999]:
        assert len(covered(pieces, micros)) == 1, micros
    assert covered(pieces, 10) == [] and covered(pieces, 2_000_000) == []


def test_open_ended_range_and_short_spans():
    pieces = plan_partition(CONNECTION, META, Bounds(1, 500, 502), 5, None, None, 10)
    assert len(pieces) == 3  # never slices shorter than a microsecond
    assert pieces[0].after_micros is None and pieces[-1].until_micros is None
    for micros in (0, 499, 500, 501, 502, 10**15):
        assert len(covered(pieces, micros)) == 1
    assert plan_partition(CONNECTION, META, Bounds(1, None, None), 5, None, None, 4) == []


def test_between_positions():
    message_id = ids.make_uuid(1_000, 0x010203040506, 7).hex
    piece = Slice.between(CONNECTION, META, 1, 9, 0, message_id)
    assert (piece.after_micros, piece.after_id, piece.until_id) == (0, None, message_id)
    piece = Slice.between(CONNECTION, META, 1, 9, message_id, 5_000)
    assert (piece.after_id, piece.until_micros) == (message_id, 5_001)


def test_position_order():
    early = ids.make_uuid(1_000, 0x010203040506, 7)
    same_micro = ids.make_uuid(1_000, 0x7F0203040506, 9)
    later = ids.make_uuid(1_001, 0x010203040506, 7)
    keys = [position_key(p) for p in (999, early.hex, 1_000, later.hex)]
    assert keys == sorted(keys)
    assert position_key(same_micro.hex) < position_key(1_000)
    assert check_position(early.hex.upper()) == early.hex
    for bad in (-1, True, 1.5, "nope", uuid.uuid4().hex, None):
        with pytest.raises(ValueError):
            check_position(bad)


def test_to_micros_is_exact():
    assert to_micros(1795290055.887276) == 1795290055887276
    assert to_micros("1795290055.887276") == 1795290055887276
    assert to_micros(17) == 17_000_000
    moment = datetime(2026, 11, 21, 19, 40, 55, 887276, tzinfo=UTC)
    assert to_micros(moment) == 1795290055887276
    assert to_micros(moment.astimezone(timezone(timedelta(hours=-5)))) == 1795290055887276
    with pytest.raises(ValueError):
        to_micros(datetime(2026, 11, 21))


def test_storage_connection_from_settings_is_hashable_and_keeps_queuey_keys():
    connection = StorageConnection.from_settings(
        {"queuey.storage.backend": "queuey.storage.sqlite", "queuey.sqlite.path": "/x", "here": "/"}
    )
    assert connection.backend == "queuey.storage.sqlite"
    settings = connection.settings_dict()
    assert settings["queuey.sqlite.path"] == "/x" and "here" not in settings
    assert "queuey.storage.backend" not in settings
    assert hash(connection) == hash(
        StorageConnection.from_settings(
            {"queuey.storage.backend": "queuey.storage.sqlite", "queuey.sqlite.path": "/x"}
        )
    )
