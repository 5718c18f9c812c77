"""Failure queues: where a worker parks a message whose job kept raising.

The record posted keeps the message and the error, so an operator can see why
it failed and post it back once the job is fixed::

    {"queue", "partition", "message_id", "timestamp", "group", "member",
     "attempts", "failed_at", "error": {"type", "message", "traceback"}, "body"}

A failure queue (``failure_queue`` with ``{queue}`` replaced) is created on
first use. A body too large to post again is left out (``"body_omitted": true``).
"""

from __future__ import annotations

import contextlib
import logging
import time
import traceback

from queuey.client.errors import ClientError, Conflict, NotFound, TooLarge
from queuey.client.http import QueueyClient
from queuey.client.models import ReceivedMessage

log = logging.getLogger(__name__)

#: Characters of the traceback kept in a failure record (its end).
MAX_TRACEBACK = 8000


class FailureQueues:
    """Posts messages that kept failing to their failure queue (see the module doc)."""

    def __init__(self, client: QueueyClient, template: str, group: str, member: str) -> None:
        self.client = client
        self.template = template
        self.group = group
        self.member = member
        self._known: set[str] = set()  # failure queues created (or found) by this worker

    def park(self, queue: str, message: ReceivedMessage, exc: BaseException, attempts: int) -> bool:
        """Post the failure record of ``message``; False if that failed."""
        name = self.template.format(queue=queue)
        record = {
            "queue": queue,
            "partition": message.partition,
            "message_id": message.message_id,
            "timestamp": message.timestamp,
            "group": self.group,
            "member": self.member,
            "attempts": attempts,
            "failed_at": time.time(),
            "error": {
                "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
                "message": str(exc),
                "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[
                    -MAX_TRACEBACK:
                ],
            },
            "body": message.body,
        }
        try:
            try:
                self._post(name, record)
            except TooLarge:
                record["body"] = None
                record["body_omitted"] = True
                self._post(name, record)
        except ClientError as post_exc:
            log.error("cannot park %s in %s: %s", message.message_id, name, post_exc)
            return False
        log.error(
            "gave up on %s:%s %s after %d attempts (%r); moved to %s",
            queue,
            message.partition,
            message.message_id,
            attempts,
            exc,
            name,
        )
        return True

    def _post(self, name: str, record: dict) -> None:
        try:
            self.client.post(name, record)
        except NotFound:
            if name in self._known:
                raise
            with contextlib.suppress(Conflict):
                self.client.create_queue(name, partitions=1)
            self._known.add(name)
            self.client.post(name, record)
