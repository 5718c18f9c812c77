"""AWS Signature Version 4, verified on the server.

The client signs a canonical form of its request with a key derived from its
secret; the server rebuilds the same canonical form from what it received and
compares. Both places a signature can travel are read: the ``Authorization``
header and the query string (presigned URLs, ``X-Amz-Signature``). Every
failure is an :class:`~queuey.sqs.errors.SQSError` with SQS's code; the work
per request is bounded (header and query sizes are checked first).

What the server rebuilds comes from what it received, never from what the
client says about it: the payload hash is the hash of the body read, and a
header that would change the request's meaning must be among the signed ones.
"""

from __future__ import annotations

import hashlib
import hmac
import posixpath
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, unquote_plus

from queuey.settings import REGION
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
#: The query parameters of a presigned URL's signature.
_QUERY_AUTH = frozenset(
    (
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
    )
)
#: Any of these in the query string makes the request a presigned one.
_PRESIGNED_BY = frozenset(("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature"))
#: Signs for access keys nobody has, so an unknown key costs what a wrong secret does.
_DUMMY_SECRET = secrets.token_urlsafe(30)

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
    return quote(text, safe="-_.~", errors="surrogatepass")


def canonical_uri(path: str) -> str:
    """Non-S3 services: dot segments removed, then the wire path encoded again."""
    normalized = posixpath.normpath(path) if path not in ("", "/") else "/"
    if path.endswith("/") and normalized != "/":
        normalized += "/"
    if normalized.startswith("//"):
        normalized = "/" + normalized.lstrip("/")
    return quote(normalized, safe="/~", errors="surrogatepass")


def canonical_query(pairs: Sequence[tuple[str, str]], presigned: bool = True) -> str:
    """Every parameter, sorted; a presigned URL's own ``X-Amz-Signature`` left out."""
    encoded = sorted(
        (_encode(k), _encode(v)) for k, v in pairs if not (presigned and k == "X-Amz-Signature")
    )
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


