"""The Kubernetes API refuses a drain: the real lifecycle against an API server in trouble.

Worker, NodeLifecycle workflows, database and the Kubernetes adapter are the real ones; the
adapter talks real HTTP, through the official client and a kubeconfig, to the in-memory
API server of tests/schedulers/kube_emulator.py. What is emulated is the API server's
answer: 500 to the cordon PATCH (etcd timing out behind it) and 429 to evictions that a
PodDisruptionBudget forbids.

- A cordon answered 500 is retried with backoff, each spent round is an automation event
  that `fleet status` shows, and the node stays in `draining` (never `maintenance`) until
  the API takes the cordon.
- A non-critical drain under a drain policy that waits for the job's namespace
  (`kube_drain_policy`) cordons and waits for the job to finish, so a pod its PDB protects
  is never disrupted, and the node reaches `maintenance` only once that pod's job is done.
- A critical drain (XID 79) taints NoExecute and restarts the node's jobs by evicting their
  pods; a PDB's 429 is retried with backoff until the eviction is allowed.
- At the end the node says where it is: label and taint value `maintenance`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.service import RPCError

from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.inventory.parse import NodeSpec
from fleetctl.schedulers.kubernetes import REASON_ANNOTATION, STATE_KEY
from fleetctl.workflows.api import HealthEventInput, job_restart_id, node_workflow_id
from fleetctl.workflows.client import connect, send_health_events
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from fleetctl.workflows.definitions.shared import QUICK, SCHEDULER
from tests.schedulers.kube_emulator import KubeEmulator
from tests.support.fleet import Cli, wait_for
from tests.support.worker import WorkerThread, start_in_production, terminate_node_workflows

pytestmark = pytest.mark.temporal

ETCD_TIMEOUT = "etcdserver: request timed out"
# The drain's look at a node's jobs, every POLL_S here instead of DRAIN_JOB_POLL; what the
# workflows allow one step of work (its start-to-close timeout), from where the presets live today.
POLL_S = 1.0
STEP_S = QUICK["start_to_close_timeout"].total_seconds()
SCHEDULER_STEP_S = SCHEDULER["start_to_close_timeout"].total_seconds()


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        yield emulator


@pytest.fixture
def k8s_settings(make_settings, sqlite_url, tmp_path: Path, kube: KubeEmulator):
    """Settings whose kubeconfig points at the emulator; no runbook, so a drained node waits in maintenance."""
    settings = make_settings(sqlite_url)
    settings.kubeconfig = str(kube.write_kubeconfig(tmp_path / "kubeconfig"))
    settings.runbooks_dir = str(tmp_path)
    return settings


async def production_node(settings, kube: KubeEmulator, name: str, retry_s: float = 1.0, **state):
    """A Kubernetes node in the inventory, the API server and production; its workflow retries
    refused cordons every `retry_s` instead of every minute (`state`: more such overrides)."""
    queries.upsert_nodes(
        get_engine(settings.db_url),
        [NodeSpec(name=name, address=f"sim://{name}", profile="h100-sxm", rack="rack-0", scheduler="kubernetes")],
    )
    kube.add_node(name)
    client = await connect(settings)
    await start_in_production(client, settings, name, scheduler_retry_s=retry_s, **state)
    # Entering production resumes the node in Kubernetes (a PATCH, one scheduler call): let it
    # land before any fault.
    await wait_for(
        lambda: kube.node(name)["metadata"]["labels"].get(STATE_KEY) == "production",
        SCHEDULER_STEP_S,
        "the node to be resumed in Kubernetes",
    )
    await wait_for(lambda: _idle(client, name), STEP_S, "the workflow to be idle")
    return client


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def shown_in(kube: KubeEmulator, name: str, state: str) -> bool:
    return kube.node(name)["metadata"]["labels"].get(STATE_KEY) == state


def assert_cordoned_by_fleetctl(kube: KubeEmulator, name: str, reason: str, effect: str = "NoSchedule") -> None:
    """Cordoned with fleetctl's reason, and shown in maintenance, where the drain took it."""
    node = kube.node(name)
    assert node["spec"].get("unschedulable") is True, node
    assert {"key": STATE_KEY, "value": "maintenance", "effect": effect} in node["spec"]["taints"], node
    assert node["metadata"]["labels"][STATE_KEY] == "maintenance", node
    assert (
        node["metadata"]["annotations"][REASON_ANNOTATION].startswith("fleetctl: ")
        and reason in node["metadata"]["annotations"][REASON_ANNOTATION]
    ), node


