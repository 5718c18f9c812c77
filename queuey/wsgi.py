"""The WSGI application for servers that import one (granian, gunicorn).

    QUEUEY_INI=production.ini QUEUEY_ADMIN_SECRET=<a long random string> \
        granian --interface wsgi --workers 2 queuey.wsgi:application

Builds the app from the ini file named by ``QUEUEY_INI`` (``development.ini``
when unset), with its logging configured, once per worker process.

Run this way (not through ``pserve`` and ``egg:queuey#granian``), a process
cannot tell whether it is one of several workers, which could not share a
random admin session secret: with the admin pages on, ``queuey.admin.secret``
(or ``QUEUEY_ADMIN_SECRET``) must be set, or the app refuses to start.
"""

from __future__ import annotations

import os

from pyramid.paster import get_app, setup_logging

from queuey.server import IMPORTED_ENV

os.environ[IMPORTED_ENV] = "1"
INI = os.environ.get("QUEUEY_INI", "development.ini")
setup_logging(INI)
application = get_app(INI, "main")
