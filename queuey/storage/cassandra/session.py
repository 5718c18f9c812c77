"""Driver plumbing: how Queuey configures the Cassandra driver and keeps its
exceptions inside the backend.

A queue's consistency (weak, strong, very_strong) maps to an execution profile
of the same name; queue rows and checkpoints use the ``meta`` profile (quorum,
with serial consistency for lightweight transactions). Every driver exception
raised under :func:`unavailable` or a :func:`boundary` method becomes
:class:`~queuey.errors.StorageUnavailable`.
"""

from __future__ import annotations

import functools
import logging
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from cassandra import ConsistencyLevel, DriverException
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import (
    EXEC_PROFILE_DEFAULT,
    Cluster,
    ExecutionProfile,
    NoHostAvailable,
    QueryExhausted,
    Session,
)
from cassandra.connection import ConnectionException
from cassandra.io.libevreactor import LibevConnection
from cassandra.policies import (
    DCAwareRoundRobinPolicy,
    ExponentialReconnectionPolicy,
    TokenAwarePolicy,
)
from cassandra.pool import NoConnectionsAvailable
from cassandra.protocol import ErrorMessage
from cassandra.query import tuple_factory

from queuey.errors import StorageUnavailable
from queuey.model import QueueMeta
from queuey.storage.cassandra.settings import CassandraSettings

log = logging.getLogger(__name__)

# Driver errors: the driver raises several unrelated hierarchies.
DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    DriverException,
    NoHostAvailable,
    ConnectionException,
    NoConnectionsAvailable,
    ErrorMessage,
    QueryExhausted,
    OSError,
)

# Execution profile names.
P_WEAK, P_STRONG, P_VERY_STRONG = "weak", "strong", "very_strong"
P_META = "meta"
#: Work-queue state and dedup claims: lightweight transactions within the
#: local data centre (LOCAL_SERIAL), reads and commits at LOCAL_QUORUM.
P_WORK = "work"
#: Queue consistency -> Cassandra consistency level.
CONSISTENCY_LEVELS: dict[str, int] = {
    P_WEAK: ConsistencyLevel.ONE,
    P_STRONG: ConsistencyLevel.LOCAL_QUORUM,
    P_VERY_STRONG: ConsistencyLevel.EACH_QUORUM,
}


#: Longest pause between the driver's attempts to reconnect to a node that is
#: down. The driver's default grows to ten minutes, so after a long outage a
#: node that is back could wait that long before the service used it again.
#: Attempts never stop (``max_attempts=None``): a capped delay with the
#: default 64 attempts would give a node up after about five minutes.
RECONNECT_MAX_DELAY = 5.0


def build_cluster(config: CassandraSettings) -> Cluster:
    """A driver ``Cluster`` configured the way Queuey uses Cassandra (not connected)."""

    def profile(level: int, serial: int | None = None) -> ExecutionProfile:
        return ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(
                DCAwareRoundRobinPolicy(local_dc=config.local_dc)
            ),
            consistency_level=level,
            serial_consistency_level=serial,
            request_timeout=config.request_timeout,
            row_factory=tuple_factory,
        )

    profiles = {
        EXEC_PROFILE_DEFAULT: profile(ConsistencyLevel.LOCAL_QUORUM),
        P_META: profile(ConsistencyLevel.LOCAL_QUORUM, ConsistencyLevel.SERIAL),
        P_WORK: profile(ConsistencyLevel.LOCAL_QUORUM, ConsistencyLevel.LOCAL_SERIAL),
    }
    for name, level in CONSISTENCY_LEVELS.items():
        profiles[name] = profile(level)
    auth = None
    if config.username is not None:
        auth = PlainTextAuthProvider(username=config.username, password=config.password)
    return Cluster(
        contact_points=list(config.contact_points),
        port=config.port,
        protocol_version=config.protocol_version,
        execution_profiles=profiles,
        connection_class=LibevConnection,
        auth_provider=auth,
        connect_timeout=config.connect_timeout,
        control_connection_timeout=config.connect_timeout,
        compression=False,
        reconnection_policy=ExponentialReconnectionPolicy(
            0.5, RECONNECT_MAX_DELAY, max_attempts=None
        ),
        # The reactor writes large requests in 4 KiB chunks: without NODELAY,
        # Nagle plus delayed ACKs stall every batch for ~40 ms.
        sockopts=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
    )


@contextmanager
def unavailable(what: str) -> Iterator[None]:
    """Turn any driver exception raised inside into :class:`StorageUnavailable`."""
    try:
        yield
    except DRIVER_ERRORS as exc:
        log.warning("cassandra: %s failed: %s: %s", what, type(exc).__name__, exc)
        if "Batch too large" in str(exc):
            raise StorageUnavailable(
                f"cassandra: {what}: a batch over several partitions exceeds "
                "batch_size_fail_threshold in cassandra.yaml"
            ) from exc
        raise StorageUnavailable(f"cassandra: {what} failed ({type(exc).__name__})") from exc


F = TypeVar("F", bound=Callable[..., Any])


def boundary(what: str) -> Callable[[F], F]:
    """Decorator form of :func:`unavailable` for the public methods."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with unavailable(what):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def remaining(deadline: float) -> float:
    """Seconds left before ``deadline`` (monotonic); refuses to start a request after it."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise StorageUnavailable("cassandra: write deadline passed before the write was sent")
    return left


def consistency_profile(queue: QueueMeta) -> str:
    """The execution profile carrying the queue's consistency level."""
    return queue.consistency if queue.consistency in CONSISTENCY_LEVELS else P_STRONG


#: Most requests in flight for one call.
CONCURRENCY = 128


def execute_all(
    session: Session,
    stmts: Sequence[Any],
    profile: str,
    request_timeout: float,
    deadline: float | None = None,
) -> list[Any]:
    """Run statements concurrently (bounded); results in order; first error raises.

    Each request gets ``request_timeout``, or what is left before ``deadline``.
    """
    results: list[Any] = []
    for start in range(0, len(stmts), CONCURRENCY):
        timeout = request_timeout if deadline is None else remaining(deadline)
        futures = [
            session.execute_async(s, execution_profile=profile, timeout=timeout)
            for s in stmts[start : start + CONCURRENCY]
        ]
        results.extend(f.result() for f in futures)
    return results
