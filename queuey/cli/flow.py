"""``queuey flow show|pause|resume|set QUEUE``: a queue's flow control.

Each verb is one or two calls of the client's flow calls
(:mod:`queuey.client.flow`, the HTTP API's routes in docs/flow.rst), so it
fails over and retries like every remote command; each has the same effect
when repeated. ``set`` changes only the settings given (``0`` turns a limit
off), the queue's with no ``--subscription``, that subscription's with one.

The service checks every value; a refusal is printed as the service words
it, one line per field.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict
from typing import Any

from rich.table import Table

from queuey.cli.errors import CommandError
from queuey.cli.output import stdout_console
from queuey.cli.remote import connection_parent
from queuey.cli.schedules import client_of
from queuey.client.flow import FlowInfo, QueueFlow, SubscriptionFlow

#: A rate as text: a plain decimal, bounded before ``float()`` sees it.
_RATE = re.compile(r"[0-9]{1,12}(\.[0-9]{1,6})?")
_COUNT = re.compile(r"[0-9]{1,12}")
#: option dest -> API field, per level.
QUEUE_OPTIONS = {
    "post_rate": "post_rate",
    "post_burst": "post_burst",
    "max_length": "max_length",
    "overflow": "overflow",
    "fair": "fair",
}
SUBSCRIPTION_OPTIONS = {"rate": "rate", "burst": "burst", "max_in_flight": "max_in_flight"}


def rate(text: str) -> float | int:
    """Messages per second, ``0`` for no limit (an integer stays one)."""
    if not _RATE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not a number of messages per second: {text!r}")
    return int(text) if "." not in text else float(text)


def count(text: str) -> int:
    """A whole number, ``0`` for no limit."""
    if not _COUNT.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return int(text)


def on_off(text: str) -> bool:
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError("give on or off")
    return text == "on"


def limit(value: float, unit: str = "") -> str:
    """``-`` for no limit, else the value (``10/s``, ``1,000``)."""
    if not value:
        return "-"
    shown = f"{value:,g}" if isinstance(value, float) else f"{value:,}"
    return f"{shown}{unit}"


def queue_lines(name: str, flow: QueueFlow) -> list[str]:
    rate_text = limit(flow.post_rate, "/s")
    if flow.post_rate:
        rate_text += f" (burst {flow.post_burst:,})"
    length = limit(flow.max_length)
    if flow.max_length:
        length += f" (overflow {flow.overflow})"
    return [
        f"queue {name}: posting {'PAUSED' if flow.paused else 'open'}",
        f"  post_rate   {rate_text}",
        f"  max_length  {length}",
        f"  fair        {'on' if flow.fair else 'off'}",
    ]


def subscription_state(flow: SubscriptionFlow) -> str:
    return "PAUSED" if flow.paused else "delivering"


def print_flow(name: str, info: FlowInfo) -> None:
    print("\n".join(queue_lines(name, info.queue)))
    if not info.subscriptions:
        print("subscriptions: no flow settings (every one delivers without limit)")
        return
    table = Table(box=None, pad_edge=False)
    table.add_column("subscription")
    table.add_column("state")
    for title in ("rate", "burst", "max in flight"):
        table.add_column(title, justify="right")
    for sub, flow in sorted(info.subscriptions.items()):
        table.add_row(
            sub,
            subscription_state(flow),
            limit(flow.rate, "/s"),
            limit(flow.burst),
            limit(flow.max_in_flight),
        )
    stdout_console().print(table)


def cmd_show(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        info = client.flow(args.queue)
    if args.json:
        print(json.dumps(asdict(info), indent=2, ensure_ascii=False))
    else:
        print_flow(args.queue, info)
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    pausing = args.action == "pause"
    with client_of(args) as client:
        change = client.pause if pausing else client.resume
        change(args.queue, args.subscription)
    done = "paused" if pausing else "resumed"
    if args.subscription is None:
        print(f"{done} posting to queue {args.queue}")
    else:
        print(f"{done} subscription {args.subscription} of queue {args.queue}")
    return 0


def set_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the options give, for the level ``--subscription`` names."""
    mine, other = QUEUE_OPTIONS, SUBSCRIPTION_OPTIONS
    if args.subscription is not None:
        mine, other = other, mine
    wrong = [f"--{dest.replace('_', '-')}" for dest in other if getattr(args, dest) is not None]
    if wrong:
        where = "a queue" if args.subscription is not None else "a subscription (--subscription)"
        raise CommandError(f"{', '.join(wrong)}: a setting of {where}", 2)
    fields = {api: getattr(args, dest) for dest, api in mine.items()}
    fields = {api: value for api, value in fields.items() if value is not None}
    if not fields:
        raise CommandError("give at least one setting to change (see --help)", 2)
    return fields


def cmd_set(args: argparse.Namespace) -> int:
    fields = set_fields(args)
    with client_of(args) as client:
        if args.subscription is None:
            info = client.set_queue_flow(args.queue, **fields)
        else:
            flow = client.set_subscription_flow(args.queue, args.subscription, **fields)
            info = FlowInfo(subscriptions={args.subscription: flow})
    if args.subscription is None:
        print("\n".join(queue_lines(args.queue, info.queue)))
    else:
        flow = info.subscription(args.subscription)
        print(
            f"subscription {args.subscription} of queue {args.queue}: "
            f"{subscription_state(flow)}, rate {limit(flow.rate, '/s')}, "
            f"burst {limit(flow.burst)}, max in flight {limit(flow.max_in_flight)}"
        )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "flow", help="show, pause, resume or limit a queue's posts and its subscriptions"
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    connection = connection_parent()

    show = actions.add_parser(
        "show", help="the queue's and its subscriptions' flow settings", parents=[connection]
    )
    show.add_argument("queue", metavar="QUEUE")
    show.add_argument("--json", action="store_true", help="JSON instead of text")
    show.set_defaults(func=cmd_show)

    for action, text in (
        ("pause", "refuse posts (503), or with --subscription hand out nothing"),
        ("resume", "lift a pause of the queue's posts or of a subscription"),
    ):
        verb = actions.add_parser(action, help=text, parents=[connection])
        verb.add_argument("queue", metavar="QUEUE")
        verb.add_argument("--subscription", metavar="S", help="the subscription's deliveries")
        verb.set_defaults(func=cmd_pause)

    change = actions.add_parser(
        "set",
        help="change flow limits (those given; 0 turns one off)",
        parents=[connection],
    )
    change.add_argument("queue", metavar="QUEUE")
    change.add_argument("--subscription", metavar="S", help="change this subscription's limits")
    queue = change.add_argument_group("the queue's limits")
    queue.add_argument("--post-rate", type=rate, metavar="R", help="messages/s the queue accepts")
    queue.add_argument("--post-burst", type=count, metavar="N", help="messages a burst may take")
    queue.add_argument("--max-length", type=count, metavar="N", help="most messages kept")
    queue.add_argument(
        "--overflow", choices=("reject", "drop_head"), help="at max-length: refuse or drop oldest"
    )
    queue.add_argument(
        "--fair", type=on_off, metavar="on|off", help="serve quiet groups before busy ones"
    )
    subscription = change.add_argument_group("a subscription's limits (with --subscription)")
    subscription.add_argument("--rate", type=rate, metavar="R", help="messages/s handed out")
    subscription.add_argument("--burst", type=count, metavar="N", help="handed out at once")
    subscription.add_argument(
        "--max-in-flight", type=count, metavar="N", help="most leased and not yet finished"
    )
    change.set_defaults(func=cmd_set)
