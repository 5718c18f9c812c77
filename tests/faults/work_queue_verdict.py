"""The verdict of a work-queue run: the delivery invariants as counts.

Drawn from a :class:`tests.faults.work_queue_support.WorkLog`, whose calls
carry the wall-clock times just before each request (``sent``) and just
after its answer (``received``), on the host whose clock decides leases. A
lease that started while serving reserve call ``d`` cannot end before
``d.sent + visibility_timeout``, so a second delivery answered before that
instant is an early redelivery whatever the network or the scheduler did;
no verdict here depends on a guess about timing.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field

from tests.faults.work_queue_support import Delivery, Finish, WorkLog

#: Slack for float rounding of timestamps (microseconds as JSON numbers).
CLOCK_MARGIN = 0.002


@dataclass
class Verdict:
    """The invariants as counts; ``*_examples`` hold a few cases for the message."""

    sent: int = 0
    delivered: int = 0  # distinct expected keys delivered at least once
    deliveries: int = 0
    duplicates: int = 0  # deliveries beyond the first of each message
    stored_twice: int = 0  # extra messages of one key (a post retried after a 503)
    acked: int = 0  # distinct keys with a successful ack
    lost: int = 0  # expected keys never acked
    early_redeliveries: int = 0
    after_ack: int = 0  # deliveries after the key was successfully acked
    wrong_attempts: int = 0
    false_expired: int = 0  # acks answered "expired" though nobody had the message since
    ack_statuses: dict[str, int] = field(default_factory=dict)
    unavailable: dict[str, int] = field(default_factory=dict)  # 503 answers per call
    examples: list[str] = field(default_factory=list)

    def line(self) -> str:
        fields = {k: v for k, v in asdict(self).items() if k != "examples"}
        text = " ".join(f"{k}={v}" for k, v in fields.items())
        return text + (f" examples={self.examples[:3]}" if self.examples else "")


def verdict(log: WorkLog) -> Verdict:
    """Check at-least-once, no early redelivery, ack is final and attempt counts.

    Messages are told apart by id, posts by the body's key (a post retried
    after a 503 may have stored a key twice: counted as ``stored_twice``, and
    the key counts as acked once either copy is). Per message, deliveries in
    the order they were answered carry attempts 1, 2,
    3... (only increasing if a reserve's answer was lost to a 503); each comes
    after the previous lease could have ended (its reserve's ``sent`` + the
    visibility timeout, or the sending of its release); none follows a
    delivery whose receipt was acked; an ack answered ``expired`` was
    overtaken by a new lease or a release.
    """
    v = Verdict(sent=len(log.expected), deliveries=len(log.deliveries))
    v.unavailable = dict(log.unavailable)
    lost_reserves = log.unavailable.get("reserve", 0)
    per_message: dict[str, list[Delivery]] = defaultdict(list)
    ids_of_key: dict[str, set[str]] = defaultdict(set)
    for d in log.deliveries:
        per_message[d.message_id].append(d)
        ids_of_key[d.key].add(d.message_id)
    finishes: dict[str, list[Finish]] = defaultdict(list)
    for f in log.finishes:
        finishes[f.receipt].append(f)
        if f.verb == "ack":
            v.ack_statuses[f.status] = v.ack_statuses.get(f.status, 0) + 1
    v.delivered = len(set(ids_of_key) & log.expected)
    v.duplicates = sum(len(ds) - 1 for ds in per_message.values())
    v.stored_twice = sum(len(found) - 1 for found in ids_of_key.values())
    v.acked = len(log.acked_keys & log.expected)
    v.lost = len(log.expected - log.acked_keys)
    for ds in per_message.values():
        key = ds[0].key
        ds.sort(key=lambda d: (d.received, d.attempts))
        for i, d in enumerate(ds):
            before = ds[i - 1].attempts if i else 0
            if d.attempts != i + 1 and not (lost_reserves and d.attempts > before):
                v.wrong_attempts += 1
                v.examples.append(f"{key}: delivery {i + 1} said attempts={d.attempts}")
            done = finishes.get(d.receipt, [])
            if any(f.verb == "ack" and f.status == "acked" for f in done) and i + 1 < len(ds):
                v.after_ack += len(ds) - i - 1
                v.examples.append(f"{key}: delivered again after ack by {d.consumer}")
            for f in done:
                retaken = i + 1 < len(ds) and ds[i + 1].sent < f.received
                released = any(g.verb == "release" for g in done if g.sent < f.received)
                if f.verb == "ack" and f.status == "expired" and not (retaken or released):
                    v.false_expired += 1
                    v.examples.append(f"{key}: ack by {d.consumer} said expired, not retaken")
            if i + 1 < len(ds):
                nxt = ds[i + 1]
                released = [f.sent for f in done if f.verb == "release"]
                ends = min([d.sent + d.visibility_timeout, *released])
                if nxt.received < ends - CLOCK_MARGIN:
                    v.early_redeliveries += 1
                    v.examples.append(
                        f"{key}: to {nxt.consumer} {ends - nxt.received:.3f}s before "
                        f"{d.consumer}'s lease could end"
                    )
    return v
