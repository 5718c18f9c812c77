"""``queuey explain`` against a live Queuey: the verdict and each reason in
words (blocking ones marked ``*``), ``--json`` as the API answers it, and a
refusal as one line on stderr."""

from __future__ import annotations

import json

from queuey.client.models import OutgoingMessage


def test_explain_prints_the_verdict_and_each_reason(queuey, client):
    client.create_queue("jobs", max_attempts=1)
    (posted,) = client.post_batch(
        "jobs", [OutgoingMessage({"n": 1}, attributes={"colour": "blue"})]
    )
    client.set_subscription_filter("jobs", "reds", {"colour": ["red"]})
    (got,) = client.reserve("jobs", subscription="workers")
    client.release("jobs", [got.receipt], subscription="workers", error="bad input")

    free = queuey("explain", "jobs", posted.message_id)
    print(f"\n{free.out}")
    assert free.code == 0, free.err
    assert "deliverable now (state new)" in free.out.splitlines()[0]

    refused = queuey("explain", "jobs", posted.message_id, "--subscription", "reds")
    print(refused.out)
    assert "not deliverable now" in refused.out
    assert "  * refused by the subscription's filter: colour is 'blue'" in refused.out

    dead = queuey(
        "explain",
        "jobs",
        f"{posted.partition}:{posted.message_id}",
        "--subscription",
        "workers",
        "--json",
    )
    answer = json.loads(dead.out)
    assert (answer["state"], answer["deliverable"], answer["attempts"]) == (
        "dead_lettered",
        False,
        1,
    )
    assert answer["reasons"][0]["values"]["last_error"] == "bad input"

    missing = queuey("explain", "jobs", "0" * 32)
    assert missing.code != 0 and missing.out == ""
    assert len(missing.err.strip().splitlines()) == 1
