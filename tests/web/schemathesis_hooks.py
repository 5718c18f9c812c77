"""Schemathesis hooks for ``test_schemathesis.py`` (loaded via SCHEMATHESIS_HOOKS).

Two answers are right by docs/api.rst yet look wrong to a fuzzer that only knows
the schema; each is dropped only when it is exactly that case:

* ST202 (valid request rejected) whose every error is a rule about the queue's
  current state (a partition the queue does not have, partitions shrinking)
  or ``partition`` together with ``partition_key`` (a rule across two query
  parameters that OpenAPI cannot state), or whose every error is a filter
  rule across a filter's parts (``FILTER_RULES_UNSTATED``: its size, decimal
  places, a range's bounds in order), or, on ``POST /schedules``, whose every
  error is a schedule rule a schema cannot state (``SCHEDULE_RULES_UNSTATED``:
  the queue must exist, the cron grammar, zone names, the message rules
  against the queue). Any other 400 still fails the run.
* ST301 (deleted resource still available) after ``DELETE ?delete=false``,
  which purges the messages and keeps the queue (docs/api.rst); a real delete
  followed by a successful read still fails the run.
* ST101 (server error) whose answer is flow control's documented refusal of
  a post: 503 naming ``paused`` (the fuzzer paused the queue) or 507 naming
  ``max_length`` (docs/flow.rst). A 5xx with any other error still fails.
"""

from __future__ import annotations

import json
import os
import re

import schemathesis

from queuey.coerce import as_bool
from queuey.web.filter_schema import FILTER_RULES_UNSTATED
from queuey.web.schedules import SCHEDULE_RULES_UNSTATED
from queuey.web.schemas import QUEUE_STATE_MESSAGES

_STATE = [re.compile(pattern) for pattern in QUEUE_STATE_MESSAGES]
_FILTER = [re.compile(pattern) for pattern in FILTER_RULES_UNSTATED]
_SCHEDULE = [re.compile(pattern) for pattern in SCHEDULE_RULES_UNSTATED]
#: queue name -> "purge" or "delete", the last successful DELETE of it.
_LAST_DELETE: dict[str, str] = {}


@schemathesis.hook
def after_call(context, case, response) -> None:
    if case.operation.method.upper() != "DELETE" or case.operation.path != "/queue/{name}":
        return
    if not 200 <= response.status_code < 300:
        return
    raw = (case.query or {}).get("delete", "true")
    try:
        purge = not as_bool(raw)
    except ValueError:
        purge = False
    _LAST_DELETE[str(case.path_parameters["name"])] = "purge" if purge else "delete"


#: Flow control's refusals of a post that are 5xx: status -> the setting named.
_FLOW_REFUSALS = {503: "paused", 507: "max_length"}


def _errors(response, status: int = 400) -> dict:
    if response.status_code != status:
        return {}
    try:
        errors = json.loads(response.content)["error_msg"]
    except (ValueError, KeyError, TypeError):
        return {}
    return errors if isinstance(errors, dict) else {}


def _only_state_errors(response) -> bool:
    errors = _errors(response)
    return bool(errors) and all(
        any(p.fullmatch(message) for p in _STATE) for message in errors.values()
    )


def _only_unstated_filter_rules(response) -> bool:
    errors = _errors(response)
    return bool(errors) and all(
        field.startswith("filter") and any(p.fullmatch(message) for p in _FILTER)
        for field, message in errors.items()
    )


def _only_unstated_schedule_rules(case, response) -> bool:
    if case.operation.path != "/schedules":
        return False
    errors = _errors(response)
    return bool(errors) and all(
        any(p.fullmatch(message) for p in _SCHEDULE) for message in errors.values()
    )


def _dropped(failure, response, why: str) -> bool:
    """Note a dropped failure in $QUEUEY_ST_DROPPED, for the test to report."""
    path = os.environ.get("QUEUEY_ST_DROPPED")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            body = response.content[:300].decode("utf-8", "replace").replace("\n", " ")
            out.write(f"{failure.code}\t{failure.operation}\t{why}\t{body}\n")
    return False


@schemathesis.hook
def filter_failure(context, failure, case, response) -> bool:
    """True keeps the failure."""
    if failure.code == "ST202" and _only_state_errors(response):
        return _dropped(failure, response, "queue state")
    if failure.code == "ST202" and _only_unstated_filter_rules(response):
        return _dropped(failure, response, "filter rule across parts")
    if failure.code == "ST202" and _only_unstated_schedule_rules(case, response):
        return _dropped(failure, response, "schedule rule")
    if failure.code == "ST101":
        field = _FLOW_REFUSALS.get(response.status_code)
        if field and list(_errors(response, response.status_code)) == [field]:
            return _dropped(failure, response, f"flow control: {field}")
    if failure.code == "ST301":
        name = failure.free.rsplit("/", 1)[-1]
        if _LAST_DELETE.get(name) == "purge":
            return _dropped(failure, response, "after a purge")
    return True
