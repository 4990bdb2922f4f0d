"""A fault of a GB200 NVL72 domain's fabric holds the whole domain, on the simulated fleet:
one tray's IMEX daemon fails; the sweep's `quick` suite finds it (that tray
fails host-services, the domain's other trays fail `imex`: they see it UNAVAILABLE); the guard
grants the domain as one request, a grant per tray, and every tray of that domain leaves
production while the other domain keeps serving; no restart is placed on the held domain; and
the trays that report the same fault after the domain is held are neither a second cost nor
a storm. The workflow's order on fakes: tests/workflows/test_nvlink_domain_hold.py; the
guard's counting: tests/remediation/test_nvlink_domain_guard.py."""

from __future__ import annotations

import uuid

import pytest

from fleetctl.db import queries
from fleetctl.db.jobs import held_nvlink_domains
from fleetctl.workflows.api import SweepInput
from fleetctl.workflows.client import guard_status
from fleetctl.workflows.definitions.active_checks import ActiveCheckSweep
from tests.support.sim_fleet import fleet_in_production
from tests.support.worker import WorkerThread

pytestmark = pytest.mark.temporal

OUT = {"draining", "maintenance"}


@pytest.fixture
def worker_settings(make_settings, sqlite_url):
    settings = make_settings(sqlite_url)
    settings.guard_max_unavailable_fleet = 0.5  # six trays: one domain of three may go
    worker = WorkerThread(settings).start()
    yield settings
    worker.stop()


async def test_an_imex_fault_found_by_a_sweep_holds_its_whole_domain_and_nothing_else(worker_settings) -> None:
    fleet = await fleet_in_production(worker_settings, 6, "gb200", racks=2)  # two NVL72 domains of three trays
    domain_of = {n: queries.get_node(fleet.engine, n).nvlink_domain for n in fleet.names}
    held_domain, serving_domain = sorted(set(domain_of.values()))
    held = [n for n in fleet.names if domain_of[n] == held_domain]
    serving = [n for n in fleet.names if domain_of[n] == serving_domain]
    down = held[0]
    fleet.inject(down, "imex-down")

    result = await fleet.client.execute_workflow(
        ActiveCheckSweep.run,
        SweepInput(suite="quick", max_concurrent=6, fleet=worker_settings.fleet),
        id=f"sweep-{uuid.uuid4().hex[:8]}",
        task_queue=worker_settings.task_queue,
    )

    decisions = [(e.kind, e.node_name, e.reason) for e in queries.automation_events(fleet.engine, limit=100)]
    assert set(result.failed) == set(held) and set(held) <= set(result.drained), (result, decisions)
    states = await fleet.wait_states(held, OUT)
    assert set(states.values()) <= OUT
    assert {fleet.state(n) for n in serving} == {"production"}
    # The domain went as one request, with a grant for each of its trays.
    grants = [e for e in queries.automation_events(fleet.engine, limit=100) if e.kind == "grant"]
    (domain_grant,) = [e for e in grants if f"within the fleet limit (NVLink domain {held_domain}: " in e.reason]
    assert "imex" in domain_grant.reason and domain_grant.node_name in held[1:]
    # A tray that found the fault again got the grant it had (one fault, asked twice), nothing more.
    assert all(
        "already granted with NVLink domain" in e.reason
        for e in grants
        if e is not domain_grant and f"NVLink domain {held_domain}" in e.reason
    )
    # The trays held with it (neither the finder nor the faulted tray's own drain) say why: the
    # domain's hold, or, for a tray whose own check found the fault and whose drain on the grant
    # it had landed first, that finding.
    for tray in held:
        drain = await fleet.wait_event(tray, "drain")
        assert drain.actor_kind == "automation"
        if tray not in (down, domain_grant.node_name):
            assert drain.cause.startswith(
                (
                    f"NVLink domain {held_domain} held: its fabric failed on "
                    f"{domain_grant.node_name}: active check quick: imex: ",
                    "active check quick: imex: ",
                )
            ), drain.cause
    # One fault: the trays that found it again were no storm.
    assert not (await guard_status(fleet.client, worker_settings)).breaker_open
    # No restart is placed on the held domain; the other one takes work.
    assert held_nvlink_domains(fleet.engine) == {held_domain}
