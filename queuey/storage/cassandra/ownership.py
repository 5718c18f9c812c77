"""Who owns a subscription's queue partition: terms, takeovers and hand-offs.

An API process *owns* ``(incarnation, subscription, queue partition)`` while
its row in ``work_owners`` names it: the row is taken with a lightweight
transaction (``IF owner = null``) and written with a TTL of one term
(``queuey.cassandra.owner_term``), then renewed (``IF owner = me``) every
quarter term. The owner serves the partition from memory only while its own
clock says the term runs: the deadline counts from the moment the renewal
was *sent*, less a margin, so it ends before Cassandra lets the row expire
and before any other process can take it. Taking over draws a new epoch
(the wall-clock microsecond: terms are seconds apart), reads the state back
(:mod:`.statelog`) and writes it as the new epoch's snapshot before the
first answer, so nothing the previous owner acknowledged is lost and nothing
it wrote late is applied.

Which process owns what: a call that needs a partition nobody owns takes
it at once, so a dead owner's partitions move as soon as its term ends. The
live processes (rows in ``work_members``, heartbeats with a TTL) rank every
partition by rendezvous hashing; a process that finds a partition it ranks
first owned by another asks the owner to hand it over (the owner agrees once
it has held it for :data:`SETTLE` seconds), so ownership spreads evenly over
the processes that serve the subscription. An owner that has not used a
partition for :data:`IDLE` seconds lets it go.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from queuey.errors import StorageUnavailable
from queuey.storage.cassandra.leases import LeaseState
from queuey.storage.cassandra.session import P_WORK
from queuey.storage.cassandra.settings import CassandraSettings
from queuey.storage.cassandra.statelog import StateLog
from queuey.storage.cassandra.statements import Connection
from queuey.storage.cassandra.turns import Turns

log = logging.getLogger(__name__)

Key = tuple[str, str, int]

#: Seconds an owner keeps a partition before handing it to a better-ranked process.
SETTLE = 5.0
#: Seconds without a call after which an owner lets a partition go.
IDLE = 300.0
#: Seconds a lookup of another process's ownership is trusted.
OWNER_CACHE = 2.0
#: Seconds a lookup that found no owner is trusted.
UNOWNED_CACHE = 0.25


class NotOwner(StorageUnavailable):
    """This process does not (or no longer) own the partition."""


@dataclass
class Held:
    """A partition this process owns, and its state in memory."""

    key: Key
    epoch: int
    expires: float  # time.monotonic() deadline of the term, less the margin
    state: LeaseState
    seq: int = 0
    since_snapshot: int = 0
    acquired: float = 0.0
    used: float = 0.0

    def valid(self) -> bool:
        return time.monotonic() < self.expires


class Stamps:
    """Write timestamps: wall-clock microseconds, increasing within the process."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, time.time_ns() // 1000)
            return self._last


def rank(member: str, key: Key) -> bytes:
    return hashlib.blake2b(f"{member}|{key[0]}|{key[1]}|{key[2]}".encode(), digest_size=8).digest()


