"""What a flow-control setting is: a :class:`FlowField` (kind, bounds,
decimal places, default, help text, the resource it belongs to), how a value
is checked and stored as a string, and :class:`FlowRecord`, the frozen values
of one resource's settings.

The settings themselves are declared in :data:`queuey.model.flow.FIELDS`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

#: Highest rate (messages per second) a setting may name, and the lowest one
#: enforced: a smaller positive rate counts as one message an hour.
MAX_RATE = 1_000_000.0
MIN_RATE = 1 / 3600
#: Most decimal places of a rate.
RATE_PLACES = 6
#: Largest burst, in-flight cap and queue length a setting may name.
MAX_COUNT = 1_000_000_000

#: A rate or a count as a form or an option gives it (a plain decimal),
#: bounded before conversion.
_RATE_TEXT = re.compile(rf"[0-9]{{1,12}}(\.[0-9]{{1,{RATE_PLACES}}})?")
_COUNT_TEXT = re.compile(r"[0-9]{1,12}")

Resource = Literal["queue", "subscription"]
#: ``flag``: true or false; ``rate``: messages per second (0 no limit);
#: ``count``: a whole number of messages (0 no limit); ``choice``: one of ``choices``.
Kind = Literal["flag", "rate", "count", "choice"]


@dataclass(frozen=True)
class FlowField:
    """One flow setting, as every door shows and takes it."""

    name: str
    resource: Resource
    kind: Kind
    #: A short title (a form's label, a table's column).
    title: str
    #: What the setting does (an option's help, a schema's description).
    help: str
    #: What 0 (or empty) means.
    off: str = "no limit"
    #: value -> what it does, for a ``choice``; the first is the default.
    choices: tuple[tuple[str, str], ...] = ()
    #: The attribute of :class:`QueueFlow` / :class:`SubscriptionFlow` holding it.
    attribute: str = ""
    #: For a burst, the rate whose bucket it sizes: answers show the size in
    #: force (one second of the rate unless set; 0 without the rate).
    bucket_of: str = ""
    #: False: it does not apply to a FIFO queue (which keeps each group's order).
    fifo: bool = True
    #: True: changed by pausing and resuming, not by a limits form.
    switch: bool = False

    @property
    def key(self) -> str:
        return self.attribute or self.name

    @property
    def high(self) -> float | int | None:
        return {"rate": MAX_RATE, "count": MAX_COUNT}.get(self.kind)

    @property
    def places(self) -> int | None:
        """Most decimal places (a rate's), ``None`` for a whole number or no number."""
        return RATE_PLACES if self.kind == "rate" else None

    @property
    def values(self) -> tuple[str, ...]:
        return tuple(value for value, _ in self.choices)

    @property
    def default(self) -> Any:
        if self.kind == "choice":
            return self.values[0]
        return {"flag": False, "rate": 0.0, "count": 0}[self.kind]

    @property
    def unit(self) -> str:
        return "/s" if self.kind == "rate" else ""

    @property
    def description(self) -> str:
        """The help text with what turns it off, for schemas and options."""
        off = "" if self.kind in ("flag", "choice") else f"; 0: {self.off}"
        return self.help + off + ("" if self.fifo else "; not on FIFO queues")

    def read(self, text: str | None) -> Any:
        """The value a stored string holds (the default when it does not parse)."""
        if self.kind == "flag":
            return text == "1"
        if self.kind == "choice":
            return text if text in self.values else self.default
        value = _number(text)
        return value if self.kind == "rate" else int(value)

    def from_text(self, text: str) -> float | int:
        """A rate's or a count's value as a form or an option gives it (an
        integer stays one); ``ValueError`` when it is not a plain decimal."""
        if not (_RATE_TEXT if self.kind == "rate" else _COUNT_TEXT).fullmatch(text):
            raise ValueError(f"not a plain decimal: {text!r}")
        return float(text) if "." in text else int(text)

    def stored(self, value: Any) -> str | None:
        """The string that stores ``value`` (``None``: remove the key, the
        default); ``ValueError`` says what the field wants."""
        return _CHECKS[self.kind](self, value)

    def shown(self, flow: FlowRecord) -> Any:
        """The value answers give: a burst's bucket in force, else the setting."""
        value = flow.value_of(self)
        if not self.bucket_of:
            return value
        rate = flow.value_of(next(f for f in flow.fields() if f.name == self.bucket_of))
        return (value or max(1, math.ceil(rate))) if rate else 0


class FlowRecord:
    """Frozen values of one resource's :data:`FIELDS`, by ``key`` (a field's
    attribute, or its wire name for a subclass whose ``key`` is ``"name"``),
    positional in the table's order."""

    resource: ClassVar[Resource]
    key: ClassVar[str] = "key"
    #: A resource's fields (a subclass names :func:`queuey.model.flow.fields_of`).
    fields_of: ClassVar[Callable[[Resource], tuple[FlowField, ...]]]

    @classmethod
    def fields(cls) -> tuple[FlowField, ...]:
        return cls.fields_of(cls.resource)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = self.fields()
        names = [getattr(f, self.key) for f in fields]
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__} takes at most {len(names)} values")
        given = dict(zip(names, args, strict=False))
        unknown = set(kwargs) - set(names)
        if unknown or set(given) & set(kwargs):
            raise TypeError(f"{type(self).__name__}: bad arguments {sorted(unknown or kwargs)}")
        given.update(kwargs)
        for field, name in zip(fields, names, strict=True):
            object.__setattr__(self, name, given.get(name, field.default))

    def value_of(self, field: FlowField) -> Any:
        """``field``'s value (its default when the record predates the field)."""
        return self.__dict__.get(getattr(field, self.key), field.default)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def _values(self) -> tuple[Any, ...]:
        return tuple(self.value_of(f) for f in self.fields())

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._values() == self._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    def __repr__(self) -> str:
        values = ", ".join(f"{getattr(f, self.key)}={self.value_of(f)!r}" for f in self.fields())
        return f"{type(self).__name__}({values})"

    def as_dict(self) -> dict[str, Any]:
        return {getattr(f, self.key): v for f, v in self.settings()}

    def settings(self) -> tuple[tuple[FlowField, Any], ...]:
        """Each field with the value set (not the bucket in force)."""
        return tuple((f, self.value_of(f)) for f in self.fields())

    def to_json(self) -> dict[str, Any]:
        """The settings as the API answers them."""
        return {f.name: f.shown(self) for f in self.fields()}


