"""Reading requests through the models of :mod:`queuey.web.schemas`.

Query strings and form bodies are decoded here as strict UTF-8 (WebOb would
raise from deep inside a view); JSON bodies go through :mod:`queuey.jsonio`;
pydantic's :class:`~pydantic.ValidationError` becomes one
:class:`InvalidParameters` naming every bad field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar
from urllib.parse import unquote_to_bytes

from pydantic import BaseModel, ValidationError

from queuey import ids, jsonio
from queuey.core.messages import GROUP_WORDS
from queuey.core.services import services_of
from queuey.errors import ServiceError
from queuey.model import schedules
from queuey.model.flow import GROUP_PATTERN
from queuey.web.schemas import (
    CONSUMER_PATTERN,
    DEAD_LETTER_PATTERN,
    MESSAGE_REF_PATTERN,
    MESSAGE_REFS_PATTERN,
    PARTITIONS_PATTERN,
    PATH_PARAMS,
    QUEUE_NAME_PATTERN,
    QUEUE_REF_PATTERN,
    SUBSCRIPTION_PATTERN,
)
from queuey.web.state import web_state_of

__all__ = [
    "PATTERN_WORDS",
    "InvalidParameters",
    "PayloadTooLarge",
    "field_name",
    "form_or_json",
    "json_body",
    "message_param",
    "parse_pairs",
    "query",
    "path_param",
    "validate",
]

M = TypeVar("M", bound=BaseModel)


class InvalidParameters(ServiceError, entry="invalid_parameters"):
    """400: one entry per bad field."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        super().__init__(", ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = dict(errors)


class PayloadTooLarge(ServiceError, entry="payload_too_large"):
    """413: the body or one message is over the configured limit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def field_name(loc: tuple[int | str, ...], prefix: str = "") -> str:
    """``("messages", 2, "body")`` -> ``messages[2].body``."""
    name = prefix
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += f".{part}" if name else str(part)
    return name or "body"


#: What a value failing each pattern should look like, in words a caller can act on.
PATTERN_WORDS = {
    ids.SECONDS_PATTERN: "must be seconds since the epoch as a plain decimal, e.g. 1700000000.25",
    ids.MESSAGE_ID_PATTERN: "must be a message id (32 hex digits of a version-1 UUID)",
    QUEUE_NAME_PATTERN: "must be 1 to 50 letters, digits, '_' or '-'",
    QUEUE_REF_PATTERN: "must be 1 to 80 letters, digits, '_' or '-' (or end in '.fifo')",
    CONSUMER_PATTERN: "must match [A-Za-z0-9_.-]{1,100}",
    PARTITIONS_PATTERN: "must be a comma list of partition numbers, e.g. 1,3",
    MESSAGE_REFS_PATTERN: "must be a comma list of [partition:]message_id",
    MESSAGE_REF_PATTERN: "must be [partition:]message_id",
    DEAD_LETTER_PATTERN: "must be a queue name (1 to 50 letters, digits, '_' or '-') or empty",
    GROUP_PATTERN: GROUP_WORDS,
}
PATTERN_WORDS.setdefault(SUBSCRIPTION_PATTERN, PATTERN_WORDS[QUEUE_NAME_PATTERN])


def _message(error: Mapping[str, Any]) -> str:
    if error["type"] == "string_pattern_mismatch":
        return PATTERN_WORDS.get(error.get("ctx", {}).get("pattern"), error["msg"])
    if error["type"] == "dict_type":
        return "must be a JSON object"
    return error["msg"]


def errors_of(exc: ValidationError, prefix: str = "") -> dict[str, str]:
    errors: dict[str, str] = {}
    for error in exc.errors(include_url=False, include_input=False):
        errors.setdefault(field_name(error["loc"], prefix), _message(error))
    return errors


def validate(model: type[M], data: Any, partitions: int | None = None) -> M:
    """An instance of ``model``, or :class:`InvalidParameters` naming every bad field.

    ``partitions`` is the queue's partition count, for the checks a static
    schema cannot make (see :mod:`queuey.web.schemas`); rules across fields
    or against the queue's other settings are the views' (they raise
    :class:`InvalidParameters` themselves).
    """
    if not isinstance(data, Mapping):
        raise InvalidParameters({"body": "parameters must be a JSON object"})
    try:
        return model.model_validate(dict(data), context={"partitions": partitions})
    except ValidationError as exc:
        raise InvalidParameters(errors_of(exc)) from None


def parse_pairs(raw: bytes | str) -> dict[str, str]:
    """``a=1&b=2`` (query string or form body) as strict UTF-8; the last value wins.

    Each name and value is decoded on its own, so a bad byte is a 400 naming
    the field it sits in.
    """
    if isinstance(raw, str):
        raw = raw.encode("latin-1")  # WSGI carries the query string's bytes as latin-1
    values: dict[str, str] = {}
    errors: dict[str, str] = {}
    for pair in raw.split(b"&"):
        if not pair:
            continue
        name_bytes, _, value_bytes = pair.partition(b"=")
        name_bytes = unquote_to_bytes(name_bytes.replace(b"+", b" "))
        value_bytes = unquote_to_bytes(value_bytes.replace(b"+", b" "))
        try:
            name = name_bytes.decode("utf-8")
        except UnicodeDecodeError:
            errors[name_bytes.decode("utf-8", "replace")] = "the name is not valid UTF-8"
            continue
        try:
            values[name] = value_bytes.decode("utf-8")
        except UnicodeDecodeError:
            errors[name] = "must be valid UTF-8"
    if errors:
        raise InvalidParameters(errors)
    return values


def query(request) -> dict[str, str]:
    """The query string's parameters (strict UTF-8)."""
    return parse_pairs(request.environ.get("QUERY_STRING", ""))


