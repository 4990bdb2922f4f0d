"""A credential acts on its node: a GB200 tray's agent credential posting a fatal NVSwitch SXid
to the real `fleetctl events serve` takes that tray out of production and leaves the rest of
its NVLink domain serving; a second tray's credential reporting the same fault within the
window corroborates it, and the domain is held (fleetctl.nodes.capacity.domain_witnessed).
Real Temporal, worker, database and intake process."""

from __future__ import annotations

import asyncio
import signal
import uuid

import pytest

from fleetctl.db import queries
from fleetctl.intake import delivery, signals
from fleetctl.nodes.capacity import AGENT_SOURCE
from fleetctl.workflows.definitions.shared import MESSAGE, QUICK
from tests.intake.test_isolation import (
    SIGTERM_TO_EXIT_S,
    WORKFLOW_REACTION_S,
    credentials_for,
    intake_env,
    post_as,
    serve,
)
from tests.support.fleet import wait_for
from tests.support.sim_fleet import fleet_in_production
from tests.support.worker import WorkerThread, terminate_node_workflows

pytestmark = [pytest.mark.temporal, pytest.mark.slow]

# A fatal SXid as the Fabric Manager guide prints it (tests/agent/test_records.py reads the same line).
SXID_FATAL = "[131453.740743] nvidia-nvswitch0: SXid (PCI:0000:00:00.0): 20034, Fatal, Link 30 LTSSM Fault Up"
# From the 202 to the tray out of production: delivery, the node's recording, the guard's
# activities and Update, the domain's drains (each a MESSAGE), then its own transition.
POST_TO_OUT_S = (
    delivery.POLL_S
    + signals.SIGNAL_TIMEOUT_S
    + WORKFLOW_REACTION_S
    + 6 * QUICK["start_to_close_timeout"].total_seconds()
    + 2 * MESSAGE["start_to_close_timeout"].total_seconds()
)


def _sxid(node: str) -> dict:
    return {
        "node": node,
        "message": SXID_FATAL,
        "signature": "nvswitch_sxid_fatal",
        "severity": "critical",
        "id": f"sxid-{node}-{uuid.uuid4().hex[:6]}",
    }


async def test_one_trays_credential_takes_out_its_own_tray_and_a_second_tray_holds_the_domain(
    make_settings, sqlite_url, tmp_path, request
) -> None:
    settings = make_settings(sqlite_url)
    settings.guard_max_unavailable_fleet = 1.0  # the domain fits: only the credential's word keeps it in
    settings.guard_max_unavailable_rack = (
        1.0  # (the guard reads a fatal SXid, which has no Xid, as no critical evidence)
    )
    settings.guard_storm_fraction = 1.0
    worker = WorkerThread(settings).start()
    request.addfinalizer(worker.stop)
    fleet = await fleet_in_production(settings, 5, "gb200", racks=1)  # one NVL72 domain of five trays
    request.addfinalizer(lambda: asyncio.run(terminate_node_workflows(settings, fleet.names)))
    first, second, *rest = fleet.names
    secrets = credentials_for(tmp_path, fleet.names)
    proc, port = serve(intake_env(settings, tmp_path), tmp_path, "--credentials", str(tmp_path / "agents.hashes"))
    try:
        assert post_as(port, secrets[first], [_sxid(first)])["accepted"] == 1
        await wait_for(lambda: fleet.state(first) != "production", POST_TO_OUT_S, "the tray out of production")
        # The tray's own drain comes after any hold of its domain (hold_nvlink_domain): none was asked.
        assert {fleet.state(n) for n in (second, *rest)} == {"production"}
        assert [e.source for e in queries.health_events(fleet.engine, first)] == [AGENT_SOURCE]
        asked = {e.node_name for e in queries.automation_events(fleet.engine, limit=100)}
        assert asked == {first}, asked

        # A second tray's credential says the same within the window: the domain is held.
        assert post_as(port, secrets[second], [_sxid(second)])["accepted"] == 1
        await wait_for(
            lambda: all(fleet.state(n) != "production" for n in (second, *rest)),
            POST_TO_OUT_S,
            "the rest of the domain held",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(SIGTERM_TO_EXIT_S)
    held = [e for e in queries.node_events(fleet.engine, rest[0]) if e.to_state == "draining"]
    assert held and held[0].cause.startswith(f"NVLink domain nvl72-rack-01 held: its fabric failed on {second}")
