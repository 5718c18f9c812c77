"""A pytest plugin (``-p tests.model.flow_extra_fields``) that declares two
flow settings more in :data:`queuey.model.flow.FIELDS` before any door is
imported: what adding a setting to the table alone gives every door."""

from __future__ import annotations

from queuey.model import flow

EXTRA = (
    flow.FlowField("max_bytes", "queue", "count", "Max bytes", "most body bytes the queue keeps"),
    flow.FlowField("ack_rate", "subscription", "rate", "Ack rate", "acks per second taken"),
)

flow.FIELDS = flow.FIELDS + EXTRA
