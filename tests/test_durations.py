"""fleetctl.durations: the one parser of durations, for CLI options and runbook parameters."""

from __future__ import annotations

import pytest

from fleetctl.durations import MAX_SECONDS, parse_duration, parse_seconds


@pytest.mark.parametrize(
    "value, seconds",
    [
        ("30s", 30),
        ("15m", 900),
        ("2h", 7200),
        ("7d", 604800),
        ("1h30m", 5400),
        ("1.5m", 90),
        (" 5M ", 300),
        ("15 m", 900),
        ("90", 90),
        (90, 90),
        (0.5, 0.5),
        ("366d", MAX_SECONDS),
    ],
)
def test_accepted(value, seconds) -> None:
    assert parse_seconds(value) == seconds
    assert parse_duration(value).total_seconds() == seconds


@pytest.mark.parametrize(
    "value",
    [
        "",
        "soon",
        "m5",
        "5x",
        "1h 30m",
        "-5s",
        "0s",
        "0",
        0,
        -1,
        True,
        None,
        float("nan"),
        float("inf"),
        "367d",
        10**12,
        "1e3s",
        [5],
    ],
)
def test_refused_on_one_line(value) -> None:
    with pytest.raises(ValueError) as refused:
        parse_duration(value)
    assert "\n" not in str(refused.value) and "bad duration" in str(refused.value)
