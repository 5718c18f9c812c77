"""Evidence for "a partition never has two owners at once", gathered two ways.

**The processing log.** :class:`ProcessingLog` is a worker job (with its batch
context) that appends one JSON line per processed message: worker, partition,
message id, the message's ``n``, the worker's batch number, when that batch
began, and the time.
``queuey-worker`` processes load it as ``tests.faults.faults_support:process``
and ``:batch_context``, named by ``FAULT_WORKER_NAME``, writing to
``FAULT_PROCESSING_LOG`` and working ``FAULT_JOB_DELAY`` seconds per message;
in-process workers build one directly. A batch is the unit a worker commits,
so :func:`overlapping_batches` defines a violation as two batches of one
partition, by different workers, whose time spans (first to last message
processed) overlap: processing that interleaves inside a commit boundary.

**The owner nodes.** :class:`OwnershipSampler` polls ZooKeeper's owner and
member nodes while the test runs. :func:`processed_by_non_owner` then finds
records written while one and the same owner node of another member existed
(it was read before the record and again after it);
:attr:`OwnershipSampler.stale` counts owner nodes held by a session that is
not their member's live one.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.retry import KazooRetry

from queuey.client import ReceivedMessage


class ProcessingLog:
    """A job that records which worker processed which message, in which batch, when."""

    def __init__(self, worker: str, path: Path, delay: float = 0.0) -> None:
        self.worker = worker
        self.path = Path(path)
        self.delay = delay  # seconds of "work" per message, so a batch spans time
        self.batch = 0
        self.batch_started = 0.0
        self._out: IO[str] | None = None

    @contextlib.contextmanager
    def batch_context(self) -> Iterator[None]:
        """One batch: a new batch number, and the lines synced when it ends."""
        self.batch += 1
        self.batch_started = time.time()
        with self.path.open("a", buffering=1, encoding="utf-8") as out:
            self._out = out
            try:
                yield
            finally:
                self._out = None
                out.flush()
                os.fsync(out.fileno())

    def process(self, message: ReceivedMessage) -> None:
        if self.delay:
            time.sleep(self.delay)
        line = json.dumps(
            {
                "worker": self.worker,
                "partition": message.partition,
                "message_id": message.message_id,
                "n": message.body.get("n"),
                "batch": self.batch,
                "batch_started": self.batch_started,
                "at": time.time(),
            }
        )
        if self._out is None:
            raise RuntimeError("ProcessingLog.process needs its batch_context")
        self._out.write(line + "\n")


def _from_environment() -> ProcessingLog:
    return ProcessingLog(
        os.environ.get("FAULT_WORKER_NAME", f"pid{os.getpid()}"),
        Path(os.environ.get("FAULT_PROCESSING_LOG", "processing.jsonl")),
        float(os.environ.get("FAULT_JOB_DELAY", "0")),
    )


_process_log: ProcessingLog | None = None


def _log() -> ProcessingLog:
    global _process_log
    if _process_log is None:
        _process_log = _from_environment()
    return _process_log


def process(message: ReceivedMessage) -> None:
    """The job of a ``queuey-worker`` process (``tests.faults.faults_support:process``)."""
    _log().process(message)


def batch_context():
    """Its batch context (``tests.faults.faults_support:batch_context``)."""
    return _log().batch_context()


def read_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):  # a line cut short by a killed writer
            records.append(json.loads(line))
    return records


# --------------------------------------------------------------- the log's verdict


@dataclass(frozen=True)
class BatchSpan:
    worker: str
    batch: int
    partition: int
    start: float
    end: float


def batch_spans(records: list[dict]) -> list[BatchSpan]:
    """Each (worker, batch, partition) with the times of its first and last record."""
    spans: dict[tuple, list[float]] = {}
    for r in records:
        key = (r["worker"], r["batch"], r["partition"])
        span = spans.setdefault(key, [r["at"], r["at"]])
        span[0], span[1] = min(span[0], r["at"]), max(span[1], r["at"])
    return [BatchSpan(w, b, p, s, e) for (w, b, p), (s, e) in spans.items()]


def overlapping_batches(records: list[dict]) -> list[tuple[BatchSpan, BatchSpan]]:
    """Pairs of batches of one partition by two workers whose time spans overlap.

    Per partition, in order of start: a batch that starts before the latest
    end seen so far, and whose worker is not that batch's, overlaps it. Any
    overlapping pair makes at least one such finding.
    """
    found = []
    by_partition: dict[int, list[BatchSpan]] = defaultdict(list)
    for span in batch_spans(records):
        by_partition[span.partition].append(span)
    for spans in by_partition.values():
        spans.sort(key=lambda s: (s.start, s.end))
        latest: BatchSpan | None = None
        for span in spans:
            if latest is not None and span.start < latest.end and span.worker != latest.worker:
                found.append((latest, span))
            if latest is None or span.end > latest.end:
                latest = span
    return found


def worker_changes(records: list[dict]) -> int:
    """How often a partition passed from one worker to another, as the log shows."""
    changes = 0
    by_partition: dict[int, list[BatchSpan]] = defaultdict(list)
    for span in batch_spans(records):
        by_partition[span.partition].append(span)
    for spans in by_partition.values():
        spans.sort(key=lambda s: s.start)
        changes += sum(1 for a, b in zip(spans, spans[1:], strict=False) if a.worker != b.worker)
    return changes


# ---------------------------------------------------------------- ZooKeeper's view


@dataclass(frozen=True)
class Owner:
    """An owner node as read: its member, its session, and which node it is
    (``czxid``: a node deleted and created again has another)."""

    member: str
    session: int
    czxid: int


@dataclass(frozen=True)
class Sample:
    """Owner nodes read between ``start`` and ``end`` (``time.time()``)."""

    start: float
    end: float
    owners: dict[int, Owner]


class OwnershipSampler:
    """Polls the owner nodes of ``queue`` (and the member nodes) every ``interval`` s.

    An owner node held by a session that is not the session of its member's
    node, while that member node exists, is *stale*: the member went on with
    a new session while its old one still held the partition. It is counted
    only when the same owner node and member node are read so twice in a
    row, so a member caught rejoining between two reads is not.
    """

    def __init__(
        self,
        hosts: str,
        group: str,
        queue: str,
        interval: float = 0.02,
        session_timeout: float = 4.0,
    ) -> None:
        self.base = f"/queuey/groups/{group}"
        self.queue = queue
        self.interval = interval
        self.samples: list[Sample] = []
        self.stale: list[tuple[float, int, Owner, int]] = []
        self.errors = 0
        self._zk = KazooClient(
            hosts=hosts,
            timeout=session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=0.5),
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ownership-sampler", daemon=True)

    def start(self) -> OwnershipSampler:
        self._zk.start(timeout=30)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._zk.stop()
        self._zk.close()

    def _read_children(self, path: str) -> dict[str, tuple[bytes, object]]:
        """Every child's (data, stat), read in parallel; children gone meanwhile are left out."""
        try:
            children = self._zk.get_children(path)
        except NoNodeError:
            return {}
        futures = {child: self._zk.get_async(f"{path}/{child}") for child in children}
        found = {}
        for child, future in futures.items():
            with contextlib.suppress(NoNodeError):
                found[child] = future.get(timeout=10)
        return found

    def owners(self) -> dict[int, Owner]:
        nodes = self._read_children(f"{self.base}/owners/{self.queue}")
        return {
            int(child): Owner(json.loads(data)["member"], stat.ephemeralOwner, stat.czxid)
            for child, (data, stat) in nodes.items()
        }

    def member_sessions(self) -> dict[str, int]:
        nodes = self._read_children(f"{self.base}/members")
        return {child: stat.ephemeralOwner for child, (_, stat) in nodes.items()}

    def _run(self) -> None:
        suspect: dict[int, tuple[Owner, int]] = {}
        while not self._stop.wait(self.interval):
            start = time.time()
            try:
                owners = self.owners()
                sessions = self.member_sessions()
            except KazooException:
                self.errors += 1  # ZooKeeper is down: no sample
                continue
            self.samples.append(Sample(start, time.time(), owners))
            odd = {
                p: (o, sessions[o.member])
                for p, o in owners.items()
                if o.member in sessions and sessions[o.member] != o.session
            }
            for partition, seen in odd.items():
                if suspect.get(partition) == seen:
                    self.stale.append((start, partition, *seen))
            suspect = odd

    def handovers(self, since: float = 0.0, until: float = float("inf")) -> int:
        """How often a partition got a new owner node after its first one
        (counting samples read from ``since`` to ``until``, wall-clock)."""
        last: dict[int, Owner] = {}
        count = 0
        for sample in self.samples:
            for partition, owner in sample.owners.items():
                if partition in last and last[partition] != owner and since <= sample.start < until:
                    count += 1
                last[partition] = owner
        return count


def processed_by_non_owner(records: list[dict], samples: list[Sample]) -> list[dict]:
    """Records written while ZooKeeper provably named another owner.

    For a record at ``t``: the last sample read wholly before ``t`` and the
    first read wholly after it. If both saw the *same* owner node (same
    ``czxid``) of the partition, that node existed throughout, so its member
    alone owned the partition at ``t``; a record by anyone else is a
    violation. Sampling can miss a violation; it cannot invent one.
    """
    ends = [s.end for s in samples]
    starts = [s.start for s in samples]
    found = []
    for r in records:
        before = bisect.bisect_right(ends, r["at"]) - 1
        after = bisect.bisect_left(starts, r["at"])
        if before < 0 or after >= len(samples):
            continue
        a = samples[before].owners.get(r["partition"])
        b = samples[after].owners.get(r["partition"])
        if a is not None and a == b and a.member != r["worker"]:
            found.append(r)
    return found


def longest_gap(records: list[dict], since: float, until: float) -> float:
    """The longest time from ``since`` to ``until`` in which no message was processed."""
    times = sorted(r["at"] for r in records if since <= r["at"] <= until)
    edges = [since, *times, until]
    return max(b - a for a, b in zip(edges, edges[1:], strict=False))
