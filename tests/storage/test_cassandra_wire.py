"""The peer-call codec (:mod:`queuey.storage.cassandra.wire`): every value
survives the trip through JSON exactly, every field is carried, and anything
of the wrong shape is refused with ``ValueError``. No Cassandra needed."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queuey import jsonio
from queuey.model import DeadLetter, Delivery, Message, MessageRef, QueueMeta, Reserved
from queuey.storage.asks import ExtendAsk, ReleaseAsk, ReserveAsk
from queuey.storage.cassandra import wire

#: Text the transport carries (it refuses lone surrogates, as the service does).
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
INTS = st.integers(min_value=-(2**80), max_value=2**80)
STR_MAPS = st.dictionaries(TEXT, TEXT, max_size=4)

MESSAGES = st.builds(
    Message,
    id=st.uuids(),
    timestamp=INTS,
    partition=INTS,
    body=TEXT,
    expires=INTS,
    priority=INTS,
    attributes=st.none() | STR_MAPS,
)
QUEUES = st.builds(
    QueueMeta,
    application=TEXT,
    name=TEXT,
    partitions=INTS,
    ttl=INTS,
    type=st.sampled_from(["public", "private"]),
    consistency=st.sampled_from(["weak", "strong", "very_strong"]),
    created=INTS,
    incarnation=TEXT,
    visibility_timeout=INTS,
    max_attempts=INTS,
    dead_letter_queue=st.none() | TEXT,
    delay=INTS,
    fifo=st.booleans(),
    attributes=STR_MAPS,
)
DELIVERIES = st.builds(
    Delivery, message=MESSAGES, attempts=INTS, receipt=TEXT, first_delivered=INTS
)
DEAD_LETTERS = st.builds(
    DeadLetter, message=MESSAGES, attempts=INTS, last_error=TEXT, claim=TEXT, generation=TEXT
)
RESERVED = st.builds(
    Reserved,
    deliveries=st.lists(DELIVERIES, max_size=3),
    dead_letters=st.lists(DEAD_LETTERS, max_size=3),
)
RESERVE_ASKS = st.builds(
    ReserveAsk,
    partitions=st.lists(INTS, max_size=5),
    limit=INTS,
    visibility_timeout=INTS,
    now_micros=INTS,
    settled_micros=INTS,
)
RELEASE_ASKS = st.builds(
    ReleaseAsk,
    receipts=st.lists(TEXT, max_size=5),
    now_micros=INTS,
    delay=INTS,
    error=st.none() | TEXT,
)
EXTEND_ASKS = st.builds(
    ExtendAsk, receipts=st.lists(TEXT, max_size=5), now_micros=INTS, visibility_timeout=INTS
)
STATUSES = st.dictionaries(TEXT, st.sampled_from(["acked", "expired", "unknown"]), max_size=5)
REFS = st.lists(st.builds(MessageRef, partition=INTS, id=st.uuids()), max_size=5)

#: (name, encoder, decoder, values): each type the codec carries.
CODECS: list[tuple[str, Callable[[Any], Any], Callable[[Any], Any], st.SearchStrategy]] = [
    ("queue", wire.encode_queue, wire.decode_queue, QUEUES),
    ("message", wire.encode_message, wire.decode_message, MESSAGES),
    ("delivery", wire.encode_delivery, wire.decode_delivery, DELIVERIES),
    ("dead letter", wire.encode_dead_letter, wire.decode_dead_letter, DEAD_LETTERS),
    ("dead letters", wire.encode_dead_letters, wire.decode_dead_letters, st.lists(DEAD_LETTERS)),
    ("reserved", wire.encode_reserved, wire.decode_reserved, RESERVED),
    ("reserve ask", wire.encode_reserve_ask, wire.decode_reserve_ask, RESERVE_ASKS),
    ("release ask", wire.encode_release_ask, wire.decode_release_ask, RELEASE_ASKS),
    ("extend ask", wire.encode_extend_ask, wire.decode_extend_ask, EXTEND_ASKS),
    ("statuses", wire.encode_statuses, wire.decode_statuses, STATUSES),
    ("receipts", wire.encode_receipts, wire.decode_receipts, st.lists(TEXT)),
    ("refs", wire.encode_refs, wire.decode_refs, REFS),
]
IDS = [c[0] for c in CODECS]

#: Any JSON value, to throw at decoders.
JSON = st.recursive(
    st.none() | st.booleans() | INTS | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=10,
)


def through_json(value: Any) -> Any:
    """What the other process decodes: the value as the transport carries it."""
    return jsonio.loads(jsonio.dumps_bytes(value))


@pytest.mark.parametrize("name, encode, decode, values", CODECS, ids=IDS)
def test_every_value_survives_the_trip_exactly(name, encode, decode, values):
    @settings(max_examples=60, deadline=None)
    @given(values)
    def check(value):
        assert decode(through_json(encode(value))) == value

    check()


@pytest.mark.parametrize("name, encode, decode, values", CODECS, ids=IDS)
def test_decoders_take_only_what_encoders_write(name, encode, decode, values):
    """A decoder either refuses with ValueError or returns a value that encodes
    back to exactly what it was given: nothing is dropped, coerced or guessed."""

    @settings(max_examples=80, deadline=None)
    @given(st.one_of(JSON, values.map(encode).flatmap(_mutated)))
    def check(payload):
        try:
            value = decode(payload)
        except ValueError:
            return
        assert encode(value) == payload

    check()


def _mutated(encoded: Any) -> st.SearchStrategy:
    """``encoded`` with one value somewhere inside replaced by any JSON value,
    or one key added."""
    paths = list(_paths(encoded))
    if not paths:
        return st.just(encoded)
    return st.tuples(st.sampled_from(paths), JSON, st.booleans()).map(
        lambda t: _replace(encoded, *t)
    )


def _paths(value: Any, prefix: tuple = ()) -> Any:
    yield prefix
    if isinstance(value, (dict, list)):
        for key, item in value.items() if isinstance(value, dict) else enumerate(value):
            yield from _paths(item, (*prefix, key))


def _replace(value: Any, path: tuple, new: Any, add_key: bool) -> Any:
    if not path:
        if add_key and isinstance(value, dict):
            return {**value, "unexpected": new}
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replace(value[path[0]], path[1:], new, add_key)
    return copy


#: (type, its encoder, its values): the types whose fields travel by name.
DATACLASSES = [
    (QueueMeta, wire.encode_queue, QUEUES),
    (Message, wire.encode_message, MESSAGES),
    (Delivery, wire.encode_delivery, DELIVERIES),
    (DeadLetter, wire.encode_dead_letter, DEAD_LETTERS),
    (Reserved, wire.encode_reserved, RESERVED),
    (ReserveAsk, wire.encode_reserve_ask, RESERVE_ASKS),
    (ReleaseAsk, wire.encode_release_ask, RELEASE_ASKS),
    (ExtendAsk, wire.encode_extend_ask, EXTEND_ASKS),
    (MessageRef, lambda ref: wire.encode_refs([ref])[0], REFS.filter(bool).map(lambda r: r[0])),
]


@pytest.mark.parametrize(
    "cls, encode, values", DATACLASSES, ids=[c.__name__ for c, _, _ in DATACLASSES]
)
def test_every_field_is_carried(cls, encode, values):
    """A field added to a model type fails here until the codec carries it."""

    @settings(max_examples=5, deadline=None)
    @given(values)
    def check(value):
        assert set(encode(value)) == {f.name for f in dataclasses.fields(cls)}

    check()


MESSAGE = wire.encode_message(
    Message(uuid.uuid1(), 1, 2, '{"a": 1}', 3, priority=4, attributes={"k": "v"})
)
QUEUE = wire.encode_queue(QueueMeta("app", "q", partitions=3))
REF = {"partition": 1, "id": uuid.uuid1().hex}


@pytest.mark.parametrize(
    "decode, payload",
    [
        (wire.decode_queue, None),
        (wire.decode_queue, [QUEUE]),
        (wire.decode_queue, {k: v for k, v in QUEUE.items() if k != "ttl"}),
        (wire.decode_queue, {**QUEUE, "colour": "blue"}),
        (wire.decode_queue, {**QUEUE, "partitions": "3"}),
        (wire.decode_queue, {**QUEUE, "partitions": True}),
        (wire.decode_queue, {**QUEUE, "partitions": 3.0}),
        (wire.decode_queue, {**QUEUE, "type": "secret"}),
        (wire.decode_queue, {**QUEUE, "consistency": ["strong"]}),
        (wire.decode_queue, {**QUEUE, "fifo": 1}),
        (wire.decode_queue, {**QUEUE, "attributes": {"a": 1}}),
        (wire.decode_queue, {**QUEUE, "attributes": None}),
        (wire.decode_queue, {**QUEUE, "dead_letter_queue": 5}),
        (wire.decode_message, {**MESSAGE, "id": MESSAGE["id"].upper()}),
        (wire.decode_message, {**MESSAGE, "id": str(uuid.UUID(MESSAGE["id"]))}),
        (wire.decode_message, {**MESSAGE, "id": MESSAGE["id"][:-1]}),
        (wire.decode_message, {**MESSAGE, "id": "urn:uuid:" + MESSAGE["id"]}),
        (wire.decode_message, {**MESSAGE, "body": None}),
        (wire.decode_message, {**MESSAGE, "attributes": []}),
        (wire.decode_delivery, {"message": MESSAGE, "attempts": 1, "receipt": "r"}),
        (wire.decode_reserved, {"deliveries": {}, "dead_letters": []}),
        (wire.decode_reserved, {"deliveries": [], "dead_letters": [MESSAGE]}),
        (wire.decode_dead_letters, {"message": MESSAGE}),
        (wire.decode_reserve_ask, {"partitions": [1, "2"], "limit": 1}),
        (
            wire.decode_reserve_ask,
            {
                "partitions": [1],
                "limit": 1.0,
                "visibility_timeout": 30,
                "now_micros": 1,
                "settled_micros": 1,
            },
        ),
        (wire.decode_release_ask, {"receipts": "r", "now_micros": 1, "delay": 0, "error": None}),
        (wire.decode_release_ask, {"receipts": [], "now_micros": 1, "delay": 0, "error": 5}),
        (wire.decode_extend_ask, {"receipts": [], "now_micros": 1}),
        (wire.decode_statuses, {"r": "lost"}),
        (wire.decode_statuses, [["r", "acked"]]),
        (wire.decode_receipts, [1]),
        (wire.decode_refs, REF),
        (wire.decode_refs, [{"partition": 1}]),
        (wire.decode_refs, [{**REF, "partition": None}]),
    ],
)
def test_wrong_shapes_are_refused(decode, payload):
    with pytest.raises(ValueError):
        decode(payload)


def test_a_refusal_names_the_field():
    with pytest.raises(ValueError, match=r"deliveries\[0\]\.message\.id"):
        wire.decode_reserved(
            {
                "deliveries": [
                    {
                        "message": {**MESSAGE, "id": "nope"},
                        "attempts": 1,
                        "receipt": "r",
                        "first_delivered": 0,
                    }
                ],
                "dead_letters": [],
            }
        )
