"""A record whose checksum holds but whose content is malformed: one error,
:class:`BadSpoolFile`, naming the file and the record's offset, from reading
the file and from opening a :class:`Spool` on it, which refuses to start and
changes nothing (issue 39, defect 9). A torn last record (its checksum fails)
is still dropped, kept aside and counted.

The malformed records are built with the spool's own framing
(:func:`spoolfile.frame`), so each one passes the checksum and reaches the
decoding of its content.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from queuey.client import Spool, spoolfile
from queuey.client.spoolentry import BOUNDS, LENGTHS, QUEUE_NAME
from queuey.client.spoolfile import MAGIC, MESSAGE_HEAD, SEQ, STAMP, BadSpoolFile, frame

pytestmark = pytest.mark.unit

ENTRY = {"body": {"n": 1}, "dedup_id": "abc-1"}
#: Records before the malformed one: the header and messages 0 and 1.
PREFIX = (
    MAGIC
    + spoolfile.header_record("abc", 0, {"sent": 0, "rejected": 0, "torn": 0})
    + spoolfile.message_record(0, 1.0, "q", ENTRY)
    + spoolfile.message_record(1, 2.0, "q", ENTRY)
)
#: A sound record after it: the malformed one is in the middle of the file.
AFTER = spoolfile.message_record(10, 3.0, "q", ENTRY)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
BAD_UTF8 = st.sampled_from([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\x80"])


def head(seq: int = 2, when: float = 4.0) -> bytes:
    return MESSAGE_HEAD.pack(seq, when)


def message(data: object, seq: int = 2) -> bytes:
    return head(seq) + json.dumps(data, separators=(",", ":")).encode()


def _bad_value(name: str):
    """Values a field of the entry may not hold (None stands for absent)."""
    if name in BOUNDS:
        low, high = BOUNDS[name]
        wrong = st.integers(max_value=low - 1)
        if high is not None:
            wrong |= st.integers(min_value=high + 1)
        return wrong | st.booleans() | st.floats(allow_nan=False) | st.text(max_size=5)
    if name in LENGTHS:
        return (
            st.just("")
            | st.text(min_size=LENGTHS[name] + 1, max_size=LENGTHS[name] + 3)
            | st.integers()
            | st.lists(st.text(max_size=3), max_size=2)
        )
    if name == "attributes":
        return (
            st.dictionaries(st.text(max_size=4), st.integers() | st.none(), min_size=1, max_size=2)
            | st.lists(st.text(max_size=3), max_size=2)
            | st.integers()
            | st.text(max_size=3)
        )
    return JSON.filter(lambda v: not isinstance(v, dict))  # body


FIELD_NAMES = sorted({"body", "attributes", *BOUNDS, *LENGTHS})
BAD_ENTRY = st.one_of(
    JSON.filter(lambda v: not isinstance(v, dict)),
    st.sampled_from(FIELD_NAMES).flatmap(
        lambda name: _bad_value(name).map(lambda v, name=name: {**ENTRY, name: v})
    ),
    st.just({"body": {}}),  # no dedup_id
    st.text(min_size=1, max_size=10)
    .filter(lambda k: k not in FIELD_NAMES)
    .map(lambda k: {**ENTRY, k: 1}),
)
BAD_QUEUE = JSON.filter(lambda q: not (isinstance(q, str) and QUEUE_NAME.fullmatch(q)))
SOUND_JSON = json.dumps({"q": "q", "e": ENTRY}, separators=(",", ":")).encode()

BAD_MESSAGE = st.one_of(
    st.binary(max_size=MESSAGE_HEAD.size - 1),  # shorter than its head
    st.integers(0, len(SOUND_JSON) - 1).map(lambda n: head() + SOUND_JSON[:n]),  # cut JSON
    st.tuples(st.integers(0, len(SOUND_JSON)), BAD_UTF8).map(
        lambda t: head() + SOUND_JSON[: t[0]] + t[1] + SOUND_JSON[t[0] :]
    ),
    JSON.filter(lambda v: not (isinstance(v, dict) and set(v) == {"q", "e"})).map(message),
    BAD_QUEUE.map(lambda q: message({"q": q, "e": ENTRY})),
    BAD_ENTRY.map(lambda e: message({"q": "q", "e": e})),
    st.sampled_from([math.nan, math.inf, -math.inf]).map(lambda t: head(when=t) + SOUND_JSON),
    st.integers(0, 1).map(lambda seq: head(seq) + SOUND_JSON),  # not after 0 and 1
    st.integers(2**63, 2**64 - 1).map(lambda seq: head(seq) + SOUND_JSON),
    st.sampled_from([b"NaN", b"Infinity", b"-Infinity"]).map(
        lambda c: head() + b'{"q":"q","e":{"body":{"x":' + c + b'},"dedup_id":"d"}}'
    ),
)
STAMP_OK = STAMP.pack(5.0)
BAD_MARKS = st.one_of(
    st.binary(max_size=40).filter(lambda b: len(b) < 16 or (len(b) - 8) % 8),
    st.sampled_from([math.nan, math.inf]).map(lambda t: STAMP.pack(t) + SEQ.pack(0)),
    st.integers(2, 2**64 - 1).map(lambda seq: STAMP_OK + SEQ.pack(seq)),  # never spooled
)
BAD_TORN = st.one_of(
    st.binary(max_size=30).filter(lambda b: len(b) != 16),
    st.sampled_from([0, 2**32 + 1, 2**64 - 1]).map(lambda n: STAMP_OK + SEQ.pack(n)),
    st.just(STAMP.pack(math.nan) + SEQ.pack(1)),
)
BAD_RECORD = st.one_of(
    BAD_MESSAGE.map(lambda p: frame(b"M", p)),
    st.sampled_from([b"A", b"R"]).flatmap(lambda k: BAD_MARKS.map(lambda p, k=k: frame(k, p))),
    BAD_TORN.map(lambda p: frame(b"T", p)),
    st.binary(max_size=20).map(lambda p: frame(b"H", p)),  # a second header
    st.tuples(
        st.binary(min_size=1, max_size=1).filter(lambda k: k not in b"HMART"),
        st.binary(max_size=20),
    ).map(lambda t: frame(*t)),
)

HEADER_FIELDS = {"spool_id": "abc", "first_seq": 0, "sent": 0, "rejected": 0, "torn": 0}
BAD_HEADER = st.one_of(
    st.binary(max_size=30).filter(lambda b: not b.startswith(b"{")),
    JSON.filter(lambda v: not isinstance(v, dict)).map(lambda v: json.dumps(v).encode()),
    st.sampled_from(["spool_id", "first_seq"]).map(
        lambda k: json.dumps({f: v for f, v in HEADER_FIELDS.items() if f != k}).encode()
    ),
    st.sampled_from(sorted(HEADER_FIELDS)).flatmap(
        lambda k: (
            JSON.filter(
                lambda v: (
                    not (isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63)
                    and v is not None
                )
            )
            | st.integers(min_value=2**63)
            if k != "spool_id"
            else JSON.filter(lambda v: not isinstance(v, str)) | st.just("") | st.just("a b")
        ).map(lambda v, k=k: json.dumps({**HEADER_FIELDS, k: v}).encode())
    ),
    st.just(b'{"spool_id":"abc","first_seq":0,"sent":NaN}'),
    st.just(b'{"spool_id":"ab\xff","first_seq":0}'),
)


def assert_refused(tmp_path, data: bytes, offset: int) -> None:
    """Reading and opening ``data`` both raise BadSpoolFile at ``offset``;
    the file is left as it was and nothing is moved aside."""
    path = tmp_path / "s"
    path.write_bytes(data)
    for attempt in (lambda: spoolfile.scan(path), lambda: Spool(None, path, start=False)):
        with pytest.raises(BadSpoolFile) as refused:
            attempt()
        assert refused.value.path == str(path) and refused.value.offset == offset
        assert f"{path}, record at offset {offset}: " in str(refused.value)
        assert "\n" not in str(refused.value)
    assert path.read_bytes() == data
    assert not (tmp_path / "s.torn").exists()


SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(record=BAD_RECORD, last=st.booleans())
@example(record=frame(b"M", b"\x00" * 5), last=False)  # struct.error before
@example(record=frame(b"M", head() + b'{"q":"q","e":'), last=True)  # JSONDecodeError before
@example(record=frame(b"M", head() + b'{"q":7,"e":{}}'), last=False)
@example(record=frame(b"A", b"\x00" * 3), last=False)
@example(record=frame(b"T", b""), last=True)
@example(record=frame(b"Z", b"what"), last=False)  # skipped as dead before
@example(record=frame(b"M", head() + b"[" * 100_000 + b"]" * 100_000), last=False)
def test_a_malformed_record_with_a_valid_checksum_is_a_bad_spool_file(tmp_path, record, last):
    assert_refused(tmp_path, PREFIX + record + (b"" if last else AFTER), offset=len(PREFIX))


@SETTINGS
@given(payload=BAD_HEADER)
@example(payload=b'{"first_seq": 0}')  # KeyError before
@example(payload=b'{"spool_id": "abc", "first_seq": "zero"}')  # ValueError before
@example(payload=b'{"spool_id": "abc", "first_seq": 1.5}')  # taken as 1 before
def test_a_malformed_header_with_a_valid_checksum_is_a_bad_spool_file(tmp_path, payload):
    assert_refused(tmp_path, MAGIC + frame(b"H", payload) + AFTER, offset=len(MAGIC))


def test_what_the_spool_writes_reads_back_whole(tmp_path):
    """The strict reading takes every record the spool itself writes."""
    spool = Spool(None, tmp_path / "s", start=False)
    kinds = dict(
        partition=2,
        partition_key="k" * 10,
        ttl=60,
        delay=0,
        priority=9,
        attributes={"a": "b"},
    )
    spool.post("q-1", {"n": 1, "s": "é\u2028"}, **kinds)
    spool.post("q_2", {}, dedup_id="mine")
    with spool._cond:
        spool.mark(spoolfile.ACKED, [next(iter(spool._pending.values()))])
    spool.close()
    image = spoolfile.scan(tmp_path / "s")
    assert len(image.pending) == 1 and image.sent == 1 and image.next_seq == 2


def test_a_torn_last_record_is_still_dropped_not_refused(tmp_path):
    record = spoolfile.message_record(2, 4.0, "q", ENTRY)
    damaged = record[:-1] + bytes([record[-1] ^ 1])  # checksum fails: torn
    path = tmp_path / "s"
    for tail in (record[:-3], damaged):
        path.write_bytes(PREFIX + tail)
        spool = Spool(None, path, start=False)
        assert spool.replayed == 2 and spool.stats().torn == 1
        spool.close()
        kept = path.read_bytes()  # the tail cut off, a torn mark in its place
        assert kept.startswith(PREFIX) and len(kept) == len(PREFIX) + len(spoolfile.torn_record(0))
        assert (tmp_path / "s.torn").read_bytes().endswith(tail)
        assert spoolfile.scan(path).torn == 1
        (tmp_path / "s.torn").unlink()


def test_the_error_is_exported_and_is_a_client_error():
    from queuey.client import BadSpoolFile as exported
    from queuey.client import ClientError

    assert exported is BadSpoolFile
    assert issubclass(BadSpoolFile, ClientError) and issubclass(BadSpoolFile, ValueError)
