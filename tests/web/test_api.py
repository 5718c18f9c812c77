"""The HTTP API of DESIGN.md, through the real app, on each storage backend."""

from __future__ import annotations

import json
import uuid

import pytest

from queuey import ids
from tests.support import KEY, ROTATED_KEY


@pytest.fixture
def settle(app, clock):
    """Move the app's clock past the read delay, so fresh posts become readable."""
    delay = app.app.registry.queuey_settings.read_delay

    def run():
        # A batch minted on a frozen clock spans a few microseconds past "now".
        clock.advance(delay + 0.01)

    return run


def create(app, name="q", status=201, **params):
    return app.post_json("/queue", {"queue_name": name, **params}, headers=app.auth, status=status)


def post(app, queue, body, status=201, **query):
    qs = "&".join(f"{k}={v}" for k, v in query.items())
    return app.post_json(f"/queue/{queue}?{qs}", body, headers=app.auth, status=status)


def read(app, queue, status=200, headers=None, **params):
    headers = app.auth if headers is None else headers
    return app.get(f"/queue/{queue}", params=params, headers=headers, status=status)


def bodies(response):
    return [m["body"] for m in response.json["messages"]]


# -- queues -------------------------------------------------------------------------------
def test_create_queue_returns_metadata(app, clock):
    res = create(app, "orders", partitions=4, ttl=3600)
    assert res.json["status"] == "ok"
    assert res.json["queue_name"] == "orders"
    assert res.json["partitions"] == 4
    assert res.json["ttl"] == 3600
    assert res.json["type"] == "public"
    assert res.json["created"] == clock.now_micros() // 1_000_000
    assert res.content_type == "application/json"


def test_create_queue_from_form_and_default_name(app):
    res = app.post("/queue", {"partitions": "2"}, headers=app.auth, status=201)
    name = res.json["queue_name"]
    assert len(name) == 32 and int(name, 16) >= 0
    assert res.json["partitions"] == 2


def test_duplicate_queue_is_409_and_keeps_the_first(app):
    create(app, "dup", partitions=2)
    res = create(app, "dup", partitions=5, status=409)
    assert res.json == {
        "status": "error",
        "error_msg": {"queue_name": "a queue named dup exists already"},
    }
    assert app.get("/queue/dup/info", headers=app.reader).json["partitions"] == 2


def test_queue_info_is_public(app):
    create(app, "info", partitions=3)
    res = app.get("/queue/info/info", headers=app.reader)
    assert {k: res.json[k] for k in ("queue_name", "partitions", "type")} == {
        "queue_name": "info",
        "partitions": 3,
        "type": "public",
    }
    assert isinstance(res.json["created"], int)


def test_list_queues_with_paging_and_details(app):
    for name in ["b", "a", "c"]:
        create(app, name)
    assert app.get("/queue", headers=app.auth).json["queues"] == ["a", "b", "c"]
    res = app.get("/queue", {"limit": 1, "offset": "a", "details": "true"}, headers=app.auth)
    assert [q["queue_name"] for q in res.json["queues"]] == ["b"]
    assert res.json["queues"][0]["partitions"] == 1


def test_update_grows_partitions_and_refuses_shrinking(app):
    create(app, "grow", partitions=2)
    res = app.put_json("/queue/grow", {"partitions": 4}, headers=app.auth)
    assert res.json["partitions"] == 4
    res = app.put_json("/queue/grow", {"partitions": 3}, headers=app.auth, status=400)
    assert "partitions" in res.json["error_msg"]
    assert app.get("/queue/grow/info", headers=app.reader).json["partitions"] == 4


def test_delete_queue(app):
    create(app, "gone")
    post(app, "gone", {"a": 1})
    assert app.delete("/queue/gone", headers=app.auth).json == {"status": "ok"}
    app.get("/queue/gone/info", headers=app.reader, status=404)
    create(app, "gone")
    assert read(app, "gone").json["messages"] == []


def test_purge_keeps_the_queue(app, settle):
    create(app, "purge")
    post(app, "purge", {"a": 1})
    app.delete("/queue/purge?delete=false", headers=app.auth)
    settle()
    assert read(app, "purge").json["messages"] == []
    post(app, "purge", {"a": 2})
    settle()
    assert bodies(read(app, "purge")) == [{"a": 2}]


# -- messages ----------------------------------------------------------------------------
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
    delay = app.app.registry.queuey_settings.read_delay
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


# -- identity --------------------------------------------------------------------------
def test_rotated_key_works(app):
    app.post_json(
        "/queue",
        {"queue_name": "rot"},
        headers={**app.auth, "ApplicationKey": ROTATED_KEY},
        status=201,
    )


