"""SQS's errors: the code each protocol names, the HTTP status, whose fault.

One :class:`SQSError` per failure; the JSON protocol answers
``{"__type": "com.amazonaws.sqs#<name>", "message": ...}`` with the header
``x-amzn-query-error: <query code>;<Sender|Receiver>`` (what botocore reads to
raise the same exception as over the query protocol), the query protocol an
``<ErrorResponse>`` carrying the query code.

Every refusal of the core's catalogue (:data:`queuey.errors.CATALOGUE`) is
answered in SQS's words by :data:`REFUSALS` through :func:`refusal`.
"""

from __future__ import annotations

from dataclasses import dataclass

from queuey.errors import Catalogued


@dataclass(frozen=True)
class ErrorKind:
    name: str  # how the code names it (the JSON ``__type`` suffix unless ``json_type`` says)
    query_code: str = ""  # the query protocol's ``<Code>``, and ``x-amzn-query-error``'s
    status: int = 400
    sender: bool = True  # "Sender" or "Receiver" fault
    json_type: str = ""  # the JSON protocol's ``__type`` suffix when it is not ``name``

    def __post_init__(self) -> None:  # both default to the name
        object.__setattr__(self, "query_code", self.query_code or self.name)
        object.__setattr__(self, "json_type", self.json_type or self.name)


