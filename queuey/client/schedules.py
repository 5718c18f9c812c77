"""The client's schedule and subscription-filter calls.

Mixed into both clients (:class:`~queuey.client.http.QueueyClient` and
:class:`~queuey.client.aio.AsyncQueueyClient`); each describes its call
(:func:`~queuey.client.answers.call`), which the client sends, so they fail
over between API nodes and retry like every call.
Reads, ``PUT`` and ``DELETE`` are repeated after a lost answer; so are pause
and resume, which have the same effect when repeated. A create is not
repeated once it may have reached the service: a lost answer raises, and the
schedule may exist (``get_schedule`` tells). A schedule is the service's
wire record, :class:`queuey.wire.ScheduleInfo` (docs/schedules.rst).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queuey.client.answers import Call, Calls, call, nothing
from queuey.client.models import path_segment as _q
from queuey.wire import ScheduleInfo

__all__ = ["ScheduleCalls", "ScheduleInfo"]


class ScheduleCalls(Calls):
    """Schedules (``/schedules``) and subscription filters
    (``/queue/{name}/subscriptions``)."""

    @call
    def list_schedules(self) -> Call[list[ScheduleInfo]]:
        """The application's schedules."""
        return Call("GET", "/schedules", _schedules)

    @call
    def get_schedule(self, name: str) -> Call[ScheduleInfo]:
        """One schedule (:class:`~queuey.client.errors.NotFound` if none)."""
        return Call("GET", f"/schedules/{_q(name)}", ScheduleInfo.from_json)

    @call
    def create_schedule(self, fields: Mapping[str, Any]) -> Call[ScheduleInfo]:
        """Create a schedule from the ``POST /schedules`` body ``fields``
        (``name``, ``queue``, ``cron`` or ``interval``, ``message``, ...;
        ``start``/``end`` as epoch seconds or ISO 8601 text). A refused field
        raises :class:`~queuey.client.errors.BadRequest` naming it; an existing
        name :class:`~queuey.client.errors.Conflict`."""
        return Call("POST", "/schedules", ScheduleInfo.from_json, json=dict(fields))

    @call
    def pause_schedule(self, name: str) -> Call[ScheduleInfo]:
        """Stop posting until resumed."""
        return _change_schedule(name, "pause")

    @call
    def resume_schedule(self, name: str) -> Call[ScheduleInfo]:
        """Post again from the next tick (missed ticks are not posted)."""
        return _change_schedule(name, "resume")

    @call
    def delete_schedule(self, name: str) -> Call[None]:
        """Delete the schedule (the messages it posted stay)."""
        return Call("DELETE", f"/schedules/{_q(name)}", nothing)

    @call
    def set_subscription_filter(
        self, queue: str, subscription: str, filter: Mapping[str, Any] | None
    ) -> Call[dict[str, Any] | None]:
        """Give ``subscription`` of ``queue`` the attribute filter ``filter``
        (docs/api.rst), or remove its filter with ``None``; the filter in force
        after the call (``None``: the subscription takes every message)."""
        path = f"/queue/{_q(queue)}/subscriptions/{_q(subscription)}"
        body = {} if filter is None else {"filter": dict(filter)}
        return Call("PUT", path, lambda answer: answer.get("filter") or None, json=body)

    @call
    def subscription_filters(self, queue: str) -> Call[dict[str, dict[str, Any]]]:
        """The filtered subscriptions of ``queue``: subscription -> filter."""
        return Call("GET", f"/queue/{_q(queue)}/subscriptions", _filters)


def _change_schedule(name: str, action: str) -> Call[ScheduleInfo]:
    return Call("POST", f"/schedules/{_q(name)}/{action}", ScheduleInfo.from_json, repeatable=True)


def _schedules(answer: Mapping[str, Any]) -> list[ScheduleInfo]:
    return [ScheduleInfo.from_json(s) for s in answer.get("schedules", [])]


def _filters(answer: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        s["subscription"]: s["filter"] for s in answer.get("subscriptions", []) if s.get("filter")
    }
