"""The API's fixed limits (DESIGN.md, "Routes").

Everything that talks to the API or implements it (the web layer, the client
library, the worker, the Spark source, the OpenAPI description) takes these
numbers from here. Limits an operator may change are settings
(:mod:`queuey.settings`), not constants.
"""

from __future__ import annotations

#: Most messages one read returns (``limit`` of ``GET /queue/{name}``), most
#: ids in one ``/messages/{ids}`` call, most queues in one listing.
MAX_READ = 1000
#: ``limit`` of a read or a listing when none is given.
DEFAULT_READ = 100
