"""The Celery application of tests/sqs/test_celery.py, as a worker imports it
(``celery -A tests.sqs.celery_tasks worker``).

Its broker is Queuey's SQS endpoint through kombu's own SQS transport, set up
from the environment the test gives the worker: ``QUEUEY_CELERY_ENDPOINT``
(``host:port``), ``QUEUEY_CELERY_ACCESS_KEY`` / ``QUEUEY_CELERY_SECRET`` (the
application's name and SQS secret), ``QUEUEY_CELERY_VISIBILITY`` (seconds) and
``QUEUEY_CELERY_MARKS``, a directory where each task run leaves a file, so the
test counts runs without a result backend (SQS cannot be one).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

from celery import Celery
from kombu.utils.url import safequote


def broker_config(endpoint: str, access_key: str, secret: str, visibility: int) -> dict:
    """The settings docs/sqs.rst ("Celery") gives, for a Queuey at ``endpoint``."""
    return {
        "broker_url": f"sqs://{safequote(access_key)}:{safequote(secret)}@{endpoint}",
        "broker_transport_options": {
            "is_secure": False,  # http://: kombu builds the endpoint URL from the broker URL
            "region": "us-east-1",  # the region the requests are signed for
            "visibility_timeout": visibility,  # set on the queues kombu creates
            "wait_time_seconds": 20,  # ReceiveMessage long polls, woken by a send
            "polling_interval": 0,  # no pause after an empty long poll
        },
        "task_acks_late": True,
        "worker_prefetch_multiplier": 1,
        "task_default_queue": "celery-default",
        "worker_hijack_root_logger": False,
    }


def _from_environment() -> dict:
    endpoint = os.environ.get("QUEUEY_CELERY_ENDPOINT")
    if not endpoint:  # imported by the test process, which builds its own producer app
        return {}
    return broker_config(
        endpoint,
        os.environ["QUEUEY_CELERY_ACCESS_KEY"],
        os.environ["QUEUEY_CELERY_SECRET"],
        int(os.environ["QUEUEY_CELERY_VISIBILITY"]),
    )


app = Celery("queuey-celery-test")
app.conf.update(_from_environment())


def _mark(kind: str, label: str, **extra) -> None:
    """One file per run: written whole, then renamed, so a reader never sees half of it."""
    marks = Path(os.environ["QUEUEY_CELERY_MARKS"])
    record = {"kind": kind, "label": label, "pid": os.getpid(), "time": time.time(), **extra}
    name = f"{kind}.{label}.{uuid.uuid4().hex}"
    partial = marks / f".{name}.tmp"
    partial.write_text(json.dumps(record), encoding="utf-8")
    partial.rename(marks / f"{name}.json")


@app.task(name="queuey_test.record")
def record(label: str) -> None:
    """Leaves a mark: one per run."""
    _mark("record", label)


@app.task(name="queuey_test.flaky", bind=True, max_retries=2)
def flaky(self, label: str, succeed_on: int) -> None:
    """Fails until its ``succeed_on``-th attempt, retried a second later each time."""
    attempt = self.request.retries + 1
    _mark("flaky", label, attempt=attempt)
    if attempt < succeed_on:
        raise self.retry(countdown=1, exc=RuntimeError(f"attempt {attempt} of {label} fails"))


@app.task(name="queuey_test.block")
def block(label: str) -> None:
    """Marks its start, holds the worker while the test's ``hold.<label>`` file
    exists (two minutes at most), then marks its end."""
    _mark("start", label)
    hold = Path(os.environ["QUEUEY_CELERY_MARKS"]) / f"hold.{label}"
    deadline = time.monotonic() + 120
    while hold.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    _mark("done", label)
