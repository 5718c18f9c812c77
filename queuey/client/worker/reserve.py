"""The worker's reserve mode: competing consumers of a work-queue subscription.

With ``mode = reserve`` the worker needs no ZooKeeper and any number of
workers may run: each asks the service to ``reserve`` a batch of messages of
its subscription, and the service leases every message to one worker at a
time (docs/api.rst, "Work queues"). For each batch the worker

* runs the job on each message (or once on the batch with ``per_batch``),
  inside the batch context when one is configured, ``concurrency`` batches
  at once on as many threads (each thread runs its batch's context and jobs,
  so thread-local state set up by the context is seen by the jobs);
* keeps the leases of the batch alive while it works (:mod:`.keeper`), so a
  slow job is not handed to another worker;
* acks, in one call, the messages whose job succeeded, and only those;
* releases a message whose job raised with a delay of ``retry_backoff``
  seconds doubling with its attempt count up to ``retry_max_backoff`` and the
  error's first line as its last error. The server counts the attempts and
  dead-letters a message that used its queue's ``max_attempts``.

If the batch context fails (``__enter__`` or ``__exit__`` raises), none of the
batch's work counts: every message of it is released with a backoff, none
acked. On :meth:`ReserveWorker.stop` (SIGTERM) each thread finishes the job
in hand, acks what succeeded and releases the messages it had not started (at
once, without delay), then the worker exits. A worker killed outright loses
nothing: its messages come back after their visibility timeout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence

from queuey.client.errors import ClientError
from queuey.client.http import QueueyClient
from queuey.client.models import ReservedMessage
from queuey.client.worker.config import ContextFactory, Job, Runner, WorkerConfig, load_user_code
from queuey.client.worker.keeper import LeaseKeeper
from queuey.errors import ConfigurationError
from queuey.tracing import consuming

log = logging.getLogger(__name__)


#: The lease of a queue that says none (the service's default).
DEFAULT_VISIBILITY_TIMEOUT = 30
#: Seconds a queue's visibility timeout, read from its info, is trusted.
SETTINGS_TTL = 60.0
#: Longest error text sent with a release (its first line, cut there).
MAX_ERROR = 500
#: :meth:`ReserveWorker.process_next` when its ``reserve`` call failed.
FAILED = -1


@dataclasses.dataclass
class ReserveStats:
    """Counters of one reserve-mode worker (all its threads)."""

    reserved: int = 0  # deliveries received
    processed: int = 0  # jobs that succeeded and were acked
    failed: int = 0  # jobs that raised: released with a backoff
    released: int = 0  # messages released (failed, unstarted at stop, failed contexts)
    ack_expired: int = 0  # processed, but the ack came too late (another worker has it)
    batches: int = 0
    batch_failures: int = 0  # batch contexts that raised
    reserve_errors: int = 0
    ack_errors: int = 0


@dataclasses.dataclass
class _Outcome:
    """What became of one batch's messages."""

    done: list[ReservedMessage] = dataclasses.field(default_factory=list)
    failed: list[tuple[ReservedMessage, BaseException]] = dataclasses.field(default_factory=list)
    unstarted: list[ReservedMessage] = dataclasses.field(default_factory=list)


def backoff_delay(attempts: int, first: float, ceiling: float) -> int:
    """Seconds before a message that failed on delivery ``attempts`` comes back.

    ``first`` doubling per attempt up to ``ceiling``, in whole seconds (the
    API's unit), rounded up: a backoff never shortens to nothing.
    """
    seconds = min(ceiling, first * 2 ** max(0, attempts - 1))
    return math.ceil(seconds) if seconds > 0 else 0


