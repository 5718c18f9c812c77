"""SQS clients lose nothing when one of two API nodes dies (``kill -9``).

Two ``pserve`` nodes share one store (one SQLite file, or the shared Cassandra
node). boto3 producers send batches of 10 and boto3 consumers receive and
delete in batches, half of each starting on the node that is killed; a client
whose call fails moves to the other node, and a producer sends a batch whose
answer it never got again (a standard SQS queue is at-least-once, so such a
batch may be stored twice: counted, not forbidden). Every message whose
SendMessageBatch entry was answered as successful must be received (lost = 0)
and in the end the queue must hold nothing, visible or in flight: messages a
consumer received from the killed node and could not delete come back once
their visibility timeout ends and are deleted then. (A delete whose answer was
lost with the node may have taken effect; such messages are not received again,
which is why the end state is read from the queue's counts.)
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from tests.sqs.conftest import make_client
from tests.support import wait_until

pytestmark = pytest.mark.slow

BEFORE = 6.0  # seconds of traffic through both nodes
AFTER = 6.0  # seconds of traffic once one is dead
VISIBILITY = 4  # seconds a received message stays leased


def sqs_client(url: str, application: str):
    """A JSON-protocol client that fails fast on a dead node (no retries)."""
    return make_client(url, application, "json", connect_timeout=2, read_timeout=10)


class Unanswered(Exception):
    """A 200 whose body died with the node: botocore reads bodies without
    enforcing Content-Length, so a cut answer parses as an empty result."""


def answered(answer: dict, key: str) -> dict:
    if key not in answer:
        raise Unanswered(key)
    return answer


@dataclass
class Counts:
    sent: set[str] = field(default_factory=set)
    acked: set[str] = field(default_factory=set)  # keys answered as sent
    deliveries: list[tuple[str, str]] = field(default_factory=list)  # (key, message id)
    deleted: set[str] = field(default_factory=set)  # keys whose delete succeeded
    deletes_unanswered: int = 0  # messages of delete calls that failed or lost their answer
    failed_calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class SqsThread(threading.Thread):
    """A boto3 client on one node at a time; a failed call moves it to the other."""

    def __init__(self, urls: list[str], application: str, queue: str, counts: Counts):
        super().__init__(daemon=True)
        self.clients = [sqs_client(u, application) for u in urls]
        self.queue_urls: dict[int, str] = {}
        self.queue = queue
        self.counts = counts
        self.at = 0
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    @property
    def client(self):
        return self.clients[self.at]

    def queue_url(self) -> str:
        """The queue's URL on the current node (each node names itself in it)."""
        if self.at not in self.queue_urls:
            self.queue_urls[self.at] = self.client.get_queue_url(QueueName=self.queue)["QueueUrl"]
        return self.queue_urls[self.at]

    def failed(self) -> None:
        with self.counts.lock:
            self.counts.failed_calls += 1
        self.at = (self.at + 1) % len(self.clients)
        time.sleep(0.05)  # not a wait for a condition: a failed node refuses at once

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                try:
                    self.step()
                except (BotoCoreError, ClientError, Unanswered):
                    self.failed()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            for c in self.clients:
                c.close()


class Producer(SqsThread):
    def __init__(self, name: str, *args) -> None:
        super().__init__(*args)
        self.name = name
        self.n = 0
        self.pending: list[str] = []  # keys of a batch whose answer never came

    def step(self) -> None:
        if not self.pending:
            self.pending = [f"{self.name}-{self.n + i}" for i in range(10)]
            self.n += 10
            with self.counts.lock:
                self.counts.sent.update(self.pending)
        answer = answered(
            self.client.send_message_batch(
                QueueUrl=self.queue_url(),
                Entries=[{"Id": str(i), "MessageBody": k} for i, k in enumerate(self.pending)],
            ),
            "Successful",
        )
        done = {self.pending[int(e["Id"])] for e in answer["Successful"]}
        with self.counts.lock:
            self.counts.acked.update(done)
        self.pending = [k for k in self.pending if k not in done]


