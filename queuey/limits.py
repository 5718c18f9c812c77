"""The API's fixed limits (docs/api.rst, "Limits").

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
#: Deepest nesting of arrays and objects a JSON body may have. Checked by a
#: linear scan before parsing, so a body of 100k ``[`` costs one pass, not a
#: recursion per level.
MAX_JSON_DEPTH = 64
#: Most digits of an integer in a JSON body: a long digit string is refused
#: before it is converted (Python's own guard sits at 4300).
MAX_JSON_INT_DIGITS = 1000
#: Longest ``partition_key``.
MAX_PARTITION_KEY = 1000
#: Highest ``priority`` (0 is the default and the lowest).
MAX_PRIORITY = 9
#: Longest ``dedup_id``.
MAX_DEDUP_ID = 128

# -- work queues (docs/api.rst, "Work queues") -----------------------------------
#: Most messages one ``reserve`` leases.
MAX_RESERVE = 100
#: Most receipts in one ``ack`` / ``release`` / ``extend``.
MAX_RECEIPTS = 100
#: Longest long poll of a ``reserve``, seconds.
MAX_WAIT = 20
#: Longest lease (``visibility_timeout``), seconds; the shortest is 1.
MAX_VISIBILITY_TIMEOUT = 43200
#: Most attributes of one message, longest attribute name and value.
MAX_ATTRIBUTES = 10
MAX_ATTRIBUTE_NAME = 128
MAX_ATTRIBUTE_VALUE = 1024