#: Every error this endpoint answers, by name.
KINDS: dict[str, ErrorKind] = {
    k.name: k
    for k in (
        # Modelled errors of the SQS API.
        ErrorKind("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue"),
        ErrorKind("QueueNameExists", "QueueAlreadyExists"),
        ErrorKind("QueueDeletedRecently", "AWS.SimpleQueueService.QueueDeletedRecently"),
        ErrorKind("PurgeQueueInProgress", "AWS.SimpleQueueService.PurgeQueueInProgress", 403),
        ErrorKind("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 404),
        ErrorKind("MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight"),
        ErrorKind(
            "TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
        ),
        ErrorKind("EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest"),
        ErrorKind("BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"),
        ErrorKind("BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong"),
        ErrorKind("InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId"),
        ErrorKind("InvalidAttributeName"),
        ErrorKind("InvalidAttributeValue"),
        ErrorKind("InvalidMessageContents"),
        ErrorKind("UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation"),
        ErrorKind("OverLimit", "OverLimit", 403),
        ErrorKind("ResourceNotFoundException", "ResourceNotFoundException", 404),
        ErrorKind("InvalidAddress", "InvalidAddress", 404),
        ErrorKind("InvalidSecurity", "AWS.SimpleQueueService.InvalidSecurity", 403),
        # 403 as SQS answers it (and as botocore's SQS retry rule expects).
        ErrorKind("RequestThrottled", "RequestThrottled", 403),
        # Common errors of every AWS query/JSON service.
        # Amazon's JSON protocol names these two shapes apart from their query codes.
        ErrorKind("InvalidParameterValue", json_type="InvalidParameterValueException"),
        ErrorKind("InvalidParameterCombination"),
        ErrorKind("MissingParameter", json_type="MissingRequiredParameterException"),
        ErrorKind("MissingAction"),
        ErrorKind("InvalidAction"),
        ErrorKind("InvalidQueryParameter"),
        ErrorKind("MalformedQueryString", status=404),
        ErrorKind("ValidationError"),
        ErrorKind("SerializationException"),
        ErrorKind("UnknownOperationException"),
        ErrorKind("MissingAuthenticationToken", status=403),
        ErrorKind("IncompleteSignature"),
        ErrorKind("InvalidClientTokenId", status=403),
        ErrorKind("SignatureDoesNotMatch", status=403),
        ErrorKind("RequestExpired"),
        ErrorKind("AccessDenied", "AccessDenied", 403),
        ErrorKind("RequestEntityTooLarge", status=413),
        ErrorKind("InternalFailure", status=500, sender=False),
        ErrorKind("ServiceUnavailable", status=503, sender=False),
    )
}


class SQSError(Exception):
    """One SQS error answer. ``name`` is a key of :data:`KINDS`."""

    def __init__(
        self,
        name: str,
        message: str,
        retry_after: int | None = None,
        query_message: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = KINDS[name]
        self.message = message
        #: The query protocol's text, where Amazon words it apart.
        self.query_message = query_message or message
        #: Seconds for a ``Retry-After`` header (a throttled request).
        self.retry_after = retry_after

    @property
    def name(self) -> str:
        return self.kind.name


@dataclass(frozen=True)
class Refusal:
    """A catalogue entry in SQS's words: the code (a key of :data:`KINDS`,
    which holds its status and whose fault it is) and the text, formed by
    ``text.format(exc=exc)``; ``query_text`` where the query protocol words
    it apart."""

    code: str
    text: str = "{exc}"
    query_text: str = ""

    @property
    def kind(self) -> ErrorKind:
        return KINDS[self.code]


_THROTTLED = Refusal("RequestThrottled")

#: Every catalogue entry, by name, as this endpoint answers it. Paused, full
#: or over a rate or a quota is ``RequestThrottled``, which SDKs retry on
#: their own; a batch that could never pass whole (larger than a rate's
#: burst) or a new subscription past the limit are errors no retry mends.
REFUSALS: dict[str, Refusal] = {
    "invalid_parameters": Refusal("InvalidParameterValue"),
    "invalid_json": Refusal("SerializationException"),
    "not_json": Refusal("SerializationException"),
    "payload_too_large": Refusal("RequestEntityTooLarge"),
    "queue_not_found": Refusal(
        "QueueDoesNotExist",
        "The specified queue does not exist.",
        "The specified queue does not exist for this wsdl version.",
    ),
    "queue_exists": Refusal("QueueNameExists", "A queue named {exc} exists already."),
    "invalid_update": Refusal("InvalidAttributeValue"),
    "message_not_found": Refusal("InvalidParameterValue"),
    "schedule_not_found": Refusal("ResourceNotFoundException", "No schedule named {exc}."),
    "schedule_exists": Refusal("InvalidParameterValue", "A schedule named {exc} exists already."),
    "schedule_conflict": Refusal("ServiceUnavailable"),
    "too_many_schedules": Refusal("OverLimit"),
    "throttled": Refusal("RequestThrottled", "Rate exceeded. {exc}"),
    "too_many_queues": Refusal("OverLimit", "Too many queues. {exc}"),
    "queue_paused": _THROTTLED,
    "rate_limited": _THROTTLED,
    "queue_full": _THROTTLED,
    "quota_exceeded": _THROTTLED,
    "table_full": _THROTTLED,
    "priority_on_fair_queue": Refusal("InvalidParameterValue"),
    "batch_over_burst": Refusal("TooManyEntriesInBatchRequest"),
    "too_many_subscriptions": Refusal("OverLimit"),
    "storage_unavailable": Refusal("ServiceUnavailable", "The service is unavailable, retry."),
}


def refusal(exc: SQSError | Catalogued) -> SQSError:
    """The SQS answer to an error: an :class:`SQSError` as it is, a catalogued
    refusal by :data:`REFUSALS` (with ``Retry-After`` where its entry says)."""
    if isinstance(exc, SQSError):
        return exc
    words = REFUSALS[exc.entry.name]
    return SQSError(
        words.code,
        words.text.format(exc=exc),
        retry_after=exc.wait(),
        query_message=words.query_text.format(exc=exc) or None,
    )


def invalid(message: str) -> SQSError:
    return SQSError("InvalidParameterValue", message)


def missing(parameter: str) -> SQSError:
    return SQSError("MissingParameter", f"The request must contain the parameter {parameter}.")


def batch_failure(entry_id: str, error: SQSError) -> dict:
    """A batch entry that failed, as SendMessageBatch and the other batches answer it."""
    return {
        "Id": entry_id,
        "SenderFault": error.kind.sender,
        "Code": error.kind.query_code,
        "Message": error.message,
    }
