"""Every part of a SigV4-signed request, changed after signing, is refused.

Requests are signed by botocore (:mod:`tests.sqs.signing`) the way SDKs sign
them: a header signature over the JSON protocol and over the query protocol's
form posts, and presigned URLs (GET and POST). Each part is then changed,
added or removed (method, path, each query parameter, each header, the body,
the credential's key, date, region and service), sent to the real app built
through ``main()`` (in-process, webtest), and the answer must be SQS's error
with its status; the store must be as it was: both queues there, no message in
either. Last, the untouched request is sent and stores its one message, so the
matrix is known to start from a request the server accepts.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from unittest import mock
from urllib.parse import quote

import pytest
from botocore.auth import SigV4QueryAuth

from tests.sqs.signing import sign_at
from tests.support import KEY

pytestmark = pytest.mark.unit

REGION = "us-east-1"
ACCOUNT_PATH = "/{account}/{queue}"
SECRET = "tamper-secret-1"
OTHER_SECRET = "tamper-secret-2"
APPLICATIONS = """
[application:{app}]
keys = plain:{key}
allow = 127.0.0.0/8
sqs_secret = {secret}

[application:{other}]
keys = plain:{key}
allow = 127.0.0.0/8
sqs_secret = {other_secret}
"""
JSON_TYPE = "application/x-amz-json-1.0"
FORM_TYPE = "application/x-www-form-urlencoded; charset=utf-8"
NS = "{http://queue.amazonaws.com/doc/2012-11-05/}"
UNSIGNED = "UNSIGNED-PAYLOAD"

#: What each refusal must answer: SQS's code and its HTTP status.
STATUS = {
    "SignatureDoesNotMatch": 403,
    "IncompleteSignature": 400,
    "MissingAuthenticationToken": 403,
    "RequestExpired": 400,
}


@dataclass(frozen=True)
class Wire:
    """A request as it goes on the wire; ``query`` keeps each pair's encoding."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...]
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str:
        return next(v for k, v in self.headers if k.lower() == name.lower())

    def with_header(self, name: str, value: str) -> Wire:
        kept = tuple((k, v) for k, v in self.headers if k.lower() != name.lower())
        return replace(self, headers=(*kept, (name, value)))

    def without_header(self, name: str) -> Wire:
        return replace(
            self, headers=tuple((k, v) for k, v in self.headers if k.lower() != name.lower())
        )

    def with_param(self, name: str, value: str) -> Wire:
        """``name`` set to ``value`` (already encoded) where it stands, else added."""
        if any(k == name for k, _ in self.query):
            return replace(self, query=tuple((k, value if k == name else v) for k, v in self.query))
        return replace(self, query=(*self.query, (name, value)))

    def without_param(self, name: str) -> Wire:
        return replace(self, query=tuple((k, v) for k, v in self.query if k != name))

    def param(self, name: str) -> str:
        return next(v for k, v in self.query if k == name)

    @property
    def target(self) -> str:
        query = "&".join(f"{k}={v}" for k, v in self.query)
        return self.path + ("?" + query if query else "")


@dataclass
class Shop:
    """The app, the two queues a request may aim at, and how to sign for them."""

    app: object
    application: str
    other_application: str
    account: str
    when: datetime.datetime

    def queue_url(self, name: str) -> str:
        return f"http://localhost{self.queue_path(name)}"

    def queue_path(self, name: str) -> str:
        return ACCOUNT_PATH.format(account=self.account, queue=name)

    def sign(
        self,
        url: str,
        *,
        body: bytes | str = b"",
        headers: dict | None = None,
        method: str = "POST",
        query: bool = False,
        region: str = REGION,
        secret: str = SECRET,
        when: datetime.datetime | None = None,
        unsigned_payload: bool = False,
    ) -> Wire:
        """Signed by botocore; ``unsigned_payload``: a presigned URL signing
        ``UNSIGNED-PAYLOAD`` for the body, as the Java and JavaScript SDKs make them."""
        with contextlib.ExitStack() as stack:
            if unsigned_payload:
                stack.enter_context(
                    mock.patch.object(SigV4QueryAuth, "payload", lambda _self, _request: UNSIGNED)
                )
            prepared = sign_at(
                when or self.when,
                url,
                self.application,
                secret,
                body=body,
                headers=headers,
                method=method,
                region=region,
                query=query,
            )
        rest = prepared.url.split("://", 1)[1]
        host, _, path_query = rest.partition("/")
        path, _, raw_query = ("/" + path_query).partition("?")
        pairs = tuple(p.partition("=")[::2] for p in raw_query.split("&") if p)
        data = prepared.body or b""
        return Wire(
            method,
            path,
            pairs,
            # Content-Length is the body's, set by webtest (botocore does not sign it).
            (
                ("Host", host),
                *((k, v) for k, v in prepared.headers.items() if k != "Content-Length"),
            ),
            data.encode() if isinstance(data, str) else data,
        )

    def send(self, wire: Wire):
        return self.app.request(
            wire.target,
            method=wire.method,
            headers=list(wire.headers),
            body=wire.body,
            expect_errors=True,
        )

    def messages(self, queue: str) -> int:
        answer = self.app.get(f"/queue/{queue}?limit=100", headers=self.app.auth)
        return len(answer.json["messages"])

    def queues(self) -> set[str]:
        storage = self.app.app.registry.queuey.storage
        return {q.name for q in storage.list_queues(self.application)}


