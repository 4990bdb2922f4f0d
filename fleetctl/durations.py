"""Durations as operators type them: 30s, 5m, 1h, 7d, 1h30m."""

from __future__ import annotations

import re
from datetime import timedelta

_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    text = text.strip().lower()
    pos, seconds = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        seconds += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text or seconds <= 0:
        raise ValueError(f"bad duration {text!r}: use e.g. 30s, 5m, 1h, 7d or 1h30m")
    return timedelta(seconds=seconds)
