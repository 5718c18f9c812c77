"""SQS message move tasks: a dead-letter queue's messages moved back, in the background.

A task runs on a thread of the API process that started it, in rounds: without
a destination each round is a work-queue redrive
(:meth:`queuey.core.workqueues.WorkQueues.redrive`: each dead letter back to the
queue and subscription it came from); with one, messages are posted to the
destination (once, by a derived ``dedup_id``) and then deleted from the source.

Every task ends. It moves at most what its source held when it started: the
count taken then (``to_move``) and, with a destination, only messages older
than its start (``until``, 0.1 s after it for ids minted just ahead of the
clock), so messages arriving later, wherever from, stay. A
task whose moves would come back to its source (its destination is the source,
or a running task, or a dead-letter queue's redrive, leads back there) is
refused. A round moves at most :data:`ROUND` messages and :data:`ROUND_BYTES`
bytes of bodies, and the next round waits at least as long as this one took,
so a task holds the store's write lock at most about half the time (and at its
rate, :data:`DEFAULT_RATE` messages a second unless the caller asks for fewer).

Its state lives in the source queue's attributes, so every process and API node
answers ListMessageMoveTasks and CancelMessageMoveTask alike: ``sqs.move`` holds
the task (written only by the process running it, and by a start, each a
compare-and-set on its previous value, so one task per source even when two
starts race), ``sqs.move.cancel`` the id of a task asked to stop (set once, by a
compare-and-set: a second cancel is refused). A task whose process stopped
beating for :data:`STALE_SECONDS` is reported FAILED. Only the newest task of a
queue is kept (SQS lists up to ten).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

from queuey.clock import Clock
from queuey.core.workqueues import WorkQueues
from queuey.errors import QueueNotFound, ServiceError
from queuey.model import AttributesChanged, MessageRef, NewMessage, QueueMeta, ReadQuery
from queuey.model.work import own_attributes
from queuey.placement import partition_for_key
from queuey.sqs.errors import SQSError, invalid
from queuey.sqs.queues import no_such_queue
from queuey.storage import Storage

log = logging.getLogger(__name__)

KEY = "sqs.move"
CANCEL = "sqs.move.cancel"
#: Messages one round moves at most.
ROUND = 100
#: Bytes of message bodies one round moves at most (one message at least).
ROUND_BYTES = 1 << 20
#: Messages a second a task moves when the caller sets no rate (SQS's maximum).
DEFAULT_RATE = 500
#: Seconds a task waits for messages inside the read delay to settle.
SETTLE_PAUSE = 0.5
#: Seconds without a heartbeat after which a running task counts as failed.
STALE_SECONDS = 60
#: Seconds between heartbeats of a task that is waiting (settling or paced).
BEAT_SECONDS = 5
#: Compare-and-set attempts of a cancel racing the task's own progress writes.
CANCEL_ATTEMPTS = 10
#: Microseconds past a task's start its ``until`` reaches: a store may mint ids
#: a little ahead of the clock (one microsecond per message of a burst).
AHEAD_MICROS = 100_000
_STATE_KEYS = frozenset(("id", "status", "source", "destination", "rate", "beat", "moved"))


class MoveTasks:
    def __init__(self, storage: Storage, work: WorkQueues, clock: Clock) -> None:
        self.storage = storage
        self.work = work
        #: Queues are found and changed through the core (the cache kept right).
        self.queues = work.queues
        self.clock = clock
        self._cancelled: dict[str, threading.Event] = {}

    # -- state ----------------------------------------------------------------
    def _state(self, meta: QueueMeta) -> dict[str, Any] | None:
        """The queue's task, or None (also for text this module did not write:
        the native API can set any attribute)."""
        text = meta.attributes.get(KEY)
        try:
            state = json.loads(text) if text else None
        except ValueError:
            return None
        if not isinstance(state, dict) or not _STATE_KEYS <= state.keys():
            return None
        return state

    def _write(
        self, application: str, name: str, state: dict[str, Any], previous: str | None, **more
    ) -> str:
        """Store ``state`` if ``sqs.move`` still holds ``previous``; the text stored."""
        text = json.dumps(state, separators=(",", ":"))
        self.queues.update(
            application, name, attributes_set={KEY: text}, attributes_if={KEY: previous}, **more
        )
        return text

    def _now_ms(self) -> int:
        return self.clock.now_micros() // 1000

    def _running(self, state: dict[str, Any] | None) -> bool:
        return bool(state) and state["status"] == "RUNNING" and not self._stale(state)

    # -- actions --------------------------------------------------------------
    def start(
        self,
        source: QueueMeta,
        destination: QueueMeta | None,
        rate: int | None,
        queues: Iterable[QueueMeta],
    ) -> str:
        """Start a task; ``queues`` are the application's queues (for the cycle check)."""
        try:
            source = self.queues.fresh(source.application, source.name)
        except QueueNotFound:
            raise no_such_queue() from None
        previous = source.attributes.get(KEY)
        if self._running(self._state(source)):
            raise _already_running()
        self._check_cycle(source, destination, queues)
        until = self.clock.now_micros() + AHEAD_MICROS  # first: the count below covers it
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
            "until": until,
            "failure": None,
        }
        try:
            text = self._write(
                source.application, source.name, state, previous, attributes_removed=[CANCEL]
            )
        except AttributesChanged:  # another start won the race
            raise _already_running() from None
        self._cancelled[task_id] = threading.Event()
        threading.Thread(
            target=self._run,
            args=(source.application, state, text),
            name=f"sqs-move-{source.name}",
            daemon=True,
        ).start()
        return _handle(source.application, source.name, task_id)

    def _check_cycle(
        self, source: QueueMeta, destination: QueueMeta | None, queues: Iterable[QueueMeta]
    ) -> None:
        """Refuse a task whose moved messages could reach its source again: through
        its own destination, running tasks' destinations, or a dead-letter queue's
        redrive (a task without destination sends a queue's dead letters back to
        the queues whose ``RedrivePolicy`` names it)."""
        if destination is not None and destination.name == source.name:
            raise invalid(
                "Value for parameter DestinationArn is invalid. Reason: the destination "
                "queue is the source queue."
            )
        moves: dict[str, set[str]] = {}  # running tasks: source -> where messages go
        dead_sources: dict[str, set[str]] = {}  # dead-letter queue -> its sources
        for meta in queues:
            if meta.max_attempts:
                dead_sources.setdefault(meta.dead_letter_name, set()).add(meta.name)
            state = self._state(meta) if meta.name != source.name else None
            if self._running(state):
                moves[meta.name] = {state["destination"]} if state["destination"] else set()
        for name in moves:
            if not moves[name]:
                moves[name] = dead_sources.get(name, set())
        seen: set[str] = set()
        todo = [destination.name] if destination else list(dead_sources.get(source.name, ()))
        while todo:
            name = todo.pop()
            if name == source.name:
                raise invalid(
                    "Value for parameter DestinationArn is invalid. Reason: the moved "
                    "messages would come back to the source queue, through a running message "
                    "move task or a dead-letter queue's redrive."
                )
            if name not in seen:
                seen.add(name)
                todo.extend(moves.get(name, ()))

    def list(self, place, source: QueueMeta) -> list[dict[str, Any]]:
        state = self._state(source)
        if state is None:
            return []
        status = state["status"]
        failure = state.get("failure")
        if status == "RUNNING" and source.attributes.get(CANCEL) == state["id"]:
            status = "CANCELLING"
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
            raise _no_task()
        _, name, task_id = found
        for _ in range(CANCEL_ATTEMPTS):
            try:
                meta = self.queues.fresh(application, name)
            except QueueNotFound:
                raise _no_task() from None
            state = self._state(meta)
            if state is None or state["id"] != task_id:
                raise _no_task()
            if not self._running(state) or meta.attributes.get(CANCEL) == task_id:
                raise invalid("Only a task with the status RUNNING can be cancelled.")
            try:
                self.queues.update(
                    application,
                    name,
                    attributes_set={CANCEL: task_id},
                    attributes_if={KEY: meta.attributes[KEY], CANCEL: meta.attributes.get(CANCEL)},
                )
            except AttributesChanged:
                continue  # the task wrote its progress meanwhile: look again
            event = self._cancelled.get(task_id)
            if event is not None:
                event.set()
            return int(state["moved"])
        raise SQSError("RequestThrottled", "The task is busy; try cancelling it again.")

    def _stale(self, state: dict[str, Any]) -> bool:
        return self._now_ms() - int(state["beat"]) > STALE_SECONDS * 1000

    # -- the task -------------------------------------------------------------
    def _run(self, application: str, state: dict[str, Any], text: str) -> None:
        cancelled = self._cancelled[state["id"]]
        rate = state["rate"] or DEFAULT_RATE
        started = time.monotonic()
        saved = time.monotonic()
        try:
            while True:
                meta = self.queues.fresh(application, state["source"])
                if meta.attributes.get(KEY) != text:
                    log.warning("message move task %s was replaced; it stops", state["id"])
                    return
                if cancelled.is_set() or meta.attributes.get(CANCEL) == state["id"]:
                    state["status"] = "CANCELLED"
                    break
                left = int(state["to_move"]) - int(state["moved"])
                if left <= 0:
                    state["status"] = "COMPLETED"
                    break
                began = time.monotonic()
                moved, why = self._round(
                    application, meta, state["destination"], min(ROUND, rate, left), state["until"]
                )
                spent = time.monotonic() - began
                state["moved"] += moved
                if moved == 0:
                    if why:
                        state["status"], state["failure"] = "FAILED", why
                        break
                    if state["destination"] is None and self._settling(meta, state["until"]):
                        if time.monotonic() - saved > BEAT_SECONDS:
                            state["beat"] = self._now_ms()
                            text = self._write(application, state["source"], state, text)
                            saved = time.monotonic()
                        cancelled.wait(SETTLE_PAUSE)
                        continue
                    state["status"] = "COMPLETED"
                    break
                state["beat"] = self._now_ms()
                text = self._write(application, state["source"], state, text)
                saved = time.monotonic()
                ahead = state["moved"] / rate - (time.monotonic() - started)
                cancelled.wait(max(ahead, spent))
        except AttributesChanged:
            log.warning("message move task %s was replaced; it stops", state["id"])
            return
        except (ServiceError, OSError) as exc:
            log.warning("message move task %s failed: %s", state["id"], exc)
            state["status"], state["failure"] = "FAILED", str(exc)[:500]
        except Exception:  # a background thread has no caller to raise to
            log.exception("message move task %s failed", state["id"])
            state["status"], state["failure"] = "FAILED", "internal error"
        finally:
            self._cancelled.pop(state["id"], None)
        try:
            state["beat"] = self._now_ms()
            self._write(application, state["source"], state, text)
        except AttributesChanged:
            log.warning("message move task %s was replaced; it stops", state["id"])
        except Exception as exc:  # noqa: BLE001 - logged; the task then counts as stale
            log.warning("message move task %s: its final state was not saved: %s", state["id"], exc)

    def _settling(self, source: QueueMeta, until: int) -> bool:
        """Whether the queue holds messages from before the task's start still
        inside the read delay (a redrive reads only older ones, see
        :meth:`WorkQueues.redrive`)."""
        delay = self.work.read_delay_micros
        if not delay:
            return False
        now = self.clock.now_micros()
        if now - delay >= until:
            return False
        newest = self._read(source, now, 1, "descending", until)
        return bool(newest) and newest[0].timestamp > now - delay

    def _read(self, source: QueueMeta, now: int, limit: int, order: str, until: int) -> list:
        """Up to ``limit`` of the source's messages from before ``until``, in ``order``."""
        query = ReadQuery(source.partition_numbers, now, limit, order, until_micros=until)
        return self.storage.read_messages(source, query)

    def _round(
        self, application: str, source: QueueMeta, destination: str | None, limit: int, until: int
    ) -> tuple[int, str | None]:
        """Messages moved, and why none could be when some are left."""
        if destination is None:
            result = self.work.redrive(source, limit)
            moved = result.moved + result.reposted
            why = next(iter(result.skipped.values()), None)
            return moved, (why if not moved else None)
        try:
            target = self.queues.fresh(application, destination)
        except QueueNotFound:
            return 0, f"the destination queue {destination} no longer exists"
        now = self.clock.now_micros()
        found = self._read(source, now, limit, "ascending", until)
        if not found:
            return 0, None
        found = _within_bytes(found, ROUND_BYTES)
        ttl = self.work.rules.ttl_of(target)
        # The core's one post: counted, and the destination's long polls woken.
        self.work.post(
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
            internal=True,
        )
        self.storage.delete_messages(source, [MessageRef(m.partition, m.id) for m in found])
        return len(found), None


def _within_bytes(messages: list, limit: int) -> list:
    """The longest prefix of ``messages`` whose bodies hold at most ``limit``
    bytes (the first message whatever its size)."""
    total = 0
    for n, message in enumerate(messages):
        total += len(message.body.encode("utf-8"))
        if total > limit and n:
            return messages[:n]
    return messages


def _no_task() -> SQSError:
    return SQSError("ResourceNotFoundException", "The task handle does not exist.")


def _already_running() -> SQSError:
    return invalid("There is already a message move task running on this source queue.")


def _handle(application: str, name: str, task_id: str) -> str:
    raw = json.dumps([application, name, task_id], separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii")


def _parse_handle(handle: object) -> tuple[str, str, str] | None:
    if not isinstance(handle, str) or len(handle) > 1024:
        return None
    try:
        found = json.loads(base64.urlsafe_b64decode(handle.encode("ascii")))
    except (binascii.Error, ValueError, UnicodeError, RecursionError):
        return None
    if not (isinstance(found, list) and len(found) == 3 and all(isinstance(x, str) for x in found)):
        return None
    return found[0], found[1], found[2]
