"""SigV4 verification against signatures made by botocore, the client side."""

from __future__ import annotations

import datetime
import hashlib
from unittest import mock
from urllib.parse import quote

import pytest
from botocore.auth import SigV4QueryAuth
from hypothesis import given, settings
from hypothesis import strategies as st

from queuey.sqs import sigv4
from queuey.sqs.errors import SQSError
from tests.sqs.signing import sign_at

pytestmark = pytest.mark.unit

WHEN = datetime.datetime(2026, 11, 24, 1, 2, 3, tzinfo=datetime.UTC)
NOW = WHEN.timestamp()
SECRETS = {"app": ["s3cret"], "rotating": ["old", "new"]}
REGION = "eu-west-1"
UNSIGNED = "UNSIGNED-PAYLOAD"


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
        region=REGION,
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
        sigv4.verify(request, secrets_for, now, region=REGION)
    return exc.value.name


JSON_HEADERS = {
    "X-Amz-Target": "AmazonSQS.ListQueues",
    "Content-Type": "application/x-amz-json-1.0",
}


def test_json_protocol_post():
    request = signed(body=b'{"QueueNamePrefix":"a"}', headers=JSON_HEADERS)
    credential = sigv4.verify(request, secrets_for, NOW, region=REGION)
    assert credential == sigv4.Credential("app", "20261124", "eu-west-1", "sqs")


def test_form_post_to_a_queue_url():
    request = signed(
        url="http://localhost:5000/123456789012/my-queue",
        body="Action=SendMessage&MessageBody=hi%20there%21&Version=2012-11-05",
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
    )
    assert sigv4.verify(request, secrets_for, NOW, region=REGION).access_key == "app"


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
    assert sigv4.verify(request, secrets_for, NOW, region=REGION).access_key == "app"


def test_presigned_url():
    request = signed(
        url="http://127.0.0.1:5000/123456789012/q?Action=ReceiveMessage&Version=2012-11-05",
        method="GET",
        query=True,
    )
    assert "X-Amz-Signature" in request.query
    assert sigv4.verify(request, secrets_for, NOW, region=REGION).access_key == "app"
    assert code_of(request, NOW + 301) == "RequestExpired"
    tampered = sigv4.SignedRequest(
        request.method,
        request.path,
        request.query.replace("ReceiveMessage", "DeleteQueue"),
        request.headers,
        request.body,
    )
    assert code_of(tampered) == "SignatureDoesNotMatch"


def refusal(request: sigv4.SignedRequest, now: float = NOW) -> SQSError:
    with pytest.raises(SQSError) as exc:
        sigv4.verify(request, secrets_for, now, region=REGION)
    return exc.value


def test_wrong_secret_unknown_key_and_service():
    assert code_of(signed(headers=JSON_HEADERS, secret="nope")) == "SignatureDoesNotMatch"
    assert code_of(signed(headers=JSON_HEADERS, service="sns")) == "SignatureDoesNotMatch"


def test_unknown_key_answers_as_a_wrong_secret():
    """Which applications exist cannot be learnt by trying names."""
    wrong = refusal(signed(headers=JSON_HEADERS, secret="nope"))
    unknown = refusal(signed(headers=JSON_HEADERS, key="stranger"))
    assert (unknown.name, unknown.kind.status, unknown.message) == (
        wrong.name,
        wrong.kind.status,
        wrong.message,
    )


def test_unknown_key_costs_an_hmac(monkeypatch):
    """An unknown key is checked against a throwaway secret: the signing key is
    derived for it as for a known one (timing is not measured, the work is)."""
    derived = []
    real = sigv4.signing_key

    def counting(secret, *args):
        derived.append(secret)
        return real(secret, *args)

    monkeypatch.setattr(sigv4, "signing_key", counting)
    for key, secret in (("app", "nope"), ("stranger", "s3cret")):
        derived.clear()
        refusal(signed(headers=JSON_HEADERS, key=key, secret=secret))
        assert len(derived) == 1, key


def test_rotation_accepts_every_secret():
    for secret in ("old", "new"):
        request = signed(headers=JSON_HEADERS, key="rotating", secret=secret)
        assert sigv4.verify(request, secrets_for, NOW, region=REGION).access_key == "rotating"


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


def _with(request: sigv4.SignedRequest, headers: dict | None = None, **changes):
    merged = {**request.headers, **(headers or {})}
    return sigv4.SignedRequest(
        changes.get("method", request.method),
        changes.get("path", request.path),
        changes.get("query", request.query),
        merged,
        changes.get("body", request.body),
    )


def test_the_payload_hash_is_the_body_s_not_the_client_s():
    """Defect 1: the hash of the old body in X-Amz-Content-Sha256 made any body pass."""
    body = b'{"QueueName":"a"}'
    request = signed(body=body, headers=JSON_HEADERS)
    old_hash = hashlib.sha256(body).hexdigest()
    replay = _with(request, {"X-Amz-Content-Sha256": old_hash}, body=b'{"QueueName":"b"}')
    assert code_of(replay) == "IncompleteSignature"  # the header is not signed
    # Signed, it must still state the hash of the body received.
    stated = signed(body=body, headers={**JSON_HEADERS, "X-Amz-Content-Sha256": old_hash})
    assert sigv4.verify(stated, secrets_for, NOW, region=REGION).access_key == "app"
    assert code_of(_with(stated, body=b'{"QueueName":"b"}')) == "SignatureDoesNotMatch"
    unsigned = signed(body=body, headers={**JSON_HEADERS, "X-Amz-Content-Sha256": UNSIGNED})
    assert code_of(unsigned) == "SignatureDoesNotMatch"
    empty = signed(body=b"", headers={**JSON_HEADERS, "X-Amz-Content-Sha256": UNSIGNED})
    assert sigv4.verify(empty, secrets_for, NOW, region=REGION).access_key == "app"


