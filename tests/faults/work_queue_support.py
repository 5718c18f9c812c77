"""Helpers for the work-queue invariant tests: a small HTTP caller, and
consumer threads that log every delivery and receipt outcome with the
wall-clock times around each call (``sent`` just before the request,
``received`` just after the answer). The verdict drawn from that log is in
:mod:`tests.faults.work_queue_verdict`.

The caller is deliberately independent of :class:`queuey.client.QueueyClient`:
these tests check the HTTP contract of docs/api.rst ("Work queues") as a user's
program sees it. Nothing under test is retried behind the test's back: a 503
on reserve, ack or release is counted (its outcome is unknown) before the
consumer calls again, and only set-up calls (creating a queue) retry quietly.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import requests

from tests.support import KEY


class HttpError(AssertionError):
    """A call answered with an unexpected status (the JSON body is in ``data``)."""

    def __init__(self, method: str, path: str, status: int, data: Any) -> None:
        super().__init__(f"{method} {path} -> {status}: {data}")
        self.status = status
        self.data = data


class WorkQueueHttp:
    """One user's HTTP calls to one API node (one ``requests.Session``, one thread)."""

    #: Whether the last ack or release was sent again after a 503 (its first
    #: attempt's outcome unknown): only :class:`FailoverHttp` does so.
    unsure = False

    def __init__(self, url: str, application: str, key: str = KEY, timeout: float = 60.0) -> None:
        self.url = url
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers.update({"X-Application-Name": application, "ApplicationKey": key})

    def close(self) -> None:
        self.session.close()

    def call(self, method: str, path: str, expect: Iterable[int] = (200,), **kw: Any) -> dict:
        response = self.session.request(method, self.url + path, timeout=self.timeout, **kw)
        try:
            data = response.json()
        except ValueError:
            data = response.text[:500]
        if response.status_code not in tuple(expect):
            raise HttpError(method, path, response.status_code, data)
        return data

    # -- queues and posts ---------------------------------------------------------
    def create_queue(self, name: str, partitions: int = 1, **settings: Any) -> dict:
        """Create (set-up, not under test: a 503 is tried again, and a 409 then
        means the first try made it)."""
        body = {"queue_name": name, "partitions": partitions, **settings}
        for attempt in range(5):
            expect = (201, 409) if attempt else (201,)
            try:
                return self.call("POST", "/queue", expect=expect, json=body)
            except HttpError as exc:
                if exc.status != 503 or attempt == 4:
                    raise
            time.sleep(0.5)
        raise AssertionError("unreachable")

    def post(self, queue: str, body: dict, **params: Any) -> dict:
        """One message (``delay``, ``priority``, ``dedup_id``, ``partition`` as
        query parameters); its ``message_id``, ``timestamp``, ``partition``."""
        data = self.call("POST", f"/queue/{queue}", expect=(201,), params=params, json=body)
        return data["messages"][0]

    def post_batch(self, queue: str, entries: list[dict]) -> list[dict]:
        data = self.call("POST", f"/queue/{queue}/batch", expect=(201,), json={"messages": entries})
        return data["messages"]

    def read_partition(self, queue: str, partition: int) -> list[dict]:
        """Every readable message of one partition, oldest first."""
        out: list[dict] = []
        params: dict[str, Any] = {
            "partitions": str(partition),
            "order": "ascending",
            "limit": 1000,
            "since_timestamp": "0",
        }
        while True:
            page = self.call("GET", f"/queue/{queue}", params=params)["messages"]
            out.extend(page)
            if len(page) < 1000:
                return out
            params.pop("since_timestamp", None)
            params["since"] = page[-1]["message_id"]

    def read_all(self, queue: str) -> list[dict]:
        partitions = self.call("GET", f"/queue/{queue}/info")["partitions"]
        return [m for p in range(1, partitions + 1) for m in self.read_partition(queue, p)]

    # -- the work queue -------------------------------------------------------------
    def reserve(self, queue: str, **params: Any) -> list[dict]:
        """``subscription``, ``limit``, ``visibility_timeout``, ``wait``, ``partitions``."""
        body = {k: v for k, v in params.items() if v is not None}
        return self.call("POST", f"/queue/{queue}/reserve", json=body)["messages"]

    def ack(self, queue: str, receipts: list[str], subscription: str | None = None) -> dict:
        return self._receipts("ack", queue, receipts, subscription)

    def release(
        self,
        queue: str,
        receipts: list[str],
        subscription: str | None = None,
        delay: int | None = None,
        error: str | None = None,
    ) -> dict:
        return self._receipts("release", queue, receipts, subscription, delay=delay, error=error)

    def _receipts(self, verb: str, queue: str, receipts, subscription, **extra) -> dict:
        body = {"receipts": receipts, "subscription": subscription, **extra}
        body = {k: v for k, v in body.items() if v is not None}
        return self.call("POST", f"/queue/{queue}/{verb}", json=body)

    def stats(self, queue: str) -> dict:
        return self.call("GET", f"/queue/{queue}/stats")

    def subscription_stats(self, queue: str, subscription: str = "default") -> dict:
        for entry in self.stats(queue).get("subscriptions", []):
            if entry["subscription"] == subscription:
                return entry
        return {}