def error_code(answer) -> str:
    if answer.content_type == JSON_TYPE:
        kind = json.loads(answer.body)["__type"].rsplit("#", 1)[1]
        assert answer.headers["x-amzn-query-error"].startswith(kind + ";")
        return kind
    return ET.fromstring(answer.body).find(f"{NS}Error/{NS}Code").text


@pytest.fixture
def shop(make_app, sqlite_storage, wrap_app, test_apps, tmp_path, clock) -> Iterator[Shop]:
    other = test_apps.remote_app
    apps_file = tmp_path / "tamper-applications.ini"
    apps_file.write_text(
        APPLICATIONS.format(
            app=test_apps.app, other=other, key=KEY, secret=SECRET, other_secret=OTHER_SECRET
        ),
        encoding="utf-8",
    )
    app = wrap_app(make_app(sqlite_storage, **{"queuey.applications": str(apps_file)}))
    account = app.app.registry.queuey.applications[test_apps.app].account_id
    when = datetime.datetime.fromtimestamp(clock.now_micros() / 1e6, datetime.UTC)
    found = Shop(app, test_apps.app, other, account, when.replace(microsecond=0))
    for queue in ("target", "other"):
        created = found.send(
            found.sign(
                "http://localhost/",
                body=json.dumps({"QueueName": queue}),
                headers={"X-Amz-Target": "AmazonSQS.CreateQueue", "Content-Type": JSON_TYPE},
            )
        )
        assert created.status_int == 200, created.body
    yield found


# -- the requests signed, each a SendMessage to "target" ---------------------------------
def _json(shop: Shop) -> Wire:
    body = json.dumps({"QueueUrl": shop.queue_url("target"), "MessageBody": "hello"})
    headers = {"X-Amz-Target": "AmazonSQS.SendMessage", "Content-Type": JSON_TYPE}
    return shop.sign("http://localhost/", body=body, headers=headers)


def _form(shop: Shop) -> Wire:
    body = "Action=SendMessage&MessageBody=hello&Version=2012-11-05"
    return shop.sign(shop.queue_url("target"), body=body, headers={"Content-Type": FORM_TYPE})


def _presigned(method: str, unsigned_payload: bool = False) -> Callable[[Shop], Wire]:
    def make(shop: Shop) -> Wire:
        url = (
            "http://localhost/?Action=SendMessage&Version=2012-11-05&MessageBody=hello"
            f"&QueueUrl={quote(shop.queue_url('target'), safe='')}"
        )
        return shop.sign(url, method=method, query=True, unsigned_payload=unsigned_payload)

    return make


SIGNED = {
    "json-header": _json,
    "form-header": _form,
    "presigned-get": _presigned("GET"),
    "presigned-post": _presigned("POST"),
    "presigned-post-unsigned-payload": _presigned("POST", unsigned_payload=True),
}


# -- what is changed ----------------------------------------------------------------------
def _shift_date(text: str, seconds: int) -> str:
    stamp = datetime.datetime.strptime(text, "%Y%m%dT%H%M%SZ") + datetime.timedelta(seconds=seconds)
    return stamp.strftime("%Y%m%dT%H%M%SZ")


def _flip(signature: str) -> str:
    return ("1" if signature[0] != "1" else "2") + signature[1:]


def _header_credential(wire: Wire, change: Callable[[list[str]], None]) -> Wire:
    authorization = wire.header("Authorization")
    head, _, rest = authorization.partition("Credential=")
    credential, _, tail = rest.partition(",")
    parts = credential.split("/")
    change(parts)
    return wire.with_header("Authorization", f"{head}Credential={'/'.join(parts)},{tail}")


