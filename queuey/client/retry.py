"""When and how long the client waits before sending a call again.

Retries on one API node are urllib3's: :class:`ClientRetry` is the
:class:`urllib3.util.retry.Retry` mounted on the client's
:class:`requests.adapters.HTTPAdapter`, so they happen inside one
``session.request``. The client adds only the fail-over across nodes on top
(:mod:`queuey.client.http`). The rule is that a call is sent again only when
that cannot change its effect:

* Idempotent methods (``GET``, ``HEAD``, ``PUT``, ``DELETE``, ``OPTIONS``) are
  retried on ``503`` on the same node; the wait is the answer's
  ``Retry-After`` (seconds), capped at ``max_backoff``. An error once the
  connection was made (a read timeout, a dropped connection) is not retried
  on that node (``read=0``): the client sends the call to the next node, so a
  hung node costs one timeout, not ``retries`` of them.
* ``POST`` is never retried here once it may have reached the service: not
  after a read timeout, not after a reset, not after any answer, ``503``
  included. A ``503`` may come after the write was applied (a Cassandra write
  timeout is not a failure to write), so posting again could store the
  message twice. A ``POST`` that is safe to repeat (its messages carry a
  ``dedup_id``, which the client adds by default, or a work-queue call) is
  repeated by the client itself (``repeatable=True`` in
  :meth:`queuey.client.http.QueueyClient._request`), with the same waits;
  any other surfaces with ``outcome_unknown=True``
  (:class:`~queuey.client.errors.ClientError`).
* A connection that could not be made (refused, connect timeout, a name that
  does not resolve: nothing was sent) is not retried here (``connect=0``) but
  surfaces at once, and the client fails over to the next node, for every
  method.
* Other answers, ``4xx`` included, are never retried.

Without ``Retry-After``, the wait before retry number ``n`` (from 0) is full
jitter: uniform in ``[0, min(max_backoff, backoff * 2**n)]`` (:func:`full_jitter`;
:func:`retry_wait` is the whole rule, also used between fail-overs). Every wait
goes through the ``pause`` callable, so a client can measure or shorten them.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from urllib3.response import BaseHTTPResponse
from urllib3.util.retry import Retry

log = logging.getLogger(__name__)

#: Methods that may be sent twice with the effect of once.
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
#: Statuses retried for idempotent methods (and posts with an idempotency key).
RETRY_STATUSES = frozenset({503})


def full_jitter(attempt: int, backoff: float, max_backoff: float) -> float:
    """The wait before retry ``attempt`` (0 for the first) when the server named none."""
    return random.uniform(0, min(max_backoff, backoff * 2**attempt))


def retry_wait(attempt: int, backoff: float, max_backoff: float, asked: float | None) -> float:
    """The wait before retry ``attempt``: ``asked`` (the server's ``Retry-After``)
    capped at ``max_backoff``, or full jitter when the server named none."""
    if asked is None:
        return full_jitter(attempt, backoff, max_backoff)
    return min(asked, max_backoff)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` in seconds (fractions allowed); None if absent or unreadable."""
    value = headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


class ClientRetry(Retry):
    """urllib3's retry state with the client's rules (see the module doc).

    ``pause`` is called with every wait instead of :func:`time.sleep`.
    """

    def __init__(self, *args: Any, pause: Callable[[float], None] = time.sleep, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.pause = pause

    @classmethod
    def policy(
        cls, retries: int, backoff: float, max_backoff: float, pause: Callable[[float], None]
    ) -> ClientRetry:
        """The policy of a client making ``retries`` retries per call."""
        return cls(
            total=retries,
            connect=0,
            read=0,
            status_forcelist=RETRY_STATUSES,
            allowed_methods=IDEMPOTENT,
            backoff_factor=backoff,
            backoff_max=max_backoff,
            raise_on_status=False,
            respect_retry_after_header=True,
            pause=pause,
        )

    def new(self, **kwargs: Any) -> ClientRetry:
        return super().new(pause=self.pause, **kwargs)

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        """Retry a listed status, and only for a method that may be sent twice.

        urllib3's own rule would also retry ``413``/``429`` with ``Retry-After``.
        """
        return status_code in self.status_forcelist and self._is_method_retryable(method)

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: BaseHTTPResponse | None = None,
        error: Exception | None = None,
        _pool: Any = None,
        _stacktrace: Any = None,
    ) -> ClientRetry:
        """Like urllib3's, but any error after connecting is re-raised for a non-idempotent call.

        urllib3 gates only read errors by ``allowed_methods``; others it cannot
        classify (a TLS failure mid-answer) would be retried for ``POST`` too.
        """
        if (
            error is not None
            and not self._is_connection_error(error)
            and (method is None or not self._is_method_retryable(method))
        ):
            raise error.with_traceback(_stacktrace)
        return super().increment(method, url, response, error, _pool, _stacktrace)

    def get_retry_after(self, response: BaseHTTPResponse) -> float | None:
        """``Retry-After`` in seconds (fractions allowed); None if absent or unreadable."""
        return retry_after(response.headers)

    def get_backoff_time(self) -> float:
        return full_jitter(max(0, len(self.history) - 1), self.backoff_factor, self.backoff_max)

    def sleep(self, response: BaseHTTPResponse | None = None) -> None:
        asked = None
        if response is not None and self.respect_retry_after_header:
            asked = self.get_retry_after(response)
        attempt = max(0, len(self.history) - 1)
        delay = retry_wait(attempt, self.backoff_factor, self.backoff_max, asked)
        last = self.history[-1]
        log.warning(
            "%s %s: %s; retry %d/%d in %.2fs",
            last.method,
            last.url,
            f"HTTP {last.status}" if last.status else type(last.error).__name__,
            len(self.history),
            len(self.history) + (self.total or 0),
            delay,
        )
        self.pause(delay)
