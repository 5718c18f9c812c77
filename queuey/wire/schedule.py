"""A schedule and its tick state (docs/schedules.rst). Times are epoch seconds;
``state`` is ``active``, ``paused``, ``stopped`` (by the service: ``error`` says
why) or ``ended``. (The classes have no docstring: it would become their
description in ``/openapi.json``.)"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from queuey.wire.record import Record


class ScheduleInfo(Record):
    name: str
    queue: str
    cron: str | None
    interval: int | None
    timezone: str
    start: int | None
    end: int | None
    message: dict[str, Any] = Field(description="the template posted at each tick")
    missed: Literal["latest", "all"]
    paused: bool
    state: Literal["active", "paused", "stopped", "ended"]
    error: str | None = Field(description="why the service stopped it (state stopped)")
    next_tick: int | None = Field(description="epoch seconds; null once ended")
    last_tick: int | None
    posted: int = Field(description="ticks posted")
    created: int


class Schedule(ScheduleInfo):
    status: Literal["ok"]


class ScheduleList(Record):
    status: Literal["ok"]
    schedules: list[ScheduleInfo] = Field(description="ordered by name")
