"""Charts drawn on the server as SVG geometry: the template only places what is computed here.

No JavaScript and no chart library: a page with charts works in any browser, and
every label goes through the template's escaping.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#6b7280")
WIDTH, HEIGHT = 720, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 36


def _nice_max(value: int) -> int:
    """The smallest 1/2/5 x 10^k at or above value, so the axis reads round numbers."""
    if value <= 0:
        return 1
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= value:
                return step * factor
        step *= 10


def _ticks(top: int) -> list[int]:
    """Round tick values from 0 to top (top is 1, 2 or 5 x 10^k): 0-2-4-...-10, 0-5-...-20, 0-10-...-50."""
    intervals = top if top < 5 else {"1": 5, "2": 4, "5": 5}[str(top)[0]]
    return [top * i // intervals for i in range(intervals + 1)]


@dataclass
class Chart:
    width: int = WIDTH
    height: int = HEIGHT
    y_ticks: list[dict] = field(default_factory=list)
    x_labels: list[dict] = field(default_factory=list)
    lines: list[dict] = field(default_factory=list)
    bars: list[dict] = field(default_factory=list)
    empty: bool = True
    plot_left: int = LEFT
    plot_right: int = WIDTH - RIGHT
    plot_bottom: int = HEIGHT - BOTTOM


def _y(value: int, top: int) -> float:
    return round(TOP + (HEIGHT - TOP - BOTTOM) * (1 - value / top), 1)


def _y_axis(chart: Chart, top: int) -> None:
    chart.y_ticks = [{"y": _y(v, top), "label": f"{v:,}"} for v in _ticks(top)]


def line_chart(days: list, series: list[tuple[str, list[int]]]) -> Chart:
    """One line per series over the days; x labels thinned to about eight."""
    chart = Chart()
    if not days or not series:
        return chart
    chart.empty = False
    top = _nice_max(max(max(values) for _, values in series))
    _y_axis(chart, top)
    span = max(len(days) - 1, 1)
    plot_width = WIDTH - LEFT - RIGHT

    def x(i: int) -> float:
        return round(LEFT + plot_width * (i / span if len(days) > 1 else 0.5), 1)

    every = max(1, len(days) // 8)
    chart.x_labels = [
        {"x": x(i), "label": day.strftime("%m-%d")} for i, day in enumerate(days) if i % every == 0
    ]
    for n, (label, values) in enumerate(series):
        points = " ".join(f"{x(i)},{_y(v, top)}" for i, v in enumerate(values))
        chart.lines.append(
            {
                "label": label,
                "color": PALETTE[n % len(PALETTE)],
                "points": points,
                "total": sum(values),
                "dots": [
                    {"x": x(i), "y": _y(v, top), "value": v, "day": days[i]} for i, v in enumerate(values)
                ]
                if len(days) <= 31
                else [],
            }
        )
    return chart


def bar_chart(bars: list[tuple[int, int]], *, label_prefix: str = "") -> Chart:
    """Vertical bars for (category, value) pairs, e.g. retry count -> letters."""
    chart = Chart()
    if not bars:
        return chart
    chart.empty = False
    top = _nice_max(max(value for _, value in bars))
    _y_axis(chart, top)
    slot = (WIDTH - LEFT - RIGHT) / len(bars)
    width = max(slot * 0.8, 1)
    for i, (category, value) in enumerate(bars):
        x = LEFT + slot * i + (slot - width) / 2
        y = _y(value, top)
        chart.bars.append(
            {
                "x": round(x, 1),
                "y": y,
                "width": round(width, 1),
                "height": round(HEIGHT - BOTTOM - y, 1),
                "value": value,
                "label": f"{label_prefix}{category}",
                "category": category,
                "label_x": round(x + width / 2, 1),
            }
        )
    return chart
