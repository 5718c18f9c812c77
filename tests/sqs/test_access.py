"""Who may use the SQS endpoint: SigV4 signatures, clock skew, the allowlist;
and raw requests of both protocols (errors, XML, presigned URLs)."""

from __future__ import annotations

import datetime
import hashlib
import json
import xml.etree.ElementTree as ET

import pytest
import requests
from botocore.exceptions import ClientError

from tests.sqs.conftest import make_client
from tests.sqs.signing import sign_at
from tests.support import REMOTE_SQS_SECRET, SQS_SECRET

NS = "{http://queue.amazonaws.com/doc/2012-11-05/}"


def code(exc: pytest.ExceptionInfo) -> str:
    return exc.value.response["Error"]["Code"]


def stored_queues(sqs) -> list[str]:
    return [q.name for q in sqs.app.registry.queuey.storage.list_queues(sqs.application)]


def test_wrong_secret_never_reaches_storage(sqs):
    bad = make_client(sqs.url, sqs.application, sqs.protocol, secret="wrong")
    sqs.clients.append(bad)
    with pytest.raises(ClientError) as exc:
        bad.create_queue(QueueName="never")
    assert code(exc) == "SignatureDoesNotMatch"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert stored_queues(sqs) == []


def test_unknown_access_key(sqs):
    """Answered as a wrong secret is (code, status and text), so application
    names cannot be found by trying them."""
    stranger = make_client(sqs.url, "no-such-application", sqs.protocol)
    wrong = make_client(sqs.url, sqs.application, sqs.protocol, secret="wrong")
    sqs.clients += [stranger, wrong]
    answers = []
    for client in (stranger, wrong):
        with pytest.raises(ClientError) as exc:
            client.list_queues()
        error = exc.value.response["Error"]
        status = exc.value.response["ResponseMetadata"]["HTTPStatusCode"]
        answers.append((error["Code"], error["Message"], status))
    assert answers[0] == answers[1]
    assert answers[0][0] == "SignatureDoesNotMatch"


def test_allowlist_applies(sqs):
    # The remote application may only call from 10.0.0.0/8; this test calls from loopback.
    remote = make_client(sqs.url, sqs.remote_application, sqs.protocol, REMOTE_SQS_SECRET)
    sqs.clients.append(remote)
    with pytest.raises(ClientError) as exc:
        remote.create_queue(QueueName="from-here")
    assert code(exc) == "AccessDenied"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert [
        q.name for q in sqs.app.registry.queuey.storage.list_queues(sqs.remote_application)
    ] == []


def _signed(url, app, body, headers, when, query=False, secret=SQS_SECRET, method="POST"):
    return sign_at(when, url, app, secret, body=body, headers=headers, method=method, query=query)


@pytest.mark.parametrize("skew_minutes, ok", [(-14, True), (14, True), (-16, False), (16, False)])
def test_clock_skew(sqs, skew_minutes, ok):
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=skew_minutes)
    body = json.dumps({}).encode()
    headers = {
        "X-Amz-Target": "AmazonSQS.ListQueues",
        "Content-Type": "application/x-amz-json-1.0",
    }
    prepared = _signed(sqs.url + "/", sqs.application, body, headers, when)
    answer = requests.post(prepared.url, data=body, headers=dict(prepared.headers), timeout=30)
    if ok:
        assert answer.status_code == 200, answer.text
    else:
        assert answer.status_code == 400
        assert answer.json()["__type"].endswith("#RequestExpired")
        assert answer.headers["x-amzn-query-error"].startswith("RequestExpired;")


def test_query_protocol_raw_xml_and_queue_url_path(sqs):
    client = sqs.client()
    url = client.create_queue(QueueName="raw")["QueueUrl"]
    when = datetime.datetime.now(datetime.UTC)
    body = "Action=SendMessage&Version=2012-11-05&MessageBody=hello+there%21"
    headers = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
    # POST to the queue's URL: the path names the queue (no QueueUrl parameter).
    prepared = _signed(url, sqs.application, body, headers, when)
    answer = requests.post(url, data=body, headers=dict(prepared.headers), timeout=30)
    assert answer.status_code == 200, answer.text
    root = ET.fromstring(answer.content)
    assert root.tag == NS + "SendMessageResponse"
    digest = root.find(f"{NS}SendMessageResult/{NS}MD5OfMessageBody").text
    assert digest == hashlib.md5(b"hello there!").hexdigest()
    assert root.find(f"{NS}ResponseMetadata/{NS}RequestId").text
    got = client.receive_message(QueueUrl=url)["Messages"]
    assert [m["Body"] for m in got] == ["hello there!"]


