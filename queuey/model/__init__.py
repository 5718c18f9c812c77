"""The domain's vocabulary: the types every layer speaks.

Queues (:mod:`queuey.model.queues`), messages (:mod:`queuey.model.messages`)
and work-queue deliveries and statistics (:mod:`queuey.model.work`) are plain
frozen dataclasses. They sit below everything: the storage interface and its
backends, the service core (:mod:`queuey.core`) and every door import them
from here; nothing here imports any of those.
"""

from queuey.model.messages import (
    Message,
    MessagePage,
    MessageRef,
    NewMessage,
    ReadQuery,
    merge_partitions,
)
from queuey.model.queues import (
    UPDATABLE_QUEUE_FIELDS,
    AttributesChanged,
    Consistency,
    Order,
    QueueMeta,
    QueueType,
    merge_attributes,
)
from queuey.model.work import (
    RECEIPT_PATTERN,
    DeadLetter,
    Delivery,
    MessageState,
    PartitionStats,
    QueueStats,
    ReceiptStatus,
    Reserved,
    SubscriptionStats,
    make_receipt,
    parse_receipt,
)

__all__ = [
    "AttributesChanged",
    "Consistency",
    "DeadLetter",
    "Delivery",
    "Message",
    "MessagePage",
    "MessageRef",
    "NewMessage",
    "Order",
    "PartitionStats",
    "QueueMeta",
    "QueueStats",
    "QueueType",
    "RECEIPT_PATTERN",
    "ReadQuery",
    "MessageState",
    "ReceiptStatus",
    "Reserved",
    "SubscriptionStats",
    "UPDATABLE_QUEUE_FIELDS",
    "make_receipt",
    "merge_attributes",
    "merge_partitions",
    "parse_receipt",
]
