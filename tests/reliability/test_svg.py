"""The hand-written SVG builders: round axes, escaped text, something drawn even without data."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from fleetctl.reliability import svg


@pytest.mark.parametrize(
    "top, count, whole, ticks",
    [
        (3, 4, False, [0, 1, 2, 3]),
        (1, 4, False, [0, 0.5, 1]),
        (1, 4, True, [0, 1]),
        (600, 12, False, [0, 50, 100, 150, 200, 250, 300, 350, 400, 450, 500, 550, 600]),
        (0, 4, False, [0, 1]),
        (1729, 4, False, [0, 500, 1000, 1500, 2000]),
    ],
)
def test_nice_ticks(top, count, whole, ticks) -> None:
    assert svg.nice_ticks(top, count, whole) == pytest.approx(ticks)


def _parse(markup) -> ET.Element:
    return ET.fromstring(str(markup))  # well-formed XML, or this raises


def test_builders_escape_text_and_stay_well_formed() -> None:
    evil = '<script>alert("x")</script> & co'
    plots = [
        svg.bar_chart([(evil, 3), ("xid 79", 1)], evil),
        svg.histogram([1, 2, 90, 120], evil, evil),
        svg.stacked_columns([evil, "b"], [(evil, "#000", [1, 2]), ("production", "#0f0", [3, 0])], evil),
        svg.strip_plot([(evil, 100.0, [(evil, 100.0, False, evil), ("n2", 60.0, True, "140")])], evil, evil),
    ]
    for plot in plots:
        root = _parse(plot)
        assert root.get("aria-label") == evil
        assert "<script" not in str(plot)


def test_histogram_puts_every_value_in_a_bin() -> None:
    plot = str(svg.histogram([0, 10, 59, 60, 90, 120, 120], "latency", "s"))
    counts = [int(c) for c in re.findall(r"<title>[\d.]+-[\d.]+: (\d+)</title>", plot)]
    assert sum(counts) == 7


def test_empty_data_still_draws_a_sized_plot() -> None:
    for plot in (
        svg.bar_chart([], "causes"),
        svg.histogram([], "latency", "s"),
        svg.stacked_columns([], [], "states"),
        svg.strip_plot([], "stragglers", "busbw"),
    ):
        root = _parse(plot)
        assert int(root.get("width")) > 0 and int(root.get("height")) > 0
        assert "no data" in str(plot)
