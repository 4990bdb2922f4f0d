"""The node's hold on the simulated scheduler, which places work as Slurm does (any node it
has not drained): an import holds every node new to fleetctl, so `reconcile` right after it
finds no schedulable new node and a job waits; a job that lands between a sweep's idleness
read and its hold makes that node's check `skipped` (not failed, not an error), and the node
is back in service at once; on Kubernetes, a pod no job label names is work too. The same on
the real Slurm cluster: tests/jobs/test_slurm_check_holds.py."""

from __future__ import annotations

import asyncio
import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from temporalio import activity
from temporalio.client import Client

from fleetctl.cli.output import EXIT_OPERATIONAL
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.schedulers.base import BURN_IN_HOLD, recheck_hold_reason
from fleetctl.schedulers.kubernetes import REASON_ANNOTATION
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.workflows.api import SweepInput, SweepScope
from fleetctl.workflows.client import request_phase
from fleetctl.workflows.definitions.active_checks import ActiveCheckSweep
from fleetctl.workflows.worker import activities_for, build_worker
from tests.fault_tolerance.test_kubernetes_outage import (
    SCHEDULER_STEP_S,
    _idle,
    k8s_settings,  # noqa: F401 - fixtures
    kube,  # noqa: F401
    production_node,
)
from tests.support.fleet import Cli, wait_for
from tests.support.jobs import sim_fleet
from tests.support.worker import WorkerThread, terminate_node_workflows

pytestmark = pytest.mark.temporal


async def test_an_import_holds_every_new_node_until_it_is_admitted(make_settings, sqlite_url, tmp_path) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    names = [f"imp-{uuid.uuid4().hex[:6]}-{i}" for i in range(3)]
    inventory = tmp_path / "new-fleet.yaml"
    inventory.write_text(
        "nodes:\n"
        + "".join(
            f"  - {{name: {n}, address: sim://{n}, rack: r1, profile: h100-sxm, scheduler: sim}}\n" for n in names
        )
    )
    cli = Cli(settings)
    try:
        imported = await asyncio.to_thread(cli, "node", "import", str(inventory))
        assert imported.exit_code == 0 and "3 created" in imported.stdout, imported.output
        sim = SimScheduler(engine)
        assert {n: (sim.node_state(n).state, sim.node_state(n).reason) for n in names} == dict.fromkeys(
            names, ("drain", BURN_IN_HOLD)
        )
        reconciled = await asyncio.to_thread(cli, "reconcile", "-o", "json")
        assert reconciled.exit_code == 0, reconciled.output
        assert json.loads(reconciled.stdout)["differences"] == []
        assert sim.submit("train", node_count=1).state == "pending"  # no node to take it
    finally:
        await terminate_node_workflows(settings, names)


async def test_an_import_says_which_new_node_its_scheduler_refused_to_hold_and_why(
    k8s_settings, kube, tmp_path, monkeypatch
) -> None:
    """The Kubernetes API server answers the import's hold: a node it knows is cordoned with
    the burn-in hold; one it does not know yet (imported before it joined the cluster) is
    refused, and the operator reads one line naming that node and the API server's answer;
    the import itself is done (both nodes imported, their workflows started) and exits 1."""
    settings = k8s_settings
    monkeypatch.setenv("KUBECONFIG", settings.kubeconfig)  # the CLI's, as an operator's shell has it
    engine = get_engine(settings.db_url)
    joined, not_yet = (f"imp-{word}-{uuid.uuid4().hex[:6]}" for word in ("joined", "absent"))
    kube.add_node(joined)
    inventory = tmp_path / "new-k8s-nodes.yaml"
    inventory.write_text(
        "nodes:\n"
        + "".join(
            f"  - {{name: {n}, address: sim://{n}, bmc: sim://{n}-bmc, rack: r1, profile: h100-sxm, scheduler: kubernetes}}\n"
            for n in (joined, not_yet)
        )
    )
    try:
        imported = await asyncio.to_thread(Cli(settings), "node", "import", str(inventory))
    finally:
        await terminate_node_workflows(settings, [joined, not_yet])
    assert imported.exit_code == EXIT_OPERATIONAL and "2 created" in imported.stdout, imported.output
    (said,) = imported.stderr.strip().splitlines()
    assert said.startswith(f"{not_yet}: not held in kubernetes: kubernetes: read node {not_yet}: "), said
    assert "404" in said and said.endswith("; admission holds it before any check"), said
    assert {queries.get_node(engine, n).state for n in (joined, not_yet)} == {"new"}
    node = kube.node(joined)
    assert node["spec"].get("unschedulable") is True
    assert node["metadata"]["annotations"][REASON_ANNOTATION].endswith(BURN_IN_HOLD), node["metadata"]


