"""Reading request parameters: every bad field is named in one 400 answer.

A :class:`Params` collects errors while views read fields, then ``check()``
raises :class:`InvalidParameters` with all of them at once.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

from queuey import ids
from queuey.coerce import as_bool
from queuey.errors import ServiceError

QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,50}$")
CONSUMER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
ORDERS = ("descending", "ascending")


class InvalidParameters(ServiceError):
    """400: one entry per bad field."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        super().__init__(", ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = dict(errors)


class PayloadTooLarge(ServiceError):
    """413: the body or one message is over the configured limit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class NotJSON(ServiceError):
    """415: the body is not JSON."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(raw: bytes) -> Any:
    """Strict JSON (no NaN/Infinity); :class:`NotJSON` otherwise."""
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise NotJSON(f"the body is not valid JSON: {exc}") from exc


def dump_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def json_body(request, limit: int) -> Any:
    """The request body as JSON (415 if it is not JSON, 413 if it is too large)."""
    length = request.content_length
    if length is not None and length > limit:
        raise PayloadTooLarge("body", f"the body is larger than {limit} bytes")
    # The body decides, not the Content-Type: `curl -d '{...}'` labels JSON as a form.
    raw = request.body
    if len(raw) > limit:
        raise PayloadTooLarge("body", f"the body is larger than {limit} bytes")
    return parse_json(raw)


def form_or_json(request, limit: int) -> Mapping[str, Any]:
    """Parameters of POST/PUT on queues: a JSON object body, or form fields.

    A body that starts with ``{`` is JSON whatever its Content-Type says, so
    ``curl -d '{"partitions": 4}'`` (labelled as a form) does what it means.
    """
    if not request.body:
        return request.GET
    if request.body.lstrip()[:1] != b"{" and request.content_type in (
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ):
        return request.POST
    body = json_body(request, limit)
    if not isinstance(body, dict):
        raise InvalidParameters({"body": "parameters must be a JSON object"})
    return body


class Params:
    """Typed access to a mapping of parameters, collecting every error."""

    def __init__(self, source: Mapping[str, Any], prefix: str = "") -> None:
        self.source = source
        self.prefix = prefix
        self.errors: dict[str, str] = {}

    def _fail(self, name: str, message: str) -> None:
        self.errors.setdefault(self.prefix + name, message)

    def has(self, name: str) -> bool:
        value = self.source.get(name)
        return value is not None and value != ""

    def integer(self, name: str, default: int | None, low: int, high: int) -> int | None:
        if not self.has(name):
            return default
        raw = self.source[name]
        if isinstance(raw, bool):
            self._fail(name, "must be an integer")
            return default
        try:
            value = int(raw) if not isinstance(raw, float) or raw.is_integer() else None
        except (TypeError, ValueError):
            value = None
        if value is None:
            self._fail(name, "must be an integer")
            return default
        if not low <= value <= high:
            self._fail(name, f"must be between {low} and {high}")
            return default
        return value

    def choice(self, name: str, default: str | None, choices: tuple[str, ...]) -> str | None:
        if not self.has(name):
            return default
        value = self.source[name]
        if value not in choices:
            self._fail(name, f"must be one of {', '.join(choices)}")
            return default
        return value

    def pattern(self, name: str, default: str | None, regex: re.Pattern, what: str) -> str | None:
        if not self.has(name):
            return default
        value = self.source[name]
        if not isinstance(value, str) or not regex.match(value):
            self._fail(name, what)
            return default
        return value

    def string(self, name: str, max_length: int = 1000) -> str | None:
        if not self.has(name):
            return None
        value = self.source[name]
        if not isinstance(value, str) or len(value) > max_length:
            self._fail(name, f"must be a string of at most {max_length} characters")
            return None
        return value

    def boolean(self, name: str, default: bool) -> bool:
        if not self.has(name):
            return default
        try:
            return as_bool(self.source[name])
        except ValueError:
            self._fail(name, "must be true or false")
            return default

    def message_id(self, name: str) -> uuid.UUID | None:
        if not self.has(name):
            return None
        try:
            return ids.parse_id(str(self.source[name]))
        except ids.InvalidId:
            self._fail(name, "must be a message id (32 hex digits of a version-1 UUID)")
            return None

    def timestamp(self, name: str) -> int | None:
        """Seconds since the epoch (decimal) as microseconds."""
        if not self.has(name):
            return None
        try:
            micros = ids.seconds_to_micros(self.source[name])
        except ValueError:
            self._fail(name, "must be seconds since the epoch, a decimal number")
            return None
        if not 0 <= micros < 2**62 // 10:
            self._fail(name, "out of range")
            return None
        return micros

    def partitions(self, name: str, count: int) -> list[int] | None:
        """A comma list of partition numbers, each within 1..count."""
        if not self.has(name):
            return None
        chosen: list[int] = []
        for item in str(self.source[name]).split(","):
            try:
                number = int(item)
            except ValueError:
                self._fail(name, "must be a comma list of partition numbers")
                return None
            if not 1 <= number <= count:
                self._fail(name, f"partition {number} is not between 1 and {count}")
                return None
            if number not in chosen:
                chosen.append(number)
        return chosen

    def fail(self, name: str, message: str) -> None:
        self._fail(name, message)

    def check(self) -> None:
        if self.errors:
            raise InvalidParameters(self.errors)


def queue_name(name: str) -> str:
    if not QUEUE_NAME.match(name):
        raise InvalidParameters({"queue_name": "must match [A-Za-z0-9_-]{1,50}"})
    return name
