"""The HTTP client: one object per application, talking to one or more API nodes.

:class:`BaseClient` holds both clients' settings and every call, described once
(:class:`~queuey.client.answers.Call`); :class:`QueueyClient` sends them with
requests, :class:`~queuey.client.aio.AsyncQueueyClient` with httpx, by the
rules below (the asyncio client repeats ``503`` itself where urllib3 does).

:class:`QueueyClient` holds a pooled :class:`requests.Session` and a list of
API node URLs. Each request has its own timeout. On one node, idempotent
calls are retried by urllib3 as :mod:`queuey.client.retry` describes (on
``503`` and on errors after sending). On top of that the client fails over:
when a node cannot be reached at all (nothing was sent), it waits (full
jitter) and moves on to the next URL, for every method, at most ``retries``
times per call; it then stays on the node that answered. A node that took a
call and never answered (it hangs, or died mid-call) is left too: the next
call starts at the next URL.

A ``POST`` that may have reached the service is sent again only when doing so
cannot store anything twice. Posts qualify when every message carries a
``dedup_id``: the service stores a second post of the same id once (within
its ``queuey.dedup_window``, 300 s by default, far longer than the client's
retries last). With ``auto_dedup`` (the default, whenever ``retries`` > 0) the
client gives each message posted without one a random id (uuid4 hex), so a
post answered ``503``, timed out or cut off after sending is repeated, on the
same node or the next, and stored once. The work-queue calls are safe to
repeat too (:mod:`queuey.client.workqueue`). Any other ``POST`` (queue
creation, a post with ``auto_dedup=False`` and no ``dedup_id``) is never sent
again once it may have arrived: its error says ``outcome_unknown``.

Every error answer becomes a typed :class:`~queuey.client.errors.ClientError`
carrying the server's ``error_msg`` dict. A post refused by flow control is
a :class:`~queuey.client.errors.FlowRefused` and is not repeated: a paused
queue's ``503`` stays until an operator resumes it, and the caller chooses
whether and when to post again (``retry_after``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import requests
from requests.adapters import HTTPAdapter

from queuey.client.answers import (
    Attempts,
    Call,
    Reply,
    call,
    nothing,
    requests_failure,
    unchanged,
)
from queuey.client.flow import FlowCalls
from queuey.client.models import (
    OutgoingMessage,
    PostedMessage,
    QueueInfo,
    ReceivedMessage,
    given,
    known,
    timestamp_param,
)
from queuey.client.models import path_segment as _q
from queuey.client.retry import IDEMPOTENT, ClientRetry
from queuey.client.schedules import ScheduleCalls
from queuey.client.workqueue import WorkQueueCalls
from queuey.coerce import as_list
from queuey.limits import DEFAULT_READ, MAX_READ
from queuey.tracing import request_headers


class BaseClient(WorkQueueCalls, ScheduleCalls, FlowCalls):
    """Both clients' settings (see :class:`QueueyClient`) and calls.

    A subclass opens its transport in ``_open()``, sends calls with
    ``_send(call)`` and walks pages with ``_paged(page, after, cursor)``: every
    item of the pages of the calls ``page(cursor)``, for the first cursor and
    each that ``after(page)`` names, until it names None.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        application: str,
        key: str | None = None,
        *,
        timeout: float = 10.0,
        retries: int = 5,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        auto_dedup: bool = True,
    ) -> None:
        if isinstance(urls, str):
            urls = as_list(urls)
        self.urls = [u.rstrip("/") for u in urls]
        if not self.urls:
            raise ValueError(f"{type(self).__name__} needs at least one URL")
        self.application = application
        self.key = key
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.auto_dedup = auto_dedup
        self._current = 0
        self._open()

    def headers(self) -> dict[str, str]:
        """What every request carries: the application, its key, ``Accept``."""
        headers = {"X-Application-Name": self.application, "Accept": "application/json"}
        if self.key is not None:
            headers["ApplicationKey"] = self.key
        return headers

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.urls!r}, {self.application!r})"

    # -------------------------------------------------------------- queues

    @call
    def create_queue(
        self,
        name: str | None = None,
        partitions: int = 1,
        ttl: int | None = None,
        type: str | None = None,
        **work_queue: Any,
    ) -> Call[QueueInfo]:
        """Create a queue (``Conflict`` if the name exists).

        ``work_queue``: ``visibility_timeout``, ``max_attempts``,
        ``dead_letter_queue``, ``delay`` (docs/api.rst, "Work queues").
        """
        params = given(partitions=partitions, queue_name=name, ttl=ttl, type=type)
        params.update(given(**known(work_queue, WORK_QUEUE_SETTINGS, "queue setting")))
        return Call("POST", "/queue", QueueInfo.from_json, json=params)

    @call
    def queue_info(self, name: str) -> Call[QueueInfo]:
        return Call("GET", f"/queue/{_q(name)}/info", QueueInfo.from_json)

    @call
    def list_queues(
        self, limit: int = DEFAULT_READ, offset: str | None = None, details: bool = False
    ) -> Call[list[QueueInfo | str]]:
        """The application's queues by name, starting after ``offset``."""
        params = given(limit=limit, offset=offset, details="true" if details else None)
        return Call("GET", "/queue", _queues, params=params)

    def iter_queues(self, page_size: int = DEFAULT_READ) -> Iterator[QueueInfo]:
        """Every queue of the application, paging through :meth:`list_queues`
        (an async iterator on the asyncio client)."""

        def page(offset: str | None) -> Call[list[QueueInfo | str]]:
            return self.list_queues.describe(self, page_size, offset, details=True)

        def after(page: list[QueueInfo | str]) -> str | None:
            if len(page) < page_size:
                return None
            last = page[-1]
            return last.name if isinstance(last, QueueInfo) else last

        return self._paged(page, after, None)

    @call
    def update_queue(
        self,
        name: str,
        partitions: int | None = None,
        ttl: int | None = None,
        type: str | None = None,
        **work_queue: Any,
    ) -> Call[QueueInfo]:
        """Change a queue's settings (those given); see :meth:`create_queue`."""
        params = given(partitions=partitions, ttl=ttl, type=type)
        params.update(given(**known(work_queue, WORK_QUEUE_SETTINGS, "queue setting")))
        return Call("PUT", f"/queue/{_q(name)}", QueueInfo.from_json, json=params)

    @call
    def delete_queue(self, name: str, delete: bool = True) -> Call[None]:
        """Delete the queue, or with ``delete=False`` only its messages."""
        params = None if delete else {"delete": "false"}
        return Call("DELETE", f"/queue/{_q(name)}", nothing, params=params)

    # ------------------------------------------------------------ messages

    @call
    def post(
        self,
        name: str,
        body: dict,
        partition: int | None = None,
        partition_key: str | None = None,
        ttl: int | None = None,
        delay: int | None = None,
        priority: int | None = None,
        dedup_id: str | None = None,
        group: str | None = None,
    ) -> Call[PostedMessage]:
        """Add one message (a JSON object) to a queue.

        ``delay``: seconds before any reader sees it; ``priority``: 0-9,
        higher reserved first by work-queue consumers; ``dedup_id``: see the
        module doc (one is made up when ``auto_dedup`` is on). A second post of
        the same ``dedup_id`` answers with the first message. ``group``: the
        message's group (fair queues serve quiet groups first; without a
        partition or key, the group chooses the partition).
        """
        dedup_id = dedup_id or self._new_dedup_id()
        message = OutgoingMessage(
            body, partition, partition_key, ttl, delay, priority, dedup_id, group=group
        )
        params = {k: v for k, v in message.to_json().items() if k != "body"}
        path = f"/queue/{_q(name)}"
        repeatable = dedup_id is not None
        return Call("POST", path, _posted, params=params, json=body, repeatable=repeatable)

    @call
    def post_batch(
        self, name: str, messages: Sequence[dict | OutgoingMessage]
    ) -> Call[list[PostedMessage]]:
        """Add many messages at once, all or nothing; answers in input order.

        A plain dict is a message body; use :class:`OutgoingMessage` to place
        it or give it a delay, priority, ``dedup_id`` or attributes. The batch
        is repeated after an unknown outcome only if every message has a
        ``dedup_id`` (made up for those without when ``auto_dedup`` is on).
        """
        entries = [m.to_json() if isinstance(m, OutgoingMessage) else {"body": m} for m in messages]
        for entry in entries:
            if "dedup_id" not in entry and (made := self._new_dedup_id()):
                entry["dedup_id"] = made
        keyed = all("dedup_id" in entry for entry in entries)
        path = f"/queue/{_q(name)}/batch"
        return Call("POST", path, _batch, json={"messages": entries}, repeatable=keyed)

    @call
    def read(
        self,
        name: str,
        since: str | None = None,
        since_timestamp: float | str | Decimal | None = None,
        limit: int = DEFAULT_READ,
        order: str = "descending",
        partitions: Sequence[int] | None = None,
    ) -> Call[list[ReceivedMessage]]:
        """Messages strictly after ``since`` (an id) / ``since_timestamp``."""
        params = given(
            limit=limit,
            order=order,
            since=since,
            since_timestamp=None if since_timestamp is None else timestamp_param(since_timestamp),
            partitions=",".join(str(p) for p in partitions) if partitions else None,
        )
        return Call("GET", f"/queue/{_q(name)}", _received, params=params)

    def iter_messages(
        self,
        name: str,
        partitions: Sequence[int] | None = None,
        since: str | None = None,
        since_timestamp: float | str | Decimal | None = None,
        page_size: int = MAX_READ,
    ) -> Iterator[ReceivedMessage]:
        """Every message from the start (or the bound given), oldest first
        (an async iterator on the asyncio client).

        Pages forward with ``since=<last id seen>``, which never skips a message
        (invariant 2). Stops at the first page shorter than ``page_size``.
        """
        page_size = min(page_size, MAX_READ)

        def page(after: str | None) -> Call[list[ReceivedMessage]]:
            bound = since_timestamp if after is None else None
            return self.read.describe(self, name, after, bound, page_size, "ascending", partitions)

        def after(page: list[ReceivedMessage]) -> str | None:
            return None if len(page) < page_size else page[-1].message_id

        return self._paged(page, after, since)

    @call
    def get_messages(self, name: str, refs: Sequence[str]) -> Call[list[ReceivedMessage]]:
        """The messages among ``refs`` (``"partition:message_id"``) that exist."""
        if not refs:
            return Call.answered([])
        return Call("GET", f"/queue/{_q(name)}/messages/{_refs(refs)}", _received)

    @call
    def delete_messages(self, name: str, refs: Sequence[str]) -> Call[None]:
        if not refs:
            return Call.answered(None)
        return Call("DELETE", f"/queue/{_q(name)}/messages/{_refs(refs)}", nothing)

    # --------------------------------------------------------- checkpoints

    @call
    def get_checkpoints(self, name: str, consumer: str) -> Call[dict[int, str]]:
        """How far ``consumer`` recorded it processed each partition."""
        return Call("GET", f"/queue/{_q(name)}/checkpoints/{_q(consumer)}", _checkpoints)

    @call
    def set_checkpoints(
        self, name: str, consumer: str, checkpoints: Mapping[int, str]
    ) -> Call[None]:
        body = {"checkpoints": {str(p): mid for p, mid in checkpoints.items()}}
        path = f"/queue/{_q(name)}/checkpoints/{_q(consumer)}"
        return Call("PUT", path, nothing, json=body)

    # ------------------------------------------------------------- service

    @call
    def heartbeat(self) -> Call[dict]:
        """The service's ``/__heartbeat__`` answer (raises ``Unavailable`` on 503)."""
        return Call("GET", "/__heartbeat__", unchanged)

    def _new_dedup_id(self) -> str | None:
        """A fresh ``dedup_id`` when the client may retry posts, else None.

        Without retries nothing is ever sent twice, so the id would only
        cost the service a dedup record.
        """
        return uuid.uuid4().hex if self.auto_dedup and self.retries > 0 else None