async def test_cordon_answered_500_is_retried_with_backoff_surfaced_and_completes(
    k8s_settings, kube: KubeEmulator
) -> None:
    settings, name = k8s_settings, unique("k8s-outage")
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    try:
        client = await production_node(settings, kube, name)
        # Two rounds of five cordon attempts refused (each round is one scheduler_error), then the API recovers.
        kube.fail_node_patches(status=500, attempts=10)
        before = len(kube.node_patches)  # the resume into production is not the drain's

        def patches(wanted: int) -> list[float]:
            return [at for at, node, status in kube.node_patches[before:] if node == name and status == wanted]

        def refused() -> list[float]:
            return patches(500)

        xid79 = HealthEventInput(
            name, "xid", 79, "GPU has fallen off the bus", f"dmesg-watcher@{name}", f"{name}-xid79", time.time()
        )
        await send_health_events(client, name, [xid79])

        def scheduler_errors() -> list:
            return [
                e
                for e in queries.automation_events(engine, limit=50)
                if e.kind == "scheduler_error" and e.node_name == name
            ]

        await wait_for(lambda: bool(scheduler_errors()), 30, "a round of refused cordons")
        # Backoff within a round: the gaps between refused PATCHes grow (1, 2, 4, 8 s).
        times = refused()[:5]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert len(gaps) == 4 and all(0.8 * 2**i <= gap for i, gap in enumerate(gaps)), gaps
        assert queries.get_node(engine, name).state == "draining"  # not moved on as if it had worked
        assert not kube.node(name)["spec"].get("unschedulable")
        error = scheduler_errors()[0].reason
        assert "HTTP 500" in error and ETCD_TIMEOUT in error, error
        cli = Cli(settings)
        status = await asyncio.to_thread(cli, "fleet", "status", "-o", "json")
        assert status.exit_code == 0, status.output
        assert any(
            e["kind"] == "scheduler_error" and e["node"] == name and ETCD_TIMEOUT in e["reason"]
            for e in json.loads(status.stdout)["recent_automation_events"]
        ), status.stdout
        current = await client.get_workflow_handle(node_workflow_id(name)).query(NodeLifecycle.current)
        assert current.activity.startswith("draining") and "scheduler refused the drain" in current.last_outcome

        await wait_for(lambda: len(scheduler_errors()) >= 2, 30, "a second round of refused cordons")
        assert queries.get_node(engine, name).state == "draining"

        def drained() -> bool:
            if queries.get_node(engine, name).state != "maintenance":
                return False
            # Reported drained only once the API server has taken the cordon.
            assert patches(200), kube.node_patches
            return True

        await wait_for(drained, 30, "the drain to complete")
        await wait_for(lambda: shown_in(kube, name, "maintenance"), STEP_S, "the node shown in maintenance")
    finally:
        worker.stop()
        await terminate_node_workflows(settings, [name])
    assert len(refused()) == 10
    accepted = patches(200)
    assert accepted and accepted[0] > refused()[-1]
    assert_cordoned_by_fleetctl(kube, name, "XID 79", effect="NoExecute")
    assert [e.trigger for e in queries.node_events(engine, name)][-2:] == ["drain", "drain_complete"]


