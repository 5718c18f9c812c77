"""How many CQL requests a backend sends, by kind: what a design costs Cassandra.

Every request the driver creates passes :meth:`RequestCounter.on_request`
(the session's request-init listener, registered when the backend connects)
and is counted under one kind:

* ``read``: a ``SELECT``;
* ``write``: an ``INSERT``, ``UPDATE`` or ``DELETE``, or a batch of them,
  without condition;
* ``lwt``: a lightweight transaction (Paxos): a statement or batch with a
  condition (``IF ...``), and a ``SELECT`` at ``SERIAL`` or ``LOCAL_SERIAL``
  consistency, which runs a Paxos round too;
* ``ddl``: schema (``CREATE``, ``ALTER``, ``DROP``, ``TRUNCATE``, ``USE`` ...).

A request is one statement or one batch as the caller sent it: the driver's
own retries and speculative executions, the further pages of a read, and
``PREPARE`` requests are not counted. A prepared statement is classified once
(cached by its id); a simple statement's text once (bounded cache).

Why two tallies: :meth:`RequestCounter.counts` is this backend's own (tests,
tools, :meth:`~queuey.storage.cassandra.CassandraStorage.request_counts`).
Under the production server every worker is a process of its own and a
scrape of ``/metrics`` reaches one of them; only Prometheus' multiprocess
files sum the workers (and the refresher process), so every request also
increments the process's ``queuey_cassandra_requests`` counter, which those
files carry (:func:`queuey.web.metrics.exposed`). A process serving alone
exposes the backend's own tally instead (:mod:`queuey.core.metrics`).
"""

from __future__ import annotations

import logging
import re
import threading
import weakref
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.cluster import Session
from cassandra.query import BatchStatement, BoundStatement
from prometheus_client import Counter

log = logging.getLogger(__name__)

READ, WRITE, LWT, DDL = "read", "write", "lwt", "ddl"
KINDS = (READ, WRITE, LWT, DDL)
#: The series under the production server (``_total`` is added on exposition).
METRIC = "queuey_cassandra_requests"
#: Every process's requests; summed over processes by the multiprocess files.
#: In no registry: a process serving alone exposes its backend's own tally.
PROCESS_REQUESTS = Counter(
    METRIC, "CQL requests sent to Cassandra, by kind", ["kind"], registry=None
)

_SERIAL = frozenset({ConsistencyLevel.SERIAL, ConsistencyLevel.LOCAL_SERIAL})
_DDL_VERBS = frozenset({"CREATE", "ALTER", "DROP", "TRUNCATE", "USE", "GRANT", "REVOKE"})
# String literals, quoted names and comments: an "IF" inside them is no condition.
_NOT_CODE = re.compile(
    r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\$\$.*?\$\$|--[^\n]*|//[^\n]*|/\*.*?\*/", re.DOTALL
)
_CONDITION = re.compile(r"\bIF\b", re.IGNORECASE)
#: Most simple statements' texts remembered (schema, tools: few distinct ones).
TEXT_CACHE_SIZE = 512


def classify_text(cql: str) -> str:
    """The kind of one CQL statement from its text (consistency aside)."""
    code = _NOT_CODE.sub(" ", cql)
    words = code.split(None, 1)
    verb = words[0].upper() if words else ""
    if verb in _DDL_VERBS:
        return DDL
    if verb == "SELECT":
        return READ
    return LWT if _CONDITION.search(code) else WRITE


class RequestCounter:
    """Counts one backend's requests by kind; cheap and safe to share by threads.

    The listener runs in the thread that sends the request, before it is
    sent: it must never raise (a failure would fail the request), so an
    unexpected statement is counted as a write and logged once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(KINDS, 0)
        self._children = {kind: PROCESS_REQUESTS.labels(kind) for kind in KINDS}
        #: Prepared statement id -> kind (serial consistency is per request).
        self._prepared: dict[bytes, str] = {}
        self._texts: dict[str, str] = {}
        self._warned = False

    def attach(self, session: Session) -> None:
        """Count every request ``session`` sends from now on."""
        session.add_request_init_listener(self.on_request)

    def counts(self) -> dict[str, int]:
        """Requests counted so far, by kind (every kind present)."""
        with self._lock:
            return dict(self._counts)

    def on_request(self, future: Any) -> None:
        """The driver's request-init listener: count ``future``'s request."""
        try:
            kind = self.classify(future)
        except Exception:  # noqa: BLE001 - counting must never fail a request
            if not self._warned:
                self._warned = True
                log.exception("cassandra: could not classify a request; counted as a write")
            kind = WRITE
        with self._lock:
            self._counts[kind] += 1
        self._children[kind].inc()

    def classify(self, future: Any) -> str:
        """The kind of the request ``future`` carries."""
        query = future.query
        if isinstance(query, BoundStatement):
            prepared = query.prepared_statement
            kind = self._prepared.get(prepared.query_id)
            if kind is None:
                kind = self._prepared[prepared.query_id] = classify_text(prepared.query_string)
        elif isinstance(query, BatchStatement):
            return self._batch_kind(future, query)
        else:
            kind = self._text_kind(getattr(query, "query_string", None) or str(query))
        if kind == READ and future.message.consistency_level in _SERIAL:
            return LWT
        return kind

    def _text_kind(self, cql: str) -> str:
        kind = self._texts.get(cql)
        if kind is None:
            if len(self._texts) >= TEXT_CACHE_SIZE:
                self._texts.clear()
            kind = self._texts[cql] = classify_text(cql)
        return kind

    def _batch_kind(self, future: Any, batch: BatchStatement) -> str:
        """A batch is a lightweight transaction when any statement in it has a
        condition (Cassandra then runs the whole batch as one)."""
        for is_prepared, statement, _ in batch._statements_and_parameters:
            if is_prepared:
                kind = self._prepared.get(statement)
                if kind is None:
                    kind = self._prepared_kind(future, statement)
            else:
                kind = self._text_kind(statement)
            if kind == LWT:
                return LWT
        return WRITE

    def _prepared_kind(self, future: Any, query_id: bytes) -> str:
        """A batch names its prepared statements by id only: find the text
        among the cluster's prepared statements (the driver keeps them to
        prepare again on reconnection)."""
        prepared = future.session.cluster._prepared_statements.get(query_id)
        if prepared is None:
            return WRITE
        kind = self._prepared[query_id] = classify_text(prepared.query_string)
        return kind


_COUNTERS: weakref.WeakKeyDictionary[object, RequestCounter] = weakref.WeakKeyDictionary()
_COUNTERS_LOCK = threading.Lock()


def counter_of(backend: object) -> RequestCounter:
    """``backend``'s request counter, made on first use (it lives as long as
    the backend: its counts survive reconnections)."""
    with _COUNTERS_LOCK:
        counter = _COUNTERS.get(backend)
        if counter is None:
            counter = _COUNTERS[backend] = RequestCounter()
        return counter
