"""An example job for ``queuey-worker``: process crash reports (the Socorro use case).

Each message is a crash report ``{"crash_id": "...", "product": "...", ...}``.
Processing one appends a line to a JSON-lines file, which stands in for the
real work (symbolication, storage). The file is opened once per batch by
:func:`batch_context`, and every line is flushed at once, so a worker killed
with ``kill -9`` never loses a line it wrote.

A report without a ``crash_id`` cannot be processed: :func:`process` raises,
the worker retries it ``max_attempts`` times, then parks it in the failure
queue and calls :func:`on_failure`. In reserve mode (``reserve_worker.ini``)
the worker releases it with a backoff instead, and the server dead-letters it
after the queue's ``max_attempts``.

Settings come from the environment:

``CRASH_WORKER_OUTPUT``  the JSON-lines file (default ``processed-crashes.jsonl``)
``CRASH_WORKER_DELAY``   seconds to sleep per report, to simulate work (default 0)

Used in ``docs/consumers.rst`` and ``etc/worker.ini``, and by the tests and
the benchmark that run ``queuey-worker`` processes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from queuey.client import ReceivedMessage

log = logging.getLogger("crash_worker")

_local = threading.local()


class MalformedCrash(ValueError):
    """A report the processor cannot handle, however often it tries."""


def _output_path() -> Path:
    return Path(os.environ.get("CRASH_WORKER_OUTPUT", "processed-crashes.jsonl"))


@contextlib.contextmanager
def batch_context() -> Iterator[None]:
    """Wrapped around each batch: open the output once, sync it when the batch is done."""
    with _output_path().open("a", buffering=1, encoding="utf-8") as out:
        _local.out = out
        try:
            yield
        finally:
            _local.out = None
            out.flush()
            os.fsync(out.fileno())


def process(message: ReceivedMessage) -> None:
    """Process one crash report (the job: ``examples.crash_worker:process``)."""
    crash_id = message.body.get("crash_id")
    if not crash_id:
        raise MalformedCrash(f"message {message.message_id} has no crash_id")
    delay = float(os.environ.get("CRASH_WORKER_DELAY", "0"))
    if delay:
        time.sleep(delay)
    line = json.dumps(
        {
            "crash_id": crash_id,
            "message_id": message.message_id,
            "partition": message.partition,
            "pid": os.getpid(),
            "processed_at": time.time(),
        }
    )
    out: IO[str] | None = getattr(_local, "out", None)
    if out is None:  # run without batch_context
        with _output_path().open("a", buffering=1, encoding="utf-8") as single:
            single.write(line + "\n")
    else:
        out.write(line + "\n")


def noop(message: ReceivedMessage) -> None:
    """A job that does nothing (the benchmark measures the worker itself)."""


def on_failure(message: ReceivedMessage, exc: BaseException) -> None:
    """Called after a report was moved to the failure queue."""
    log.error("crash report %s parked: %s", message.message_id, exc)