def limit_of(request) -> int:
    """The largest body the request's route accepts (:mod:`queuey.web.bodies`)."""
    route = getattr(request, "matched_route", None)
    registry = request.registry
    default = services_of(registry).settings.max_form_size
    return (
        web_state_of(registry).body_limits.get(route.name, default)
        if route is not None
        else default
    )


def too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge("body", f"the body is larger than {limit} bytes")


def _body(request) -> bytes:
    """The raw body, 413 if it is over its route's limit (declared or actual)."""
    environ = request.environ
    raw = environ.get("queuey.body")
    if raw is not None:
        return raw
    limit = limit_of(request)
    length = request.content_length
    if length is not None and length > limit:
        raise too_large(limit)
    # Straight from the server's input, without WebOb's copy into a seekable
    # file; read at most one byte over the limit when no length is declared.
    stream = environ.get("wsgi.input")
    if environ.get("webob.is_body_seekable"):
        raw = request.body  # WebOb read it already (a CSRF check reads forms)
    elif length:
        raw = stream.read(length)
    elif length is None and request.is_body_readable:  # chunked, as WebOb decides
        raw = stream.read(limit + 1)
    else:
        raw = b""
    if len(raw) > limit:
        raise too_large(limit)
    environ["queuey.body"] = raw
    return raw


def json_body(request) -> Any:
    """The request body as JSON (415 if it is not JSON, 413 if it is too large)."""
    # The body decides, not the Content-Type: `curl -d '{...}'` labels JSON as a form.
    return jsonio.loads(_body(request))


def form(request) -> dict[str, str]:
    """A form body's fields, strict UTF-8 like :func:`query` (WebOb's
    ``request.POST`` would turn bad bytes into U+FFFD and go on); 413 over
    the route's limit."""
    return parse_pairs(_body(request))


def form_or_json(request) -> Any:
    """Parameters of POST/PUT on queues: a JSON body, or form fields.

    A body that starts with ``{`` is JSON whatever its Content-Type says, so
    ``curl -d '{"partitions": 4}'`` (labelled as a form) does what it means.
    Without a body, the query string holds them. :func:`validate` refuses a
    JSON body that is not an object.
    """
    body = _body(request)
    if not body:
        return query(request)
    if body.lstrip()[:1] != b"{" and request.content_type == "application/x-www-form-urlencoded":
        return parse_pairs(body)
    return jsonio.loads(body)


_PATH_PATTERNS = {name: re.compile(param["pattern"]) for name, param in PATH_PARAMS.items()}
#: A bad path parameter's words: its pattern's, a schedule's name's as the core says them.
_PATH_WORDS = {**PATTERN_WORDS, schedules.NAME_PATTERN: schedules.NAME_WORDS}


def path_param(request, name: str, field: str | None = None) -> str:
    """The path parameter ``name``, checked against its pattern
    (:data:`queuey.web.schemas.PATH_PARAMS`); a bad one is named ``field``
    (default ``name``)."""
    value = request.matchdict[name]
    if not _PATH_PATTERNS[name].fullmatch(value):
        raise InvalidParameters({field or name: _PATH_WORDS[PATH_PARAMS[name]["pattern"]]})
    return value


def message_param(request, meta) -> tuple[str, int | None]:
    """The path's ``message``, ``[partition:]message_id``: the id's text, and
    the partition (None: not given), one of the queue's."""
    partition_text, _, id_text = path_param(request, "message").rpartition(":")
    partition = int(partition_text) if partition_text else None
    if partition is not None and partition > meta.partitions:
        raise InvalidParameters(
            {"message": f"partition {partition} is not between 1 and {meta.partitions}"}
        )
    return id_text, partition
