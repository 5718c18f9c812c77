"""Turning what came back from one HTTP call into a result or a typed error.

:class:`~queuey.client.http.QueueyClient` sends; this module says what a
failure means for the call (:func:`never_sent`: safe to send again anywhere)
and decodes answers into the API's JSON or a
:class:`~queuey.client.errors.ClientError` whose ``outcome_unknown`` tells
whether the call may have taken effect.
"""

from __future__ import annotations

import requests
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from queuey.client.errors import (
    PAUSED_FIELD,
    ClientError,
    FlowRefused,
    Unavailable,
    error_for_status,
)
from queuey.client.retry import retry_after


def never_sent(exc: requests.RequestException) -> bool:
    """True if the connection failed before any byte of the request was sent."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    seen = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, NewConnectionError | ConnectTimeoutError | ConnectionRefusedError):
            return True
        nxt = getattr(cause, "reason", None)
        if nxt is None and cause.args and isinstance(cause.args[0], BaseException):
            nxt = cause.args[0]
        cause = nxt if isinstance(nxt, BaseException) else cause.__cause__
    return False


def sent_and_failed(
    method: str, path: str, base: str, exc: requests.RequestException, repeatable: bool
) -> Unavailable:
    """The error for a call whose answer never came after it was (maybe) sent."""
    if not repeatable:
        return Unavailable(
            f"{method} {path}: {exc.__class__.__name__} after the request was "
            "sent; not retried since it may have taken effect",
            outcome_unknown=True,
        )
    return Unavailable(
        f"{method} {path}: {exc.__class__.__name__} from {base} ({exc})", outcome_unknown=True
    )


def decode(method: str, path: str, response: requests.Response, repeatable: bool) -> dict:
    if response.status_code >= 400:
        raise error(method, path, response, repeatable)
    status = response.status_code
    try:
        data = response.json()
    except ValueError as exc:
        raise _unusable(method, path, status, f"answer is not JSON (HTTP {status})") from exc
    if not isinstance(data, dict) or data.get("status") != "ok":
        raise _unusable(method, path, status, f"unexpected answer {str(data)[:200]!r}")
    return data


def _unusable(method: str, path: str, status: int, what: str) -> ClientError:
    """An answer that is no error and yet not the API's: the call may have taken effect."""
    return ClientError(f"{method} {path}: {what}", status=status, outcome_unknown=True)


def error_msg_of(response: requests.Response) -> dict[str, str]:
    """The answer's ``error_msg`` (empty when it has none or is not JSON)."""
    try:
        data = response.json()
    except ValueError:
        return {}
    if isinstance(data, dict) and isinstance(data.get("error_msg"), dict):
        return {str(k): str(v) for k, v in data["error_msg"].items()}
    return {}


def paused(response: requests.Response) -> bool:
    """True for a paused queue's refusal: a ``503`` no retry soon would change."""
    return response.status_code == 503 and PAUSED_FIELD in error_msg_of(response)


def error(method: str, path: str, response: requests.Response, repeatable: bool) -> ClientError:
    """The typed error of an error answer; a ``5xx`` leaves the outcome unknown,
    but a flow-control refusal, which stored nothing."""
    error_msg = error_msg_of(response)
    cls = error_for_status(response.status_code, error_msg)
    detail = "; ".join(f"{k}: {v}" for k, v in error_msg.items()) or response.reason
    refused = issubclass(cls, FlowRefused)
    unknown = not refused and response.status_code >= 500
    note = "; not retried since it may have taken effect" if unknown and not repeatable else ""
    outcome = {"retry_after": retry_after(response.headers)} if refused else {}
    return cls(
        f"{method} {path}: HTTP {response.status_code}: {detail}{note}",
        status=response.status_code,
        error_msg=error_msg,
        outcome_unknown=unknown,
        **outcome,
    )
