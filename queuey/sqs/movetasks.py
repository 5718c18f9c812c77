"""SQS message move tasks: a dead-letter queue's messages moved back, in the background.

A task runs on a thread of the API node that started it, in rounds of at
most :data:`ROUND` messages: without a destination each round is a work-queue
redrive (:meth:`queuey.workqueue.WorkQueues.redrive`: each dead letter back
to the queue and subscription it came from); with one, messages are posted to
the destination (once, by a derived ``dedup_id``) and then deleted from the
source. Its state lives in the source queue's attributes (``sqs.move``), so
any node answers ListMessageMoveTasks and CancelMessageMoveTask; a task whose
node stopped beating for :data:`STALE_SECONDS` is reported FAILED. Only the
newest task of a queue is kept (SQS lists up to ten).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
import time
import uuid
from typing import Any

from queuey.clock import Clock
from queuey.errors import QueueNotFound, ServiceError
from queuey.placement import partition_for_key
from queuey.sqs.errors import SQSError, invalid
from queuey.storage import MessageRef, NewMessage, QueueMeta, ReadQuery, Storage
from queuey.workqueue import WorkQueues, own_attributes

log = logging.getLogger(__name__)

KEY = "sqs.move"
#: Messages one round moves at most.
ROUND = 100
#: Seconds a task waits for messages inside the read delay to settle.
SETTLE_PAUSE = 0.5
#: Seconds without a heartbeat after which a running task counts as failed.
STALE_SECONDS = 60


class MoveTasks:
    def __init__(self, storage: Storage, work: WorkQueues, clock: Clock) -> None:
        self.storage = storage
        self.work = work
        self.clock = clock
        self._cancelled: dict[str, threading.Event] = {}

    # -- state ----------------------------------------------------------------
    def _state(self, meta: QueueMeta) -> dict[str, Any] | None:
        text = meta.attributes.get(KEY)
        return json.loads(text) if text else None

    def _save(self, application: str, name: str, state: dict[str, Any]) -> None:
        with self.work.cache.changing(application, name):
            meta = self.storage.get_queue(application, name)
            current = self._state(meta)
            if current and current["id"] == state["id"] and current["status"] == "CANCELLING":
                if state["status"] == "RUNNING":
                    state = {**state, "status": "CANCELLING"}
            attributes = {**meta.attributes, KEY: json.dumps(state, separators=(",", ":"))}
            self.storage.update_queue(application, name, attributes=attributes)

    def _now_ms(self) -> int:
        return self.clock.now_micros() // 1000

    # -- actions --------------------------------------------------------------
    def start(
        self, place, source: QueueMeta, destination: QueueMeta | None, rate: int | None
    ) -> str:
        state = self._state(source)
        if state and state["status"] in ("RUNNING", "CANCELLING") and not self._stale(state):
            raise invalid("There is already a message move task running on this source queue.")
        stats = self.work.stats(source)
        task_id = uuid.uuid4().hex
        state = {
            "id": task_id,
            "status": "RUNNING",
            "source": source.name,
            "destination": destination.name if destination else None,
            "rate": rate,
            "started": self._now_ms(),
            "beat": self._now_ms(),
            "moved": 0,
            "to_move": stats.messages,
            "failure": None,
        }
        self._save(source.application, source.name, state)
        handle = _handle(source.application, source.name, task_id)
        self._cancelled[task_id] = threading.Event()
        threading.Thread(
            target=self._run,
            args=(source.application, state),
            name=f"sqs-move-{source.name}",
            daemon=True,
        ).start()
        return handle

    def list(self, place, source: QueueMeta) -> list[dict[str, Any]]:
        state = self._state(source)
        if state is None:
            return []
        status = state["status"]
        failure = state.get("failure")
        if status in ("RUNNING", "CANCELLING") and self._stale(state):
            status, failure = "FAILED", "the API node running the task stopped"
        entry: dict[str, Any] = {
            "TaskHandle": _handle(source.application, source.name, state["id"]),
            "Status": status,
            "SourceArn": place.arn(state["source"]),
            "ApproximateNumberOfMessagesMoved": state["moved"],
            "ApproximateNumberOfMessagesToMove": state["to_move"],
            "StartedTimestamp": state["started"],
        }
        if state.get("destination"):
            entry["DestinationArn"] = place.arn(state["destination"])
        if state.get("rate"):
            entry["MaxNumberOfMessagesPerSecond"] = state["rate"]
        if failure and status == "FAILED":
            entry["FailureReason"] = failure
        return [entry]

    def cancel(self, application: str, handle: object) -> int:
        found = _parse_handle(handle)
        if found is None or found[0] != application:
            raise SQSError("ResourceNotFoundException", "The task handle does not exist.")
        _, name, task_id = found
        try:
            meta = self.storage.get_queue(application, name)
        except QueueNotFound:
            raise SQSError("ResourceNotFoundException", "The task handle does not exist.") from None
        state = self._state(meta)
        if state is None or state["id"] != task_id:
            raise SQSError("ResourceNotFoundException", "The task handle does not exist.")
        if state["status"] != "RUNNING" or self._stale(state):
            raise invalid("Only a task with the status RUNNING can be cancelled.")
        self._save(application, name, {**state, "status": "CANCELLING"})
        event = self._cancelled.get(task_id)
        if event is not None:
            event.set()
        return int(state["moved"])

    def _stale(self, state: dict[str, Any]) -> bool:
        return self._now_ms() - int(state["beat"]) > STALE_SECONDS * 1000

    # -- the task -------------------------------------------------------------
    def _run(self, application: str, state: dict[str, Any]) -> None:
        cancelled = self._cancelled[state["id"]]
        started = time.monotonic()
        try:
            while True:
                meta = self.storage.get_queue(application, state["source"])
                current = self._state(meta)
                if cancelled.is_set() or (current and current["status"] == "CANCELLING"):
                    state["status"] = "CANCELLED"
                    break
                batch = ROUND if not state["rate"] else min(ROUND, state["rate"])
                moved, why = self._round(application, meta, state["destination"], batch)
                state["moved"] += moved
                state["beat"] = self._now_ms()
                if moved == 0:
                    if why:
                        state["status"], state["failure"] = "FAILED", why
                        break
                    if self._settling(meta):
                        cancelled.wait(SETTLE_PAUSE)
                        continue
                    state["status"] = "COMPLETED"
                    break
                self._save(application, state["source"], state)
                if state["rate"]:
                    ahead = state["moved"] / state["rate"] - (time.monotonic() - started)
                    if ahead > 0 and cancelled.wait(ahead):
                        continue
        except (ServiceError, OSError) as exc:
            log.warning("message move task %s failed: %s", state["id"], exc)
            state["status"], state["failure"] = "FAILED", str(exc)[:500]
        finally:
            self._cancelled.pop(state["id"], None)
        try:
            state["beat"] = self._now_ms()
            self._save(application, state["source"], state)
        except ServiceError as exc:
            log.warning("message move task %s: its final state was not saved: %s", state["id"], exc)

    def _settling(self, source: QueueMeta) -> bool:
        """Whether the queue holds messages still inside the read delay (a redrive
        reads only older ones, see :meth:`WorkQueues.redrive`)."""
        delay = self.work.read_delay_micros
        if not delay:
            return False
        now = self.clock.now_micros()
        newest = self.storage.read_messages(
            source,
            ReadQuery(
                partitions=source.partition_numbers,
                now_micros=now,
                limit=1,
                order="descending",
            ),
        )
        return bool(newest) and newest[0].timestamp > now - delay

    def _round(
        self, application: str, source: QueueMeta, destination: str | None, limit: int
    ) -> tuple[int, str | None]:
        """Messages moved, and why none could be when some are left."""
        if destination is None:
            result = self.work.redrive(source, limit)
            moved = result.moved + result.reposted
            why = next(iter(result.skipped.values()), None)
            return moved, (why if not moved else None)
        try:
            target = self.storage.get_queue(application, destination)
        except QueueNotFound:
            return 0, f"the destination queue {destination} no longer exists"
        now = self.clock.now_micros()
        found = self.storage.read_messages(
            source,
            ReadQuery(
                partitions=source.partition_numbers,
                now_micros=now,
                limit=limit,
                order="ascending",
            ),
        )
        if not found:
            return 0, None
        ttl = min(target.ttl, self.work.max_ttl)
        self.storage.put_messages(
            target,
            [
                NewMessage(
                    body=m.body,
                    partition=partition_for_key(
                        (m.attributes or {}).get("sqs.group") or m.id.hex, target.partitions
                    ),
                    ttl=ttl,
                    priority=m.priority,
                    dedup_id=f"move-{source.incarnation[:20]}-{m.id.hex}",
                    attributes=own_attributes(m),
                )
                for m in found
            ],
        )
        self.storage.delete_messages(source, [MessageRef(m.partition, m.id) for m in found])
        self.work.on_available(application, destination)
        return len(found), None


def _handle(application: str, name: str, task_id: str) -> str:
    raw = json.dumps([application, name, task_id], separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii")


def _parse_handle(handle: object) -> tuple[str, str, str] | None:
    if not isinstance(handle, str) or len(handle) > 1024:
        return None
    try:
        found = json.loads(base64.urlsafe_b64decode(handle.encode("ascii")))
    except (binascii.Error, ValueError, UnicodeError):
        return None
    if not (isinstance(found, list) and len(found) == 3 and all(isinstance(x, str) for x in found)):
        return None
    return found[0], found[1], found[2]
