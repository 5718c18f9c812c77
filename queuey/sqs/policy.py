"""A queue's access policy (the SQS ``Policy`` attribute): checked when it is
set, and asked whether another application may run an action on the queue.

A policy is Amazon's JSON document: ``Statement`` (one object or a list of at
most :data:`MAX_STATEMENTS`), each with ``Effect`` (``Allow`` or ``Deny``),
``Principal`` (or ``NotPrincipal``), ``Action`` (or ``NotAction``) and
optionally ``Resource`` (or ``NotResource``), ``Condition`` and ``Sid``.
An application is an account: a principal names it as ``"*"``,
``{"AWS": "*"}``, its 12-digit account id or ``arn:aws:iam::<id>:root``.
Actions and resources may hold ``*`` and ``?`` wildcards, as IAM's do.

Conditions are not evaluated: a statement with a ``Condition`` never allows,
and a ``Deny`` with one always applies (refusing too much, never too little).
Only :data:`GRANTABLE` actions can be allowed to another account (the batch
actions with their single action); the others (the queue's settings, tags,
permissions, deletion) stay the owner's. Both come from the action table
(:mod:`queuey.sqs.api`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from queuey.sqs.api import ACTIONS
from queuey.sqs.errors import SQSError

if TYPE_CHECKING:
    from queuey.sqs.queues import Place

#: Statements one policy holds at most (SQS's limit).
MAX_STATEMENTS = 20
#: Characters of a policy, at most (SQS's limit for an attribute value).
MAX_TEXT = 20480
#: Characters of one resource pattern, at most (an ARN is far shorter).
MAX_PATTERN = 512
VERSIONS = ("2008-10-17", "2012-10-17")
#: The actions a policy can allow another account (a batch action is allowed
#: by its single action's permission), and those only a queue's owner runs
#: (AddPermission names them with its own text): both from the action table.
GRANTABLE = frozenset(a.name for a in ACTIONS.values() if a.grant == a.name)
OWNER_ONLY = frozenset(a.name for a in ACTIONS.values() if a.owner_only)
STATEMENT_KEYS = frozenset(
    (
        "Sid",
        "Effect",
        "Principal",
        "NotPrincipal",
        "Action",
        "NotAction",
        "Resource",
        "NotResource",
        "Condition",
    )
)
PRINCIPAL_KINDS = frozenset(("AWS", "Service", "Federated", "CanonicalUser"))
_ACCOUNT = re.compile(r"^[0-9]{12}$")
_IAM_ARN = re.compile(r"^arn:aws:iam::[0-9]{12}:\S+$")
_ACTION = re.compile(r"^sqs:[A-Za-z*?]{1,128}$", re.IGNORECASE)


def invalid_policy() -> SQSError:
    return SQSError("InvalidAttributeValue", "Invalid value for the parameter Policy.")


class _Invalid(ValueError):
    pass


def checked(text: str, place: Place) -> str:
    """``text`` as stored for a ``Policy`` attribute set at ``place`` (not empty:
    an empty value removes the attribute). A document this module cannot read
    is refused with ``InvalidAttributeValue``."""
    if _parse(text) is None:
        raise invalid_policy()
    return text


@dataclass(frozen=True)
class _Glob:
    """An IAM pattern: ``*`` any run of characters, ``?`` any one character;
    ``fold``: letters match in either case. Matched in time linear in the
    pattern times the value (no regular expression, so no backtracking blow-up
    on a pattern full of stars)."""

    pattern: str
    fold: bool = False

    def fullmatch(self, value: str) -> bool:
        pattern = self.pattern.lower() if self.fold else self.pattern
        return _wildcard(pattern, value.lower() if self.fold else value)


def _wildcard(pattern: str, text: str) -> bool:
    p = t = 0
    star, mark = -1, 0  # the last star seen, and where in text it started matching
    while t < len(text):
        if p < len(pattern) and pattern[p] in ("?", text[t]):
            p, t = p + 1, t + 1
        elif p < len(pattern) and pattern[p] == "*":
            star, mark, p = p, t, p + 1
        elif star >= 0:
            mark += 1
            p, t = star + 1, mark
        else:
            return False
    return pattern[p:].strip("*") == ""


@dataclass(frozen=True)
class _Matcher:
    """Principals, actions or resources of a statement: the patterns, and
    whether the statement names them with ``Not...`` (matching everything else)."""

    patterns: tuple[_Glob, ...]
    negated: bool = False

    def __call__(self, value: str) -> bool:
        return any(p.fullmatch(value) for p in self.patterns) != self.negated


#: A statement that leaves out ``Resource`` applies to the queue it is on.
_ANY = _Matcher((_Glob("*"),))


@dataclass(frozen=True)
class _Statement:
    allow: bool
    conditional: bool
    principal: _Matcher
    action: _Matcher
    resource: _Matcher


def _strings(value: Any) -> list[str]:
    """A string or a non-empty list of strings, as a list."""
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        raise _Invalid
    return values


def _principals(value: Any) -> tuple[_Glob, ...]:
    """The accounts a principal names, as patterns of account ids (other kinds
    of principal, services for example, are kept out: no application is one)."""
    if value == "*":
        return (_Glob("*"),)
    if not isinstance(value, dict) or not value or not set(value) <= PRINCIPAL_KINDS:
        raise _Invalid
    found = []
    for kind, given in value.items():
        for one in _strings(given):
            if kind != "AWS":
                continue
            if one == "*":
                found.append(_Glob("*"))
            elif _ACCOUNT.match(one):
                found.append(_Glob(one))
            elif _IAM_ARN.match(one):
                account, _, who = one[len("arn:aws:iam::") :].partition(":")
                if who == "root":  # an account; a user or role of it is no application
                    found.append(_Glob(account))
            else:
                raise _Invalid
    return tuple(found)


def _statement(raw: Any) -> _Statement:
    if not isinstance(raw, dict) or not set(raw) <= STATEMENT_KEYS:
        raise _Invalid
    if raw.get("Effect") not in ("Allow", "Deny") or not isinstance(raw.get("Sid", ""), str):
        raise _Invalid
    if ("Principal" in raw) == ("NotPrincipal" in raw) or ("Action" in raw) == ("NotAction" in raw):
        raise _Invalid
    if "Resource" in raw and "NotResource" in raw:
        raise _Invalid
    if "Condition" in raw and not isinstance(raw["Condition"], dict):
        raise _Invalid
    principal = raw.get("Principal", raw.get("NotPrincipal"))
    action = _strings(raw.get("Action", raw.get("NotAction")))
    if not all(a == "*" or _ACTION.match(a) for a in action):
        raise _Invalid
    resource = _ANY
    if "Resource" in raw or "NotResource" in raw:
        resources = _strings(raw.get("Resource", raw.get("NotResource")))
        if not all(r == "*" or (r.startswith("arn:") and len(r) <= MAX_PATTERN) for r in resources):
            raise _Invalid
        resource = _Matcher(tuple(_Glob(r) for r in resources), "NotResource" in raw)
    return _Statement(
        allow=raw["Effect"] == "Allow",
        conditional="Condition" in raw,
        principal=_Matcher(_principals(principal), "NotPrincipal" in raw),
        action=_Matcher(
            tuple(_Glob("sqs:*" if a == "*" else a, fold=True) for a in action),
            "NotAction" in raw,
        ),
        resource=resource,
    )


def document(text: str) -> dict | None:
    """The policy as a JSON object, or None when ``text`` is no such object."""
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def statements(parsed: dict) -> list:
    """The document's statements as a list (one statement may stand alone)."""
    found = parsed.get("Statement", [])
    if isinstance(found, dict):
        return [found]
    return found if isinstance(found, list) else []


