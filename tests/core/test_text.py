"""fleetctl.text.one_line: what every error message from elsewhere is reduced to."""

from __future__ import annotations

import pytest

from fleetctl.text import MAX_TEXT, bounded, one_line


@pytest.mark.parametrize(
    "error, line",
    [
        ("plain", "plain"),
        ("two\nlines\r\n\tand  tabs ", "two lines and tabs"),
        ("\x1b[2Jcleared\x07", "\\x1b[2Jcleared\\x07"),
        ("c1 \x9b control", "c1 \\x9b control"),
        (ValueError("bad\nvalue"), "bad value"),
        (TimeoutError(), "TimeoutError"),
        ("", ""),
        ("x" * 400, "x" * 299 + "…"),
    ],
)
def test_one_line(error, line) -> None:
    assert one_line(error) == line


def test_limit() -> None:
    assert one_line("abcdef", limit=4) == "abc…"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("fallen off the bus", "fallen off the bus"),
        ("lone \ud800 surrogate", "lone \ufffd surrogate"),  # JSON's "\ud800" decodes to this
        ("pair \ud83d\ude00 split", "pair \ufffd\ufffd split"),  # surrogates as code points, never a pair
        ("\x1b]0;title\x07 kept", "\x1b]0;title\x07 kept"),  # evidence: escaped only where shown
        ("", ""),
    ],
)
def test_bounded_replaces_what_cannot_be_encoded(text: str, expected: str) -> None:
    assert bounded(text) == expected
    bounded(text).encode("utf-8")


def test_bounded_cuts_at_the_one_limit_and_marks_the_cut() -> None:
    assert bounded("x" * MAX_TEXT) == "x" * MAX_TEXT
    cut = bounded("x" * (MAX_TEXT + 1))
    assert len(cut) == MAX_TEXT and cut.endswith("…")
    assert bounded("abcdef", limit=4) == "abc…"