def statuses(answer: dict, receipts: list[str], ok: str = "acked") -> dict[str, str]:
    """Per receipt, ``ok`` or the reason the answer's ``failed`` gives."""
    failed = answer.get("failed") or {}
    return {r: failed.get(r, ok) for r in receipts}


# ---------------------------------------------------------------- the record


@dataclass(frozen=True)
class Delivery:
    """One message handed out by one reserve call."""

    consumer: str
    key: str
    message_id: str
    partition: int
    timestamp: float  # the message's server timestamp, seconds
    priority: int
    attempts: int
    receipt: str
    visibility_timeout: float
    sent: float  # wall clock just before the reserve request
    received: float  # just after its answer


@dataclass(frozen=True)
class Finish:
    """What became of one receipt: ``verb`` ack or release, the answer's status."""

    receipt: str
    verb: str
    status: str
    sent: float
    received: float
    error: str | None = None
    #: An earlier attempt of the same call answered 503 (its outcome unknown):
    #: an answer other than "acked" then leaves open whether the ack landed.
    unsure: bool = False


class WorkLog:
    """Every delivery and receipt outcome of a run, thread-safe; sets
    ``all_acked`` once every expected key has been acked."""

    def __init__(self, expected: Iterable[str] = ()) -> None:
        self.expected = set(expected)
        self.deliveries: list[Delivery] = []
        self.finishes: list[Finish] = []
        self.by_receipt: dict[str, Delivery] = {}
        self.acked_keys: set[str] = set()
        #: Keys whose ack answered 503, then not "acked" when sent again (see
        #: :attr:`Finish.unsure`): finished only if the queue has them no more.
        self.unsure_keys: set[str] = set()
        self.errors: list[str] = []
        #: 503 answers per call ("post", "reserve", "ack", "release"): outcome unknown.
        self.unavailable: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self.all_acked = threading.Event()

    def expect(self, keys: Iterable[str]) -> None:
        with self._lock:
            self.expected.update(keys)
            self._check()

    def _check(self) -> None:
        if self.expected and self.expected <= self.acked_keys | self.unsure_keys:
            self.all_acked.set()

    def delivered(self, items: list[Delivery]) -> None:
        with self._lock:
            self.deliveries.extend(items)
            self.by_receipt.update((d.receipt, d) for d in items)

    def finished(self, items: list[Finish]) -> None:
        with self._lock:
            self.finishes.extend(items)
            for f in items:
                if f.verb == "ack" and f.status == "acked":
                    self.acked_keys.add(self.by_receipt[f.receipt].key)
                elif f.verb == "ack" and f.unsure:
                    self.unsure_keys.add(self.by_receipt[f.receipt].key)
            self._check()

    def unknown_outcome(self, verb: str) -> None:
        with self._lock:
            self.unavailable[verb] += 1

    def failed(self, text: str) -> None:
        with self._lock:
            self.errors.append(text[:500])


