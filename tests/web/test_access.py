"""Identity, keys, allowlists and trusted proxies, on each storage backend."""

from __future__ import annotations

import pytest

from tests.support import KEY, ROTATED_KEY


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
    app.get("/queue/x/info", headers=app.auth, status=404)


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
