"""What flow control asks of Cassandra: a subscription's in-flight count and
the number of live API processes (:class:`CassandraFlow`).

The in-flight count is read from the subscription's lease states, one read per
queue partition at most, in either work-queue mode; it is exact for the
leases as stored, but counts a message that expired or was deleted while
leased until its lease lapses (:mod:`.workstats` says why). Reserve cannot cap
it atomically here (each queue partition changes on its own), so it ignores
``max_in_flight`` and the core bounds the count per process.

The live processes are the members of the work-queue ownership
(:mod:`queuey.storage.cassandra.ownership`), known only in the default
``owned`` mode. Token buckets are not shared through a file: the processes
of one keyspace run on many hosts.
"""

from __future__ import annotations

from queuey.model import QueueMeta
from queuey.storage.cassandra.session import P_WORK, boundary


class CassandraFlow:
    """The :class:`~queuey.storage.Storage` flow-control methods of
    :class:`~queuey.storage.cassandra.CassandraStorage` (mixed in; it
    provides ``_connection()`` and ``_work``, its work queue)."""

    @boundary("in flight")
    def in_flight(self, queue: QueueMeta, subscription: str, now_micros: int) -> int:
        """From the lease states (see the module); in ``owned`` mode from
        memory for the partitions this process owns and from their owners'
        durable state for the others, never by asking a peer."""
        c = self._connection()  # type: ignore[attr-defined]
        return self._work.in_flight(c, queue, subscription, now_micros)  # type: ignore[attr-defined]

    def live_processes(self) -> int | None:
        """The live members of the work-queue ownership, this process included
        (it joins them if it had not yet): a process that starts counts
        within a quarter ``owner_term``, one that stops within a quarter term
        when it closes cleanly and within three terms and a quarter when it
        dies. ``None`` while Cassandra cannot be reached."""
        return self._work.live_processes(self._connection)  # type: ignore[attr-defined]

    @boundary("subscriptions")
    def subscriptions(self, queue: QueueMeta) -> list[str]:
        """From the queue's subscriptions partition (one read)."""
        c = self._connection()  # type: ignore[attr-defined]
        rows = c.session.execute(
            c.st.list_subscriptions,
            (queue.incarnation,),
            execution_profile=P_WORK,
            timeout=self.config.request_timeout,  # type: ignore[attr-defined]
        )
        return sorted(row[0] for row in rows)

    def flow_state_path(self) -> str | None:
        """``None``: the processes sharing a keyspace do not share a host."""
        return None