# ---------------------------------------------------------------- consumers


#: What a consumer does with one reserved batch: ``"ack"``, ``"drop"`` (keep the
#: leases and forget them, as a crashed or stuck consumer would), ``"late-ack"``
#: (ack only once the lease has ended: a consumer too slow for its timeout) or
#: ``"release"``.
Policy = Callable[[int, list[Delivery]], str]


def always(action: str) -> Policy:
    return lambda batch_no, batch: action


def every(n: int, action: str) -> Policy:
    """``action`` on every ``n``-th batch, ack the others."""
    return lambda batch_no, batch: action if batch_no % n == n - 1 else "ack"


class Consumer(threading.Thread):
    """Reserves batches from one node until stopped or every expected key is
    acked; logs every delivery and every receipt outcome in ``log``.

    ``wait`` is the long poll used after an empty answer (0 right after a full
    one). An unexpected answer is logged in ``log.errors`` and stops this
    consumer. A 503 promises nothing either way: it is counted in
    ``log.unavailable`` and the call is made again after a pause (a reserve
    whose answer was lost may have leased messages nobody sees until their
    lease ends; an ack or release is sent again with the same receipts).
    """

    def __init__(
        self,
        name: str,
        url: str,
        application: str,
        queue: str,
        log: WorkLog,
        stop: threading.Event,
        *,
        limit: int = 10,
        visibility_timeout: float = 30,
        wait: int = 1,
        subscription: str = "default",
        policy: Policy = always("ack"),
        release_error: str | None = None,
    ) -> None:
        super().__init__(name=f"consumer-{name}", daemon=True)
        self.consumer = name
        self.http = WorkQueueHttp(url, application)
        self.queue, self.log, self.stop_event = queue, log, stop
        self.limit, self.visibility_timeout, self.wait = limit, visibility_timeout, wait
        self.subscription, self.policy, self.release_error = subscription, policy, release_error
        self.batches = 0

    def run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # recorded; the test asserts there were none
            self.log.failed(f"{self.consumer}: {type(exc).__name__}: {exc}")
        finally:
            self.http.close()

    def _loop(self) -> None:
        empty = False
        while not self.stop_event.is_set() and not self.log.all_acked.is_set():
            try:
                empty = self.round(self.wait if empty else 0) == 0
            except HttpError as exc:
                if exc.status != 503:
                    raise
                self.log.unknown_outcome("reserve")
                self.stop_event.wait(0.2)

    def round(self, wait: int = 0) -> int:
        """One reserve call, its deliveries logged and handled by the policy;
        how many messages it got."""
        sent = time.time()
        messages = self.http.reserve(
            self.queue,
            subscription=self.subscription,
            limit=self.limit,
            visibility_timeout=self.visibility_timeout,
            wait=wait,
        )
        received = time.time()
        if not messages:
            return 0
        batch = [self._delivery(m, sent, received) for m in messages]
        self.log.delivered(batch)
        self._finish(self.policy(self.batches, batch), batch)
        self.batches += 1
        return len(batch)

    def _delivery(self, m: dict, sent: float, received: float) -> Delivery:
        return Delivery(
            consumer=self.consumer,
            key=str(m["body"].get("key")),
            message_id=m["message_id"],
            partition=m["partition"],
            timestamp=m["timestamp"],
            priority=m.get("priority", 0),
            attempts=m["attempts"],
            receipt=m["receipt"],
            visibility_timeout=self.visibility_timeout,
            sent=sent,
            received=received,
        )

    def _finish(self, action: str, batch: list[Delivery]) -> None:
        if action == "drop":
            return
        receipts = [d.receipt for d in batch]
        if action == "late-ack":
            self.stop_event.wait(batch[0].sent + self.visibility_timeout + 0.3 - time.time())
            action = "ack"
        sent, unsure = time.time(), False
        for attempt in range(5):
            try:
                if action == "ack":
                    answer = self.http.ack(self.queue, receipts, self.subscription)
                else:
                    answer = self.http.release(
                        self.queue, receipts, self.subscription, error=self.release_error
                    )
                unsure = unsure or self.http.unsure
                break
            except HttpError as exc:
                if exc.status != 503:
                    raise
                self.log.unknown_outcome(action)
                unsure = True
                if attempt == 4:
                    raise RuntimeError(f"{action} answered 503 five times: {exc}") from exc
                time.sleep(0.2)  # not the stop event: the receipts still need an answer
        received = time.time()
        error = self.release_error if action == "release" else None
        self.log.finished(
            [
                Finish(r, action, s, sent, received, error, unsure)
                for r, s in statuses(answer, receipts).items()
            ]
        )


