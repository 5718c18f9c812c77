"""One live member of a consumer group: its ZooKeeper session and member node.

A member is live while its ephemeral node ``<group>/members/<member-id>``
exists, that is while its ZooKeeper session does.

A member whose connection to ZooKeeper is suspended pauses at once: it hands
out no more work and commits nothing. It also pauses when ZooKeeper has not
answered it for two thirds of ``session_timeout`` (a heartbeat thread asks
every sixth), even before kazoo notices: ZooKeeper expires a session only a
whole ``session_timeout`` after it last heard from the member, so the member
has stopped before its owner nodes vanish and another member may take them.
After a session is lost the member builds a new ZooKeeper client (a new
*generation*) and joins again, with nothing owned.

Every one of those times is the session timeout ZooKeeper *granted*, not the
one asked for: the server clamps the request between its
``minSessionTimeout`` and ``maxSessionTimeout`` (by default 2 and 20 ticks),
so a member asking for more than the maximum would otherwise go on working
after its session expired. The granted value comes with every (re)connect
and is recorded each time (:attr:`GroupMember.negotiated_session_timeout`).

:class:`GroupMember` holds that client, the member node and those rules; the
consumer group (:class:`queuey.client.consumergroup.ConsumerGroup`) adds what the member
owns. kazoo's listener must not block, so state changes are only recorded
and queued as ``("state", (generation, state))`` events, which the group's
coordinator thread hands to :meth:`GroupMember._handle_state`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import socket
import threading
import time
from dataclasses import KW_ONLY, dataclass
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError
from kazoo.protocol.serialization import Connect
from kazoo.retry import KazooRetry

log = logging.getLogger(__name__)


@dataclass(eq=False, repr=False)
class GroupMember:
    """The ZooKeeper client, session and member node of one member of ``group``.

    ``base`` is the group's node. Subclasses create their nodes and watches
    in :meth:`_on_connect`, called for every new session, forget what they
    owned in :meth:`_forget_session`, and read the events queued in ``_events``.
    """

    hosts: str
    group: str
    base: str
    member_id: str
    _: KW_ONLY
    session_timeout: float
    connect_timeout: float
    application: str | None = None

    def __post_init__(self) -> None:
        self.zk: KazooClient | None = None  # type: ignore[assignment]
        self._generation = 0
        self._session: int | None = None  # session id the current leases belong to
        self._joined = False  # our member node exists in this session
        self._running = threading.Event()  # set while connected and not suspended
        self._stopping = threading.Event()
        self._events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._changed = threading.Condition()
        # The session is alive for at least session_timeout after the server last
        # heard from us; we stop trusting it well before that (see _heartbeat).
        self._confirmed = 0.0
        self._heartbeater: threading.Thread | None = None
        #: The session timeout ZooKeeper granted at the last (re)connect (None before).
        self.negotiated_session_timeout: float | None = None

    @property
    def effective_session_timeout(self) -> float:
        """The granted session timeout, or the requested one before any was granted."""
        return self.negotiated_session_timeout or self.session_timeout

    @property
    def pause_after(self) -> float:
        """Seconds without an answer from ZooKeeper after which the member pauses."""
        return self.effective_session_timeout * 2 / 3

    def _granted(self, generation: int, seconds: float) -> None:
        """Record the session timeout of a (re)connect; :attr:`pause_after` follows it."""
        if generation != self._generation or seconds <= 0:
            return
        if seconds != self.negotiated_session_timeout and seconds != self.session_timeout:
            log.warning(
                "group %s: asked for a %.1fs session, ZooKeeper granted %.1fs",
                self.group,
                self.session_timeout,
                seconds,
            )
        self.negotiated_session_timeout = seconds

    def _record_negotiation(self, zk: KazooClient, generation: int) -> None:
        """Have ``zk`` report the session timeout the server grants at each connect.

        kazoo reads it from the server's connect answer and paces its own pings
        by it, but keeps it to itself (``KazooClient._session_timeout`` stays
        the requested value, kazoo 2.10-2.11). The only place it passes through
        is the connection's ``_invoke``, which returns that answer; wrapping it
        records the value before kazoo reports the connection.
        """
        connection = getattr(zk, "_connection", None)
        invoke = getattr(connection, "_invoke", None)
        if invoke is None:
            log.warning(
                "group %s: cannot learn the granted session timeout from this kazoo; "
                "trusting the requested %.1fs",
                self.group,
                self.session_timeout,
            )
            return

        def recording(timeout: float, request: Any, xid: int | None = None) -> Any:
            result = invoke(timeout, request, xid=xid)
            if isinstance(request, Connect) and isinstance(result, tuple):
                granted = getattr(result[0], "time_out", 0)
                self._granted(generation, granted / 1000.0)
            return result

        connection._invoke = recording

    def _start_heartbeat(self) -> None:
        self._heartbeater = threading.Thread(
            target=self._heartbeat, name=f"queuey-heartbeat-{self.group}", daemon=True
        )
        self._heartbeater.start()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def wait_for_change(self, timeout: float) -> None:
        """Sleep up to ``timeout`` seconds, waking early when ownership changes."""
        with self._changed:
            self._changed.wait(timeout)

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _may_process(self, session: int) -> bool:
        return (
            self._running.is_set()
            and self._session == session
            and not self._stopping.is_set()
            and time.monotonic() - self._confirmed < self.pause_after
        )

    def _on_connect(self, zk: KazooClient) -> None:
        """Set up a new session's nodes and watches (the group's part)."""
        raise NotImplementedError

    def _forget_session(self) -> None:
        """Drop everything owned under a session that is gone (the group's part)."""
        raise NotImplementedError

    @property
    def _member_path(self) -> str:
        return f"{self.base}/members/{self.member_id}"

    def _join(self) -> None:
        """Create our member node (replacing one left by an earlier session of ours)."""
        zk = self.zk
        data = json.dumps(
            {
                "member": self.member_id,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "started": time.time(),
                **({"application": self.application} if self.application else {}),
            }
        ).encode()
        try:
            zk.create(self._member_path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            _, stat = zk.get(self._member_path)
            if stat.ephemeralOwner != self._session:
                # Our own node from an earlier session of this process.
                zk.delete(self._member_path)
                zk.create(self._member_path, data, ephemeral=True, makepath=True)
        self._joined = True
        log.info("group %s: joined as %s", self.group, self.member_id)

    def _connect(self, timeout: float) -> None:
        """Build a new ZooKeeper client and session (used at start and after LOST)."""
        self._generation += 1
        generation = self._generation
        zk = KazooClient(
            hosts=self.hosts,
            timeout=self.session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
            command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0),
        )
        zk.add_listener(lambda state: self._on_state(generation, state))
        self._record_negotiation(zk, generation)
        try:
            zk.start(timeout=timeout)
        except Exception:
            self._close(zk)
            raise
        old, self.zk = self.zk, zk
        if old is not None:
            self._close(old)
        self._session = zk.client_id[0]
        self._confirmed = time.monotonic()
        self._joined = False
        self._on_connect(zk)
        self._running.set()
        log.info(
            "group %s: member %s connected (session %#x)", self.group, self.member_id, self._session
        )

    def _handle_state(self, generation: int, state: str) -> None:
        """React to a state event on the coordinator thread: rejoin, or resume."""
        if generation != self._generation:
            return
        zk = self.zk
        if state == KazooState.LOST:
            self._forget_session()
            self._rebuild()
        elif state == KazooState.CONNECTED:
            if zk.client_id and zk.client_id[0] != self._session:
                # kazoo made a new session by itself: ours is gone with its ephemerals
                self._forget_session()
                self._rebuild()
            elif not self._running.is_set():
                log.info("group %s: reconnected within the session; resuming", self.group)
                self._running.set()
                self._notify()

    def _rebuild(self) -> None:
        """Connect again with a new session, retrying until it works or the member stops."""
        delay = 0.2
        while not self._stopping.is_set():
            try:
                self._connect(self.connect_timeout)
                log.info("group %s: rejoining with a new session", self.group)
                return
            except Exception as exc:  # noqa: BLE001 - keep trying until told to stop
                log.warning(
                    "group %s: reconnecting failed (%s); retrying in %.1fs", self.group, exc, delay
                )
                self._stopping.wait(delay)
                delay = min(delay * 2, 5.0)

    @staticmethod
    def _close(zk: KazooClient) -> None:
        with contextlib.suppress(Exception):
            zk.stop()
        with contextlib.suppress(Exception):
            zk.close()

    def _on_state(self, generation: int, state: str) -> None:
        """kazoo's listener: must not block, so it only flips flags and queues."""
        if generation != self._generation or self._stopping.is_set():
            return
        if state == KazooState.SUSPENDED:
            self._running.clear()
            log.warning("group %s: ZooKeeper connection suspended; pausing", self.group)
        elif state == KazooState.LOST:
            self._running.clear()
            log.warning("group %s: ZooKeeper session lost", self.group)
        elif state == KazooState.CONNECTED:
            self._confirmed = time.monotonic()  # the server just accepted the session
        self._events.put(("state", (generation, state)))
        self._notify()

    def _heartbeat(self) -> None:
        """Confirm the session is alive every sixth of the (granted) session timeout.

        kazoo notices a dead connection only by an unanswered *ping*, and every
        request counts as a ping, so a member busy with ZooKeeper could go on
        long after its session expired. Processing is therefore allowed only
        within two thirds of the session timeout after the send time of the
        last request ZooKeeper answered: the server, which heard that request
        after we sent it, cannot have expired the session yet. One request at
        a time, so this never hides a dead connection from kazoo for long.
        """
        while not self._stopping.wait(self.effective_session_timeout / 6):
            zk, generation = self.zk, self._generation
            if zk is None or not zk.connected:
                continue
            sent = time.monotonic()
            try:
                zk.exists_async(self.base).get(timeout=self.effective_session_timeout)
            except Exception:  # noqa: BLE001 - any failure just leaves the session unconfirmed
                continue
            if generation == self._generation:
                self._confirmed = max(self._confirmed, sent)
