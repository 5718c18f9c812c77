"""Owned work queues: the owner of a partition serves it from memory.

The Cassandra work queue (``queuey.cassandra.work_queue = owned``, the only
design since ``lwt`` was removed).
Each API process owns some of a subscription's queue partitions for a term
(:mod:`queuey.storage.cassandra.ownership`) and serves them from memory
(:mod:`.ownedtable`) with the rules of :mod:`queuey.storage.cassandra.workqueue`,
:mod:`.leases` and :mod:`.reservation`: a change costs one plain write, no
lightweight transaction. A call that names partitions another process owns is forwarded
to that process over its peer port (:mod:`.peers`, authenticated with the
peer secret); the receiving process serves it from what it owns and answers
"not the owner" otherwise, and the sender looks the owner up again.

Reserve serves the partitions this process owns first and asks the other
owners only for what is still missing, so a busy process does not wait on
its peers; partitions nobody owns yet are taken by the first process that needs them.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from queuey.errors import StorageUnavailable
from queuey.model import (
    DeadLetter,
    Message,
    MessageRef,
    MessageState,
    QueueMeta,
    QueueStats,
    ReceiptStatus,
    Reserved,
)
from queuey.storage.asks import ExtendAsk, ReleaseAsk, ReserveAsk
from queuey.storage.cassandra import wire
from queuey.storage.cassandra.announce import TIMEOUT, Announcer
from queuey.storage.cassandra.ownedtable import OwnedTable
from queuey.storage.cassandra.ownership import NotOwner
from queuey.storage.cassandra.peers import PeerClient, PeerNoAnswer, PeerServer, PeerUnavailable
from queuey.storage.cassandra.session import P_META
from queuey.storage.cassandra.settings import CassandraSettings
from queuey.storage.cassandra.statements import Connection
from queuey.storage.cassandra.workqueue import CassandraWorkQueue, receipt_groups

log = logging.getLogger(__name__)

T = TypeVar("T")
#: Times a call looks its partitions' owners up again after a forward failed.
ATTEMPTS = 3


class OwnedWorkQueue:
    """The work-queue half of the backend when partitions have owners."""

    def __init__(self, config: CassandraSettings, max_ttl_micros: int) -> None:
        self.config = config
        self.table = OwnedTable(config, max_ttl_micros)
        self.ownership = self.table.ownership
        self.local = CassandraWorkQueue(self.table)
        #: A forwarded call waits at most this long: a frozen owner must not
        #: hold a live process's calls past the term in which its partitions
        #: move (a forwarded call makes a few storage calls of its own).
        self.timeout = min(4 * config.request_timeout + 1, config.owner_term / 2)
        self._server: PeerServer | None = None
        self._client: PeerClient | None = None
        self._start_lock = threading.Lock()
        self._conn: Connection | None = None
        #: Called with ``(application, queue)`` when another process announces
        #: available messages (:mod:`.announce`).
        self.watchers: list[Callable[[str, str], None]] = []
        self.announcer = Announcer(self._send_available, lambda: self.ownership.peers)

    # -- start and stop -------------------------------------------------------------
    def _start(self, c: Connection) -> None:
        if self._client is not None:
            return
        with self._start_lock:
            if self._client is not None:
                return
            secret = peer_secret(c, self.config).encode()
            server = PeerServer(self._handle, self.config.peer_host, secret)
            server.start()
            try:
                self.ownership.bind(c, server.address)
            except BaseException:
                server.close()
                raise
            self.ownership.ask_handoff = self._ask_handoff
            self._server = server
            self._conn = c
            self._client = PeerClient(secret)

    def close(self) -> None:
        self.announcer.close()
        self.ownership.close()
        if self._server is not None:
            self._server.close()
        if self._client is not None:
            self._client.close()

    # -- wake-ups --------------------------------------------------------------------
    def posted(self, queue: QueueMeta) -> None:
        """Messages were stored through this process: kept scans of the queue
        are out of date."""
        self.table.scans.drop_queue(queue.application, queue.name)

    def announce(self, c: Connection, application: str, queue: str) -> None:
        self._start(c)
        self.announcer.announce(application, queue)

    def _send_available(self, address: str, queues: list[list[str]]) -> None:
        assert self._client is not None
        self._client.call(address, "available", {"queues": queues}, TIMEOUT)

    # -- the calls ------------------------------------------------------------------
    def reserve(self, c: Connection, queue: QueueMeta, sub: str, ask: ReserveAsk) -> Reserved:
        self._start(c)
        got = Reserved([], [])
        mine, remote = self.ownership.route(queue.incarnation, sub, ask.partitions)
        if mine:
            got = self._local(
                lambda: self.local.reserve(c, queue, sub, replace(ask, partitions=mine))
            )
        for address, parts in remote.items():
            need = ask.limit - len(got.deliveries)
            if need <= 0:
                break
            args = {
                "queue": wire.encode_queue(queue),
                "sub": sub,
                "ask": wire.encode_reserve_ask(replace(ask, partitions=parts, limit=need)),
            }
            try:
                answer = self._forward(address, "reserve", args, wire.decode_reserved)
            except PeerNoAnswer:
                # The owner may have leased messages it never answered with:
                # say so (outcome unknown) rather than answer without them.
                self.ownership.forget(queue.incarnation, sub, parts)
                raise StorageUnavailable(
                    "cassandra: reserve: a partition owner did not answer, retry"
                ) from None
            except PeerUnavailable:
                self.ownership.forget(queue.incarnation, sub, parts)
                continue
            got = Reserved(
                got.deliveries + answer.deliveries, got.dead_letters + answer.dead_letters
            )
        return got

    def ack(
        self, c: Connection, queue: QueueMeta, sub: str, receipts: Sequence[str], now: int
    ) -> dict[str, ReceiptStatus]:
        self._start(c)
        return self._statuses(
            queue,
            sub,
            receipts,
            lambda mine: self.local.ack(c, queue, sub, mine, now),
            lambda mine: ("ack", {"receipts": wire.encode_receipts(mine), "now": now}),
        )

    def extend(
        self, c: Connection, queue: QueueMeta, sub: str, ask: ExtendAsk
    ) -> dict[str, ReceiptStatus]:
        self._start(c)
        return self._statuses(
            queue,
            sub,
            ask.receipts,
            lambda mine: self.local.extend(c, queue, sub, replace(ask, receipts=mine)),
            lambda mine: ("extend", {"ask": wire.encode_extend_ask(replace(ask, receipts=mine))}),
        )

    def release(
        self, c: Connection, queue: QueueMeta, sub: str, ask: ReleaseAsk
    ) -> tuple[dict[str, ReceiptStatus], list[DeadLetter]]:
        self._start(c)
        dead: list[DeadLetter] = []

        def local(mine: list[str]) -> dict[str, ReceiptStatus]:
            statuses, letters = self.local.release(c, queue, sub, replace(ask, receipts=mine))
            dead.extend(letters)
            return statuses

        def remote(mine: list[str]) -> tuple[str, dict]:
            return "release", {"ask": wire.encode_release_ask(replace(ask, receipts=mine))}

        def decode(answer: dict) -> dict[str, ReceiptStatus]:
            statuses, letters = wire.decode_statuses(answer["statuses"]), answer["dead"]
            dead.extend(wire.decode_dead_letters(letters))  # all or nothing: after the statuses
            return statuses

        statuses = self._statuses(queue, sub, ask.receipts, local, remote, decode)
        return statuses, dead

    def reopen(
        self, c: Connection, queue: QueueMeta, sub: str, refs: Sequence[MessageRef], now: int
    ) -> int:
        self._start(c)
        by_partition: dict[int, list[MessageRef]] = {}
        for ref in refs:
            by_partition.setdefault(ref.partition, []).append(ref)
        count = 0
        for _ in range(ATTEMPTS):
            mine, remote = self.ownership.route(queue.incarnation, sub, list(by_partition))
            if mine:
                picked = [r for p in mine for r in by_partition.pop(p)]
                count += self._local(self.local.reopen, c, queue, sub, picked, now)
            for address, parts in remote.items():
                picked = [r for p in parts for r in by_partition[p]]
                args = {"queue": wire.encode_queue(queue), "sub": sub}
                args |= {"refs": wire.encode_refs(picked), "now": now}
                try:
                    count += self._forward(address, "reopen", args, wire.decode_count)
                except PeerUnavailable:
                    self.ownership.forget(queue.incarnation, sub, parts)
                    continue
                for p in parts:
                    del by_partition[p]
            if not by_partition:
                return count
        raise StorageUnavailable("cassandra: reopen: partition owners unreachable, retry")

    def stats(self, c: Connection, queue: QueueMeta, now: int) -> QueueStats:
        self._start(c)
        return self.local.stats(c, queue, now)

    def in_flight(self, c: Connection, queue: QueueMeta, sub: str, now: int) -> int:
        """From memory where owned here, else from the state its owner made
        durable before answering (:meth:`.ownedtable.OwnedTable.read`): no
        call to a peer."""
        self._start(c)
        return self.local.in_flight(c, queue, sub, now)

    def message_state(
        self, c: Connection, queue: QueueMeta, sub: str, message: Message
    ) -> MessageState:
        """As :meth:`in_flight` reads: no call to a peer."""
        self._start(c)
        return self.local.message_state(c, queue, sub, message)

    def live_processes(self, connect: Callable[[], Connection]) -> int | None:
        """The live members (:meth:`.ownership.Ownership.live_members`). A
        process that asks joins them first, so every process that splits a
        limit by this count is counted; ``None`` while Cassandra is out of reach."""
        try:
            self._start(connect())
        except Exception:  # noqa: BLE001 - unknown, and the caller must not fail
            log.debug("cassandra: live processes unknown", exc_info=True)
            return None
        return self.ownership.live_members()

    # -- routing ------------------------------------------------------------------
    def _local(self, call: Callable[..., T], *args: Any) -> T:
        try:
            return call(*args)
        except NotOwner:
            raise StorageUnavailable("cassandra: partition ownership moved, retry") from None

    def _forward(self, address: str, op: str, args: dict, decode: Callable[[Any], T]) -> T:
        """``op`` carried out by the owner at ``address``, its answer decoded.
        An answer that does not decode (a peer of another release) is
        :class:`PeerNoAnswer`: the owner did something this process cannot
        tell, so the caller treats it as an answer lost."""
        assert self._client is not None
        answer = self._client.call(address, op, args, self.timeout)
        try:
            return decode(answer)
        except (ValueError, TypeError, KeyError) as exc:
            raise PeerNoAnswer(f"peer {address}: a malformed answer to {op}: {exc}") from None

    def _statuses(
        self,
        queue: QueueMeta,
        sub: str,
        receipts: Sequence[str],
        local: Callable[[list[str]], dict[str, ReceiptStatus]],
        remote: Callable[[list[str]], tuple[str, dict]],
        decode: Callable[[Any], dict[str, ReceiptStatus]] = wire.decode_statuses,
    ) -> dict[str, ReceiptStatus]:
        """Answer receipts by partition: here for the partitions owned here
        (or taken now), forwarded for the others. A forwarded call that may
        have taken effect unanswered (:class:`PeerNoAnswer`) is routed again,
        and only an ``acked`` then stands: any other answer could be the new
        owner's view of what that call did (an ack that landed, its slot
        since given to another delivery, reads ``expired``), so the call is
        storage unavailable, its outcome unknown."""
        groups, malformed = receipt_groups(queue, receipts)
        statuses: dict[str, ReceiptStatus] = dict.fromkeys(malformed, "unknown")
        by_partition = {p: [r for r, _, _ in items] for p, items in groups.items()}
        maybe_done: set[str] = set()

        def settle(parts: list[int], answered: dict[str, ReceiptStatus]) -> None:
            """Keep the answers; receipts left unanswered (their partition
            was handed over meanwhile) are routed again."""
            statuses.update(answered)
            for p in parts:
                left = [r for r in by_partition[p] if r not in answered]
                if left:
                    by_partition[p] = left
                else:
                    del by_partition[p]
            if any(p in by_partition for p in parts):
                self.ownership.forget(queue.incarnation, sub, parts)

        for _ in range(ATTEMPTS):
            if not by_partition:
                break
            mine, elsewhere = self.ownership.route(queue.incarnation, sub, list(by_partition))
            if mine:
                settle(mine, self._local(local, [r for p in mine for r in by_partition[p]]))
            for address, parts in elsewhere.items():
                op, args = remote([r for p in parts for r in by_partition[p]])
                args |= {"queue": wire.encode_queue(queue), "sub": sub}
                try:
                    settle(parts, self._forward(address, op, args, decode))
                except PeerUnavailable as exc:
                    if isinstance(exc, PeerNoAnswer):
                        maybe_done.update(r for p in parts for r in by_partition[p])
                    self.ownership.forget(queue.incarnation, sub, parts)
        if by_partition:
            raise StorageUnavailable("cassandra: partition owners unreachable, retry")
        if any(statuses[r] != "acked" for r in maybe_done):
            raise StorageUnavailable("cassandra: a partition owner did not answer, retry")
        return {r: statuses[r] for r in receipts}

    # -- calls forwarded to this process -------------------------------------------------
    def _handle(self, op: str, args: dict) -> dict:
        """Serve a forwarded call from what this process owns (taking unowned
        partitions); partitions owned elsewhere answer "not the owner"."""
        if op == "available":
            for application, name in args["queues"]:
                self.table.scans.drop_queue(str(application), str(name))
                for watch in self.watchers:
                    watch(str(application), str(name))
            return {}
        if op == "handoff":
            key = (str(args["incarnation"]), str(args["sub"]), int(args["partition"]))
            return {"released": self.ownership.hand_over(key)}
        queue = wire.decode_queue(args["queue"])
        sub = str(args["sub"])
        c = self._conn
        if c is None:
            raise StorageUnavailable("cassandra: not connected")
        if op == "reserve":
            ask = wire.decode_reserve_ask(args["ask"])
            mine, _ = self.ownership.route(queue.incarnation, sub, ask.partitions)
            if not mine:
                return wire.encode_reserved(Reserved([], []))
            got = self.local.reserve(c, queue, sub, replace(ask, partitions=mine))
            return wire.encode_reserved(got)
        if op == "reopen":
            refs = wire.decode_refs(args["refs"])
            self._owns_all(queue, sub, {r.partition for r in refs})
            return {"count": self.local.reopen(c, queue, sub, refs, int(args["now"]))}
        if op == "ack":
            receipts = wire.decode_receipts(args["receipts"])
            self._owns_receipts(queue, sub, receipts)
            return wire.encode_statuses(self.local.ack(c, queue, sub, receipts, int(args["now"])))
        if op == "extend":
            ask = wire.decode_extend_ask(args["ask"])
            self._owns_receipts(queue, sub, ask.receipts)
            return wire.encode_statuses(self.local.extend(c, queue, sub, ask))
        if op == "release":
            ask = wire.decode_release_ask(args["ask"])
            self._owns_receipts(queue, sub, ask.receipts)
            statuses, dead = self.local.release(c, queue, sub, ask)
            return {
                "statuses": wire.encode_statuses(statuses),
                "dead": wire.encode_dead_letters(dead),
            }
        raise ValueError(f"unknown peer call {op!r}")

    def _ask_handoff(self, address: str, key: tuple[str, str, int]) -> bool:
        args = {"incarnation": key[0], "sub": key[1], "partition": key[2]}
        assert self._client is not None
        answer = self._client.call(address, "handoff", args, TIMEOUT)
        return bool(answer["released"])

    def _owns_receipts(self, queue: QueueMeta, sub: str, receipts: Sequence[str]) -> None:
        self._owns_all(queue, sub, set(receipt_groups(queue, receipts)[0]))

    def _owns_all(self, queue: QueueMeta, sub: str, partitions: set[int]) -> None:
        mine, elsewhere = self.ownership.route(queue.incarnation, sub, sorted(partitions))
        if elsewhere:
            raise NotOwner("cassandra: not the owner of the partition")


def peer_secret(c: Connection, config: CassandraSettings) -> str:
    """``queuey.cassandra.peer_secret``, or the keyspace's own (drawn by the
    first process that needs one and kept in ``storage_settings``)."""
    if config.peer_secret:
        return config.peer_secret
    drawn = secrets.token_hex(32)
    row = c.session.execute(
        f"INSERT INTO {config.keyspace}.storage_settings (name, value) "
        "VALUES ('peer_secret', %s) IF NOT EXISTS",
        (drawn,),
        execution_profile=P_META,
        timeout=config.request_timeout,
    ).one()
    return drawn if row[0] else str(row[-1])
