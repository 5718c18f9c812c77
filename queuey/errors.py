"""The service's own error types.

Storage backends wrap every driver exception into :class:`StorageUnavailable`
at their boundary; the web layer turns each :class:`ServiceError` into one HTTP
answer of the shape ``{"status": "error", "error_msg": {...}}``.

The client library has error types of its own (:class:`queuey.client.ClientError`
and its subclasses), raised for the answers it receives; the two never mix.
"""

from __future__ import annotations


class ServiceError(Exception):
    """Base of every error the service answers deliberately."""


class StorageUnavailable(ServiceError):
    """The storage backend could not answer (503 + Retry-After)."""

    def __init__(self, message: str = "storage unavailable", retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class QueueNotFound(ServiceError):
    """The application has no queue of that name."""


class QueueExists(ServiceError):
    """A queue of that name exists already."""


class ScheduleNotFound(ServiceError):
    """The application has no schedule of that name."""


class ScheduleExists(ServiceError):
    """A schedule of that name exists already."""


class InvalidUpdate(ServiceError):
    """A metadata change the queue cannot take (e.g. fewer partitions)."""


class ConfigurationError(Exception):
    """A setting is missing or wrong; names the key.

    Raised at start-up by the service, the worker and the Spark source alike.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message
