"""A message's rules, written once for every door.

Each door parses a message its own way (the REST API's JSON and query
parameters, an admin form, an SQS send entry, a Spark row) and then asks
:class:`MessageRules` for the message to store: every rule a message must pass
whatever door it came through is checked here, and :class:`NewMessage` is
built here. A broken rule raises :class:`InvalidMessage`, which names the rule
and the field; each door words it in its own error shape.

Messages the service makes itself (dead letters, redrives, moves) copy a body
that passed these rules once; they take only the ttl rule (:meth:`ttl_of`), so
an operator lowering a limit never strands a message on its way to a
dead-letter queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from queuey import jsonio
from queuey.errors import Catalogued
from queuey.limits import MAX_DEDUP_ID, MAX_PRIORITY
from queuey.model import NewMessage, QueueMeta
from queuey.model.flow import GROUP_KEY, valid_group
from queuey.placement import partition_for_key

#: The rules :class:`InvalidMessage` names. ``queue_delay``: the queue's delay,
#: taken because none was given, is longer than the message's ttl.
Rule = Literal[
    "ttl",
    "delay",
    "queue_delay",
    "partition",
    "priority",
    "dedup_id",
    "group",
    "attributes",
    "size",
]
#: What a bad ``group`` is told.
GROUP_WORDS = "must be 1 to 128 characters: letters, digits and punctuation (no spaces)"


class InvalidMessage(ValueError):
    """A message broke ``rule``; ``field`` is the input to fix, ``limit`` the
    bound it broke (bytes for ``size``)."""

    def __init__(self, rule: Rule, field: str, message: str, limit: int | None = None) -> None:
        super().__init__(message)
        self.rule: Rule = rule
        self.field = field
        self.limit = limit


class InvalidFields(Catalogued, ValueError, entry="invalid_parameters"):
    """Several of one message's inputs are wrong: ``errors`` maps each field to why."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


class Placement(Protocol):
    """A JSON door's message fields (the REST API's placement model, which the
    admin form's fields are validated by). ``group`` and ``attributes`` are
    optional: a door without them leaves them out."""

    partition: int | None
    partition_key: str | None
    ttl: int | None
    delay: int | None
    priority: int | None
    dedup_id: str | None


