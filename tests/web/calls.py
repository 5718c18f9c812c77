"""Calls the HTTP API tests make through webtest, shared by tests/web."""

from __future__ import annotations


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


# -- work queues ---------------------------------------------------------------
def reserve(app, queue, status=200, **params):
    return app.post_json(f"/queue/{queue}/reserve", params, headers=app.auth, status=status)


def reserved(app, queue, **params):
    """The messages a reserve answered."""
    return reserve(app, queue, **params).json["messages"]


def receipts_call(app, queue, action, receipts, status=200, **params):
    return app.post_json(
        f"/queue/{queue}/{action}",
        {"receipts": receipts, **params},
        headers=app.auth,
        status=status,
    )


def ack(app, queue, receipts, **params):
    return receipts_call(app, queue, "ack", receipts, **params)


def release(app, queue, receipts, **params):
    return receipts_call(app, queue, "release", receipts, **params)


def extend(app, queue, receipts, **params):
    return receipts_call(app, queue, "extend", receipts, **params)


def batch(app, queue, entries, status=201):
    return app.post_json(
        f"/queue/{queue}/batch", {"messages": entries}, headers=app.auth, status=status
    )
