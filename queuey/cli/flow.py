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
from typing import Any

from queuey.cli.errors import CommandError
from queuey.cli.output import print_table
from queuey.cli.remote import remote_command
from queuey.cli.schedules import client_of
from queuey.client.flow import FlowInfo, QueueFlow, SubscriptionFlow
from queuey.model.flow import limits_of
from queuey.model.flowfield import FlowField


def option(field: FlowField) -> str:
    return "--" + field.name.replace("_", "-")


def shown(field: FlowField, value: Any) -> str:
    """A setting's value as the command prints it: ``on`` or ``off``, the
    choice, ``-`` for no limit, else the limit (``10/s``, ``1,000``)."""
    if field.kind == "flag":
        return "on" if value else "off"
    if field.kind == "choice":
        return str(value)
    if not value:
        return "-"
    return (f"{value:,g}" if isinstance(value, float) else f"{value:,}") + field.unit


def queue_lines(name: str, flow: QueueFlow) -> list[str]:
    return [f"queue {name}: posting {'PAUSED' if flow.paused else 'open'}"] + [
        f"  {field.name:<11} {shown(field, value)}"
        for field, value in flow.settings()
        if not field.switch
    ]


def subscription_state(flow: SubscriptionFlow) -> str:
    return "PAUSED" if flow.paused else "delivering"


def print_flow(name: str, info: FlowInfo) -> None:
    print("\n".join(queue_lines(name, info.queue)))
    if not info.subscriptions:
        print("subscriptions: no flow settings (every one delivers without limit)")
        return
    limits = [field.title.lower() for field in limits_of("subscription")]
    rows = [
        (sub, subscription_state(flow), *(shown(f, v) for f, v in flow.settings() if not f.switch))
        for sub, flow in sorted(info.subscriptions.items())
    ]
    print_table(("subscription", "state", *limits), rows, right=limits)


def cmd_show(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        info = client.flow(args.queue)
    if args.json:
        found = {
            "queue": info.queue.as_dict(),
            "subscriptions": {n: f.as_dict() for n, f in info.subscriptions.items()},
        }
        print(json.dumps(found, indent=2, ensure_ascii=False))
    else:
        print_flow(args.queue, info)
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        getattr(client, args.action)(args.queue, args.subscription)  # pause or resume
    if args.subscription is None:
        print(f"{args.action}d posting to queue {args.queue}")
    else:
        print(f"{args.action}d subscription {args.subscription} of queue {args.queue}")
    return 0


def set_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the options give, for the level ``--subscription`` names."""
    mine, other = limits_of("queue"), limits_of("subscription")
    if args.subscription is not None:
        mine, other = other, mine
    names = {f.name for f in mine}
    wrong = [option(f) for f in other if f.name not in names and getattr(args, f.name) is not None]
    if wrong:
        where = "a queue" if args.subscription is not None else "a subscription (--subscription)"
        raise CommandError(f"{', '.join(wrong)}: a setting of {where}", 2)
    fields = {f.name: getattr(args, f.name) for f in mine if getattr(args, f.name) is not None}
    if not fields:
        raise CommandError("give at least one setting to change (see --help)", 2)
    return fields


def cmd_set(args: argparse.Namespace) -> int:
    fields = set_fields(args)
    with client_of(args) as client:
        if args.subscription is None:
            info = client.set_queue_flow(args.queue, **fields)
            print("\n".join(queue_lines(args.queue, info.queue)))
            return 0
        flow = client.set_subscription_flow(args.queue, args.subscription, **fields)
    values = [f"{f.title.lower()} {shown(f, v)}" for f, v in flow.settings() if not f.switch]
    print(
        f"subscription {args.subscription} of queue {args.queue}: "
        + ", ".join([subscription_state(flow), *values])
    )
    return 0


def add_option(group, field: FlowField) -> None:
    """``field``'s option of ``flow set``: its type, bounds and help from the
    table. A flag takes ``on`` or ``off``, a limit a plain decimal of the
    field's kind (``0`` for no limit), a choice one of its values."""
    wants = {"rate": "a number of messages per second", "count": "a whole number"}

    def convert(text: str) -> Any:
        if field.kind == "flag":
            if text not in ("on", "off"):
                raise argparse.ArgumentTypeError("give on or off")
            return text == "on"
        try:
            return field.from_text(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {wants[field.kind]}: {text!r}") from None

    if field.kind == "choice":
        kind = {"choices": field.values}
    else:
        metavar = {"rate": "R", "count": "N", "flag": "on|off"}[field.kind]
        kind = {"type": convert, "metavar": metavar}
    group.add_argument(option(field), dest=field.name, help=field.description, **kind)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "flow", help="show, pause, resume or limit a queue's posts and its subscriptions"
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    text = "the queue's and its subscriptions' flow settings"
    show = remote_command(actions, "show", text, cmd_show)
    show.add_argument("--json", action="store_true", help="JSON instead of text")

    for action, text in (
        ("pause", "refuse posts (503), or with --subscription hand out nothing"),
        ("resume", "lift a pause of the queue's posts or of a subscription"),
    ):
        verb = remote_command(actions, action, text, cmd_pause)
        verb.add_argument("--subscription", metavar="S", help="the subscription's deliveries")

    text = "change flow limits (those given; 0 turns one off)"
    change = remote_command(actions, "set", text, cmd_set)
    change.add_argument("--subscription", metavar="S", help="change this subscription's limits")
    added: set[str] = set()
    for resource, title in (
        ("queue", "the queue's limits"),
        ("subscription", "a subscription's limits (with --subscription)"),
    ):
        group = change.add_argument_group(title)
        for field in limits_of(resource):
            if field.name not in added:  # a name both levels have is one option
                add_option(group, field)
                added.add(field.name)
