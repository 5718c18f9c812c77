"""``queuey spool status FILE``: a producer spool's figures, read without changing it.

Reads the spool file (:mod:`queuey.client.spoolfile`) from the start and
writes nothing, so it is safe while a producer appends to the file or
compacts it (a compaction renames a complete new file over the old one; the
command reads whichever it opened). ``send_rate`` is the messages
acknowledged per second over the last minute, from the file's marks. A file
it cannot trust (a malformed record, a symbolic link) is one line on stderr
and exit status 1, as for a producer that would refuse to open it.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict

from queuey.cli.errors import CommandError
from queuey.cli.output import print_table
from queuey.cli.stats import age_of, age_text
from queuey.client import spoolfile
from queuey.client.spool import SpoolStats


def read_status(path: str, now: float) -> SpoolStats:
    """The figures of the spool file at ``path``, as an open spool reports
    them (without ``last_error``: only the producer's sender knows it)."""
    try:
        image = spoolfile.scan(path)
    except FileNotFoundError:
        raise CommandError(f"no spool file at {path}") from None
    except spoolfile.BadSpoolFile as exc:  # names the file and the record's offset
        raise CommandError(f"bad spool file {exc}") from None
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
    oldest = min((p.spooled for p in image.pending.values()), default=None)
    return SpoolStats(
        path=path,
        spool_id=image.spool_id,
        spooled=len(image.pending),
        bytes=image.live_bytes,
        file_bytes=image.end + image.torn_bytes,
        oldest_age=age_of(oldest, now),
        send_rate=round(image.send_rate(now), 1),
        sent=image.sent,
        rejected=image.rejected,
        torn=image.torn,
        tail_bytes=image.torn_bytes,
    )


def cmd_status(args: argparse.Namespace) -> int:
    status = asdict(read_status(args.file, time.time()))
    del status["last_error"]
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    rows = [
        (name.replace("_", " "), age_text(value) if name == "oldest_age" else str(value))
        for name, value in status.items()
    ]
    print_table(("figure", "value"), rows, right=("value",), header=False)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("spool", help="a producer spool file's figures (read-only)")
    verbs = parser.add_subparsers(dest="verb", required=True)
    status = verbs.add_parser("status", help="what the spool holds, sent, rejected, dropped")
    status.add_argument("file", metavar="FILE", help="the spool file")
    status.add_argument("--json", action="store_true", help="a JSON object instead of a table")
    status.set_defaults(func=cmd_status)
