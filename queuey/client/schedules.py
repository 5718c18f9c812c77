"""The client's schedule and subscription-filter calls.

Mixed into :class:`~queuey.client.http.QueueyClient`; they go through its
``_request``, so they fail over between API nodes and retry like every call.
Reads, ``PUT`` and ``DELETE`` are repeated after a lost answer; so are pause
and resume, which have the same effect when repeated. A create is not
repeated once it may have reached the service: a lost answer raises, and the
schedule may exist (``get_schedule`` tells).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from queuey.client.models import path_segment as _q


@dataclass(frozen=True)
class ScheduleInfo:
    """A schedule as the service shows it (docs/schedules.rst). Times are epoch
    seconds; ``state`` is ``active``, ``paused``, ``stopped`` (by the service:
    ``error`` says why) or ``ended``."""

    name: str
    queue: str
    cron: str | None
    interval: int | None
    timezone: str
    start: int | None
    end: int | None
    message: Mapping[str, Any] = field(default_factory=dict)
    missed: str = "latest"
    paused: bool = False
    state: str = "active"
    error: str | None = None
    next_tick: int | None = None
    last_tick: int | None = None
    posted: int = 0
    created: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ScheduleInfo:
        return cls(
            name=data["name"],
            queue=data["queue"],
            cron=data.get("cron"),
            interval=data.get("interval"),
            timezone=data.get("timezone", "UTC"),
            start=data.get("start"),
            end=data.get("end"),
            message=data.get("message") or {},
            missed=data.get("missed", "latest"),
            paused=bool(data.get("paused", False)),
            state=data.get("state", "active"),
            error=data.get("error"),
            next_tick=data.get("next_tick"),
            last_tick=data.get("last_tick"),
            posted=data.get("posted", 0),
            created=data.get("created", 0),
        )


class ScheduleCalls:
    """Schedules (``/schedules``) and subscription filters
    (``/queue/{name}/subscriptions``).

    Needs the host class's ``_request(method, path, *, params, json,
    repeatable, timeout)``.
    """

    def _request(self, method: str, path: str, **kwargs: Any) -> dict:  # pragma: no cover
        raise NotImplementedError

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