def test_a_presigned_url_does_not_sign_a_body_it_never_saw():
    """UNSIGNED-PAYLOAD in a presigned URL covers an empty body only."""
    request = signed(url="http://127.0.0.1:5000/?Action=ListQueues", method="POST", query=True)
    with mock.patch.object(SigV4QueryAuth, "payload", lambda _self, _request: UNSIGNED):
        unsigned = signed(url="http://127.0.0.1:5000/?Action=ListQueues", method="POST", query=True)
    for url in (request, unsigned):
        assert sigv4.verify(url, secrets_for, NOW, region=REGION).access_key == "app"
        assert code_of(_with(url, body=b"Action=DeleteQueue")) == "SignatureDoesNotMatch"


@pytest.mark.parametrize(
    "header, value",
    [
        ("X-Amz-Target", "AmazonSQS.DeleteQueue"),
        ("Content-Type", "application/x-www-form-urlencoded"),
        ("X-Amz-Content-Sha256", UNSIGNED),
        ("X-Amz-Security-Token", "token"),
    ],
)
def test_headers_that_change_the_meaning_must_be_signed(header, value):
    """Defect 2: a presigned URL signing only ``host`` took any X-Amz-Target."""
    presigned = signed(url="http://127.0.0.1:5000/?Action=ListQueues", method="GET", query=True)
    assert code_of(_with(presigned, {header: value})) == "IncompleteSignature"
    bare = signed(body=b"Action=ListQueues")  # signs host and x-amz-date only
    assert "SignedHeaders=host;x-amz-date," in bare.headers["Authorization"]
    assert code_of(_with(bare, {header: value})) == "IncompleteSignature"


def test_a_date_header_that_dates_the_request_must_be_signed():
    request = signed(url="http://127.0.0.1:5000/?Action=ListQueues", method="GET", query=True)
    assert code_of(_with(request, {"X-Amz-Date": "20261124T010203Z"})) == "IncompleteSignature"
    header = signed(headers=JSON_HEADERS)
    dated = {k: v for k, v in header.headers.items() if k != "X-Amz-Date"}
    dated["Date"] = "Tue, 24 Nov 2026 01:02:03 GMT"
    assert code_of(sigv4.SignedRequest("POST", "/", "", dated, header.body)) == (
        "IncompleteSignature"
    )


@pytest.mark.parametrize("signature", ["\u00e9" * 64, "\u2603", "é", "\udcff" * 3, ""])
def test_a_non_ascii_signature_is_a_mismatch(signature):
    """Defect 3: compare_digest raised TypeError on non-ASCII text (a 500)."""
    request = signed(headers=JSON_HEADERS)
    header = request.headers["Authorization"].rsplit("Signature=", 1)[0] + "Signature=" + signature
    expected = "IncompleteSignature" if not signature else "SignatureDoesNotMatch"
    assert code_of(_with(request, {"Authorization": header})) == expected
    url = signed(url="http://127.0.0.1:5000/?Action=ListQueues", method="GET", query=True)
    query = url.query.rsplit("=", 1)[0] + "=" + quote(signature, errors="surrogatepass")
    assert code_of(_with(url, query=query)) == expected


def test_a_signature_for_another_region_is_refused():
    """Defect 4: the region of the credential scope was not checked."""
    request = signed(headers=JSON_HEADERS)
    error = refusal_in(request, "us-east-1")
    assert (error.name, error.kind.status) == ("SignatureDoesNotMatch", 403)
    assert error.message.startswith(
        "Credential should be scoped to a valid region, not 'eu-west-1'."
    )
    # Served when it is one of the other regions, or when every region is.
    for regions in (frozenset({"eu-west-1"}), None):
        credential = sigv4.verify(request, secrets_for, NOW, region="us-east-1", regions=regions)
        assert credential.region == "eu-west-1"
    with pytest.raises(SQSError):
        sigv4.verify(request, secrets_for, NOW, region="us-east-1", regions=frozenset({"ap-1"}))


def refusal_in(request: sigv4.SignedRequest, region: str) -> SQSError:
    with pytest.raises(SQSError) as exc:
        sigv4.verify(request, secrets_for, NOW, region=region)
    return exc.value


@pytest.mark.parametrize("minutes, ok", [(-14, True), (14, True), (-16, False), (16, False)])
def test_clock_skew(minutes, ok):
    request = signed(headers=JSON_HEADERS)
    now = NOW + minutes * 60
    if ok:
        sigv4.verify(request, secrets_for, now, region=REGION)
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
            sigv4.verify(candidate, secrets_for, NOW, region=REGION)
        except SQSError:
            pass