def _query_credential(wire: Wire, change: Callable[[list[str]], None]) -> Wire:
    parts = wire.param("X-Amz-Credential").split("%2F")
    change(parts)
    return wire.with_param("X-Amz-Credential", "%2F".join(parts))


def _set(index: int, value: str) -> Callable[[list[str]], None]:
    def change(parts: list[str]) -> None:
        parts[index] = value

    return change


def _signed_headers(wire: Wire, names: list[str]) -> Wire:
    authorization = wire.header("Authorization")
    head, _, rest = authorization.partition("SignedHeaders=")
    _, _, tail = rest.partition(",")
    return wire.with_header("Authorization", f"{head}SignedHeaders={';'.join(names)},{tail}")


def reaimed(shop: Shop, body: bytes) -> bytes:
    """The body sent to the other queue instead."""
    if body.startswith(b"{"):
        return body.replace(b"target", b"other")
    other = quote(shop.queue_url("other"), safe="").encode()
    return (body + b"&" if body else b"") + b"QueueUrl=" + other


def mutations(shop: Shop, wire: Wire) -> Iterator[tuple[str, Wire, str]]:
    """(what changed, the changed request, the error code expected)."""
    mismatch, incomplete = "SignatureDoesNotMatch", "IncompleteSignature"
    presigned = any(k == "X-Amz-Signature" for k, _ in wire.query)
    other_path = shop.queue_path("other")
    day = shop.when.strftime("%Y%m%d")
    yesterday = (shop.when - datetime.timedelta(days=1)).strftime("%Y%m%d")

    # Method and path.
    yield "method", replace(wire, method="GET" if wire.method == "POST" else "POST"), mismatch
    yield "path", replace(wire, path=other_path if wire.path == "/" else "/"), mismatch
    yield "path re-aimed", replace(wire, path=other_path), mismatch

    # Each query parameter: changed, removed; parameters added.
    for name, value in wire.query:
        if name == "X-Amz-Signature":
            changed, removed = _flip(value), incomplete
        elif name == "X-Amz-Algorithm":
            changed, removed = "AWS4-HMAC-SHA512", incomplete
        elif name == "X-Amz-Date":
            changed, removed = _shift_date(value, 1), incomplete
        elif name == "X-Amz-SignedHeaders":
            changed, removed = "host%3Bx-amz-target", incomplete
        elif name in ("X-Amz-Credential", "X-Amz-Expires"):
            changed, removed = None, incomplete  # below, and by value
        elif name == "QueueUrl":
            changed, removed = quote(shop.queue_url("other"), safe=""), mismatch
        else:
            changed, removed = value + "x", mismatch
        if name == "X-Amz-Expires":
            changed = str(int(value) + 1)
        if changed is not None:
            code = incomplete if name in ("X-Amz-Algorithm", "X-Amz-SignedHeaders") else mismatch
            yield f"query {name} changed", wire.with_param(name, changed), code
        if name == "X-Amz-Signature":
            yield f"query {name} non-ASCII", wire.with_param(name, value[:-2] + "%C3%A9"), mismatch
        yield f"query {name} removed", wire.without_param(name), removed
        if name.startswith("X-Amz-"):
            again = replace(wire, query=((name, value), *wire.query))
            yield f"query {name} given twice", again, incomplete
    yield "query added", wire.with_param("Action", "DeleteQueue"), mismatch
    yield "query added", wire.with_param("QueueUrl", quote(shop.queue_url("other"))), mismatch
    yield "query added", wire.with_param("DelaySeconds", "5"), mismatch
    if presigned:
        bare = replace(wire, query=tuple(p for p in wire.query if not p[0].startswith("X-Amz-")))
        yield "query signature removed", bare, "MissingAuthenticationToken"

    # Each header present: changed and removed.
    for name, value in wire.headers:
        lowered = name.lower()
        if lowered == "authorization":
            last = "1" if value[-1] != "1" else "2"
            yield (
                "header Authorization changed",
                wire.with_header(name, value[:-1] + last),
                mismatch,
            )
            yield (
                "header Authorization signature non-ASCII",
                wire.with_header(name, value[:-2] + "é"),
                mismatch,
            )
            yield (
                "header Authorization removed",
                wire.without_header(name),
                "MissingAuthenticationToken",
            )
            continue
        if lowered == "x-amz-date":
            changed = _shift_date(value, 1)
        elif lowered == "x-amz-target":
            changed = "AmazonSQS.DeleteQueue"
        elif lowered == "content-type":
            changed = "text/plain" if wire.body[:1] != b"{" else FORM_TYPE
        elif lowered == "host":
            changed = "evil.example"
        else:
            changed = value + "x"
        yield f"header {name} changed", wire.with_header(name, changed), mismatch
        # Without its Host header a request still has one (webtest's default).
        removed_code = mismatch if lowered == "host" else incomplete
        yield f"header {name} removed", wire.without_header(name), removed_code

    # Headers that would change the meaning, added unsigned.
    delete = json.dumps({"QueueUrl": shop.queue_url("target")}).encode()
    as_delete = wire.with_header("X-Amz-Target", "AmazonSQS.DeleteQueue").with_header(
        "Content-Type", JSON_TYPE
    )
    if not any(k.lower() == "x-amz-target" for k, _ in wire.headers):
        yield "header X-Amz-Target added", replace(as_delete, body=delete), incomplete
        kept = wire.with_header("X-Amz-Target", "AmazonSQS.DeleteQueue")
        yield "header X-Amz-Target added, body kept", kept, incomplete
    if not any(k.lower() == "content-type" for k, _ in wire.headers):
        form = b"Action=DeleteQueue&QueueUrl=" + quote(shop.queue_url("target")).encode()
        added = replace(wire.with_header("Content-Type", FORM_TYPE), body=form)
        yield "header Content-Type added with a form body", added, incomplete
    other_body = reaimed(shop, wire.body)
    yield (
        "header X-Amz-Content-Sha256 added for the signed body, body changed",
        replace(
            wire.with_header("X-Amz-Content-Sha256", hashlib.sha256(wire.body).hexdigest()),
            body=other_body,
        ),
        incomplete,
    )
    yield (
        "header X-Amz-Content-Sha256 UNSIGNED-PAYLOAD added, body changed",
        replace(wire.with_header("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD"), body=other_body),
        incomplete,
    )
    yield (
        "header X-Amz-Security-Token added",
        wire.with_header("X-Amz-Security-Token", "t"),
        incomplete,
    )
    if presigned:
        yield (
            "header X-Amz-Date added",
            wire.with_header("X-Amz-Date", wire.param("X-Amz-Date")),
            incomplete,
        )
        yield (
            "header Authorization added",
            wire.with_header(
                "Authorization",
                f"AWS4-HMAC-SHA256 Credential={shop.application}/{day}/{REGION}/sqs/aws4_request, "
                f"SignedHeaders=host, Signature={wire.param('X-Amz-Signature')}",
            ),
            incomplete,
        )

    # The body.
    if wire.body:
        yield "body re-aimed", replace(wire, body=other_body), mismatch
        yield "body changed", replace(wire, body=wire.body.replace(b"hello", b"HELLO")), mismatch
        yield "body grown", replace(wire, body=wire.body + b" "), mismatch
        yield "body removed", replace(wire, body=b""), mismatch
    else:
        yield "body added", replace(wire, body=b"MessageBody=x"), mismatch

    # The credential: access key, date, region, service, terminator.
    credential = _query_credential if presigned else _header_credential
    yield (
        "credential key: the other application",
        credential(wire, _set(0, shop.other_application)),
        mismatch,
    )
    yield "credential key: unknown", credential(wire, _set(0, "nobody")), mismatch
    yield "credential date", credential(wire, _set(1, yesterday)), mismatch
    yield "credential region", credential(wire, _set(2, "eu-west-1")), mismatch
    yield "credential service", credential(wire, _set(3, "sns")), mismatch
    yield "credential terminator", credential(wire, _set(4, "aws4_requestx")), mismatch

    # The list of signed headers (header signatures; the query's is above).
    if not presigned:
        signed = wire.header("Authorization").split("SignedHeaders=")[1].split(",")[0]
        names = signed.split(";")
        for name in names:
            fewer = [n for n in names if n != name]
            yield (
                f"signed header {name} unlisted",
                _signed_headers(wire, fewer),
                (
                    incomplete
                    if name in ("host", "content-type") or name.startswith("x-amz-")
                    else mismatch
                ),
            )
        yield "signed header added", _signed_headers(wire, [*names, "user-agent"]), incomplete


