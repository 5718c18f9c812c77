"""Isolation between applications on the SQS endpoint (queuey.core.quotas): a
throttled application gets SQS's ``RequestThrottled`` (HTTP 403, as SQS sends
it, which real SDKs retry), a full one ``OverLimit`` on CreateQueue; other
applications and unsigned callers do not touch its budget."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tests.sqs.conftest import make_client
from tests.support import KEY, SQS_SECRET

OTHER = "other"

APPLICATIONS = """
[application:{app}]
keys = plain:{key}
allow = 127.0.0.0/8
sqs_secret = {secret}
{own}

[application:{app}-{other}]
keys = plain:{key}
allow = 127.0.0.0/8
sqs_secret = {secret}-{other}
"""


@pytest.fixture
def serve(make_live_server, tmp_path, test_apps):
    """``serve(own)``: a live server on SQLite whose test application has the
    limit lines ``own``; its neighbour ``<app>-other`` the defaults."""

    def make(own: str, **settings):
        path = tmp_path / "sqs-apps.ini"
        path.write_text(
            APPLICATIONS.format(
                app=test_apps.app, key=KEY, secret=SQS_SECRET, own=own, other=OTHER
            ),
            encoding="utf-8",
        )
        settings = {
            "queuey.applications": str(path),
            "queuey.limits.throttle_hold": "0",
            **settings,
        }
        return make_live_server("sqlite", **settings)

    return make


def error_of(exc: pytest.ExceptionInfo) -> tuple[str, int]:
    response = exc.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


@pytest.mark.parametrize("protocol", ["json", "query"])
def test_over_the_rate_is_request_throttled(serve, test_apps, protocol):
    # One token every 10 s: the test runs well inside one.
    server = serve("max_requests_per_second = 0.1\nmax_burst = 3")
    client = make_client(server.url, test_apps.app, protocol)
    other = make_client(server.url, f"{test_apps.app}-{OTHER}", protocol, f"{SQS_SECRET}-{OTHER}")
    wrong = make_client(server.url, test_apps.app, protocol, secret="not-the-secret")
    try:
        for _ in range(5):  # a wrong signature costs the application nothing
            with pytest.raises(ClientError) as refused:
                wrong.list_queues()
            assert error_of(refused)[0] == "SignatureDoesNotMatch"
        client.create_queue(QueueName="jobs")
        client.list_queues()
        client.list_queues()
        with pytest.raises(ClientError) as throttled:
            client.send_message(QueueUrl=f"{server.url}/000000000000/jobs", MessageBody="x")
        assert error_of(throttled) == ("RequestThrottled", 403)
        headers = throttled.value.response["ResponseMetadata"]["HTTPHeaders"]
        assert 1 <= int(headers["retry-after"]) <= 10
        # Nothing was sent; the neighbour is not slowed.
        assert server.app.registry.queuey.storage.get_queue(test_apps.app, "jobs")
        for _ in range(10):
            other.list_queues()
    finally:
        for made in (client, other, wrong):
            made.close()


def test_sdks_retry_the_throttle(serve, test_apps):
    """botocore's retry rules (legacy: SQS's RequestThrottled with 403;
    standard: the throttling codes) both take our answer as a throttle."""
    server = serve("max_requests_per_second = 0.1\nmax_burst = 1")
    clients = [
        make_client(
            server.url,
            test_apps.app,
            "json",
            retries={"mode": mode, "max_attempts": 2},
            connect_timeout=5,
        )
        for mode in ("legacy", "standard")
    ]
    try:
        clients[0].list_queues()
        for client in clients:
            with pytest.raises(ClientError) as throttled:
                client.list_queues()
            assert error_of(throttled)[0] == "RequestThrottled"
            assert throttled.value.response["ResponseMetadata"]["RetryAttempts"] >= 1
    finally:
        for client in clients:
            client.close()


def test_create_queue_over_the_cap_is_over_limit(serve, test_apps, protocol):
    server = serve("max_queues = 2")
    client = make_client(server.url, test_apps.app, protocol)
    try:
        first = client.create_queue(QueueName="one")["QueueUrl"]
        client.create_queue(QueueName="two")
        # CreateQueue of a queue that exists is not a new queue.
        assert client.create_queue(QueueName="one")["QueueUrl"] == first
        with pytest.raises(ClientError) as refused:
            client.create_queue(QueueName="three")
        assert error_of(refused) == ("OverLimit", 403)
        names = [q.name for q in server.app.registry.queuey.storage.list_queues(test_apps.app)]
        assert names == ["one", "two"]
        client.delete_queue(QueueUrl=first)
        client.create_queue(QueueName="three")
    finally:
        client.close()