@dataclass(frozen=True)
class MessageRules:
    """The rules in force (``queuey.max_ttl``, ``queuey.max_message_size``).

    A plain value, so Spark can ship it to executors.
    """

    max_ttl: int
    max_message_size: int

    @classmethod
    def from_settings(cls, settings) -> MessageRules:
        """From :class:`queuey.settings.Settings` (or anything with the two fields)."""
        return cls(max_ttl=settings.max_ttl, max_message_size=settings.max_message_size)

    def clamp_ttl(self, seconds: int) -> int:
        """``seconds`` as a ttl allowed now: a queue made before the operator
        lowered ``queuey.max_ttl`` keeps its ttl on record, but nothing stored
        outlives the limit in force."""
        return min(seconds, self.max_ttl)

    def ttl_of(self, meta: QueueMeta, given: int | None = None) -> int:
        """A message's ttl: the one ``given`` (1 to ``max_ttl``), else its queue's, clamped."""
        if given is None:
            return self.clamp_ttl(meta.ttl)
        if not 1 <= given <= self.max_ttl:
            raise InvalidMessage(
                "ttl", "ttl", f"must be between 1 and {self.max_ttl}", self.max_ttl
            )
        return given

    def check_size(self, size: int, limit: int | None = None) -> None:
        """A message of ``size`` bytes fits ``limit`` (default ``max_message_size``).

        What counts is the door's to say: the REST API counts the body's JSON
        text, SQS the body and its attributes against the queue's own
        ``MaximumMessageSize``.
        """
        limit = self.max_message_size if limit is None else limit
        if size > limit:
            raise InvalidMessage("size", "body", f"the message is larger than {limit} bytes", limit)

    def build(
        self,
        meta: QueueMeta,
        body: str,
        partition: int,
        *,
        ttl: int | None = None,
        delay: int | None = None,
        priority: int | None = None,
        dedup_id: str | None = None,
        attributes: Mapping[str, str] | None = None,
        size: int | None = None,
        max_size: int | None = None,
        group: str | None = None,
    ) -> NewMessage:
        """The message to store in ``meta``, every rule checked, the size last.

        ``body`` is the JSON text to store. ``ttl`` and ``delay`` default to
        the queue's (the ttl clamped, :meth:`ttl_of`); a delay is at most the
        ttl. ``size`` defaults to the body's UTF-8 length and ``max_size`` to
        ``max_message_size`` (:meth:`check_size`). Empty ``attributes`` are
        stored as none. ``group`` (:data:`~queuey.model.flow.GROUP_PATTERN`)
        is kept in the attributes under :data:`~queuey.model.flow.GROUP_KEY`,
        where the SQS endpoint keeps a ``MessageGroupId``, so fair queues and
        both doors see one group.
        """
        ttl = self.ttl_of(meta, ttl)
        if delay is None:
            delay = meta.delay
            if delay > ttl:
                raise InvalidMessage(
                    "queue_delay",
                    "ttl",
                    f"the queue's delay ({delay} s) is longer than this message's ttl ({ttl} s)",
                    ttl,
                )
        elif not 0 <= delay <= ttl:
            raise InvalidMessage(
                "delay", "delay", f"must be at most the message's ttl ({ttl} s)", ttl
            )
        if not 1 <= partition <= meta.partitions:
            raise InvalidMessage(
                "partition",
                "partition",
                f"must be between 1 and {meta.partitions}",
                meta.partitions,
            )
        priority = priority or 0
        if not 0 <= priority <= MAX_PRIORITY:
            raise InvalidMessage(
                "priority", "priority", f"must be between 0 and {MAX_PRIORITY}", MAX_PRIORITY
            )
        if dedup_id is not None and not 1 <= len(dedup_id) <= MAX_DEDUP_ID:
            raise InvalidMessage(
                "dedup_id", "dedup_id", f"must be 1 to {MAX_DEDUP_ID} characters", MAX_DEDUP_ID
            )
        if attributes and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()
        ):
            raise InvalidMessage("attributes", "attributes", "names and values must be text")
        if group is not None:
            if not valid_group(group):
                raise InvalidMessage("group", "group", GROUP_WORDS)
            attributes = {**(attributes or {}), GROUP_KEY: group}
        self.check_size(len(body.encode("utf-8")) if size is None else size, max_size)
        return NewMessage(
            body=body,
            partition=partition,
            ttl=ttl,
            delay=delay,
            priority=priority,
            dedup_id=dedup_id,
            attributes=dict(attributes) if attributes else None,
        )

    def from_json(
        self, meta: QueueMeta, body: Any, placement: Placement, default_partition: int
    ) -> NewMessage:
        """A message of the JSON doors (the REST API, the admin form): ``body``
        a JSON object, placed by :func:`placed`, then :meth:`build`. Its
        ``attributes`` may not name :data:`~queuey.model.flow.GROUP_KEY`: a
        group is given as ``group``, and checked as one.

        Every wrong field is named at once (:class:`InvalidFields`); a body too
        large (:class:`InvalidMessage` ``size``) only when nothing else is wrong.
        """
        errors = {}
        if placement.partition is not None and placement.partition_key is not None:
            errors["partition_key"] = "give either partition or partition_key, not both"
        if not isinstance(body, dict):
            errors["body"] = "a message must be a JSON object"
        attributes = optional(placement, "attributes")
        if attributes and GROUP_KEY in attributes:
            errors["attributes"] = f"{GROUP_KEY} holds the message's group: give it as group"
        group = optional(placement, "group")
        partition = placed(
            meta, placement.partition, placement.partition_key, group, default_partition
        )
        try:
            message = self.build(
                meta,
                jsonio.dumps(body),
                partition,
                ttl=placement.ttl,
                delay=placement.delay,
                priority=placement.priority,
                dedup_id=placement.dedup_id,
                attributes=attributes,
                group=group,
            )
        except InvalidMessage as exc:
            if exc.rule == "size" and not errors:
                raise
            if exc.rule != "size":
                errors[exc.field] = str(exc)
        if errors:
            raise InvalidFields(errors)
        return message


def optional(placement: Placement, name: str) -> Any:
    """A field a door's placement may lack (``attributes``, ``group``), or
    ``None``, read from the instance's fields (a pydantic model, a plain
    object) when it has a ``__dict__``. Asking a pydantic model for a field
    it lacks goes through its ``__getattr__``, which builds an
    ``AttributeError`` to be thrown away: 3.7 % of a single post's CPU under
    load (``py-spy --gil``, docs/performance.rst)."""
    fields = getattr(placement, "__dict__", None)
    if fields is not None:
        return fields.get(name)
    return getattr(placement, name, None)


def placed(
    meta: QueueMeta,
    partition: int | None,
    partition_key: str | None,
    group: str | None,
    default: int,
) -> int:
    """The partition a message goes to: the one named, else its
    ``partition_key``'s, else its ``group``'s (as the SQS endpoint places a
    ``MessageGroupId``, so a group's messages share a partition and keep
    their order there), else ``default`` (each door's random choice).
    """
    if partition is not None:
        return partition
    if partition_key is not None:
        return partition_for_key(partition_key, meta.partitions)
    if valid_group(group):  # a bad one is refused by :meth:`MessageRules.build`
        return partition_for_key(group, meta.partitions)  # type: ignore[arg-type]
    return default
