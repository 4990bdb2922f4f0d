"""KubernetesScheduler against an in-memory API server (kmock) over real HTTP.

Only the API server is emulated (none can run here); the official client, HTTP, JSON
patches and error answers are real. See kube_emulator.py for what the emulator adds.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import kmock
import pytest

from fleetctl.db.engine import get_engine
from fleetctl.schedulers.base import FleetctlDoesNotOwnDrain, ListsWorkloads, SchedulerError, SchedulerJob, work_on_node
from fleetctl.schedulers.combined import CombinedScheduler
from fleetctl.schedulers.kubernetes import REASON_ANNOTATION, STATE_KEY, KubernetesScheduler
from fleetctl.sim.scheduler import SimScheduler
from tests.schedulers.kube_emulator import NODES, KubeEmulator
from tests.support.jobs import sim_fleet

STATE_TAINT = {"key": STATE_KEY, "value": "draining", "effect": "NoSchedule"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        yield emulator


@pytest.fixture
def scheduler(kube: KubeEmulator) -> KubernetesScheduler:
    return KubernetesScheduler(host=kube.url, eviction_attempts=4, eviction_backoff_s=0.01)


def test_drain_cordons_taints_labels_and_records_the_reason(kube: KubeEmulator, scheduler: KubernetesScheduler) -> None:
    kube.add_node("gpu-1", taints=[GPU_TAINT])

    scheduler.drain("gpu-1", "XID 79 on GPU 3")

    node = kube.node("gpu-1")
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [GPU_TAINT, STATE_TAINT]
    assert node["metadata"]["labels"][STATE_KEY] == "draining"
    assert node["metadata"]["annotations"][REASON_ANNOTATION] == "fleetctl: XID 79 on GPU 3"
    state = scheduler.node_state("gpu-1")
    assert (state.state, state.drained, state.owned_by_fleetctl) == ("cordoned", True, True)
    assert state.reason == "fleetctl: XID 79 on GPU 3"


def test_the_drain_reason_reaches_the_node_on_one_line_with_control_characters_escaped(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    kube.add_node("gpu-1")
    scheduler.drain("gpu-1", "XID 79\n\x1b[2J\x1b]0;owned\x07 \u202egpu \x00" + "X" * 10_000)
    reason = kube.node("gpu-1")["metadata"]["annotations"][REASON_ANNOTATION]
    assert reason.startswith("fleetctl: XID 79 \\x1b[2J\\x1b]0;owned\\x07 \\u202egpu \ufffdXXX")
    assert reason.isprintable() and len(reason) <= 2048
    assert scheduler.node_state("gpu-1").owned_by_fleetctl


def test_drain_again_moves_the_state_taint_instead_of_adding_one(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    kube.add_node("gpu-1")
    scheduler.drain("gpu-1", "fleetctl: burn-in failed")
    scheduler.drain("gpu-1", "remediation", state="maintenance")

    node = kube.node("gpu-1")
    assert node["spec"]["taints"] == [{"key": STATE_KEY, "value": "maintenance", "effect": "NoSchedule"}]
    assert node["metadata"]["labels"][STATE_KEY] == "maintenance"
    assert node["metadata"]["annotations"][REASON_ANNOTATION] == "fleetctl: remediation"


def test_resume_lifts_fleetctls_cordon_and_keeps_other_taints(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    kube.add_node("gpu-1", taints=[GPU_TAINT])
    scheduler.drain("gpu-1", "recheck")

    scheduler.resume("gpu-1")

    node = kube.node("gpu-1")
    assert "unschedulable" not in node["spec"]
    assert node["spec"]["taints"] == [GPU_TAINT]
    assert REASON_ANNOTATION not in node["metadata"]["annotations"]
    assert node["metadata"]["labels"][STATE_KEY] == "production"
    assert scheduler.node_state("gpu-1").state == "idle"


def test_resume_refuses_a_node_someone_else_cordoned(kube: KubeEmulator, scheduler: KubernetesScheduler) -> None:
    kube.add_node("gpu-1", unschedulable=True, annotations={REASON_ANNOTATION: "rack power work"})

    with pytest.raises(FleetctlDoesNotOwnDrain, match="cordoned by someone else"):
        scheduler.resume("gpu-1")
    assert kube.node("gpu-1")["spec"]["unschedulable"] is True

    scheduler.resume("gpu-1", force=True)
    assert "unschedulable" not in kube.node("gpu-1")["spec"]


def test_drain_leaves_an_operators_cordon_theirs(kube: KubeEmulator, scheduler: KubernetesScheduler) -> None:
    kube.add_node("gpu-1", unschedulable=True)

    scheduler.drain("gpu-1", "XID 48")

    node = kube.node("gpu-1")
    assert node["spec"]["taints"] == [STATE_TAINT]
    assert REASON_ANNOTATION not in node["metadata"]["annotations"]
    assert scheduler.node_state("gpu-1").owned_by_fleetctl is False
    with pytest.raises(FleetctlDoesNotOwnDrain):
        scheduler.resume("gpu-1")


def test_node_state_reads_readiness_and_pods(kube: KubeEmulator, scheduler: KubernetesScheduler) -> None:
    kube.add_node("gpu-1")
    kube.add_node("gpu-2")
    kube.add_node("gpu-3", ready=False)
    kube.add_pod("kube-system", "dcgm-exporter-a", "gpu-1", owner_kind="DaemonSet")
    kube.add_pod("train", "llm-0", "gpu-2", labels={"job-name": "llm"})

    assert scheduler.node_state("gpu-1").state == "idle"  # a DaemonSet pod is not a workload
    assert scheduler.node_state("gpu-2").state == "allocated"
    assert scheduler.node_state("gpu-3").state == "down"


def test_busy_nodes_are_those_with_a_live_workload_pod_labelled_or_not(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    for node in ("gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5"):
        kube.add_node(node)
    kube.add_pod("kube-system", "dcgm-exporter-a", "gpu-1", owner_kind="DaemonSet")  # not a workload
    kube.add_pod("train", "llm-0", "gpu-2", labels={"job-name": "llm"})
    kube.add_pod("serve", "vllm-7f9c", "gpu-3")  # an inference pod no job label names
    kube.add_pod("train", "done-0", "gpu-4", labels={"job-name": "done"}, phase="Succeeded")
    kube.add_pod("train", "bert-0", "gpu-5", labels={"job-name": "bert"}, phase="Pending")  # bound, starting

    assert scheduler.busy_nodes() == {"gpu-2", "gpu-3", "gpu-5"}


def test_a_nodes_workloads_are_its_live_pods_labelled_or_not(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    """What a check's hold reads after cordoning (workflows.activities.node.hold_in_scheduler):
    an inference pod no job label names is work the check must not run under."""
    for node in ("gpu-1", "gpu-2"):
        kube.add_node(node)
    kube.add_pod("kube-system", "dcgm-exporter-a", "gpu-1", owner_kind="DaemonSet")  # not a workload
    kube.add_pod("serve", "vllm-7f9c", "gpu-1")
    kube.add_pod("train", "llm-0", "gpu-1", labels={"job-name": "llm"})
    kube.add_pod("train", "done-0", "gpu-1", labels={"job-name": "done"}, phase="Succeeded")
    kube.add_pod("train", "bert-0", "gpu-2", labels={"job-name": "bert"})

    assert scheduler.workloads_on_node("gpu-1") == ["serve/vllm-7f9c", "train/llm-0"]
    assert isinstance(scheduler, ListsWorkloads)


def test_a_node_two_schedulers_run_has_the_work_of_both(
    kube: KubeEmulator, scheduler: KubernetesScheduler, sqlite_url
) -> None:
    """A node several schedulers run (fleetctl.schedulers.combined): a check's hold reads one
    member's jobs and the other's pods, job or not."""
    engine = get_engine(sqlite_url)
    sim_fleet(engine, ["gpu-1"])
    kube.add_node("gpu-1")
    kube.add_pod("serve", "vllm-7f9c", "gpu-1")
    sim = SimScheduler(engine)
    job = sim.submit("train", node_count=1)
    both = CombinedScheduler([("sim", sim), ("kubernetes", scheduler)])

    assert both.workloads_on_node("gpu-1") == sorted([job.job_id, "serve/vllm-7f9c"])
    assert work_on_node(sim, "gpu-1") == [job.job_id]  # one that lists no workloads: its running jobs


def test_jobs_on_node_lists_only_that_nodes_pods_and_spans_all_job_nodes(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    for node in ("gpu-1", "gpu-2", "gpu-3"):
        kube.add_node(node)
    kube.add_pod("train", "llm-0", "gpu-1", labels={"fleetctl.io/job": "llm"})
    kube.add_pod("train", "llm-1", "gpu-2", labels={"fleetctl.io/job": "llm"})
    kube.add_pod("train", "bert-0", "gpu-1", labels={"job-name": "bert"}, phase="Pending")
    kube.add_pod("train", "vit-0", "gpu-3", labels={"job-name": "vit"})
    kube.add_pod("default", "debug-shell", "gpu-1")

    assert scheduler.jobs_on_node("gpu-1") == [
        SchedulerJob(job_id="train/bert", name="bert", state="pending", nodes=("gpu-1",)),
        SchedulerJob(job_id="train/llm", name="llm", state="running", nodes=("gpu-1", "gpu-2")),
    ]
    assert scheduler.jobs_on_node("gpu-2") == [
        SchedulerJob(job_id="train/llm", name="llm", state="running", nodes=("gpu-1", "gpu-2"))
    ]


def test_job_state_from_pod_phases_and_unknown_job(kube: KubeEmulator, scheduler: KubernetesScheduler) -> None:
    kube.add_pod("train", "done-0", "gpu-1", labels={"job-name": "done"}, phase="Succeeded")
    kube.add_pod("train", "broken-0", "gpu-1", labels={"job-name": "broken"}, phase="Failed")
    kube.add_pod("train", "broken-1", "gpu-2", labels={"job-name": "broken"}, phase="Succeeded")

    assert scheduler.job("train/done").state == "completed"
    assert scheduler.job("train/broken").state == "failed"
    with pytest.raises(SchedulerError, match="no pods labelled"):
        scheduler.job("train/missing")
    with pytest.raises(SchedulerError, match="not namespace/name"):
        scheduler.job("missing")


def test_drain_pods_evicts_workloads_and_skips_daemonset_pods(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    kube.add_node("gpu-1")
    kube.add_pod("train", "llm-0", "gpu-1", labels={"job-name": "llm"})
    kube.add_pod("train", "notebook", "gpu-1")
    kube.add_pod("kube-system", "dcgm-exporter-a", "gpu-1", owner_kind="DaemonSet")

    progress = scheduler.drain_pods("gpu-1")

    assert progress.done and progress.evicted == ("train/llm-0", "train/notebook")
    assert progress.left == ("kube-system/dcgm-exporter-a: DaemonSet pod",)
    assert sorted(kube.eviction_requests) == ["train/llm-0", "train/notebook"]
    assert not kube.pod_exists("train", "llm-0")
    assert kube.pod_exists("kube-system", "dcgm-exporter-a")


def test_eviction_a_pdb_keeps_refusing_is_retried_then_reported_by_name(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    kube.add_node("gpu-1")
    for name in ("llm-0", "llm-1", "llm-2"):
        kube.add_pod("train", name, "gpu-1", labels={"job-name": "llm"})
    kube.block_eviction("train", "llm-0")
    kube.block_eviction("train", "llm-2")

    progress = scheduler.drain_pods("gpu-1")

    assert progress.holding == (
        "train/llm-0: PodDisruptionBudget train/scripted-budget allows no disruption",
        "train/llm-2: PodDisruptionBudget train/scripted-budget allows no disruption",
    )
    assert progress.evicted == ("train/llm-1",) and not progress.done
    assert kube.eviction_requests.count("train/llm-0") == 4
    assert kube.eviction_requests.count("train/llm-1") == 1
    assert not kube.pod_exists("train", "llm-1")


def test_eviction_succeeds_once_the_pdb_allows_it(kube: KubeEmulator, scheduler: KubernetesScheduler) -> None:
    kube.add_node("gpu-1")
    kube.add_pod("train", "llm-0", "gpu-1", labels={"job-name": "llm"})
    kube.block_eviction("train", "llm-0", attempts=2)

    assert scheduler.drain_pods("gpu-1").done

    assert kube.eviction_requests == ["train/llm-0"] * 3
    assert not kube.pod_exists("train", "llm-0")


def test_restart_job_evicts_all_its_live_pods(kube: KubeEmulator, scheduler: KubernetesScheduler) -> None:
    kube.add_node("gpu-1")
    kube.add_node("gpu-2")
    kube.add_pod("train", "llm-0", "gpu-1", labels={"job-name": "llm"})
    kube.add_pod("train", "llm-1", "gpu-2", labels={"job-name": "llm"})
    kube.add_pod("train", "llm-old", "gpu-2", labels={"job-name": "llm"}, phase="Failed")
    kube.add_pod("train", "other-0", "gpu-1", labels={"job-name": "other"})

    with pytest.raises(SchedulerError, match="drain gpu-1 first"):
        scheduler.restart_job("train/llm", exclude_nodes=["gpu-1"])
    assert kube.eviction_requests == []

    scheduler.drain("gpu-1", "XID 79")
    scheduler.restart_job("train/llm", exclude_nodes=["gpu-1"])

    assert sorted(kube.eviction_requests) == ["train/llm-0", "train/llm-1"]
    assert kube.pod_exists("train", "other-0")


def test_api_server_error_becomes_a_one_line_scheduler_error(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    kube.add_node("gpu-1")
    kube.handler["patch", NODES] << kmock.KubernetesError(
        status=500, reason="InternalError", message="etcdserver: request timed out"
    )

    with pytest.raises(SchedulerError) as raised:
        scheduler.drain("gpu-1", "XID 79")

    assert str(raised.value) == (
        "kubernetes: drain node gpu-1: HTTP 500 Internal Server Error: etcdserver: request timed out"
    )


def test_unreachable_api_server_becomes_a_scheduler_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    scheduler = KubernetesScheduler(host=f"http://127.0.0.1:{closed_port}")

    with pytest.raises(
        SchedulerError, match=r"^kubernetes: read node gpu-1: API server unreachable .*refused"
    ) as raised:
        scheduler.node_state("gpu-1")
    assert "\n" not in str(raised.value)


def test_invalid_node_name_never_reaches_a_selector(scheduler: KubernetesScheduler) -> None:
    with pytest.raises(SchedulerError, match="invalid node name"):
        scheduler.jobs_on_node("gpu-1,metadata.name=x")


def test_connects_through_a_kubeconfig(kube: KubeEmulator, tmp_path: Path) -> None:
    kubeconfig = kube.write_kubeconfig(tmp_path / "config", user="ops", context="fleet")
    kube.add_node("gpu-1")

    assert KubernetesScheduler(kubeconfig=str(kubeconfig), context="fleet").node_state("gpu-1").state == "idle"
    with pytest.raises(SchedulerError, match="cannot load kubeconfig"):
        KubernetesScheduler(kubeconfig=str(tmp_path / "missing")).node_state("gpu-1")


def test_importing_the_adapter_does_not_import_kubernetes() -> None:
    probe = "import sys, fleetctl.schedulers.kubernetes; print('kubernetes' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
