"""Celery with kombu's own SQS transport, with Queuey as its broker.

The server runs as shipped (granian, two worker processes, in a process of its
own); the Celery workers are real ``celery worker`` processes
(:mod:`tests.sqs.celery_tasks`, solo pool) started with the settings of
docs/sqs.rst ("Celery"): ``task_acks_late``, a prefetch of one. Tasks are sent
from this process by a Celery producer of the same settings. Each task run
leaves a file (there is no result backend on SQS), so a test counts runs,
their times and the worker process that ran them, as a user would notice them.

One worker serves the tests of a backend; the killed worker's test starts its
own. Each test has a queue of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from celery import Celery

from tests import support
from tests.faults.conftest import REPO, ApiNode
from tests.sqs.celery_tasks import broker_config
from tests.sqs.conftest import BACKENDS, make_client
from tests.support import SQS_SECRET, server_settings, wait_until, write_applications

pytestmark = pytest.mark.slow

#: The visibility timeout of the shared worker's queues: longer than any of their
#: tasks takes, so a message is never received twice while its task runs.
VISIBILITY = 30
#: The killed worker's queue and the countdown's: short, so redelivery is quick.
SHORT_VISIBILITY = 4

QUEUES = {
    "bulk": "celery-bulk",
    "retry": "celery-retry",
    "eta": "celery-eta",
    "overrun": "celery-overrun",
    "kill": "celery-kill",
}
COUNTS = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
]


class Worker:
    """``celery worker`` in a process group of its own (solo pool: tasks run in
    that very process)."""

    def __init__(self, name: str, queues: list[str], env: dict[str, str], log_path: Path):
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "tests.sqs.celery_tasks",
                "worker",
                "--pool=solo",
                "--loglevel=INFO",
                "-n",
                f"{name}-{uuid.uuid4().hex[:8]}@%h",
                "-Q",
                ",".join(queues),
            ],
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL to the worker and anything it started: no shutdown of any kind."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # warm shutdown
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass
class Broker:
    """A Queuey node as a Celery broker, and what the workers' task runs left."""

    node: ApiNode
    backend: str
    access_key: str
    workdir: Path
    marks: Path

    @property
    def endpoint(self) -> str:
        return self.node.url.removeprefix("http://")

    def env(self, visibility: int) -> dict[str, str]:
        return {
            **os.environ,
            "QUEUEY_CELERY_ENDPOINT": self.endpoint,
            "QUEUEY_CELERY_ACCESS_KEY": self.access_key,
            "QUEUEY_CELERY_SECRET": SQS_SECRET,
            "QUEUEY_CELERY_VISIBILITY": str(visibility),
            "QUEUEY_CELERY_MARKS": str(self.marks),
        }

    def worker(self, name: str, queues: list[str], visibility: int) -> Worker:
        return Worker(name, queues, self.env(visibility), self.workdir / f"{name}.log")

    def producer(self, visibility: int) -> Celery:
        app = Celery(f"producer-{visibility}", set_as_current=False)
        app.conf.update(broker_config(self.endpoint, self.access_key, SQS_SECRET, visibility))
        return app

    def runs(self, kind: str, label: str) -> list[dict]:
        """The marks of ``kind`` a task of ``label`` left, oldest first."""
        found = [
            json.loads(path.read_text(encoding="utf-8"))
            for path in self.marks.glob(f"{kind}.{label}.*.json")
        ]
        return sorted(found, key=lambda run: run["time"])

    def client(self):
        return make_client(self.node.url, self.access_key, "json")


def queue_counts(client, queue: str) -> dict[str, int]:
    url = client.get_queue_url(QueueName=queue)["QueueUrl"]
    attributes = client.get_queue_attributes(QueueUrl=url, AttributeNames=COUNTS)["Attributes"]
    return {name: int(attributes[name]) for name in COUNTS}


def wait_empty(broker: Broker, queue: str, timeout: float = 20.0) -> None:
    """Wait until every message of ``queue`` is deleted: acknowledged, so none
    can be received again."""
    client = broker.client()
    try:
        wait_until(
            lambda: not any(queue_counts(client, queue).values()),
            timeout,
            lambda: f"{queue} to be empty: {queue_counts(client, queue)}",
            interval=0.2,
        )
    finally:
        client.close()


