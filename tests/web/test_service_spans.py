"""The service's own spans (OpenTelemetry, the SDK's in-memory exporter given
as the process's provider): a server span around a post, a child of the
caller's ``traceparent``, which the stored message keeps; a reserve's span
linked to the message's producer; a malformed ``traceparent`` ignored."""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanKind

from tests.web.calls import create, reserved

pytestmark = pytest.mark.unit


def test_the_service_adds_spans_around_post_and_reserve(sqlite_app, sqlite_settle, spans):
    app = sqlite_app
    create(app, "jobs")
    caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    headers = {**app.auth, "traceparent": caller}
    app.post_json("/queue/jobs", {"n": 1}, headers=headers, status=201)
    sqlite_settle()
    (message,) = reserved(app, "jobs")
    assert message["attributes"] == {"traceparent": caller}
    finished = {s.name: s for s in spans.get_finished_spans()}
    print(f"\nservice spans: {sorted(finished)}")
    post, reserve = finished["queuey post"], finished["queuey reserve"]
    assert post.kind == SpanKind.SERVER
    assert (f"{post.context.trace_id:032x}", f"{post.parent.span_id:016x}") == (
        "0af7651916cd43dd8448eb211c80319c",
        "b7ad6b7169203331",
    )
    assert [f"{link.context.span_id:016x}" for link in reserve.links] == ["b7ad6b7169203331"]
    # A malformed traceparent is ignored: no attribute, no error.
    bad = {**app.auth, "traceparent": "00-zz-not-a-context"}
    app.post_json("/queue/jobs", {"n": 2}, headers=bad, status=201)
    sqlite_settle()
    (second,) = reserved(app, "jobs")
    assert "attributes" not in second