class Consumer(SqsThread):
    def step(self) -> None:
        url = self.queue_url()
        got = self.client.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=VISIBILITY
        ).get("Messages", [])
        if not got:
            return
        with self.counts.lock:
            self.counts.deliveries.extend((m["Body"], m["MessageId"]) for m in got)
        try:
            answer = answered(
                self.client.delete_message_batch(
                    QueueUrl=url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(got)
                    ],
                ),
                "Successful",
            )
        except (BotoCoreError, ClientError, Unanswered):
            with self.counts.lock:
                self.counts.deletes_unanswered += len(got)
            raise
        with self.counts.lock:
            self.counts.deleted.update(got[int(e["Id"])]["Body"] for e in answer["Successful"])


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)]
)
def test_kill_one_node_under_sqs_traffic(make_api_node, test_apps, backend):
    failing = make_api_node("failing", backend)
    survivor = make_api_node("survivor", backend)
    queue = f"sqs-crash-{int(time.time() * 1000)}"
    admin = sqs_client(survivor.url, test_apps.app)
    admin.create_queue(QueueName=queue, Attributes={"VisibilityTimeout": str(VISIBILITY)})

    counts = Counts()
    orders = ([failing.url, survivor.url], [survivor.url, failing.url])
    producers = [Producer(f"p{i}", orders[i % 2], test_apps.app, queue, counts) for i in range(4)]
    consumers = [Consumer(orders[i % 2], test_apps.app, queue, counts) for i in range(4)]
    for thread in producers + consumers:
        thread.start()

    time.sleep(BEFORE)  # the load phase through both nodes; the threads run meanwhile
    acked_before_kill = len(counts.acked)
    failing.kill()
    time.sleep(AFTER)  # the load phase through the survivor alone
    for producer in producers:
        producer.stopping.set()
        producer.join(30)

    url = admin.get_queue_url(QueueName=queue)["QueueUrl"]
    left: dict[str, str] = {}

    def received() -> set[str]:
        with counts.lock:
            return {key for key, _ in counts.deliveries}

    def drained() -> bool:
        if not counts.acked <= received():
            return False
        left.update(
            admin.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                    "ApproximateNumberOfMessagesDelayed",
                ],
            )["Attributes"]
        )
        return all(v == "0" for v in left.values())

    try:
        wait_until(
            drained,
            timeout=120,
            what=lambda: (
                f"{len(counts.acked - received())} acknowledged messages never received, "
                f"queue counts {left}"
            ),
            interval=0.5,
        )
    finally:
        for consumer in consumers:
            consumer.stopping.set()
        for consumer in consumers:
            consumer.join(30)
        admin.close()

    errors = [t.error for t in producers + consumers if t.error]
    per_key = Counter(key for key, _ in counts.deliveries)
    ids_per_key: dict[str, set[str]] = {}
    for key, message_id in counts.deliveries:
        ids_per_key.setdefault(key, set()).add(message_id)
    lost = counts.acked - set(per_key)
    redelivered = sum(n - 1 for n in per_key.values())
    stored_twice = sum(1 for ids in ids_per_key.values() if len(ids) > 1)
    line = (
        f"[sqs kill -9 of 1 of 2 nodes, {backend}] sent {len(counts.sent)}, "
        f"acknowledged {len(counts.acked)} ({acked_before_kill} before the kill), "
        f"received {len(per_key)} distinct, deleted {len(counts.deleted)} "
        f"(+ {counts.deletes_unanswered} in deletes without an answer), "
        f"lost {len(lost)}, deliveries {len(counts.deliveries)} "
        f"(redelivered {redelivered}, stored twice {stored_twice}), "
        f"failed calls {counts.failed_calls}"
    )
    print("\n" + line)
    assert not errors, f"{errors[:3]} {line}"
    assert acked_before_kill > 0 and len(counts.acked) > acked_before_kill, line
    assert not lost, f"{sorted(lost)[:5]} {line}"
