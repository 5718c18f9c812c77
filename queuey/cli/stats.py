"""``queuey stats [QUEUE ...]``: counts of the application's queues.

One ``GET /queue/{name}/stats`` per queue (all of the application's queues
when none is named). Work-queue counts are summed over the queue's
subscriptions; they are approximate, as the service documents.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass

from rich.table import Table

from queuey.cli.output import stdout_console
from queuey.cli.remote import connect, connection_parent
from queuey.client.http import QueueyClient
from queuey.client.models import QueueStats


@dataclass(frozen=True)
class QueueFigures:
    """One row of the table (and one object of ``--json``)."""

    queue: str
    messages: int
    in_flight: int
    delayed: int
    dead_lettered: int
    oldest_age: float | None  # seconds; None when the queue is empty

    @classmethod
    def of(cls, stats: QueueStats, now: float) -> QueueFigures:
        subs = stats.subscriptions
        oldest = stats.oldest_timestamp
        return cls(
            queue=stats.name,
            messages=stats.messages,
            in_flight=sum(s.in_flight for s in subs),
            delayed=sum(s.delayed for s in subs),
            dead_lettered=sum(s.dead_lettered for s in subs),
            oldest_age=None if oldest is None else round(max(0.0, now - oldest), 3),
        )


def age_text(seconds: float | None) -> str:
    """``-``, ``42s``, ``3m12s``, ``2h05m`` or ``4d03h``."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def gather(client: QueueyClient, names: list[str]) -> list[QueueFigures]:
    if not names:
        names = [q.name for q in client.iter_queues()]
    now = time.time()
    return [QueueFigures.of(client.stats(name), now) for name in names]


def cmd_stats(args: argparse.Namespace) -> int:
    with connect(args) as client:
        rows = gather(client, list(args.queues))
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return 0
    table = Table(box=None, pad_edge=False)
    table.add_column("queue")
    for title in ("messages", "in flight", "delayed", "dead-lettered", "oldest"):
        table.add_column(title, justify="right")
    for r in rows:
        table.add_row(
            r.queue,
            str(r.messages),
            str(r.in_flight),
            str(r.delayed),
            str(r.dead_lettered),
            age_text(r.oldest_age),
        )
    stdout_console().print(table)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "stats", help="counts of the application's queues", parents=[connection_parent()]
    )
    parser.add_argument("queues", nargs="*", metavar="QUEUE", help="default: every queue")
    parser.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    parser.set_defaults(func=cmd_stats)
