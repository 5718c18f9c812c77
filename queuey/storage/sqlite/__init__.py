"""The embedded storage backend (``queuey.storage.backend = queuey.storage.sqlite``):
one SQLite file, WAL mode, durable commits.

Ids are minted inside the write transaction, so commit order is id order and
readers need no read delay (:mod:`.group_commit` says why; a due delayed
message, minted ahead, is settled by a fence instead, see
:class:`SQLiteStorage`). Reads use one connection per thread (WAL lets them
run beside the writer); writes go through a single connection under a lock
(:mod:`.database`). The tables are created or
migrated on open (:mod:`.schema`); ``queuey schema upgrade`` / ``show`` do it
on purpose (:mod:`.config`). Work queues (subscriptions, leases) live in
:mod:`queuey.storage.sqlite.workqueue` and :mod:`.stats`. Expired rows are deleted by a background
thread (:mod:`.sweeper`), never by a request.
"""

from queuey.storage.sqlite.backend import SQLiteStorage
from queuey.storage.sqlite.config import load_from_config, schema_version, upgrade_schema

__all__ = ["SQLiteStorage", "load_from_config", "schema_version", "upgrade_schema"]