async def test_drain_waits_for_a_pdb_protected_job_instead_of_evicting_it(k8s_settings, kube: KubeEmulator) -> None:
    settings, name = k8s_settings, unique("k8s-pdb")
    settings.kube_drain_policy = "namespace:training=wait"  # the default evicts (through the PDB)
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    try:
        client = await production_node(settings, kube, name, drain_job_poll_s=POLL_S)
        kube.add_pod("training", "llm-0", name, labels={"job-name": "llm"})
        kube.block_eviction("training", "llm-0")  # its PDB allows no disruption
        cli = Cli(settings)
        drained = await asyncio.to_thread(cli, "node", "drain", name, "--reason", "swap optics")
        assert drained.exit_code == 0, drained.output

        await wait_for(lambda: kube.node(name)["spec"].get("unschedulable") is True, 30, "the cordon")
        # The workflow has looked at the node's jobs, found llm and chosen to wait a poll for it.
        await wait_for(
            lambda: _waits_after_looking(client, name, ["training/llm"]),
            STEP_S,
            "the drain's first look at the node's jobs",
        )
        assert queries.get_node(engine, name).state == "draining"
        assert kube.pod_exists("training", "llm-0") and kube.eviction_requests == []
        # Nor was the job moved elsewhere: no JobRestart (it would evict) was started.
        assert not [
            e
            for e in await _history(client, name)
            if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
        ]

        kube.finish_pod("training", "llm-0")  # the job completes; the next look finds none
        await wait_for(
            lambda: queries.get_node(engine, name).state == "maintenance", POLL_S + STEP_S, "the drain to complete"
        )
        await wait_for(lambda: shown_in(kube, name, "maintenance"), STEP_S, "the node shown in maintenance")
    finally:
        worker.stop()
        await terminate_node_workflows(settings, [name])
    assert kube.eviction_requests == []  # the PDB-protected pod was never disrupted
    assert_cordoned_by_fleetctl(kube, name, "swap optics")
    assert [e.trigger for e in queries.node_events(engine, name)][-2:] == ["drain", "drain_complete"]


async def _history(client, name: str) -> list:
    return (await client.get_workflow_handle(node_workflow_id(name)).fetch_history()).events


async def _waits_after_looking(client, name: str, jobs: list[str]) -> bool:
    """The node's workflow history: a `running_jobs_on` answered `jobs`, then a timer (the
    drain's poll) started: it decided to wait."""
    activities: dict[int, str] = {}
    answered = False
    for event in await _history(client, name):
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activities[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = event.activity_task_completed_event_attributes
            if activities[done.scheduled_event_id] == "running_jobs_on":
                answered = json.loads(done.result.payloads[0].data) == jobs
        elif event.event_type == EventType.EVENT_TYPE_TIMER_STARTED and answered:
            return True
    return False


async def test_critical_drain_evicts_the_job_retrying_while_its_pdb_refuses(k8s_settings, kube: KubeEmulator) -> None:
    settings, name = k8s_settings, unique("k8s-evict")
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    restart_ids: list[str] = []
    try:
        client = await production_node(settings, kube, name)
        kube.add_pod("training", "llm-0", name, labels={"job-name": "llm"})
        kube.block_eviction("training", "llm-0", attempts=2)  # the PDB lets it go on the third try
        xid79 = HealthEventInput(
            name, "xid", 79, "GPU has fallen off the bus", f"dmesg-watcher@{name}", f"{name}-xid79", time.time()
        )
        await send_health_events(client, name, [xid79])

        await wait_for(lambda: not kube.pod_exists("training", "llm-0"), 40, "the pod to be evicted")
        await wait_for(lambda: queries.get_node(engine, name).state == "maintenance", 15, "the drain to complete")
        await wait_for(lambda: shown_in(kube, name, "maintenance"), STEP_S, "the node shown in maintenance")
        version = next(e.state_version for e in queries.node_events(engine, name) if e.trigger == "drain")
        restart_ids.append(job_restart_id("training/llm", f"{name}-v{version}"))
    finally:
        worker.stop()
        await terminate_node_workflows(settings, [name])
        for workflow_id in restart_ids:  # it waits for the job's controller, which the emulator lacks
            try:
                await (await connect(settings)).get_workflow_handle(workflow_id).terminate("test finished")
            except RPCError:
                pass
    attempts = [at for at, pod in kube.eviction_times if pod == "training/llm-0"]
    assert len(attempts) == 3, kube.eviction_requests  # refused, refused, allowed
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps[0] >= 1.6 and gaps[1] >= 3.2, gaps  # the adapter's backoff: 2 s, then 4 s
    assert_cordoned_by_fleetctl(kube, name, "XID 79", effect="NoExecute")


async def _activity(client, name: str, prefix: str) -> bool:
    current = await client.get_workflow_handle(node_workflow_id(name)).query(NodeLifecycle.current)
    return current.activity.startswith(prefix)


async def _idle(client, name: str) -> bool:
    current = await client.get_workflow_handle(node_workflow_id(name)).query(NodeLifecycle.current)
    return not current.work and not current.activity
