"""Whatever arrives, the SigV4 verifier answers with an SQS error and nothing else.

Hypothesis draws the verifier's inputs (method, path, query string, headers,
``Authorization`` values, bodies; any text, non-ASCII and lone surrogates
included, and huge values), both from scratch and as one part of a request
botocore signed replaced by a drawn value (so the draws reach the signature
comparison, not only the parser). :func:`sigv4.verify` may raise
:class:`SQSError` and nothing else; through the endpoint the answer is never a
500 and always SQS's error shape (XML or JSON).
"""

from __future__ import annotations

import datetime
import json
import xml.etree.ElementTree as ET
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuey.sqs import sigv4
from queuey.sqs.errors import SQSError
from tests.sqs.signing import sign_at
from tests.support import SQS_SECRET

pytestmark = pytest.mark.unit

WHEN = datetime.datetime(2026, 11, 24, 1, 2, 3, tzinfo=datetime.UTC)
NOW = WHEN.timestamp()
REGION = "us-east-1"
SECRETS = {"app": ["s3cret"], "rotating": ["old", "new"]}
NS = "{http://queue.amazonaws.com/doc/2012-11-05/}"
JSON_HEADERS = {
    "X-Amz-Target": "AmazonSQS.ListQueues",
    "Content-Type": "application/x-amz-json-1.0",
}
FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def secrets_for(key: str):
    return SECRETS.get(key, [])


