"""The flow settings' table and its rules (:mod:`queuey.model.flow`,
:mod:`queuey.model.flowfield`): stored strings, checks with the field named,
a rate's decimal places, the FIFO rule read from the table, the records'
value semantics, and the docs naming every setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from queuey.model import QueueMeta
from queuey.model.flow import (
    FIELDS,
    NO_QUEUE_FLOW,
    FlowSettingError,
    QueueFlow,
    SubscriptionFlow,
    queue_changes,
    queue_flow,
    subscription_changes,
    subscription_flows,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_names_are_unique_per_resource_and_kinds_are_known():
    for resource in ("queue", "subscription"):
        names = [f.name for f in FIELDS if f.resource == resource]
        assert len(names) == len(set(names))
    for field in FIELDS:
        assert field.kind in ("flag", "rate", "count", "choice")
        assert field.help and field.title
        assert (field.kind == "choice") == bool(field.choices)


@pytest.mark.parametrize("value", [0.5, 2.000001, 299999 * 1e-6, 1_000_000, 3])
def test_a_rate_with_at_most_six_places_is_stored(value):
    set_, _ = queue_changes(QueueMeta("a", "q"), {"post_rate": value})
    assert float(set_["flow.post_rate"]) == pytest.approx(value)
    assert len(set_["flow.post_rate"].partition(".")[2]) <= 6


@pytest.mark.parametrize("value", [0.1234567, -1, 1_000_001, True, "2", float("nan")])
def test_a_bad_rate_is_named(value):
    with pytest.raises(FlowSettingError) as refused:
        queue_changes(QueueMeta("a", "q"), {"post_rate": value, "max_length": 10})
    assert list(refused.value.errors) == ["post_rate"]


def test_zero_false_and_null_remove_a_setting_and_absent_ones_stay():
    set_, removed = queue_changes(
        QueueMeta("a", "q"), {"post_rate": 0, "fair": False, "overflow": None, "max_length": 9}
    )
    assert set_ == {"flow.max_length": "9"}
    assert sorted(removed) == ["flow.fair", "flow.overflow", "flow.post_rate"]
    set_, removed = subscription_changes("w", {"burst": 4})
    assert (set_, removed) == ({"sub.w.burst": "4"}, [])


def test_a_setting_that_does_not_apply_to_fifo_is_refused_there():
    fifo = QueueMeta("a", "q.fifo", fifo=True)
    for field in (f for f in FIELDS if f.resource == "queue" and not f.fifo):
        with pytest.raises(FlowSettingError) as refused:
            queue_changes(fifo, {field.name: True})
        assert "FIFO" in refused.value.errors[field.name]
        queue_changes(fifo, {field.name: False})


def test_stored_strings_read_back_and_bad_ones_read_as_the_default():
    meta = QueueMeta(
        "a",
        "q",
        attributes={
            "flow.post_rate": "2.5",
            "flow.max_length": "junk",
            "flow.overflow": "explode",
            "flow.fair": "1",
            "sub.w.rate": "1e-9",
            "sub.w.burst": "4",
            "sub.x.unknown": "1",
        },
    )
    flow = queue_flow(meta)
    assert flow == QueueFlow(post_rate=2.5, fair=True)
    assert flow.to_json()["post_burst"] == 3  # the bucket in force
    subs = subscription_flows(meta)
    assert list(subs) == ["w"]
    assert subs["w"].rate == pytest.approx(1 / 3600)  # the lowest rate enforced
    assert subs["w"].to_json()["burst"] == 4 and subs["w"].rate_burst == 4
    assert queue_flow(QueueMeta("a", "q")) is NO_QUEUE_FLOW


def test_records_are_frozen_values_in_the_tables_order():
    flow = SubscriptionFlow(True, 5.0, 2, 3)
    assert flow == SubscriptionFlow(paused=True, rate=5.0, rate_burst=2, max_in_flight=3)
    assert hash(flow) == hash(SubscriptionFlow(True, 5.0, 2, 3))
    assert flow != QueueFlow() and "rate=5.0" in repr(flow)
    with pytest.raises(AttributeError):
        flow.rate = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        SubscriptionFlow(nope=1)
    assert [f.name for f, _ in flow.settings()] == ["paused", "rate", "burst", "max_in_flight"]
    assert flow.value_of(FIELDS[-2]) == 2 and FIELDS[-2].key == "rate_burst"


def test_the_docs_name_every_setting():
    text = (DOCS / "flow.rst").read_text()
    assert [f.name for f in FIELDS if f"``{f.name}``" not in text] == []
