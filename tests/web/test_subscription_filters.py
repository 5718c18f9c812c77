"""Filtered subscriptions through HTTP, on both backends: a consumer sees only
what its filter takes, its backlog counts only those, other subscriptions
still get everything, and a bad filter is a 400 naming the part."""

from __future__ import annotations

import pytest

from tests.web.calls import ack, batch, create, reserved


def _settle(app, clock):
    clock.advance(app.app.registry.queuey.settings.read_delay + 0.01)


def _set_filter(app, queue, subscription, body, status=200):
    return app.put_json(
        f"/queue/{queue}/subscriptions/{subscription}", body, headers=app.auth, status=status
    )


def _stats(app, queue):
    found = app.get(f"/queue/{queue}/stats", headers=app.auth).json
    return {s["subscription"]: s for s in found["subscriptions"]}


def _orders(n):
    """``n`` messages cycling through colours, sizes and a region on some."""
    colours = ["red", "green", "blue"]
    entries = []
    for i in range(n):
        attributes = {"colour": colours[i % 3], "size": str(i)}
        if i % 4 == 0:
            attributes["region"] = f"eu-{i}"
        entries.append({"body": {"n": i}, "attributes": attributes})
    return entries


def _drain(app, queue, subscription):
    seen = []
    while got := reserved(app, queue, subscription=subscription, limit=100):
        seen += [m["body"]["n"] for m in got]
        ack(app, queue, [m["receipt"] for m in got], subscription=subscription)
    return sorted(seen)


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_filtered_subscription_gets_only_matches_and_counts_only_them(app, clock, partitions):
    create(app, "orders", partitions=partitions)
    flt = {"colour": ["red", {"prefix": "bl"}], "size": [{"numeric": [">=", 10, "<", 40]}]}
    answer = _set_filter(app, "orders", "reds", {"filter": flt}).json
    unlimited = {"paused": False, "rate": 0.0, "burst": 0, "max_in_flight": 0}
    assert answer == {"status": "ok", "subscription": "reds", "filter": flt, "flow": unlimited}
    _set_filter(app, "orders", "europe", {"filter": {"region": [{"exists": True}]}})
    _set_filter(app, "orders", "not-green", {"filter": {"colour": [{"anything-but": "green"}]}})
    batch(app, "orders", _orders(60)[:30])
    # High priorities walk a different path on both stores.
    batch(app, "orders", [dict(e, priority=3) for e in _orders(60)[30:]])
    _settle(app, clock)

    expected_reds = [i for i in range(10, 40) if i % 3 in (0, 2)]
    reserved(app, "orders", subscription="reds", limit=1)  # the subscription exists now
    _settle(app, clock)
    stats = _stats(app, "orders")
    assert stats["reds"]["available"] + stats["reds"]["in_flight"] == len(expected_reds)
    assert stats["reds"]["filter"] == flt

    clock.advance(120)  # the first lease ends; it is taken again below
    assert _drain(app, "orders", "reds") == expected_reds
    assert _drain(app, "orders", "europe") == [i for i in range(60) if i % 4 == 0]
    assert _drain(app, "orders", "not-green") == [i for i in range(60) if i % 3 != 1]
    assert _drain(app, "orders", "default") == list(range(60))
    stats = _stats(app, "orders")
    assert (stats["reds"]["available"], stats["reds"]["in_flight"]) == (0, 0)
    assert stats["default"]["filter"] is None

    listed = app.get("/queue/orders/subscriptions", headers=app.auth).json["subscriptions"]
    assert [s["subscription"] for s in listed] == ["europe", "not-green", "reds"]


def test_removing_a_filter_lets_later_messages_through(app, clock):
    create(app, "events")
    _set_filter(app, "events", "audit", {"filter": {"kind": ["login"]}})
    batch(app, "events", [{"body": {"n": 0}, "attributes": {"kind": "logout"}}])
    _settle(app, clock)
    assert reserved(app, "events", subscription="audit") == []
    assert _set_filter(app, "events", "audit", {}).json["filter"] is None
    batch(app, "events", [{"body": {"n": 1}, "attributes": {"kind": "logout"}}])
    _settle(app, clock)
    # n=0 was walked past under the filter; n=1 came after it was removed.
    assert [m["body"]["n"] for m in reserved(app, "events", subscription="audit", limit=10)] == [1]
    assert app.get("/queue/events/subscriptions", headers=app.auth).json["subscriptions"] == []


