"""Subscription routes: list and show subscriptions' settings, change them,
pause and resume a subscription's deliveries.

The views parse and answer; :mod:`queuey.core.subscriptions` validates the
filter and keeps it with the queue, :mod:`queuey.core.flowsettings` the flow
settings.
"""

from __future__ import annotations

from queuey.web.params import json_body, path_param, validate
from queuey.web.responses import ok
from queuey.web.schemas import SubscriptionSettings


def list_subscriptions(request):
    settings = request.services.subscriptions.settings(request.context.meta)
    return ok(subscriptions=[s.to_json() for s in settings])


def show(request):
    subscription = path_param(request, "subscription")
    return ok(
        **request.services.subscriptions.setting(request.context.meta, subscription).to_json()
    )


def configure(request):
    subscription = path_param(request, "subscription")
    params = validate(SubscriptionSettings, json_body(request))
    given = {name: getattr(params, name) for name in params.model_fields_set}
    done = request.services.subscriptions.configure(
        request.context.meta, subscription, given, request.services.flow_settings
    )
    return ok(**done.to_json())


def pause_or_resume(request):
    """``.../pause``: hand out nothing (reserves answer empty, long polls wait)
    until ``.../resume``; leases already out stay valid."""
    subscription = path_param(request, "subscription")
    flow = request.services.flow_settings
    change = flow.pause if request.matched_route.name.endswith("_pause") else flow.resume
    updated = change(request.context.meta, subscription)
    return ok(**request.services.subscriptions.setting(updated, subscription).to_json())
