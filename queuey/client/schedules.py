"""The client's schedule and subscription-filter calls.

Mixed into :class:`~queuey.client.http.QueueyClient`; they go through its
``_request``, so they fail over between API nodes and retry like every call.
Reads, ``PUT`` and ``DELETE`` are repeated after a lost answer; so are pause
and resume, which have the same effect when repeated. A create is not
repeated once it may have reached the service: a lost answer raises, and the
schedule may exist (``get_schedule`` tells). A schedule is the service's
wire record, :class:`queuey.wire.ScheduleInfo` (docs/schedules.rst).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queuey.client.models import HostCalls
from queuey.client.models import path_segment as _q
from queuey.wire import ScheduleInfo

__all__ = ["ScheduleCalls", "ScheduleInfo"]


class ScheduleCalls(HostCalls):
    """Schedules (``/schedules``) and subscription filters
    (``/queue/{name}/subscriptions``)."""

    def list_schedules(self) -> list[ScheduleInfo]:
        """The application's schedules."""
        answer = self._request("GET", "/schedules")
        return [ScheduleInfo.from_json(s) for s in answer.get("schedules", [])]

    def get_schedule(self, name: str) -> ScheduleInfo:
        """One schedule (:class:`~queuey.client.errors.NotFound` if none)."""
        return ScheduleInfo.from_json(self._request("GET", f"/schedules/{_q(name)}"))

    def create_schedule(self, fields: Mapping[str, Any]) -> ScheduleInfo:
        """Create a schedule from the ``POST /schedules`` body ``fields``
        (``name``, ``queue``, ``cron`` or ``interval``, ``message``, ...;
        ``start``/``end`` as epoch seconds or ISO 8601 text). A refused field
        raises :class:`~queuey.client.errors.BadRequest` naming it; an existing
        name :class:`~queuey.client.errors.Conflict`."""
        return ScheduleInfo.from_json(self._request("POST", "/schedules", json=dict(fields)))

    def pause_schedule(self, name: str) -> ScheduleInfo:
        """Stop posting until resumed."""
        return self._change_schedule(name, "pause")

    def resume_schedule(self, name: str) -> ScheduleInfo:
        """Post again from the next tick (missed ticks are not posted)."""
        return self._change_schedule(name, "resume")

    def delete_schedule(self, name: str) -> None:
        """Delete the schedule (the messages it posted stay)."""
        self._request("DELETE", f"/schedules/{_q(name)}")

    def _change_schedule(self, name: str, action: str) -> ScheduleInfo:
        answer = self._request("POST", f"/schedules/{_q(name)}/{action}", repeatable=True)
        return ScheduleInfo.from_json(answer)

    def set_subscription_filter(
        self, queue: str, subscription: str, filter: Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        """Give ``subscription`` of ``queue`` the attribute filter ``filter``
        (docs/api.rst), or remove its filter with ``None``; the filter in force
        after the call (``None``: the subscription takes every message)."""
        path = f"/queue/{_q(queue)}/subscriptions/{_q(subscription)}"
        body = {} if filter is None else {"filter": dict(filter)}
        answer = self._request("PUT", path, json=body)
        return answer.get("filter") or None

    def subscription_filters(self, queue: str) -> dict[str, dict[str, Any]]:
        """The filtered subscriptions of ``queue``: subscription -> filter."""
        answer = self._request("GET", f"/queue/{_q(queue)}/subscriptions")
        return {
            s["subscription"]: s["filter"]
            for s in answer.get("subscriptions", [])
            if s.get("filter")
        }