@pytest.mark.parametrize("kind", list(SIGNED))
def test_every_part_changed_after_signing_is_refused(shop, kind):
    wire = SIGNED[kind](shop)
    refused = []
    for label, changed, expected in mutations(shop, wire):
        assert changed != wire, label
        answer = shop.send(changed)
        assert answer.status_int != 500, (label, answer.body)
        got = (answer.status_int, error_code(answer)) if answer.status_int != 200 else (200, "")
        assert got == (STATUS[expected], expected), (label, answer.body)
        assert shop.queues() == {"target", "other"}, label
        assert shop.messages("target") == 0 and shop.messages("other") == 0, label
        refused.append(label)
    assert len(refused) >= 25
    # The untouched request is one the server accepts: it stores one message.
    answer = shop.send(wire)
    assert answer.status_int == 200, answer.body
    assert (shop.messages("target"), shop.messages("other")) == (1, 0)


def test_requests_signed_for_no_region_are_refused(shop):
    """A correctly made signature, scoped to something that is not a region name
    (any region is served by default, each its own namespace of queues)."""
    for make in (_json, _form):
        wire = make(shop)
        elsewhere = shop.sign(
            f"http://localhost{wire.target}",
            body=wire.body,
            headers={
                k: v for k, v in wire.headers if k.lower() in ("content-type", "x-amz-target")
            },
            region="europe",
        )
        answer = shop.send(elsewhere)
        assert answer.status_int == 403
        assert error_code(answer) == "SignatureDoesNotMatch"
        assert b"Credential should be scoped to a valid region, not 'europe'" in answer.body
    assert shop.messages("target") == 0


