"""The SQS endpoint in Pyramid: ``/`` and ``/<account id>/<queue>``.

Order of work for every request: read the (bounded) body, verify the SigV4
signature over it, check the caller's address against its application's
allowlist, and only then tell the protocol and action, parse parameters and
touch storage, so an unsigned or wrongly signed request is never parsed and
never reaches storage.
"""

from __future__ import annotations

import logging
import uuid

from pyramid.response import Response
from pyramid.security import NO_PERMISSION_REQUIRED

from queuey.core.access import client_address
from queuey.core.services import services_of
from queuey.errors import Catalogued, StorageUnavailable
from queuey.sqs import protocol, sigv4
from queuey.sqs.actions import Caller, SQSService
from queuey.sqs.api import ACTIONS
from queuey.sqs.errors import SQSError, refusal
from queuey.sqs.queues import Place

log = logging.getLogger(__name__)

ROUTES = [
    ("sqs", "/"),
    ("sqs_queue", r"/{account:[0-9]{12}}/{queue}"),
]


def request_limit(max_message_size: int) -> int:
    """Largest request body: a batch of messages of the largest size, escaped
    by the client (JSON ``\\uXXXX`` or percent-encoding: at most 3 bytes per
    byte), and room for the rest of the request."""
    return 3 * max_message_size + 65536


def endpoint(request, service: SQSService):
    services = request.services
    settings = services.settings
    request_id = str(uuid.uuid4())
    json_protocol = "X-Amz-Target" in request.headers
    call = None
    try:
        # At most request_limit bytes: a longer one was refused before this
        # view ran (queuey.web.bodies, answered by queuey.sqs.body_limit).
        body = request.body
        application, region = _authenticate(request, body)
        services.quotas.admit(application.name)  # its rate (queuey.core.quotas)
        call = protocol.read_call(
            request.method,
            request.headers.get("X-Amz-Target"),
            request.content_type or "",
            request.environ.get("QUERY_STRING", ""),
            body,
        )
        # For the request log line (queuey.web.metrics).
        request.environ["queuey.application"] = application.name
        request.environ["queuey.sqs_action"] = call.action if call.action in ACTIONS else "unknown"
        if call.action is None:
            raise SQSError("MissingAction", "The request must contain the parameter Action.")
        if call.action not in ACTIONS:
            if call.json:
                raise SQSError("UnknownOperationException", f"Unknown operation {call.action}.")
            raise SQSError(
                "InvalidAction", f"The action {call.action[:100]} is not valid for this endpoint."
            )
        matched = request.matchdict
        params = call.params(
            f"/{matched['account']}/{matched['queue']}" if "queue" in matched else None
        )
        place = Place(request.host_url, application.account_id, region, settings.sqs_region)
        result = service.call(call.action, Caller(application, place, call.action), params)
        status, headers, payload = protocol.ok(call, result, request_id)
    except (SQSError, Catalogued) as exc:
        if isinstance(exc, StorageUnavailable):
            log.warning("sqs %s: storage unavailable: %s", call.action if call else "?", exc)
        status, headers, payload = protocol.error(json_protocol, refusal(exc), request_id)
    response = Response(body=payload, status=status)
    response.headers.update(headers)
    return response


def _authenticate(request, body: bytes):
    settings = request.services.settings
    applications = request.services.applications
    found = []

    def secrets_for(access_key: str):
        # Kept: the applications file may be reloaded while the HMACs run.
        app = applications.get(access_key)
        if app is None:
            return ()
        found.append(app)
        return app.sqs_secrets

    credential = sigv4.verify(
        sigv4.SignedRequest(
            method=request.method,
            path=sigv4.wire_path(request.environ),
            query=request.environ.get("QUERY_STRING", ""),
            headers=request.headers,
            body=body,
        ),
        secrets_for,
        now=request.clock.now_micros() / 1e6,
        region=settings.sqs_region,
        regions=settings.sqs_regions,
    )
    application = found[0]  # the one the verified access key named
    address = client_address(request, settings.trusted_proxies)
    if not application.address_allowed(address):
        raise SQSError(
            "AccessDenied", "Access to the resource is denied: this address may not use it."
        )
    return application, credential.region


def includeme(config) -> None:
    """The endpoint's routes, its one service object kept by its view. Reads
    only the app's services, so it may be included before or after the REST API."""
    service = SQSService(services_of(config.registry))

    def view(request):
        return endpoint(request, service)

    for name, pattern in ROUTES:
        config.add_route(name, pattern)
        config.add_view(
            view,
            route_name=name,
            request_method=("GET", "POST"),
            permission=NO_PERMISSION_REQUIRED,
        )
