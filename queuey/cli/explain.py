"""``queuey explain QUEUE MESSAGE_ID [--subscription S]``: whether a message is
handed out to a subscription now and, if not, every reason.

One ``GET /queue/{name}/messages/{id}/explain`` (docs/api.rst, "Explain a
message"); MESSAGE_ID may be ``partition:id``. Prints a line for the verdict
and a line per reason in words (:func:`queuey.wire.explain.describe`), or
the answer as JSON with ``--json``. Exits 0 whether or not the message is
deliverable: the answer is the output.
"""

from __future__ import annotations

import argparse
import json

from queuey.cli.remote import connect, remote_command
from queuey.client.workqueue import DEFAULT_SUBSCRIPTION
from queuey.wire import ExplainAnswer
from queuey.wire.explain import describe


def lines(answer: ExplainAnswer) -> list[str]:
    """The verdict, then each reason (``*`` before those holding it back)."""
    verdict = "deliverable now" if answer.deliverable else "not deliverable now"
    attempts = f", {answer.attempts} attempt(s)" if answer.attempts else ""
    where = f"partition {answer.partition}" if answer.partition else "no partition"
    head = (
        f"{answer.message_id} ({where}) to subscription {answer.subscription}: "
        f"{verdict} (state {answer.state}{attempts})"
    )
    return [head, *(f"  {'*' if r.blocking else '-'} {describe(r)}" for r in answer.reasons)]


def cmd_explain(args: argparse.Namespace) -> int:
    partition_text, _, message_id = args.message.rpartition(":")
    with connect(args) as client:
        answer = client.explain(
            args.queue,
            message_id,
            subscription=args.subscription,
            partition=int(partition_text) if partition_text.isdigit() else None,
        )
    if args.json:
        print(json.dumps(answer.model_dump(), indent=2))
    else:
        print("\n".join(lines(answer)))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    text = "why a message is or is not handed out to a subscription"
    parser = remote_command(sub, "explain", text, cmd_explain, "the message's queue")
    parser.add_argument("message", metavar="MESSAGE_ID", help="a message id, or partition:id")
    parser.add_argument("--subscription", default=DEFAULT_SUBSCRIPTION, help="default: %(default)s")
    parser.add_argument("--json", action="store_true", help="the API's answer as JSON")
