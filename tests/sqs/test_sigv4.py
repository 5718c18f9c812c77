"""SigV4 verification against signatures made by botocore, the client side."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queuey.sqs import sigv4
from queuey.sqs.errors import SQSError
from tests.sqs.signing import sign_at

pytestmark = pytest.mark.unit

WHEN = datetime.datetime(2026, 11, 24, 1, 2, 3, tzinfo=datetime.UTC)
NOW = WHEN.timestamp()
SECRETS = {"app": ["s3cret"], "rotating": ["old", "new"]}


def secrets_for(key: str):
    return SECRETS.get(key, [])


def signed(
    url: str = "http://127.0.0.1:5000/",
    body: bytes | str = b"",
    headers: dict | None = None,
    method: str = "POST",
    key: str = "app",
    secret: str = "s3cret",
    service: str = "sqs",
    query: bool = False,
    expires: int = 300,
    when: datetime.datetime = WHEN,
) -> sigv4.SignedRequest:
    prepared = sign_at(
        when,
        url,
        key,
        secret,
        body=body,
        headers=headers,
        method=method,
        service=service,
        region="eu-west-1",
        query=query,
        expires=expires,
    )
    path, _, raw_query = prepared.url.split("://", 1)[1].partition("/")[2].partition("?")
    host = prepared.url.split("://", 1)[1].split("/", 1)[0]
    headers = {"Host": host, **dict(prepared.headers)}
    data = prepared.body or b""
    return sigv4.SignedRequest(
        method=method,
        path="/" + path,
        query=raw_query,
        headers=headers,
        body=data.encode() if isinstance(data, str) else data,
    )


def code_of(request: sigv4.SignedRequest, now: float = NOW) -> str:
    with pytest.raises(SQSError) as exc:
        sigv4.verify(request, secrets_for, now)
    return exc.value.name


JSON_HEADERS = {
    "X-Amz-Target": "AmazonSQS.ListQueues",
    "Content-Type": "application/x-amz-json-1.0",
}


def test_json_protocol_post():
    request = signed(body=b'{"QueueNamePrefix":"a"}', headers=JSON_HEADERS)
    credential = sigv4.verify(request, secrets_for, NOW)
    assert credential == sigv4.Credential("app", "20261124", "eu-west-1", "sqs")


def test_form_post_to_a_queue_url():
    request = signed(
        url="http://localhost:5000/123456789012/my-queue",
        body="Action=SendMessage&MessageBody=hi%20there%21&Version=2012-11-05",
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
    )
    assert sigv4.verify(request, secrets_for, NOW).access_key == "app"


@pytest.mark.parametrize(
    "query",
    [
        "Action=ListQueues&QueueNamePrefix=a%20b",
        "Action=ListQueues&QueueNamePrefix=%E2%98%83&Empty=",
        "B=2&A=1&A=0&Action=GetQueueUrl&QueueName=x%2By%2Fz%3D",
    ],
)
def test_get_with_query_parameters(query):
    request = signed(url=f"http://127.0.0.1:5000/?{query}", method="GET")
    assert sigv4.verify(request, secrets_for, NOW).access_key == "app"


def test_presigned_url():
    request = signed(
        url="http://127.0.0.1:5000/123456789012/q?Action=ReceiveMessage&Version=2012-11-05",
        method="GET",
        query=True,
    )
    assert "X-Amz-Signature" in request.query
    assert sigv4.verify(request, secrets_for, NOW).access_key == "app"
    assert code_of(request, NOW + 301) == "RequestExpired"
    tampered = sigv4.SignedRequest(
        request.method,
        request.path,
        request.query.replace("ReceiveMessage", "DeleteQueue"),
        request.headers,
        request.body,
    )
    assert code_of(tampered) == "SignatureDoesNotMatch"


def test_wrong_secret_unknown_key_and_service():
    assert code_of(signed(headers=JSON_HEADERS, secret="nope")) == "SignatureDoesNotMatch"
    assert code_of(signed(headers=JSON_HEADERS, key="stranger")) == "InvalidClientTokenId"
    assert code_of(signed(headers=JSON_HEADERS, service="sns")) == "SignatureDoesNotMatch"


def test_rotation_accepts_every_secret():
    for secret in ("old", "new"):
        request = signed(headers=JSON_HEADERS, key="rotating", secret=secret)
        assert sigv4.verify(request, secrets_for, NOW).access_key == "rotating"


def test_tampering_is_caught():
    request = signed(body=b'{"QueueName":"a"}', headers=JSON_HEADERS)
    for changed in (
        sigv4.SignedRequest(request.method, request.path, request.query, request.headers, b"{}"),
        sigv4.SignedRequest(
            request.method,
            request.path,
            request.query,
            {**request.headers, "X-Amz-Target": "AmazonSQS.DeleteQueue"},
            request.body,
        ),
        sigv4.SignedRequest(request.method, "/other", request.query, request.headers, request.body),
        sigv4.SignedRequest("PUT", request.path, request.query, request.headers, request.body),
    ):
        assert code_of(changed) == "SignatureDoesNotMatch"


@pytest.mark.parametrize("minutes, ok", [(-14, True), (14, True), (-16, False), (16, False)])
def test_clock_skew(minutes, ok):
    request = signed(headers=JSON_HEADERS)
    now = NOW + minutes * 60
    if ok:
        sigv4.verify(request, secrets_for, now)
    else:
        assert code_of(request, now) == "RequestExpired"


def test_missing_and_incomplete():
    bare = sigv4.SignedRequest("POST", "/", "", {"Host": "h"}, b"")
    assert code_of(bare) == "MissingAuthenticationToken"
    request = signed(headers=JSON_HEADERS)
    cut = dict(request.headers)
    cut["Authorization"] = cut["Authorization"].split(", Signature=")[0]
    assert code_of(sigv4.SignedRequest("POST", "/", "", cut, b"")) == "IncompleteSignature"
    no_date = {k: v for k, v in request.headers.items() if k != "X-Amz-Date"}
    assert code_of(sigv4.SignedRequest("POST", "/", "", no_date, b"")) == "IncompleteSignature"


def test_wire_path():
    assert sigv4.wire_path({"RAW_URI": "/1/q%20x?Action=A"}) == "/1/q%20x"
    assert sigv4.wire_path({"PATH_INFO": "/1/q x"}) == "/1/q%20x"
    assert sigv4.wire_path({"PATH_INFO": ""}) == "/"


@settings(max_examples=300)
@given(
    authorization=st.text(max_size=300),
    query=st.text(max_size=200),
    date=st.text(max_size=20),
    path=st.text(max_size=30),
)
def test_garbage_never_raises_anything_else(authorization, query, date, path):
    headers = {
        "Authorization": "AWS4-HMAC-SHA256 " + authorization,
        "X-Amz-Date": date,
        "Host": "h",
    }
    for candidate in (
        sigv4.SignedRequest("POST", "/" + path, query, headers, b""),
        sigv4.SignedRequest(
            "GET", "/" + path, "X-Amz-Algorithm=AWS4-HMAC-SHA256&" + query, {}, b""
        ),
    ):
        try:
            sigv4.verify(candidate, secrets_for, NOW)
        except SQSError:
            pass
