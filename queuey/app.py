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
from queuey.core.metrics import Metrics
from queuey.core.services import Services, build_services, services_of
from queuey.errors import ConfigurationError
from queuey.server import ROLE_ENV, SHARED_DIR_ENV
from queuey.settings import check_max_ttl, check_read_delay, load_settings
from queuey.storage import Storage, load_backend
from queuey.web.coordination import Coordination
from queuey.web.fastpath import FastPath
from queuey.web.metrics import RequestRecorder
from queuey.web.schemas import Models, build_models
from queuey.web.state import WebState, web_state_of

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
        from queuey.web.bodies import read_at_most
        from queuey.web.params import limit_of, too_large

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

    # The app's services as plain class attributes: Pyramid applies
    # ``add_request_method`` extensions to every request it makes, a cost each
    # request pays before any view runs.
    @reify
    def services(self) -> Services:
        return services_of(self.registry)

    @reify
    def storage(self) -> Storage:
        return self.services.storage

    @reify
    def clock(self) -> Clock:
        return self.services.clock

    @reify
    def metrics(self) -> Metrics:
        return self.services.metrics

    @reify
    def web(self) -> WebState:
        """The HTTP doors' own state (:mod:`queuey.web.state`)."""
        return web_state_of(self.registry)

    @reify
    def models(self) -> Models:
        return self.web.models

    @reify
    def admin_form(self) -> dict[str, str]:
        """A POSTed admin form's fields, decoded once and strictly (bad UTF-8 is a 400)."""
        from queuey.web.params import form

        return form(self)


#: What the app factory includes (the admin pages too when enabled).
DOORS = (
    "queuey.web.bodies",  # each route's largest body, checked before any other work
    "queuey.web.security",
    "queuey.web",
    "queuey.sqs.views",
    "queuey.sqs.body_limit",
)


def keep(registry, services: Services, web: WebState) -> None:
    """The one place the app keeps anything on Pyramid's registry: the core's
    services (:func:`queuey.core.services.services_of`) and the HTTP doors'
    state (:func:`queuey.web.state.web_state_of`)."""
    registry.queuey = services
    registry.queuey_web = web


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

    # Under the production server's workers, one process of its own measures
    # queues and publishes the figures; the workers follow (queuey.server).
    role = os.environ.get(ROLE_ENV, "")
    services = build_services(
        parsed,
        load_applications(parsed.applications_file),
        storage,
        clock,
        role=role,  # type: ignore[arg-type]
        shared_dir=Path(os.environ[SHARED_DIR_ENV]) if role else None,
    )
    web = WebState(
        models=build_models(parsed.max_partitions, parsed.max_ttl, parsed.default_ttl),
        recorder=RequestRecorder(services.metrics),
        coordination=Coordination(parsed.zookeeper_hosts) if parsed.zookeeper_hosts else None,
    )
    if config is None:
        config = Configurator(settings=settings)
    keep(config.registry, services, web)

    config.set_request_factory(QueueyRequest)
    # Every door only reads and fills what keep() put on the registry, so the
    # order they are included in does not matter.
    for door in DOORS:
        config.include(door)
    if parsed.admin_enabled:
        config.include("queuey.admin")
    config.scan("queuey.web")
    services.overview.start()  # the operators' refresher (not with queuey.stats.interval = 0)
    services.schedules.ticker.start()  # not in workers, nor with queuey.schedules.interval = 0
    log.info("queuey ready: storage=%s", parsed.storage_backend)
    return FastPath(config.make_wsgi_app(), QueueyRequest)