def _huge(alphabet: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.builds(lambda c, n: c * n, alphabet, st.integers(1000, 70_000))


#: Any text: short, non-ASCII, surrogates, or huge.
ANY_TEXT = st.one_of(st.text(max_size=80), _huge(st.characters()))
#: What a WSGI server can hand over as a header value (latin-1, no controls).
WIRE_TEXT = st.one_of(
    st.text(
        st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
        max_size=80,
    ),
    _huge(st.sampled_from("aé=/, ;")),
)


def _signed(query: bool, key: str = "app", secret: str = "s3cret") -> sigv4.SignedRequest:
    url = "http://127.0.0.1:5000/123456789012/q?Action=SendMessage&MessageBody=x"
    if query:
        prepared = sign_at(WHEN, url, key, secret, method="GET", query=True, region=REGION)
        body = b""
    else:
        body = b'{"QueueUrl": "http://127.0.0.1:5000/123456789012/q", "MessageBody": "x"}'
        prepared = sign_at(WHEN, url, key, secret, body=body, headers=JSON_HEADERS, region=REGION)
    rest = prepared.url.split("://", 1)[1]
    host, _, path_query = rest.partition("/")
    path, _, raw_query = ("/" + path_query).partition("?")
    return sigv4.SignedRequest(
        "GET" if query else "POST", path, raw_query, {"Host": host, **dict(prepared.headers)}, body
    )


SIGNED = {"header": _signed(False), "presigned": _signed(True)}


def _check(request: sigv4.SignedRequest) -> None:
    try:
        sigv4.verify(request, secrets_for, NOW, region=REGION)
    except SQSError:
        pass


def test_the_signed_requests_verify():
    for request in SIGNED.values():
        assert sigv4.verify(request, secrets_for, NOW, region=REGION).access_key == "app"


@FUZZ
@given(
    method=ANY_TEXT,
    path=ANY_TEXT,
    query=ANY_TEXT,
    headers=st.dictionaries(ANY_TEXT, ANY_TEXT, max_size=6),
    authorization=ANY_TEXT,
    body=st.binary(max_size=200),
)
def test_verify_raises_only_sqs_errors_for_anything(
    method, path, query, headers, authorization, body
):
    _check(sigv4.SignedRequest(method, path, query, headers, body))
    with_auth = {**headers, "Authorization": "AWS4-HMAC-SHA256 " + authorization}
    _check(sigv4.SignedRequest(method, "/" + path, query, with_auth, body))
    presigned = "X-Amz-Algorithm=AWS4-HMAC-SHA256&" + query
    _check(sigv4.SignedRequest(method, "/" + path, presigned, headers, body))


def _replace_in(request: sigv4.SignedRequest, part: str, value: str, body: bytes):
    headers = dict(request.headers)
    if part == "signature" and "Authorization" in headers:
        headers["Authorization"] = headers["Authorization"].rsplit("=", 1)[0] + "=" + value
    elif part == "signature":
        return sigv4.SignedRequest(
            request.method,
            request.path,
            request.query.rsplit("=", 1)[0] + "=" + quote(value, errors="surrogatepass"),
            headers,
            request.body,
        )
    elif part == "credential" and "Authorization" in headers:
        head, _, rest = headers["Authorization"].partition("Credential=")
        headers["Authorization"] = head + "Credential=" + value + "," + rest.partition(",")[2]
    elif part == "query":
        return sigv4.SignedRequest(
            request.method, request.path, request.query + "&" + value, headers, request.body
        )
    elif part == "body":
        return sigv4.SignedRequest(request.method, request.path, request.query, headers, body)
    else:
        headers[part] = value
    return sigv4.SignedRequest(request.method, request.path, request.query, headers, request.body)


PARTS = [
    "signature",
    "credential",
    "query",
    "body",
    "Host",
    "X-Amz-Date",
    "Date",
    "X-Amz-Content-Sha256",
    "X-Amz-Target",
    "Content-Type",
    "Authorization",
]


@FUZZ
@given(
    kind=st.sampled_from(sorted(SIGNED)),
    part=st.sampled_from(PARTS),
    value=ANY_TEXT,
    body=st.binary(max_size=300),
)
def test_verify_raises_only_sqs_errors_for_a_signed_request_with_one_part_replaced(
    kind, part, value, body
):
    _check(_replace_in(SIGNED[kind], part, value, body))


# -- through the endpoint -------------------------------------------------------------------
def _error_shape(answer) -> str | None:
    """SQS's error code in either protocol's shape, else None."""
    try:
        if answer.content_type == "application/x-amz-json-1.0":
            return json.loads(answer.body)["__type"].rsplit("#", 1)[1]
        return ET.fromstring(answer.body).find(f"{NS}Error/{NS}Code").text
    except (ValueError, KeyError, AttributeError, ET.ParseError):
        return None


@pytest.fixture
def sqs_app(make_app, sqlite_storage, wrap_app, clock):
    app = wrap_app(make_app(sqlite_storage))
    app.when = datetime.datetime.fromtimestamp(clock.now_micros() // 1_000_000, datetime.UTC)
    return app


def _endpoint_request(app, query: bool) -> dict:
    """A ListQueues signed by botocore now, as webtest's request arguments."""
    url = "http://localhost/?Action=ListQueues&Version=2012-11-05"
    if query:
        prepared = sign_at(app.when, url, app.apps.app, SQS_SECRET, method="GET", query=True)
        body = b""
    else:
        body = b"{}"
        prepared = sign_at(
            app.when, "http://localhost/", app.apps.app, SQS_SECRET, body=body, headers=JSON_HEADERS
        )
    target = prepared.url.split("localhost", 1)[1]
    headers = {
        "Host": "localhost",
        **{k: v for k, v in prepared.headers.items() if k != "Content-Length"},
    }
    return {"url": target, "method": "GET" if query else "POST", "headers": headers, "body": body}


@FUZZ
@given(
    query=st.booleans(),
    part=st.sampled_from(
        [
            "Authorization",
            "X-Amz-Date",
            "X-Amz-Target",
            "Content-Type",
            "X-Amz-Content-Sha256",
            "Date",
            "Host",
            "query",
            "signature",
        ]
    ),
    value=WIRE_TEXT,
    body=st.binary(max_size=300),
)
def test_the_endpoint_never_answers_500(sqs_app, query, part, value, body):
    request = _endpoint_request(sqs_app, query)
    if part == "query":
        joint = "&" if "?" in request["url"] else "?"
        request["url"] += joint + quote(value, safe="=&%+")
    elif part == "signature":
        if query:
            request["url"] = request["url"].rsplit("=", 1)[0] + "=" + quote(value)
        else:
            auth = request["headers"]["Authorization"]
            request["headers"]["Authorization"] = auth.rsplit("=", 1)[0] + "=" + value
    else:
        request["headers"][part] = value
    if body:
        request["body"] = body
    answer = sqs_app.request(
        request["url"],
        method=request["method"],
        headers=request["headers"],
        body=request["body"],
        expect_errors=True,
    )
    assert answer.status_int != 500, answer.body
    if answer.status_int != 200:
        assert _error_shape(answer), (part, value[:100], query, body[:50], answer.status)
        assert b"Traceback" not in answer.body
