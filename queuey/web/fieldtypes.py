"""The REST door's field types: integers, numbers and booleans as JSON gives
them and as query and form text gives them (bounded before conversion; a
boolean's text is only ``true`` or ``false``), the base :class:`Model` of
every request and answer, and the models of flow settings derived from
:data:`queuey.model.flow.FIELDS`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, create_model
from pydantic_core import PydanticCustomError

from queuey.model.flow import fields_of
from queuey.model.flowfield import FlowField, Resource
from queuey.wire.record import Record

#: An integer as text: bounded digits, checked before ``int()`` sees it.
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]{1,18}")
#: A decimal as text (no exponent), checked before ``float()`` sees it.
_NUMBER_TEXT = re.compile(r"[+-]?[0-9]{1,18}(\.[0-9]{1,18})?([eE][+-]?[0-9]{1,3})?")


def _integer(value: Any) -> Any:
    """Integers from JSON numbers or from query/form text, never from booleans."""
    if isinstance(value, bool):
        raise PydanticCustomError("integer", "must be an integer")
    if isinstance(value, str):
        if not _INTEGER_TEXT.fullmatch(value):
            raise PydanticCustomError("integer", "must be an integer")
        return int(value)
    return value


def _number(value: Any) -> Any:
    """Numbers from JSON or from query/form text, never from booleans."""
    if isinstance(value, bool):
        raise PydanticCustomError("number", "must be a number")
    if isinstance(value, str):
        if not _NUMBER_TEXT.fullmatch(value):
            raise PydanticCustomError("number", "must be a number (a plain decimal)")
        return float(value)
    return value


def _boolean(value: Any) -> Any:
    """JSON ``true``/``false``, or the text ``true``/``false`` in a query or a
    form (any case); never a number nor another word (``0``, ``on``), as the
    schema's boolean says."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise PydanticCustomError("boolean", "must be true or false")
    return value


def Integer(low: int, high: int, **field: Any) -> Any:  # noqa: N802 - a type factory
    return Annotated[int, Field(ge=low, le=high, **field), BeforeValidator(_integer)]


def Number(low: float, high: float, **field: Any) -> Any:  # noqa: N802 - a type factory
    return Annotated[
        float, Field(ge=low, le=high, allow_inf_nan=False, **field), BeforeValidator(_number)
    ]


Boolean = Annotated[bool, BeforeValidator(_boolean)]


class Model(Record):
    """A request or answer model, configured as the wire records are
    (:class:`queuey.wire.record.Record`: unknown fields ignored, inputs never
    echoed back in errors). An optional field defaults to ``None`` ("not
    given") but an explicit ``null`` is refused, as the schema (which has no
    null) says.
    """


def flow_type(field: FlowField) -> Any:
    """What a request may give for a flow setting (:data:`queuey.model.flow.FIELDS`)."""
    if field.kind == "flag":
        return Boolean
    if field.kind == "choice":
        return Literal[field.values]
    if field.kind == "count":
        return Integer(0, field.high)
    return Number(0, field.high, multiple_of=10.0**-field.places)


def flow_model(resource: Resource, name: str) -> type[Model]:
    """A model of the resource's flow settings: those absent stay as they are;
    0 or false turns one off."""
    fields = {
        f.name: (flow_type(f), Field(None, description=f.description)) for f in fields_of(resource)
    }
    return create_model(name, __base__=Model, __doc__=flow_model.__doc__, **fields)
