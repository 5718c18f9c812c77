"""Helpers of the storage-unreachable fault tests (no fixtures here).

:class:`OwnCassandra` is a Cassandra node of the test's own, on ports no other
test uses, that the test may start late, ``kill -9`` and start again; the
shared node is never touched. :class:`Prober` posts and checks health over
plain HTTP (no client library, no retries), so every answer the service gives
is counted as it was given.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import requests

from harness import cassandra, process
from tests.support import KEY

#: Ports of this module's own node (the shared node is 19042/17000).
NATIVE_PORT, STORAGE_PORT, JMX_PORT = 19642, 17600, 17699
PORTS = {"port": NATIVE_PORT, "storage_port": STORAGE_PORT, "jmx_port": JMX_PORT}
#: A request the service cannot answer within this long counts as a hang.
REQUEST_TIMEOUT = 30.0


class OwnCassandra:
    """A single Cassandra node under ``base_dir``, started and killed on demand."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        (self.node,) = cassandra.cluster_spec(1, base_dir=base_dir, **PORTS).nodes

    def start(self) -> float:
        """Start the node (if not running) and wait until it answers CQL; seconds taken."""
        started = time.monotonic()
        cassandra.ensure_running(1, base_dir=self.base_dir, **PORTS)
        return time.monotonic() - started

    @property
    def pid(self) -> int | None:
        return process.running_pid(self.node.pidfile)

    def kill(self) -> None:
        """``kill -9`` the node's JVM (only the pid our pidfile recorded)."""
        assert cassandra.kill_node(self.node), "the node is not running"

    def stop(self) -> None:
        cassandra.stop(1, base_dir=self.base_dir)


def auth(application: str) -> dict[str, str]:
    return {"X-Application-Name": application, "ApplicationKey": KEY}


@dataclass
class Answers:
    """What the service answered, counted by status, and what it acknowledged."""

    statuses: Counter = field(default_factory=Counter)
    sent: list[str] = field(default_factory=list)
    acked: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # 503 to a post: outcome unknown
    without_retry_after: int = 0
    first_failure: float | None = None
    first_success_after_failure: float | None = None

    def record(self, response: requests.Response) -> None:
        self.statuses[response.status_code] += 1
        if response.status_code == 503 and "Retry-After" not in response.headers:
            self.without_retry_after += 1

    @property
    def unavailable_seconds(self) -> float | None:
        if self.first_failure is None or self.first_success_after_failure is None:
            return None
        return self.first_success_after_failure - self.first_failure


class Prober:
    """Talks to one API node over HTTP; a thread of it posts until stopped."""

    def __init__(self, url: str, application: str, queue: str) -> None:
        self.url = url
        self.application = application
        self.queue = queue
        self.answers = Answers()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- single calls -------------------------------------------------------------
    def heartbeat(self) -> requests.Response:
        response = requests.get(self.url + "/__heartbeat__", timeout=REQUEST_TIMEOUT)
        self.answers.record(response)
        return response

    def create_queue(self) -> requests.Response:
        response = requests.post(
            self.url + "/queue",
            json={"queue_name": self.queue, "partitions": 2},
            headers=auth(self.application),
            timeout=REQUEST_TIMEOUT,
        )
        self.answers.record(response)
        return response

    def post(self) -> requests.Response:
        key = uuid.uuid4().hex
        self.answers.sent.append(key)
        response = requests.post(
            f"{self.url}/queue/{self.queue}",
            json={"key": key},
            headers=auth(self.application),
            timeout=REQUEST_TIMEOUT,
        )
        self.answers.record(response)
        now = time.monotonic()
        if response.status_code == 201:
            self.answers.acked.append(key)
            if self.answers.first_failure is not None:
                self.answers.first_success_after_failure = (
                    self.answers.first_success_after_failure or now
                )
        else:
            if response.status_code == 503:
                self.answers.unknown.append(key)
            if self.answers.first_failure is None:
                self.answers.first_failure = now
        return response

    def read(self) -> requests.Response:
        response = requests.get(
            f"{self.url}/queue/{self.queue}",
            params={"limit": 1000, "order": "ascending"},
            headers=auth(self.application),
            timeout=REQUEST_TIMEOUT,
        )
        self.answers.record(response)
        return response

    def read_back(self) -> Counter:
        """Every message key stored in the queue, with how often it is there."""
        found: Counter = Counter()
        since = None
        while True:
            params: dict = {"limit": 1000, "order": "ascending"}
            if since is not None:
                params["since"] = since
            response = requests.get(
                f"{self.url}/queue/{self.queue}",
                params=params,
                headers=auth(self.application),
                timeout=REQUEST_TIMEOUT,
            )
            response.raise_for_status()
            messages = response.json()["messages"]
            found.update(m["body"]["key"] for m in messages)
            if len(messages) < 1000:
                return found
            since = messages[-1]["message_id"]

    # -- a posting thread -----------------------------------------------------------
    def start_posting(self, interval: float = 0.05) -> None:
        def run() -> None:
            while not self._stop.is_set():
                try:
                    self.post()
                except requests.RequestException as exc:
                    self.answers.statuses[f"no answer: {type(exc).__name__}"] += 1
                self._stop.wait(interval)

        self._thread = threading.Thread(target=run, name="storage-fault-poster", daemon=True)
        self._thread.start()

    def stop_posting(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(REQUEST_TIMEOUT + 5)


def figures(answers: Answers, found: Counter, extra: str = "") -> str:
    """One line of the figures a fault test prints and puts in its assertions."""
    acked = set(answers.acked)
    lost = sorted(acked - set(found))
    duplicates = sum(count - 1 for count in found.values() if count > 1)
    unavailable = answers.unavailable_seconds
    seconds = "n/a" if unavailable is None else f"{unavailable:.1f}"
    statuses = dict(sorted(answers.statuses.items(), key=lambda kv: str(kv[0])))
    return (
        f"sent={len(answers.sent)} acknowledged={len(acked)} read_back={sum(found.values())} "
        f"lost={len(lost)} duplicates={duplicates} "
        f"outcome_unknown_503={len(answers.unknown)} "
        f"stored_though_503={len(set(answers.unknown) & set(found))} "
        f"seconds_unavailable={seconds} "
        f"statuses={statuses} 503_without_retry_after={answers.without_retry_after}"
        + (f" {extra}" if extra else "")
    )
