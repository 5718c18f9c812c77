"""AWS Signature Version 4, verified on the server.

The client signs a canonical form of its request with a key derived from its
secret; the server rebuilds the same canonical form from what it received and
compares. Both places a signature can travel are read: the ``Authorization``
header and the query string (presigned URLs, ``X-Amz-Signature``). Every
failure is an :class:`~queuey.sqs.errors.SQSError` with SQS's code; the work
per request is bounded (header and query sizes are checked first).
"""

from __future__ import annotations

import hashlib
import hmac
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote_plus

from queuey.sqs.errors import SQSError

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "sqs"
UNSIGNED = "UNSIGNED-PAYLOAD"
MAX_AUTHORIZATION = 4096
MAX_QUERY = 65536
MAX_SIGNED_HEADERS = 64
MAX_EXPIRES = 604800
_SCOPE = re.compile(r"^([^/]{1,256})/([0-9]{8})/([a-z0-9-]{1,32})/([a-z0-9-]{1,32})/([a-z0-9_]+)$")
_SPACES = re.compile(r"\s+")
_AMZ_DATE = "%Y%m%dT%H%M%SZ"

_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. Consult the service "
    "documentation for details."
)


@dataclass(frozen=True)
class SignedRequest:
    method: str
    path: str  # as sent on the wire (percent-encoded)
    query: str  # the raw query string, without "?"
    headers: Mapping[str, str]  # case-insensitive (WebOb) or any case
    body: bytes


@dataclass(frozen=True)
class Credential:
    access_key: str
    date: str
    region: str
    service: str


def wire_path(environ: Mapping[str, Any]) -> str:
    """The request path as the client sent it.

    waitress keeps the raw request target in ``RAW_URI`` (other servers use
    ``REQUEST_URI``); otherwise the decoded ``PATH_INFO`` is encoded again the
    way SDKs encode paths.
    """
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw:
        path = raw.split("?", 1)[0]
        if "://" in path:  # an absolute-form request target
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        return path or "/"
    decoded = (environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")) or "/"
    try:
        decoded = decoded.encode("latin-1").decode("utf-8")
    except UnicodeError:
        pass
    return quote(decoded, safe="/~")


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    lowered = name.lower()
    for key, found in headers.items():
        if key.lower() == lowered:
            return found
    return None


def _query_pairs(query: str) -> list[tuple[str, str]]:
    pairs = []
    for part in query.split("&"):
        if not part:
            continue
        key, _, value = part.partition("=")
        pairs.append((unquote_plus(key), unquote_plus(value)))
    return pairs


def _encode(text: str) -> str:
    return quote(text, safe="-_.~")


def canonical_uri(path: str) -> str:
    """Non-S3 services: dot segments removed, then the wire path encoded again."""
    normalized = posixpath.normpath(path) if path not in ("", "/") else "/"
    if path.endswith("/") and normalized != "/":
        normalized += "/"
    if normalized.startswith("//"):
        normalized = "/" + normalized.lstrip("/")
    return quote(normalized, safe="/~")


def canonical_query(pairs: Sequence[tuple[str, str]]) -> str:
    encoded = sorted((_encode(k), _encode(v)) for k, v in pairs if k != "X-Amz-Signature")
    return "&".join(f"{k}={v}" for k, v in encoded)


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = ("AWS4" + secret).encode("utf-8")
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode("utf-8"), hashlib.sha256).digest()
    return key


def _incomplete(message: str) -> SQSError:
    return SQSError("IncompleteSignature", message)


def _parse_authorization(value: str) -> tuple[str, list[str], str]:
    if len(value) > MAX_AUTHORIZATION:
        raise _incomplete("The Authorization header is too long.")
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise _incomplete(f"Unsupported authorization algorithm: use {ALGORITHM}.")
    fields: dict[str, str] = {}
    for item in rest.split(","):
        name, sep, found = item.strip().partition("=")
        if sep:
            fields[name.strip()] = found.strip()
    for needed in ("Credential", "SignedHeaders", "Signature"):
        if not fields.get(needed):
            raise _incomplete(
                f"Authorization header requires '{needed}' parameter. Authorization={value[:200]}"
            )
    return fields["Credential"], fields["SignedHeaders"].split(";"), fields["Signature"]


def _parse_date(text: str | None) -> datetime:
    if not text:
        raise _incomplete("Authorization requires an X-Amz-Date header or parameter.")
    try:
        return datetime.strptime(text, _AMZ_DATE).replace(tzinfo=UTC)
    except ValueError:
        raise SQSError("RequestExpired", f"Invalid request date {text[:40]!r}.") from None


