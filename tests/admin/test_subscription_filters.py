"""The queue page shows each subscription's filter (escaped), and one set but
not used yet."""

from __future__ import annotations

from tests.web.calls import batch, create, reserved


def test_the_queue_page_shows_filters(admin, settle):
    create(admin, "orders")
    hostile = {"tier": ["<script>alert(1)</script>"]}
    admin.put_json("/queue/orders/subscriptions/vip", {"filter": hostile}, headers=admin.auth)
    admin.put_json(
        "/queue/orders/subscriptions/later",
        {"filter": {"region": [{"prefix": "eu-"}]}},
        headers=admin.auth,
    )
    batch(admin, "orders", [{"body": {"n": 1}, "attributes": {"tier": "gold"}}])
    settle()
    assert reserved(admin, "orders", subscription="vip") == []
    assert len(reserved(admin, "orders")) == 1
    page = admin.get("/admin/queue/orders").text
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "every message" in page  # the default subscription has no filter
    assert "Filtered, not used yet" in page and "later" in page and "eu-" in page
