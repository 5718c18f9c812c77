"""The client's records: the wire models, taken by position as the client's
dataclasses were, with the client's reading of absent fields."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from queuey.client import QueueInfo, QueueStats, ReceivedMessage, ReservedMessage
from queuey.wire import Message

MESSAGE_ID = "0123456789ab1def8123456789abcdef"


@pytest.mark.unit
def test_fields_by_position_in_the_old_order_and_keyword_only_by_name():
    info = QueueInfo("q", 2, 1_700_000_000, "public", 60, 30, 3, "q-dead", 0, consistency="weak")
    assert (info.name, info.visibility_timeout, info.consistency) == ("q", 30, "weak")
    leased = ReservedMessage(MESSAGE_ID, 1.5, 1, {"n": 1}, 4, {"k": "v"}, 2, "r", group="g")
    assert (leased.priority, leased.attributes, leased.group, leased.attempts) == (
        4,
        {"k": "v"},
        "g",
        2,
    )
    assert leased.ref == f"1:{MESSAGE_ID}" and isinstance(leased, ReceivedMessage)


@pytest.mark.unit
def test_a_field_twice_or_too_many_values_is_refused():
    with pytest.raises(TypeError, match="twice"):
        ReceivedMessage(MESSAGE_ID, 1.5, 1, {}, message_id=MESSAGE_ID)
    with pytest.raises(TypeError, match="positional"):
        ReceivedMessage(MESSAGE_ID, 1.5, 1, {}, 0, None, "group")


@pytest.mark.unit
def test_absent_or_empty_optional_fields_read_as_none_and_priority_zero():
    data = {"message_id": MESSAGE_ID, "timestamp": 1.5, "partition": 1, "body": {}}
    message = ReceivedMessage.from_json({**data, "attributes": {}, "group": ""})
    assert (message.priority, message.attributes, message.group) == (0, None, None)
    assert Message.model_validate(data).priority is None  # the wire: absent
    with pytest.raises(ValidationError):
        ReceivedMessage.from_json({**data, "message_id": "not-an-id"})


@pytest.mark.unit
def test_stats_keep_the_client_names():
    stats = QueueStats.from_json(
        {
            "status": "ok",
            "queue_name": "q",
            "messages": 1,
            "oldest_timestamp": 1.5,
            "partitions": [{"partition": 1, "messages": 1, "oldest_timestamp": 1.5}],
            "subscriptions": [],
            "newer_field": "ignored",
        }
    )
    assert stats.name == "q" and stats.subscription() is None
    assert stats.partitions[0].oldest_timestamp == 1.5