@pytest.mark.parametrize("unsigned_payload", [True, False])
def test_presigned_list_queues_cannot_become_a_delete_queue(shop, unsigned_payload):
    """The incident: a presigned ListQueues URL that signs only ``host`` was
    sent with ``X-Amz-Target: AmazonSQS.DeleteQueue`` and a JSON body."""
    for method in ("POST", "GET"):
        wire = shop.sign(
            "http://localhost/?Action=ListQueues&Version=2012-11-05",
            method=method,
            query=True,
            unsigned_payload=unsigned_payload,
        )
        assert wire.param("X-Amz-SignedHeaders") == "host"
        assert shop.send(wire).status_int == 200  # what it was signed for
        attack = replace(
            wire.with_header("X-Amz-Target", "AmazonSQS.DeleteQueue").with_header(
                "Content-Type", JSON_TYPE
            ),
            method="POST",
            body=json.dumps({"QueueUrl": shop.queue_url("target")}).encode(),
        )
        answer = shop.send(attack)
        assert (answer.status_int, error_code(answer)) == (400, "IncompleteSignature")
        assert shop.queues() == {"target", "other"}


def test_a_signed_request_replayed_with_another_body_is_refused(shop):
    """The incident: a SendMessage seen once was replayed with a body aimed at
    another queue and the hash of the old body in ``X-Amz-Content-Sha256``."""
    wire = _json(shop)
    replay = replace(
        wire.with_header("X-Amz-Content-Sha256", hashlib.sha256(wire.body).hexdigest()),
        body=wire.body.replace(b"target", b"other"),
    )
    answer = shop.send(replay)
    assert (answer.status_int, error_code(answer)) == (400, "IncompleteSignature")
    assert shop.messages("other") == 0


def test_a_signed_payload_hash_must_be_the_body_s(shop):
    """Clients may sign ``X-Amz-Content-Sha256``; the server still hashes the body."""
    body = json.dumps({"QueueUrl": shop.queue_url("target"), "MessageBody": "hi"})
    digest = hashlib.sha256(body.encode()).hexdigest()
    for stated, accepted in ((digest, True), ("UNSIGNED-PAYLOAD", False), ("0" * 64, False)):
        wire = shop.sign(
            "http://localhost/",
            body=body,
            headers={
                "X-Amz-Target": "AmazonSQS.SendMessage",
                "Content-Type": JSON_TYPE,
                "X-Amz-Content-Sha256": stated,
            },
        )
        assert "x-amz-content-sha256" in wire.header("Authorization")
        answer = shop.send(wire)
        if accepted:
            assert answer.status_int == 200, answer.body
        else:
            assert (answer.status_int, error_code(answer)) == (403, "SignatureDoesNotMatch")
    assert shop.messages("target") == 1


def test_headers_that_change_nothing_may_be_added(shop):
    """The rule is not "sign everything": hop-by-hop and informational headers
    that proxies and HTTP libraries add are let through."""
    wire = _json(shop)
    for name, value in (
        ("User-Agent", "curl/8"),
        ("X-Forwarded-For", "10.1.1.1"),
        ("Accept", "*/*"),
    ):
        wire = wire.with_header(name, value)
    assert shop.send(wire).status_int == 200
    presigned = _presigned("GET")(shop).with_header("User-Agent", "curl/8")
    assert shop.send(presigned).status_int == 200
    assert shop.messages("target") == 2
