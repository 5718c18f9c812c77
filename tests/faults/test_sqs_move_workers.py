"""SQS message move tasks on the server as shipped (granian, two worker
processes): a task runs on a thread of the worker that started it, but its
state lives in the store, so every worker lists it, one task per source holds
when two starts race through different workers, and a task is cancelled once,
whichever worker the cancels reach.

Each call uses a client of its own (a fresh connection), so the kernel spreads
the calls over both workers.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from botocore.exceptions import ClientError

from tests.sqs.conftest import make_client
from tests.support import wait_until

pytestmark = pytest.mark.slow

RACERS = 8


def fresh(node, application: str):
    return make_client(node.url, application, "json", read_timeout=15)


def race(node, application: str, call) -> list[str]:
    """``call(client)`` from :data:`RACERS` threads at once, each on its own
    connection: ``ok`` or the error code, per thread."""
    start = threading.Barrier(RACERS)
    outcomes: list[str] = []
    lock = threading.Lock()

    def one(client) -> None:
        start.wait(15)
        try:
            call(client)
            outcome = "ok"
        except ClientError as exc:
            outcome = exc.response["Error"]["Code"]
        with lock:
            outcomes.append(outcome)

    clients = [fresh(node, application) for _ in range(RACERS)]
    threads = [threading.Thread(target=one, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for client in clients:
        client.close()
    return outcomes


def test_move_tasks_hold_across_granian_workers(make_api_node, test_apps):
    node = make_api_node("moves", server="granian")
    assert len(node.workers()) >= 2, "granian runs 2 worker processes"
    admin = fresh(node, test_apps.app)
    stamp = int(time.time() * 1000)
    source = admin.create_queue(QueueName=f"from{stamp}")["QueueUrl"]
    target = admin.create_queue(QueueName=f"to{stamp}")["QueueUrl"]
    arns = [
        admin.get_queue_attributes(QueueUrl=u, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        for u in (source, target)
    ]
    for start in range(0, 30, 10):
        admin.send_message_batch(
            QueueUrl=source,
            Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(start, start + 10)],
        )

    handles: list[str] = []

    def start_task(client) -> None:
        handles.append(
            client.start_message_move_task(
                SourceArn=arns[0], DestinationArn=arns[1], MaxNumberOfMessagesPerSecond=1
            )["TaskHandle"]
        )

    started = Counter(race(node, test_apps.app, start_task))
    assert started == {"ok": 1, "InvalidParameterValue": RACERS - 1}, started
    (handle,) = handles

    for _ in range(RACERS):  # every worker lists the one running task
        client = fresh(node, test_apps.app)
        tasks = client.list_message_move_tasks(SourceArn=arns[0], MaxResults=10)["Results"]
        client.close()
        assert [(t["TaskHandle"], t["Status"]) for t in tasks] == [(handle, "RUNNING")]

    cancelled = Counter(
        race(node, test_apps.app, lambda c: c.cancel_message_move_task(TaskHandle=handle))
    )
    assert cancelled == {"ok": 1, "InvalidParameterValue": RACERS - 1}, cancelled

    task = wait_until(
        lambda: [
            t
            for t in admin.list_message_move_tasks(SourceArn=arns[0])["Results"]
            if t["Status"] not in ("RUNNING", "CANCELLING")
        ],
        timeout=30,
        what="the task to stop",
    )[0]
    assert task["Status"] == "CANCELLED"
    assert task["ApproximateNumberOfMessagesMoved"] < 30

    def counts() -> tuple[int, int]:
        return tuple(
            int(
                admin.get_queue_attributes(
                    QueueUrl=u, AttributeNames=["ApproximateNumberOfMessages"]
                )["Attributes"]["ApproximateNumberOfMessages"]
            )
            for u in (source, target)
        )

    left, moved = counts()
    assert left + moved == 30 and moved == task["ApproximateNumberOfMessagesMoved"]
    # Once cancelled, a new task may start (through any worker) and finishes the move.
    again = fresh(node, test_apps.app)
    again.start_message_move_task(SourceArn=arns[0], DestinationArn=arns[1])
    again.close()
    wait_until(lambda: counts() == (0, 30), timeout=30, what="the second task to move the rest")
    admin.close()
