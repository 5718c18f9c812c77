"""The base of every wire record and the value types several of them share.

A record is a frozen pydantic model of one JSON object the API answers: the
service describes its answers with it (``/openapi.json``) and the client parses
answers into it. Unknown fields are ignored, so an older client reads a newer
service's answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from queuey import ids

QueueType = Literal["public", "private"]
Consistency = Literal["weak", "strong", "very_strong"]
MessageId = Annotated[
    str,
    StringConstraints(pattern=ids.MESSAGE_ID_PATTERN),
    Field(description="32 hex digits of a version-1 UUID"),
]


class Record(BaseModel):
    """Unknown fields are ignored; inputs are never echoed back in errors.

    An optional field defaults to ``None`` ("not given"). No ``__init__`` of
    its own: pydantic would call it for nested records and lose the
    validation context.
    """

    model_config = ConfigDict(extra="ignore", hide_input_in_errors=True, frozen=True)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        """The record of one JSON object of an answer (validated)."""
        return cls.model_validate(data)
