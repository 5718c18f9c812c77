"""The worker's loop: consume the partitions a consumer group gives this member.

For every partition it owns, the worker reads batches in order starting after
the partition's checkpoint, calls the job on each message (or on each batch),
and commits the checkpoint once the batch's work finished. Processing is
at-least-once: a crash re-delivers at most the batch that was in flight on
each partition.

A message whose job keeps raising is retried with exponential backoff
(``max_attempts`` in all), then parked in the failure queue
(:mod:`queuey.client.worker.failures`) and handed to the failure hook, and
processing moves on. Partitions with nothing to read are polled less and
less often, up to ``idle_max_backoff`` seconds.

User code fails in every hook, and a failure never moves the checkpoint:

* the batch context's ``__enter__`` or ``__exit__`` raising fails the whole
  batch: its work may not have taken effect (an fsync or a commit failed), so
  nothing of it is recorded or committed;
* a message that could not be parked, or whose failure hook raised, is not
  finished: the batch stops before it (the work before it is committed once
  the context exited cleanly).

Either way the worker keeps the partition's lease and reads the partition
again from its last committed position after ``retry_backoff`` seconds,
doubling up to ``retry_max_backoff`` while it keeps failing (at-least-once:
the messages of a failed batch are processed again). Other partitions go on
meanwhile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from queuey.client.consumergroup import ConsumerGroup
from queuey.client.discovery import QueueDiscovery
from queuey.client.errors import ClientError
from queuey.client.http import QueueyClient
from queuey.client.lease import PartitionLease
from queuey.client.models import ReceivedMessage
from queuey.client.worker.config import (
    ContextFactory,
    Job,
    Runner,
    WorkerConfig,
    load_callable,
    load_user_code,
)
from queuey.client.worker.failures import FailureQueues
from queuey.tracing import consuming

log = logging.getLogger(__name__)

FailureHook = Callable[[ReceivedMessage, BaseException], Any]


@dataclasses.dataclass
class WorkerStats:
    """Counters of one worker process."""

    processed: int = 0  # messages whose job finished (or that went to the failure queue)
    batches: int = 0
    retries: int = 0
    failed: int = 0  # messages moved to a failure queue
    commits: int = 0
    read_errors: int = 0
    batch_failures: int = 0  # batches processed again: a context or failure handling raised


#: :meth:`Worker.process_batch` results besides a count: the lease is gone / the batch failed.
LOST = -1
FAILED = -2


class _Unfinished(Exception):
    """A message kept failing and its failure could not be recorded."""


@dataclasses.dataclass
class _Batch:
    """The messages of one batch and how far their work got (not yet committed)."""

    messages: list[ReceivedMessage]
    done: int = 0  # leading messages whose work finished
    stuck: bool = False  # stopped at a message that could not be finished


class Worker(Runner):
    """Runs a job over the partitions this member owns until :meth:`stop`.

    ``job``, ``context`` and ``failure_hook`` default to the callables the
    config names; pass them to use the worker from Python. ``client`` and
    ``group`` may be given to share or instrument them.
    """

    def __init__(
        self,
        config: WorkerConfig,
        *,
        job: Job | None = None,
        context: ContextFactory | None = None,
        failure_hook: FailureHook | None = None,
        client: QueueyClient | None = None,
        group: ConsumerGroup | None = None,
        member_id: str | None = None,
    ) -> None:
        self.config = config
        self.job, self.context = load_user_code(config, job, context)
        self.failure_hook = failure_hook or (
            load_callable(config.failure_hook, "worker.failure_hook")
            if config.failure_hook
            else None
        )
        self._clients: list[QueueyClient] = []
        self.client = client or self._own_client()
        self.group = group or ConsumerGroup(
            config.zookeeper_hosts,
            config.group,
            # The discovery thread gets a client (and a connection pool) of its own.
            QueueDiscovery(self._own_client(), config.queues, config.exclude),
            root=config.zookeeper_root,
            session_timeout=config.session_timeout,
            rebalance_timeout=config.rebalance_timeout,
            discovery_interval=config.discovery_interval,
            member_id=member_id,
            mirror=(self.client, config.group) if config.mirror_checkpoints else None,
            application=self.client.application,
        )
        self.stats = WorkerStats()
        self._stop = threading.Event()
        self._idle: dict[tuple[str, int], tuple[float, float]] = {}  # key -> (due, backoff)
        self.failures = FailureQueues(
            self.client, config.failure_queue, config.group, self.group.member_id
        )

    # ---------------------------------------------------------- control

    def run(self) -> None:
        """Join the group and process until :meth:`stop`; then leave cleanly."""
        log.info(
            "worker %s: group %s, queues %s, job %s",
            self.group.member_id,
            self.config.group,
            ",".join(self.config.queues),
            self.config.job or self.job,
        )
        self.group.start()
        try:
            self._loop()
        finally:
            self.group.stop()
            for own in self._clients:
                own.close()
            log.info("worker %s stopped: %s", self.group.member_id, self.stats)

    # ------------------------------------------------------------- loop

    def _loop(self) -> None:
        while not self._stop.is_set():
            leases = self.group.leases()
            worked = False
            now = time.monotonic()
            for lease in leases:
                if self._stop.is_set():
                    break
                due, _ = self._idle.get(lease.key, (0.0, 0.0))
                if due > now:
                    continue
                count = self.process_batch(lease)
                config = self.config
                if count > 0:
                    self._idle.pop(lease.key, None)
                    worked = True
                elif count == 0:
                    self._back_off(lease.key, config.idle_backoff, config.idle_max_backoff)
                elif count == FAILED:
                    self._back_off(lease.key, config.retry_backoff, config.retry_max_backoff)
            if not worked and not self._stop.is_set():
                self._wait_idle(leases)

    def _back_off(self, key: tuple[str, int], first: float, ceiling: float) -> None:
        """Leave a partition alone for a while: ``first`` seconds, doubling up to ``ceiling``.

        Used for idle partitions and for failed batches (read again from the
        last committed position, the lease kept, so order is kept).
        """
        _, previous = self._idle.get(key, (0.0, 0.0))
        backoff = min(ceiling, previous * 2 or first)
        self._idle[key] = (time.monotonic() + backoff * random.uniform(0.5, 1.0), backoff)

    def _wait_idle(self, leases: list[PartitionLease]) -> None:
        dues = [self._idle[lease.key][0] for lease in leases if lease.key in self._idle]
        if leases and len(dues) == len(leases):
            timeout = max(0.0, min(dues) - time.monotonic())
        elif leases:
            timeout = 0.0
        else:
            timeout = self.config.idle_max_backoff
        if timeout > 0:
            # Woken early by an ownership change, as by a stop request.
            timeout = min(timeout, self.config.idle_max_backoff)
            self._sleep(timeout, lambda left: self.group.wait_for_change(min(left, 0.25)))

    def _sleep(
        self, seconds: float, nap: Callable[[float], Any], going: Callable[[], bool] = lambda: True
    ) -> bool:
        """Sleep ``seconds`` in naps (``nap(seconds left)``); True once they
        passed, False as soon as the worker stops or ``going()`` turns false."""
        deadline = time.monotonic() + seconds
        while not self._stop.is_set() and going():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            nap(left)
        return False

    # ------------------------------------------------------------ batch

    def process_batch(self, lease: PartitionLease) -> int:
        """Read and process one batch of a partition; the number of messages handled.

        Returns 0 when there was nothing to read (or the read failed), ``LOST``
        when the lease is no longer ours and ``FAILED`` when the batch failed:
        the context's ``__enter__`` or ``__exit__`` raised, or the batch did
        not get past a message (its failure could not be recorded). A failed
        context fails the whole batch: the position is left where it was
        before the batch, nothing is committed, and the batch is read again
        after a backoff. Messages finished before a message that could not be
        finished are kept, and committed, if the context exits cleanly.
        """
        with lease:
            if not lease.valid():
                return LOST
            try:
                messages = self._read(lease)
            except ClientError as exc:
                self.stats.read_errors += 1
                log.warning("reading %s:%s failed: %s", lease.queue, lease.partition, exc)
                return 0
            if not messages:
                return 0
            batch = _Batch(messages)
            try:
                with self.context() if self.context else contextlib.nullcontext():
                    if self.config.per_batch:
                        self._run_batch(lease, batch)
                    else:
                        self._run_each(lease, batch, self.job)
            except Exception:
                # The work of this batch may not have taken effect (an fsync or a
                # transaction commit in __exit__ failed): none of it counts.
                self.stats.batch_failures += 1
                log.exception(
                    "batch context of %s:%s failed; the batch will be processed again",
                    lease.queue,
                    lease.partition,
                )
                return FAILED
            self.stats.batches += 1
            self.stats.processed += batch.done
            if batch.done:
                last = messages[batch.done - 1]
                lease.advance(last.message_id, last.timestamp)
            if lease.dirty and lease.commit():
                self.stats.commits += 1
            if batch.stuck:
                self.stats.batch_failures += 1
                return FAILED
            return batch.done

    def _read(self, lease: PartitionLease) -> list[ReceivedMessage]:
        position = lease.position
        return self.client.read(
            lease.queue,
            since=position.message_id if position else None,
            since_timestamp=None if position else "0",
            limit=self.config.batch_size,
            order="ascending",
            partitions=[lease.partition],
        )

    def _run_one(self, lease: PartitionLease, message: ReceivedMessage, job: Job) -> bool:
        """Run ``job`` on one message with retries; True once it is done or parked.

        False if the worker or the lease stopped; :class:`_Unfinished` if the
        message kept failing and its failure could not be recorded (:meth:`_park`).
        """
        attempt = 0
        while True:
            attempt += 1
            try:
                # A span per attempt, in the trace the message was produced in.
                with consuming(f"queuey process {lease.queue}", message.attributes):
                    job(message)
            except Exception as exc:  # noqa: BLE001 - any job error is retried, then parked
                if attempt >= self.config.max_attempts:
                    self._park(lease, message, exc, attempt)
                    return True
                delay = self._retry_delay(attempt)
                log.warning(
                    "job failed on %s:%s %s (attempt %d/%d): %r; retrying in %.2fs",
                    lease.queue,
                    lease.partition,
                    message.message_id,
                    attempt,
                    self.config.max_attempts,
                    exc,
                    delay,
                )
                self.stats.retries += 1
                if not self._sleep_while_valid(lease, delay):
                    return False
            else:
                return True

    def _run_batch(self, lease: PartitionLease, batch: _Batch) -> None:
        """Per-batch jobs: retry the whole batch, then fall back to one message at a time."""
        messages = batch.messages
        for attempt in range(1, self.config.max_attempts + 1):
            try:
                self.job(messages)
            except Exception as exc:  # noqa: BLE001
                if attempt == self.config.max_attempts:
                    log.warning(
                        "batch of %s:%s failed %d times (%r); retrying message by message",
                        lease.queue,
                        lease.partition,
                        attempt,
                        exc,
                    )
                    break
                self.stats.retries += 1
                if not self._sleep_while_valid(lease, self._retry_delay(attempt)):
                    return
            else:
                batch.done = len(messages)
                return
        self._run_each(lease, batch, lambda m: self.job([m]))

    def _run_each(self, lease: PartitionLease, batch: _Batch, job: Job) -> None:
        """Run ``job`` on each message in turn until one is not finished."""
        for message in batch.messages:
            if not lease.valid():
                return
            try:
                if not self._run_one(lease, message, job):
                    return
            except _Unfinished:
                batch.stuck = True
                return
            batch.done += 1

    def _retry_delay(self, attempt: int) -> float:
        ceiling = min(self.config.retry_max_backoff, self.config.retry_backoff * 2 ** (attempt - 1))
        return ceiling * random.uniform(0.5, 1.0)

    def _sleep_while_valid(self, lease: PartitionLease, delay: float) -> bool:
        """Wait ``delay`` before a retry; False if the lease or the worker stopped."""
        return self._sleep(delay, lambda left: self._stop.wait(min(left, 0.1)), lease.valid)

    # ---------------------------------------------------------- failure

    def _park(
        self, lease: PartitionLease, message: ReceivedMessage, exc: BaseException, attempts: int
    ) -> None:
        """Move a message that kept failing to the failure queue and call the failure hook.

        Raises :class:`_Unfinished`, and the message stays unfinished (the
        batch stops before it and is retried after a backoff), if the failure
        queue could not be written or the failure hook raised: the hook is the
        user's record of the failure, so it must have run before the
        checkpoint may pass the message. A retry parks the message again.
        """
        if not self.failures.park(lease.queue, message, exc, attempts):
            raise _Unfinished
        self.stats.failed += 1
        if self.failure_hook is not None:
            try:
                self.failure_hook(message, exc)
            except Exception:
                log.exception(
                    "the failure hook raised on %s:%s %s; the message stays unfinished",
                    lease.queue,
                    lease.partition,
                    message.message_id,
                )
                raise _Unfinished from None