class QueueyClient(BaseClient):
    """A client of one Queuey application, talking to one or more API nodes.

    ``urls``: one base URL or several (``"http://a:5000,http://b:5000"`` or a
    list); requests start at the first and move to the next on failure.
    ``key``: the application key, needed for every method but reads of
    public queues. ``retries``: how many times one call is retried on a node,
    and how many times it fails over (:mod:`queuey.client.retry`).
    ``auto_dedup``: give every posted message without a ``dedup_id`` a random
    one, so that posts are retried like reads (see the module doc); with
    ``False`` a post without a ``dedup_id`` is never sent twice.
    """

    def _open(self) -> None:
        self._sleep = time.sleep
        self.session = requests.Session()
        retry = ClientRetry.policy(self.retries, self.backoff, self.max_backoff, pause=self._pause)
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=16, max_retries=retry)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.headers.update(self.headers())

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> QueueyClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _paged(self, page, after, cursor) -> Iterator:
        while True:
            found = self._send(page(cursor))
            yield from found
            if (cursor := after(found)) is None:
                return

    def _pause(self, seconds: float) -> None:
        """Wait before a retry or a fail-over.

        ``_sleep`` is looked up at each call, so it may be replaced on a client
        already built (the tests measure the waits that way).
        """
        self._sleep(seconds)

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        repeatable: bool | None = None,
        timeout: float | None = None,
    ) -> dict:
        """Send one call, failing over to the next node while none can be reached.

        ``repeatable``: whether the call may be sent again once it may have
        reached the service; by default, whether its method is idempotent.
        urllib3 repeats those on the same node after a ``503``; after a lost
        answer they go to the next node here. A ``POST`` is repeatable only when
        sending it twice has the effect of once (its messages carry a
        ``dedup_id``, or it is a work-queue call): it is then repeated here, on
        a ``503`` or a lost answer, at most ``retries`` times in all. Any other
        ``POST`` is sent again only if it certainly never left; otherwise the
        error says ``outcome_unknown``. ``timeout``: this call's, when it
        differs from the client's (a long poll). The rules are
        :class:`~queuey.client.answers.Attempts`'.
        """
        if repeatable is None:
            repeatable = method in IDEMPOTENT
        tries = Attempts(self, method, path, repeatable, repeatable and method not in IDEMPOTENT)
        while True:
            try:
                response = self.session.request(
                    method,
                    tries.base + path,
                    params=params,
                    json=json,
                    headers=request_headers(),
                    timeout=timeout or self.timeout,
                )
            except requests.RequestException as exc:
                delay = tries.failed(exc, requests_failure(exc))
            else:
                reply = Reply(
                    response.status_code, response.reason, response.headers, response.content
                )
                if (delay := tries.answered(reply)) is None:
                    return tries.decode(reply)
            self._pause(delay)


def _queues(data: Mapping[str, Any]) -> list[QueueInfo | str]:
    return [q if isinstance(q, str) else QueueInfo.from_json(q) for q in data["queues"]]


def _posted(data: Mapping[str, Any]) -> PostedMessage:
    return PostedMessage.from_json(data["messages"][0])


def _batch(data: Mapping[str, Any]) -> list[PostedMessage]:
    return [PostedMessage.from_json(m) for m in data["messages"]]


def _received(data: Mapping[str, Any]) -> list[ReceivedMessage]:
    return [ReceivedMessage.from_json(m) for m in data["messages"]]


def _checkpoints(data: Mapping[str, Any]) -> dict[int, str]:
    return {int(p): str(mid) for p, mid in (data.get("checkpoints") or {}).items()}


#: Queue settings of work queues that ``create_queue`` / ``update_queue`` pass on.
WORK_QUEUE_SETTINGS = ("visibility_timeout", "max_attempts", "dead_letter_queue", "delay")


def _refs(refs: Sequence[str]) -> str:
    return ",".join(quote(str(r), safe=":") for r in refs)
