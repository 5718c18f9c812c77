"""``queuey peek QUEUE``: the newest messages, bodies pretty-printed.

A plain read (``GET /queue/{name}``, newest first): it leases nothing and
moves no checkpoint, so it changes nothing for consumers.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from queuey.cli.arguments import at_most, positive
from queuey.cli.remote import connect, remote_command
from queuey.client.models import ReceivedMessage
from queuey.limits import MAX_READ


def show(message: ReceivedMessage) -> str:
    when = datetime.fromtimestamp(message.timestamp, UTC).isoformat(timespec="microseconds")
    head = f"{message.ref}  {when.replace('+00:00', 'Z')}  priority {message.priority}"
    if message.attributes:
        head += "  attributes " + json.dumps(message.attributes, ensure_ascii=False)
    return head + "\n" + json.dumps(message.body, indent=2, ensure_ascii=False)


def cmd_peek(args: argparse.Namespace) -> int:
    with connect(args) as client:
        messages = client.read(
            args.queue,
            limit=args.n,
            order="descending",
            partitions=args.partition or None,
        )
    if not messages:
        print(f"({args.queue} has no messages to show)")
        return 0
    print("\n\n".join(show(m) for m in messages))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = remote_command(sub, "peek", "show the newest messages (changes nothing)", cmd_peek)
    parser.add_argument(
        "-n", type=at_most(MAX_READ), default=10, help=f"how many (default 10, at most {MAX_READ})"
    )
    parser.add_argument(
        "--partition",
        type=positive,
        action="append",
        metavar="P",
        help="only this partition (repeat for several); default all",
    )
