"""A Python client for the Queuey HTTP API (v1).

One :class:`QueueyClient` holds a pooled :class:`requests.Session` and a list
of API node URLs. Each request has its own timeout; failures that are safe to
retry are retried with exponential backoff and full jitter, moving on to the
next URL each time (fail-over):

* every request is retried on ``503`` (the service says it did nothing and
  tells how long to wait in ``Retry-After``) and when the connection could not
  be made (the request never left this process);
* idempotent requests (``GET``, ``PUT``, ``DELETE``) are also retried after a
  read timeout or a dropped connection. ``POST`` is not: the message may have
  been stored, and posting it again would duplicate it.

Every error answer becomes a typed exception carrying the server's
``error_msg`` dict.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

log = logging.getLogger(__name__)

IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
MAX_READ_LIMIT = 1000


# ------------------------------------------------------------------ errors


class QueueyError(Exception):
    """Base of every error the client raises.

    ``status`` is the HTTP status (None when no answer came) and ``error_msg``
    the server's ``{"field or reason": "message"}`` dict.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error_msg: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_msg: dict[str, str] = dict(error_msg or {})


class BadRequest(QueueyError):
    """400: one or more parameters are invalid; ``error_msg`` names each."""


class Unauthorized(QueueyError):
    """401: unknown application or wrong/missing key."""


class Forbidden(QueueyError):
    """403: the key is right but this address is not allowed."""


class NotFound(QueueyError):
    """404: no such queue or message."""


class Conflict(QueueyError):
    """409: the queue exists already."""


class TooLarge(QueueyError):
    """413: the body or a message is larger than the service accepts."""


class Unavailable(QueueyError):
    """503 after every retry, or no API node could be reached."""


_BY_STATUS: dict[int, type[QueueyError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    503: Unavailable,
}


# ------------------------------------------------------------ value objects


@dataclass(frozen=True)
class QueueInfo:
    """A queue's metadata. ``created`` is seconds since the epoch."""

    name: str
    partitions: int
    created: float
    type: str
    ttl: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueueInfo:
        return cls(
            name=data["queue_name"],
            partitions=int(data["partitions"]),
            created=data.get("created", 0),
            type=data.get("type", "public"),
            ttl=data.get("ttl"),
        )


@dataclass(frozen=True)
class PostedMessage:
    """Where a posted message was stored."""

    message_id: str
    timestamp: float
    partition: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PostedMessage:
        return cls(data["message_id"], data["timestamp"], int(data["partition"]))


@dataclass(frozen=True)
class OutgoingMessage:
    """A message for :meth:`QueueyClient.post_batch`."""

    body: dict
    partition: int | None = None
    partition_key: str | None = None
    ttl: int | None = None

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"body": self.body}
        if self.partition is not None:
            entry["partition"] = self.partition
        if self.partition_key is not None:
            entry["partition_key"] = self.partition_key
        if self.ttl is not None:
            entry["ttl"] = self.ttl
        return entry


@dataclass(frozen=True)
class ReceivedMessage:
    """A message as read from a queue."""

    message_id: str
    timestamp: float
    partition: int
    body: dict

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReceivedMessage:
        return cls(data["message_id"], data["timestamp"], int(data["partition"]), data["body"])

    @property
    def ref(self) -> str:
        """``partition:message_id``, as :meth:`QueueyClient.get_messages` takes it."""
        return f"{self.partition}:{self.message_id}"


def timestamp_param(value: float | int | str | Decimal) -> str:
    """A timestamp as the exact decimal text ``since_timestamp`` expects.

    A float's ``repr`` is the shortest text that reads back as the same
    double, which for a timestamp from the service is its 6-decimal value.
    """
    if isinstance(value, float):
        return repr(value)
    return str(value)


# ------------------------------------------------------------------ client


class _NotSent(Exception):
    """The connection failed before the request was sent."""


