"""Posting, reading, fetching and deleting messages, and checkpoints, on each storage backend."""

from __future__ import annotations

import json
import uuid

from queuey import ids
from tests.web.calls import bodies, create, post, read


def test_post_and_read_a_message(app, clock, settle):
    create(app, "m")
    res = post(app, "m", {"hello": "world", "n": [1, 2.5, None]})
    (posted,) = res.json["messages"]
    assert res.json["status"] == "ok"
    message_id = ids.parse_id(posted["message_id"])
    assert len(posted["message_id"]) == 32 and message_id.version == 1
    assert posted["partition"] == 1
    assert posted["timestamp"] == ids.micros_of(message_id) / 1_000_000
    settle()
    got = read(app, "m").json["messages"]
    assert got == [{**posted, "body": {"hello": "world", "n": [1, 2.5, None]}}]


def test_read_newest_first_limit_and_ascending(app, clock, settle):
    create(app, "order")
    for n in range(5):
        post(app, "order", {"n": n})
        clock.advance(0.001)
    settle()
    assert bodies(read(app, "order", limit=2)) == [{"n": 4}, {"n": 3}]
    assert bodies(read(app, "order", limit=2, order="ascending")) == [{"n": 0}, {"n": 1}]


def test_public_queue_is_readable_without_key_private_is_not(app, settle):
    create(app, "pub")
    create(app, "priv", type="private")
    post(app, "pub", {"x": 1})
    post(app, "priv", {"x": 2})
    settle()
    assert bodies(read(app, "pub", headers=app.reader)) == [{"x": 1}]
    res = read(app, "priv", headers=app.reader, status=401)
    assert res.json["error_msg"] == {"ApplicationKey": "this call needs the ApplicationKey header"}
    app.get("/queue/priv/info", headers=app.reader, status=401)
    assert bodies(read(app, "priv")) == [{"x": 2}]


def test_partition_choice(app, settle):
    create(app, "parts", partitions=5)
    assert post(app, "parts", {}, partition=4).json["messages"][0]["partition"] == 4
    keyed = {
        post(app, "parts", {}, partition_key="user-7").json["messages"][0]["partition"]
        for _ in range(5)
    }
    assert len(keyed) == 1
    randomly = {post(app, "parts", {}).json["messages"][0]["partition"] for _ in range(60)}
    assert randomly <= {1, 2, 3, 4, 5} and len(randomly) > 1


def test_partitions_filter_and_merge_by_time(app, clock, settle):
    create(app, "merge", partitions=3)
    for n in range(6):
        post(app, "merge", {"n": n}, partition=n % 3 + 1)
        clock.advance(0.001)
    settle()
    assert bodies(read(app, "merge", order="ascending")) == [{"n": n} for n in range(6)]
    got = read(app, "merge", order="ascending", partitions="1,3").json["messages"]
    assert [m["body"]["n"] for m in got] == [0, 2, 3, 5]
    assert {m["partition"] for m in got} == {1, 3}


def test_since_and_since_timestamp_are_exclusive(app, clock, settle):
    create(app, "since")
    posted = []
    for n in range(4):
        posted.append(post(app, "since", {"n": n}).json["messages"][0])
        clock.advance(0.000001)
    settle()
    after = read(app, "since", since=posted[1]["message_id"], order="ascending")
    assert bodies(after) == [{"n": 2}, {"n": 3}]
    # The timestamp exactly as it came in JSON, sent back as text: excludes that message.
    stamp = json.loads(json.dumps(posted[1]["timestamp"]))
    after = read(app, "since", since_timestamp=repr(stamp), order="ascending")
    assert bodies(after) == [{"n": 2}, {"n": 3}]


def test_read_delay_hides_the_newest(make_app, storage, clock, wrap_app):
    app = wrap_app(make_app(storage, **{"queuey.read_delay": "10"}))
    create(app, "delay")
    post(app, "delay", {"n": 1})
    clock.advance(9)
    assert read(app, "delay").json["messages"] == []
    clock.advance(1.001)
    assert bodies(read(app, "delay")) == [{"n": 1}]


