"""A fleet with Slurm and Kubernetes nodes together, one of them a SUNK node.

The real 4-node Slurm cluster and the Kubernetes API emulator over real HTTP, the real
worker and workflows. node1 is a SUNK node: a Slurm node and a Kubernetes node of the same
name, whose slurmd pod is owned by the Slurm operator's NodeSet. gpu-k8s-1 is a plain
Kubernetes node with a training pod. An XID 79 on each drains node1 in Slurm and in
Kubernetes and requeues its Slurm job off it through Slurm, leaving the slurmd pod where it
is; gpu-k8s-1 is cordoned and its pod evicted. At the end both are in maintenance, and say so
in Kubernetes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.service import RPCError

from fleetctl.db import jobs, queries
from fleetctl.db.engine import get_engine
from fleetctl.inventory.parse import parse_inventory
from fleetctl.schedulers.base import REASON_PREFIX
from fleetctl.schedulers.kubernetes import STATE_KEY
from fleetctl.workflows.api import HealthEventInput, job_restart_id
from fleetctl.workflows.client import connect, send_health_events
from fleetctl.workflows.definitions.shared import QUICK
from tests.schedulers.kube_emulator import KubeEmulator
from tests.support.fleet import wait_for
from tests.support.worker import WorkerThread, start_in_production, terminate_node_workflows

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

SUNK_NODE, K8S_NODE = "node1", "gpu-k8s-1"
# One step of the workflows' work (an activity's start-to-close), from the presets.
STEP_S = QUICK["start_to_close_timeout"].total_seconds()


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        yield emulator


def inventory(slurm_nodes: tuple[str, ...]) -> str:
    # Every Slurm node in island ib-a but node3: left to itself Slurm would restart the job
    # on the lowest free names (node2, node3).
    entries = [
        f"  - {{name: {SUNK_NODE}, address: sim://{SUNK_NODE}, profile: h100-sxm, rack: r1, "
        "scheduler: [kubernetes, slurm], island: ib-a}\n"
    ]
    entries += [
        f"  - {{name: {n}, address: sim://{n}, profile: h100-sxm, rack: r1, scheduler: slurm, "
        f"island: {'ib-b' if n == 'node3' else 'ib-a'}}}\n"
        for n in slurm_nodes
        if n != SUNK_NODE
    ]
    entries.append(
        f"  - {{name: {K8S_NODE}, address: sim://{K8S_NODE}, profile: h100-sxm, rack: r2, scheduler: kubernetes}}\n"
    )
    return "nodes:\n" + "".join(entries)


async def test_xid79_on_a_sunk_node_and_a_kubernetes_node_drains_each_in_its_schedulers(
    slurm_cluster, kube: KubeEmulator, make_settings, sqlite_url, tmp_path: Path
) -> None:
    settings = make_settings(sqlite_url)
    settings.slurm_conf = str(slurm_cluster.conf_path)
    settings.kubeconfig = str(kube.write_kubeconfig(tmp_path / "kubeconfig"))
    settings.runbooks_dir = str(tmp_path)  # no runbook: a drained node waits in maintenance
    engine = get_engine(sqlite_url)
    specs = parse_inventory(inventory(slurm_cluster.node_names))
    assert next(s.scheduler for s in specs if s.name == SUNK_NODE) == "slurm+kubernetes"  # Slurm drains first
    queries.upsert_nodes(engine, specs)
    names = [s.name for s in specs]
    kube.add_node(SUNK_NODE)
    kube.add_pod(
        "slurm", "slurmd-node1", SUNK_NODE, owner_kind="NodeSet", owner_api_version="slinky.slurm.net/v1alpha1"
    )
    kube.add_node(K8S_NODE)
    kube.add_pod("training", "llm-0", K8S_NODE, labels={"job-name": "llm"})
    worker = WorkerThread(settings).start()
    client = await connect(settings)
    restarts: list[str] = []
    try:
        for name in names:
            await start_in_production(client, settings, name)
        await wait_for(
            lambda: all(
                kube.node(n)["metadata"]["labels"].get(STATE_KEY) == "production" for n in (SUNK_NODE, K8S_NODE)
            ),
            30,
            "both nodes resumed in Kubernetes",
        )

        job_id = slurm_cluster.submit_sleep_job("-N2", "-w", f"{SUNK_NODE},node2")
        assert slurm_cluster.wait_for_run(job_id, 0).nodes == (SUNK_NODE, "node2")
        for name in (SUNK_NODE, K8S_NODE):
            await send_health_events(
                client,
                name,
                [
                    HealthEventInput(
                        name, "xid", 79, "GPU has fallen off the bus.", "dmesg", f"mixed-xid79-{name}", time.time()
                    )
                ],
            )

        # The SUNK node's Slurm job runs again off it, requeued through Slurm.
        await wait_for(
            lambda: any(r.status == "succeeded" for r in jobs.job_restarts(engine, job_id)),
            90,
            "the Slurm job's restart",
        )
        rerun = slurm_cluster.wait_for_run(job_id, 1)
        assert rerun.nodes == ("node2", "node4")  # in the job's island, placed through Slurm
        (restart,) = jobs.job_restarts(engine, job_id)
        assert (restart.placement, restart.landed) == ("island", "island")
        # The Kubernetes node's pod is evicted.
        await wait_for(lambda: not kube.pod_exists("training", "llm-0"), 60, "the training pod's eviction")
        for name in (SUNK_NODE, K8S_NODE):
            await wait_for(
                lambda name=name: queries.get_node(engine, name).state == "maintenance", 30, f"{name} in maintenance"
            )
            await wait_for(
                lambda name=name: kube.node(name)["metadata"]["labels"].get(STATE_KEY) == "maintenance",
                STEP_S * 3,
                f"{name} shown in maintenance in Kubernetes",
            )
        # node1 is drained in Slurm too, with fleetctl's reason.
        in_slurm = slurm_cluster.scheduler().node_state(SUNK_NODE)
        assert in_slurm.drained and in_slurm.reason.startswith(REASON_PREFIX) and "XID 79" in in_slurm.reason
        version = next(e.state_version for e in queries.node_events(engine, K8S_NODE) if e.trigger == "drain")
        restarts.append(job_restart_id("training/llm", f"{K8S_NODE}-v{version}"))
    finally:
        worker.stop()
        await terminate_node_workflows(settings, names)
        for workflow_id in restarts:  # the pod's restart waits for its controller, which the emulator lacks
            try:
                await client.get_workflow_handle(workflow_id).terminate("test finished")
            except RPCError:
                pass
        slurm_cluster.reset()

    # node1 and gpu-k8s-1: cordoned in Kubernetes, NoExecute, for a critical fault.
    for name in (SUNK_NODE, K8S_NODE):
        node = kube.node(name)
        assert node["spec"].get("unschedulable") is True, node
        assert {"key": STATE_KEY, "value": "maintenance", "effect": "NoExecute"} in node["spec"]["taints"], node
    # The slurmd pod is the node itself, not work on it: never evicted.
    assert kube.pod_exists("slurm", "slurmd-node1")
    assert not [pod for _, pod in kube.eviction_times if pod.startswith("slurm/")]
