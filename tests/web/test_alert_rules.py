"""The alert rules operators copy (etc/prometheus/queuey-alerts.yml), run by
Prometheus's own rule engine (``promtool test rules``, Debian's prometheus
package, installed by ``make prometheus``) over series named as ``/metrics``
names them: each alert fires when it should and stays quiet on a log queue
whose old messages are merely kept, and on a work queue whose backlog is
handled."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[2] / "etc" / "prometheus" / "queuey-alerts.yml"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

pytestmark = pytest.mark.unit

WORK = 'application="shop",queue="orders",subscription="workers"'
CALM = 'application="shop",queue="calm",subscription="workers"'
# A log queue: its messages stay stored (and age) whether or not anyone read them.
LOG = 'application="shop",queue="audit-log"'


def series(name: str, labels: str, values: str, instance: str = "node-a") -> dict:
    return {"series": f'{name}{{{labels},instance="{instance}"}}', "values": values}


def alert(name: str, severity: str, summary: str, **labels: str) -> dict:
    return {
        "exp_labels": {"severity": severity, **labels},
        "exp_annotations": {"summary": summary},
    }


INPUT = [
    # orders/workers: the oldest available message ages a minute a minute, on two
    # nodes (the same figure); nothing in flight; 3 dead letters at minute 12.
    series("queuey_subscription_oldest_available_age_seconds", WORK, "0+60x30"),
    series("queuey_subscription_oldest_available_age_seconds", WORK, "0+60x30", "node-b"),
    series("queuey_subscription_available", WORK, "5x30"),
    series("queuey_subscription_in_flight", WORK, "0x30"),
    series("queuey_subscription_usable_consumers", WORK, "5x30"),
    series("queuey_subscription_dead_lettered", WORK, "0x12 3x18"),
    # calm/workers: a backlog handled as it comes (young, in flight).
    series("queuey_subscription_oldest_available_age_seconds", CALM, "20x30"),
    series("queuey_subscription_available", CALM, "2x30"),
    series("queuey_subscription_in_flight", CALM, "4x30"),
    series("queuey_subscription_usable_consumers", CALM, "6x30"),
    series("queuey_subscription_dead_lettered", CALM, "1x30"),  # an old one: no new
    # A log queue whose messages are days old: kept, not waiting.
    series("queuey_queue_oldest_age_seconds", LOG, "86400+60x30"),
    series("queuey_queue_measured_timestamp_seconds", LOG, "0+60x30"),
    # orders' measurements stop at minute 2 (time() keeps going).
    series(
        "queuey_queue_measured_timestamp_seconds",
        'application="shop",queue="orders"',
        "0+60x2 120x28",
    ),
    # Posts to orders refused by its rate for the whole half hour.
    series(
        "queuey_flow_throttled_total",
        'application="shop",queue="orders",kind="post_rate"',
        "0+30x30",
    ),
    series(
        "queuey_group_lag_seconds",
        'application="shop",group="indexer",queue="audit-log",partition="1"',
        "0+60x30",
    ),
]

EXPECTED = {
    "QueueyBacklogAge": [
        alert(
            "QueueyBacklogAge",
            "page",
            "shop/orders: subscription workers has a message waiting 20m 0s",
            application="shop",
            queue="orders",
            subscription="workers",
        )
    ],
    "QueueyNoConsumers": [
        alert(
            "QueueyNoConsumers",
            "page",
            "shop/orders: nothing consumes subscription workers",
            application="shop",
            queue="orders",
            subscription="workers",
        )
    ],
    "QueueyDeadLetters": [
        alert(
            "QueueyDeadLetters",
            "ticket",
            "shop/orders: subscription workers dead-lettered 3 messages",
            application="shop",
            queue="orders",
            subscription="workers",
        )
    ],
    "QueueyThrottled": [
        alert(
            "QueueyThrottled",
            "ticket",
            "shop/orders is held by its post_rate limit",
            application="shop",
            queue="orders",
            kind="post_rate",
        )
    ],
    "QueueyGroupLag": [
        alert(
            "QueueyGroupLag",
            "page",
            "group indexer is 20m 0s behind on audit-log/1",
            application="shop",
            group="indexer",
            queue="audit-log",
            partition="1",
        )
    ],
    "QueueyFiguresStale": [
        alert(
            "QueueyFiguresStale",
            "ticket",
            "shop/orders: figures measured 18m 0s ago",
            application="shop",
            queue="orders",
        )
    ],
}


def test_each_alert_fires_on_what_it_watches_and_only_that(tmp_path):
    rule_tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": INPUT,
                "alert_rule_test": [
                    {"eval_time": "20m", "alertname": name, "exp_alerts": expected}
                    for name, expected in EXPECTED.items()
                ]
                # Early on, nothing has lasted long enough to fire.
                + [{"eval_time": "3m", "alertname": name, "exp_alerts": []} for name in EXPECTED],
            }
        ],
    }
    test_file = tmp_path / "rules_test.yml"
    test_file.write_text(json.dumps(rule_tests), encoding="utf-8")  # JSON is YAML
    done = subprocess.run(
        [PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60
    )
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
