"""The project's own error types.

Storage backends wrap every driver exception into :class:`StorageUnavailable`
at their boundary; the web layer turns each type into one HTTP answer of the
shape ``{"status": "error", "error_msg": {...}}``.
"""

from __future__ import annotations


class QueueyError(Exception):
    """Base of every error the service answers deliberately."""


class StorageUnavailable(QueueyError):
    """The storage backend could not answer (503 + Retry-After)."""

    def __init__(self, message: str = "storage unavailable", retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class QueueNotFound(QueueyError):
    """The application has no queue of that name."""


class QueueExists(QueueyError):
    """A queue of that name exists already."""


class InvalidUpdate(QueueyError):
    """A metadata change the queue cannot take (e.g. fewer partitions)."""


class ConfigurationError(QueueyError):
    """A setting is missing or wrong; names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message