def _parse_presigned(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    params: dict[str, str] = {}
    for name, value in pairs:
        if name in _QUERY_AUTH:
            if name in params:
                raise _incomplete(f"The query string names {name} more than once.")
            params[name] = value
    if params.get("X-Amz-Algorithm") != ALGORITHM:
        raise _incomplete(f"X-Amz-Algorithm must be {ALGORITHM}.")
    for needed in ("X-Amz-Credential", "X-Amz-SignedHeaders", "X-Amz-Signature"):
        if not params.get(needed):
            raise _incomplete(f"The query string requires the parameter {needed}.")
    return params


def _parse_date(text: str | None, http: bool = False) -> datetime:
    """An ``X-Amz-Date`` (or, ``http``, a ``Date`` header's) time."""
    if not text:
        where = "or Date header" if http else "header or parameter"
        raise _incomplete(f"Authorization requires an X-Amz-Date {where}.")
    try:
        if http:
            return parsedate_to_datetime(text).astimezone(UTC)
        return datetime.strptime(text, _AMZ_DATE).replace(tzinfo=UTC)
    except (TypeError, ValueError, IndexError, OverflowError, OSError):
        raise SQSError("RequestExpired", f"Invalid request date {text[:40]!r}.") from None


def _check_signed_headers(
    headers: Mapping[str, str], signed: Sequence[str], date_header: str | None
) -> None:
    """Every header that changes what the request means is signed when present:
    ``host`` always, ``Content-Type`` (form or JSON), every ``X-Amz-*`` header
    (``X-Amz-Target`` picks the action, ``X-Amz-Content-Sha256`` the payload
    hash) and ``Date`` when it dates the request. AWS asks the same of clients;
    botocore signs every header it sends but ``User-Agent`` and a few hop-by-hop
    ones, so real clients pass."""
    if len(signed) > MAX_SIGNED_HEADERS:
        raise _incomplete(f"At most {MAX_SIGNED_HEADERS} signed headers are accepted.")
    if "" in signed:
        raise _incomplete("SignedHeaders holds an empty header name.")
    if "host" not in signed:
        raise _incomplete("The host header must be signed.")
    names = set(signed)
    for name, value in headers.items():
        lowered = name.lower()
        if lowered in names or not value.strip():
            continue
        if lowered == "content-type" or lowered.startswith("x-amz-") or lowered == date_header:
            raise _incomplete(f"The {lowered} header is in the request but not signed.")


def _payload_hashes(request: SignedRequest, presigned: bool) -> list[str]:
    """What the client may have signed as the payload hash: always a hash of
    the body received. ``X-Amz-Content-Sha256`` is accepted when it states that
    hash, and ``UNSIGNED-PAYLOAD`` only with no body at all."""
    actual = hashlib.sha256(request.body).hexdigest()
    given = (_header(request.headers, "X-Amz-Content-Sha256") or "").strip()
    if given:
        if given == actual or (given == UNSIGNED and not request.body):
            return [given]
        raise SQSError(
            "SignatureDoesNotMatch",
            "The X-Amz-Content-Sha256 header does not match the body of the request.",
        )
    if presigned and not request.body:
        return [actual, UNSIGNED]  # botocore signs the empty body's hash, most SDKs this
    return [actual]


def verify(
    request: SignedRequest,
    secrets_for: Callable[[str], Sequence[str]],
    now: float,
    *,
    region: str,
    regions: frozenset[str] | None = frozenset(),
    max_skew: int = 900,
) -> Credential:
    """Check the request's signature; the credential it was signed with, or SQSError.

    Everything that gives the request its meaning is covered: method, path,
    query string, body (hashed here, never taken from the client), and the
    headers :func:`_check_signed_headers` names; the credential must be scoped
    to SQS and to ``region`` or one of ``regions`` (None: any region name).
    An unknown access key and a wrong secret get the same
    answer after the same work (an HMAC with a throwaway secret)."""
    if len(request.query) > MAX_QUERY:
        raise _incomplete("The query string is too long.")
    pairs = _query_pairs(request.query)
    authorization = _header(request.headers, "Authorization")
    presigned = any(name in _PRESIGNED_BY for name, _ in pairs)
    if authorization is None and not presigned:
        raise SQSError("MissingAuthenticationToken", "Request is missing Authentication Token")
    if authorization is not None and presigned:
        raise _incomplete(
            "Sign with the Authorization header or with X-Amz-* query parameters, not both."
        )
    if authorization is not None:
        credential_text, signed, signature = _parse_authorization(authorization)
        amz_date = _header(request.headers, "X-Amz-Date")
        date_header = "x-amz-date" if amz_date else "date"
        date = _parse_date(amz_date or _header(request.headers, "Date"), http=not amz_date)
        amz_date = date.strftime(_AMZ_DATE)
        expires = None
    else:
        params = _parse_presigned(pairs)
        credential_text = params["X-Amz-Credential"]
        signed = params["X-Amz-SignedHeaders"].split(";")
        signature = params["X-Amz-Signature"]
        amz_date = params.get("X-Amz-Date")
        date_header = None
        date = _parse_date(amz_date)
        expires_text = params.get("X-Amz-Expires", "")
        if not (expires_text.isascii() and expires_text.isdigit() and len(expires_text) <= 7):
            raise _incomplete("X-Amz-Expires must be a number of seconds.")
        expires = int(expires_text)
        if not 1 <= expires <= MAX_EXPIRES:
            raise _incomplete(f"X-Amz-Expires must be 1 to {MAX_EXPIRES} seconds.")
    signed = [name.strip().lower() for name in signed]
    _check_signed_headers(request.headers, signed, date_header)
    scope = _SCOPE.match(credential_text)
    if scope is None:
        raise _incomplete(
            "Credential must have the form <key>/<date>/<region>/<service>/aws4_request."
        )
    access_key, day, scope_region, service, terminator = scope.groups()
    _check_time(date, now, max_skew, expires)
    if service != SERVICE:
        raise SQSError(
            "SignatureDoesNotMatch", f"Credential should be scoped to correct service: '{SERVICE}'."
        )
    if scope_region != region and not (
        scope_region in regions if regions is not None else REGION.match(scope_region)
    ):
        raise SQSError(
            "SignatureDoesNotMatch",
            f"Credential should be scoped to a valid region, not '{scope_region}'.",
        )
    if terminator != "aws4_request" or day != amz_date[:8]:
        raise SQSError("SignatureDoesNotMatch", _MISMATCH)
    canonical_headers = []
    for name in signed:
        value = _header(request.headers, name)
        if value is None:
            raise _incomplete(f"The signed header {name!r} is not in the request.")
        canonical_headers.append(f"{name}:{_SPACES.sub(' ', value.strip())}\n")
    head = "\n".join(
        (
            request.method.upper(),
            canonical_uri(request.path),
            canonical_query(pairs, presigned),
            "".join(canonical_headers),
            ";".join(signed),
        )
    )
    payloads = _payload_hashes(request, presigned)
    candidates = secrets_for(access_key)
    known = bool(candidates)
    if not known:
        candidates = (_DUMMY_SECRET,)
    given = signature.encode("utf-8", "surrogatepass")
    region = scope_region
    scope_text = f"{day}/{region}/{service}/aws4_request"
    matched = False
    for payload in payloads:
        canonical = f"{head}\n{payload}".encode("utf-8", "surrogatepass")
        string_to_sign = "\n".join(
            (ALGORITHM, amz_date, scope_text, hashlib.sha256(canonical).hexdigest())
        ).encode("utf-8")
        for secret in candidates:
            key = signing_key(secret, day, region, service)
            expected = hmac.new(key, string_to_sign, hashlib.sha256).hexdigest().encode()
            matched |= hmac.compare_digest(expected, given)
    if not (matched and known):
        raise SQSError("SignatureDoesNotMatch", _MISMATCH)
    return Credential(access_key, day, region, service)


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
