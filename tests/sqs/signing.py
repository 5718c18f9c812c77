"""Requests signed by botocore (the client side of SigV4) as of a given time."""

from __future__ import annotations

import datetime
import json

import botocore.auth
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSPreparedRequest, AWSRequest
from botocore.credentials import Credentials


def sign_at(
    when: datetime.datetime,
    url: str,
    key: str,
    secret: str,
    *,
    body: bytes | str = b"",
    headers: dict | None = None,
    method: str = "POST",
    service: str = "sqs",
    region: str = "us-east-1",
    query: bool = False,
    expires: int = 300,
) -> AWSPreparedRequest:
    """``url`` signed with a header signature (or, with ``query``, a presigned
    URL valid ``expires`` seconds) as botocore would at ``when``."""
    request = AWSRequest(method=method, url=url, data=body, headers=headers or {})
    credentials = Credentials(key, secret)
    if query:
        signer = SigV4QueryAuth(credentials, service, region, expires=expires)
    else:
        signer = SigV4Auth(credentials, service, region)
    real = datetime.datetime

    class Frozen(real):
        @classmethod
        def now(cls, tz=None):
            return when if tz is None else when.astimezone(tz)

        @classmethod
        def utcnow(cls):
            return when.replace(tzinfo=None)

    saved = botocore.auth.datetime.datetime
    botocore.auth.datetime.datetime = Frozen
    try:
        signer.add_auth(request)
    finally:
        botocore.auth.datetime.datetime = saved
    return request.prepare()


def sqs_json_call(app, when: datetime.datetime, key: str, secret: str, action: str, **params):
    """``action`` with ``params`` in AWS JSON 1.0, signed at ``when`` and posted
    to ``/`` of the webtest ``app``; the answer, whatever its status."""
    prepared = sign_at(
        when.replace(microsecond=0),
        "http://localhost/",
        key,
        secret,
        body=json.dumps(params),
        headers={
            "X-Amz-Target": f"AmazonSQS.{action}",
            "Content-Type": "application/x-amz-json-1.0",
        },
    )
    headers = [("Host", "localhost")]
    headers += [(k, v) for k, v in prepared.headers.items() if k != "Content-Length"]
    return app.post("/", params=prepared.body, headers=headers, expect_errors=True)
