"""BMC fixtures: a real Redfish service (sushy_emulator.py) and a scripted one (redfish_stub.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bmc.redfish_stub import ScriptedRedfish
from tests.bmc.sushy_emulator import RedfishBmc, run_sushy_emulator


@pytest.fixture
def redfish_bmc(tmp_path: Path) -> Iterator[RedfishBmc]:
    """sushy-emulator (fake driver, basic auth) on a free port: base URL, system id, credentials."""
    with run_sushy_emulator(tmp_path) as bmc:
        yield bmc


@pytest.fixture
def scripted_redfish() -> Iterator[ScriptedRedfish]:
    """Canned Redfish answers for what the emulator lacks."""
    with ScriptedRedfish().serving() as stub:
        yield stub
