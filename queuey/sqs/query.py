"""The SQS query protocol, and the type checks both protocols share.

:func:`parse_query` turns ``Action=...`` parameters into the JSON protocol's
input (``Attribute.1.Name=VisibilityTimeout&Attribute.1.Value=5`` becomes
``{"Attributes": {"VisibilityTimeout": "5"}}``), :func:`validate_json` checks a
JSON protocol input against the same shapes, and :func:`render_result` /
:func:`render_error` write the XML answers. The shapes are the action
table's (:mod:`.api`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any
from xml.sax.saxutils import escape

from queuey.sqs.api import ACTIONS, Member, Shape
from queuey.sqs.errors import SQSError, invalid
from queuey.sqs.messages import INVALID_TEXT

XMLNS = "http://queue.amazonaws.com/doc/2012-11-05/"
#: Parameters the query protocol adds around an action's own.
ENVELOPE = frozenset({"Action", "Version", "AWSAccessKeyId", "Signature", "SignatureMethod"})
#: Most elements in one list or map of a request.
MAX_ITEMS = 1000
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
_INTEGER = re.compile(r"^-?[0-9]{1,19}$")


def _invalid(name: str, reason: str) -> SQSError:
    return invalid(f"Value for parameter {name} is invalid. {reason}")


def _shapes(action: str) -> tuple[Shape, Shape]:
    try:
        found = ACTIONS[action]
    except KeyError:
        raise SQSError("InvalidAction", f"The action {action[:100]} is not valid.") from None
    return found.input, found.output


# -- query protocol in -------------------------------------------------------------
class _Pairs:
    """The request's parameters, with each dotted prefix's children indexed."""

    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        self.values: dict[str, str] = {}
        self.children: dict[str, set[str]] = defaultdict(set)
        for key, value in pairs:
            if key in ENVELOPE or key.startswith("X-Amz-"):
                continue
            self.values.setdefault(key, value)
            parts = key.split(".")
            for depth in range(1, len(parts)):
                self.children[".".join(parts[:depth])].add(parts[depth])

    def has(self, prefix: str) -> bool:
        return prefix in self.values or prefix in self.children

    def indexes(self, prefix: str) -> list[int]:
        found = sorted(int(s) for s in self.children.get(prefix, ()) if s.isdigit() and len(s) <= 4)
        if len(found) > MAX_ITEMS or (found and found[0] < 1):
            raise SQSError("MalformedQueryString", f"{prefix}: index out of range.")
        return found


def parse_query(action: str, pairs: Sequence[tuple[str, str]]) -> dict:
    """The action's input from query-protocol parameters."""
    shape, _ = _shapes(action)
    found = _Pairs(pairs)
    result = _read_structure(found, shape, "")
    _check_required(shape, result, "")
    return result


def _read_structure(found: _Pairs, shape: Shape, prefix: str) -> dict:
    out: dict[str, Any] = {}
    base = prefix + "." if prefix else ""
    for name, member in shape.members.items():
        path = base + (member.shape.item or member.wire or name)
        # A list or map may also be sent under its member's own name.
        if member.shape.kind in ("list", "map") and not found.has(path) and found.has(base + name):
            path = base + name
        if found.has(path):
            value = _read(found, member.shape, path, name)
            if value is not None:
                out[name] = value
    return out


def _read(found: _Pairs, shape: Shape, path: str, name: str) -> Any:
    kind = shape.kind
    if kind == "structure":
        value = _read_structure(found, shape, path)
        _check_required(shape, value, path)
        return value
    if kind == "list":
        assert shape.member is not None
        return [_read(found, shape.member, f"{path}.{i}", name) for i in found.indexes(path)]
    if kind == "map":
        assert shape.value is not None
        out: dict[str, Any] = {}
        for i in found.indexes(path):
            key = found.values.get(f"{path}.{i}.{shape.key_name}")
            if key is None:
                raise SQSError("MissingParameter", f"{path}.{i}.{shape.key_name} is missing.")
            entry = f"{path}.{i}.{shape.value_name}"
            if not found.has(entry):
                raise SQSError("MissingParameter", f"{entry} is missing.")
            out[key] = _read(found, shape.value, entry, name)
        return out
    text = found.values.get(path)
    if text is None:
        return None
    return _scalar(kind, text, name)


def _scalar(kind: str, text: str, name: str) -> Any:
    if kind in ("string", "blob"):
        return text
    if kind in ("integer", "long"):
        low, high = INT32 if kind == "integer" else INT64
        if not _INTEGER.match(text.strip()) or not low <= int(text) <= high:
            raise _invalid(name, f"Reason: {text[:40]!r} is not a valid {kind}.")
        return int(text)
    if kind == "boolean":
        if text.lower() not in ("true", "false"):
            raise _invalid(name, f"Reason: {text[:40]!r} is not true or false.")
        return text.lower() == "true"
    raise AssertionError(kind)


