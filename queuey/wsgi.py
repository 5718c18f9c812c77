"""The WSGI application for servers that import one (granian, gunicorn).

    QUEUEY_INI=production.ini granian --interface wsgi queuey.wsgi:application

Builds the app from the ini file named by ``QUEUEY_INI`` (``development.ini``
when unset), with its logging configured, once per worker process.
"""

from __future__ import annotations

import os

from pyramid.paster import get_app, setup_logging

INI = os.environ.get("QUEUEY_INI", "development.ini")
setup_logging(INI)
application = get_app(INI, "main")
