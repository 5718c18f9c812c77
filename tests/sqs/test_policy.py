"""A queue's ``Policy``: which documents are accepted, and whom they let do what
(:mod:`queuey.sqs.policy`); the account-id lookup the check starts from."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queuey.applications import applications_from_mapping, by_account_id
from queuey.sqs import policy
from queuey.sqs.errors import SQSError
from queuey.sqs.queues import Place

pytestmark = pytest.mark.unit

OWNER = "111111111111"
OTHER = "222222222222"
ARN = f"arn:aws:sqs:us-east-1:{OWNER}:jobs"
PLACE = Place("http://localhost", OWNER, "us-east-1", "us-east-1")


def doc(*statements: dict, **top) -> str:
    return json.dumps({"Version": "2012-10-17", **top, "Statement": list(statements)})


def allow(**fields) -> dict:
    return {"Effect": "Allow", "Principal": {"AWS": OTHER}, "Action": "sqs:SendMessage", **fields}


def deny(**fields) -> dict:
    return {**allow(**fields), "Effect": "Deny"}


def may(text: str, action: str = "SendMessage", account: str = OTHER, arn: str = ARN) -> bool:
    return policy.allows(text, account, action, arn)


# -- what is accepted ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        doc(allow()),
        doc(allow(), Id="x"),
        json.dumps({"Statement": allow()}),  # one statement, not in a list
        json.dumps({"Version": "2008-10-17", "Statement": []}),
        doc(allow(Principal="*", Action="*", Resource="*")),
        doc(allow(Principal={"AWS": ["*", f"arn:aws:iam::{OTHER}:root", OTHER]})),
        doc(allow(Principal={"AWS": f"arn:aws:iam::{OTHER}:user/alice"})),
        doc(allow(Principal={"Service": "sns.amazonaws.com"})),
        doc(allow(Action=["SQS:SendMessage", "sqs:receivemessage", "sqs:Get*"])),
        doc(allow(Resource=[ARN, "arn:aws:sqs:*:*:*"])),
        doc(allow(Condition={"ArnEquals": {"aws:SourceArn": "arn:aws:sns:us-east-1:1:t"}})),
        doc({"Sid": "s", "Effect": "Deny", "NotPrincipal": {"AWS": OTHER}, "NotAction": "sqs:*"}),
        doc(*[allow(Sid=str(n)) for n in range(20)]),
    ],
)
def test_a_policy_document_is_accepted_as_given(text):
    assert policy.checked(text, PLACE) == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "[]",
        '"text"',
        json.dumps({"Statement": [allow()], "Other": 1}),
        json.dumps({"Version": "2020-01-01", "Statement": [allow()]}),
        json.dumps({"Id": 5, "Statement": [allow()]}),
        json.dumps({"Version": "2012-10-17"}),
        json.dumps({"Statement": "Allow"}),
        doc("not an object"),  # type: ignore[arg-type]
        doc(allow(Effect="allow")),
        doc(allow(Sid=3)),
        doc(allow(Extra=1)),
        doc({"Effect": "Allow", "Action": "sqs:SendMessage"}),  # no principal
        doc(allow(NotPrincipal="*")),  # both
        doc({"Effect": "Allow", "Principal": "*"}),  # no action
        doc(allow(NotAction="sqs:*")),  # both
        doc(allow(Resource=ARN, NotResource=ARN)),
        doc(allow(Principal="someone")),
        doc(allow(Principal={})),
        doc(allow(Principal={"AWS": "12345"})),
        doc(allow(Principal={"AWS": []})),
        doc(allow(Principal={"Robot": "x"})),
        doc(allow(Action="s3:GetObject")),
        doc(allow(Action="sqs:")),
        doc(allow(Action=["sqs:SendMessage", 5])),
        doc(allow(Resource="jobs")),
        doc(allow(Resource=[])),
        doc(allow(Condition="yes")),
        doc(*[allow(Sid=str(n)) for n in range(21)]),
        doc(allow(Sid="x" * 20480)),
    ],
)
def test_anything_else_is_refused_with_amazons_text(text):
    with pytest.raises(SQSError) as exc:
        policy.checked(text, PLACE)
    assert exc.value.name == "InvalidAttributeValue"
    assert exc.value.message == "Invalid value for the parameter Policy."


# -- whom it lets do what --------------------------------------------------------------------


@pytest.mark.parametrize(
    "principal, allowed",
    [
        ("*", True),
        ({"AWS": "*"}, True),
        ({"AWS": OTHER}, True),
        ({"AWS": f"arn:aws:iam::{OTHER}:root"}, True),
        ({"AWS": ["333333333333", OTHER]}, True),
        ({"AWS": "333333333333"}, False),
        ({"AWS": f"arn:aws:iam::{OTHER}:user/alice"}, False),  # a user is not the account
        ({"Service": "sns.amazonaws.com"}, False),
    ],
)
def test_principals(principal, allowed):
    assert may(doc(allow(Principal=principal))) is allowed


@pytest.mark.parametrize(
    "actions, call, allowed",
    [
        ("sqs:SendMessage", "SendMessage", True),
        ("SQS:SendMessage", "SendMessage", True),
        ("sqs:sendmessage", "SendMessage", True),
        ("sqs:SendMessage", "SendMessageBatch", True),
        ("sqs:DeleteMessage", "DeleteMessageBatch", True),
        ("sqs:ChangeMessageVisibility", "ChangeMessageVisibilityBatch", True),
        ("sqs:SendMessage", "ReceiveMessage", False),
        ("sqs:ReceiveMessage", "DeleteMessage", False),
        ("sqs:*", "PurgeQueue", True),
        ("*", "GetQueueUrl", True),
        ("sqs:Get*", "GetQueueAttributes", True),
        ("sqs:Get*", "SendMessage", False),
        (
            ["sqs:ReceiveMessage", "sqs:ListDeadLetterSourceQueues"],
            "ListDeadLetterSourceQueues",
            True,
        ),
        # Never granted, whatever the policy says.
        ("*", "SetQueueAttributes", False),
        ("sqs:*", "DeleteQueue", False),
        ("sqs:AddPermission", "AddPermission", False),
        ("*", "TagQueue", False),
        ("*", "ListQueueTags", False),
        ("*", "", False),
    ],
)
def test_actions(actions, call, allowed):
    assert may(doc(allow(Action=actions)), call) is allowed


@pytest.mark.parametrize(
    "resource, allowed",
    [
        (None, True),
        ("*", True),
        (ARN, True),
        ([f"arn:aws:sqs:us-east-1:{OWNER}:other", ARN], True),
        (f"arn:aws:sqs:*:{OWNER}:*", True),
        (f"arn:aws:sqs:us-east-1:{OWNER}:other", False),
        (f"arn:aws:sqs:eu-west-1:{OWNER}:jobs", False),
    ],
)
def test_resources(resource, allowed):
    fields = {} if resource is None else {"Resource": resource}
    assert may(doc(allow(**fields))) is allowed


def test_deny_beats_allow_in_any_order():
    assert not may(doc(allow(), deny()))
    assert not may(doc(deny(), allow(Principal="*", Action="*")))
    assert may(doc(allow(), deny(Action="sqs:ReceiveMessage")))
    assert may(doc(allow(), deny(Principal={"AWS": "333333333333"})))


def test_conditions_never_allow_and_always_deny():
    condition = {"Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}}
    assert not may(doc(allow(**condition)))
    assert may(doc(allow(**condition), allow()))
    assert not may(doc(allow(), deny(**condition)))


def test_not_elements_match_everything_else():
    everyone_but = {"Effect": "Allow", "NotPrincipal": {"AWS": "333333333333"}, "Action": "*"}
    assert may(doc(everyone_but))
    assert not may(doc(everyone_but), account="333333333333")
    not_receive = allow(Action=None, NotAction="sqs:ReceiveMessage")
    del not_receive["Action"]
    assert may(doc(not_receive))
    assert not may(doc(not_receive), "ReceiveMessage")
    assert not may(doc(allow(NotResource=ARN)))


def test_no_policy_and_unreadable_policies_allow_nothing():
    assert not may(None)
    assert not may("")
    assert not may("not json")  # stored before policies were checked
    assert not may(doc(allow(Effect="allow")))


def test_the_refusals():
    url = f"http://localhost/{OWNER}/jobs"
    refusal = policy.denied("SendMessage", url)
    assert (refusal.name, refusal.kind.status) == ("AccessDenied", 403)
    assert refusal.message == f"Access to the resource {url} is denied."
    hidden = policy.denied("GetQueueUrl", url)
    assert hidden.name == "QueueDoesNotExist"
    assert hidden.message == "The specified queue does not exist or you do not have access to it."


def test_an_account_id_names_one_application():
    apps = applications_from_mapping(
        {
            "a": {"keys": "plain:k1", "account_id": OWNER},
            "b": {"keys": "plain:k2", "account_id": OTHER},
            "c": {"keys": "plain:k3", "account_id": "333333333333"},
            "d": {"keys": "plain:k4", "account_id": "333333333333"},
        }
    )
    assert by_account_id(apps, OWNER).name == "a"
    assert by_account_id(apps, OTHER).name == "b"
    assert by_account_id(apps, "444444444444") is None
    assert by_account_id(apps, "333333333333") is None  # configured twice: no one


@given(pattern=st.text(alphabet="ab*?", max_size=10), value=st.text(alphabet="ab", max_size=10))
def test_wildcards_match_as_iam_globs(pattern, value):
    """``*`` any run, ``?`` one character, everything else itself: the same
    answer as a regular expression built from the pattern."""
    expected = re.fullmatch(
        re.escape(pattern).replace(r"\*", ".*").replace(r"\?", "."), value, re.DOTALL
    )
    assert policy._wildcard(pattern, value) == (expected is not None)


def test_a_pattern_full_of_stars_is_decided_without_blowing_up():
    """A regular expression of this resource backtracks for longer than any
    request may take; the matcher walks it once per position."""
    resource = "arn:" + "*a" * 200 + "*b"
    text = doc(allow(Resource=resource))
    assert not policy.allows(text, OTHER, "SendMessage", ARN + "a" * 60)
    assert policy.allows(text, OTHER, "SendMessage", ARN + "a" * 200 + "b")
