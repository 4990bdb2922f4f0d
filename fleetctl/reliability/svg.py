"""Small inline-SVG plot builders for the HTML report: no JavaScript, no network, no plotting
library. Every builder returns markup safe to put in an autoescaped Jinja2 template (all
text in it is escaped here) and always draws something, "no data" included, so a plot is
never an empty box.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup, escape

FONT = 'font-family="system-ui, sans-serif" font-size="11"'
AXIS = "#666"
BAR = "#4e79a7"
FLAGGED = "#e15759"


def _svg(width: int, height: int, title: str, body: Sequence[str]) -> Markup:
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}" {FONT}>'
        f"<title>{escape(title)}</title>{''.join(body)}</svg>"
    )


def _no_data(width: int, height: int, title: str) -> Markup:
    return _svg(
        width,
        height,
        title,
        [
            f'<rect x="0.5" y="0.5" width="{width - 1}" height="{height - 1}" fill="#fafafa" stroke="#ddd"/>',
            f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" fill="{AXIS}">no data in this window</text>',
        ],
    )


def nice_ticks(top: float, count: int = 4, whole: bool = False) -> list[float]:
    """Round tick values from 0 to at least `top` (1, 2 or 5 times a power of ten apart);
    `whole`: no fractions, for counts."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    step = max(step, 1) if whole else step
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


def _fmt(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e5 else f"{value:.3g}"


def bar_chart(items: Sequence[tuple[str, float]], title: str, width: int = 640, colour: str = BAR) -> Markup:
    """Horizontal bars, one per (label, value), in the order given."""
    row, label_w, pad = 22, 170, 8
    height = pad * 2 + row * len(items) + 20
    if not items:
        return _no_data(width, 80, title)
    ticks = nice_ticks(max(v for _, v in items), whole=True)
    plot_w = width - label_w - pad * 2
    scale = plot_w / ticks[-1]
    body = []
    for tick in ticks:
        x = label_w + tick * scale
        body.append(
            f'<line x1="{x:.1f}" y1="{pad}" x2="{x:.1f}" y2="{height - 20}" stroke="#eee"/>'
            f'<text x="{x:.1f}" y="{height - 6}" text-anchor="middle" fill="{AXIS}">{_fmt(tick)}</text>'
        )
    for k, (label, value) in enumerate(items):
        y = pad + k * row
        body.append(
            f'<text x="{label_w - 6}" y="{y + row * 0.65:.1f}" text-anchor="end">{escape(label)}</text>'
            f'<rect class="bar" x="{label_w}" y="{y + 3}" width="{max(value * scale, 1):.1f}" height="{row - 6}" '
            f'fill="{colour}"><title>{escape(label)}: {_fmt(value)}</title></rect>'
        )
    return _svg(width, height, title, body)


def histogram(
    values: Sequence[float], title: str, x_label: str, bins: int = 12, width: int = 640, height: int = 220
) -> Markup:
    """Counts of `values` in equal-width bins from 0 to a round upper bound."""
    if not values:
        return _no_data(width, height, title)
    edges = nice_ticks(max(values), bins)
    counts = [0] * (len(edges) - 1)
    for v in values:
        counts[min(max(int(v / (edges[1] - edges[0])), 0), len(counts) - 1)] += 1
    left, bottom, top = 40, 36, 10
    plot_w, plot_h = width - left - 10, height - bottom - top
    y_ticks = nice_ticks(max(counts), whole=True)
    col = plot_w / len(counts)
    body = []
    for tick in y_ticks:
        y = top + plot_h - tick / y_ticks[-1] * plot_h
        body.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{width - 10}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" fill="{AXIS}">{_fmt(tick)}</text>'
        )
    for k, count in enumerate(counts):
        h = count / y_ticks[-1] * plot_h
        body.append(
            f'<rect class="bar" x="{left + k * col + 1:.1f}" y="{top + plot_h - h:.1f}" width="{col - 2:.1f}" '
            f'height="{h:.1f}" fill="{BAR}"><title>{_fmt(edges[k])}-{_fmt(edges[k + 1])}: {count}</title></rect>'
        )
    for k, edge in enumerate(edges):
        body.append(
            f'<text x="{left + k * col:.1f}" y="{top + plot_h + 14}" text-anchor="middle" '
            f'fill="{AXIS}">{_fmt(edge)}</text>'
        )
    body.append(f'<text x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle">{escape(x_label)}</text>')
    return _svg(width, height, title, body)