def test_presigned_get(sqs):
    client = sqs.client()
    url = client.create_queue(QueueName="presigned")["QueueUrl"]
    when = datetime.datetime.now(datetime.UTC)
    target = f"{url}?Action=GetQueueAttributes&AttributeName.1=QueueArn&Version=2012-11-05"
    prepared = _signed(target, sqs.application, b"", {}, when, query=True, method="GET")
    answer = requests.get(prepared.url, timeout=30)
    assert answer.status_code == 200, answer.text
    assert b"<Name>QueueArn</Name>" in answer.content
    tampered = prepared.url.replace("QueueArn", "VisibilityTimeout")
    refused = requests.get(tampered, timeout=30)
    assert refused.status_code == 403
    assert b"<Code>SignatureDoesNotMatch</Code>" in refused.content
    expired = _signed(
        target,
        sqs.application,
        b"",
        {},
        when - datetime.timedelta(minutes=10),
        query=True,
        method="GET",
    )
    assert b"RequestExpired" in requests.get(expired.url, timeout=30).content


@pytest.mark.parametrize(
    "body, status, expected",
    [
        ("Version=2012-11-05", 400, "MissingAction"),
        ("Action=Explode&Version=2012-11-05", 400, "InvalidAction"),
    ],
)
def test_query_protocol_errors(sqs, body, status, expected):
    when = datetime.datetime.now(datetime.UTC)
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    prepared = _signed(sqs.url + "/", sqs.application, body, headers, when)
    answer = requests.post(sqs.url + "/", data=body, headers=dict(prepared.headers), timeout=30)
    assert answer.status_code == status
    root = ET.fromstring(answer.content)
    assert root.find(f"{NS}Error/{NS}Code").text == expected
    assert root.find(f"{NS}Error/{NS}Type").text == "Sender"


def test_missing_authentication(sqs):
    answer = requests.post(
        sqs.url + "/",
        data="{}",
        headers={
            "X-Amz-Target": "AmazonSQS.ListQueues",
            "Content-Type": "application/x-amz-json-1.0",
        },
        timeout=30,
    )
    assert answer.status_code == 403
    assert answer.json()["__type"].endswith("#MissingAuthenticationToken")


def test_json_protocol_bad_bodies(sqs):
    when = datetime.datetime.now(datetime.UTC)
    for body in (b"[1, 2]", b"{not json", b'{"QueueName": 5}', b"\xff\xfe"):
        headers = {
            "X-Amz-Target": "AmazonSQS.CreateQueue",
            "Content-Type": "application/x-amz-json-1.0",
        }
        prepared = _signed(sqs.url + "/", sqs.application, body, headers, when)
        answer = requests.post(sqs.url + "/", data=body, headers=dict(prepared.headers), timeout=30)
        assert answer.status_code == 400, (body, answer.text)
        assert "__type" in answer.json()
    assert stored_queues(sqs) == []


def test_two_applications_may_not_share_an_sqs_secret(tmp_path):
    """SigV4 signs the scope but not the access key id: with one secret shared,
    a request signed for one application is good for the other once its access
    key is swapped. The service refuses such a file at start-up, naming both."""
    from queuey.applications import applications_from_mapping, load_applications
    from queuey.errors import ConfigurationError

    path = tmp_path / "apps.ini"
    path.write_text(
        "[application:alpha]\nkeys = plain:a\nsqs_secret = same\n\n"
        "[application:beta]\nkeys = plain:b\nsqs_secret = other same\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigurationError) as refused:
        load_applications(path)
    assert "'alpha' and 'beta' share an SQS secret" in str(refused.value)
    with pytest.raises(ConfigurationError):
        applications_from_mapping(
            {
                "a": {"keys": "plain:a", "sqs_secrets": "s"},
                "b": {"keys": "plain:b", "sqs_secrets": "s"},
            }
        )
    path.write_text(
        "[application:alpha]\nkeys = plain:a\nsqs_secret = one\n\n"
        "[application:beta]\nkeys = plain:b\nsqs_secret = two\n",
        encoding="utf-8",
    )
    assert sorted(load_applications(path)) == ["alpha", "beta"]
