"""fleetctl.text.one_line: what every error message from elsewhere is reduced to."""

from __future__ import annotations

import pytest

from fleetctl.text import one_line


@pytest.mark.parametrize("error, line", [
    ("plain", "plain"),
    ("two\nlines\r\n\tand  tabs ", "two lines and tabs"),
    ("\x1b[2Jcleared\x07", "\\x1b[2Jcleared\\x07"),
    ("c1 \x9b control", "c1 \\x9b control"),
    (ValueError("bad\nvalue"), "bad value"),
    (TimeoutError(), "TimeoutError"),
    ("", ""),
    ("x" * 400, "x" * 299 + "…"),
])
def test_one_line(error, line) -> None:
    assert one_line(error) == line


def test_limit() -> None:
    assert one_line("abcdef", limit=4) == "abc…"
