"""``queuey export`` and ``queuey import``: a queue to JSON lines and back.

Export reads each partition forward in id order, a page of
:data:`~queuey.limits.MAX_READ` messages at a time (``GET /queue/{name}``
with ``since`` = the last id of the page before), writes and flushes each page,
and keeps nothing else: its memory does not grow with the queue. Since lines
follow the partitions in order, ``--resume`` needs only the file's last
complete line: it drops a partial line after it and goes on from that
message's partition and id.

Import posts the lines in batches (``POST /queue/{name}/batch``), each
message with ``dedup_id`` = ``import-<exported id>``, and after each batch
the service took records how far it got in ``<input>.import-progress``. A
re-run starts after the last recorded batch; a batch that may have been stored
just before a crash is posted again and the service drops its repeats, as long
as the re-run comes within the service's dedup window (``queuey.dedup_window``,
300 s by default). Every line is checked before the first post, so a bad line
stops the import before anything is posted.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import BinaryIO, TextIO

from queuey.cli.arguments import at_most, positive
from queuey.cli.errors import CommandError
from queuey.cli.output import progress_bar
from queuey.cli.records import DEDUP_PREFIX, BadLine, cut_partial_line, decode, encode
from queuey.cli.remote import connect, describe, remote_command
from queuey.client.errors import BadRequest, ClientError
from queuey.client.http import QueueyClient
from queuey.client.models import OutgoingMessage
from queuey.limits import MAX_READ

#: Most bytes of lines in one import batch (the service's default limit is 4 MiB).
BATCH_BYTES = 2_000_000


# -- export ---------------------------------------------------------------------------
def _expected(client: QueueyClient, queue: str, partitions: list[int]) -> int | None:
    """About how many messages the partitions hold (for the progress bar)."""
    try:
        stats = client.stats(queue)
    except ClientError:
        return None
    wanted = set(partitions)
    return sum(p.messages for p in stats.partitions if p.partition in wanted)


def _resume_point(path: Path, partitions: list[int]) -> tuple[list[int], str | None]:
    """The partitions left to export and the id to start after in the first."""
    last = cut_partial_line(path)
    if last is None:
        return partitions, None
    try:
        record = decode(last)
    except BadLine as exc:
        raise CommandError(f"{path}: cannot resume after its last line: {exc}") from None
    if record.partition not in partitions or record.dedup_id is None:
        raise CommandError(
            f"{path}: its last line (partition {record.partition}) is not from this export; "
            "give the same --partition options as before"
        )
    after = record.dedup_id.removeprefix(DEDUP_PREFIX)  # the line's id
    return [p for p in partitions if p >= record.partition], after


def cmd_export(args: argparse.Namespace) -> int:
    if args.resume and args.output == "-":
        raise CommandError("--resume needs an output file, not stdout", 2)
    started = time.monotonic()
    written = 0
    with connect(args) as client:
        info = client.queue_info(args.queue)
        partitions = sorted(set(args.partition or range(1, info.partitions + 1)))
        if partitions[-1] > info.partitions:
            raise CommandError(f"{args.queue} has {info.partitions} partition(s)", 2)
        since = None
        resuming = args.resume and Path(args.output).exists()
        if resuming:
            partitions, since = _resume_point(Path(args.output), partitions)
        total = _expected(client, args.queue, partitions)
        output: contextlib.AbstractContextManager[TextIO] = (
            contextlib.nullcontext(sys.stdout)  # flushed after each page, as a file is
            if args.output == "-"
            else open(args.output, "a" if resuming else "w", encoding="utf-8", newline="\n")
        )
        try:
            with (
                output as out,
                progress_bar(f"export {args.queue}", total, args.quiet) as (bar, task),
            ):
                for partition in partitions:
                    messages = client.iter_messages(args.queue, [partition], since)
                    while page := list(itertools.islice(messages, MAX_READ)):  # a read each
                        out.write("".join(map(encode, page)))
                        out.flush()
                        written += len(page)
                        rate = written / max(time.monotonic() - started, 1e-6)
                        bar.update(task, advance=len(page), rate=f"{rate:,.0f}/s")
                    since = None
        except ClientError as exc:
            raise CommandError(
                f"{describe(exc)} (after {written} message(s); rerun with --resume to go on)"
            ) from None
    where = "stdout" if args.output == "-" else args.output
    return _done(args, started, f"exported {written} message(s) of {args.queue} to {where}")


def _done(args: argparse.Namespace, started: float, text: str) -> int:
    """Say ``text`` and the seconds since ``started`` on stderr, unless ``--quiet``."""
    if not args.quiet:
        print(f"{text} in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return 0


# -- import ---------------------------------------------------------------------------
@dataclass
class ImportProgress:
    """What ``<input>.import-progress`` records after each batch the service took."""

    queue: str
    offset: int = 0  # bytes of the input done
    line: int = 0  # lines of the input done
    imported: int = 0  # messages posted
    done: bool = False

    @staticmethod
    def path_for(source: Path) -> Path:
        return source.with_name(source.name + ".import-progress")

    @classmethod
    def load(cls, path: Path) -> ImportProgress | None:
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:
            raise CommandError(f"{path}: not a progress file ({exc}); remove it") from None

    def save(self, path: Path) -> None:
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps(asdict(self)), encoding="utf-8")
        os.replace(temporary, path)


def _records(
    name: str, f: BinaryIO, first_line: int
) -> Iterator[tuple[int, int, OutgoingMessage, int]]:
    """``(line number, offset after it, message, its size)`` of the lines from
    here on; blank lines skipped."""
    offset = f.tell()
    number = first_line
    for line in f:
        number += 1
        offset += len(line)
        if not line.strip():
            continue
        try:
            yield number, offset, decode(line), len(line)
        except BadLine as exc:
            raise CommandError(f"{name} line {number}: {exc}") from None


def _check(name: str, f: BinaryIO, first_line: int) -> int:
    """Read every line once before posting; how many messages there are."""
    start = f.tell()
    count = sum(1 for _ in _records(name, f, first_line))
    f.seek(start)
    return count


def _post(client: QueueyClient, args: argparse.Namespace, name: str, batch: list) -> None:
    try:
        keep = not args.ignore_partitions
        client.post_batch(args.queue, [m if keep else replace(m, partition=None) for _, m in batch])
    except BadRequest as exc:
        problems = []
        for field, message in exc.error_msg.items():
            index, _, rest = field.removeprefix("messages[").partition("].")
            if index.isdigit() and int(index) < len(batch):
                problems.append(f"{name} line {batch[int(index)][0]}: {rest}: {message}")
            else:
                problems.append(f"{field}: {message}")
        raise CommandError("; ".join(problems) or str(exc)) from None


def cmd_import(args: argparse.Namespace) -> int:
    started = time.monotonic()
    from_stdin = args.input == "-"
    source = Path(args.input)
    state_path = None if from_stdin else ImportProgress.path_for(source)
    state = None if state_path is None or args.restart else ImportProgress.load(state_path)
    if state is not None and state.queue != args.queue:
        raise CommandError(
            f"{state_path} records an import into {state.queue}; "
            "give --restart to import this file into another queue"
        )
    if state is not None and state.done:
        print(
            f"{args.input} was imported into {args.queue} already ({state.imported} message(s)); "
            "give --restart to import it again",
            file=sys.stderr,
        )
        return 0
    state = state or ImportProgress(queue=args.queue)
    try:
        f = sys.stdin.buffer if from_stdin else source.open("rb")
    except OSError as exc:
        raise CommandError(f"cannot read {args.input}: {exc.strerror}") from None
    with contextlib.ExitStack() as stack:
        if not from_stdin:
            stack.enter_context(f)
            _seek_to(f, state, source)
        total = None if from_stdin else _check(args.input, f, state.line)
        client = stack.enter_context(connect(args))
        client.queue_info(args.queue)
        bar, task = stack.enter_context(progress_bar(f"import {args.queue}", total, args.quiet))
        batch: list[tuple[int, OutgoingMessage]] = []
        size = 0
        position = (state.line, state.offset)

        def flush() -> None:
            nonlocal batch, size
            _post(client, args, args.input, batch)
            state.line, state.offset = position
            state.imported += len(batch)
            if state_path is not None:
                state.save(state_path)
            rate = state.imported / max(time.monotonic() - started, 1e-6)
            bar.update(task, advance=len(batch), rate=f"{rate:,.0f}/s")
            batch, size = [], 0

        try:
            for number, offset, record, length in _records(args.input, f, state.line):
                if batch and (len(batch) >= args.batch_size or size + length > BATCH_BYTES):
                    flush()
                batch.append((number, record))
                size += length
                position = (number, offset)
            if batch:
                flush()
        except ClientError as exc:
            raise CommandError(
                f"{describe(exc)} ({state.imported} message(s) imported; "
                f"rerun the same command to go on from line {state.line + 1})"
            ) from None
    state.done = True
    if state_path is not None:
        state.save(state_path)
    return _done(args, started, f"imported {state.imported} message(s) into {args.queue}")


def _seek_to(f: BinaryIO, state: ImportProgress, source: Path) -> None:
    """Go to where the last import stopped, checking it is a line's start."""
    if state.offset == 0:
        return
    if state.offset > source.stat().st_size:
        raise CommandError(f"{source} is shorter than its import progress says; give --restart")
    f.seek(state.offset - 1)
    if f.read(1) != b"\n":
        raise CommandError(f"{source} changed since its import began; give --restart")


# -- the parsers ----------------------------------------------------------------------
def register(sub: argparse._SubParsersAction) -> None:
    export = remote_command(sub, "export", "write a queue's messages as JSON lines", cmd_export)
    export.add_argument("-o", "--output", required=True, metavar="FILE", help="'-' for stdout")
    export.add_argument(
        "--resume", action="store_true", help="go on with a cut export of FILE instead of a new one"
    )
    export.add_argument(
        "--partition", type=positive, action="append", metavar="P", help="only these partitions"
    )
    export.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary")

    imp = remote_command(sub, "import", "post JSON lines (from export) to a queue", cmd_import)
    imp.add_argument("-i", "--input", required=True, metavar="FILE", help="'-' for stdin")
    imp.add_argument(
        "--batch-size",
        type=at_most(MAX_READ),
        default=500,
        metavar="N",
        help="messages per post (default 500)",
    )
    imp.add_argument(
        "--restart",
        action="store_true",
        help="ignore FILE.import-progress and import from the first line",
    )
    imp.add_argument(
        "--ignore-partitions",
        action="store_true",
        help="let the service place the messages instead of keeping their partitions",
    )
    imp.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary")
