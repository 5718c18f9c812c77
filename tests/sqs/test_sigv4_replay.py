"""Replays of a captured SigV4 request against the server as shipped: granian
with 2 worker processes, in a process of its own, driven by boto3.

boto3 sends a real ``SendMessage``; its bytes are captured on the way out
(botocore's ``before-send`` event) and sent again by someone who does not
hold the secret: re-aimed at another queue with the old body's hash in
``X-Amz-Content-Sha256``, turned into a ``DeleteQueue`` by an unsigned
``X-Amz-Target``; and a presigned URL with a non-ASCII signature. Each is refused with SQS's
error, and the store is as it was.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess

import pytest
import requests

from tests.faults.conftest import ApiNode
from tests.sqs.conftest import make_client
from tests.support import server_settings

pytestmark = pytest.mark.slow


@pytest.fixture
def granian_node(request, tmp_path, applications_file):
    base = server_settings(request, applications_file, "sqlite", tmp_path / "replay.sqlite3")
    node = ApiNode("sigv4-replay", tmp_path, base, server="granian")
    try:
        yield node.wait_ready()
    finally:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            node.stop()


def _count(client, url: str) -> int:
    attributes = client.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"])


def test_captured_requests_replayed_with_changes_are_refused(granian_node, test_apps):
    client = make_client(granian_node.url, test_apps.app, "json")
    target = client.create_queue(QueueName="target")["QueueUrl"]
    other = client.create_queue(QueueName="other")["QueueUrl"]

    sent = []
    client.meta.events.register(
        "before-send.sqs.SendMessage", lambda request, **_: sent.append(request)
    )
    client.send_message(QueueUrl=target, MessageBody="hello")
    captured = sent[0]
    headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in captured.headers.items()}
    body = captured.body
    assert "x-amz-target" in headers["Authorization"]

    def replay(changed_headers: dict, changed_body: bytes) -> requests.Response:
        return requests.post(captured.url, data=changed_body, headers=changed_headers, timeout=30)

    # The same bytes again are the same request: SigV4 allows that for 15 minutes.
    assert replay(headers, body).status_code == 200
    assert (_count(client, target), _count(client, other)) == (2, 0)

    reaimed = json.loads(body)
    reaimed["QueueUrl"] = other
    reaimed_body = json.dumps(reaimed).encode()
    stated_hash = {**headers, "X-Amz-Content-Sha256": hashlib.sha256(body).hexdigest()}
    delete = {**headers, "X-Amz-Target": "AmazonSQS.DeleteQueue"}
    attempts = [
        ("body re-aimed, old hash stated", stated_hash, reaimed_body, 400, "IncompleteSignature"),
        ("body re-aimed", headers, reaimed_body, 403, "SignatureDoesNotMatch"),
        ("X-Amz-Target changed", delete, body, 403, "SignatureDoesNotMatch"),
    ]
    for label, changed_headers, changed_body, status, code in attempts:
        answer = replay(changed_headers, changed_body)
        assert answer.status_code == status, (label, answer.text)
        assert answer.json()["__type"] == f"com.amazonaws.sqs#{code}", label
        assert answer.headers["x-amzn-query-error"] == f"{code};Sender", label
    assert (_count(client, target), _count(client, other)) == (2, 0)

    # A presigned URL (query protocol) whose signature is made non-ASCII.
    query_client = make_client(granian_node.url, test_apps.app, "query")
    url = query_client.generate_presigned_url(
        "list_queues", Params={}, ExpiresIn=300, HttpMethod="GET"
    )
    fine = requests.get(url, timeout=30)
    assert fine.status_code == 200, fine.text
    answer = requests.get(url[:-6] + "%C3%A9%C3%A9", timeout=30)
    assert answer.status_code == 403, answer.text
    assert "<Code>SignatureDoesNotMatch</Code>" in answer.text
    client.close()
    query_client.close()
