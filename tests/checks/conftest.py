from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "checks"


def fixture_text(relative: str) -> str:
    return (FIXTURES / relative).read_text()


@pytest.fixture
def fixture():
    return fixture_text