def stacked_columns(
    labels: Sequence[str],
    series: Sequence[tuple[str, str, Sequence[float]]],
    title: str,
    width: int = 900,
    height: int = 260,
) -> Markup:
    """One column per label, stacked from `series` of (name, colour, values), with a legend.

    Used for nodes per state over time: adjacent columns read as a stacked timeline.
    """
    totals = [sum(s[2][k] for s in series) for k in range(len(labels))]
    if not labels or not any(totals):
        return _no_data(width, height, title)
    left, bottom, top, legend_w = 40, 40, 10, 120
    plot_w, plot_h = width - left - legend_w - 10, height - bottom - top
    y_ticks = nice_ticks(max(totals), whole=True)
    col = plot_w / len(labels)
    body = []
    for tick in y_ticks:
        y = top + plot_h - tick / y_ticks[-1] * plot_h
        body.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" fill="{AXIS}">{_fmt(tick)}</text>'
        )
    for k, label in enumerate(labels):
        base = 0.0
        for name, colour, values in series:
            if not values[k]:
                continue
            h = values[k] / y_ticks[-1] * plot_h
            y = top + plot_h - (base + values[k]) / y_ticks[-1] * plot_h
            body.append(
                f'<rect class="bar" x="{left + k * col:.1f}" y="{y:.1f}" width="{col + 0.3:.1f}" '
                f'height="{h:.1f}" fill="{colour}"><title>{escape(label)} {escape(name)}: '
                f"{_fmt(values[k])}</title></rect>"
            )
            base += values[k]
    for k in sorted({0, len(labels) // 2, len(labels) - 1}):
        body.append(
            f'<text x="{left + (k + 0.5) * col:.1f}" y="{top + plot_h + 14}" text-anchor="middle" '
            f'fill="{AXIS}">{escape(labels[k])}</text>'
        )
    for k, (name, colour, _) in enumerate(series):
        y = top + k * 16
        body.append(
            f'<rect x="{width - legend_w}" y="{y}" width="10" height="10" fill="{colour}" stroke="#999"/>'
            f'<text x="{width - legend_w + 14}" y="{y + 9}">{escape(name)}</text>'
        )
    return _svg(width, height, title, body)


def strip_plot(
    groups: Sequence[tuple[str, float | None, Sequence[tuple[str, float, bool, str]]]],
    title: str,
    x_label: str,
    width: int = 760,
) -> Markup:
    """One strip per group of (label, median, [(node, value, flagged, note)]): a dot per node
    (`note` in its tooltip), the median as a vertical tick, flagged nodes (stragglers) larger,
    in red and named."""
    points = [value for _, _, dots in groups for _, value, _, _ in dots]
    row, left, pad = 46, 150, 10
    height = pad + row * len(groups) + 30
    if not points:
        return _no_data(width, 80, title)
    low, high = min(points), max(points)
    margin = (high - low) * 0.08 or abs(high) * 0.05 or 1.0
    low, high = low - margin, high + margin
    plot_w = width - left - 20

    def x(value: float) -> float:
        return left + (value - low) / (high - low) * plot_w

    body = [
        f'<text x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle">{escape(x_label)}</text>',
        f'<text x="{left}" y="{height - 18}" fill="{AXIS}">{_fmt(round(low, 3))}</text>',
        f'<text x="{left + plot_w}" y="{height - 18}" text-anchor="end" fill="{AXIS}">{_fmt(round(high, 3))}</text>',
    ]
    for k, (label, median, dots) in enumerate(groups):
        mid = pad + k * row + row / 2
        body.append(
            f'<text x="{left - 8}" y="{mid + 4:.1f}" text-anchor="end">{escape(label)}</text>'
            f'<line x1="{left}" y1="{mid:.1f}" x2="{left + plot_w}" y2="{mid:.1f}" stroke="#eee"/>'
        )
        if median is not None:
            body.append(
                f'<line class="median" x1="{x(median):.1f}" y1="{mid - 14:.1f}" x2="{x(median):.1f}" '
                f'y2="{mid + 14:.1f}" stroke="#333" stroke-width="2"><title>median {_fmt(median)}</title></line>'
            )
        for node, value, flagged, note in dots:
            tip = f"<title>{escape(node)}: {escape(note)}{' (straggler)' if flagged else ''}</title>"
            if flagged:
                body.append(
                    f'<circle class="straggler" cx="{x(value):.1f}" cy="{mid:.1f}" r="6" fill="{FLAGGED}">'
                    f'{tip}</circle><text x="{x(value):.1f}" y="{mid - 9:.1f}" text-anchor="middle" '
                    f'fill="{FLAGGED}">{escape(node)}</text>'
                )
            else:
                body.append(
                    f'<circle cx="{x(value):.1f}" cy="{mid:.1f}" r="4" fill="{BAR}" fill-opacity="0.6">{tip}</circle>'
                )
    return _svg(width, height, title, body)
