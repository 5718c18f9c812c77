"""The shapes of the SQS API this endpoint speaks: each action's input and output.

Written from the SQS API reference. Member names are the JSON protocol's; the
query protocol's wire names, where they differ, are given with ``wire``
(a member's element or parameter name) and ``item`` (a list's element name).
Every list and map of the SQS query protocol is *flattened*: a list is
``<Name>.1``, ``<Name>.2``... in a request and repeated ``<Name>`` elements
in an answer; a map is ``<Name>.N.<Key>`` / ``<Name>.N.<Value>``.
``tests/sqs/test_query.py`` checks this table against Amazon's published models.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Shape:
    kind: str  # string, integer, long, boolean, blob, list, map, structure
    members: dict[str, Member] = field(default_factory=dict)  # structure
    required: frozenset[str] = frozenset()  # structure
    member: Shape | None = None  # list element
    item: str | None = None  # list: the element's wire name
    key_name: str = "Name"  # map
    value_name: str = "Value"  # map
    value: Shape | None = None  # map value (keys are strings)


@dataclass(frozen=True)
class Member:
    shape: Shape
    wire: str | None = None


STRING = Shape("string")
INTEGER = Shape("integer")
LONG = Shape("long")
BOOLEAN = Shape("boolean")
BLOB = Shape("blob")


def structure(*required: str, **members: Shape | Member) -> Shape:
    wrapped = {k: v if isinstance(v, Member) else Member(v) for k, v in members.items()}
    return Shape("structure", members=wrapped, required=frozenset(required))


def list_of(member: Shape, item: str | None = None) -> Shape:
    return Shape("list", member=member, item=item)


def map_of(value: Shape, key_name: str = "Name", value_name: str = "Value") -> Shape:
    return Shape("map", value=value, key_name=key_name, value_name=value_name)


def wire(shape: Shape, name: str) -> Member:
    return Member(shape, name)


ATTRIBUTES = wire(map_of(STRING), "Attribute")
MESSAGE_ATTRIBUTE_VALUE = structure(
    "DataType",
    StringValue=STRING,
    BinaryValue=BLOB,
    StringListValues=wire(list_of(STRING, "StringListValue"), "StringListValue"),
    BinaryListValues=wire(list_of(BLOB, "BinaryListValue"), "BinaryListValue"),
    DataType=STRING,
)
MESSAGE_ATTRIBUTES = wire(map_of(MESSAGE_ATTRIBUTE_VALUE), "MessageAttribute")
SYSTEM_ATTRIBUTES = wire(map_of(MESSAGE_ATTRIBUTE_VALUE), "MessageSystemAttribute")
BATCH_ERROR = structure(
    "Id", "SenderFault", "Code", Id=STRING, SenderFault=BOOLEAN, Code=STRING, Message=STRING
)


def _batch_result(entry: str, **members: Shape) -> Shape:
    return structure(
        "Successful",
        "Failed",
        Successful=list_of(structure("Id", Id=STRING, **members), entry),
        Failed=list_of(BATCH_ERROR, "BatchResultErrorEntry"),
    )


SEND_ENTRY = structure(
    "Id",
    "MessageBody",
    Id=STRING,
    MessageBody=STRING,
    DelaySeconds=INTEGER,
    MessageAttributes=MESSAGE_ATTRIBUTES,
    MessageSystemAttributes=SYSTEM_ATTRIBUTES,
    MessageDeduplicationId=STRING,
    MessageGroupId=STRING,
)
SEND_RESULT = dict(
    MD5OfMessageBody=STRING,
    MD5OfMessageAttributes=STRING,
    MD5OfMessageSystemAttributes=STRING,
    MessageId=STRING,
    SequenceNumber=STRING,
)
EMPTY = structure()

#: action -> (input shape, output shape)
ACTIONS_SHAPES: dict[str, tuple[Shape, Shape]] = {
    "AddPermission": (
        structure(
            "QueueUrl",
            "Label",
            "AWSAccountIds",
            "Actions",
            QueueUrl=STRING,
            Label=STRING,
            AWSAccountIds=list_of(STRING, "AWSAccountId"),
            Actions=list_of(STRING, "ActionName"),
        ),
        EMPTY,
    ),
    "CancelMessageMoveTask": (
        structure("TaskHandle", TaskHandle=STRING),
        structure(ApproximateNumberOfMessagesMoved=LONG),
    ),
    "ChangeMessageVisibility": (
        structure(
            "QueueUrl",
            "ReceiptHandle",
            "VisibilityTimeout",
            QueueUrl=STRING,
            ReceiptHandle=STRING,
            VisibilityTimeout=INTEGER,
        ),
        EMPTY,
    ),
    "ChangeMessageVisibilityBatch": (
        structure(
            "QueueUrl",
            "Entries",
            QueueUrl=STRING,
            Entries=list_of(
                structure(
                    "Id",
                    "ReceiptHandle",
                    Id=STRING,
                    ReceiptHandle=STRING,
                    VisibilityTimeout=INTEGER,
                ),
                "ChangeMessageVisibilityBatchRequestEntry",
            ),
        ),
        _batch_result("ChangeMessageVisibilityBatchResultEntry"),
    ),
    "CreateQueue": (
        structure(
            "QueueName",
            QueueName=STRING,
            Attributes=ATTRIBUTES,
            tags=wire(map_of(STRING, "Key", "Value"), "Tag"),
        ),
        structure(QueueUrl=STRING),
    ),
    "DeleteMessage": (
        structure("QueueUrl", "ReceiptHandle", QueueUrl=STRING, ReceiptHandle=STRING),
        EMPTY,
    ),
    "DeleteMessageBatch": (
        structure(
            "QueueUrl",
            "Entries",
            QueueUrl=STRING,
            Entries=list_of(
                structure("Id", "ReceiptHandle", Id=STRING, ReceiptHandle=STRING),
                "DeleteMessageBatchRequestEntry",
            ),
        ),
        _batch_result("DeleteMessageBatchResultEntry"),
    ),
    "DeleteQueue": (structure("QueueUrl", QueueUrl=STRING), EMPTY),
    "GetQueueAttributes": (
        structure("QueueUrl", QueueUrl=STRING, AttributeNames=list_of(STRING, "AttributeName")),
        structure(Attributes=ATTRIBUTES),
    ),
    "GetQueueUrl": (
        structure("QueueName", QueueName=STRING, QueueOwnerAWSAccountId=STRING),
        structure(QueueUrl=STRING),
    ),
    "ListDeadLetterSourceQueues": (
        structure("QueueUrl", QueueUrl=STRING, NextToken=STRING, MaxResults=INTEGER),
        structure("queueUrls", queueUrls=list_of(STRING, "QueueUrl"), NextToken=STRING),
    ),
    "ListMessageMoveTasks": (
        structure("SourceArn", SourceArn=STRING, MaxResults=INTEGER),
        structure(
            Results=list_of(
                structure(
                    TaskHandle=STRING,
                    Status=STRING,
                    SourceArn=STRING,
                    DestinationArn=STRING,
                    MaxNumberOfMessagesPerSecond=INTEGER,
                    ApproximateNumberOfMessagesMoved=LONG,
                    ApproximateNumberOfMessagesToMove=LONG,
                    FailureReason=STRING,
                    StartedTimestamp=LONG,
                ),
                "ListMessageMoveTasksResultEntry",
            )
        ),
    ),
    "ListQueueTags": (
        structure("QueueUrl", QueueUrl=STRING),
        structure(Tags=wire(map_of(STRING, "Key", "Value"), "Tag")),
    ),
    "ListQueues": (
        structure(QueueNamePrefix=STRING, NextToken=STRING, MaxResults=INTEGER),
        structure(QueueUrls=list_of(STRING, "QueueUrl"), NextToken=STRING),
    ),
    "PurgeQueue": (structure("QueueUrl", QueueUrl=STRING), EMPTY),
    "ReceiveMessage": (
        structure(
            "QueueUrl",
            QueueUrl=STRING,
            AttributeNames=list_of(STRING, "AttributeName"),
            MessageSystemAttributeNames=list_of(STRING, "MessageSystemAttributeName"),
            MessageAttributeNames=list_of(STRING, "MessageAttributeName"),
            MaxNumberOfMessages=INTEGER,
            VisibilityTimeout=INTEGER,
            WaitTimeSeconds=INTEGER,
            ReceiveRequestAttemptId=STRING,
        ),
        structure(
            Messages=list_of(
                structure(
                    MessageId=STRING,
                    ReceiptHandle=STRING,
                    MD5OfBody=STRING,
                    Body=STRING,
                    Attributes=ATTRIBUTES,
                    MD5OfMessageAttributes=STRING,
                    MessageAttributes=MESSAGE_ATTRIBUTES,
                ),
                "Message",
            )
        ),
    ),
    "RemovePermission": (
        structure("QueueUrl", "Label", QueueUrl=STRING, Label=STRING),
        EMPTY,
    ),
    "SendMessage": (
        structure(
            "QueueUrl",
            "MessageBody",
            QueueUrl=STRING,
            **{k: m for k, m in SEND_ENTRY.members.items() if k != "Id"},
        ),
        structure(**SEND_RESULT),
    ),
    "SendMessageBatch": (
        structure(
            "QueueUrl",
            "Entries",
            QueueUrl=STRING,
            Entries=list_of(SEND_ENTRY, "SendMessageBatchRequestEntry"),
        ),
        _batch_result("SendMessageBatchResultEntry", **SEND_RESULT),
    ),
    "SetQueueAttributes": (
        structure("QueueUrl", "Attributes", QueueUrl=STRING, Attributes=ATTRIBUTES),
        EMPTY,
    ),
    "StartMessageMoveTask": (
        structure(
            "SourceArn",
            SourceArn=STRING,
            DestinationArn=STRING,
            MaxNumberOfMessagesPerSecond=INTEGER,
        ),
        structure(TaskHandle=STRING),
    ),
    "TagQueue": (
        structure(
            "QueueUrl", "Tags", QueueUrl=STRING, Tags=wire(map_of(STRING, "Key", "Value"), "Tag")
        ),
        EMPTY,
    ),
    "UntagQueue": (
        structure("QueueUrl", "TagKeys", QueueUrl=STRING, TagKeys=list_of(STRING, "TagKey")),
        EMPTY,
    ),
}

ACTIONS: frozenset[str] = frozenset(ACTIONS_SHAPES)
