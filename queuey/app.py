"""The Pyramid app factory behind ``queuey.main``."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from pyramid.config import Configurator
from pyramid.decorator import reify
from pyramid.request import Request

from queuey.applications import load_applications
from queuey.clock import SYSTEM_CLOCK, Clock
from queuey.core.groups import Groups
from queuey.core.overview import Overview
from queuey.errors import ConfigurationError
from queuey.server import ROLE_ENV, SHARED_DIR_ENV
from queuey.settings import check_max_ttl, check_read_delay, load_settings
from queuey.storage import Storage, load_backend
from queuey.web.coordination import Coordination
from queuey.web.fastpath import FastPath
from queuey.web.resources import QueueCache

log = logging.getLogger(__name__)


class QueueyRequest(Request):
    """Bodies stay in memory, each at most its route's limit: that limit is
    checked before anything reads a body (:mod:`queuey.web.bodies`), so
    WebOb's spill to a temporary file would only cost a file (and leak its
    handle)."""

    def copy_body(self) -> None:
        """WebOb's copy of the body (for ``request.body``, a form, the CSRF
        token) in one read of at most the route's limit, where WebOb's loop
        grows a bytes object 64 KiB at a time and spills to a temporary file."""
        from queuey.web.bodies import limit_of, read_at_most, too_large

        if not self.is_body_readable:
            self.body = b""
            return
        if self.is_body_seekable:
            self.body_file_raw.seek(0)
        limit = limit_of(self)
        length = self.content_length
        if length is not None and length > limit:
            raise too_large(limit)
        raw = read_at_most(self.body_file_raw, limit + 1 if length is None else length)
        if len(raw) > limit:
            raise too_large(limit)
        self.body = raw

    # The registry's services as plain class attributes: Pyramid applies
    # ``add_request_method`` extensions to every request it makes, a cost each
    # request pays before any view runs.
    @reify
    def storage(self) -> Storage:
        return self.registry.storage

    @reify
    def clock(self) -> Clock:
        return self.registry.clock

    @reify
    def metrics(self):
        return self.registry.metrics

    @reify
    def models(self):
        return self.registry.api_models

    @reify
    def admin_form(self) -> dict[str, str]:
        """A POSTed admin form's fields, decoded once and strictly (bad UTF-8 is a 400)."""
        from queuey.web.bodies import limit_of
        from queuey.web.params import form

        return form(self, limit_of(self))


def main(global_config: dict | None = None, config: Configurator | None = None, **settings: Any):
    """Build the WSGI app.

    Tests may pass ``queuey.clock`` (a :class:`~queuey.clock.Clock`) and
    ``queuey.storage.instance`` (a ready :class:`~queuey.storage.Storage`) in
    ``settings``; everything else comes from the ini.
    """
    parsed = load_settings(settings)
    clock: Clock = settings.get("queuey.clock") or SYSTEM_CLOCK
    given: Storage | None = settings.get("queuey.storage.instance")
    storage = given or load_backend(parsed.storage_backend, parsed.raw, clock)
    try:
        # Settings that must agree with the backend; a storage we opened
        # is closed again if they do not.
        check_read_delay(parsed, storage.write_timeout_seconds)
        check_max_ttl(parsed, storage.max_ttl)
    except ConfigurationError:
        if given is None:
            storage.close()
        raise

    if config is None:
        config = Configurator(settings=settings)
    registry = config.registry
    registry.queuey_settings = parsed
    registry.applications = load_applications(parsed.applications_file)
    registry.storage = storage
    registry.clock = clock
    registry.queue_cache = QueueCache(
        parsed.metadata_cache_seconds, shared=storage.metadata_changes()
    )
    registry.coordination = Coordination(parsed.zookeeper_hosts) if parsed.zookeeper_hosts else None
    # Under the production server's workers, one process of its own measures
    # queues and publishes the figures; the workers follow (queuey.server).
    role = os.environ.get(ROLE_ENV, "")
    #: The server's own directory, shared by its processes (None: serving alone).
    registry.shared_dir = Path(os.environ[SHARED_DIR_ENV]) if role else None
    snapshot = registry.shared_dir / "overview.pickle" if role else None
    registry.overview = Overview(
        storage,
        clock,
        lambda: registry.applications.keys(),
        interval=0 if role == "worker" else parsed.stats_interval,
        max_age=parsed.stats_max_age,
        budget=parsed.stats_budget,
        max_queues=parsed.stats_max_queues,
        publish=snapshot if role == "refresher" else None,
        follow=snapshot if role == "worker" else None,
    )
    registry.groups = None
    if parsed.zookeeper_hosts:
        registry.groups = Groups(
            parsed.zookeeper_hosts,
            parsed.groups_root,
            storage,
            clock,
            lambda: registry.applications.keys(),
            max_age=parsed.stats_max_age,
        )
        registry.overview.after_pass.append(registry.groups.refresh_if_stale)
        registry.overview.shared["groups"] = (registry.groups.snapshot, registry.groups.adopt)

    config.set_request_factory(QueueyRequest)
    # Each route's largest body; first, so that every door can declare its own.
    config.include("queuey.web.bodies")
    config.include("queuey.web.security")
    config.include("queuey.web")
    config.include("queuey.sqs.views")
    config.include("queuey.sqs.limits")
    if parsed.admin_enabled:
        config.include("queuey.admin")
    config.scan("queuey.web")
    registry.overview.start()  # the operators' refresher (not with queuey.stats.interval = 0)
    log.info("queuey ready: storage=%s", parsed.storage_backend)
    return FastPath(config.make_wsgi_app(), QueueyRequest)
