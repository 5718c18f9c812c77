"""``queuey redrive QUEUE``: move the queue's dead letters back.

QUEUE is the queue whose messages were dead-lettered; the command finds its
dead-letter queue (``GET /queue/{name}/info``) and calls
``POST /queue/{dead-letter queue}/redrive`` page by page (at most 1000 a
call) until ``--limit`` letters moved or a call moves none. The service
sends each letter back to the queue it came from, so letters of other queues
that share the dead-letter queue move too. Letters the service skips (their
message is not finished in its subscription) stay and are counted.
"""

from __future__ import annotations

import argparse

from queuey.cli.arguments import positive
from queuey.cli.remote import connect, remote_command
from queuey.client.errors import NotFound
from queuey.limits import MAX_READ


def cmd_redrive(args: argparse.Namespace) -> int:
    moved = reposted = 0
    skipped: dict[str, str] = {}
    with connect(args) as client:
        dead = client.queue_info(args.queue).dead_letter_queue or f"{args.queue}-dead"
        try:
            client.queue_info(dead)
        except NotFound:
            print(f"0 dead letter(s): {dead} (dead-letter queue of {args.queue}) does not exist")
            return 0
        while args.limit is None or moved + reposted < args.limit:
            page = MAX_READ if args.limit is None else min(MAX_READ, args.limit - moved - reposted)
            result = client.redrive(dead, limit=page)
            moved += result.moved
            reposted += result.reposted
            skipped.update(result.skipped)
            if result.moved + result.reposted == 0:
                break
    print(
        f"{moved + reposted} dead letter(s) moved back from {dead} "
        f"({moved} reopened, {reposted} posted anew, {len(skipped)} skipped)"
    )
    for message_id, reason in sorted(skipped.items()):
        print(f"  skipped {message_id}: {reason}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    text = "move a queue's dead letters back"
    parser = remote_command(sub, "redrive", text, cmd_redrive, "the queue the letters came from")
    parser.add_argument("--limit", type=positive, metavar="N", help="move at most N (default: all)")
