"""A restart through Kubernetes, which cannot be told to keep a job off a node: while an
unfit node is open to its scheduler the restart evicts nothing and says why; once the node
is cordoned it goes ahead. The real adapter against the API server emulator, the real
database; the activity run as a worker runs it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from fleetctl.db import jobs, queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import AutomationEvent
from fleetctl.schedulers.base import SchedulerError
from fleetctl.schedulers.kubernetes import KubernetesScheduler
from fleetctl.workflows.activities.jobs import JobRestartActivities
from fleetctl.workflows.activities.schedulers import SchedulerRegistry
from fleetctl.workflows.api import RestartJob
from tests.schedulers.kube_emulator import KubeEmulator
from tests.support.jobs import sim_fleet


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        yield emulator


def test_a_kubernetes_restart_waits_while_an_unfit_node_is_schedulable(
    kube: KubeEmulator, make_settings, sqlite_url, tmp_path: Path
) -> None:
    settings = make_settings(sqlite_url)
    settings.kubeconfig = str(kube.write_kubeconfig(tmp_path / "kubeconfig"))
    engine = get_engine(sqlite_url)
    sim_fleet(engine, ["gpu-1", "gpu-2", "gpu-3"], scheduler="kubernetes")
    for node in ("gpu-1", "gpu-2", "gpu-3"):
        kube.add_node(node)
    kube.add_pod("train", "llm-0", "gpu-1", labels={"job-name": "llm"})
    key = f"test/gpu-2/suspect/{uuid.uuid4().hex[:6]}"
    queries.insert_once(
        engine,
        AutomationEvent(
            kind="suspect", node_name="gpu-2", actor="active-checks", reason="agent silent", idempotency_key=key
        ),
        AutomationEvent.idempotency_key,
        key,
    )
    adapter = KubernetesScheduler(kubeconfig=settings.kubeconfig)
    adapter.drain("gpu-1", "XID 79")  # as the restart's drain step leaves the bad node
    jobs.record_restart_started(
        engine,
        workflow_id="test",  # the ActivityEnvironment's workflow id keys the restart's row
        job_id="train/llm",
        scheduler="kubernetes",
        bad_nodes=["gpu-1"],
        cause="XID 79",
        actor="tester",
        restart_id="r",
        fault_seen_at=datetime.now(UTC),
    )
    activities = JobRestartActivities(settings, SchedulerRegistry(settings))
    restart = RestartJob("kubernetes", "train/llm", ["gpu-1"])

    with pytest.raises(SchedulerError) as refused:
        ActivityEnvironment().run(activities.restart_job, restart)

    assert str(refused.value) == (
        "restart of job train/llm: the kubernetes scheduler cannot be told to keep a job off a node, and would "
        "place it on unfit node gpu-2 (Suspect): the restart waits until each is cordoned or fit"
    )
    assert kube.eviction_requests == []  # the job's pod was left where it runs

    adapter.drain("gpu-2", "suspect")  # cordoned: Kubernetes keeps every pod off it now
    ActivityEnvironment().run(activities.restart_job, restart)

    assert kube.eviction_requests == ["train/llm-0"]
