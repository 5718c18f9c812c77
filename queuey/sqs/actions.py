"""The SQS actions, on Queuey's service core.

Every action takes its input and answers its output as the JSON protocol
shapes them (member names of the SQS API); :mod:`.protocol` translates for the
query protocol. The input has been checked against the action's input shape
(member types and required members, :mod:`.query`), so an action checks only
values. Which actions there are is the action table's
(:mod:`.api`); the actions are grouped by what they act on:
:mod:`.queue_actions` (queues and message move tasks),
:mod:`.attribute_actions` (a queue's attributes and tags) and
:mod:`.message_actions` (sending, receiving, settling); :class:`SQSService`
is all of them, and runs one by its name.
"""

from __future__ import annotations

from queuey.core.services import Services
from queuey.sqs.api import ACTIONS
from queuey.sqs.attribute_actions import AttributeActions
from queuey.sqs.caller import SCAN, SUBSCRIPTION, Caller
from queuey.sqs.message_actions import MessageActions
from queuey.sqs.movetasks import MoveTasks
from queuey.sqs.permission_actions import PermissionActions
from queuey.sqs.queue_actions import QueueActions

__all__ = ["SCAN", "SUBSCRIPTION", "Caller", "SQSService"]


class SQSService(QueueActions, AttributeActions, MessageActions, PermissionActions):
    """Runs one action for one caller. Shared by every request of a process."""

    def __init__(self, services: Services) -> None:
        super().__init__(services)
        self.moves = MoveTasks(services.storage, services.workqueues, services.clock)

    def call(self, action: str, caller: Caller, params: dict) -> dict:
        """Run ``action``, one of the table's (the view refuses any other)."""
        return getattr(self, ACTIONS[action].handler)(caller, params)
