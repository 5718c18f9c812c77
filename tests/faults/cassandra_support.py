"""Helpers for the Cassandra fault tests (no fixtures here).

A fault test puts the real API in front of Cassandra nodes of its own, drives
it with concurrent HTTP clients that remember exactly which messages were
acknowledged (a 201), breaks the nodes, and reads everything back. Each
message body carries a unique ``tag``, so loss and duplication are counted by
what a user would notice, independently of the ids the service minted.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import requests

import queuey
from harness import cassandra
from harness.cassandra import CassandraCluster
from tests.support import LiveServer, cassandra_settings_for, start_live_server, wait_until

#: Client-side limit on one HTTP request; far above the service's own
#: Cassandra request timeout, so a request that "hangs" shows as slow, not lost.
HTTP_TIMEOUT = 30.0


def api_settings(
    contact_points: list[str], port: int, applications_file: Path, **extra: str
) -> dict[str, Any]:
    """Settings for an API node on our own Cassandra node(s), in the test keyspace."""
    return {
        "queuey.applications": str(applications_file),
        **cassandra_settings_for(contact_points, port),
        # Readers hide the newest write timeout's worth of messages (invariant 2).
        "queuey.read_delay": "6",
        # No schedules here: a ticker would outlive the test's storage.
        "queuey.schedules.interval": "0",
        **extra,
    }


@contextlib.contextmanager
def own_cassandra(nodes: int, base_dir: Path, ports: dict[str, int]) -> Iterator[CassandraCluster]:
    """Cassandra node(s) of the test's own in ``base_dir``, stopped even on failure."""
    try:
        yield cassandra.ensure_running(nodes, base_dir=base_dir, **ports)
    finally:
        cassandra.stop(nodes, base_dir=base_dir)


@contextlib.contextmanager
def serve(settings: dict[str, Any], application: str) -> Iterator[LiveServer]:
    """A waitress server (threads in this process) on the real app; closed at exit."""
    server = start_live_server(queuey.main({}, **settings), application)
    try:
        yield server
    finally:
        server.stop()
        server.app.registry.queuey.storage.close()


