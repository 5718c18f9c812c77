"""Connection options of the commands that talk to a running Queuey.

They act as one application over the HTTP API, with the same headers as any
client (``X-Application-Name``, ``ApplicationKey``), through
:class:`~queuey.client.http.QueueyClient`. The key is read, in this order,
from ``--key`` (visible to other users in the process list, so discouraged),
``--key-file`` and the ``QUEUEY_KEY`` environment variable.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from queuey.cli.errors import CommandError
from queuey.client.errors import ClientError, Forbidden, Unauthorized, Unavailable
from queuey.client.http import QueueyClient

DEFAULT_URL = "http://127.0.0.1:5000"
#: Seconds one call may take: a page of 1000 messages from a busy node included.
TIMEOUT = 60.0
#: Retries per call (and fail-overs): few, so a refused connection fails fast.
RETRIES = 3


def remote_command(
    sub: argparse._SubParsersAction,
    name: str,
    text: str,
    func: Callable[[argparse.Namespace], int],
    queue: str | None = "",
) -> argparse.ArgumentParser:
    """The parser of a command that talks to a running Queuey, running
    ``func``: ``text`` its help, the connection options every remote command
    takes, then ``QUEUE`` (with ``queue`` as its help; ``None``: no ``QUEUE``)."""
    parser = sub.add_parser(name, help=text)
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--url",
        help=f"API URL, or several comma-separated (env QUEUEY_URL; default {DEFAULT_URL})",
    )
    group.add_argument("--application", help="application name (env QUEUEY_APPLICATION)")
    group.add_argument(
        "--key-file", type=Path, help="file holding the application key (else env QUEUEY_KEY)"
    )
    group.add_argument("--key", help="the key itself; prefer QUEUEY_KEY or --key-file")
    if queue is not None:
        parser.add_argument("queue", metavar="QUEUE", help=queue or None)
    parser.set_defaults(func=func)
    return parser


def read_key(args: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    if args.key:
        return args.key
    if args.key_file is not None:
        try:
            key = args.key_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CommandError(f"cannot read the key file {args.key_file}: {exc.strerror}") from exc
        if not key:
            raise CommandError(f"the key file {args.key_file} is empty")
        return key
    return environ.get("QUEUEY_KEY") or None


def connect(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> QueueyClient:
    """A client for the application the options and environment name."""
    environ = os.environ if environ is None else environ
    url = args.url or environ.get("QUEUEY_URL") or DEFAULT_URL
    application = args.application or environ.get("QUEUEY_APPLICATION")
    if not application:
        raise CommandError("no application: set QUEUEY_APPLICATION or give --application", 2)
    return QueueyClient(
        url,
        application,
        read_key(args, environ),
        timeout=TIMEOUT,
        retries=RETRIES,
        backoff=0.2,
        max_backoff=2.0,
    )


def describe(exc: ClientError) -> str:
    """One line for an error the service (or the network) gave."""
    if isinstance(exc, Unauthorized):
        detail = "; ".join(exc.error_msg.values()) or "unknown application or wrong key"
        return f"not authorized (HTTP 401: {detail}); check QUEUEY_APPLICATION and the key"
    if isinstance(exc, Forbidden):
        detail = "; ".join(exc.error_msg.values()) or "forbidden"
        return f"forbidden (HTTP 403: {detail})"
    if isinstance(exc, Unavailable) and exc.status is None and not exc.outcome_unknown:
        text = str(exc)
        where = text.split("cannot connect to ", 1)[-1].split(" ", 1)[0]
        return f"cannot connect to {where}: is Queuey running there? (set QUEUEY_URL or --url)"
    return " ".join(str(exc).split())
