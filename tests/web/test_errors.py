"""Bad input, unknown routes, and the service routes (heartbeats, metrics), on each backend."""

from __future__ import annotations

import uuid

from tests.web.calls import create, post, read


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
    """A node sees another node's change within the cache time, its own at once;
    nodes sharing a store's change counter (SQLite's processes on one host) see
    each other's changes at once too."""
    ticks = [0.0]
    node_a = wrap_app(make_app(storage))
    node_b = wrap_app(make_app(storage))
    node_a.app.registry.queuey.cache.now = lambda: ticks[0]
    create(node_a, "shared", partitions=2)
    assert node_a.get("/queue/shared/info", headers=node_a.reader).json["partitions"] == 2
    node_b.put_json("/queue/shared", {"partitions": 3}, headers=node_b.auth)
    if storage.metadata_changes() is not None:
        assert node_a.get("/queue/shared/info", headers=node_a.reader).json["partitions"] == 3
    else:
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


def test_every_405_carries_allow(app):
    create(app, "allow")
    cases = [
        ("PATCH", "/queue", "GET, HEAD, POST"),
        ("PATCH", "/queue/allow", "DELETE, GET, HEAD, POST, PUT"),
        ("PUT", "/queue/allow/batch", "POST"),
        ("DELETE", "/queue/allow/info", "GET, HEAD"),
        ("POST", "/__heartbeat__", "GET, HEAD"),
        ("DELETE", "/openapi.json", "GET, HEAD"),
    ]
    for method, path, allowed in cases:
        res = app.request(path, method=method, headers=app.auth, status=405)
        assert res.headers.get("Allow") == allowed, (method, path, res.headers)
        assert list(res.json["error_msg"]) == ["method"]
