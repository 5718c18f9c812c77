"""The service's own error types, and the catalogue of every refusal the core makes.

Each refusal is one :class:`Entry` of :data:`CATALOGUE`: its name, its HTTP
status, the field it names and the text the REST API answers. An exception
class declares its entry once (``class QueueNotFound(ServiceError,
entry="queue_not_found")``) where it is defined, and each door maps the
catalogue once, in its own words: the REST API's error view
(:mod:`queuey.web.errors`), the SQS endpoint's ``REFUSALS``
(:mod:`queuey.sqs.errors`), the admin pages' ``PAGES``
(:mod:`queuey.admin.errors`) and the command line's ``EXIT_LINES``
(:mod:`queuey.cli.errors`). ``tests/test_error_catalogue.py`` proves every
entry has a mapping in every door.

Storage backends wrap every driver exception into :class:`StorageUnavailable`
at their boundary. The client library has error types of its own
(:class:`queuey.client.ClientError` and its subclasses), raised for the
answers it receives; the two never mix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

#: The field of an entry whose exception names the field (or fields) itself.
NAMED_BY_ERROR = ""


@dataclass(frozen=True)
class Entry:
    """One refusal: ``field`` is the input or setting to fix
    (:data:`NAMED_BY_ERROR` when the exception carries it), ``text`` the REST
    API's words for it, formed by ``text.format(exc=exc)``."""

    name: str
    status: int
    field: str
    text: str = "{exc}"
    #: Answered with ``Retry-After: <exc.retry_after>`` by every door.
    retry: bool = False


def _entries(*entries: Entry) -> dict[str, Entry]:
    return {entry.name: entry for entry in entries}


#: Every refusal the core can make, by name.
CATALOGUE: dict[str, Entry] = _entries(
    # Requests: what the caller sent.
    Entry("invalid_parameters", 400, NAMED_BY_ERROR),
    Entry("invalid_json", 400, "body"),
    Entry("not_json", 415, "body"),
    Entry("payload_too_large", 413, NAMED_BY_ERROR),
    # Queues and schedules by name.
    Entry("queue_not_found", 404, "queue_name", "no queue named {exc}"),
    Entry("queue_exists", 409, "queue_name", "a queue named {exc} exists already"),
    Entry("invalid_update", 400, "partitions"),
    Entry("message_not_found", 404, "message_id"),
    Entry("schedule_not_found", 404, "schedule", "no schedule named {exc}"),
    Entry("schedule_exists", 409, "name", "a schedule named {exc} exists already"),
    Entry("schedule_conflict", 409, "schedule"),
    Entry("too_many_schedules", 403, "max_schedules", "{exc} (queuey.schedules.limit)"),
    # An application's limits (queuey.core.quotas).
    Entry("throttled", 429, "rate_limit", retry=True),
    Entry("too_many_queues", 403, "max_queues"),
    # Flow control (queuey.core.refusals): the exception names the setting.
    Entry("queue_paused", 503, NAMED_BY_ERROR, retry=True),
    Entry("rate_limited", 429, NAMED_BY_ERROR, retry=True),
    Entry("queue_full", 507, NAMED_BY_ERROR, retry=True),
    Entry("quota_exceeded", 507, NAMED_BY_ERROR, retry=True),
    Entry("priority_on_fair_queue", 400, NAMED_BY_ERROR),
    Entry("batch_over_burst", 413, NAMED_BY_ERROR),
    Entry("too_many_subscriptions", 403, NAMED_BY_ERROR),
    Entry("table_full", 503, NAMED_BY_ERROR, retry=True),
    # The store.
    Entry(
        "storage_unavailable",
        503,
        "storage",
        "the message store is unavailable, retry later",
        retry=True,
    ),
)


class Catalogued(Exception):
    """An exception that is one entry of :data:`CATALOGUE`: a subclass names
    it with ``entry="<name>"`` (its own subclasses inherit it)."""

    entry: ClassVar[Entry]
    #: Seconds to wait before retrying, where the entry says to.
    retry_after: int | None = None
    #: The field named, for entries whose exception names it.
    field: str = ""

    def __init_subclass__(cls, entry: str | None = None, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if entry is not None:
            cls.entry = CATALOGUE[entry]

    @property
    def status(self) -> int:
        return self.entry.status

    def wait(self) -> int | None:
        """Seconds for ``Retry-After``, when the entry says to send one."""
        return self.retry_after if self.entry.retry else None

    def errors_by_field(self) -> dict[str, str]:
        """What is wrong, by the field to fix (the REST API's ``error_msg``):
        the exception's ``errors`` when it carries one text per field."""
        errors = getattr(self, "errors", None)
        if errors is not None:
            return dict(errors)
        return {self.entry.field or self.field: self.entry.text.format(exc=self)}


class ServiceError(Catalogued):
    """Base of the errors the service answers deliberately that the core
    defines here or in the web layer's parsers."""


class StorageUnavailable(ServiceError, entry="storage_unavailable"):
    """The storage backend could not answer (503 + Retry-After)."""

    def __init__(self, message: str = "storage unavailable", retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class QueueNotFound(ServiceError, entry="queue_not_found"):
    """The application has no queue of that name."""


class MessageNotFound(ServiceError, entry="message_not_found"):
    """The queue holds no live message with that id."""


class QueueExists(ServiceError, entry="queue_exists"):
    """A queue of that name exists already."""


class ScheduleNotFound(ServiceError, entry="schedule_not_found"):
    """The application has no schedule of that name."""


class ScheduleExists(ServiceError, entry="schedule_exists"):
    """A schedule of that name exists already."""


class InvalidUpdate(ServiceError, entry="invalid_update"):
    """A metadata change the queue cannot take (e.g. fewer partitions)."""


class ConfigurationError(Exception):
    """A setting is missing or wrong; names the key.

    Raised at start-up by the service, the worker and the Spark source alike.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message
