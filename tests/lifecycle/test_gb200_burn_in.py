"""GB200 NVL72 trays through burn-in and a sweep on the simulated fleet, beside HGX nodes in the
same run: the trays' IMEX domain is judged (imex in the suite), an HGX node is not judged by it
at all."""

from __future__ import annotations

import pytest

from fleetctl.checks.suites import load_suite
from fleetctl.db import queries
from fleetctl.db.jobs import held_nvlink_domains
from fleetctl.workflows.api import SweepInput
from fleetctl.workflows.client import ensure_node_workflows
from fleetctl.workflows.definitions.active_checks import ActiveCheckSweep
from tests.support.checks import recorded_checks
from tests.support.sim_fleet import make_fleet

pytestmark = pytest.mark.temporal

# As the other burn-in tests on the simulated fleet (instant checks): a bound on five nodes'
# burn-in run side by side on one worker.
BURN_IN_S = 120.0


async def test_gb200_trays_pass_burn_in_with_their_domain_and_hgx_nodes_are_not_judged_by_imex(sim_fleet) -> None:
    fleet = await sim_fleet(3, "gb200", racks=1)  # three trays of one rack: one NVL72 domain
    hgx = make_fleet(fleet.settings, 2, "h100-sxm", racks=1)
    await ensure_node_workflows(fleet.client, fleet.settings, [(n, "new", 0) for n in hgx])
    everyone = fleet.names + hgx
    await fleet.admit(everyone, suite="burn-in")
    states = await fleet.wait_states(everyone, {"production", "maintenance"}, timeout_s=BURN_IN_S)
    assert set(states.values()) == {"production"}, states
    (domain,) = {queries.get_node(fleet.engine, n).nvlink_domain for n in fleet.names}
    assert domain == "nvl72-rack-01"
    for tray in fleet.names:
        runs = {r.check_name: r for r in queries.latest_checks(fleet.engine, tray, limit=50)}
        assert set(runs) == set(load_suite("burn-in").checks)
        imex = runs["imex"]
        assert imex.status == "pass", imex.reason
        assert (imex.metrics["nodes"], imex.metrics["ready"], imex.metrics["domain_state"]) == (3, 3, "UP")
        # The tray's 4 GPUs, not HGX's 8: all-reduce and HPL ran on what the profile has.
        assert "nGpus 4" in runs["nccl-allreduce"].raw_output and runs["hpl"].metrics["ranks"] == 4
    assert held_nvlink_domains(fleet.engine) == set()
    for node in hgx:
        runs = {r.check_name for r in queries.latest_checks(fleet.engine, node, limit=50)}
        # Not run, not recorded: no imex row at all for an HGX node, passed or not.
        assert "imex" not in runs and runs == set(recorded_checks("burn-in", "h100-sxm"))
        events = queries.node_events(fleet.engine, node)
        assert events[-1].cause.startswith("admission: burn-in passed (") and events[-1].to_state == "production"


async def test_a_tray_whose_imex_is_down_fails_its_domain_in_burn_in(sim_fleet) -> None:
    """The faulted tray's own daemon is down (its host-services check fails first, before imex);
    the trays that reach their own daemons see it UNAVAILABLE and the domain DEGRADED: imex fails."""
    fleet = await sim_fleet(3, "gb200", racks=1)
    down, *others = fleet.names
    fleet.inject(down, "imex-down")
    await fleet.admit(fleet.names, suite="quick")
    for tray in others:
        failed = await fleet.wait_event(tray, "phase_failed", timeout_s=BURN_IN_S)
        assert failed.cause.startswith("burn-in: imex: fail: IMEX domain state DEGRADED"), failed.cause
    failed = await fleet.wait_event(down, "phase_failed", timeout_s=BURN_IN_S)
    assert failed.cause.startswith("burn-in: host-services: fail: nvidia-imex"), failed.cause
    # Its failed imex runs hold the domain: no restart is placed on any of its trays.
    assert held_nvlink_domains(fleet.engine) == {"nvl72-rack-01"}


async def test_a_sweep_fails_imex_on_the_trays_of_a_domain_with_imex_down_and_passes_hgx_over(sim_fleet) -> None:
    """In production, one tray's IMEX fails: a quick sweep fails `imex` on the trays that still
    reach their own daemon (domain DEGRADED), the faulted tray on its daemons (host-services), and
    passes the HGX nodes in the same sweep without running imex there."""
    fleet = await sim_fleet(4, "gb200", racks=1)
    hgx = make_fleet(fleet.settings, 2, "h100-sxm", racks=1)
    await ensure_node_workflows(fleet.client, fleet.settings, [(n, "new", 0) for n in hgx])
    everyone = fleet.names + hgx
    await fleet.admit(everyone)
    assert set((await fleet.wait_states(everyone, {"production", "maintenance"}, timeout_s=BURN_IN_S)).values()) == {
        "production"
    }
    down = fleet.names[0]
    fleet.inject(down, "imex-down")
    result = await fleet.client.execute_workflow(
        ActiveCheckSweep.run,
        SweepInput(suite="quick", max_concurrent=len(everyone), fleet=fleet.settings.fleet),
        id=f"sweep-{down}",
        task_queue=fleet.settings.task_queue,
    )
    assert down in result.failed and not set(hgx) & set(result.failed + result.errors)
    # Newest first: each check's run of the sweep, over its run at admission.
    latest = {
        n: {r.check_name: r for r in reversed(queries.latest_checks(fleet.engine, n, limit=50))} for n in everyone
    }
    assert latest[down]["host-services"].status == "fail"
    failed_imex = [n for n in fleet.names[1:] if n in result.failed]
    assert failed_imex, result
    for tray in failed_imex:
        imex = latest[tray]["imex"]
        assert imex.status == "fail" and imex.metrics["domain_state"] == "DEGRADED" and imex.metrics["ready"] == 3
    assert all("imex" not in latest[n] for n in hgx)
    assert held_nvlink_domains(fleet.engine) == {"nvl72-rack-01"}
