"""The worker: consume the partitions a consumer group gives this member.

``queuey-worker -c worker.ini`` (or ``Worker(WorkerConfig.from_ini(path)).run()``)
joins the group, and for every partition it owns reads batches in order
starting after the partition's checkpoint, calls the job on each message (or
on each batch), and commits the checkpoint once the batch's work finished.
Processing is at-least-once: a crash re-delivers at most the batch that was in
flight on each partition.

* :mod:`~queuey.client.worker.config`: the settings (ini file and environment);
* :mod:`~queuey.client.worker.loop`: the :class:`Worker` and its batches;
* :mod:`~queuey.client.worker.reserve`: :class:`ReserveWorker`, the competing-consumers
  mode (``mode = reserve``: work-queue subscriptions, no ZooKeeper), with its
  lease keeper (:mod:`~queuey.client.worker.keeper`);
* :mod:`~queuey.client.worker.failures`: failure queues for messages that keep failing;
* :mod:`~queuey.client.worker.cli`: the ``queuey-worker`` command and its signals.
"""

from queuey.client.worker.cli import main
from queuey.client.worker.config import WorkerConfig, load_callable
from queuey.client.worker.failures import FailureQueues
from queuey.client.worker.loop import Worker, WorkerStats
from queuey.client.worker.reserve import ReserveStats, ReserveWorker

__all__ = [
    "FailureQueues",
    "ReserveStats",
    "ReserveWorker",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
    "load_callable",
    "main",
]