@pytest.mark.parametrize(
    "make_headers, status, field",
    [
        (lambda apps: {}, 401, "X-Application-Name"),
        (
            lambda apps: {"X-Application-Name": "nobody", "ApplicationKey": KEY},
            401,
            "X-Application-Name",
        ),
        (lambda apps: apps.reader, 401, "ApplicationKey"),
        (lambda apps: {**apps.auth, "ApplicationKey": "wrong"}, 401, "ApplicationKey"),
        (lambda apps: apps.remote_auth, 403, "client_address"),
    ],
)
def test_identity_errors(app, make_headers, status, field):
    headers = make_headers(app.apps)
    res = app.post_json("/queue", {"queue_name": "x"}, headers=headers, status=status)
    assert res.json["status"] == "error"
    assert list(res.json["error_msg"]) == [field]
    app.get("/queue/x/info", headers=app.reader, status=404)


def test_forwarded_for_counts_only_from_trusted_proxies(make_app, storage, wrap_app):
    wsgi = make_app(storage, **{"queuey.trusted_proxies": "192.168.1.1"})
    # From the trusted proxy, the forwarded client address (in 10/8) counts.
    via_proxy = wrap_app(wsgi, remote_addr="192.168.1.1")
    remote_headers = via_proxy.apps.remote_auth
    via_proxy.post_json(
        "/queue",
        {"queue_name": "fwd"},
        headers={**remote_headers, "X-Forwarded-For": "10.1.2.3"},
        status=201,
    )
    # From an untrusted peer, a spoofed header is ignored.
    direct = wrap_app(wsgi, remote_addr="203.0.113.9")
    res = direct.post_json(
        "/queue",
        {"queue_name": "spoof"},
        headers={**remote_headers, "X-Forwarded-For": "10.1.2.3"},
        status=403,
    )
    assert list(res.json["error_msg"]) == ["client_address"]
    # A client may not prepend its own hop in front of the proxy's either.
    res = via_proxy.post_json(
        "/queue",
        {"queue_name": "spoof2"},
        headers={**via_proxy.auth, "X-Forwarded-For": "127.0.0.1, 203.0.113.9"},
        status=403,
    )
    apps = via_proxy.apps
    assert [q.name for q in storage.list_queues(apps.remote_app)] == ["fwd"]
    assert storage.list_queues(apps.app) == []


# -- bad input -------------------------------------------------------------------------
def test_malformed_json_is_415_and_stores_nothing(app, settle):
    create(app, "bad")
    res = app.post(
        "/queue/bad",
        "{not json",
        headers={**app.auth, "Content-Type": "application/json"},
        status=415,
    )
    assert list(res.json["error_msg"]) == ["body"]
    res = app.post(
        "/queue/bad", "a=b", headers={**app.auth, "Content-Type": "text/plain"}, status=415
    )
    app.post(
        "/queue/bad", "NaN", headers={**app.auth, "Content-Type": "application/json"}, status=415
    )
    settle()
    assert read(app, "bad").json["messages"] == []


def test_non_object_message_is_400(app):
    create(app, "obj")
    for value in ([1, 2], "text", 3, None):
        res = post(app, "obj", value, status=400)
        assert res.json["error_msg"] == {"body": "a message must be a JSON object"}


def test_oversized_message_and_batch_are_413(make_app, storage, settle, wrap_app):
    app = wrap_app(
        make_app(
            storage,
            **{
                "queuey.max_message_size": "1024",
                "queuey.max_batch_messages": "5",
                "queuey.max_batch_size": "4096",
            },
        )
    )
    create(app, "big")
    res = post(app, "big", {"x": "a" * 2000}, status=413)
    assert list(res.json["error_msg"]) == ["body"]
    messages = [{"body": {"n": 1}}, {"body": {"x": "a" * 1020}}]
    res = app.post_json("/queue/big/batch", {"messages": messages}, headers=app.auth, status=413)
    assert list(res.json["error_msg"]) == ["messages[1].body"]
    many = [{"body": {"n": n}} for n in range(6)]
    res = app.post_json("/queue/big/batch", {"messages": many}, headers=app.auth, status=413)
    assert list(res.json["error_msg"]) == ["messages"]
    heavy = [{"body": {"x": "a" * 1000}} for n in range(5)]
    res = app.post_json("/queue/big/batch", {"messages": heavy}, headers=app.auth, status=413)
    assert list(res.json["error_msg"]) == ["body"]
    settle()
    assert read(app, "big").json["messages"] == []


