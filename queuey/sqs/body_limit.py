"""The SQS endpoint's body limit (:mod:`queuey.web.bodies`), refused in SQS's words.

A body over :func:`queuey.sqs.views.request_limit` is refused before the
endpoint runs, so before its signature is verified, as SQS's
``RequestEntityTooLarge`` (413) in the protocol the request spoke.
"""

from __future__ import annotations

import uuid

from pyramid.response import Response

from queuey.core.services import services_of
from queuey.sqs import protocol
from queuey.sqs.errors import SQSError
from queuey.sqs.views import ROUTES, request_limit
from queuey.web.bodies import add_body_limit
from queuey.web.params import PayloadTooLarge


def too_large(exc: PayloadTooLarge, request) -> Response:
    limit = request.web.body_limits.get(request.matched_route.name)
    error = SQSError("RequestEntityTooLarge", f"The request is larger than {limit} bytes.")
    status, headers, payload = protocol.error(
        "X-Amz-Target" in request.headers, error, str(uuid.uuid4())
    )
    response = Response(body=payload, status=status)
    response.headers.update(headers)
    return response


def includeme(config) -> None:
    limit = request_limit(services_of(config.registry).settings.max_message_size)
    for name, _pattern in ROUTES:
        add_body_limit(config, name, limit)
        config.add_exception_view(too_large, context=PayloadTooLarge, route_name=name)
