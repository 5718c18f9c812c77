"""Command line for the service harness (used by the Makefile and by hand).

python -m harness cassandra start|stop|status [--nodes N] [--port P] [--base-dir DIR]
    [--commitlog periodic[:MS]|group[:MS]|batch]
python -m harness zookeeper start|stop|status [--port P] [--base-dir DIR]
python -m harness stop-all
python -m harness classpath cassandra|zookeeper
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from harness import cassandra, process, zookeeper
from harness.process import HarnessError

log = logging.getLogger("harness")


def _mib(size: int | None) -> str:
    return f"{size / 2**20:.0f} MiB" if size else "-"


def _cassandra(args: argparse.Namespace) -> int:
    if args.action == "start":
        started = time.monotonic()
        cluster = cassandra.ensure_running(
            args.nodes,
            args.port,
            storage_port=args.storage_port,
            jmx_port=args.jmx_port,
            base_dir=args.base_dir,
            heap=args.heap,
            timeout=args.timeout,
            commitlog=args.commitlog,
        )
        version = cassandra.cql_answers(cluster.nodes[0])
        print(
            f"cassandra {version} ready on {','.join(cluster.contact_points)} "
            f"port {cluster.port} ({time.monotonic() - started:.1f}s)"
        )
        return 0
    if args.action == "stop":
        count = cassandra.stop(args.nodes, base_dir=args.base_dir)
        print(f"stopped {count} cassandra node(s)")
        return 0
    statuses = cassandra.status(args.nodes, args.port, base_dir=args.base_dir)
    for st in statuses:
        state = "up" if st.cql_ok else ("starting/unresponsive" if st.pid else "down")
        print(
            f"node{st.node.index} {st.node.address}:{st.node.native_port} {state} "
            f"pid={st.pid or '-'} rss={_mib(st.rss_bytes)} "
            f"commitlog={st.commitlog or '-'} dir={st.node.directory}"
        )
    return 0 if all(st.cql_ok for st in statuses) else 3


def _zookeeper(args: argparse.Namespace) -> int:
    if args.action == "start":
        started = time.monotonic()
        server = zookeeper.ensure_running(
            args.port, base_dir=args.base_dir, heap=args.heap, timeout=args.timeout
        )
        print(f"zookeeper ready on {server.hosts} ({time.monotonic() - started:.1f}s)")
        return 0
    if args.action == "stop":
        stopped = zookeeper.stop(base_dir=args.base_dir)
        print("stopped zookeeper" if stopped else "zookeeper was not running")
        return 0
    st = zookeeper.status(args.port, base_dir=args.base_dir)
    state = "up" if st.healthy else ("starting/unresponsive" if st.pid else "down")
    print(
        f"zookeeper {st.server.hosts} {state} pid={st.pid or '-'} "
        f"version={st.version or '-'} dir={st.server.directory}"
    )
    return 0 if st.healthy else 3


def _stop_all(_: argparse.Namespace) -> int:
    nodes = cassandra.stop(1) + cassandra.stop(3)
    zk = zookeeper.stop()
    print(f"stopped {nodes} cassandra node(s); zookeeper {'stopped' if zk else 'not running'}")
    return 0


def _classpath(args: argparse.Namespace) -> int:
    pom = cassandra.POM if args.service == "cassandra" else zookeeper.POM
    started = time.monotonic()
    jars = process.resolve_classpath(pom, name=args.service)
    print(f"{len(jars)} jars for {args.service} ({time.monotonic() - started:.1f}s)")
    if args.verbose:
        print("\n".join(str(jar) for jar in jars))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness", description="Run real Cassandra / ZooKeeper on loopback."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    sub = parser.add_subparsers(dest="command", required=True)

    cas = sub.add_parser("cassandra", help="a Cassandra node or N-node cluster")
    cas.add_argument("action", choices=("start", "stop", "status"))
    cas.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="1 = single node (var/cassandra); >1 = cluster (var/cassandra-cluster)",
    )
    cas.add_argument("--port", type=int, help="CQL port (default 19042, cluster 19142)")
    cas.add_argument("--storage-port", type=int, help="gossip port (default 17000, cluster 17100)")
    cas.add_argument(
        "--jmx-port", type=int, help="node1's JMX port, +1 per node (default 17199, cluster 17200)"
    )
    cas.add_argument("--base-dir", type=Path, help="node directories (default under var/)")
    cas.add_argument("--heap", help="JVM heap per node, e.g. 512m")
    cas.add_argument(
        "--commitlog",
        help="commit-log sync: periodic[:MS], group[:MS] or batch (default: batch, "
        "durable, on a single node and a cluster; $QUEUEY_CASSANDRA_COMMITLOG)",
    )
    cas.add_argument(
        "--timeout",
        type=float,
        default=cassandra.DEFAULT_TIMEOUT,
        help="seconds to wait for each node",
    )
    cas.set_defaults(func=_cassandra)

    zk = sub.add_parser("zookeeper", help="a standalone ZooKeeper")
    zk.add_argument("action", choices=("start", "stop", "status"))
    zk.add_argument("--port", type=int, help="client port (default 12181)")
    zk.add_argument("--base-dir", type=Path, help="server directory (default var/zookeeper)")
    zk.add_argument("--heap", help="JVM max heap, e.g. 256m")
    zk.add_argument("--timeout", type=float, default=zookeeper.DEFAULT_TIMEOUT)
    zk.set_defaults(func=_zookeeper)

    sub.add_parser("stop-all", help="stop every service started under var/").set_defaults(
        func=_stop_all
    )

    cp = sub.add_parser("classpath", help="resolve (download) a service's jars with Maven")
    cp.add_argument("service", choices=("cassandra", "zookeeper"))
    cp.set_defaults(func=_classpath)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        # The driver logs every refused connection while a node is starting.
        logging.getLogger("cassandra").setLevel(logging.ERROR)
    try:
        return args.func(args)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
