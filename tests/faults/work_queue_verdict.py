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
    #: Of ``lost``: keys whose ack answered 503 and then not "acked" (the ack
    #: may have landed): finished only if the queue has them no more, which
    #: the caller proves (:func:`assert_invariants` ``drained``).
    unsure: int = 0
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
    return _judge(log, in_lease_order=False)


def _wrong_attempts(ds: list[Delivery], i: int, lost_reserves: bool, in_lease_order: bool) -> bool:
    """Whether delivery ``i`` of a message breaks the attempt counts: in
    answer order they run 1, 2, 3... (only increasing past a lost reserve);
    in lease order each is one more than the previous (more only past a lost
    reserve) and answered after the previous reserve was sent."""
    d = ds[i]
    before = ds[i - 1] if i else None
    previous = before.attempts if before else 0
    if not in_lease_order:
        return d.attempts != i + 1 and not (lost_reserves and d.attempts > previous)
    return (
        d.attempts < previous + 1  # two leases said the same count
        or (d.attempts > previous + 1 and not lost_reserves)
        or (before is not None and d.received < before.sent)
    )


def _judge(log: WorkLog, in_lease_order: bool) -> Verdict:
    """:func:`verdict` and :func:`verdict_in_lease_order`: the deliveries of
    each message in answer order, or in lease (attempt) order."""
    word, again = ("lease", "leased again") if in_lease_order else ("delivery", "delivered again")
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
    v.unsure = len((log.expected - log.acked_keys) & log.unsure_keys)
    for ds in per_message.values():
        key = ds[0].key
        if in_lease_order:
            ds.sort(key=lambda d: (d.attempts, d.received))
        else:
            ds.sort(key=lambda d: (d.received, d.attempts))
        for i, d in enumerate(ds):
            if _wrong_attempts(ds, i, bool(lost_reserves), in_lease_order):
                v.wrong_attempts += 1
                v.examples.append(f"{key}: {word} {i + 1} said attempts={d.attempts}")
            done = finishes.get(d.receipt, [])
            if any(f.verb == "ack" and f.status == "acked" for f in done) and i + 1 < len(ds):
                v.after_ack += len(ds) - i - 1
                v.examples.append(f"{key}: {again} after ack by {d.consumer}")
            for f in done:
                retaken = i + 1 < len(ds) and ds[i + 1].sent < f.received
                released = any(g.verb == "release" for g in done if g.sent < f.received)
                # After a 503 the ack may have landed, its record gone since.
                overtaken = retaken or released or f.unsure
                if f.verb == "ack" and f.status == "expired" and not overtaken:
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


def lease_spans(log: WorkLog) -> dict[str, list[tuple[float, float, Delivery]]]:
    """Per message id, the span each delivery's lease surely ran, as
    ``(start, end, delivery)``: from the answer of its reserve (the lease was
    made before it) until its reserve was sent + the visibility timeout (the
    earliest it can end), or until an ack or release of its receipt that
    succeeded was sent, if sooner. Empty spans are left out."""
    ended: dict[str, float] = {}
    for f in log.finishes:
        if f.status == "acked":  # a successful ack or release
            ended[f.receipt] = min(f.sent, ended.get(f.receipt, f.sent))
    spans: dict[str, list[tuple[float, float, Delivery]]] = defaultdict(list)
    for d in log.deliveries:
        end = min(d.sent + d.visibility_timeout, ended.get(d.receipt, float("inf")))
        if d.received < end:
            spans[d.message_id].append((d.received, end, d))
    return spans


def double_leases(log: WorkLog) -> list[tuple[Delivery, Delivery]]:
    """Pairs of deliveries of one message whose leases surely overlapped
    (:func:`lease_spans`): one message leased to two consumers at once,
    whichever order their answers came in. None may exist."""
    pairs = []
    for spans in lease_spans(log).values():
        for i, (start, end, d) in enumerate(spans):
            for start2, end2, d2 in spans[i + 1 :]:
                if max(start, start2) < min(end, end2) - CLOCK_MARGIN:
                    pairs.append((d, d2))
    return pairs


def stale_answers(log: WorkLog) -> list[Delivery]:
    """Deliveries answered only after their lease could have ended (``received``
    past ``sent`` + the visibility timeout): the node answering was stopped
    between leasing and answering, so another consumer may have had the
    message since. At least once allows it (the ack says ``expired``)."""
    return [d for d in log.deliveries if d.received >= d.sent + d.visibility_timeout]


def verdict_in_lease_order(log: WorkLog) -> Verdict:
    """:func:`verdict`, with each message's deliveries taken in the order the
    service leased them rather than the order their answers came.

    Where an answer may come long after its lease was made (a node frozen
    between leasing and answering, :func:`stale_answers`), the order of the
    answers is not the order of the leases. The attempt counts give that
    order, and they are checked, not trusted: per message they run 1, 2,
    3... (a count may be skipped only if a reserve's answer was lost), and
    each lease was answered after the reserve of the one before it was sent
    (a later lease cannot be answered before the earlier one was asked for);
    a count that breaks either is ``wrong_attempts``. Then, as in
    :func:`verdict`: a delivery answered before the previous lease could have
    ended is an early redelivery, a delivery after a successful ack is
    ``after_ack``, and an ack answered ``expired`` must have been overtaken by
    a later lease or a release.
    """
    return _judge(log, in_lease_order=True)


def beyond_late_answers(log: WorkLog) -> tuple[Verdict, list[str]]:
    """:func:`verdict` in answer order, and what it finds about messages none
    of whose deliveries was answered late (:func:`stale_answers`): whatever
    the order of the leases does not explain."""
    strict = verdict(log)
    late = {d.key for d in stale_answers(log)}
    return strict, [e for e in strict.examples if e.split(":")[0] not in late]


def answered_across(
    log: WorkLog, instant: float, consumers: tuple[str, ...], pairs: list
) -> tuple[str, list[str]]:
    """The calls of ``consumers`` (name prefixes) sent before ``instant`` and
    answered after it (by a node stopped until then): reserves and ack
    statuses as text, and the rules they broke: an ack answered ``acked``
    whose message was leased again (a higher attempt count, or the same one
    twice), a lease surely overlapping another (``pairs``, :func:`double_leases`)."""
    reserves = [
        d for d in log.deliveries
        if d.consumer.startswith(consumers) and d.sent < instant < d.received
    ]  # fmt: skip
    acks = [
        f for f in log.finishes
        if f.verb == "ack" and log.by_receipt[f.receipt].consumer.startswith(consumers)
        and f.sent < instant < f.received
    ]  # fmt: skip
    broken = []
    for f in (f for f in acks if f.status == "acked"):
        d = log.by_receipt[f.receipt]
        again = [e for e in log.deliveries if e.message_id == d.message_id and e is not d]
        if any(e.attempts >= d.attempts for e in again):
            broken.append(f"{d.key}: acked by {d.consumer} after {instant}, leased again")
    receipts = {d.receipt for d in reserves}
    for x, y in pairs:
        if x.receipt in receipts or y.receipt in receipts:
            broken.append(f"{x.key}: lease answered after {instant} overlaps another")
    late = sum(1 for d in reserves if d.received >= d.sent + d.visibility_timeout)
    statuses: dict[str, int] = defaultdict(int)
    for f in acks:
        statuses[f.status] += 1
    text = (
        f"reserves={len(reserves)} (answered after their lease could end: {late}) "
        f"acks={dict(statuses)} broken={len(broken)}"
    )
    return text, broken
