"""``queuey schedules list|create|pause|resume|delete``: recurring messages.

Each verb is one call of the client's schedule calls
(:mod:`queuey.client.schedules`, the HTTP API's ``/schedules`` routes, see
docs/schedules.rst), so it fails over and retries like every remote command. A
create is not repeated once it may have reached the service (a lost answer
says so); pause, resume and delete have the same effect when repeated.

The service checks everything (cron syntax, time zone, bounds, the message
template); a refusal is printed as the service words it, one line per field.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from typing import Any

from queuey.cli.arguments import positive
from queuey.cli.errors import CommandError
from queuey.cli.output import print_table
from queuey.cli.remote import connect, remote_command
from queuey.client.errors import BadRequest, Conflict, NotFound
from queuey.client.http import QueueyClient
from queuey.client.models import given
from queuey.core import cron
from queuey.model.schedules import INTEGER_FIELDS, MISSED_POLICIES
from queuey.wire import ScheduleInfo

#: The message template's options: flag, field of ``message``.
MESSAGE_OPTIONS = (*INTEGER_FIELDS, "partition_key")


@contextmanager
def client_of(args: argparse.Namespace) -> Iterator[QueueyClient]:
    """The client for one schedule call; a refusal becomes the service's words."""
    with connect(args) as client:
        try:
            yield client
        except (BadRequest, NotFound, Conflict) as exc:
            if not exc.error_msg:
                raise
            lines = [f"{field}: {why}" for field, why in exc.error_msg.items()]
            raise CommandError("\n  ".join(lines)) from exc


def local_time(epoch: int | None, zone: str) -> str:
    """``2026-12-01T09:00:00+01:00`` in the schedule's zone (``-`` for none;
    in UTC for a zone this machine does not know)."""
    if epoch is None:
        return "-"
    try:
        return datetime.fromtimestamp(epoch, cron.time_zone(zone)).isoformat()
    except ValueError:
        return datetime.fromtimestamp(epoch, UTC).isoformat()


def when_text(schedule: ScheduleInfo) -> str:
    return schedule.cron or f"every {schedule.interval} s"


def summary(s: ScheduleInfo) -> str:
    """The schedule in one line; its ``state`` is ``active``, ``paused``,
    ``stopped`` (by the service: its ``error`` says why) or ``ended``."""
    return (
        f"{s.name} -> {s.queue}, {when_text(s)} ({s.timezone}), "
        f"{s.state}, next tick {local_time(s.next_tick, s.timezone)}"
        + (f" ({s.error})" if s.error else "")
    )


def cmd_list(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        schedules = client.list_schedules()
    if args.json:
        print(json.dumps([s.model_dump() for s in schedules], indent=2, ensure_ascii=False))
        return 0
    if not schedules:
        print("(no schedules)")
        return 0
    titles = ("name", "queue", "when", "timezone", "next tick", "last tick", "posted", "state")
    rows = [
        (s.name, s.queue, when_text(s), s.timezone)
        + tuple(local_time(tick, s.timezone) for tick in (s.next_tick, s.last_tick))
        + (str(s.posted), s.state)
        for s in schedules
    ]
    print_table(titles, rows, right=("posted",))
    return 0


def parsed(option: str, text: str, parse: Callable[[str], Any], wrong: str = "") -> Any:
    """``parse(text)``; its ``ValueError`` is a command-line mistake naming ``option``."""
    try:
        return parse(text)
    except ValueError as exc:
        raise CommandError(f"{option} {wrong}{exc}", 2) from None


def create_body(args: argparse.Namespace) -> dict:
    """The ``POST /schedules`` body the options give (absent options: the service's defaults)."""
    message = {
        "body": parsed("--body", args.body, json.loads, "is not JSON: "),
        **given(**{name: getattr(args, name) for name in MESSAGE_OPTIONS}),
    }
    if args.attributes is not None:
        message["attributes"] = parsed("--attributes", args.attributes, json.loads, "is not JSON: ")
    instant = partial(cron.instant, zone=args.timezone or "UTC")  # ISO text or epoch seconds
    return {"name": args.name, "queue": args.queue, "message": message} | given(
        cron=args.cron,
        interval=args.every,
        timezone=args.timezone,
        start=None if args.start is None else parsed("--start", args.start, instant),
        end=None if args.end is None else parsed("--end", args.end, instant),
        missed=args.missed,
    )


def cmd_create(args: argparse.Namespace) -> int:
    body = create_body(args)
    with client_of(args) as client:
        made = client.create_schedule(body)
    print("created " + summary(made))
    return 0


def cmd_change(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        if args.action == "delete":
            client.delete_schedule(args.name)
            print(f"deleted schedule {args.name}")
            return 0
        changed = getattr(client, f"{args.action}_schedule")(args.name)
    print(f"{args.action}d " + summary(changed))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("schedules", help="list, create, pause, resume or delete schedules")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = remote_command(actions, "list", "the application's schedules", cmd_list, None)
    listing.add_argument("--json", action="store_true", help="a JSON array instead of a table")

    text = "post a message to a queue on a schedule"
    create = remote_command(actions, "create", text, cmd_create, None)
    create.add_argument("name", metavar="NAME", help="1-64 letters, digits, '_' or '-'")
    create.add_argument("--queue", required=True, metavar="Q", help="the queue to post to")
    when = create.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", metavar="EXPR", help="5 fields: minute hour day month weekday")
    when.add_argument("--every", type=positive, metavar="SECONDS", help="a tick every SECONDS")
    create.add_argument("--timezone", metavar="ZONE", help="IANA name for cron (default UTC)")
    create.add_argument(
        "--start", metavar="ISO", help="no tick before this time (default now; ISO or epoch)"
    )
    create.add_argument(
        "--end", metavar="ISO", help="no tick after this time (default never; ISO or epoch)"
    )
    create.add_argument(
        "--missed",
        choices=MISSED_POLICIES,
        help="ticks missed while no node ran: post the latest once (default) or all",
    )
    create.add_argument("--body", required=True, metavar="JSON", help="the message's body")
    create.add_argument("--attributes", metavar="JSON", help="the message's attributes")
    create.add_argument("--partition", type=positive, metavar="N", help="default: random")
    create.add_argument("--partition-key", metavar="KEY", help="hashed to a partition")
    create.add_argument("--priority", type=int, metavar="N", help="0-9")
    create.add_argument("--delay", type=int, metavar="SECONDS", help="delay each message")
    create.add_argument("--ttl", type=int, metavar="SECONDS", help="default: the queue's")

    for action, text in (
        ("pause", "stop posting until resumed"),
        ("resume", "post again from the next tick (missed ticks are not posted)"),
        ("delete", "delete the schedule (the messages it posted stay)"),
    ):
        remote_command(actions, action, text, cmd_change, None).add_argument("name", metavar="NAME")