def test_unknown_queue_is_404(app):
    res = post(app, "nope", {"a": 1}, status=404)
    assert res.json["error_msg"] == {"queue_name": "no queue named nope"}
    read(app, "nope", status=404)
    app.put_json("/queue/nope", {"partitions": 2}, headers=app.auth, status=404)
    app.delete("/queue/nope", headers=app.auth, status=404)


def test_invalid_queue_name_is_400(app):
    res = create(app, "bad name!", status=400)
    assert list(res.json["error_msg"]) == ["queue_name"]
    create(app, "x" * 51, status=400)
    res = app.get("/queue/bad$name/info", headers=app.reader, status=400)
    assert list(res.json["error_msg"]) == ["queue_name"]
    assert app.get("/queue", headers=app.auth).json["queues"] == []


def test_out_of_range_parameters_name_every_field(app):
    res = create(app, "r", partitions=0, ttl=-1, type="secret", status=400)
    assert set(res.json["error_msg"]) == {"partitions", "ttl", "type"}
    create(app, "r", partitions=201, status=400)
    create(app, "r", ttl=10**9, status=400)
    create(app, "r", partitions=2)
    res = post(app, "r", {}, partition=3, ttl=0, status=400)
    assert set(res.json["error_msg"]) == {"partition", "ttl"}
    res = read(app, "r", limit=-5, order="sideways", since="zz", partitions="1,7", status=400)
    assert set(res.json["error_msg"]) == {"limit", "order", "since", "partitions"}
    read(app, "r", limit=1001, status=400)
    read(app, "r", since_timestamp="yesterday", status=400)
    read(app, "r", since=uuid.uuid4().hex, status=400)  # not a time-based id


def test_unknown_route_and_method(app):
    res = app.get("/nothing", status=404)
    assert res.json["status"] == "error"
    res = app.patch("/queue", headers=app.auth, status=405)
    assert list(res.json["error_msg"]) == ["method"]


def test_heartbeats_and_version(app):
    assert app.get("/__lbheartbeat__").json == {"status": "ok"}
    res = app.get("/__heartbeat__")
    assert res.json == {"status": "ok", "checks": {"storage": "ok"}}
    assert app.get("/__version__").json["name"] == "queuey"


def test_metrics_exposed_to_loopback_only(app):
    create(app, "met")
    post(app, "met", {"a": 1})
    text = app.get("/metrics").text
    assert "queuey_messages_posted_total 1.0" in text
    assert 'queuey_requests_total{method="POST",route="queues",status="201"} 1.0' in text
    app.get("/metrics", extra_environ={"REMOTE_ADDR": "198.51.100.7"}, status=403)


def test_curl_style_json_labelled_as_form_is_json(app):
    """`curl -d '{...}'` sends JSON labelled as a form: the body decides."""
    form = {**app.auth, "Content-Type": "application/x-www-form-urlencoded"}
    res = app.post("/queue", '{"queue_name": "curl", "partitions": 3}', headers=form, status=201)
    assert (res.json["queue_name"], res.json["partitions"]) == ("curl", 3)
    res = app.post("/queue/curl", '{"a": 1}', headers=form, status=201)
    assert len(res.json["messages"]) == 1


def test_metadata_cache_across_two_api_nodes(make_app, storage, wrap_app, settle):
    """A node sees another node's change within the cache time, its own at once."""
    ticks = [0.0]
    node_a = wrap_app(make_app(storage))
    node_b = wrap_app(make_app(storage))
    node_a.app.registry.queue_cache.now = lambda: ticks[0]
    create(node_a, "shared", partitions=2)
    assert node_a.get("/queue/shared/info", headers=node_a.reader).json["partitions"] == 2
    node_b.put_json("/queue/shared", {"partitions": 3}, headers=node_b.auth)
    assert node_a.get("/queue/shared/info", headers=node_a.reader).json["partitions"] == 2
    post(node_a, "shared", {}, partition=3, status=400)
    ticks[0] += 1.01
    assert node_a.get("/queue/shared/info", headers=node_a.reader).json["partitions"] == 3
    post(node_a, "shared", {"n": 1}, partition=3)
    node_a.delete("/queue/shared?delete=false", headers=node_a.auth)
    settle()
    assert read(node_a, "shared").json["messages"] == []


def test_large_batch_bodies_are_read_in_memory(app, settle):
    """Bodies over WebOb's 10 KiB temp-file threshold work (no leaked file)."""
    create(app, "large", partitions=2)
    messages = [{"body": {"pad": "x" * 1000, "n": n}} for n in range(50)]
    res = app.post_json("/queue/large/batch", {"messages": messages}, headers=app.auth, status=201)
    assert len(res.json["messages"]) == 50
