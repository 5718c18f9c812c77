"""Autoscaling and alerting as shipped: a real Prometheus (Debian's package,
``make prometheus``) scrapes the server as shipped (granian, 2 workers) on
each backend, with the alert rules of etc/prometheus loaded; the query of
etc/keda/queuey-scaledobject.yaml's Prometheus trigger, asked of that
Prometheus, gives the consumers the subscription can use; the SQS trigger's
figures (GetQueueAttributes through the SQS endpoint) agree with the gauges;
and ``explain`` answers alike from every worker process."""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests
import yaml

from queuey import ids
from queuey.client import NotFound, QueueyClient
from tests.faults.conftest import shipped_node
from tests.sqs.conftest import make_client
from tests.support import KEY, free_port, server_settings, wait_until

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "etc" / "keda" / "queuey-scaledobject.yaml"
RULES = ROOT / "etc" / "prometheus" / "queuey-alerts.yml"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)])
def node(request, tmp_path, applications_file):
    settings = server_settings(request, applications_file, request.param, tmp_path / "q.sqlite3")
    settings.update({"queuey.stats.interval": "0.5", "queuey.stats.max_age": "0.5"})
    with shipped_node("autoscale", tmp_path, settings) as found:
        yield found


class Prometheus:
    """Prometheus scraping one target every second, with Queuey's alert rules."""

    def __init__(self, workdir: Path, target: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": "queuey", "static_configs": [{"targets": [target]}]}],
        }
        path = workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.log = (workdir / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={path}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def ready(self) -> bool:
        with contextlib.suppress(requests.RequestException):
            return requests.get(self.url + "/-/ready", timeout=2).status_code == 200
        return False

    def query(self, promql: str) -> list[dict]:
        answer = requests.get(self.url + "/api/v1/query", params={"query": promql}, timeout=10)
        assert answer.status_code == 200, answer.text
        return answer.json()["data"]["result"]

    def value(self, promql: str) -> float | None:
        found = self.query(promql)
        return float(found[0]["value"][1]) if found else None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture
def prometheus(node, tmp_path):
    found = Prometheus(tmp_path, f"127.0.0.1:{node.port}")
    try:
        wait_until(found.ready, 60, "Prometheus to be ready", interval=0.2)
        yield found
    finally:
        found.stop()


def triggers() -> dict[str, dict]:
    """The manifest's triggers by type."""
    found = {}
    for document in yaml.safe_load_all(MANIFEST.read_text(encoding="utf-8")):
        if document["kind"] == "ScaledObject":
            for trigger in document["spec"]["triggers"]:
                found[trigger["type"]] = trigger["metadata"]
    return found


def test_the_keda_query_gives_the_usable_consumers_and_the_sqs_trigger_agrees(
    node, prometheus, test_apps
):
    app = test_apps.app
    client = QueueyClient([node.url], app, KEY)
    client.create_queue("orders", partitions=2)
    client.post_batch("orders", [{"n": n} for n in range(30)])
    client.set_subscription_flow("orders", "workers", max_in_flight=8)
    leased = []
    wait_until(
        lambda: leased.extend(client.reserve("orders", subscription="workers", limit=2)) or leased,
        30,
        "the first reserve (past the read delay)",
    )
    # The manifest's query, for this test's application.
    query = triggers()["prometheus"]["query"].replace('application="shop"', f'application="{app}"')
    assert 'queue="orders", subscription="workers"' in query

    def usable() -> float | None:
        return prometheus.value(query)

    wait_until(lambda: usable() == 8, 60, "Prometheus to see 8 usable consumers")
    print(
        f"\nquery: {query}\n-> {usable()} (30 messages, {len(leased)} in flight, max_in_flight 8)"
    )

    # Without the cap, one per message to work on; KEDA divides by its threshold.
    client.set_subscription_flow("orders", "workers", max_in_flight=0)
    wait_until(lambda: usable() == 30, 60, "the cap's removal to show")
    threshold = float(triggers()["prometheus"]["threshold"])
    print(f"uncapped: 30 usable, threshold {threshold:g} -> {30 / threshold:.1f} replicas")

    # The SQS trigger reads the "default" subscription through GetQueueAttributes.
    sqs = make_client(node.url, app, "json")
    url = sqs.create_queue(QueueName="jobs")["QueueUrl"]
    for n in range(12):
        sqs.send_message(QueueUrl=url, MessageBody=f"job {n}")
    received = []
    wait_until(
        lambda: (
            received.extend(
                sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=3).get("Messages", [])
            )
            or len(received) >= 3
        ),
        30,
        "3 messages received",
    )
    keda = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    labels = f'application="{app}", queue="jobs", subscription="default"'

    def gauges() -> tuple[float | None, float | None]:
        return (
            prometheus.value(f"max(queuey_subscription_available{{{labels}}})"),
            prometheus.value(f"max(queuey_subscription_in_flight{{{labels}}})"),
        )

    expected = (
        float(keda["ApproximateNumberOfMessages"]),
        float(keda["ApproximateNumberOfMessagesNotVisible"]),
    )
    print(f"SQS attributes {keda}; gauges {gauges()}")
    assert expected == (12 - len(received), len(received))
    wait_until(lambda: gauges() == expected, 60, "the gauges to agree with the SQS attributes")


