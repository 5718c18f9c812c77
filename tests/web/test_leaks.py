"""What an anonymous caller can learn or grow: metrics labels, which private
queues exist, and the storage's error text."""

from __future__ import annotations

import logging
import re
import uuid

import pytest
import webtest

from queuey.errors import StorageUnavailable
from tests.web.calls import create


def label_values(metrics_text: str, label: str) -> set[str]:
    return set(re.findall(rf'{label}="([^"]*)"', metrics_text))


def test_metrics_labels_stay_bounded_whatever_the_method_and_path(sqlite_app):
    anonymous = webtest.TestApp(sqlite_app.app, lint=False)  # lint refuses odd methods
    for n in range(30):
        anonymous.request(f"/queue/x{n}/info", method=f"BREW{n}", status="*")
        anonymous.request(f"/random/{uuid.uuid4().hex}", method="GET", status="*")
    text = sqlite_app.get("/metrics").text
    methods = label_values(text, "method")
    routes = label_values(text, "route")
    assert not any(m.startswith("BREW") for m in methods), methods
    assert "other" in methods
    assert len(methods) <= 10, methods
    assert not any("/" in r for r in routes), routes
    assert len(routes) <= 15, routes


@pytest.mark.parametrize(
    "make_headers",
    [
        lambda apps: apps.reader,
        lambda apps: {**apps.reader, "ApplicationKey": "wrong"},
    ],
)
@pytest.mark.parametrize(
    "suffix",
    ["", "/info", "/messages/1:" + uuid.uuid1().hex],
    ids=["queue", "info", "message"],  # the same ids in every process (xdist workers)
)
def test_a_private_queue_looks_like_a_missing_one_to_who_may_not_read_it(app, make_headers, suffix):
    create(app, "secret", type="private")
    headers = make_headers(app.apps)
    private = app.get(f"/queue/secret{suffix}", headers=headers, status="*")
    missing = app.get(f"/queue/nosuchq{suffix}", headers=headers, status="*")
    assert private.status_int == missing.status_int == 401
    assert private.json == missing.json
    assert "secret" not in private.text
    # Who holds the key still tells them apart.
    app.get(f"/queue/secret{suffix}", headers=app.auth, status=200)
    app.get(f"/queue/nosuchq{suffix}", headers=app.auth, status=404)


class FailingPing:
    """An in-process fake storage wrapper (pure web logic): ping fails with driver detail."""

    def __init__(self, storage) -> None:
        self._storage = storage

    def ping(self) -> None:
        raise StorageUnavailable("NoHostAvailable: 10.9.8.7:9042 auth failed for user queuey")

    def __getattr__(self, name):
        return getattr(self._storage, name)


def test_heartbeat_hides_storage_error_text(make_app, sqlite_storage, wrap_app, caplog):
    app = wrap_app(make_app(FailingPing(sqlite_storage)))
    with caplog.at_level(logging.WARNING):
        res = app.get("/__heartbeat__", status=503)
    assert res.json == {"status": "error", "checks": {"storage": "unavailable"}}
    assert "10.9.8.7" not in res.text
    assert res.headers["Retry-After"]
    assert "10.9.8.7" in caplog.text, "the detail is logged for operators"
