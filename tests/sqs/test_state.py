"""State the SQS endpoint keeps, under hostile or concurrent use: message move
tasks end (no cycles, nothing beyond what the source held at the start), every
attribute counts against the message size, odd ListQueues prefixes answer
cleanly, and concurrent changes of a queue's attributes and tags all survive."""

from __future__ import annotations

import datetime
import json
import threading
import time
import urllib.parse

import pytest
import requests
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.sqs.signing import sign_at
from tests.support import SQS_SECRET, wait_until


def code(exc: pytest.ExceptionInfo) -> str:
    return exc.value.response["Error"]["Code"]


def arn_of(client, url: str) -> str:
    return client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]


def count(client, url: str) -> int:
    return int(
        client.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])[
            "Attributes"
        ]["ApproximateNumberOfMessages"]
    )


def send(client, url: str, n: int, tag: str = "m") -> None:
    for start in range(0, n, 10):
        entries = [
            {"Id": str(i), "MessageBody": f"{tag}{i}"} for i in range(start, min(n, start + 10))
        ]
        client.send_message_batch(QueueUrl=url, Entries=entries)


def finished(client, arn: str) -> dict:
    return wait_until(
        lambda: [
            t
            for t in client.list_message_move_tasks(SourceArn=arn)["Results"]
            if t["Status"] not in ("RUNNING", "CANCELLING")
        ],
        timeout=30,
        what="the move task to end",
    )[0]


# -- move tasks ---------------------------------------------------------------------
def test_a_move_task_into_its_own_source_is_refused(client):
    url = client.create_queue(QueueName="self")["QueueUrl"]
    send(client, url, 3)
    arn = arn_of(client, url)
    with pytest.raises(ClientError) as exc:
        client.start_message_move_task(SourceArn=arn, DestinationArn=arn)
    assert code(exc) == "InvalidParameterValue"
    assert client.list_message_move_tasks(SourceArn=arn).get("Results", []) == []
    assert count(client, url) == 3


def test_a_move_task_closing_a_cycle_is_refused(client):
    a = client.create_queue(QueueName="cycle-a")["QueueUrl"]
    b = client.create_queue(QueueName="cycle-b")["QueueUrl"]
    send(client, a, 20)
    arn_a, arn_b = arn_of(client, a), arn_of(client, b)
    handle = client.start_message_move_task(
        SourceArn=arn_a, DestinationArn=arn_b, MaxNumberOfMessagesPerSecond=1
    )["TaskHandle"]
    with pytest.raises(ClientError) as exc:
        client.start_message_move_task(SourceArn=arn_b, DestinationArn=arn_a)
    assert code(exc) == "InvalidParameterValue"
    assert client.list_message_move_tasks(SourceArn=arn_b).get("Results", []) == []
    # Through a dead-letter queue: b's dead letters go to c, and a task moving c's
    # dead letters back (no destination) would feed a -> b's task... and b -> c.
    c = client.create_queue(QueueName="cycle-c")["QueueUrl"]
    arn_c = arn_of(client, c)
    policy = json.dumps({"deadLetterTargetArn": arn_c, "maxReceiveCount": 1})
    client.set_queue_attributes(QueueUrl=a, Attributes={"RedrivePolicy": policy})
    send(client, b, 5)
    second = client.start_message_move_task(
        SourceArn=arn_b, DestinationArn=arn_c, MaxNumberOfMessagesPerSecond=1
    )["TaskHandle"]
    with pytest.raises(ClientError) as exc:
        client.start_message_move_task(SourceArn=arn_c)  # c's redrive goes back to a
    assert code(exc) == "InvalidParameterValue"
    client.cancel_message_move_task(TaskHandle=handle)
    client.cancel_message_move_task(TaskHandle=second)
    assert finished(client, arn_a)["Status"] == "CANCELLED"
    assert finished(client, arn_b)["Status"] == "CANCELLED"


def test_a_move_task_moves_only_what_its_source_held_when_it_started(client):
    source = client.create_queue(QueueName="hwm-from")["QueueUrl"]
    target = client.create_queue(QueueName="hwm-to")["QueueUrl"]
    send(client, source, 4, "before")
    arn = arn_of(client, source)
    client.start_message_move_task(
        SourceArn=arn, DestinationArn=arn_of(client, target), MaxNumberOfMessagesPerSecond=2
    )
    send(client, source, 6, "after")  # the task needs about 2 s for the first 4
    task = finished(client, arn)
    assert (task["Status"], task["ApproximateNumberOfMessagesMoved"]) == ("COMPLETED", 4)
    assert task["ApproximateNumberOfMessagesToMove"] == 4
    assert count(client, source) == 6
    assert count(client, target) == 4


# -- message size -------------------------------------------------------------------
def test_system_attributes_count_against_the_message_size(client):
    url = client.create_queue(QueueName="small", Attributes={"MaximumMessageSize": "1024"})[
        "QueueUrl"
    ]
    header = "Root=1-" + "a" * 2000

    def trace(value: str) -> dict:
        return {"AWSTraceHeader": {"DataType": "String", "StringValue": value}}

    with pytest.raises(ClientError) as exc:
        client.send_message(QueueUrl=url, MessageBody="x", MessageSystemAttributes=trace(header))
    assert code(exc) == "InvalidParameterValue"
    answer = client.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "big", "MessageBody": "x", "MessageSystemAttributes": trace(header)},
            {"Id": "fine", "MessageBody": "x", "MessageSystemAttributes": trace("Root=1-ab")},
        ],
    )
    assert [f["Id"] for f in answer["Failed"]] == ["big"]
    assert [s["Id"] for s in answer["Successful"]] == ["fine"]
    # name + type + value: 14 + 6 + 1004 = 1024 bytes, with a 0-byte... body of 1 is over.
    exact = "R" * (1024 - len("AWSTraceHeader") - len("String") - 1)
    client.send_message(QueueUrl=url, MessageBody="x", MessageSystemAttributes=trace(exact))
    with pytest.raises(ClientError):
        client.send_message(QueueUrl=url, MessageBody="xx", MessageSystemAttributes=trace(exact))
    assert count(client, url) == 2


