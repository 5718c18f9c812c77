"""Subscription routes: list the filtered subscriptions, set or remove a filter.

The views parse and answer; :mod:`queuey.core.subscriptions` validates the
filter and keeps it with the queue.
"""

from __future__ import annotations

import re

from pyramid.view import view_config

from queuey.core.access import Permission
from queuey.core.messages import InvalidFields
from queuey.web.params import PATTERN_WORDS, InvalidParameters, json_body, validate
from queuey.web.responses import ok
from queuey.web.schemas import SUBSCRIPTION_PATTERN, SubscriptionSettings

_SUBSCRIPTION = re.compile(SUBSCRIPTION_PATTERN)


@view_config(route_name="queue_subscriptions", request_method="GET", permission=Permission.MANAGE)
def list_subscriptions(request):
    settings = request.services.subscriptions.settings(request.context.meta)
    return ok(subscriptions=[s.to_json() for s in settings])


@view_config(route_name="queue_subscription", request_method="PUT", permission=Permission.MANAGE)
def configure(request):
    subscription = request.matchdict["subscription"]
    if not _SUBSCRIPTION.fullmatch(subscription):
        raise InvalidParameters({"subscription": PATTERN_WORDS[SUBSCRIPTION_PATTERN]})
    params = validate(
        SubscriptionSettings, json_body(request, request.services.settings.max_form_size)
    )
    try:
        done = request.services.subscriptions.configure(
            request.context.meta, subscription, {"filter": params.filter}
        )
    except InvalidFields as exc:
        raise InvalidParameters(exc.errors) from None
    return ok(**done.to_json())