class QueueyClient:
    """A client of one Queuey application, talking to one or more API nodes.

    ``urls``: one base URL or several (``"http://a:5000,http://b:5000"`` or a
    list); requests start at the first and move to the next on failure.
    ``key``: the application key, needed for every method but reads of
    public queues. ``retries``: how many times one call is retried.
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
    ) -> None:
        if isinstance(urls, str):
            urls = [u for u in (part.strip() for part in urls.split(",")) if u]
        self.urls = [u.rstrip("/") for u in urls]
        if not self.urls:
            raise ValueError("QueueyClient needs at least one URL")
        self.application = application
        self.key = key
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._current = 0
        self._sleep = time.sleep
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=16, max_retries=0)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.headers["X-Application-Name"] = application
        self.session.headers["Accept"] = "application/json"
        if key is not None:
            self.session.headers["ApplicationKey"] = key

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> QueueyClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"QueueyClient({self.urls!r}, {self.application!r})"

    # -------------------------------------------------------------- queues

    def create_queue(
        self,
        name: str | None = None,
        partitions: int = 1,
        ttl: int | None = None,
        type: str | None = None,
    ) -> QueueInfo:
        """Create a queue (``Conflict`` if the name exists)."""
        params: dict[str, Any] = {"partitions": partitions}
        if name is not None:
            params["queue_name"] = name
        if ttl is not None:
            params["ttl"] = ttl
        if type is not None:
            params["type"] = type
        return QueueInfo.from_json(self._request("POST", "/queue", json=params))

    def queue_info(self, name: str) -> QueueInfo:
        return QueueInfo.from_json(self._request("GET", f"/queue/{_q(name)}/info"))

    def list_queues(
        self, limit: int = 100, offset: str | None = None, details: bool = False
    ) -> list[QueueInfo | str]:
        """The application's queues by name, starting after ``offset``."""
        params: dict[str, Any] = {"limit": limit}
        if offset is not None:
            params["offset"] = offset
        if details:
            params["details"] = "true"
        data = self._request("GET", "/queue", params=params)
        return [q if isinstance(q, str) else QueueInfo.from_json(q) for q in data["queues"]]

    def iter_queues(self, page_size: int = 100) -> Iterator[QueueInfo]:
        """Every queue of the application, paging through :meth:`list_queues`."""
        offset = None
        while True:
            page = self.list_queues(limit=page_size, offset=offset, details=True)
            yield from page  # type: ignore[misc]
            if len(page) < page_size:
                return
            last = page[-1]
            offset = last.name if isinstance(last, QueueInfo) else last

    def update_queue(
        self,
        name: str,
        partitions: int | None = None,
        ttl: int | None = None,
        type: str | None = None,
    ) -> QueueInfo:
        params: dict[str, Any] = {}
        if partitions is not None:
            params["partitions"] = partitions
        if ttl is not None:
            params["ttl"] = ttl
        if type is not None:
            params["type"] = type
        return QueueInfo.from_json(self._request("PUT", f"/queue/{_q(name)}", json=params))

    def delete_queue(self, name: str, delete: bool = True) -> None:
        """Delete the queue, or with ``delete=False`` only its messages."""
        params = None if delete else {"delete": "false"}
        self._request("DELETE", f"/queue/{_q(name)}", params=params)

    # ------------------------------------------------------------ messages

    def post(
        self,
        name: str,
        body: dict,
        partition: int | None = None,
        partition_key: str | None = None,
        ttl: int | None = None,
    ) -> PostedMessage:
        """Add one message (a JSON object) to a queue."""
        params: dict[str, Any] = {}
        if partition is not None:
            params["partition"] = partition
        if partition_key is not None:
            params["partition_key"] = partition_key
        if ttl is not None:
            params["ttl"] = ttl
        data = self._request("POST", f"/queue/{_q(name)}", params=params, json=body)
        return PostedMessage.from_json(data["messages"][0])

    def post_batch(
        self, name: str, messages: Sequence[dict | OutgoingMessage]
    ) -> list[PostedMessage]:
        """Add many messages at once, all or nothing; answers in input order.

        A plain dict is a message body; use :class:`OutgoingMessage` to place it.
        """
        entries = [m.to_json() if isinstance(m, OutgoingMessage) else {"body": m} for m in messages]
        data = self._request("POST", f"/queue/{_q(name)}/batch", json={"messages": entries})
        return [PostedMessage.from_json(m) for m in data["messages"]]

    def read(
        self,
        name: str,
        since: str | None = None,
        since_timestamp: float | str | Decimal | None = None,
        limit: int = 100,
        order: str = "descending",
        partitions: Sequence[int] | None = None,
    ) -> list[ReceivedMessage]:
        """Messages strictly after ``since`` (an id) / ``since_timestamp``."""
        params: dict[str, Any] = {"limit": limit, "order": order}
        if since is not None:
            params["since"] = since
        if since_timestamp is not None:
            params["since_timestamp"] = timestamp_param(since_timestamp)
        if partitions:
            params["partitions"] = ",".join(str(p) for p in partitions)
        data = self._request("GET", f"/queue/{_q(name)}", params=params)
        return [ReceivedMessage.from_json(m) for m in data["messages"]]

    def iter_messages(
        self,
        name: str,
        partitions: Sequence[int] | None = None,
        since: str | None = None,
        since_timestamp: float | str | Decimal | None = None,
        page_size: int = 1000,
    ) -> Iterator[ReceivedMessage]:
        """Every message from the start (or the bound given), oldest first.

        Pages forward with ``since=<last id seen>``, which never skips a message
        (invariant 2). Stops at the first page shorter than ``page_size``.
        """
        page_size = min(page_size, MAX_READ_LIMIT)
        while True:
            page = self.read(
                name,
                since=since,
                since_timestamp=since_timestamp if since is None else None,
                limit=page_size,
                order="ascending",
                partitions=partitions,
            )
            yield from page
            if len(page) < page_size:
                return
            since = page[-1].message_id

    def get_messages(self, name: str, refs: Sequence[str]) -> list[ReceivedMessage]:
        """The messages among ``refs`` (``"partition:message_id"``) that exist."""
        if not refs:
            return []
        data = self._request("GET", f"/queue/{_q(name)}/messages/{_refs(refs)}")
        return [ReceivedMessage.from_json(m) for m in data["messages"]]

    def delete_messages(self, name: str, refs: Sequence[str]) -> None:
        if refs:
            self._request("DELETE", f"/queue/{_q(name)}/messages/{_refs(refs)}")

    # --------------------------------------------------------- checkpoints

    def get_checkpoints(self, name: str, consumer: str) -> dict[int, str]:
        """How far ``consumer`` recorded it processed each partition."""
        data = self._request("GET", f"/queue/{_q(name)}/checkpoints/{_q(consumer)}")
        return {int(p): str(mid) for p, mid in (data.get("checkpoints") or {}).items()}

    def set_checkpoints(self, name: str, consumer: str, checkpoints: Mapping[int, str]) -> None:
        body = {"checkpoints": {str(p): mid for p, mid in checkpoints.items()}}
        self._request("PUT", f"/queue/{_q(name)}/checkpoints/{_q(consumer)}", json=body)

    # ------------------------------------------------------------- service

    def heartbeat(self) -> dict:
        """The service's ``/__heartbeat__`` answer (raises ``Unavailable`` on 503)."""
        return self._request("GET", "/__heartbeat__")

    # ----------------------------------------------------------- plumbing

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
    ) -> dict:
        """Send one call, retrying and failing over as the module doc says."""
        idempotent = method in IDEMPOTENT
        attempt = 0
        while True:
            base = self.urls[self._current % len(self.urls)]
            retry_after: float | None = None
            try:
                try:
                    response = self.session.request(
                        method, base + path, params=params, json=json, timeout=self.timeout
                    )
                except requests.ConnectionError as exc:
                    if _never_sent(exc):
                        raise _NotSent(str(exc)) from exc
                    raise
            except _NotSent as exc:
                failure: Exception = exc
                reason = f"cannot connect to {base}"
            except (requests.Timeout, requests.ConnectionError) as exc:
                if not idempotent:
                    raise Unavailable(
                        f"{method} {path}: {exc.__class__.__name__} after the request was "
                        "sent; not retried since it may have taken effect"
                    ) from exc
                failure = exc
                reason = f"{exc.__class__.__name__} from {base}"
            else:
                if response.status_code != 503:
                    return _decode(method, path, response)
                failure = _error(method, path, response)
                retry_after = _retry_after(response)
                reason = f"503 from {base}"
            if attempt >= self.retries:
                if isinstance(failure, QueueyError):
                    raise failure
                raise Unavailable(f"{method} {path}: {reason} ({failure})") from failure
            self._current += 1  # fail over to the next node
            delay = self._delay(attempt, retry_after)
            log.warning(
                "%s %s: %s; retry %d/%d in %.2fs",
                method,
                path,
                reason,
                attempt + 1,
                self.retries,
                delay,
            )
            self._sleep(delay)
            attempt += 1

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(self.max_backoff, max(0.0, retry_after))
        return random.uniform(0, min(self.max_backoff, self.backoff * 2**attempt))


