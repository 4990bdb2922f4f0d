"""Time as operators type and read it. Pure.

Durations as operators type them: 30s, 5m, 1h, 7d, 1h30m, 1.5m; a bare number is seconds
(YAML gives a runbook's `timeout: 900` as a number): the one parser for the CLI's options and
the runbooks' parameters. Instants as the databases give them back (`as_utc`) and as every
table and report prints them (`when`)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_SECONDS = re.compile(r"\d+(?:\.\d+)?")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# Longer than any wait, timeout or window fleetctl has a use for; beyond it a typo (10000d)
# would overflow timedelta or hold a workflow for years.
MAX_SECONDS = 366 * 86400
_HINT = "use e.g. 30s, 5m, 1h, 7d or 1h30m"


def parse_duration(value: str | int | float) -> timedelta:
    """A positive duration of at most a year, or ValueError naming the input on one line."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"bad duration {value!r} ({_HINT})")
    if isinstance(value, str):
        text = value.strip().lower()
        if _SECONDS.fullmatch(text):
            seconds = float(text)
        else:
            pos, seconds = 0, 0.0
            for match in _PART.finditer(text):
                if match.start() != pos:
                    break
                seconds += float(match[1]) * _UNITS[match[2]]
                pos = match.end()
            if pos != len(text) or not text:
                raise ValueError(f"bad duration {value!r} ({_HINT})")
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_SECONDS:
        raise ValueError(f"bad duration {value!r} (more than 0 and at most {MAX_SECONDS // 86400}d; {_HINT})")
    return timedelta(seconds=seconds)


def parse_seconds(value: str | int | float) -> float:
    """`parse_duration` in seconds, for what travels as a number (activity parameters)."""
    return parse_duration(value).total_seconds()


def as_utc(value: datetime) -> datetime:
    """SQLite gives back naive datetimes (stored as UTC), PostgreSQL aware ones."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def when(at: Any) -> str:
    """A time for a human, in every table the same way: UTC to the second. `at` is a datetime,
    or ISO 8601 text as a record keeps one (an RMA's evidence, a report's rows)."""
    if at is None or at == "":
        return ""
    if isinstance(at, str):
        at = datetime.fromisoformat(at.replace("Z", "+00:00"))
    return f"{as_utc(at):%Y-%m-%d %H:%M:%S}"
