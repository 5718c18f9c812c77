"""The queue page's two small charts of the last hour, as SVG geometry.

From the overview's per-minute history (:meth:`queuey.core.overview.Overview.history`):
depth and in-flight as lines, messages posted and acknowledged per minute as
bars. Only numbers are computed here; ``templates/chart.jinja2`` draws them as
inline SVG, so the page needs no script and no chart library.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from queuey.core.overview import HISTORY_MINUTES, Minute
from queuey.ids import MICROS

WIDTH = 600
HEIGHT = 120
#: Room at the left for the scale's labels.
LEFT = 44
TOP = 8
BOTTOM = 18


@dataclass(frozen=True)
class Series:
    name: str
    points: str  # SVG polyline points
    last: int | None


@dataclass(frozen=True)
class Bar:
    series: str
    x: float
    y: float
    width: float
    height: float
    title: str


@dataclass(frozen=True)
class Chart:
    title: str
    top: int  # the scale's top value
    lines: tuple[Series, ...]
    bars: tuple[Bar, ...]
    empty: bool
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    plot_top: int = TOP
    plot_bottom: int = HEIGHT - BOTTOM


def nice_top(value: int) -> int:
    """The scale's top: 1, 2 or 5 times a power of ten, at least ``value``."""
    magnitude = 1
    while True:
        for step in (1, 2, 5):
            if step * magnitude >= value:
                return step * magnitude
        magnitude *= 10


def _x(index: float) -> float:
    span = WIDTH - LEFT - 4
    return round(LEFT + span * index / (HISTORY_MINUTES - 1), 1)


def _y(value: int, top: int) -> float:
    span = HEIGHT - BOTTOM - TOP
    return round(HEIGHT - BOTTOM - span * value / top, 1)


def charts(history: Sequence[Minute], now_micros: int) -> dict[str, Chart]:
    """``depth`` and ``rates`` charts of the hour ending at the current minute."""
    seconds = now_micros // MICROS
    end = seconds - seconds % 60
    start = end - 60 * (HISTORY_MINUTES - 1)
    minutes = {m.at: m for m in history if start <= m.at <= end}
    slots = [(i, minutes.get(start + 60 * i)) for i in range(HISTORY_MINUTES)]

    def line(name: str, attr: str, top: int) -> Series:
        seen = [(i, getattr(m, attr)) for i, m in slots if m and getattr(m, attr) is not None]
        points = " ".join(f"{_x(i)},{_y(v, top)}" for i, v in seen)
        return Series(name, points, seen[-1][1] if seen else None)

    depth_top = nice_top(
        max((max(m.depth or 0, m.in_flight or 0) for _, m in slots if m), default=0)
    )
    depth = Chart(
        title="Depth and in flight, last hour",
        top=depth_top,
        lines=(line("depth", "depth", depth_top), line("in_flight", "in_flight", depth_top)),
        bars=(),
        empty=not any(m and m.depth is not None for _, m in slots),
    )

    rate_top = nice_top(max((max(m.posted, m.acked) for _, m in slots if m), default=0))
    slot_width = (WIDTH - LEFT - 4) / HISTORY_MINUTES
    bars = []
    for i, m in slots:
        if m is None:
            continue
        for offset, series, value in ((0.0, "posted", m.posted), (0.5, "acked", m.acked)):
            if value:
                y = _y(value, rate_top)
                bars.append(
                    Bar(
                        series,
                        round(LEFT + slot_width * (i + offset), 1),
                        y,
                        round(slot_width / 2, 1),
                        round(HEIGHT - BOTTOM - y, 1),
                        f"{value} {series} in the minute from {HISTORY_MINUTES - 1 - i} min ago",
                    )
                )
    rates = Chart(
        title="Posted and acknowledged per minute (this node)",
        top=rate_top,
        lines=(),
        bars=tuple(bars),
        empty=not bars,
    )
    return {"depth": depth, "rates": rates}