@pytest.fixture(scope="module", params=BACKENDS)
def broker(request, tmp_path_factory):
    workdir = tmp_path_factory.mktemp(f"celery-{request.param}")
    suffix = uuid.uuid4().hex[:10]
    apps = support.TestApps(app=f"testapp-{suffix}", remote_app=f"remoteapp-{suffix}")
    applications = write_applications(workdir / "applications.ini", apps)
    settings = server_settings(request, applications, request.param, workdir / "celery.sqlite3")
    node = ApiNode("celery", workdir, settings, server="granian", workers=2)
    marks = workdir / "marks"
    marks.mkdir()
    try:
        node.wait_ready()
        yield Broker(node, request.param, apps.app, workdir, marks)
    finally:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            node.stop()


@pytest.fixture(scope="module")
def worker(broker):
    """One worker on the queues of the tests that share it. The overrun queue is
    created beforehand with a short visibility timeout: a queue's own timeout is
    what counts, kombu's ``visibility_timeout`` only sets the queues it creates."""
    client = broker.client()
    client.create_queue(
        QueueName=QUEUES["overrun"], Attributes={"VisibilityTimeout": str(SHORT_VISIBILITY)}
    )
    client.close()
    shared = [QUEUES[name] for name in ("bulk", "retry", "eta", "overrun")]
    started = broker.worker("shared", shared, VISIBILITY)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def producer(broker):
    app = broker.producer(VISIBILITY)
    yield app
    app.close()


def test_tasks_each_run_exactly_once(broker, worker, producer):
    """50 tasks sent, some with a Celery priority (accepted, not honoured: kombu's
    SQS transport has none), each runs once and is deleted from the queue."""
    labels = [f"bulk{i}" for i in range(50)]
    for i, label in enumerate(labels):
        producer.send_task(
            "queuey_test.record", args=[label], queue=QUEUES["bulk"], priority=9 * (i % 2)
        )

    def ran() -> Counter:
        return Counter(run["label"] for label in labels for run in broker.runs("record", label))

    wait_until(
        lambda: len(ran()) == len(labels),
        60,
        lambda: f"every task to run: {len(ran())} of {len(labels)}\n{worker.log()[-3000:]}",
        interval=0.1,
    )
    wait_empty(broker, QUEUES["bulk"])  # every task acknowledged: none can run again
    runs = ran()
    duplicates = sum(count - 1 for count in runs.values())
    print(f"{broker.backend}: sent {len(labels)}, ran {len(runs)}, duplicates {duplicates}")
    assert (len(runs), duplicates) == (len(labels), 0)
    client = broker.client()
    names = {url.rsplit("/", 1)[1] for url in client.list_queues().get("QueueUrls", [])}
    client.close()
    # No queue of Celery's own (remote control, events): only the workers' queues.
    assert names <= set(QUEUES.values()), names


def test_retried_task_runs_again_until_it_succeeds_or_gives_up(broker, worker, producer):
    """``self.retry(countdown=1)`` with ``max_retries=2``: three attempts a second
    apart at least; then success, or the task fails for good and is not run again."""
    succeeds, gives_up = f"ok{uuid.uuid4().hex[:6]}", f"ko{uuid.uuid4().hex[:6]}"
    ok = producer.send_task("queuey_test.flaky", args=[succeeds, 3], queue=QUEUES["retry"])
    ko = producer.send_task("queuey_test.flaky", args=[gives_up, 99], queue=QUEUES["retry"])
    success = f"queuey_test.flaky[{ok.id}] succeeded"
    failure = f"queuey_test.flaky[{ko.id}] raised unexpected: RuntimeError('attempt 3 of "
    wait_until(
        lambda: success in worker.log() and failure in worker.log(),
        30,
        lambda: f"three attempts of each task:\n{worker.log()[-3000:]}",
        interval=0.1,
    )
    wait_empty(broker, QUEUES["retry"])
    for label in (succeeds, gives_up):
        runs = broker.runs("flaky", label)
        gaps = [round(b["time"] - a["time"], 2) for a, b in zip(runs, runs[1:], strict=False)]
        print(f"{broker.backend}: {label}: attempts {[r['attempt'] for r in runs]}, gaps {gaps}")
        assert [run["attempt"] for run in runs] == [1, 2, 3], runs
        assert min(gaps) >= 0.9, gaps


