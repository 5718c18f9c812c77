"""``queuey-worker -c worker.ini``: run a worker until SIGTERM or SIGINT.

SIGTERM or SIGINT finishes the current batch, commits, releases every
partition, leaves the group and exits 0; a second one exits at once (1). In
reserve mode (``mode = reserve``) it finishes the job in hand, acks what
succeeded, releases the messages not started and exits 0.
A bad configuration exits 2, naming the key; a crash of the worker exits 1.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence

from queuey.client.worker.config import WorkerConfig
from queuey.client.worker.loop import Worker
from queuey.client.worker.reserve import ReserveWorker
from queuey.errors import ConfigurationError

log = logging.getLogger(__name__)

DESCRIPTION = (
    "The worker: consume the partitions a consumer group gives this member "
    "(mode = partitions) or the messages a work-queue subscription leases it (mode = reserve)."
)


def main(argv: Sequence[str] | None = None) -> int:
    """``queuey-worker -c worker.ini``: run a worker until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="queuey-worker", description=DESCRIPTION)
    parser.add_argument("-c", "--config", required=True, help="the worker's ini file")
    parser.add_argument("--log-level", default=os.environ.get("QUEUEY_LOG_LEVEL", "INFO"))
    parser.add_argument("--member-id", help="name this member (default host-pid-random)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s",
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    try:
        config = WorkerConfig.from_ini(args.config)
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        worker: Worker | ReserveWorker
        if config.mode == "reserve":
            worker = ReserveWorker(config, name=args.member_id)
        else:
            worker = Worker(config, member_id=args.member_id)
    except ConfigurationError as exc:
        print(f"queuey-worker: bad configuration: {exc}", file=sys.stderr)
        return 2

    def on_signal(signum: int, frame: object) -> None:
        if worker.stopping:
            log.warning("second %s: exiting now", signal.Signals(signum).name)
            os._exit(1)
        if config.mode == "reserve":
            plan = "finishing the job in hand, releasing the messages not started"
        else:
            plan = "finishing the current batch, then leaving"
        log.info("%s: %s", signal.Signals(signum).name, plan)
        worker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        worker.run()
    except Exception:
        log.exception("queuey-worker failed")
        return 1
    return 0
