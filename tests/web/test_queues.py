"""Queue management over HTTP (docs/api.rst, "Queues"), on each storage backend."""

from __future__ import annotations

from tests.web.calls import bodies, create, post, read


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
    app.get("/queue/gone/info", headers=app.auth, status=404)
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
