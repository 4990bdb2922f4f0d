from __future__ import annotations

import pytest

from tests.support.fixtures import fixture_text


@pytest.fixture
def fixture():
    return fixture_text
