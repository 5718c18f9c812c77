"""The ``queuey`` command: operator tasks.

On the store named in an ini file (no service needed):

    queuey keygen NAME                 print a new key and the lines to add for it
    queuey schema upgrade -c INI       create or migrate the storage schema (idempotent)
    queuey schema show -c INI          print the schema version the store has

Against a running Queuey, as one application (:mod:`queuey.cli.remote`):

    queuey stats [QUEUE ...]           counts of the application's queues
    queuey peek QUEUE                  the newest messages, changing nothing
    queuey export QUEUE -o FILE        every message as JSON lines (resumable)
    queuey import QUEUE -i FILE        post JSON lines back (resumable)
    queuey redrive QUEUE               move the queue's dead letters back
    queuey explain QUEUE MESSAGE_ID    why a message is or is not handed out
    queuey schedules list|create|...   the application's recurring messages
    queuey flow show|pause|resume|set  a queue's flow control (pause, rates, caps)

On a producer's machine (no service needed):

    queuey spool status FILE           a spool file's figures (read-only)

Each job is one module of this package with a ``register(subparsers)``
function; :func:`main` turns every expected failure into one line on stderr
and a non-zero exit status.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from queuey.cli import (
    explain,
    flow,
    keys,
    peek,
    redrive,
    schedules,
    schema,
    spool,
    stats,
    transfer,
)
from queuey.cli.errors import REFUSED, CommandError, exit_line
from queuey.cli.remote import describe
from queuey.client.errors import ClientError
from queuey.errors import Catalogued, ConfigurationError

#: The modules that add a subcommand, in the order ``--help`` lists them.
COMMANDS = (keys, schema, stats, peek, transfer, redrive, explain, schedules, flow, spool)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queuey", description="Queuey operator commands")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    # The client logs each retry; the final error is what the operator needs.
    logging.getLogger("queuey.client").setLevel(logging.ERROR)
    try:
        return args.func(args)
    except ConfigurationError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    except Catalogued as exc:
        print(exit_line(exc), file=sys.stderr)
        return REFUSED
    except CommandError as exc:
        why, status = str(exc), exc.exit_code
    except ClientError as exc:
        why, status = describe(exc), 1
    except KeyboardInterrupt:
        why, status = "interrupted", 130
    print(f"queuey {args.command}: {why}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