def _check_required(shape: Shape, value: dict, path: str) -> None:
    for name in shape.required:
        if name not in value:
            where = f"{path}.{name}" if path else name
            raise SQSError("MissingParameter", f"The request must contain the parameter {where}.")


# -- JSON protocol in --------------------------------------------------------------
def validate_json(action: str, body: object) -> dict:
    """The JSON protocol's input, with every member of the type its shape says."""
    shape, _ = _shapes(action)
    if not isinstance(body, dict):
        raise SQSError("SerializationException", "The body must be a JSON object.")
    return _check(shape, body, "")


def _check(shape: Shape, value: Any, path: str) -> Any:
    kind = shape.kind
    name = path or "body"
    if kind == "structure":
        if not isinstance(value, dict):
            raise _invalid(name, "Reason: must be an object.")
        out = {}
        for key, item in value.items():
            member = shape.members.get(key)
            if member is not None and item is not None:
                out[key] = _check(member.shape, item, f"{path}.{key}" if path else key)
        _check_required(shape, out, path)
        return out
    if kind == "list":
        if not isinstance(value, list) or len(value) > MAX_ITEMS:
            raise _invalid(name, f"Reason: must be a list of at most {MAX_ITEMS} items.")
        assert shape.member is not None
        return [_check(shape.member, item, f"{name}[{i}]") for i, item in enumerate(value)]
    if kind == "map":
        if not isinstance(value, dict) or len(value) > MAX_ITEMS:
            raise _invalid(name, f"Reason: must be a map of at most {MAX_ITEMS} entries.")
        assert shape.value is not None
        return {k: _check(shape.value, v, f"{name}.{k}") for k, v in value.items()}
    if kind in ("string", "blob"):
        if not isinstance(value, str):
            raise _invalid(name, "Reason: must be a string.")
        return value
    if kind in ("integer", "long"):
        low, high = INT32 if kind == "integer" else INT64
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _invalid(name, f"Reason: must be an {kind}.")
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise _invalid(name, "Reason: must be true or false.")
        return value
    raise AssertionError(kind)


# -- query protocol out ------------------------------------------------------------
def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return escape(INVALID_TEXT.sub("\ufffd", str(value)))  # what XML 1.0 cannot carry


def _write(out: list[str], shape: Shape, value: Any) -> None:
    """The content of an element holding ``value``."""
    if shape.kind == "structure":
        for name, member in shape.members.items():
            if value.get(name) is not None:
                _write_member(out, name, member, value[name])
    else:
        out.append(_text(value))


def _write_member(out: list[str], name: str, member: Member, value: Any) -> None:
    shape = member.shape
    if shape.kind == "list":
        assert shape.member is not None
        tag = shape.item or member.wire or name
        for item in value:
            out.append(f"<{tag}>")
            _write(out, shape.member, item)
            out.append(f"</{tag}>")
    elif shape.kind == "map":
        assert shape.value is not None
        tag = member.wire or name
        for key, item in value.items():
            out.append(f"<{tag}><{shape.key_name}>{_text(key)}</{shape.key_name}>")
            out.append(f"<{shape.value_name}>")
            _write(out, shape.value, item)
            out.append(f"</{shape.value_name}></{tag}>")
    else:
        tag = member.wire or name
        out.append(f"<{tag}>")
        _write(out, shape, value)
        out.append(f"</{tag}>")


def render_result(action: str, result: dict, request_id: str) -> bytes:
    _, shape = _shapes(action)
    out = [f'<?xml version="1.0"?><{action}Response xmlns="{XMLNS}">']
    if shape.members:
        out.append(f"<{action}Result>")
        _write(out, shape, result)
        out.append(f"</{action}Result>")
    out.append(
        f"<ResponseMetadata><RequestId>{_text(request_id)}</RequestId></ResponseMetadata>"
        f"</{action}Response>"
    )
    return "".join(out).encode("utf-8")


def render_error(error: SQSError, request_id: str) -> bytes:
    kind = error.kind
    return (
        f'<?xml version="1.0"?><ErrorResponse xmlns="{XMLNS}"><Error>'
        f"<Type>{'Sender' if kind.sender else 'Receiver'}</Type>"
        f"<Code>{_text(kind.query_code)}</Code><Message>{_text(error.query_message)}</Message>"
        f"<Detail/></Error><RequestId>{_text(request_id)}</RequestId></ErrorResponse>"
    ).encode()
