"""The SQS actions this endpoint answers, in one table: :data:`ACTIONS` gives
each its input and output shapes, its handler and who may run it.

The shapes are botocore's model of SQS (member types, required members, lists
and maps), read once at import. That model has spoken only AWS JSON 1.0 since
SQS moved to it, so the query protocol's wire names are derived here, by the
rules Amazon's query model followed: every list and map is *flattened* (a list
is ``<Item>.1``, ``<Item>.2``... in a request and repeated ``<Item>`` elements
in an answer, the item named after its list shape less ``List``; a map member
is ``<Member>.N.Name`` / ``<Member>.N.Value``, the member's name in the
singular). ``tests/sqs/test_query.py`` checks them against Amazon's last query
model, ``tests/sqs/test_action_table.py`` the table against botocore's model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import botocore.model
from botocore.loaders import Loader


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


#: A list's item name where it is not its shape's name less ``List``.
_ITEMS = {
    "MessageSystemAttributeList": "MessageSystemAttributeName",
    "StringList": "StringListValue",
    "BinaryList": "BinaryListValue",
}
#: Maps whose entries are ``Key`` / ``Value`` (the others': ``Name`` / ``Value``).
_KEYED = frozenset({"TagMap"})
_SCALARS = ("string", "integer", "long", "boolean", "blob")


def _shape(theirs: botocore.model.Shape) -> Shape:
    kind = theirs.type_name
    if kind == "structure":
        members = {}
        for name, member in theirs.members.items():
            shape = _shape(member)
            wire = name[0].upper() + name[1:].removesuffix("s") if shape.kind == "map" else None
            members[name] = Member(shape, wire)
        return Shape(kind, members=members, required=frozenset(theirs.required_members))
    if kind == "list":
        item = _ITEMS.get(theirs.name, theirs.name.removesuffix("List"))
        return Shape(kind, member=_shape(theirs.member), item=item)
    if kind == "map":
        key_name = "Key" if theirs.name in _KEYED else "Name"
        return Shape(kind, value=_shape(theirs.value), key_name=key_name)
    assert kind in _SCALARS, kind
    return Shape(kind)


def service_model() -> botocore.model.ServiceModel:
    """botocore's own model of SQS (never one on ``AWS_DATA_PATH`` or in ``~/.aws``)."""
    loader = Loader(
        extra_search_paths=[Loader.BUILTIN_DATA_PATH], include_default_search_paths=False
    )
    return botocore.model.ServiceModel(loader.load_service_model("sqs", "service-2"), "sqs")


@dataclass(frozen=True)
class Action:
    """One SQS action: ``grant`` is the action a queue's policy must allow
    another account to run it (itself, or a batch's single action); None
    when only the queue's owner may run it."""

    name: str
    input: Shape
    output: Shape
    grant: str | None

    @property
    def owner_only(self) -> bool:
        return self.grant is None

    @property
    def handler(self) -> str:
        """The name of its method of :class:`queuey.sqs.actions.SQSService`."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", self.name).lower()


OWNER = None
#: Every action the endpoint answers, and what a policy must allow for another
#: account to run it (``OWNER``: nothing can).
_GRANTS: dict[str, str | None] = {
    "AddPermission": OWNER,
    "CancelMessageMoveTask": OWNER,
    "ChangeMessageVisibility": "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
    "CreateQueue": OWNER,
    "DeleteMessage": "DeleteMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "DeleteQueue": OWNER,
    "GetQueueAttributes": "GetQueueAttributes",
    "GetQueueUrl": "GetQueueUrl",
    "ListDeadLetterSourceQueues": "ListDeadLetterSourceQueues",
    "ListMessageMoveTasks": OWNER,
    "ListQueueTags": OWNER,
    "ListQueues": OWNER,
    "PurgeQueue": "PurgeQueue",
    "ReceiveMessage": "ReceiveMessage",
    "RemovePermission": OWNER,
    "SendMessage": "SendMessage",
    "SendMessageBatch": "SendMessage",
    "SetQueueAttributes": OWNER,
    "StartMessageMoveTask": OWNER,
    "TagQueue": OWNER,
    "UntagQueue": OWNER,
}
_EMPTY = Shape("structure")


def _actions(model: botocore.model.ServiceModel) -> dict[str, Action]:
    found = {}
    for name, grant in _GRANTS.items():
        operation = model.operation_model(name)
        output = operation.output_shape
        found[name] = Action(
            name,
            _shape(operation.input_shape),
            _EMPTY if output is None else _shape(output),
            grant,
        )
    return found


ACTIONS: dict[str, Action] = _actions(service_model())