def _number(text: str | None) -> float:
    try:
        value = float(text) if text else 0.0
    except ValueError:
        return 0.0
    return max(value, MIN_RATE) if math.isfinite(value) and value > 0 else 0.0


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _flag(field: FlowField, value: Any) -> str | None:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return "1" if value else None


def _rate(field: FlowField, value: Any) -> str | None:
    if value is None or (_is_number(value) and value == 0):
        return None
    scaled = value * 10**RATE_PLACES if _is_number(value) else 0.0
    if (
        not _is_number(value)
        or not math.isfinite(value)
        or not 0 < value <= MAX_RATE
        or not math.isclose(scaled, round(scaled), rel_tol=1e-9, abs_tol=1e-6)
    ):
        raise ValueError(
            f"must be a number above 0 and at most {MAX_RATE:g}, with at most "
            f"{RATE_PLACES} decimal places (0 or null: no limit)"
        )
    return repr(round(float(value), RATE_PLACES))


def _count(field: FlowField, value: Any) -> str | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value == 0):
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_COUNT:
        raise ValueError(f"must be a whole number from 1 to {MAX_COUNT} (0 or null: no limit)")
    return str(value)


def _choice(field: FlowField, value: Any) -> str | None:
    if value is None or value == field.default:
        return None
    if value not in field.values:
        raise ValueError("must be one of: " + ", ".join(field.values))
    return str(value)


_CHECKS = {"flag": _flag, "rate": _rate, "count": _count, "choice": _choice}
