"""The export format: one JSON object per line (JSON lines), one message each.

``{"id": ..., "partition": ..., "timestamp": ..., "priority": ...,
"attributes": ..., "body": ...}``: the message id (32 hex digits), its
partition, its timestamp (seconds since the epoch), its priority, its
attributes (an object of strings, or null) and its body (a JSON object, as
posted). Lines of one partition follow each other in id order, partitions in
ascending order, which is what lets an export resume from its last line.

Import needs only ``body``; ``partition``, ``priority`` and ``attributes``
are posted when present, and ``id`` becomes the post's ``dedup_id``
(:data:`DEDUP_PREFIX` and the id).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, BinaryIO

from queuey.client.models import OutgoingMessage, ReceivedMessage
from queuey.jsonio import InvalidJSON, check_depth
from queuey.limits import MAX_PRIORITY

MESSAGE_ID = re.compile(r"[0-9a-f]{32}")
#: Prefix of the ``dedup_id`` an imported message is posted with.
DEDUP_PREFIX = "import-"
_CHUNK = 1 << 16


class BadLine(ValueError):
    """A line that is not a message of this format; the text says why."""


def encode(message: ReceivedMessage) -> str:
    """The line of one message, newline included."""
    return (
        json.dumps(
            {
                "id": message.message_id,
                "partition": message.partition,
                "timestamp": message.timestamp,
                "priority": message.priority,
                "attributes": message.attributes,
                "body": message.body,
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )
        + "\n"
    )


def _int(data: dict, name: str, low: int, high: int) -> int | None:
    value: Any = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadLine(f"{name} must be a whole number from {low} to {high}")
    return value


def decode(line: bytes) -> OutgoingMessage:
    """The message import posts for one line (``BadLine`` says what is wrong
    with the line); a priority of 0 and empty attributes are left out."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise BadLine("not JSON in UTF-8") from None
    try:
        check_depth(line)  # the service's own bound: json.loads would recurse without one
    except InvalidJSON as exc:
        raise BadLine(f"not JSON ({exc})") from None
    try:
        data = json.loads(text.rstrip("\r\n"))
    except json.JSONDecodeError as exc:
        raise BadLine(f"not JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError:  # a number too long to convert
        raise BadLine("not JSON (a number too long)") from None
    if not isinstance(data, dict):
        raise BadLine("not a JSON object")
    body = data.get("body")
    if not isinstance(body, dict):
        raise BadLine("body must be a JSON object")
    message_id = data.get("id")
    if message_id is not None and not (
        isinstance(message_id, str) and MESSAGE_ID.fullmatch(message_id)
    ):
        raise BadLine("id must be 32 lowercase hex digits")
    attributes = data.get("attributes")
    if attributes is not None and not (
        isinstance(attributes, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in attributes.items())
    ):
        raise BadLine("attributes must be an object of strings")
    return OutgoingMessage(
        body=body,
        partition=_int(data, "partition", 1, 999),
        priority=_int(data, "priority", 0, MAX_PRIORITY) or None,
        attributes=attributes or None,
        dedup_id=DEDUP_PREFIX + message_id if message_id else None,
    )


def _last_newline_before(f: BinaryIO, end: int) -> int:
    """Offset of the last ``\\n`` in ``[0, end)``, or -1."""
    pos = end
    while pos > 0:
        start = max(0, pos - _CHUNK)
        f.seek(start)
        found = f.read(pos - start).rfind(b"\n")
        if found >= 0:
            return start + found
        pos = start
    return -1


def cut_partial_line(path: Path) -> bytes | None:
    """Drop a partial last line of ``path``; return its last complete line.

    Reads the file from its end only, so finding where to resume costs the
    length of the last line whatever the file's size. ``None`` when no
    complete line is left.
    """
    with path.open("r+b") as f:
        size = f.seek(0, os.SEEK_END)
        last_newline = _last_newline_before(f, size)
        if last_newline + 1 != size:
            f.truncate(last_newline + 1)
        if last_newline < 0:
            return None
        start = _last_newline_before(f, last_newline) + 1
        f.seek(start)
        return f.read(last_newline - start)
