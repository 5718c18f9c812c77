"""The embedded storage backend (``queuey.storage.backend = queuey.storage.sqlite``):
one SQLite file, WAL mode, durable commits.

Ids are minted inside the write transaction, so commit order is id order and
readers need no read delay (:mod:`.group_commit` says why). Reads use one
connection per thread (WAL lets them run beside the writer); writes go through
a single connection under a lock (:mod:`.database`). The tables are created on
open (:mod:`.schema`), so this backend has no ``upgrade_schema`` step. Expired
rows are deleted by a background thread (:mod:`.sweeper`), never by a request.
"""

from queuey.storage.sqlite.backend import SQLiteStorage, load_from_config

__all__ = ["SQLiteStorage", "load_from_config"]
