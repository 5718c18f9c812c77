"""Gauges written straight to Prometheus's text format (version 0.0.4).

``/metrics`` carries a series per watched queue and per subscription of
each: 36,000 series for 1,000 queues of 5 subscriptions. prometheus_client
builds a metric, a sample and a label dictionary for every series and
formats each on exposition; the queue gauges alone cost about 46 ms of a
scrape that way. Here a label set is escaped once, however many gauges
carry it, and many series of several families are written in one step
(:func:`family_lines`), as strings a caller may keep and add to a family
(:class:`GaugeText`) again at the next scrape
(:mod:`queuey.web.queuegauges`). :func:`queuey.web.metrics.exposition`
appends what these collectors write after prometheus_client's output.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from prometheus_client.utils import floatToGoString


def label_value(value: str) -> str:
    """A label value as the text format writes it (``\\``, ``"`` and newlines escaped)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def label_set(names: Sequence[str], values: Iterable[str]) -> str:
    """``{a="x",b="y"}``: a series' labels, escaped, for :meth:`GaugeText.add`."""
    pairs = ",".join([f'{n}="{label_value(v)}"' for n, v in zip(names, values, strict=True)])
    return "{" + pairs + "}"


def sample_value(value: float) -> str:
    """A value as the text format reads it: a count as prometheus_client
    writes it (``7.0``), any other finite number as Python writes it
    (``0.25``, ``1e+16``: Prometheus parses both), ``+Inf``, ``-Inf``, ``NaN``."""
    if type(value) is int:
        return f"{value}.0"
    if math.isfinite(value):
        return repr(float(value))
    return floatToGoString(value)


class GaugeText:
    """One gauge family: its ``# HELP`` and ``# TYPE`` lines, then a line per
    series (``lines``, which a caller with many series may extend itself)."""

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        help_text = text.replace("\\", "\\\\").replace("\n", "\\n")
        self.lines = [f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"]

    def add(self, labels: str, value: float) -> None:
        """A series: ``labels`` from :func:`label_set` ("" for none)."""
        self.lines.append(f"{self.name}{labels} {sample_value(value)}\n")

    def text(self) -> str:
        return "".join(self.lines)


def family_lines(names: Sequence[str], series: Iterable[tuple[str, Sequence]]) -> list[str]:
    """Each family's lines, one string per name of ``names``, for
    ``series``: pairs of a label set (from :func:`label_set`, then a space)
    and its values, one per family (``None`` writes no line)."""
    series = list(series)
    return [
        "".join(
            [
                f"{name}{labels}{sample_value(values[n])}\n"
                for labels, values in series
                if values[n] is not None
            ]
        )
        for n, name in enumerate(names)
    ]


def render(families: Iterable[GaugeText]) -> bytes:
    """The families as one exposition fragment."""
    return "".join(family.text() for family in families).encode("utf-8")
