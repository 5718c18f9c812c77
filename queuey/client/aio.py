"""The asyncio client: :class:`AsyncQueueyClient`, the calls of
:class:`~queuey.client.http.QueueyClient` over :class:`httpx.AsyncClient`.

Nothing of a call is declared here: each is declared once, in
:class:`~queuey.client.http.BaseClient` and the calls it mixes in
(:mod:`~queuey.client.workqueue`, :mod:`~queuey.client.flow`,
:mod:`~queuey.client.schedules`), as a :class:`~queuey.client.answers.Call`
(what it sends, how its answer is read). This module only sends them: the
same methods, each awaited, the same answer models and the same errors; the
same fail-over between API nodes and the same retries
(:class:`~queuey.client.answers.Attempts`), a ``503`` of a call safe to repeat
included (the blocking client leaves that to urllib3). ``iter_queues`` and
``iter_messages`` are async iterators.

A long-poll ``reserve`` waits without holding a thread: cancelling the task
that awaits it (``task.cancel()``, a timeout, a disconnected FastAPI
request) ends the wait at once. The service does not see that: a WSGI server
runs the poll to its end, so a message posted meanwhile is still leased to
the abandoned poll, and would stay hidden for its visibility timeout. So the
client keeps the abandoned call open in the background (up to its ``wait``)
and releases at once whatever it brings (``Call.undo``): the message is
handed to the next ``reserve`` within moments, its ``attempts`` counting
that delivery (a queue's ``max_attempts`` counts it too). :meth:`aclose`
cancels those background calls; what they would have brought then comes back
after its visibility timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeVar

import httpx

from queuey.client.answers import BROKEN, LOST, UNSENT, Attempts, Call, Reply
from queuey.client.errors import ClientError
from queuey.client.http import BaseClient
from queuey.client.retry import IDEMPOTENT
from queuey.tracing import request_headers

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["AsyncQueueyClient"]


class AsyncQueueyClient(BaseClient):
    """:class:`~queuey.client.http.QueueyClient`'s calls for asyncio: the same
    arguments, each method awaited (``async with AsyncQueueyClient(urls,
    application, key) as client: await client.post(...)``).

    Make it inside the event loop that uses it (its connections belong to
    that loop), and close it with :meth:`aclose` (or ``async with``).
    """

    def _open(self) -> None:
        self.http = httpx.AsyncClient(headers=self.headers(), timeout=self.timeout)
        #: Calls whose caller was cancelled, finishing to undo their result.
        self._abandoned: set[asyncio.Task] = set()

    async def aclose(self) -> None:
        """Close the connections; calls abandoned by cancelled callers end too."""
        for task in self._abandoned:
            task.cancel()
        await asyncio.gather(*self._abandoned, return_exceptions=True)
        await self.http.aclose()

    async def __aenter__(self) -> AsyncQueueyClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _send(self, call: Call[T]) -> T:  # type: ignore[override]
        if call.method is None:
            return call.parse({})
        sent = self._request(call.method, call.path, **call.options)
        if call.undo is None:
            return call.parse(await sent)
        task = asyncio.ensure_future(sent)
        try:
            data = await asyncio.shield(task)
        except asyncio.CancelledError:
            self._abandon(task, call)
            raise
        return call.parse(data)

    def _abandon(self, task: asyncio.Future, call: Call[Any]) -> None:
        """Let the call whose caller was cancelled finish, and undo its result."""

        async def undo() -> None:
            try:
                result = call.parse(await task)
                await self._send(call.undo(result))  # type: ignore[misc]
            except (ClientError, ValueError, KeyError) as exc:
                log.warning("%s %s, abandoned by its caller: %s", call.method, call.path, exc)

        undoing = asyncio.get_running_loop().create_task(undo())
        self._abandoned.add(undoing)
        undoing.add_done_callback(self._abandoned.discard)

    async def _paged(self, page, after, cursor) -> AsyncIterator:  # type: ignore[override]
        while True:
            found = await self._send(page(cursor))
            for item in found:
                yield item
            if (cursor := after(found)) is None:
                return

    async def _request(  # type: ignore[override]
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        repeatable: bool | None = None,
        timeout: float | None = None,
    ) -> dict:
        """Send one call by :class:`~queuey.client.answers.Attempts`' rules
        (see :meth:`QueueyClient._request <queuey.client.http.QueueyClient._request>`);
        with no urllib3 underneath, a repeatable call's ``503`` is repeated here."""
        if repeatable is None:
            repeatable = method in IDEMPOTENT
        tries = Attempts(self, method, path, repeatable, repeatable)
        while True:
            try:
                response = await self.http.request(
                    method,
                    tries.base + path,
                    params=params,
                    json=json,
                    headers=request_headers(),
                    timeout=timeout or self.timeout,
                )
            except httpx.HTTPError as exc:
                delay = tries.failed(exc, httpx_failure(exc))
            else:
                reply = Reply(
                    response.status_code, response.reason_phrase, response.headers, response.content
                )
                if (delay := tries.answered(reply)) is None:
                    return tries.decode(reply)
            await asyncio.sleep(delay)


def httpx_failure(exc: httpx.HTTPError) -> str:
    """What became of an attempt that raised ``exc``
    (:data:`~queuey.client.answers.UNSENT`, ...)."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return UNSENT
    if isinstance(exc, httpx.TimeoutException | httpx.NetworkError | httpx.RemoteProtocolError):
        return LOST
    return BROKEN