@pytest.mark.parametrize(
    ("body", "part"),
    [
        ({"filter": {}}, "filter"),
        ({"filter": {"colour": []}}, "filter.colour"),
        ({"filter": {"colour": [{"prefix": ""}]}}, "filter.colour[0].prefix"),
        ({"filter": {"size": [{"numeric": [">", 5, "<", 1]}]}}, "filter.size[0].numeric"),
        ({"filter": {"x": [{"regex": ".*"}]}}, "filter.x[0]"),
        ({"filter": "colour=red"}, "filter"),
    ],
)
def test_a_bad_filter_is_a_400_naming_the_part(sqlite_app, body, part):
    app = sqlite_app
    create(app, "orders")
    errors = _set_filter(app, "orders", "reds", body, status=400).json["error_msg"]
    assert list(errors) == [part] or part in errors, errors
    assert app.get("/queue/orders/subscriptions", headers=app.auth).json["subscriptions"] == []


def test_bounds_and_other_mistakes(sqlite_app):
    app = sqlite_app
    create(app, "orders")
    res = _set_filter(app, "orders", "bad name!", {"filter": {"a": ["b"]}}, status=400)
    assert "subscription" in res.json["error_msg"]
    res = app.put("/queue/orders/subscriptions/reds", "x" * 70000, headers=app.auth, status=413)
    assert res.json["status"] == "error"
    for n in range(20):
        _set_filter(app, "orders", f"s{n}", {"filter": {"a": [str(n)]}})
    res = _set_filter(app, "orders", "one-more", {"filter": {"a": ["b"]}}, status=400)
    assert "20" in res.json["error_msg"]["filter"]
    _set_filter(app, "orders", "s3", {"filter": {"a": ["changed"]}})  # a change is not one more
    _set_filter(app, "missing", "reds", {"filter": {"a": ["b"]}}, status=404)
    app.put_json("/queue/orders/subscriptions/reds", {"filter": {"a": ["b"]}}, status=401)


def test_sns_policies_with_keywords_and_exists_false_as_sns_decides(app, clock):
    """SNS's example policy with ``false`` is accepted; ``exists: false`` takes
    no message without attributes; a Number written with an exponent is a number."""
    create(app, "shop")
    rejecting = {
        "store": ["example_corp"],
        "event": ["order_cancelled"],
        "encrypted": [False],
        "customer_interests": ["basketball", "baseball"],
    }
    assert _set_filter(app, "shop", "plain", {"filter": rejecting}).json["filter"] == rejecting
    _set_filter(app, "shop", "no-store", {"filter": {"store": [{"exists": False}]}})
    _set_filter(app, "shop", "pricey", {"filter": {"price_usd": [{"numeric": [">", 300]}]}})
    cancelled = {
        "store": "example_corp",
        "event": "order_cancelled",
        "customer_interests": "baseball",
    }
    batch(
        app,
        "shop",
        [
            {"body": {"n": 0}},  # no attributes at all
            {"body": {"n": 1}, "attributes": cancelled},  # no `encrypted`
            {"body": {"n": 2}, "attributes": dict(cancelled, encrypted="false")},
            {"body": {"n": 3}, "attributes": {"price_usd": "3.015e2"}},
        ],
    )
    _settle(app, clock)
    assert _drain(app, "shop", "plain") == [2]
    assert _drain(app, "shop", "no-store") == [3]
    assert _drain(app, "shop", "pricey") == [3]


def test_a_filter_over_the_combinations_or_the_size_is_a_400(sqlite_app):
    app = sqlite_app
    create(app, "orders")
    # 102 conditions, 200 combinations (SNS multiplies).
    body = {"filter": {"a": [str(i) for i in range(100)], "b": ["x", "y"]}}
    errors = _set_filter(app, "orders", "wide", body, status=400).json["error_msg"]
    assert "combinations" in errors["filter"]
    big = {"filter": {"c": ["x" * 250] * 66}}  # 16.7 KB of JSON
    errors = _set_filter(app, "orders", "big", big, status=400).json["error_msg"]
    assert errors == {"filter": "must be at most 16384 bytes as compact JSON"}
    fits = {"filter": {"c": [f"{i:03d}" + "x" * 200 for i in range(60)]}}  # 12.4 KB
    assert _set_filter(app, "orders", "fits", fits).json["filter"] == fits["filter"]
