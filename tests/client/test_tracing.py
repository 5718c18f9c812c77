"""Trace context through the queue (OpenTelemetry, the SDK's in-memory exporter):
a producer's span, through the server as shipped (granian, 2 workers) on each
backend, to the consumer's span, in one trace; the spool records the context
it was called in; the SQS endpoint's AWSTraceHeader and the native
```traceparent`` are one context. The service's own spans:
tests/web/test_service_spans.py."""

from __future__ import annotations

import json

import pytest
import requests
from opentelemetry.trace import SpanKind

from queuey import tracing
from queuey.client import QueueyClient, Spool
from queuey.client.models import OutgoingMessage
from tests.faults.conftest import shipped_node
from tests.sqs.conftest import make_client
from tests.support import KEY, server_settings, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)])
def node(request, tmp_path, applications_file):
    settings = server_settings(request, applications_file, request.param, tmp_path / "q.sqlite3")
    with shipped_node("tracing", tmp_path, settings) as found:
        yield found


def reserve_all(client: QueueyClient, queue: str, count: int, **kw) -> list:
    got: list = []
    wait_until(
        lambda: got.extend(client.reserve(queue, limit=10, **kw)) or len(got) >= count,
        30,
        f"{count} messages reserved",
    )
    return got


def test_one_trace_from_the_producer_through_the_queue_to_the_consumer(
    node, spans, test_apps, tmp_path
):
    client = QueueyClient([node.url], test_apps.app, KEY)
    client.create_queue("jobs", partitions=2)
    producer = tracing.tracer()
    with producer.start_as_current_span("checkout", kind=SpanKind.PRODUCER) as span:
        produced = span.get_span_context()
        client.post("jobs", {"n": 1})
        client.post_batch("jobs", [{"n": 2}, OutgoingMessage({"n": 3}, attributes={"k": "v"})])
        spool = Spool(client, tmp_path / "spool")
        spool.post("jobs", {"n": 4})
    assert spool.flush(30) and spool.close(5)  # sent later, outside the span
    # A message posted outside any span carries no context.
    client.post("jobs", {"n": 5})

    got = reserve_all(client, "jobs", 5)
    by_n = {m.body["n"]: m for m in got}
    parents = {n: (m.attributes or {}).get("traceparent") for n, m in by_n.items()}
    print(f"\nproducer span {produced.span_id:016x}; traceparent per message: {parents}")
    flags = f"{int(produced.trace_flags):02x}"  # sampled (and, from the SDK, random)
    expected = f"00-{produced.trace_id:032x}-{produced.span_id:016x}-{flags}"
    assert parents == {1: expected, 2: expected, 3: expected, 4: expected, 5: None}
    assert by_n[3].attributes["k"] == "v"  # the message's own attributes stay

    for n in (1, 4, 5):
        with tracing.consuming("process jobs", by_n[n].attributes):
            pass
    finished = spans.get_finished_spans()
    processed = [s for s in finished if s.name == "process jobs"]
    received = [s for s in finished if s.name == "queuey receive jobs"]
    print(f"spans: {[(s.name, s.context.trace_id == produced.trace_id) for s in finished]}")
    assert [s.context.trace_id == produced.trace_id for s in processed] == [True, True, False]
    assert processed[0].parent.span_id == produced.span_id
    assert [link.context.span_id for link in processed[0].links] == [produced.span_id]
    assert processed[2].parent is None and not processed[2].links
    # The reserve's span links to each producer (one, here).
    assert received and {link.context.span_id for s in received for link in s.links} == {
        produced.span_id
    }


def test_the_sqs_trace_header_and_the_traceparent_are_one_context(node, spans, test_apps):
    sqs = make_client(node.url, test_apps.app, "json")
    url = sqs.create_queue(QueueName="traced")["QueueUrl"]
    xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    sqs.send_message(
        QueueUrl=url,
        MessageBody='{"from": "sqs"}',
        MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": xray}},
    )
    client = QueueyClient([node.url], test_apps.app, KEY)
    with tracing.tracer().start_as_current_span("native producer") as span:
        native = span.get_span_context()
        client.post("traced", {"from": "native"})

    # Natively (over HTTP: an SQS body is a JSON string, which the client's
    # models do not take), the SQS message carries the traceparent its header names.
    got: list = []

    def reserve() -> bool:
        answer = requests.post(
            f"{node.url}/queue/traced/reserve",
            json={"subscription": "native", "limit": 10},
            headers={"X-Application-Name": test_apps.app, "ApplicationKey": KEY},
            timeout=10,
        )
        got.extend(answer.json()["messages"])
        return len(got) >= 2

    wait_until(reserve, 30, "both messages reserved natively")
    contexts = {"sqs.trace" in m["attributes"]: m["attributes"]["traceparent"] for m in got}
    assert contexts[True] == "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"

    answers = []
    wait_until(
        lambda: (
            answers.extend(
                sqs.receive_message(
                    QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
                ).get("Messages", [])
            )
            or len(answers) >= 2
        ),
        30,
        "both messages received through SQS",
    )
    headers = {
        json.loads(m["Body"])["from"]: m["Attributes"].get("AWSTraceHeader") for m in answers
    }
    print(f"\nAWSTraceHeader per message: {headers}")
    assert headers["sqs"] == xray
    trace_id = f"{native.trace_id:032x}"
    assert headers["native"] == (
        f"Root=1-{trace_id[:8]}-{trace_id[8:]};Parent={native.span_id:016x};Sampled=1"
    )