def test_every_alert_rule_evaluates_on_the_series_a_real_server_exposes(node, prometheus):
    exposed = requests.get(node.url + "/metrics", timeout=10).text
    names = set(re.findall(r"^# TYPE (\S+) (\w+)", exposed, re.MULTILINE))
    families = {name for name, _ in names} | {
        f"{name}_total" for name, kind in names if kind == "counter"
    }
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"][0]["rules"]
    for rule in rules:
        used = set(re.findall(r"\bqueuey_\w+", rule["expr"]))
        # The group gauges need ZooKeeper (tests/client cover them); the rest are always there.
        missing = {n for n in used - families if not n.startswith("queuey_group_")}
        assert not missing, f"{rule['alert']} names series /metrics does not have: {missing}"

    def evaluated() -> list[dict]:
        answer = requests.get(prometheus.url + "/api/v1/rules", timeout=10).json()
        return [r for g in answer["data"]["groups"] for r in g["rules"]]

    wait_until(
        lambda: all(r.get("lastEvaluation", "").startswith("20") for r in evaluated()),
        60,
        "every rule to be evaluated",
    )
    health = {r["name"]: (r["health"], r.get("lastError", "")) for r in evaluated()}
    print(f"\n{health}")
    assert health == {r["alert"]: ("ok", "") for r in rules}


def test_explain_answers_alike_from_every_worker_process(node, test_apps):
    """``explain`` on the server as shipped: the rate a subscription's reserves
    used up in one worker process holds the message back in the answer of any."""
    client = QueueyClient([node.url], test_apps.app, KEY)
    client.create_queue("paced", partitions=1)
    posted = client.post_batch("paced", [{"n": n} for n in range(3)])
    client.set_subscription_flow("paced", "slow", rate=0.05, burst=1)
    got: list = []
    wait_until(
        lambda: got.extend(client.reserve("paced", subscription="slow", limit=3)) or got,
        30,
        "the first reserve (past the read delay)",
    )
    assert len(got) == 1  # the burst of one
    leased, waiting = (
        got[0].message_id,
        next(p for p in posted if p.message_id != got[0].message_id),
    )
    # New connections land on either worker; every answer is the same.
    answers = [
        QueueyClient([node.url], test_apps.app, KEY).explain(
            "paced", waiting.message_id, subscription="slow"
        )
        for _ in range(6)
    ]
    print(f"\n{[(a.state, [r.reason for r in a.reasons]) for a in answers]}")
    assert {(a.state, a.deliverable, tuple(r.reason for r in a.reasons)) for a in answers} == {
        ("new", False, ("rate",))
    }
    own = client.explain("paced", leased, subscription="slow")
    assert (own.state, own.attempts, own.reasons[0].reason) == ("leased", 1, "leased")
    with pytest.raises(NotFound):
        unknown = ids.min_uuid(int(time.time() * 1e6)).hex  # within the ttl, never posted
        client.explain("paced", unknown, subscription="slow")
