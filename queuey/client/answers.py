"""Each call described once, and what came back from it: a result, a retry or a typed error.

Both clients share this module; only their transports differ
(:class:`~queuey.client.http.QueueyClient` sends with requests,
:class:`~queuey.client.aio.AsyncQueueyClient` with httpx). A client method is
the description of its call (:class:`Call`: method, path, parameters, body,
how its answer is read), made by the client's ``_send`` (:func:`call`).
:class:`Attempts` decides, for one call, which node each attempt goes to and
whether a failure is tried again; :func:`never_sent` says of a requests error
whether it is safe to send again anywhere; :func:`decode` reads an answer
(:class:`Reply`) into the API's JSON or a
:class:`~queuey.client.errors.ClientError` whose ``outcome_unknown`` tells
whether the call may have taken effect.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

import requests
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from queuey.client.errors import (
    PAUSED_FIELD,
    ClientError,
    FlowRefused,
    Unavailable,
    error_for_status,
)
from queuey.client.models import HostCalls
from queuey.client.retry import RETRY_STATUSES, retry_after, retry_wait

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")
C = TypeVar("C", bound="Calls")


def unchanged(data: dict) -> dict:
    """The answer itself (a call whose result is the API's JSON)."""
    return data


def nothing(data: dict) -> None:
    """No result (a call made for its effect)."""
    return None


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API call, described and not sent: what it sends, and ``parse``,
    which makes its result of the answer's JSON.

    ``repeatable``: whether it may be sent again once it may have reached the
    service (by default, whether its method is idempotent); ``timeout``: its
    own when it differs from the client's (a long poll). ``undo``: for a call
    whose caller may give up while the service still acts on it (a long poll),
    the call that undoes its result (or None); the asyncio client sends it
    when its caller is cancelled. ``method`` None: no request is needed, the
    result is ``parse({})`` (:meth:`answered`).
    """

    method: str | None
    path: str
    parse: Callable[[dict], T]
    params: Mapping[str, Any] | None = None
    json: Any = None
    repeatable: bool | None = None
    timeout: float | None = None
    undo: Callable[[T], Call[Any]] | None = None

    @classmethod
    def answered(cls, result: T) -> Call[T]:
        """A call that needs no request: its result is ``result``."""
        return cls(None, "", lambda _: result)

    @property
    def options(self) -> dict[str, Any]:
        """The keyword arguments of the client's ``_request``."""
        return {
            "params": self.params,
            "json": self.json,
            "repeatable": self.repeatable,
            "timeout": self.timeout,
        }


def call(describe: Callable[Concatenate[C, P], Call[T]]) -> Callable[Concatenate[C, P], T]:
    """A client method made of ``describe``, which returns its :class:`Call`:
    the client's ``_send`` makes the call. On the asyncio client the method
    returns an awaitable of the result. ``method.describe`` is ``describe``."""

    @functools.wraps(describe)
    def method(self: C, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._send(describe(self, *args, **kwargs))

    # What help() and the docs show: the result's type, not the description's.
    result = re.sub(r"^Call\[(.*)\]$", r"\1", describe.__annotations__.get("return", ""))
    method.__annotations__ = {**describe.__annotations__, "return": result}
    method.__signature__ = inspect.signature(describe).replace(  # type: ignore[attr-defined]
        return_annotation=result
    )
    method.describe = describe  # type: ignore[attr-defined]
    return method


class Calls(HostCalls):
    """Methods made by :func:`call`, sent through the host's ``_request``
    (the blocking client's; the asyncio client has a ``_send`` of its own)."""

    def _send(self, call: Call[T]) -> T:
        if call.method is None:
            return call.parse({})
        return call.parse(self._request(call.method, call.path, **call.options))


@dataclass(frozen=True)
class Reply:
    """An HTTP answer as both transports hand it over."""

    status: int
    reason: str
    headers: Mapping[str, str]
    content: bytes

    def json(self) -> Any:
        """The body's JSON (``ValueError`` if it is none)."""
        return json.loads(self.content)


#: What became of an attempt that brought no answer: the connection failed
#: before anything was sent (refused, connect timeout, unknown host) ...
UNSENT = "unsent"
#: ... it was (maybe) sent and no answer came (a read timeout, a reset) ...
LOST = "lost"
#: ... or the answer came but broke off (a truncated body, a bad encoding).
BROKEN = "broken"


class Attempts:
    """One call's attempts over the ``client``'s nodes (``urls``, ``retries``,
    ``backoff``, ``max_backoff``, and ``_current``, the node the next call
    starts at): where each goes, and after a failure whether it is sent again
    (after the wait :meth:`failed` and :meth:`answered` return) or raised.

    ``repeat_here``: whether a ``503`` or a broken answer is repeated by this
    loop; the blocking client leaves idempotent methods' to urllib3
    (:mod:`queuey.client.retry`).
    """

    def __init__(
        self, client: Any, method: str, path: str, repeatable: bool, repeat_here: bool
    ) -> None:
        self.client = client
        self.method = method
        self.path = path
        self.repeatable = repeatable
        self.repeat_here = repeat_here
        self.attempt = 0

    @property
    def base(self) -> str:
        """The URL of the node the next attempt goes to."""
        return self.client.urls[self.client._current % len(self.client.urls)]

    @property
    def more(self) -> bool:
        return self.attempt < self.client.retries

    def failed(self, exc: Exception, what: str) -> float:
        """The wait before sending again after ``exc`` (:data:`UNSENT`,
        :data:`LOST` or :data:`BROKEN`); raises when the call is not sent again."""
        base = self.base
        if what == UNSENT:
            if not self.more:
                raise Unavailable(
                    f"{self.method} {self.path}: cannot connect to {base} ({exc})"
                ) from exc
            self.client._current += 1  # fail over to the next node
            return self._again(f"cannot connect to {base}")
        again = self.repeat_here
        if what == LOST:
            # A node that took the call and never answered is left, so
            # neither a retry nor the next call waits on it again.
            self.client._current += 1
            again = self.repeatable
        if not (again and self.more):
            raise sent_and_failed(self.method, self.path, base, exc, self.repeatable) from exc
        return self._again(f"{exc.__class__.__name__} from {base}")

    def answered(self, reply: Reply) -> float | None:
        """None when ``reply`` is the call's answer (:meth:`decode` it), else
        the wait before sending again."""
        retry = self.repeat_here and self.more and reply.status in RETRY_STATUSES
        # A paused queue stays paused until an operator resumes it:
        # its 503 is the caller's to handle, not a blip to retry.
        if not retry or paused(reply):
            return None
        return self._again(f"HTTP {reply.status} from {self.base}", retry_after(reply.headers))

    def decode(self, reply: Reply) -> dict:
        return decode(self.method, self.path, reply, self.repeatable)

    def _again(self, reason: str, asked: float | None = None) -> float:
        """The wait before the next attempt; ``asked``: the server's (``Retry-After``)."""
        client = self.client
        delay = retry_wait(self.attempt, client.backoff, client.max_backoff, asked)
        log.warning(
            "%s %s: %s; retry %d/%d in %.2fs",
            self.method,
            self.path,
            reason,
            self.attempt + 1,
            client.retries,
            delay,
        )
        self.attempt += 1
        return delay


def never_sent(exc: requests.RequestException) -> bool:
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


def requests_failure(exc: requests.RequestException) -> str:
    """What became of an attempt that raised ``exc`` (:data:`UNSENT`, ...)."""
    if isinstance(exc, requests.Timeout | requests.ConnectionError):
        return UNSENT if never_sent(exc) else LOST
    return BROKEN


def sent_and_failed(
    method: str, path: str, base: str, exc: Exception, repeatable: bool
) -> Unavailable:
    """The error for a call whose answer never came after it was (maybe) sent."""
    if not repeatable:
        return Unavailable(
            f"{method} {path}: {exc.__class__.__name__} after the request was "
            "sent; not retried since it may have taken effect",
            outcome_unknown=True,
        )
    return Unavailable(
        f"{method} {path}: {exc.__class__.__name__} from {base} ({exc})", outcome_unknown=True
    )


def decode(method: str, path: str, reply: Reply, repeatable: bool) -> dict:
    if reply.status >= 400:
        raise error(method, path, reply, repeatable)
    status = reply.status
    try:
        data = reply.json()
    except ValueError as exc:
        raise _unusable(method, path, status, f"answer is not JSON (HTTP {status})") from exc
    if not isinstance(data, dict) or data.get("status") != "ok":
        raise _unusable(method, path, status, f"unexpected answer {str(data)[:200]!r}")
    return data


def _unusable(method: str, path: str, status: int, what: str) -> ClientError:
    """An answer that is no error and yet not the API's: the call may have taken effect."""
    return ClientError(f"{method} {path}: {what}", status=status, outcome_unknown=True)


def error_msg_of(reply: Reply) -> dict[str, str]:
    """The answer's ``error_msg`` (empty when it has none or is not JSON)."""
    try:
        data = reply.json()
    except ValueError:
        return {}
    if isinstance(data, dict) and isinstance(data.get("error_msg"), dict):
        return {str(k): str(v) for k, v in data["error_msg"].items()}
    return {}


def paused(reply: Reply) -> bool:
    """True for a paused queue's refusal: a ``503`` no retry soon would change."""
    return reply.status == 503 and PAUSED_FIELD in error_msg_of(reply)


def error(method: str, path: str, reply: Reply, repeatable: bool) -> ClientError:
    """The typed error of an error answer; a ``5xx`` leaves the outcome unknown,
    but a flow-control refusal, which stored nothing."""
    error_msg = error_msg_of(reply)
    cls = error_for_status(reply.status, error_msg)
    detail = "; ".join(f"{k}: {v}" for k, v in error_msg.items()) or reply.reason
    refused = issubclass(cls, FlowRefused)
    unknown = not refused and reply.status >= 500
    note = "; not retried since it may have taken effect" if unknown and not repeatable else ""
    outcome = {"retry_after": retry_after(reply.headers)} if refused else {}
    return cls(
        f"{method} {path}: HTTP {reply.status}: {detail}{note}",
        status=reply.status,
        error_msg=error_msg,
        outcome_unknown=unknown,
        **outcome,
    )
