"""``queuey stats [QUEUE ...]``: counts of the application's queues.

One ``GET /queue/{name}/stats`` per queue (all of the application's queues
when none is named). Work-queue counts are summed over the queue's
subscriptions; they are approximate, as the service documents.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from queuey.cli.output import print_table
from queuey.cli.remote import connect, remote_command
from queuey.client.http import QueueyClient
from queuey.client.models import QueueStats

#: The work-queue counts, each summed over the queue's subscriptions.
SUMMED = ("in_flight", "delayed", "dead_lettered")
TITLES = ("queue", "messages", "in flight", "delayed", "dead-lettered", "oldest")


def age_of(oldest: float | None, now: float) -> float | None:
    """Seconds from ``oldest`` to ``now``, to the millisecond; None for none."""
    return None if oldest is None else round(max(0.0, now - oldest), 3)


def figures(stats: QueueStats, now: float) -> dict[str, Any]:
    """One row of the table (and one object of ``--json``): the queue, its
    counts and ``oldest_age`` (seconds; None when the queue is empty)."""
    return {
        "queue": stats.name,
        "messages": stats.messages,
        **{name: sum(getattr(s, name) for s in stats.subscriptions) for name in SUMMED},
        "oldest_age": age_of(stats.oldest_timestamp, now),
    }


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


def gather(client: QueueyClient, names: list[str]) -> list[dict[str, Any]]:
    if not names:
        names = [q.name for q in client.iter_queues()]
    now = time.time()
    return [figures(client.stats(name), now) for name in names]


def cmd_stats(args: argparse.Namespace) -> int:
    with connect(args) as client:
        rows = gather(client, list(args.queues))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    counts = ("messages", *SUMMED)
    cells = [[r["queue"], *(str(r[c]) for c in counts), age_text(r["oldest_age"])] for r in rows]
    print_table(TITLES, cells, right=TITLES[1:])
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = remote_command(sub, "stats", "counts of the application's queues", cmd_stats, None)
    parser.add_argument("queues", nargs="*", metavar="QUEUE", help="default: every queue")
    parser.add_argument("--json", action="store_true", help="a JSON array instead of a table")