# -- ListQueues ---------------------------------------------------------------------
@pytest.mark.parametrize("prefix", ["\u0000", "\u0001abc", "a\u007f", "é", "q\u0000"])
def test_list_queues_with_an_odd_prefix_is_a_clean_answer(client, prefix):
    client.create_queue(QueueName="q")
    assert "QueueUrls" not in client.list_queues(QueueNamePrefix=prefix)


def _raw_json(sqs, action: str, payload: dict) -> requests.Response:
    body = json.dumps(payload).encode()  # ASCII: lone surrogates travel as escapes
    headers = {"X-Amz-Target": f"AmazonSQS.{action}", "Content-Type": "application/x-amz-json-1.0"}
    when = datetime.datetime.now(datetime.UTC)
    prepared = sign_at(when, sqs.url + "/", sqs.application, SQS_SECRET, body=body, headers=headers)
    return requests.post(prepared.url, data=body, headers=dict(prepared.headers), timeout=30)


def _raw_query(sqs, params: dict) -> requests.Response:
    body = urllib.parse.urlencode(params, encoding="utf-8", errors="surrogatepass")
    headers = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
    when = datetime.datetime.now(datetime.UTC)
    prepared = sign_at(when, sqs.url + "/", sqs.application, SQS_SECRET, body=body, headers=headers)
    return requests.post(prepared.url, data=body, headers=dict(prepared.headers), timeout=30)


ODD_TEXT = st.text(max_size=90) | st.text(
    st.characters(categories=["Cs", "Cc", "Co", "Zs"]) | st.sampled_from("-_.azAZ09"),
    max_size=8,
)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("protocol", ["json"], indirect=True)
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(prefix=ODD_TEXT)
@example(prefix="\u0000")
@example(prefix="fuzz-\u0000")
@example(prefix="\ud800")
@example(prefix="fuzz-\udfff")
@example(prefix="f" * 81)
@example(prefix="fuzz-")
def test_list_queues_prefix_fuzz_never_a_500(sqs, prefix):
    if not sqs.app.registry.queuey.storage.list_queues(sqs.application, limit=3):
        maker = sqs.client()
        for name in ("fuzz-a", "fuzz-b.fifo", "z"):
            fifo = {"FifoQueue": "true"} if name.endswith(".fifo") else {}
            maker.create_queue(QueueName=name, Attributes=fifo)
    answer = _raw_json(sqs, "ListQueues", {"QueueNamePrefix": prefix})
    assert answer.status_code in (200, 400), answer.text[:300]
    if answer.status_code == 400:  # SQS's JSON error shape, e.g. SerializationException
        assert answer.json()["__type"].startswith("com.amazonaws.sqs#")
    else:
        for url in answer.json().get("QueueUrls", []):
            assert url.rsplit("/", 1)[1].startswith(prefix)
    params = {"Action": "ListQueues", "Version": "2012-11-05", "QueueNamePrefix": prefix}
    query = _raw_query(sqs, params)
    assert query.status_code < 500, query.text[:300]  # MalformedQueryString is a 404
    assert query.text.lstrip().startswith("<"), query.text[:300]


# -- attributes and tags ------------------------------------------------------------
def test_concurrent_tags_and_attribute_changes_all_survive(sqs):
    clients = [sqs.client() for _ in range(6)]
    url = clients[0].create_queue(QueueName="tags")["QueueUrl"]
    start = threading.Barrier(len(clients))
    errors: list[BaseException] = []

    def retried(call) -> None:
        """A 503 (Retry-After) is the documented answer when a compare-and-set
        lost too many races on a busy box; an SQS client sends it again."""
        for attempt in range(5):
            try:
                return call()
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ServiceUnavailable" or attempt == 4:
                    raise
                time.sleep(0.2)

    def tag(worker: int, client) -> None:
        try:
            start.wait(10)
            for i in range(4):
                if worker == 0:
                    retried(
                        lambda i=i: client.set_queue_attributes(
                            QueueUrl=url,
                            Attributes={"ReceiveMessageWaitTimeSeconds": str(i + 1)},
                        )
                    )
                else:
                    retried(
                        lambda i=i: client.tag_queue(QueueUrl=url, Tags={f"w{worker}-{i}": str(i)})
                    )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=tag, args=(w, c)) for w, c in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    tags = clients[0].list_queue_tags(QueueUrl=url)["Tags"]
    assert tags == {f"w{w}-{i}": str(i) for w in range(1, len(clients)) for i in range(4)}
    wait = clients[0].get_queue_attributes(
        QueueUrl=url, AttributeNames=["ReceiveMessageWaitTimeSeconds"]
    )["Attributes"]["ReceiveMessageWaitTimeSeconds"]
    assert wait == "4"
