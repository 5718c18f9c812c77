"""The two envelopes every answer has: ``{"status": "ok"}`` and the error shape."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from queuey.wire.record import Record


class Ok(Record):
    status: Literal["ok"]


class Error(Record):
    status: Literal["error"]
    error_msg: dict[str, str] = Field(description="one entry per bad field or reason")