def run_consumers(consumers: list[Consumer], log: WorkLog, timeout: float) -> float:
    """Start them, wait until every expected key is acked, a consumer's stop
    event is set (a producer failed) or ``timeout`` passes; stop them; the
    seconds it took."""
    started = time.monotonic()
    stop = consumers[0].stop_event
    for c in consumers:
        c.start()
    while not log.all_acked.wait(0.25):
        if stop.is_set() or log.errors or time.monotonic() - started > timeout:
            break
    for c in consumers:
        c.stop_event.set()
    for c in consumers:
        c.join(60)
        assert not c.is_alive(), f"{c.name} is stuck"
    return time.monotonic() - started


def drain(urls: list[str], application: str, queue: str, log: WorkLog, settle: float) -> int:
    """Reserve and ack through each of ``urls`` in turn until a round finds
    nothing through any, ``settle`` seconds (the read delay) or more after the
    start; logged as consumer ``drain``. A key a retried post stored twice
    leaves such a second copy. How many messages there were."""
    stop = threading.Event()
    consumers = [Consumer("drain", url, application, queue, log, stop, limit=100) for url in urls]
    drained = 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < settle + 60:
            found = sum(c.round() for c in consumers)
            drained += found
            if not found and time.monotonic() - started >= settle:
                break
            if not found:
                time.sleep(0.2)
    finally:
        for c in consumers:
            c.http.close()
    return drained


# ---------------------------------------------------------------- failover


class FailoverHttp(WorkQueueHttp):
    """A user's calls through a load balancer over ``urls`` (preferred first).

    A call that cannot reach its node (refused, or cut: the node died) moves
    to the next node and fails as a 503 would (outcome unknown), which a
    :class:`Consumer` counts before calling again. An ack or release answered
    503 is sent again, counted in ``log``, for up to ``patience`` seconds: a
    dead owner's partitions answer 503 until another process takes them.
    ``moves`` holds (wall-clock time, new url) per move."""

    def __init__(
        self, urls: list[str], application: str, log: WorkLog, patience: float = 30.0
    ) -> None:
        super().__init__(urls[0], application)
        self.urls, self.log, self.patience = list(urls), log, patience
        self.moves: list[tuple[float, str]] = []

    def call(self, method: str, path: str, expect: Iterable[int] = (200,), **kw: Any) -> dict:
        url = self.url
        try:
            return super().call(method, path, expect, **kw)
        except requests.ConnectionError as exc:
            if self.url == url and len(self.urls) > 1:
                self.url = self.urls[(self.urls.index(url) + 1) % len(self.urls)]
                self.moves.append((time.time(), self.url))
            raise HttpError(method, path, 503, f"{url} unreachable: {exc}") from exc

    def _receipts(self, verb: str, queue: str, receipts, subscription, **extra) -> dict:
        deadline = time.monotonic() + self.patience
        self.unsure = False
        while True:
            try:
                return super()._receipts(verb, queue, receipts, subscription, **extra)
            except HttpError as exc:
                if exc.status != 503 or time.monotonic() > deadline:
                    raise
                self.log.unknown_outcome(verb)
                self.unsure = True
                time.sleep(0.2)
