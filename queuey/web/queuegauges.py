"""The per-queue, per-subscription and per-group gauges of ``/metrics``.

A node watching 1,000 queues of 5 subscriptions exposes 36,000 of these
series. They are written as text (:mod:`queuey.web.exposition`), and a
queue's lines are kept from one scrape to the next until the refresher
measures the queue again: a scrape writes again only the queues measured
since the last one (and those whose usable consumers depend on a rate
bucket's state now), then joins what it kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from queuey.core.queuecounters import OTHER
from queuey.ids import MICROS
from queuey.model.flow import NO_SUBSCRIPTION_FLOW, subscription_flows
from queuey.web.exposition import GaugeText, family_lines, label_set, render

QUEUE_LABELS = ("application", "queue")
SUBSCRIPTION_LABELS = ("application", "queue", "subscription")
GROUP_LABELS = ("application", "group", "queue", "partition")


class QueueCollector:
    """Per-queue, per-subscription and per-group gauges, read from the
    operators' caches and written as text (``render() -> bytes``, one of
    :attr:`queuey.core.metrics.Metrics.text_collectors`).

    A scrape never touches storage or ZooKeeper: it copies what the refresher
    of :class:`queuey.core.overview.Overview` last measured, so its cost grows with
    the number of watched queues (at most ``queuey.stats.max_queues``, which
    also bounds the label sets) and their subscriptions, not with the
    messages they hold.

    A subscription has series once it was used (a reserve names it into
    being) and until its queue is deleted or purged: at most
    :data:`SUBSCRIPTIONS_PER_QUEUE` of a queue by name (the rest summed in one
    series ``subscription="~other"`` of the queue), and
    :data:`SUBSCRIPTIONS_PER_APPLICATION` of an application and
    :data:`MAX_SUBSCRIPTIONS` in all (the rest summed in the application's
    ``queue="~other", subscription="~other"``). A sum's oldest age is its
    oldest.
    """

    QUEUE_GAUGES = (
        ("queuey_queue_depth", "Live messages in the queue", "depth"),
        ("queuey_queue_in_flight", "Messages leased and not yet acked", "in_flight"),
        ("queuey_queue_delayed", "Messages waiting for their delivery delay", "delayed"),
        ("queuey_queue_dead_lettered", "Messages moved to the dead-letter queue", "dead_lettered"),
        ("queuey_queue_oldest_age_seconds", "Age of the oldest live message", "oldest_age"),
    )
    MEASURED = ("queuey_queue_measured_timestamp_seconds", "When the queue's figures were measured")
    #: A subscription's gauges: name and help, in the order of :class:`_Backlog`'s fields.
    SUBSCRIPTION_GAUGES = (
        ("queuey_subscription_available", "Messages the subscription can hand out now"),
        ("queuey_subscription_delayed", "Messages waiting for their delivery delay"),
        ("queuey_subscription_in_flight", "Messages leased and not yet acked or released"),
        ("queuey_subscription_dead_lettered", "Messages the subscription dead-lettered"),
        (
            "queuey_subscription_oldest_available_age_seconds",
            "Age of the oldest message the subscription can hand out now",
        ),
        (
            "queuey_subscription_usable_consumers",
            "Consumers, each working on one message, the subscription can keep busy "
            "within its rate and max_in_flight",
        ),
    )
    SUBSCRIPTIONS_PER_QUEUE = 20
    SUBSCRIPTIONS_PER_APPLICATION = 5000
    MAX_SUBSCRIPTIONS = 20_000

    def __init__(self, overview, groups, grants=None) -> None:
        self.overview = overview
        self.groups = groups
        #: The reserve limits (:class:`queuey.core.grants.Grants`), for usable consumers.
        self.grants = grants
        #: Each queue's lines as last written, by application and name.
        self._kept: dict[tuple[str, str], _QueueLines] = {}
        #: Each subscription's label set as written, from one scrape to the next.
        self._labels: dict[tuple[str, str, str], str] = {}
        #: The families' names, in the order of a queue's lines.
        self._queue_names = [name for name, _, _ in self.QUEUE_GAUGES] + [self.MEASURED[0]]
        self._subscription_names = [name for name, _ in self.SUBSCRIPTION_GAUGES]

    def render(self) -> bytes:
        everything = sorted(self.overview.all_figures(), key=lambda f: (f.application, f.name))
        queues = self._queue_lines(everything)
        return render(
            [
                *self._queue_gauges(queues),
                *self._subscription_gauges(queues),
                *self._group_gauges(),
            ]
        )

    def written(self) -> dict[tuple[str, str], _QueueLines]:
        """Each watched queue's lines as of its figures, but those that read
        a rate bucket: what a server's refresher process publishes beside the
        figures it measured, so that its workers, which :meth:`adopt` them,
        write again only what changed since (their own measurements, and the
        lines that read a rate bucket now)."""
        self._queue_lines(self.overview.all_figures())
        return self._kept

    def adopt(self, written: dict[tuple[str, str], _QueueLines], age: float) -> None:
        """Take the lines the refresher process wrote (:meth:`written`);
        any whose figures are not the ones this process holds for the queue
        are written again at the next scrape."""
        self._kept = {**self._kept, **written}

    def _queue_lines(self, everything) -> list[_QueueLines]:
        """Each queue's lines: those kept when its figures are the ones they
        were written from, else written now (and kept unless they depend on
        a rate bucket's state now). What is not watched any more is dropped."""
        kept, fresh = self._kept, {}
        found = []
        for figures in everything:
            key = (figures.application, figures.name)
            lines = kept.get(key)
            if lines is None or lines.measured != figures.measured:
                lines = self._write_queue(figures)
            if not lines.live:
                fresh[key] = lines
            found.append(lines)
        self._kept = fresh  # two scrapes at once: either's is right
        return found

    def _write_queue(self, figures) -> _QueueLines:
        values = [getattr(figures, attr) for _, _, attr in self.QUEUE_GAUGES]
        labels = label_set(QUEUE_LABELS, (figures.application, figures.name)) + " "
        queue_text = family_lines(self._queue_names, [(labels, [*values, figures.measured / 1e6])])
        subscriptions, every, live = self._backlogs(figures)
        lines = _QueueLines(
            figures.application,
            figures.name,
            figures.measured,
            queue_text,
            subscriptions,
            every,
            [],
            live,
        )
        series = lines.series(self.SUBSCRIPTIONS_PER_QUEUE)
        written = [(self._label_text(key), backlog) for key, backlog in series]
        return lines._replace(text=family_lines(self._subscription_names, written))

    def _label_text(self, key: tuple[str, str, str]) -> str:
        text = self._labels.get(key)
        if text is None:
            if len(self._labels) >= 2 * self.MAX_SUBSCRIPTIONS:
                self._labels.clear()
            text = self._labels[key] = label_set(SUBSCRIPTION_LABELS, key) + " "
        return text

    def _backlogs(self, figures) -> tuple[tuple[str, ...], tuple[tuple, ...], bool]:
        """A queue's subscriptions by name, each one's backlog (a plain
        tuple: what a snapshot unpickles fastest), and whether a
        usable-consumers figure read a rate bucket."""
        flows = subscription_flows(figures.meta) if figures.subscriptions else {}
        names, every, live = [], [], False
        for stats in sorted(figures.subscriptions, key=lambda s: s.subscription):
            flow = flows.get(stats.subscription, NO_SUBSCRIPTION_FLOW)
            live = live or bool(self.grants is not None and flow.rate)
            names.append(stats.subscription)
            every.append(tuple(self._backlog(figures, stats, flow)))
        return tuple(names), tuple(every), live

    def _backlog(self, figures, stats, flow) -> _Backlog:
        oldest = stats.oldest_available_timestamp
        age = None if oldest is None else max(0.0, (figures.measured - oldest) / MICROS)
        usable = stats.available + stats.in_flight
        if self.grants is not None and flow is not NO_SUBSCRIPTION_FLOW:
            usable = self.grants.usable_consumers(
                figures.meta, stats.subscription, flow, stats.available, stats.in_flight
            )
        return _Backlog(
            stats.available, stats.delayed, stats.in_flight, stats.dead_lettered, age, usable
        )

    def _queue_gauges(self, queues: list[_QueueLines]) -> list[GaugeText]:
        families = [GaugeText(name, text) for name, text, _ in self.QUEUE_GAUGES]
        families.append(GaugeText(*self.MEASURED))
        for n, family in enumerate(families):
            family.lines.extend(q.queue_text[n] for q in queues)
        unwatched = GaugeText(
            "queuey_queues_unwatched",
            "Queues beyond queuey.stats.max_queues, left out of the per-queue gauges",
        )
        unwatched.add("", self.overview.unwatched)
        refresh = GaugeText(
            "queuey_stats_refresh_seconds",
            "Seconds the last refresher pass spent measuring queues",
        )
        refresh.add("", self.overview.last_pass_seconds)
        return [*families, unwatched, refresh]

    def _subscription_gauges(self, queues: list[_QueueLines]) -> list[GaugeText]:
        shown, left_out = self._capped(queues)
        families = [GaugeText(name, text) for name, text in self.SUBSCRIPTION_GAUGES]
        for n, family in enumerate(families):
            family.lines.extend(q.text[n] for q in shown)
        sums = [(label_set(SUBSCRIPTION_LABELS, key) + " ", b) for key, b in left_out]
        left = family_lines(self._subscription_names, sums)
        for family, lines in zip(families, left, strict=True):
            family.lines.append(lines)
        return families

    def _capped(self, queues: list[_QueueLines]) -> tuple[list[_QueueLines], list]:
        """The queues whose subscriptions are shown by name, within the caps,
        and each application's sum of the rest (``queue="~other"``)."""
        shown: list[_QueueLines] = []
        total = 0
        per_application: dict[str, int] = {}
        left_out: dict[str, list[tuple]] = {}
        for q in queues:
            if not q.subscriptions:
                continue
            count = min(len(q.subscriptions), self.SUBSCRIPTIONS_PER_QUEUE + 1)
            used = per_application.get(q.application, 0)
            room = min(self.SUBSCRIPTIONS_PER_APPLICATION - used, self.MAX_SUBSCRIPTIONS - total)
            if count > room:
                left_out.setdefault(q.application, []).extend(q.every)
                continue
            per_application[q.application] = used + count
            total += count
            shown.append(q)
        sums = [
            ((application, OTHER, OTHER), _Backlog.summed(backlogs))
            for application, backlogs in sorted(left_out.items())
        ]
        return shown, sums

    def subscription_series(self, everything) -> list[tuple[tuple[str, str, str], _Backlog]]:
        """The subscriptions' series within the caps, by application, queue
        and subscription name (``everything``: the figures in that order)."""
        shown, sums = self._capped(self._queue_lines(everything))
        named = [series for q in shown for series in q.series(self.SUBSCRIPTIONS_PER_QUEUE)]
        return named + sums

    def _group_gauges(self) -> list[GaugeText]:
        if self.groups is None:
            return []
        lag = GaugeText(
            "queuey_group_lag_messages",
            "Live messages after the group's checkpoint (a lower bound at 1000)",
        )
        lag_seconds = GaugeText(
            "queuey_group_lag_seconds", "Age of the oldest message the group has not processed"
        )
        members = GaugeText("queuey_group_members", "Live members of the group")
        for group in self.groups.cached():
            members.add(
                label_set(("application", "group"), (group.application, group.name)),
                len(group.members),
            )
            for p in group.partitions:
                labels = label_set(
                    GROUP_LABELS, (group.application, group.name, p.queue, str(p.partition))
                )
                if p.lag_messages is not None:
                    lag.add(labels, p.lag_messages)
                if p.lag_seconds is not None:
                    lag_seconds.add(labels, p.lag_seconds)
        return [lag, lag_seconds, members]


class _QueueLines(NamedTuple):
    """What a scrape writes of one queue, as of its figures' ``measured``:
    its queue gauges' lines (a string per family); its subscriptions by
    name and each one's backlog (a :class:`_Backlog`'s values: the series,
    and its application's ``~other`` when the caps leave the queue out);
    its subscription series' lines (a string per family); and whether it
    read a rate bucket (``live``: written again at each scrape)."""

    application: str
    queue: str
    measured: int
    queue_text: list[str]
    subscriptions: tuple[str, ...]
    every: tuple[tuple, ...]
    text: list[str]
    live: bool

    def series(self, per_queue: int) -> list[tuple[tuple[str, str, str], _Backlog]]:
        """The queue's subscription series: at most ``per_queue`` by name,
        the rest summed as ``~other``."""
        found = [
            ((self.application, self.queue, name), _Backlog(*backlog))
            for name, backlog in zip(
                self.subscriptions[:per_queue], self.every[:per_queue], strict=True
            )
        ]
        if len(self.every) > per_queue:
            rest = self.every[per_queue:]
            found.append(((self.application, self.queue, OTHER), _Backlog.summed(rest)))
        return found


class _Backlog(NamedTuple):
    """A subscription's gauges, or the sum of several (their oldest age the oldest)."""

    available: int
    delayed: int
    in_flight: int
    dead_lettered: int
    oldest_age: float | None
    usable_consumers: int

    @classmethod
    def summed(cls, backlogs: Sequence[tuple]) -> _Backlog:
        """The sum of backlogs (each a :class:`_Backlog` or its values)."""
        found = [cls(*b) for b in backlogs]
        ages = [b.oldest_age for b in found if b.oldest_age is not None]
        return cls(
            sum(b.available for b in found),
            sum(b.delayed for b in found),
            sum(b.in_flight for b in found),
            sum(b.dead_lettered for b in found),
            max(ages) if ages else None,
            sum(b.usable_consumers for b in found),
        )
