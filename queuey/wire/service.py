"""What the service says about itself: its health and its build."""

from __future__ import annotations

from typing import Literal

from queuey.wire.record import Record


class Heartbeat(Record):
    status: Literal["ok", "error"]
    checks: dict[str, Literal["ok", "unavailable"]]


class Version(Record):
    status: Literal["ok"]
    name: str
    version: str
    storage: str
