"""What a spooled message may be: the checks made when it is posted, and again
on every record read back from a spool file.

:func:`entry_json` turns a :meth:`~queuey.client.spool.Spool.post` into the
batch entry the spool stores, after the checks the client can make alone, so
most bad input fails the post rather than reaching the rejected file.
:func:`check_stored` holds a stored entry to the same rules, so a record that
could never have been posted (damaged with a checksum that still holds, or
written by something else) is found when the file is opened, not by the
sender.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from queuey.limits import MAX_DEDUP_ID, MAX_PARTITION_KEY, MAX_PRIORITY

#: Queue names the service takes (docs/api.rst, "Limits").
QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]{1,50}")
#: Whole-number fields: (lowest, highest or None).
BOUNDS = {
    "partition": (1, None),
    "ttl": (1, None),
    "delay": (0, None),
    "priority": (0, MAX_PRIORITY),
}
#: Text fields: their longest length.
LENGTHS = {"partition_key": MAX_PARTITION_KEY, "dedup_id": MAX_DEDUP_ID}
#: The keys a stored entry may hold.
STORED_KEYS = frozenset({"body", "attributes", *BOUNDS, *LENGTHS})


def entry_json(queue: str, body: Mapping[str, Any], max_size: int, **fields: Any) -> str:
    """The batch entry of a message as JSON text, after the checks the client
    can make alone, so most bad input fails :meth:`Spool.post` rather than
    reaching the rejected file. Raises ``ValueError`` naming the field."""
    check_queue(queue)
    if not isinstance(body, Mapping):
        raise ValueError("body: must be a JSON object (a dict)")
    try:
        text = json.dumps(dict(body), separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"body: not JSON ({exc})") from None
    if len(text.encode()) > max_size:
        raise ValueError(f"body: larger than max_message_size ({max_size} bytes)")
    given = {k: v for k, v in fields.items() if v is not None}
    check_fields(given)
    if "attributes" in given:
        given["attributes"] = dict(given["attributes"])
    given.pop("dedup_id", None)  # the spool writes it first
    extra = json.dumps(given, separators=(",", ":"), ensure_ascii=False)[1:-1]
    return '{"body":' + text + ("," + extra if extra else "") + "}"


def check_queue(queue: object) -> None:
    if not isinstance(queue, str) or not QUEUE_NAME.fullmatch(queue):
        raise ValueError(f"queue: not a queue name ([A-Za-z0-9_-]{{1,50}}): {queue!r:.60}")


def check_fields(given: Mapping[str, Any]) -> None:
    """The placement and delivery fields present in ``given`` (None: absent);
    other keys are not looked at."""
    for name, value in given.items():
        if value is None:
            continue
        if name in BOUNDS:
            low, high = BOUNDS[name]
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or value < low
                or (high is not None and value > high)
            ):
                upper = f" to {high}" if high is not None else " or more"
                raise ValueError(f"{name}: must be a whole number, {low}{upper}")
        elif name in LENGTHS:
            if not isinstance(value, str) or not 1 <= len(value) <= LENGTHS[name]:
                raise ValueError(f"{name}: must be 1 to {LENGTHS[name]} characters")
        elif name == "attributes" and (
            not isinstance(value, Mapping)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        ):
            raise ValueError("attributes: must map strings to strings")


def check_stored(queue: object, entry: object) -> None:
    """A stored entry as :meth:`Spool.post` writes it: a queue name, and an
    object with a ``body`` object, a ``dedup_id`` and valid fields only.
    Raises ``ValueError`` naming what is wrong."""
    check_queue(queue)
    if not isinstance(entry, dict):
        raise ValueError("entry: not a JSON object")
    unknown = entry.keys() - STORED_KEYS
    if unknown:
        raise ValueError(f"entry: unknown field {min(unknown)!r:.60}")
    if not isinstance(entry.get("body"), dict):
        raise ValueError("body: not a JSON object")
    if entry.get("dedup_id") is None:
        raise ValueError("dedup_id: missing")
    check_fields(entry)
