"""The API node's view of ZooKeeper, for the heartbeat.

The API itself does not coordinate through ZooKeeper (consumers do, in
``queuey.client``), but operators want one health check that says whether the
coordination service the fleet depends on answers.
"""

from __future__ import annotations

import logging
import threading

from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

log = logging.getLogger(__name__)


class Coordination:
    def __init__(self, hosts: str, timeout: float = 2.0) -> None:
        self.hosts = hosts
        self.timeout = timeout
        self._client: KazooClient | None = None
        self._lock = threading.Lock()

    def check(self) -> str:
        """ "ok" when connected to ZooKeeper, else what is wrong."""
        with self._lock:
            if self._client is None:
                client = KazooClient(
                    hosts=self.hosts,
                    timeout=self.timeout,
                    # kazoo's default backoff between reconnections grows to an hour, so
                    # after a long outage the check would report ZooKeeper down long after
                    # it returned; try again at least every second instead.
                    connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
                )
                try:
                    client.start(timeout=self.timeout)
                except KazooTimeoutError:
                    client.stop()
                    client.close()
                    return "unavailable: no ZooKeeper answered"
                self._client = client
            state = self._client.state
        return "ok" if state == KazooState.CONNECTED else f"unavailable: {state.lower()}"

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.stop()
                self._client.close()
                self._client = None