class Api:
    """The few calls the fault tests make, with this test's application headers."""

    def __init__(self, server: LiveServer) -> None:
        self.url = server.url
        self.headers = {"X-Application-Name": server.application, "ApplicationKey": server.key}
        self.http = requests.Session()

    def create_queue(self, name: str, partitions: int, consistency: str) -> None:
        response = self.http.post(
            f"{self.url}/queue",
            json={"queue_name": name, "partitions": partitions, "consistency": consistency},
            headers=self.headers,
            timeout=HTTP_TIMEOUT,
        )
        assert response.status_code == 201, response.text

    def post_batch(self, queue: str, tags: list[str]) -> requests.Response:
        body = {"messages": [{"body": {"tag": tag}} for tag in tags]}
        return self.http.post(
            f"{self.url}/queue/{queue}/batch", json=body, headers=self.headers, timeout=HTTP_TIMEOUT
        )

    def read(self, queue: str, **params: str) -> requests.Response:
        return self.http.get(
            f"{self.url}/queue/{queue}", params=params, headers=self.headers, timeout=HTTP_TIMEOUT
        )

    def read_back(self, queue: str) -> list[str]:
        """Every message's tag, oldest first, paging with ``since`` (duplicates kept)."""
        tags: list[str] = []
        since: str | None = None
        while True:
            params = {"order": "ascending", "limit": "1000"}
            if since is not None:
                params["since"] = since
            response = self.read(queue, **params)
            assert response.status_code == 200, response.text
            page = response.json()["messages"]
            if not page:
                return tags
            tags.extend(m["body"]["tag"] for m in page)
            since = page[-1]["message_id"]

    def close(self) -> None:
        self.http.close()


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One HTTP request as the client saw it."""

    started: float
    ended: float
    status: int | None  # None: no answer (connection error or client timeout)
    retry_after: str | None = None


class Traffic:
    """Concurrent clients against one queue: ``posters`` post batches of ``batch``
    tagged messages, ``readers`` read the newest page, until :meth:`stop`. Each
    client waits ``pause`` seconds after a success (a steady load rather than
    the most this machine can do) and 0.2 s after a failure, as a polite
    client does while the store is down.

    Thread-safe record of what was sent, what was acknowledged and every
    request's outcome; figures come from :meth:`figures`.
    """

    def __init__(
        self,
        server: LiveServer,
        queue: str,
        *,
        posters: int,
        batch: int,
        readers: int = 0,
        pause: float = 0.0,
    ) -> None:
        self.server = server
        self.queue = queue
        self.batch = batch
        self.pause = pause
        self.sent = 0
        self.acked: set[str] = set()
        self.unanswered: set[str] = set()  # sent, never acknowledged: may or may not exist
        self.posts: list[Outcome] = []
        self.reads: list[Outcome] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._guard, args=(self._post_loop, i), daemon=True)
            for i in range(posters)
        ] + [
            threading.Thread(target=self._guard, args=(self._read_loop, i), daemon=True)
            for i in range(readers)
        ]

    def start(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=HTTP_TIMEOUT + 10)
        assert not any(t.is_alive() for t in self._threads), "a client thread hung"
        assert not self._errors, f"a client thread crashed: {self._errors!r}"

    def _guard(self, loop, index: int) -> None:
        try:
            loop(index)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self._errors.append(exc)

    def _call(self, fn, *args: Any) -> tuple[Outcome, requests.Response | None]:
        started = time.monotonic()
        try:
            response = fn(*args)
        except requests.RequestException:
            return Outcome(started, time.monotonic(), None), None
        outcome = Outcome(
            started, time.monotonic(), response.status_code, response.headers.get("Retry-After")
        )
        return outcome, response

    def _post_loop(self, client: int) -> None:
        api = Api(self.server)
        seq = 0
        try:
            while not self._stop.is_set():
                tags = [f"{client}-{seq + i}" for i in range(self.batch)]
                seq += self.batch
                with self._lock:
                    self.sent += len(tags)
                outcome, _ = self._call(api.post_batch, self.queue, tags)
                with self._lock:
                    self.posts.append(outcome)
                    (self.acked if outcome.status == 201 else self.unanswered).update(tags)
                self._stop.wait(self.pause if outcome.status == 201 else 0.2)
        finally:
            api.close()

    def _read_loop(self, _: int) -> None:
        api = Api(self.server)
        try:
            while not self._stop.is_set():
                outcome, _response = self._call(api.read, self.queue)
                with self._lock:
                    self.reads.append(outcome)
                self._stop.wait(self.pause if outcome.status == 200 else 0.2)
        finally:
            api.close()

    def wait_acked(self, count: int, timeout: float) -> None:
        """Poll until at least ``count`` messages were acknowledged."""
        wait_until(
            lambda: len(self.acked) >= count,
            timeout,
            lambda: (
                f"{count} acknowledged messages (got {len(self.acked)}); "
                f"post statuses {self.statuses(self.posts)}"
            ),
            interval=0.1,
        )

    def wait_recovered(self, since: float, timeout: float) -> float:
        """Poll until a post started after ``since`` was acknowledged; its end time."""

        def first_ack() -> float | None:
            with self._lock:
                done = [o.ended for o in self.posts if o.started > since and o.status == 201]
            return min(done, default=None)

        return wait_until(
            first_ack,
            timeout,
            lambda: (
                f"a post acknowledged after the nodes' return; "
                f"post statuses {self.statuses(self.posts)}"
            ),
            interval=0.1,
        )

    @property
    def last_ack(self) -> float:
        """When the last acknowledged post ended (monotonic)."""
        with self._lock:
            return max((o.ended for o in self.posts if o.status == 201), default=0.0)

    @staticmethod
    def statuses(outcomes: list[Outcome]) -> dict[str, int]:
        return dict(collections.Counter(str(o.status) for o in outcomes))

    def outcomes_between(self, start: float, end: float) -> list[Outcome]:
        """Requests (posts and reads) started in [start, end)."""
        with self._lock:
            return [o for o in self.posts + self.reads if start <= o.started < end]


def unavailable_seconds(outcomes: list[Outcome]) -> float:
    """From the first failed post to the first success after the last failure
    (0 when nothing failed): how long a user could not post."""
    ordered = sorted(outcomes, key=lambda o: o.started)
    failed = [o for o in ordered if o.status != 201]
    if not failed:
        return 0.0
    last = failed[-1].started
    after = [o.ended for o in ordered if o.status == 201 and o.started > last]
    end = after[0] if after else max(o.ended for o in ordered)
    return end - failed[0].started


@dataclasses.dataclass(frozen=True)
class CrashRun:
    """What :func:`crash_under_load` saw."""

    traffic: Traffic
    tags: list[str]  # every message read back afterwards, oldest first
    acked_before_kill: int
    acked_per_s: float  # acknowledged messages per second before the crash
    during: list[Outcome]  # requests started between the crash and the nodes' return
    restart_s: float
    resumed_s: float  # from the nodes' return to the first acknowledged post


def crash_under_load(
    server: LiveServer,
    queue: str,
    *,
    kill: Callable[[], None],
    restart: Callable[[], None],
    load_s: float,
    outage_s: float = 0.0,
    readers: int = 0,
    pause: float = 0.0,
    deadline: float = 180.0,
) -> CrashRun:
    """Four clients post batches of 20 to a new ``strong`` queue (``readers``
    read it) for ``load_s`` seconds; then ``kill``; the nodes stay down
    ``outage_s`` seconds while the clients go on; ``restart``; the clients go
    on until a post is acknowledged again. Then everything is read back, once
    the newest acknowledged post is older than the service's read delay."""
    api = Api(server)
    api.create_queue(queue, partitions=4, consistency="strong")
    traffic = Traffic(server, queue, posters=4, batch=20, readers=readers, pause=pause).start()
    try:
        started = time.monotonic()
        traffic.wait_acked(1, timeout=deadline)
        time.sleep(max(0.0, load_s - (time.monotonic() - started)))  # the load, by design
        acked_before = len(traffic.acked)
        acked_per_s = acked_before / (time.monotonic() - started)
        kill()
        killed = time.monotonic()
        time.sleep(outage_s)  # how long the nodes stay down, by design
        restart()
        back = time.monotonic()
        resumed = traffic.wait_recovered(back, timeout=deadline)
    finally:
        traffic.stop()
    # Readers hide the newest read_delay seconds (invariant 2); wait them out.
    read_delay = server.app.registry.queuey.settings.read_delay
    time.sleep(max(0.0, traffic.last_ack + read_delay + 0.5 - time.monotonic()))
    try:
        tags = api.read_back(queue)
    finally:
        api.close()
    return CrashRun(
        traffic=traffic,
        tags=tags,
        acked_before_kill=acked_before,
        acked_per_s=acked_per_s,
        during=traffic.outcomes_between(killed, back),
        restart_s=back - killed - outage_s,
        resumed_s=resumed - back,
    )


@dataclasses.dataclass(frozen=True)
class Figures:
    """What a fault test measured; printed and put into assertion messages."""

    sent: int
    acked: int
    read_back: int
    lost: int
    duplicates: int
    failed_posts: int
    unavailable_s: float
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, run: CrashRun, **extra: Any) -> Figures:
        traffic, tags = run.traffic, run.tags
        unique = set(tags)
        return cls(
            sent=traffic.sent,
            acked=len(traffic.acked),
            read_back=len(tags),
            lost=len(traffic.acked - unique),
            duplicates=len(tags) - len(unique),
            failed_posts=sum(o.status != 201 for o in traffic.posts),
            unavailable_s=round(unavailable_seconds(traffic.posts), 1),
            extra={
                "landed_unacked": len(traffic.unanswered & unique),
                "restart_s": round(run.restart_s, 1),
                "resumed_after_restart_s": round(run.resumed_s, 1),
                **extra,
            },
        )

    def __str__(self) -> str:
        fields = dataclasses.asdict(self)
        fields.update(fields.pop("extra"))
        return " ".join(f"{key}={value}" for key, value in fields.items())

    def show(self, title: str) -> Figures:
        print(f"\n[{title}] {self}")
        return self
