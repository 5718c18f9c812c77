"""Which messages a work-queue subscription takes: its filter, kept with the queue.

A subscription may carry a filter on message attributes
(:mod:`queuey.model.filters`). It is stored in the queue's ``attributes``
map under ``sub.<subscription>.filter`` (the filter's canonical JSON), so it
travels with the queue's metadata to every API node and every backend reads
it from the :class:`~queuey.model.QueueMeta` it is given: a backend's
reserve walks past a message its subscription's filter refuses (it is never
handed to that subscription, like an acknowledged one) and its statistics
count only the messages the filter takes.

A filter sees a message's attributes as its consumers do: the native
``attributes`` (without the SQS endpoint's own ``sqs.`` keys) and, for a
message sent through the SQS endpoint, its String and Number message
attributes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from queuey.model.filters import Filter, load_filter
from queuey.model.messages import Message
from queuey.model.queues import QueueMeta

#: Where a subscription's filter is kept in the queue's attributes.
_PREFIX = "sub."
_SUFFIX = ".filter"
#: The stored key of the SQS endpoint's message attributes (``queuey.sqs.messages``).
_SQS_ATTRIBUTES = "sqs.attrs"

#: A predicate over messages: whether a subscription takes it.
Accept = Callable[[Message], bool]


def filter_key(subscription: str) -> str:
    """The queue attribute holding ``subscription``'s filter."""
    return f"{_PREFIX}{subscription}{_SUFFIX}"


def subscription_filter(queue: QueueMeta, subscription: str) -> Filter | None:
    """``subscription``'s filter on ``queue``, or ``None`` (it takes every message)."""
    text = queue.attributes.get(filter_key(subscription)) if queue.attributes else None
    return load_filter(text) if text else None


def filters(queue: QueueMeta) -> dict[str, Filter]:
    """Every filtered subscription of ``queue`` with its filter, by name."""
    found: dict[str, Filter] = {}
    for key, text in (queue.attributes or {}).items():
        if key.startswith(_PREFIX) and key.endswith(_SUFFIX) and text:
            found[key[len(_PREFIX) : -len(_SUFFIX)]] = load_filter(text)
    return found


def accepts(queue: QueueMeta, subscription: str) -> Accept | None:
    """The predicate ``subscription``'s reserve and statistics apply, or
    ``None`` when it takes every message (the common case costs nothing)."""
    found = subscription_filter(queue, subscription)
    if found is None:
        return None
    return lambda message: found.matches(filter_attributes(message.attributes))


def filter_attributes(attributes: Mapping[str, str] | None) -> dict[str, str]:
    """The attributes a filter sees (see the module docstring)."""
    if not attributes:
        return {}
    seen = {k: v for k, v in attributes.items() if not k.startswith("sqs.")}
    sent = attributes.get(_SQS_ATTRIBUTES)
    if sent:
        try:
            given = json.loads(sent)
        except ValueError:
            given = {}
        if isinstance(given, dict):
            for name, typed in given.items():
                if (
                    isinstance(typed, list)
                    and len(typed) == 2
                    and isinstance(typed[0], str)
                    and isinstance(typed[1], str)
                    and typed[0].split(".", 1)[0] in ("String", "Number")
                ):
                    seen[name] = typed[1]
    return seen
