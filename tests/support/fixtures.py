"""The real tool outputs the parsers are judged on (tests/fixtures/checks/, each cited in its
folder's SOURCES.md), read by the tests of every package that parses one."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "checks"


def fixture_text(relative: str) -> str:
    return (FIXTURES / relative).read_text()
