"""One settings table: each configuration key declared once, on the field it fills.

A settings class is a frozen dataclass whose fields are declared with
:func:`setting`: the key's name as an operator writes it, how its text is read,
its default (as text, the way an ini file would say it), its bounds and its
help. :class:`Table` collects those declarations and reads a mapping of text
into the class, so the default, the parsing, the range check, the error that
names the key and the documentation row (checked by
``tests/test_configuration_docs.py``) all come from that one declaration.

Rules shared by every table (the server's, each storage backend's, the
worker's and the Spark data source's):

* an empty value counts as absent, and an absent key takes its default;
* a value that cannot be read, or lies out of its bounds, raises
  :class:`~queuey.errors.ConfigurationError` naming the key;
* keys the table does not declare are left alone (they may belong to another
  table, e.g. the backend's keys in the server's ini section).

Rules between keys (``queuey.default_ttl`` at most ``queuey.max_ttl``, a
worker's batch size by mode) stay in the module that owns the table, after
:meth:`Table.read`.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Mapping
from typing import Any

from queuey.coerce import as_bool, as_list
from queuey.errors import ConfigurationError

__all__ = ["Key", "Table", "integer", "number", "setting"]

#: Where :func:`setting` keeps a field's :class:`Key` in the field's metadata.
METADATA = "queuey.setting"

Parser = Callable[[Any], Any]


def integer(value: Any) -> int:
    """A whole number (``"5"``, ``5``); booleans and fractions are refused."""
    if isinstance(value, bool) or isinstance(value, float):
        raise ValueError("not an integer")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError("not an integer") from None


def number(value: Any) -> float:
    """A number (``"0.5"``, ``2``); a key's bounds refuse ``inf`` and ``nan``."""
    if isinstance(value, bool):
        raise ValueError("not a number")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError("not a number") from None


#: The parser a field's type implies when its :func:`setting` names none.
BY_TYPE: dict[Any, Parser] = {
    int: integer,
    float: number,
    bool: as_bool,
    str: str,
    tuple[str, ...]: as_list,
}


@dataclasses.dataclass(frozen=True)
class Key:
    """One configuration key: how it is read, its default, bounds and help."""

    #: The key as an operator writes it, and as errors and the docs name it.
    name: str
    #: Text to value; ``ValueError`` (or ``TypeError``) when it cannot.
    parse: Parser = str
    #: The value used when the key is absent or empty, as text; ``None``: the
    #: field is ``None`` (or filled in by the owning module).
    default: str | None = None
    #: Inclusive bounds, and an exclusive lower bound.
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None
    #: Absent or empty is an error ("is required").
    required: bool = False
    help: str = ""
    #: The dataclass field it fills (set by :class:`Table`).
    field: str = ""

    def read(self, raw: Any) -> Any:
        """The value of ``raw`` (``None`` when absent), checked."""
        given = raw.strip() if isinstance(raw, str) else raw
        if given is None or given == "":
            if self.required:
                raise ConfigurationError(self.name, "is required")
            if self.default is None:
                return None
            given = self.default
        try:
            value = self.parse(given)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(self.name, f"invalid value {raw!r}: {exc}") from None
        complaint = self.out_of_bounds(value)
        if complaint:
            raise ConfigurationError(self.name, complaint)
        return value

    def out_of_bounds(self, value: Any) -> str | None:
        """What is wrong with ``value``'s size, or ``None``."""
        low, high = self.minimum, self.maximum
        if not isinstance(value, int | float):
            return None
        if not math.isfinite(value):
            return f"must be a finite number, got {value}"
        if self.above is not None and not value > self.above:
            return f"must be above {_shown(self.above)}, got {value}"
        if low is not None and high is not None and not low <= value <= high:
            return f"must be between {_shown(low)} and {_shown(high)}, got {value}"
        if low is not None and not value >= low:
            return f"must be at least {_shown(low)}, got {value}"
        if high is not None and not value <= high:
            return f"must be at most {_shown(high)}, got {value}"
        return None


def _shown(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def setting(
    name: str,
    default: str | None = None,
    *,
    parse: Parser | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    required: bool = False,
    help: str = "",
) -> Any:
    """A dataclass field read from configuration key ``name``.

    ``parse`` defaults to the one the field's type implies (:data:`BY_TYPE`).
    """
    key = Key(name, parse or str, default, minimum, maximum, above, required, help)
    return dataclasses.field(metadata={METADATA: (key, parse is None)})


class Table:
    """The keys of a settings dataclass, and reading a mapping into it.

    ``env_prefix``: an environment variable ``env_prefix + NAME`` (the key's
    dots as underscores, upper case) overrides the mapping; ``None``: no
    overrides (the caller merged them, or there are none). ``any_case``: look
    keys up whatever their case (Spark lower-cases option names).
    """

    def __init__(
        self,
        cls: type,
        *,
        env_prefix: str | None = None,
        any_case: bool = False,
    ) -> None:
        self.cls = cls
        self.env_prefix = env_prefix
        self.any_case = any_case
        hints = typing.get_type_hints(cls)
        keys = []
        for f in dataclasses.fields(cls):
            if METADATA not in f.metadata:
                continue
            key, implied = f.metadata[METADATA]
            parse = _implied_parser(cls, f.name, hints[f.name]) if implied else key.parse
            keys.append(dataclasses.replace(key, parse=parse, field=f.name))
        self.keys: tuple[Key, ...] = tuple(keys)
        self.by_name: dict[str, Key] = {k.name: k for k in keys}
        self.by_field: dict[str, Key] = {k.field: k for k in keys}

    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys)

    def defaults(self) -> dict[str, str]:
        """Each key's default text (keys without one are left out)."""
        return {k.name: k.default for k in self.keys if k.default is not None}

    def raw(self, mapping: Mapping[str, Any], key: Key, environ: Mapping[str, str]) -> Any:
        """``key``'s text as given: the environment's, else the mapping's, else ``None``."""
        if self.env_prefix is not None:
            env_name = self.env_prefix + key.name.replace(".", "_").upper()
            if env_name in environ:
                return environ[env_name]
        if key.name in mapping:
            return mapping[key.name]
        if self.any_case:
            lowered = key.name.lower()
            for name, value in mapping.items():
                if name.lower() == lowered:
                    return value
        return None

    def read(
        self, mapping: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Every key's value, by field name (first bad key raises)."""
        env = environ if environ is not None else {}
        return {k.field: k.read(self.raw(mapping, k, env)) for k in self.keys}

    def parse(self, mapping: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Any:
        """The settings object of ``mapping`` (a table without rules between keys)."""
        return self.build(self.read(mapping, environ))

    def build(self, values: Mapping[str, Any], **extra: Any) -> Any:
        """The settings object from :meth:`read`'s values and the fields no key fills."""
        return self.cls(**values, **extra)


def _implied_parser(cls: type, field: str, hint: Any) -> Parser:
    args = typing.get_args(hint)
    if type(None) in args:  # ``X | None``: an absent key is None
        rest = [a for a in args if a is not type(None)]
        hint = rest[0] if len(rest) == 1 else hint
    try:
        return BY_TYPE[hint]
    except (KeyError, TypeError):
        raise TypeError(f"{cls.__name__}.{field}: give parse= for a {hint!r} setting") from None
