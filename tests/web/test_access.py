"""Identity, keys, allowlists and trusted proxies, on each storage backend."""

from __future__ import annotations

import json

import pytest

from queuey import applications
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
            "ApplicationKey",
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


@pytest.mark.parametrize("key", [None, KEY, "wrong"])
@pytest.mark.parametrize(
    "method, path",
    [("POST", "/queue"), ("GET", "/queue/pub"), ("GET", "/queue/priv"), ("POST", "/queue/pub")],
)
def test_an_unknown_application_is_refused_as_a_wrong_key(
    sqlite_app, monkeypatch, method, path, key
):
    """Same status, field and words, and the same key checks, for a name that
    does not exist and for a real one with a key that is not its own; a
    public queue still opens to its application's name alone."""
    app = sqlite_app
    for name, kind in (("pub", "public"), ("priv", "private")):
        app.post_json("/queue", {"queue_name": name, "type": kind}, headers=app.auth, status=201)
    digests = []
    real_digest = applications.digest

    def counted(text):
        digests.append(text)
        return real_digest(text)

    monkeypatch.setattr(applications, "digest", counted)
    answers = []
    for name in ("nobody-" + app.apps.app, app.apps.remote_app):
        headers = {"X-Application-Name": name, **({"ApplicationKey": key} if key else {})}
        digests.clear()
        res = app.request(path, method=method, headers=headers, expect_errors=True)
        answers.append((res.status_code, res.body, len(digests)))
    assert answers[0] == answers[1], answers
    assert answers[0][0] == 401 and list(json.loads(answers[0][1])["error_msg"]) == [
        "ApplicationKey"
    ]
    assert answers[0][2] == (1 if key else 0)
    app.get("/queue/pub", headers=app.reader, status=200)


@pytest.mark.parametrize(
    "peer, forwarded, status",
    [
        ("127.0.0.1", "203.0.113.9", 403),  # a proxy on this host, for a client outside
        ("127.0.0.1", None, 200),
        ("10.0.0.5", "192.0.2.7", 200),  # a proxy elsewhere, for an allowed client
        ("10.0.0.5", None, 403),
        ("198.51.100.7", "192.0.2.7", 403),  # not a proxy: its header counts for nothing
    ],
)
def test_metrics_allow_the_client_behind_a_trusted_proxy(
    make_app, sqlite_storage, wrap_app, peer, forwarded, status
):
    wsgi = make_app(
        sqlite_storage,
        **{
            "queuey.trusted_proxies": "127.0.0.1, 10.0.0.0/8",
            "queuey.metrics.allow": "127.0.0.0/8, 192.0.2.0/24",
        },
    )
    client = wrap_app(wsgi, remote_addr=peer)
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    res = client.get("/metrics", headers=headers, status=status)
    if status == 403:
        assert res.json["error_msg"] == {
            "client_address": "metrics are not exposed to this address"
        }