@lru_cache(maxsize=512)
def _parse(text: str) -> tuple[_Statement, ...] | None:
    """The statements of a policy, or None when it is not a valid one (cached:
    a queue's policy is read on every call another account makes)."""
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        return None
    parsed = document(text)
    if parsed is None or not set(parsed) <= {"Version", "Id", "Statement"}:
        return None
    if parsed.get("Version", VERSIONS[0]) not in VERSIONS:
        return None
    if not isinstance(parsed.get("Id", ""), str) or "Statement" not in parsed:
        return None
    if not isinstance(parsed["Statement"], dict | list):
        return None
    raw = statements(parsed)
    if len(raw) > MAX_STATEMENTS:
        return None
    try:
        return tuple(_statement(s) for s in raw)
    except _Invalid:
        return None


def grant_action(action: str) -> str | None:
    """The permission an action needs from another account's queue, or None:
    only its owner may run it."""
    found = ACTIONS.get(action)
    return None if found is None else found.grant


def allows(text: str | None, account_id: str, action: str, arn: str) -> bool:
    """Whether the policy ``text`` lets the account ``account_id`` run
    ``action`` on the queue ``arn``: a statement allows it, none denies it."""
    needed = grant_action(action)
    if needed is None or not text:
        return False
    found = _parse(text)
    if found is None:  # stored before policies were checked: it allows nothing
        return False
    wanted = "sqs:" + needed
    allowed = False
    for statement in found:
        if not (
            statement.principal(account_id) and statement.action(wanted) and statement.resource(arn)
        ):
            continue
        if not statement.allow:
            return False  # with a Condition or not: refusing is the safe side
        if not statement.conditional:
            allowed = True
    return allowed


def denied(action: str, url: str) -> SQSError:
    """The answer to a call on another account's queue it may not make, whether
    or not the queue (or the account) exists."""
    if action == "GetQueueUrl":
        return SQSError(
            "QueueDoesNotExist",
            "The specified queue does not exist or you do not have access to it.",
        )
    return SQSError("AccessDenied", f"Access to the resource {url} is denied.")