def _q(segment: str) -> str:
    return quote(str(segment), safe="")


def _refs(refs: Sequence[str]) -> str:
    return ",".join(quote(str(r), safe=":") for r in refs)


def _never_sent(exc: requests.ConnectionError) -> bool:
    """True if the connection failed before any byte of the request was sent."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    seen = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, NewConnectionError | ConnectTimeoutError | ConnectionRefusedError):
            return True
        nxt = getattr(cause, "reason", None)
        if nxt is None and cause.args and isinstance(cause.args[0], BaseException):
            nxt = cause.args[0]
        cause = nxt if isinstance(nxt, BaseException) else cause.__cause__
    return False


def _retry_after(response: requests.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _decode(method: str, path: str, response: requests.Response) -> dict:
    if response.status_code >= 400:
        raise _error(method, path, response)
    try:
        data = response.json()
    except ValueError as exc:
        raise QueueyError(
            f"{method} {path}: answer is not JSON (HTTP {response.status_code})",
            status=response.status_code,
        ) from exc
    if not isinstance(data, dict) or data.get("status") != "ok":
        raise QueueyError(
            f"{method} {path}: unexpected answer {str(data)[:200]!r}",
            status=response.status_code,
        )
    return data


def _error(method: str, path: str, response: requests.Response) -> QueueyError:
    error_msg: dict[str, str] = {}
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error_msg"), dict):
        error_msg = {str(k): str(v) for k, v in data["error_msg"].items()}
    cls = _BY_STATUS.get(response.status_code, QueueyError)
    detail = "; ".join(f"{k}: {v}" for k, v in error_msg.items()) or response.reason
    return cls(
        f"{method} {path}: HTTP {response.status_code}: {detail}",
        status=response.status_code,
        error_msg=error_msg,
    )