class Ownership:
    """This process's owned partitions, and the lookups and terms behind them."""

    def __init__(self, config: CassandraSettings, turns: Turns, lease_ttl: int) -> None:
        self.config = config
        self.turns = turns
        self.lease_ttl = lease_ttl
        self.member = uuid.uuid4().hex
        self.address = ""
        self.term = config.owner_term
        self.ttl = math.ceil(self.term)
        self.margin = max(0.5, self.term / 10)
        self.timeout = config.request_timeout
        self.stamp = Stamps()
        self.log: StateLog | None = None
        self._session = None
        self._held: dict[Key, Held] = {}
        self._lock = threading.Lock()
        self._taking = Turns()
        self._owners: dict[Key, tuple[str | None, str | None, float]] = {}
        self._wanted: dict[Key, str] = {}
        #: Asks the owner at an address to hand a partition over (set by the
        #: work queue, which holds the peer client); answers whether it did.
        self.ask_handoff: Callable[[str, Key], bool] | None = None
        self._members: list[str] = []
        self.peers: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._asking: threading.Thread | None = None

    # -- start and stop -------------------------------------------------------------
    def bind(self, c: Connection, address: str) -> None:
        """Prepare the statements on ``c`` and start renewing (once)."""
        if self._session is not None:
            return
        ks = self.config.keyspace
        p = c.session.prepare
        key = "incarnation = ? AND subscription = ? AND partition = ?"
        self._take = p(
            f"UPDATE {ks}.work_owners USING TTL ? SET owner = ?, address = ?, epoch = ? "
            f"WHERE {key} IF owner = null"
        )
        self._renew = p(
            f"UPDATE {ks}.work_owners USING TTL ? SET owner = ?, address = ?, epoch = ? "
            f"WHERE {key} IF owner = ?"
        )
        self._release = p(f"DELETE FROM {ks}.work_owners WHERE {key} IF owner = ?")
        self._read = p(f"SELECT owner, address FROM {ks}.work_owners WHERE {key}")
        self._beat = p(
            f"INSERT INTO {ks}.work_members (shard, member, address) VALUES (0, ?, ?) USING TTL ?"
        )
        self._list = p(f"SELECT member, address FROM {ks}.work_members WHERE shard = 0")
        self._leave = p(f"DELETE FROM {ks}.work_members WHERE shard = 0 AND member = ?")
        self.log = StateLog(c.session, ks, self.lease_ttl, self.timeout)
        self.address = address
        self._session = c.session
        self._heartbeat()
        self._thread = threading.Thread(target=self._maintain, name="queuey-owners", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop renewing and let every partition go, so others take over at once."""
        self._stop.set()
        if self._session is None:
            return
        try:
            self._session.execute(self._leave, (self.member,), timeout=self.timeout)
        except Exception:  # noqa: BLE001 - the row expires anyway
            log.debug("leaving the members failed", exc_info=True)
        with self._lock:
            keys = list(self._held)
        for key in keys:
            try:
                self.release(key)
            except Exception:  # noqa: BLE001 - best effort on the way out
                log.debug("release of %s failed on close", key, exc_info=True)

    # -- what this process holds ----------------------------------------------------
    def held(self, key: Key) -> Held | None:
        with self._lock:
            h = self._held.get(key)
        if h is None or not h.valid():
            return None
        h.used = time.monotonic()
        return h

    def drop(self, key: Key, epoch: int) -> None:
        """Forget a partition whose state may no longer match Cassandra (a
        write failed). Its row stays: the next call here takes it again with
        a new epoch, which reads back whatever landed. (Deleting the row here
        could race that retake and leave it held without a row.)"""
        with self._lock:
            h = self._held.get(key)
            if h is None or h.epoch != epoch:
                return
            del self._held[key]
        self._owners.pop(key, None)

    def release(self, key: Key) -> None:
        """Let a partition go between two calls (its state is already
        durable): no call on it is in flight (its turn) and no take of it
        runs (its taking turn) while the row is deleted, so this process
        cannot take it back in between and hold it without a row."""
        self._taking.take(key, 4 * self.timeout)
        try:
            self.turns.take(key, 4 * self.timeout)
            try:
                with self._lock:
                    h = self._held.pop(key, None)
                self._owners.pop(key, None)
                if h is not None:
                    self._delete_row(key)
            finally:
                self.turns.give_back([key])
        finally:
            self._taking.give_back([key])

    def _delete_row(self, key: Key) -> None:
        try:
            self._session.execute(
                self._release, (*key, self.member), execution_profile=P_WORK, timeout=self.timeout
            )
        except Exception:  # noqa: BLE001 - the row expires with its term anyway
            log.info("cassandra: could not free owner row %s", key, exc_info=True)

    # -- routing ------------------------------------------------------------------
    def route(
        self, queue_incarnation: str, sub: str, partitions: Sequence[int]
    ) -> tuple[list[int], dict[str, list[int]]]:
        """Split ``partitions`` into those this process owns (taking the
        unowned ones now) and those other processes own, by address."""
        mine: list[int] = []
        remote: dict[str, list[int]] = {}
        unknown = []
        for p in partitions:
            key = (queue_incarnation, sub, p)
            if self.held(key) is not None:
                mine.append(p)
            else:
                unknown.append(key)
        for key, (owner, address) in self._lookup(unknown).items():
            if owner is not None and owner != self.member and address:
                remote.setdefault(address, []).append(key[2])
                if self._first(key) and len(self._wanted) < 10_000:
                    self._wanted[key] = address
                continue
            taken = self.take(key)
            if taken is None:
                mine.append(key[2])
            elif taken[1]:
                remote.setdefault(taken[1], []).append(key[2])
        return mine, remote

    def forget(self, incarnation: str, sub: str, partitions: Sequence[int]) -> None:
        """Drop cached lookups (a forwarded call found no owner there)."""
        for p in partitions:
            self._owners.pop((incarnation, sub, p), None)

    def _lookup(self, keys: list[Key]) -> dict[Key, tuple[str | None, str | None]]:
        now = time.monotonic()
        found: dict[Key, tuple[str | None, str | None]] = {}
        reads = []
        for key in keys:
            cached = self._owners.get(key)
            if cached is not None:
                owner, address, at = cached
                if now - at < (OWNER_CACHE if owner else UNOWNED_CACHE):
                    found[key] = (owner, address)
                    continue
            reads.append(key)
        futures = [
            self._session.execute_async(
                self._read, key, execution_profile=P_WORK, timeout=self.timeout
            )
            for key in reads
        ]
        for key, future in zip(reads, futures, strict=True):
            row = future.result().one()
            owner, address = (row[0], row[1]) if row is not None else (None, None)
            if len(self._owners) > 100_000:
                self._owners.clear()
            self._owners[key] = (owner, address, now)
            found[key] = (owner, address)
        return found

    def live_members(self) -> int:
        """The processes whose heartbeat row lives, this one included, as this
        process's last heartbeat listed them (every quarter term): a new
        process counts here within a quarter term, one that left cleanly too,
        one that died within its row's TTL (three terms) and a quarter term."""
        return len(set(self._members) | {self.member})

    def _first(self, key: Key) -> bool:
        members = set(self._members) | {self.member}
        return max(members, key=lambda m: rank(m, key)) == self.member

    # -- taking over --------------------------------------------------------------
    def take(self, key: Key) -> tuple[str, str] | None:
        """Take ``key`` over: None once this process holds it, else the
        ``(owner, address)`` that won it."""
        self._taking.take(key, 4 * self.timeout)
        try:
            if self.held(key) is not None:
                return None
            epoch = self.stamp()
            sent = time.monotonic()
            row = self._session.execute(
                self._take,
                (self.ttl, self.member, self.address, epoch, *key),
                execution_profile=P_WORK,
                timeout=self.timeout,
            ).one()
            if not row[0] and row[1] == self.member:
                # Our own row, whose state we dropped: take it again, anew.
                row = self._session.execute(
                    self._renew,
                    (self.ttl, self.member, self.address, epoch, *key, self.member),
                    execution_profile=P_WORK,
                    timeout=self.timeout,
                ).one()
            if not row[0]:
                owner = row[1]
                self._owners.pop(key, None)
                if owner is None:
                    raise NotOwner("cassandra: partition ownership changed, retry")
                read = self._lookup([key])[key]
                return (read[0] or "", read[1] or "")
            try:
                loaded = self.log.load(key)
                self.log.write_snapshot(key, loaded.state, epoch, 0, self.stamp()).result()
            except BaseException:
                self._delete_row(key)
                raise
            held = Held(key, epoch, sent + self.term - self.margin, loaded.state)
            held.acquired = held.used = time.monotonic()
            with self._lock:
                self._held[key] = held
            log.debug("cassandra: took %s at epoch %d", key, epoch)
            return None
        finally:
            self._taking.give_back([key])

    # -- the maintenance thread -------------------------------------------------------
    def _maintain(self) -> None:
        while not self._stop.wait(self.term / 4):
            try:
                self._heartbeat()
                self._renew_all()
                self._ask_in_background()
            except Exception:  # noqa: BLE001 - the next round tries again
                log.warning("cassandra: renewing owned partitions failed", exc_info=True)

    def hand_over(self, key: Key) -> bool:
        """Release ``key`` for a better-ranked process that asks for it, if it
        has been held here for :data:`SETTLE` seconds."""
        h = self.held(key)
        if h is None or time.monotonic() - h.acquired < SETTLE:
            return False
        self.release(key)
        return True

    def _ask_in_background(self) -> None:
        """Ask for hand-overs on a thread of their own, so a peer that does
        not answer never delays this process's renewals and heartbeats."""
        if self._asking is not None and self._asking.is_alive():
            return
        self._asking = threading.Thread(
            target=self._ask_for_wanted, name="queuey-handoffs", daemon=True
        )
        self._asking.start()

    def _ask_for_wanted(self) -> None:
        """Ask the owners of partitions this process ranks first to hand them
        over, and take those they let go."""
        wanted, self._wanted = self._wanted, {}
        for key, address in wanted.items():
            if self.ask_handoff is None or not self._first(key):
                continue
            try:
                if self.ask_handoff(address, key):
                    self._owners.pop(key, None)
                    self.take(key)
            except Exception:  # noqa: BLE001 - asked again when next wanted
                log.debug("hand-over of %s failed", key, exc_info=True)

    def _heartbeat(self) -> None:
        s = self._session
        s.execute(
            self._beat,
            (self.member, self.address, 3 * self.ttl),
            execution_profile=P_WORK,
            timeout=self.timeout,
        )
        rows = list(s.execute(self._list, timeout=self.timeout))
        self._members = [row[0] for row in rows]
        #: The other live processes' peer addresses.
        self.peers = [row[1] for row in rows if row[0] != self.member and row[1]]

    def _renew_all(self) -> None:
        now = time.monotonic()
        with self._lock:
            held = list(self._held.values())
        keep = []
        for h in held:
            if now - h.used > IDLE:
                self.release(h.key)
            else:
                keep.append(h)
        sent = time.monotonic()
        futures = [
            self._session.execute_async(
                self._renew,
                (self.ttl, self.member, self.address, h.epoch, *h.key, self.member),
                execution_profile=P_WORK,
                timeout=self.timeout,
            )
            for h in keep
        ]
        for h, future in zip(keep, futures, strict=True):
            try:
                applied = future.result()[0][0]
            except Exception:  # noqa: BLE001 - the term runs out on its own
                log.info("cassandra: renewing %s failed", h.key, exc_info=True)
                continue
            if applied:
                h.expires = max(h.expires, sent + self.term - self.margin)
            else:
                with self._lock:
                    if self._held.get(h.key) is h:
                        del self._held[h.key]
                log.warning("cassandra: lost ownership of %s", h.key)
