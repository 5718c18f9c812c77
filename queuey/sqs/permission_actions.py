"""The SQS actions on a queue's access policy: AddPermission, RemovePermission.

Each adds or removes one statement of the queue's ``Policy`` attribute (the
``sqs.Policy`` entry of its attributes, :mod:`queuey.sqs.policy`), in the shape
Amazon writes: ``Sid`` the label, ``Principal`` the accounts' root ARNs,
``Action`` ``SQS:<name>``, ``Resource`` the queue's ARN. The change is a
compare-and-set of that one entry against the policy as read: when another
call changed it meanwhile, the policy is read again and the change made anew,
so concurrent calls with different labels all take effect.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from queuey.errors import QueueNotFound
from queuey.model import AttributesChanged, QueueMeta
from queuey.sqs import policy
from queuey.sqs import queues as qs
from queuey.sqs.caller import Actions, Caller
from queuey.sqs.errors import SQSError, invalid, missing

KEY = "sqs.Policy"
_LABEL = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_ACCOUNT = re.compile(r"^[0-9]{12}$")
#: Times a permission change reads the policy again after losing a race.
ATTEMPTS = 20
#: The names AddPermission takes besides the grantable actions.
_NAMES = policy.GRANTABLE | {"*"}


def _label(params: Mapping) -> str:
    label = params.get("Label")
    if label is None or label == "":
        raise missing("Label")
    if not isinstance(label, str) or not _LABEL.match(label):
        raise invalid(
            f"Value {str(label)[:100]} for parameter Label is invalid. Reason: Can only include "
            "alphanumeric characters, hyphens, or underscores. 1 to 80 in length."
        )
    return label


def _list(params: Mapping, name: str, member: str) -> list[str]:
    values = params.get(name)
    if not values:
        raise missing(member)
    return list(dict.fromkeys(values))  # each once, in the order given


def _accounts(params: Mapping) -> list[str]:
    accounts = _list(params, "AWSAccountIds", "AWSAccountIds")
    for account in accounts:
        if not _ACCOUNT.match(account):
            raise invalid(
                f"Value {account[:100]} for parameter AWSAccountIds is invalid. Reason: An AWS "
                "account id is 12 digits."
            )
    return accounts


def _actions(params: Mapping) -> list[str]:
    actions = _list(params, "Actions", "ActionName")
    for action in actions:
        if action in policy.OWNER_ONLY:
            reason = "Only the queue owner is allowed to invoke this action."
        elif action not in _NAMES:
            reason = "Please refer to the appropriate WSDL for a list of valid actions."
        else:
            continue
        raise invalid(
            f"Value SQS:{action[:100]} for parameter ActionName is invalid. Reason: {reason}"
        )
    return actions


def _one_or_list(values: list[str]) -> str | list[str]:
    return values[0] if len(values) == 1 else values


def _text(document: dict) -> str:
    return json.dumps(document, separators=(",", ":"))


class PermissionActions(Actions):
    """AddPermission, RemovePermission."""

    def add_permission(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)  # another account's: refused there
        label = _label(params)
        accounts = _accounts(params)
        actions = _actions(params)
        arn = caller.place.arn(meta.name)
        statement = {
            "Sid": label,
            "Effect": "Allow",
            "Principal": {"AWS": _one_or_list([f"arn:aws:iam::{a}:root" for a in accounts])},
            "Action": _one_or_list([f"SQS:{a}" for a in actions]),
            "Resource": arn,
        }

        def change(current: str | None) -> dict[str, Any]:
            document = policy.document(current) if current else None
            if document is None:  # none yet (or unreadable, from before policies were checked)
                document = {"Version": "2008-10-17", "Id": f"{arn}/SQSDefaultPolicy"}
            found = policy.statements(document)
            if any(isinstance(s, dict) and s.get("Sid") == label for s in found):
                raise invalid(
                    f"Value {label} for parameter Label is invalid. Reason: Already exists."
                )
            if len(found) >= policy.MAX_STATEMENTS:
                raise SQSError(
                    "OverLimit",
                    f"{len(found) + 1} Statements were found, maximum allowed is "
                    f"{policy.MAX_STATEMENTS}.",
                )
            document["Statement"] = [*found, statement]
            text = _text(document)
            if len(text) > policy.MAX_TEXT:
                raise SQSError("OverLimit", "The queue's policy would be too long.")
            return {"attributes_set": {KEY: text}}

        self._change_policy(meta, change)
        return {}

    def remove_permission(self, caller: Caller, params: dict) -> dict:
        meta = self._queue(caller, params)
        label = _label(params)

        def change(current: str | None) -> dict[str, Any]:
            document = policy.document(current) if current else None
            found = policy.statements(document) if document else []
            kept = [s for s in found if not (isinstance(s, dict) and s.get("Sid") == label)]
            if len(kept) == len(found):
                raise invalid(
                    f"Value {label} for parameter Label is invalid. Reason: can't find label."
                )
            if not kept:
                return {"attributes_removed": [KEY]}
            document["Statement"] = kept
            return {"attributes_set": {KEY: _text(document)}}

        self._change_policy(meta, change)
        return {}

    def _change_policy(self, meta: QueueMeta, change) -> None:
        """Apply ``change`` (the policy text as stored, or None → the update's
        arguments) as a compare-and-set, read again after a lost race."""
        for _ in range(ATTEMPTS):
            try:
                current = self.queues.fresh(meta.application, meta.name).attributes.get(KEY)
                self.queues.update(
                    meta.application, meta.name, attributes_if={KEY: current}, **change(current)
                )
                return
            except AttributesChanged:
                continue
            except QueueNotFound:  # deleted meanwhile
                raise qs.no_such_queue() from None
        raise SQSError("ServiceUnavailable", "The queue's policy is changing; retry.")