def test_countdown_and_delay_seconds_hold_a_task_back(broker, worker, producer):
    """``countdown=3`` (Celery's ETA: the worker holds the message until then) and
    ``DelaySeconds=3`` (kombu passes it to SendMessage: Queuey hides the message)
    each run the task once, three seconds later; a task without either runs at once."""
    label = uuid.uuid4().hex[:6]
    sent = time.time()
    producer.send_task("queuey_test.record", args=[f"cd{label}"], queue=QUEUES["eta"], countdown=3)
    producer.send_task(
        "queuey_test.record", args=[f"ds{label}"], queue=QUEUES["eta"], DelaySeconds=3
    )
    producer.send_task("queuey_test.record", args=[f"now{label}"], queue=QUEUES["eta"])
    names = [f"cd{label}", f"ds{label}", f"now{label}"]
    wait_until(
        lambda: all(broker.runs("record", name) for name in names),
        30,
        lambda: f"the three tasks to run:\n{worker.log()[-3000:]}",
        interval=0.05,
    )
    wait_empty(broker, QUEUES["eta"])
    after = {
        name[: -len(label)]: [r["time"] - sent for r in broker.runs("record", name)]
        for name in names
    }
    print(f"{broker.backend}: seconds from send to run: {after}")
    assert [len(times) for times in after.values()] == [1, 1, 1], after
    assert 2.9 <= after["cd"][0] <= 8, after
    assert 2.9 <= after["ds"][0] <= 8, after
    assert after["now"][0] <= 5, after


def test_countdown_longer_than_visibility_timeout_runs_more_than_once(broker, worker, producer):
    """What docs/sqs.rst warns of: a countdown the worker holds past the queue's
    visibility timeout lets the message be received again, and the task runs once
    per receive."""
    label = f"over{uuid.uuid4().hex[:6]}"
    # Received at once, again after 4 s, once more after 8 s: a 7 s countdown runs twice.
    countdown = 2 * SHORT_VISIBILITY - 1
    sent = time.time()
    producer.send_task(
        "queuey_test.record", args=[label], queue=QUEUES["overrun"], countdown=countdown
    )
    wait_until(
        lambda: broker.runs("record", label),
        countdown + 30,
        lambda: f"the task to run:\n{worker.log()[-3000:]}",
        interval=0.1,
    )
    wait_empty(broker, QUEUES["overrun"])
    times = [round(run["time"] - sent, 2) for run in broker.runs("record", label)]
    print(
        f"{broker.backend}: countdown {countdown}s, visibility {SHORT_VISIBILITY}s: ran at {times}"
    )
    assert len(times) >= 2, times
    assert min(times) >= countdown - 0.1, times


def test_worker_killed_mid_task_task_runs_again_after_visibility_timeout(broker):
    """``task_acks_late``: a worker killed (SIGKILL) while its task runs never
    acknowledged it, so another worker receives the message once the queue's
    visibility timeout has passed since the first receive, and runs it again."""
    label = f"kill{uuid.uuid4().hex[:6]}"
    hold = broker.marks / f"hold.{label}"
    hold.touch()
    producer = broker.producer(SHORT_VISIBILITY)
    victim = broker.worker("victim", [QUEUES["kill"]], SHORT_VISIBILITY)
    rescuer = None
    try:
        producer.send_task("queuey_test.block", args=[label], queue=QUEUES["kill"])
        first = wait_until(
            lambda: broker.runs("start", label),
            30,
            lambda: f"the task to start:\n{victim.log()[-3000:]}",
            interval=0.05,
        )[0]
        assert first["pid"] == victim.pid
        victim.kill()
        killed = time.time()
        hold.unlink()
        rescuer = broker.worker("rescuer", [QUEUES["kill"]], SHORT_VISIBILITY)
        wait_until(
            lambda: broker.runs("done", label),
            SHORT_VISIBILITY + 30,
            lambda: f"the task to run again:\n{rescuer.log()[-3000:]}",
            interval=0.05,
        )
        wait_empty(broker, QUEUES["kill"])
        starts = broker.runs("start", label)
        done = broker.runs("done", label)
        rerun = starts[-1]["time"]
        print(
            f"{broker.backend}: visibility {SHORT_VISIBILITY}s; started again "
            f"{rerun - first['time']:.2f}s after the first start, "
            f"{rerun - killed:.2f}s after the kill"
        )
        assert [run["pid"] for run in starts] == [victim.pid, rescuer.pid]
        assert [run["pid"] for run in done] == [rescuer.pid]
        # Not before the visibility timeout (counted from the receive, just before
        # the first start), and soon after it.
        assert SHORT_VISIBILITY - 1 <= rerun - first["time"] <= SHORT_VISIBILITY + 15
        client = broker.client()
        url = client.get_queue_url(QueueName=QUEUES["kill"])["QueueUrl"]
        attributes = client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
        client.close()
        # kombu created the queue with its visibility_timeout transport option.
        assert attributes["Attributes"]["VisibilityTimeout"] == str(SHORT_VISIBILITY)
    finally:
        producer.close()
        victim.stop()
        if rescuer is not None:
            rescuer.stop()
