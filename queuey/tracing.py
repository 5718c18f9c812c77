"""Trace context through queues (OpenTelemetry, W3C Trace Context).

A message carries the context it was produced in as its ``traceparent``
attribute (and ``tracestate`` when there is one): the client sends the
current context as the ``traceparent`` header of every request and the
service keeps it on each message of a post that has none of its own
(:func:`traced`); the spool and the Spark writer record the context of the
call that queued the message (:func:`context_attributes`); the SQS endpoint
turns an ``AWSTraceHeader`` (X-Ray's spelling) into a ``traceparent`` and
back (:func:`from_xray`, :func:`to_xray`). A consumer starts a span that is
a child of that context and links to it (:func:`consuming`), so one trace
runs from the producer's span through the queue to the consumer's.

Only the ``opentelemetry-api`` package is needed, and it records nothing by
itself: without an SDK every span here is a no-op and a request carries no
header. The service adds spans of its own around posts and reserves when an
SDK's tracer provider is configured in its process (:func:`enabled`), e.g.
by ``opentelemetry-instrument``. Tests give a provider of their own
(:func:`use_provider`) instead of the process-wide one.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind

from queuey.limits import MAX_ATTRIBUTES

#: The message attributes (and request header) that carry a context.
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
#: W3C Trace Context, version 00: trace id and span id not all zeros.
TRACEPARENT_PATTERN = r"^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$"
_TRACEPARENT = re.compile(TRACEPARENT_PATTERN)
#: X-Ray's header: ``Root=1-<8 hex>-<24 hex>;Parent=<16 hex>;Sampled=<0|1>``.
_XRAY = re.compile(
    r"^Root=1-([0-9a-f]{8})-([0-9a-f]{24});Parent=([0-9a-f]{16});Sampled=([01])(;.*)?$"
)

_provider: trace.TracerProvider | None = None


def use_provider(provider: trace.TracerProvider | None) -> None:
    """Trace with ``provider`` (None: the process-wide one again)."""
    global _provider
    _provider = provider


def tracer() -> trace.Tracer:
    return trace.get_tracer("queuey", tracer_provider=_provider)


#: Whether the process has an SDK's provider, as last looked (at most once a second).
_sdk: list = [False, -1.0]


def enabled() -> bool:
    """Whether spans are recorded: a provider was given, or an SDK's is set
    for the process (the API's own is a proxy until then). Asked on every
    post and reserve, so the process's provider is looked at once a second."""
    if _provider is not None:
        return True
    now = time.monotonic()
    if now - _sdk[1] >= 1.0:
        _sdk[:] = [not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider), now]
    return _sdk[0]


def valid(traceparent: object) -> bool:
    return isinstance(traceparent, str) and _TRACEPARENT.match(traceparent) is not None


def context_attributes() -> dict[str, str]:
    """The current context as message attributes (none outside a span)."""
    return {k: v for k, v in request_headers().items() if k in (TRACEPARENT, TRACESTATE)}


def with_context(
    attributes: Mapping[str, str] | None, context: Mapping[str, str]
) -> Mapping[str, str] | None:
    """``attributes`` with ``context`` added, unless they carry a
    ``traceparent`` of their own or have no room for it."""
    if not context or TRACEPARENT not in context:
        return attributes
    given = attributes or {}
    if TRACEPARENT in given or len(given) + len(context) > MAX_ATTRIBUTES:
        return attributes
    return {**given, **context}


def traced(messages: list, traceparent: str | None, tracestate: str | None = None) -> list:
    """``messages`` (:class:`~queuey.model.NewMessage`), each without a
    ``traceparent`` of its own given the request's; a malformed one is ignored."""
    if not traceparent or not valid(traceparent):
        return messages
    context = {TRACEPARENT: traceparent}
    if tracestate and len(tracestate) <= 512:
        context[TRACESTATE] = tracestate
    out = []
    for message in messages:
        attributes = with_context(message.attributes, context)
        unchanged = attributes is message.attributes
        out.append(message if unchanged else replace(message, attributes=attributes))
    return out


def message_context(attributes: Mapping[str, str] | None) -> Context | None:
    """The context a message was produced in (None: it carries none)."""
    if not attributes or not valid(attributes.get(TRACEPARENT)):
        return None
    return propagate.extract(
        {k: attributes[k] for k in (TRACEPARENT, TRACESTATE) if k in attributes}
    )


def links(attribute_maps: Iterable[Mapping[str, str] | None]) -> list[Link]:
    """A link to each message's producing span."""
    found = []
    for attributes in attribute_maps:
        context = message_context(attributes)
        if context is not None:
            span = trace.get_current_span(context).get_span_context()
            if span.is_valid:
                found.append(Link(span))
    return found


@contextlib.contextmanager
def consuming(name: str, attributes: Mapping[str, str] | None, **span_attributes) -> Iterator:
    """A consumer's span for one message: a child of the context the message
    was produced in, linked to it (none: a root span)."""
    parent = message_context(attributes)
    with tracer().start_as_current_span(
        name,
        context=parent,
        kind=SpanKind.CONSUMER,
        links=links([attributes]),
        attributes=span_attributes or None,
    ) as span:
        yield span


def received(name: str, attribute_maps: list, **span_attributes) -> None:
    """A span marking messages received (a reserve), linked to each one's producer."""
    if not attribute_maps:
        return
    span = tracer().start_span(
        name,
        kind=SpanKind.CONSUMER,
        links=links(attribute_maps),
        attributes=span_attributes or None,
    )
    span.end()


def link_current(attribute_maps: Iterable[Mapping[str, str] | None]) -> None:
    """Link the current span (the service's, around a reserve) to each
    message's producer."""
    span = trace.get_current_span()
    if span.is_recording():
        for link in links(attribute_maps):
            span.add_link(link.context)


def request_headers() -> dict[str, str]:
    """The current context as request headers (none outside a span)."""
    if not trace.get_current_span().get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


# -- X-Ray's AWSTraceHeader ------------------------------------------------------
def from_xray(header: str | None) -> str | None:
    """The ``traceparent`` an ``AWSTraceHeader`` names (None: not one)."""
    found = _XRAY.match(header or "")
    if found is None:
        return None
    epoch, rest, parent, sampled = found.group(1, 2, 3, 4)
    traceparent = f"00-{epoch}{rest}-{parent}-0{sampled}"
    return traceparent if valid(traceparent) else None


def to_xray(traceparent: str | None) -> str | None:
    """The ``AWSTraceHeader`` of a ``traceparent`` (None: not one)."""
    if not valid(traceparent):
        return None
    _, trace_id, parent, flags = traceparent.split("-")
    sampled = int(flags, 16) & 1
    return f"Root=1-{trace_id[:8]}-{trace_id[8:]};Parent={parent};Sampled={sampled}"