def test_message_ttl_expires_exactly(app, clock, settle):
    delay = app.app.registry.queuey.settings.read_delay
    short_ttl = int(delay) + 5
    create(app, "ttl", ttl=100)
    post(app, "ttl", {"short": True}, ttl=short_ttl)
    post(app, "ttl", {"short": False})
    settle()  # now + delay + 0.01 s
    clock.advance(short_ttl - delay - 0.06)  # 50 ms before the short one's end
    assert len(read(app, "ttl").json["messages"]) == 2
    clock.advance(0.1)
    assert bodies(read(app, "ttl")) == [{"short": False}]


def test_batch_post(app, settle):
    create(app, "batch", partitions=3)
    messages = [{"body": {"n": n}, "partition": n % 3 + 1} for n in range(10)]
    messages.append({"body": {"keyed": True}, "partition_key": "k", "ttl": 60})
    res = app.post_json("/queue/batch/batch", {"messages": messages}, headers=app.auth, status=201)
    refs = res.json["messages"]
    assert len(refs) == 11
    assert [r["partition"] for r in refs[:10]] == [n % 3 + 1 for n in range(10)]
    settle()
    assert len(read(app, "batch", limit=100).json["messages"]) == 11


def test_batch_is_all_or_nothing(app, settle):
    create(app, "atomic", partitions=2)
    messages = [{"body": {"n": 1}}, {"body": {"n": 2}, "partition": 9}, {"body": "x"}]
    res = app.post_json("/queue/atomic/batch", {"messages": messages}, headers=app.auth, status=400)
    assert set(res.json["error_msg"]) == {"messages[1].partition", "messages[2].body"}
    settle()
    assert read(app, "atomic").json["messages"] == []


def test_get_and_delete_messages_by_id(app, settle):
    create(app, "byid", partitions=2)
    a = post(app, "byid", {"a": 1}, partition=2).json["messages"][0]
    b = post(app, "byid", {"b": 1}, partition=1).json["messages"][0]
    ids_path = f"2:{a['message_id']},{b['message_id']}"
    got = app.get(f"/queue/byid/messages/{ids_path}", headers=app.reader).json["messages"]
    assert sorted(m["message_id"] for m in got) == sorted([a["message_id"], b["message_id"]])
    app.delete(f"/queue/byid/messages/2:{a['message_id']}", headers=app.auth)
    got = app.get(f"/queue/byid/messages/{ids_path}", headers=app.reader).json["messages"]
    assert [m["message_id"] for m in got] == [b["message_id"]]
    app.delete(f"/queue/byid/messages/{ids_path}", headers=app.reader, status=401)


def test_checkpoints(app):
    create(app, "cp", partitions=3)
    one, two = uuid.uuid1().hex, uuid.uuid1().hex
    path = "/queue/cp/checkpoints/workers"
    assert app.get(path, headers=app.auth).json == {"status": "ok", "checkpoints": {}}
    app.put_json(path, {"checkpoints": {"1": one, "3": two}}, headers=app.auth)
    assert app.get(path, headers=app.auth).json["checkpoints"] == {"1": one, "3": two}
    res = app.put_json(path, {"checkpoints": {"4": one, "x": "y"}}, headers=app.auth, status=400)
    assert set(res.json["error_msg"]) == {"checkpoints.4", "checkpoints.x"}
    app.get(path, headers=app.reader, status=401)


def test_a_queue_ttl_above_a_lowered_max_ttl_is_capped(make_app, storage, clock, wrap_app):
    """An operator lowers ``queuey.max_ttl`` after a queue was made with a longer ttl:
    posts without a ttl still succeed and live for the new maximum, never a 500."""
    before = wrap_app(make_app(storage))
    create(before, "capped", ttl=1000)
    after = wrap_app(make_app(storage, **{"queuey.max_ttl": "100", "queuey.default_ttl": "100"}))
    delay = after.app.registry.queuey.settings.read_delay
    post(after, "capped", {"n": 1})
    clock.advance(delay + 0.01)
    assert bodies(read(after, "capped")) == [{"n": 1}]
    clock.advance(100 - delay)
    assert read(after, "capped").json["messages"] == []