def verify(
    request: SignedRequest,
    secrets_for: Callable[[str], Sequence[str]],
    now: float,
    max_skew: int = 900,
) -> Credential:
    """Check the request's signature; the credential it was signed with, or SQSError."""
    if len(request.query) > MAX_QUERY:
        raise _incomplete("The query string is too long.")
    pairs = _query_pairs(request.query)
    params = dict(pairs)
    authorization = _header(request.headers, "Authorization")
    presigned = "X-Amz-Signature" in params or "X-Amz-Algorithm" in params
    if authorization is None and not presigned:
        raise SQSError("MissingAuthenticationToken", "Request is missing Authentication Token")
    if authorization is not None:
        credential_text, signed, signature = _parse_authorization(authorization)
        amz_date = _header(request.headers, "X-Amz-Date")
        date = _parse_date(amz_date) if amz_date else _http_date(request.headers)
        amz_date = date.strftime(_AMZ_DATE)
        expires = None
    else:
        if params.get("X-Amz-Algorithm") != ALGORITHM:
            raise _incomplete(f"X-Amz-Algorithm must be {ALGORITHM}.")
        for needed in ("X-Amz-Credential", "X-Amz-SignedHeaders", "X-Amz-Signature"):
            if not params.get(needed):
                raise _incomplete(f"The query string requires the parameter {needed}.")
        credential_text = params["X-Amz-Credential"]
        signed = params["X-Amz-SignedHeaders"].split(";")
        signature = params["X-Amz-Signature"]
        amz_date = params.get("X-Amz-Date")
        date = _parse_date(amz_date)
        expires_text = params.get("X-Amz-Expires", "")
        if not (expires_text.isascii() and expires_text.isdigit() and len(expires_text) <= 7):
            raise _incomplete("X-Amz-Expires must be a number of seconds.")
        expires = int(expires_text)
        if not 1 <= expires <= MAX_EXPIRES:
            raise _incomplete(f"X-Amz-Expires must be 1 to {MAX_EXPIRES} seconds.")
    if len(signed) > MAX_SIGNED_HEADERS:
        raise _incomplete(f"At most {MAX_SIGNED_HEADERS} signed headers are accepted.")
    scope = _SCOPE.match(credential_text)
    if scope is None:
        raise _incomplete(
            "Credential must have the form <key>/<date>/<region>/<service>/aws4_request."
        )
    access_key, day, region, service, terminator = scope.groups()
    _check_time(date, now, max_skew, expires)
    if service != SERVICE or terminator != "aws4_request" or day != amz_date[:8]:
        raise SQSError("SignatureDoesNotMatch", _MISMATCH)
    secrets = secrets_for(access_key)
    if not secrets:
        raise SQSError(
            "InvalidClientTokenId", "The security token included in the request is invalid."
        )
    canonical_headers = []
    for name in signed:
        name = name.strip().lower()
        value = _header(request.headers, name)
        if not name or value is None:
            raise _incomplete(f"The signed header {name!r} is not in the request.")
        canonical_headers.append(f"{name}:{_SPACES.sub(' ', value.strip())}\n")
    if "host" not in {n.strip().lower() for n in signed}:
        raise _incomplete("The host header must be signed.")
    given = _header(request.headers, "X-Amz-Content-Sha256")
    payloads = [given] if given else [hashlib.sha256(request.body).hexdigest()]
    if expires is not None and not given:
        payloads.append(UNSIGNED)  # what most SDKs sign in a presigned URL
    scope_text = f"{day}/{region}/{service}/aws4_request"
    key = None
    matched = False
    for payload in payloads:
        canonical = "\n".join(
            (
                request.method.upper(),
                canonical_uri(request.path),
                canonical_query(pairs),
                "".join(canonical_headers),
                ";".join(n.strip().lower() for n in signed),
                payload,
            )
        )
        string_to_sign = "\n".join(
            (ALGORITHM, amz_date, scope_text, hashlib.sha256(canonical.encode("utf-8")).hexdigest())
        ).encode("utf-8")
        for secret in secrets:
            key = signing_key(secret, day, region, service)
            expected = hmac.new(key, string_to_sign, hashlib.sha256).hexdigest()
            matched |= hmac.compare_digest(expected, signature)
    if not matched:
        raise SQSError("SignatureDoesNotMatch", _MISMATCH)
    return Credential(access_key, day, region, service)


def _http_date(headers: Mapping[str, str]) -> datetime:
    from email.utils import parsedate_to_datetime

    text = _header(headers, "Date")
    if not text:
        raise _incomplete("Authorization requires an X-Amz-Date or Date header.")
    try:
        return parsedate_to_datetime(text).astimezone(UTC)
    except (TypeError, ValueError, IndexError):
        raise SQSError("RequestExpired", f"Invalid request date {text[:40]!r}.") from None


def _check_time(date: datetime, now: float, max_skew: int, expires: int | None) -> None:
    signed_at = date.timestamp()
    stamp = date.strftime(_AMZ_DATE)
    if expires is not None:
        if now > signed_at + expires:
            raise SQSError("RequestExpired", f"Request has expired (signed at {stamp}).")
        if signed_at - now > max_skew:
            raise SQSError("RequestExpired", f"Request is signed in the future ({stamp}).")
        return
    if abs(now - signed_at) > max_skew:
        current = datetime.fromtimestamp(now, UTC).strftime(_AMZ_DATE)
        raise SQSError(
            "RequestExpired",
            f"Signature expired: {stamp} is now earlier or later than {current} by more "
            f"than {max_skew // 60} min.",
        )
