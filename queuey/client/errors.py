"""The client library's error types, one per kind of answer.

Every error the client raises derives from :class:`ClientError`, which carries
the HTTP status (``None`` when no answer came) and the server's ``error_msg``
dict. They are unrelated to the service's own :class:`queuey.errors.ServiceError`:
the service raises those to *make* an answer, the client raises these when it
*receives* one.
"""

from __future__ import annotations

from collections.abc import Mapping


class ClientError(Exception):
    """Base of every error the client raises.

    ``status`` is the HTTP status (None when no answer came) and ``error_msg``
    the server's ``{"field or reason": "message"}`` dict.

    ``outcome_unknown`` is True when the call may have taken effect although
    it failed: it reached the service and no answer came, or a ``5xx`` came
    (a write that timed out may still have been applied). The client sends
    such a ``POST`` again by itself only when that cannot store a message twice
    (every message has a ``dedup_id``); with its retries used up, or for a
    ``POST`` without one, the caller decides: post again with the same
    ``dedup_id`` (stored once), read back, or accept a duplicate. False when
    the call certainly did nothing (a ``4xx``, or no node could be reached).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error_msg: Mapping[str, str] | None = None,
        outcome_unknown: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_msg: dict[str, str] = dict(error_msg or {})
        self.outcome_unknown = outcome_unknown


class BadRequest(ClientError):
    """400: one or more parameters are invalid; ``error_msg`` names each."""


class Unauthorized(ClientError):
    """401: unknown application or wrong/missing key."""


class Forbidden(ClientError):
    """403: the key is right but this address is not allowed."""


class NotFound(ClientError):
    """404: no such queue or message."""


class Conflict(ClientError):
    """409: the queue exists already."""


class TooLarge(ClientError):
    """413: the body or a message is larger than the service accepts."""


class Unavailable(ClientError):
    """503 (after every retry the method allows), no answer, or no API node reachable."""


class FlowRefused(ClientError):
    """A post refused by flow control (docs/flow.rst); nothing was stored.

    ``field`` names the setting or quota that refused it (``paused``,
    ``post_rate``, ``max_length``, ``max_posts_per_second``...) and
    ``retry_after`` the seconds the service asked to wait (``Retry-After``;
    None when it named none).
    """

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.retry_after = retry_after
        self.field = next(iter(self.error_msg), "")


class QueuePaused(FlowRefused, Unavailable):
    """503 naming ``paused``: the queue takes no posts until an operator resumes it."""


class RateLimited(FlowRefused):
    """429: over a rate (the queue's ``post_rate``, the application's
    ``max_posts_per_second`` or request quota); retry after ``retry_after``."""


class QueueFull(FlowRefused):
    """507: the queue is at its ``max_length`` (overflow ``reject``) or the
    application stores its ``max_messages`` / ``max_bytes``; ``field`` says which."""


_BY_STATUS: dict[int, type[ClientError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    429: RateLimited,
    503: Unavailable,
    507: QueueFull,
}

#: The ``error_msg`` key of a 503 that is a paused queue, not an unavailable service.
PAUSED_FIELD = "paused"


def error_for_status(status: int, error_msg: Mapping[str, str] | None = None) -> type[ClientError]:
    """The error type of an HTTP error status (:class:`ClientError` if it has
    none); a ``503`` naming ``paused`` is :class:`QueuePaused`."""
    if status == 503 and error_msg and PAUSED_FIELD in error_msg:
        return QueuePaused
    return _BY_STATUS.get(status, ClientError)
