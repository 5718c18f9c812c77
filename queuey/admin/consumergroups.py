"""Consumer groups of the signed-in application: members, partition owners, lag.

Read from :mod:`queuey.core.consumergroups` (``request.services.groups``, cached there; ``None``
when ``queuey.zookeeper.hosts`` is not set, and the page says so).
"""

from __future__ import annotations

from queuey.admin.helpers import admin_view
from queuey.core.consumergroups import GroupsUnavailable


@admin_view("admin.groups", template="groups")
def groups(request):
    source = request.services.groups
    if source is None:
        return {"configured": False, "groups": [], "unavailable": False}
    try:
        found = source.for_application(request.identity.application.name)
    except GroupsUnavailable:
        request.response.status = 503
        request.response.headers["Retry-After"] = "5"
        return {"configured": True, "groups": [], "unavailable": True}
    return {"configured": True, "groups": found, "unavailable": False}
