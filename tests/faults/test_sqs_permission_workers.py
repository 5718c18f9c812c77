"""A queue shared through its SQS ``Policy``, on the server as shipped (granian,
two worker processes, each with its own metadata cache and parsed-policy
cache): a permission added through one worker lets the other application in
through every worker, a removal shuts it out of every worker within the
metadata cache's time, concurrent AddPermission calls through both workers all
survive, and a worker killed with ``kill -9`` changes none of it (the policy
lives in the store).

Each call uses a client of its own (a fresh connection), so the kernel spreads
the calls over both workers. Every send the other application got a 200 for is
counted and read back by the owner: none lost, none duplicated, none stored
from a refused send.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest
from botocore.exceptions import ClientError

from tests.sqs.conftest import make_client
from tests.support import REMOTE_SQS_SECRET, SQS_SECRET, wait_until, write_applications

pytestmark = pytest.mark.slow

CALLS = 12  # fresh connections per round: both workers answer some


@pytest.fixture
def applications_file(tmp_path, test_apps):
    """The remote application may call from loopback too (it shares a queue)."""
    return write_applications(tmp_path / "applications.ini", test_apps, remote_on_loopback=True)


def sends(node, application: str, secret: str, url: str, tag: str, sent: dict) -> list[str]:
    """:data:`CALLS` sends, each on a new connection: ``ok`` or the error code
    of each; the bodies answered 200 are added to ``sent``."""
    outcomes = []
    for i in range(CALLS):
        client = make_client(node.url, application, "json", secret)
        body = f"{tag}-{i}"
        try:
            client.send_message(QueueUrl=url, MessageBody=body)
            sent[body] = sent.get(body, 0) + 1
            outcomes.append("ok")
        except ClientError as exc:
            outcomes.append(exc.response["Error"]["Code"])
        finally:
            client.close()
    return outcomes


def _account(node, application: str, secret: str) -> str:
    """The account id of ``application``, from the URL of a queue it makes."""
    client = make_client(node.url, application, "json", secret)
    try:
        url = client.create_queue(QueueName="whoami")["QueueUrl"]
        return url.rstrip("/").split("/")[-2]
    finally:
        client.close()


def test_a_shared_queue_holds_across_granian_workers(make_api_node, test_apps):
    node = make_api_node("sharing", server="granian")
    assert len(node.workers()) >= 2, "granian runs 2 worker processes"
    owner = make_client(node.url, test_apps.app, "json", SQS_SECRET)
    url = owner.create_queue(QueueName=f"shared{int(time.time() * 1000)}")["QueueUrl"]
    other = _account(node, test_apps.remote_app, REMOTE_SQS_SECRET)
    sent: dict[str, int] = {}
    rounds = iter(range(10_000))

    def round_of_sends() -> list[str]:
        return sends(node, test_apps.remote_app, REMOTE_SQS_SECRET, url, f"r{next(rounds)}", sent)

    refused_before = round_of_sends()
    assert refused_before == ["AccessDenied"] * CALLS

    owner.add_permission(QueueUrl=url, Label="Send", AWSAccountIds=[other], Actions=["SendMessage"])
    wait_until(
        lambda: round_of_sends() == ["ok"] * CALLS,
        timeout=20,
        what="every worker to let the other application send",
    )

    victim = node.workers()[0]
    os.kill(victim, signal.SIGKILL)
    wait_until(
        lambda: victim not in node.workers() and len(node.workers()) >= 2,
        timeout=30,
        what="granian to replace the killed worker",
    )
    assert round_of_sends() == ["ok"] * CALLS, "the new worker reads the policy from the store"

    # Concurrent AddPermission calls through both workers: every label survives.
    labels = [f"Look{i}" for i in range(8)]
    errors: list[str] = []

    def add(label: str) -> None:
        client = make_client(node.url, test_apps.app, "json", SQS_SECRET)
        try:
            client.add_permission(
                QueueUrl=url, Label=label, AWSAccountIds=[other], Actions=["GetQueueAttributes"]
            )
        except ClientError as exc:
            errors.append(exc.response["Error"]["Code"])
        finally:
            client.close()

    threads = [threading.Thread(target=add, args=(label,)) for label in labels]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    policy = owner.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]
    assert sorted(s["Sid"] for s in json.loads(policy["Policy"])["Statement"]) == sorted(
        ["Send", *labels]
    )

    owner.remove_permission(QueueUrl=url, Label="Send")
    started = time.monotonic()
    wait_until(
        lambda: round_of_sends() == ["AccessDenied"] * CALLS,
        timeout=20,
        what="every worker to refuse the other application again",
    )
    shut_out_s = time.monotonic() - started
    stored_before = dict(sent)
    assert round_of_sends() == ["AccessDenied"] * CALLS
    assert sent == stored_before

    read: dict[str, int] = {}

    def drain() -> bool:
        got = owner.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        for message in got:
            read[message["Body"]] = read.get(message["Body"], 0) + 1
            owner.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return not got and len(read) >= len(sent)

    wait_until(drain, timeout=30, what="the owner to read back every accepted send")
    acknowledged = sum(sent.values())
    duplicated = sum(n - 1 for n in read.values() if n > 1)
    lost = len(set(sent) - set(read))
    unexpected = len(set(read) - set(sent))
    print(
        f"\n[granian 2 workers, SQS policy, kill -9 of a worker] acknowledged={acknowledged} "
        f"read_back={len(read)} lost={lost} duplicated={duplicated} "
        f"stored_from_refused={unexpected} shut_out_after_remove_s={shut_out_s:.1f}"
    )
    assert lost == 0 and duplicated == 0 and unexpected == 0
    assert acknowledged == len(read)
    owner.close()