def error_text(exc: BaseException) -> str:
    """``Type: first line of the message``, at most :data:`MAX_ERROR` characters."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text[:MAX_ERROR]


class ReserveWorker(Runner):
    """Runs a job over the messages a work-queue subscription hands out, until :meth:`stop`.

    ``job`` and ``context`` default to the callables the config names.
    ``client_factory`` makes the HTTP clients (one per thread and one for the
    lease keeper); tests pass their own.
    """

    def __init__(
        self,
        config: WorkerConfig,
        *,
        job: Job | None = None,
        context: ContextFactory | None = None,
        client_factory: Callable[[], QueueyClient] | None = None,
        name: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if config.mode != "reserve":
            raise ConfigurationError("worker.mode", "a ReserveWorker needs mode = reserve")
        self.config = config
        self.job, self.context = load_user_code(config, job, context)
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.clock = clock
        self._client_factory = client_factory
        self._clients: list[QueueyClient] = []
        self.keeper = LeaseKeeper(self._own_client(), config.subscription, clock=clock)
        self.stats = ReserveStats()
        self._stats_lock = threading.Lock()
        self._stop = threading.Event()
        self._timeouts: dict[str, tuple[int, float]] = {}  # queue -> (seconds, read at)
        self._timeouts_lock = threading.Lock()

    # ---------------------------------------------------------------- control

    def run(self) -> None:
        """Consume until :meth:`stop`, then finish or release what is in hand."""
        config = self.config
        log.info(
            "worker %s: reserve mode, subscription %s of %s, job %s, %d thread(s)",
            self.name,
            config.subscription,
            ",".join(config.queues),
            config.job or self.job,
            config.concurrency,
        )
        self.keeper.start()
        threads = [
            threading.Thread(
                target=self._consume, args=(self._own_client(), n), name=f"{self.name}-{n}"
            )
            for n in range(config.concurrency)
        ]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.5)
        finally:
            self._stop.set()
            self.keeper.stop()
            for client in self._clients:
                client.close()
            log.info("worker %s stopped: %s", self.name, self.stats)

    def _count(self, **increments: int) -> None:
        with self._stats_lock:
            for name, value in increments.items():
                setattr(self.stats, name, getattr(self.stats, name) + value)

    # ------------------------------------------------------------------- loop

    def _consume(self, client: QueueyClient, number: int) -> None:
        """One thread's loop: reserve a batch from each queue in turn and process it.

        After a failed call (the service unreachable, a queue missing) or an
        empty round without long polls, the thread pauses ``idle_backoff``
        seconds, doubling up to ``idle_max_backoff`` while it lasts.
        """
        queues = self.config.queues
        turn = number  # threads start on different queues
        empty_round = 0  # queues in a row that had nothing
        idle = 0.0
        while not self._stop.is_set():
            queue = queues[turn % len(queues)]
            turn += 1
            wait = self._wait_for(empty_round >= len(queues))
            try:
                got = self.process_next(client, queue, wait)
            except Exception:  # noqa: BLE001 - the loop outlives any one batch
                log.exception("batch of %s failed unexpectedly", queue)
                got = FAILED
            if got > 0:
                empty_round, idle = 0, 0.0
                continue
            empty_round += 1
            if got == FAILED or (empty_round >= len(queues) and not wait):
                idle = min(self.config.idle_max_backoff, idle * 2 or self.config.idle_backoff)
                self._stop.wait(idle)

    def _wait_for(self, all_empty: bool) -> int:
        """The long poll of the next call: always with one queue; with several,
        only once every queue came back empty (shared out among them)."""
        wait, count = self.config.wait, len(self.config.queues)
        if count == 1 or not wait:
            return wait
        return max(1, wait // count) if all_empty else 0

    def process_next(self, client: QueueyClient, queue: str, wait: int = 0) -> int:
        """Reserve one batch of ``queue`` and process it: how many messages came,
        or :data:`FAILED` if the ``reserve`` failed."""
        timeout = self._visibility_timeout(client, queue)
        asked_at = self.clock()
        try:
            messages = client.reserve(
                queue,
                subscription=self.config.subscription,
                limit=self.config.batch_size,
                visibility_timeout=timeout,
                wait=wait,
            )
        except ClientError as exc:
            self._count(reserve_errors=1)
            log.warning("reserving from %s failed: %s", queue, exc)
            return FAILED
        if messages:
            self._count(reserved=len(messages))
            self.keeper.hold(queue, [m.receipt for m in messages], timeout, asked_at)
            outcome = self._run_batch(queue, messages)
            self._settle(client, queue, messages, outcome)
        return len(messages)

    def _visibility_timeout(self, client: QueueyClient, queue: str) -> int:
        """The lease to ask for: the configured one, else the queue's (re-read every minute)."""
        if self.config.visibility_timeout:
            return self.config.visibility_timeout
        now = self.clock()
        with self._timeouts_lock:
            known = self._timeouts.get(queue)
        if known is not None and now - known[1] < SETTINGS_TTL:
            return known[0]
        try:
            seconds = client.queue_info(queue).visibility_timeout or DEFAULT_VISIBILITY_TIMEOUT
        except ClientError as exc:
            if known is not None:
                return known[0]
            log.warning("cannot read the settings of %s (%s); leasing for 30 s", queue, exc)
            return DEFAULT_VISIBILITY_TIMEOUT
        with self._timeouts_lock:
            self._timeouts[queue] = (seconds, now)
        return seconds

    # ------------------------------------------------------------------ batch

    def _run_batch(self, queue: str, messages: list[ReservedMessage]) -> _Outcome:
        outcome = _Outcome()
        try:
            with self.context() if self.context else contextlib.nullcontext():
                if self.config.per_batch:
                    self._run_whole(messages, outcome)
                else:
                    self._run_each(queue, messages, outcome)
        except Exception as exc:  # noqa: BLE001 - a failed context voids the batch's work
            self._count(batch_failures=1)
            log.exception("batch context of %s failed; its messages are released", queue)
            started = [m for m in messages if m not in outcome.unstarted]
            outcome.failed = [(m, exc) for m in started]
            outcome.done = []
        self._count(batches=1)
        return outcome

    def _run_each(self, queue: str, messages: list[ReservedMessage], outcome: _Outcome) -> None:
        for message in messages:
            if self._stop.is_set() or self.keeper.is_lost(message.receipt):
                outcome.unstarted.append(message)
                continue
            try:
                # A span per message, in the trace the message was produced in.
                with consuming(f"queuey process {queue}", message.attributes):
                    self.job(message)
            except Exception as exc:  # noqa: BLE001 - any job error releases the message
                outcome.failed.append((message, exc))
            else:
                outcome.done.append(message)

    def _run_whole(self, messages: list[ReservedMessage], outcome: _Outcome) -> None:
        if self._stop.is_set():
            outcome.unstarted.extend(messages)
            return
        try:
            self.job(messages)
        except Exception as exc:  # noqa: BLE001
            outcome.failed.extend((m, exc) for m in messages)
        else:
            outcome.done.extend(messages)

    def _settle(
        self, client: QueueyClient, queue: str, messages: list[ReservedMessage], outcome: _Outcome
    ) -> None:
        """Ack what succeeded, release the rest; nothing is acked that did not succeed."""
        unstarted = [m for m in outcome.unstarted if not self.keeper.is_lost(m.receipt)]
        self.keeper.drop(m.receipt for m in messages)
        if outcome.done:
            self._ack(client, queue, outcome.done)
        if unstarted:
            self._release(client, queue, unstarted, 0, None)
        by_retry: dict[tuple[int, str], list[ReservedMessage]] = defaultdict(list)
        for message, exc in outcome.failed:
            delay = backoff_delay(
                message.attempts, self.config.retry_backoff, self.config.retry_max_backoff
            )
            by_retry[(delay, error_text(exc))].append(message)
            log.warning(
                "job failed on %s %s (attempt %d): %r; released for %d s",
                queue,
                message.message_id,
                message.attempts,
                exc,
                delay,
            )
        self._count(failed=len(outcome.failed))
        for (delay, error), failed in by_retry.items():
            self._release(client, queue, failed, delay, error)

    def _ack(self, client: QueueyClient, queue: str, done: Sequence[ReservedMessage]) -> None:
        try:
            result = client.ack(queue, [m.receipt for m in done], self.config.subscription)
        except ClientError as exc:
            self._count(ack_errors=1)
            log.warning(
                "acking %d message(s) of %s failed (%s): they come back after their lease",
                len(done),
                queue,
                exc,
            )
            return
        self._count(processed=len(done) - len(result.failed), ack_expired=len(result.failed))
        if result.failed:
            log.warning(
                "%d message(s) of %s were processed after their lease ended (%s)",
                len(result.failed),
                queue,
                ", ".join(sorted(set(result.failed.values()))),
            )

    def _release(
        self,
        client: QueueyClient,
        queue: str,
        messages: Sequence[ReservedMessage],
        delay: int,
        error: str | None,
    ) -> None:
        try:
            client.release(
                queue,
                [m.receipt for m in messages],
                self.config.subscription,
                delay=delay,
                error=error,
            )
        except ClientError as exc:
            log.warning(
                "releasing %d message(s) of %s failed (%s): they come back after their lease",
                len(messages),
                queue,
                exc,
            )
            return
        self._count(released=len(messages))
