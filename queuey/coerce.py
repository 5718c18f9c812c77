"""Text to values: the one rule for booleans and lists.

Ini files, environment variables, worker configs and query strings all spell
booleans and lists the same way, so they are read by the same two functions.
The words are Pyramid's (:data:`pyramid.settings.truthy` and ``falsey``); unlike
:func:`pyramid.settings.asbool`, a word that is neither is an error rather than
``False``, so a typo in a setting stops the service instead of turning a
feature off.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyramid.settings import aslist, falsey, truthy

__all__ = ["BOOLEAN_WORDS", "as_bool", "as_list"]

#: What :func:`as_bool` accepts, for error messages.
BOOLEAN_WORDS = "true/false, yes/no, on/off, 1/0, t/f, y/n"


def as_bool(value: str | bool | int) -> bool:
    """``True`` or ``False`` from a boolean word (any case); ``ValueError`` otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    word = str(value).strip().lower()
    if word in truthy:
        return True
    if word in falsey:
        return False
    raise ValueError(f"not a boolean ({BOOLEAN_WORDS}): {value!r}")


def as_list(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """Items separated by commas, spaces or new lines (a sequence is taken as it is)."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = value.replace(",", " ")
    return tuple(str(item).strip() for item in aslist(value) if str(item).strip())