async def test_a_job_that_lands_between_the_idleness_read_and_the_hold_skips_the_check(
    make_settings, sqlite_url
) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    busy, idle = sim_fleet(engine, sorted(f"lnd-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)))
    sim = SimScheduler(engine)
    landed: list[str] = []
    client = await Client.connect(settings.temporal_address)
    activities = activities_for(settings, client)
    real_read = next(a for a in activities if getattr(a, "__name__", "") == "idle_production_nodes")

    @activity.defn(name="idle_production_nodes")
    def idle_then_a_job_lands(scope: SweepScope) -> list[str]:
        nodes = real_read(scope)
        # Right after the read, before any hold: the scheduler fills the first free node.
        landed.append(sim.submit("landed", node_count=1).job_id)
        return nodes

    activities = [idle_then_a_job_lands if a is real_read else a for a in activities]
    with ThreadPoolExecutor(16) as pool:
        async with build_worker(client, settings, pool, activities=activities):
            result = await client.execute_workflow(
                ActiveCheckSweep.run,
                SweepInput(suite="quick", max_concurrent=2, fleet=settings.fleet),
                id=f"landed-sweep-{busy}",
                task_queue=settings.task_queue,
            )

    (job_id,) = landed
    assert sim.job(job_id).nodes == (busy,)
    assert result.skipped == [busy] and (result.checked, result.passed) == (1, 1), result
    assert (result.failed, result.errors, result.drained, result.held) == ([], [], [], []), result
    assert queries.latest_checks(engine, busy) == []  # no check ran under the job
    assert queries.latest_checks(engine, idle)  # the idle one was checked...
    # ...and both are back in service: the skipped one at once, the checked one after its check.
    assert [sim.node_state(n).drained for n in (busy, idle)] == [False, False]
    assert [queries.get_node(engine, n).state for n in (busy, idle)] == ["production", "production"]
    (skipped,) = [e for e in queries.automation_events(engine, limit=50) if e.node_name == busy]
    assert (skipped.kind, skipped.reason) == (
        "check_skipped",
        f"active check quick: skipped: job {job_id} running on the node",
    )


async def test_a_sweep_never_checks_a_node_a_recheck_holds_nor_lifts_its_hold(make_settings, sqlite_url) -> None:
    """Two checks at once on one node disturb each other (two HPLs), and a sweep that lifted
    the recheck's hold when it ended would leave the recheck unfenced."""
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    (held,) = sim_fleet(engine, [f"rck-{uuid.uuid4().hex[:6]}"])
    sim = SimScheduler(engine)
    sim.drain(held, recheck_hold_reason("quick"))  # as a recheck in flight holds it
    client = await Client.connect(settings.temporal_address)
    with ThreadPoolExecutor(16) as pool:
        async with build_worker(client, settings, pool):
            result = await client.execute_workflow(
                ActiveCheckSweep.run,
                SweepInput(suite="quick", max_concurrent=2, fleet=settings.fleet),
                id=f"held-sweep-{held}",
                task_queue=settings.task_queue,
            )

    assert result.skipped == [held] and result.checked == 0, result
    assert queries.latest_checks(engine, held) == []
    assert (sim.node_state(held).drained, sim.node_state(held).reason) == (True, recheck_hold_reason("quick"))
    (skipped,) = [e for e in queries.automation_events(engine, limit=50) if e.node_name == held]
    assert skipped.reason == f"active check quick: skipped: held for another check ({recheck_hold_reason('quick')})"


async def test_a_recheck_on_kubernetes_is_skipped_for_a_pod_that_no_job_label_names(k8s_settings, kube) -> None:
    """Work on a Kubernetes node need not be a labelled job (an inference pod): the read after
    the cordon sees it, as the sweep's idleness read does, and the recheck is skipped."""
    settings, name = k8s_settings, f"k8s-hold-{uuid.uuid4().hex[:6]}"
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    try:
        client = await production_node(settings, kube, name)
        kube.add_pod("serve", "vllm-7f9c", name)
        _, accepted, message = await request_phase(client, name, "recheck", "tester", "quick")
        assert accepted, message
        await wait_for(lambda: _idle(client, name), SCHEDULER_STEP_S, "the recheck to end")
    finally:
        worker.stop()
        await terminate_node_workflows(settings, [name])
    (skipped,) = [e for e in queries.automation_events(engine, limit=50) if e.node_name == name]
    assert (skipped.kind, skipped.reason) == (
        "check_skipped",
        "recheck quick: skipped: job serve/vllm-7f9c running on the node",
    )
    assert queries.latest_checks(engine, name) == []
    node = kube.node(name)  # back in service: uncordoned, fleetctl's reason gone
    assert not node["spec"].get("unschedulable") and REASON_ANNOTATION not in node["metadata"].get("annotations", {})
    assert queries.get_node(engine, name).state == "production"
