"""The AWS CLI (awscli from PyPI) against a live Queuey, over both protocols."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_cli_round_trip(aws):
    url = aws("create-queue", "--queue-name", "cli-q", "--attributes", "VisibilityTimeout=20")[
        "QueueUrl"
    ]
    assert aws("get-queue-url", "--queue-name", "cli-q")["QueueUrl"] == url
    assert url in aws("list-queues", "--queue-name-prefix", "cli")["QueueUrls"]
    sent = aws(
        "send-message",
        "--queue-url",
        url,
        "--message-body",
        "from the cli",
        "--message-attributes",
        json.dumps({"who": {"DataType": "String", "StringValue": "ops"}}),
    )
    assert sent["MessageId"]
    entries = json.dumps([{"Id": str(i), "MessageBody": f"b{i}"} for i in range(3)])
    assert (
        len(aws("send-message-batch", "--queue-url", url, "--entries", entries)["Successful"]) == 3
    )
    got = aws(
        "receive-message",
        "--queue-url",
        url,
        "--max-number-of-messages",
        "10",
        "--message-attribute-names",
        "All",
        "--attribute-names",
        "All",
    )["Messages"]
    assert sorted(m["Body"] for m in got) == sorted(["from the cli", "b0", "b1", "b2"])
    for m in got:
        aws("delete-message", "--queue-url", url, "--receipt-handle", m["ReceiptHandle"])
    attributes = aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "All")[
        "Attributes"
    ]
    assert attributes["VisibilityTimeout"] == "20"
    assert attributes["ApproximateNumberOfMessages"] == "0"
    aws("tag-queue", "--queue-url", url, "--tags", "team=ops")
    assert aws("list-queue-tags", "--queue-url", url)["Tags"] == {"team": "ops"}
    aws("purge-queue", "--queue-url", url)
    aws("delete-queue", "--queue-url", url)
    failed = aws("get-queue-url", "--queue-name", "cli-q", check=False)
    assert failed.returncode != 0
    assert "NonExistentQueue" in failed.stderr or "QueueDoesNotExist" in failed.stderr
