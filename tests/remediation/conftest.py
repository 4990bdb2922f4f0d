"""The remediation tests' settings: the session's dev server, a database of the test's own."""

from __future__ import annotations

import pytest

from fleetctl.config import Settings


@pytest.fixture
def fleet_settings(make_settings, sqlite_url) -> Settings:
    return make_settings(sqlite_url)
