"""KubernetesScheduler drains as `kubectl drain` does, with fleetctl's judgement.

Against the in-memory API server over real HTTP (kube_emulator.py): PodDisruptionBudgets
are objects the emulator's eviction check reads as the API server does, the rate limit is
a 429 with Retry-After, and every request is logged as the RBAC permission it needs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetctl.schedulers.base import DrainsPods, ReportsNodeState, SchedulerError
from fleetctl.schedulers.kubernetes import RBAC_RULES, STATE_KEY, KubernetesScheduler
from fleetctl.schedulers.kubernetes_drain import DrainOptions, parse_drain_policy
from tests.schedulers.kube_emulator import NODES, PODS, KubeEmulator
from tests.support.services import missing_service

MIRROR = {"kubernetes.io/config.mirror": "0f1e2d"}


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        emulator.add_node("gpu-1")
        emulator.add_node("gpu-2")
        yield emulator


def scheduler_for(kube: KubeEmulator, **options: object) -> KubernetesScheduler:
    return KubernetesScheduler(
        host=kube.url, eviction_attempts=3, eviction_backoff_s=0.01, options=DrainOptions(**options)
    )  # type: ignore[arg-type]


@pytest.fixture
def scheduler(kube: KubeEmulator) -> KubernetesScheduler:
    return scheduler_for(kube)


def conditions(kube: KubeEmulator, node: str) -> dict[str, dict[str, str]]:
    return {c["type"]: c for c in kube.node(node)["status"]["conditions"]}


# -- what a drain leaves, and what holds it open ------------------------------------------


def test_infrastructure_do_not_evict_and_mirror_pods_are_left_and_hold_nothing(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    kube.add_pod("slurm", "slurmd-gpu-1", "gpu-1", owner_kind="NodeSet", owner_api_version="slinky.slurm.net/v1alpha1")
    kube.add_pod("kube-system", "dcgm-exporter-a", "gpu-1", owner_kind="DaemonSet")
    kube.add_pod("kube-system", "kube-proxy-gpu-1", "gpu-1", annotations=MIRROR)
    kube.add_pod("research", "pinned", "gpu-1", annotations={"fleetctl.io/do-not-evict": "true"})
    kube.add_pod("research", "loose", "gpu-1", annotations={"fleetctl.io/do-not-evict": "false"})

    progress = scheduler.drain_pods("gpu-1")

    assert progress.evicted == ("research/loose",)
    assert progress.left == (
        "kube-system/dcgm-exporter-a: DaemonSet pod",
        "kube-system/kube-proxy-gpu-1: mirror pod",
        "research/pinned: annotated fleetctl.io/do-not-evict",
        "slurm/slurmd-gpu-1: owned by NodeSet slurmd-gpu-1-owner",
    )
    assert progress.done and sorted(kube.eviction_requests) == ["research/loose"]


def test_a_nodeset_pod_is_the_nodes_infrastructure_not_work(kube: KubeEmulator) -> None:
    kube.add_pod("slurm", "slurmd-gpu-1", "gpu-1", owner_kind="NodeSet")
    kube.add_pod("slurm", "slurmd-gpu-2", "gpu-2", owner_kind="NodeSet")
    kube.add_pod("train", "llm-0", "gpu-2", labels={"job-name": "llm"})

    default = scheduler_for(kube)
    assert default.busy_nodes() == {"gpu-2"}
    assert default.node_state("gpu-1").state == "idle"
    # The owner kinds are configured: an operator that names another kind makes NodeSet pods work.
    other = scheduler_for(kube, infrastructure_owner_kinds=frozenset({"SlurmCluster"}))
    assert other.busy_nodes() == {"gpu-1", "gpu-2"}
    assert other.drain_pods("gpu-1").evicted == ("slurm/slurmd-gpu-1",)


def test_pods_without_a_job_label_hold_the_drain_open(kube: KubeEmulator) -> None:
    kube.add_pod("serve", "vllm-7f9c", "gpu-1")  # inference: no job label
    scheduler = scheduler_for(kube, policy=parse_drain_policy("namespace:serve=wait"))

    assert scheduler.jobs_on_node("gpu-1") == []  # not a job ...
    progress = scheduler.drain_pods("gpu-1")
    assert progress.holding == ("serve/vllm-7f9c: policy waits for it to complete",)  # ... but work
    assert not progress.done

    kube.finish_pod("serve", "vllm-7f9c")
    assert scheduler.drain_pods("gpu-1").done


def test_a_terminating_pod_holds_the_drain_and_is_not_evicted_again(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    kube.add_pod("train", "llm-0", "gpu-1", labels={"job-name": "llm"})
    kube.handler.objects[PODS, "train", "llm-0"].patch({"metadata": {"deletionTimestamp": "2026-11-30T21:00:00Z"}})

    progress = scheduler.drain_pods("gpu-1")

    assert progress.holding == ("train/llm-0: terminating",) and kube.eviction_requests == []


# -- the drain policy -----------------------------------------------------------------------


def test_policy_waits_deletes_after_the_deadline_and_evicts_the_rest(kube: KubeEmulator) -> None:
    kube.add_pod("serve", "vllm-0", "gpu-1", labels={"app": "vllm"})
    kube.add_pod("batch", "etl-0", "gpu-1")
    kube.add_pod("train", "llm-0", "gpu-1", labels={"job-name": "llm"})
    kube.add_pdb("serve", "vllm", {"app": "vllm"}, min_available=1)  # would refuse an eviction
    scheduler = scheduler_for(
        kube, policy=parse_drain_policy("label:app=vllm=delete, namespace:batch=wait"), grace_period_s=45
    )

    before = scheduler.drain_pods("gpu-1")
    assert before.evicted == ("train/llm-0",) and before.deleted == ()
    assert before.holding == (
        "batch/etl-0: policy waits for it to complete",
        "serve/vllm-0: policy deletes it after the drain deadline",
    )
    assert kube.eviction_grace == [("train/llm-0", 45)]

    after = scheduler.drain_pods("gpu-1", deadline_passed=True)
    assert after.deleted == ("serve/vllm-0",)  # deleted outright: its budget is not asked
    assert kube.pod_deletions == [("serve/vllm-0", 45)]
    assert after.holding == ("batch/etl-0: policy waits for it to complete",)


def test_a_critical_fault_evicts_every_workload_at_once(kube: KubeEmulator) -> None:
    kube.add_pod("serve", "vllm-0", "gpu-1", labels={"app": "vllm"})
    kube.add_pod("batch", "etl-0", "gpu-1")
    kube.add_pod("research", "pinned", "gpu-1", annotations={"fleetctl.io/do-not-evict": "true"})
    scheduler = scheduler_for(kube, policy=parse_drain_policy("label:app=vllm=delete,namespace:batch=wait"))

    progress = scheduler.drain_pods("gpu-1", critical=True)

    assert progress.evicted == ("batch/etl-0", "serve/vllm-0") and progress.done
    assert progress.left == ("research/pinned: annotated fleetctl.io/do-not-evict",)


@pytest.mark.parametrize(
    "text, error",
    [
        ("namespace:serve", "expected namespace:NAME=ACTION"),
        ("namespace:serve=drop", "ACTION one of evict, wait, delete"),
        ("namespace:Serve=wait", "'Serve' is not a valid"),
        ("label:app=wait", "'app' is not a valid"),
        ("label:bad key=x=wait", "is not a valid"),
        ("pod:x=wait", "is not a valid"),
    ],
)
def test_a_malformed_drain_policy_is_refused_saying_which_rule(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_drain_policy(text)


def test_drain_policy_rules_in_order() -> None:
    rules = parse_drain_policy(" namespace:serve=wait , label:app.kubernetes.io/name=vllm=delete,label:tier==evict")
    assert [(r.namespace, r.label_key, r.label_value, r.action) for r in rules] == [
        ("serve", None, None, "wait"),
        (None, "app.kubernetes.io/name", "vllm", "delete"),
        (None, "tier", "", "evict"),
    ]
    assert parse_drain_policy("") == ()


# -- PodDisruptionBudgets, and the rate limit that is not one ----------------------------------


def test_a_budget_lets_through_what_it_allows_and_the_rest_are_reported_by_its_name(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    for name in ("llm-0", "llm-1", "llm-2"):
        kube.add_pod("train", name, "gpu-1", labels={"job-name": "llm"})
    kube.add_pod("train", "llm-3", "gpu-2", labels={"job-name": "llm"})
    kube.add_pdb("train", "llm-budget", {"job-name": "llm"}, max_unavailable=1)
    kube.add_pod("train", "bert-0", "gpu-1", labels={"job-name": "bert"}, phase="Pending")
    kube.add_pdb("train", "bert-budget", {"job-name": "bert"}, min_available="100%")

    progress = scheduler.drain_pods("gpu-1")

    # One disruption allowed out of 4; a pod not yet running is evicted whatever its budget.
    assert progress.evicted == ("train/bert-0", "train/llm-0")
    assert progress.holding == (
        "train/llm-1: PodDisruptionBudget train/llm-budget allows no disruption",
        "train/llm-2: PodDisruptionBudget train/llm-budget allows no disruption",
    )
    assert kube.eviction_requests.count("train/llm-1") == 3  # retried eviction_attempts times
    scheduler.drain("gpu-1", "XID 79")
    with pytest.raises(SchedulerError, match=r"train/llm-1 \(PodDisruptionBudget train/llm-budget allows"):
        scheduler.restart_job("train/llm", exclude_nodes=["gpu-1"])


def test_a_pod_two_budgets_cover_is_an_api_server_error(kube: KubeEmulator, scheduler: KubernetesScheduler) -> None:
    kube.add_pod("train", "llm-0", "gpu-1", labels={"job-name": "llm", "team": "a"})
    kube.add_pod("train", "llm-1", "gpu-2", labels={"job-name": "llm", "team": "a"})
    kube.add_pdb("train", "by-job", {"job-name": "llm"}, max_unavailable=1)
    kube.add_pdb("train", "by-team", {"team": "a"}, max_unavailable=1)

    with pytest.raises(SchedulerError, match=r"HTTP 500.*more than one PodDisruptionBudget"):
        scheduler.drain_pods("gpu-1")


def test_a_rate_limit_429_is_waited_out_by_retry_after_not_reported_as_a_budget(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    kube.add_pod("train", "llm-0", "gpu-1", labels={"job-name": "llm"})
    kube.throttle_evictions(2, retry_after_s=0.3)

    progress = scheduler.drain_pods("gpu-1")

    assert progress.done and progress.evicted == ("train/llm-0",)
    assert kube.eviction_requests == ["train/llm-0"] * 3
    (first, _), (second, _), (third, _) = kube.eviction_times
    # The adapter's own backoff is 0.01 s: only Retry-After explains these gaps.
    assert second - first >= 0.3 and third - second >= 0.3


def test_a_rate_limit_that_does_not_lift_is_a_scheduler_error_not_a_budget(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    kube.add_pod("train", "llm-0", "gpu-1", labels={"job-name": "llm"})
    kube.throttle_evictions(10, retry_after_s=0.01)

    with pytest.raises(SchedulerError, match=r"still rate-limits evictions .* after 3 attempts"):
        scheduler.drain_pods("gpu-1")
    assert kube.pod_exists("train", "llm-0")


# -- saying it in Kubernetes' words ---------------------------------------------------------


def test_every_transition_sets_label_taint_conditions_and_an_event(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    assert isinstance(scheduler, ReportsNodeState) and isinstance(scheduler, DrainsPods)

    scheduler.drain("gpu-1", "XID 48 on GPU 2")
    draining = conditions(kube, "gpu-1")
    assert draining["Ready"]["status"] == "True"  # the kubelet's condition is kept
    assert (draining["GpuHealthy"]["status"], draining["GpuHealthy"]["reason"]) == ("False", "FleetctlDraining")
    assert draining["GpuHealthy"]["message"] == "fleetctl: XID 48 on GPU 2"
    assert draining["DrainInProgress"]["status"] == "True" and draining["Drained"]["status"] == "False"

    long_ago = "2026-01-01T00:00:00Z"
    kube.handler.objects[NODES, None, "gpu-1"].patch(
        {
            "status": {
                "conditions": [
                    {**c, "lastTransitionTime": long_ago} for c in kube.node("gpu-1")["status"]["conditions"]
                ]
            }
        }
    )

    scheduler.set_state("gpu-1", "maintenance", "drained: XID 48 on GPU 2")
    node = kube.node("gpu-1")
    assert node["metadata"]["labels"][STATE_KEY] == "maintenance"
    assert node["spec"]["taints"] == [{"key": STATE_KEY, "value": "maintenance", "effect": "NoSchedule"}]
    assert node["spec"]["unschedulable"] is True  # set_state says, it does not move placement
    maintenance = conditions(kube, "gpu-1")
    assert {
        t: maintenance[t]["status"] for t in ("GpuHealthy", "DrainInProgress", "Drained", "MaintenanceInProgress")
    } == {"GpuHealthy": "False", "DrainInProgress": "False", "Drained": "True", "MaintenanceInProgress": "True"}
    # GpuHealthy stayed False: its transition time stays, as NPD keeps it; DrainInProgress moved.
    assert maintenance["GpuHealthy"]["lastTransitionTime"] == long_ago
    assert maintenance["DrainInProgress"]["lastTransitionTime"] != long_ago

    scheduler.resume("gpu-1")
    assert conditions(kube, "gpu-1")["GpuHealthy"]["status"] == "True"

    events = kube.events()
    assert [(e["reason"], e["type"]) for e in events] == [
        ("FleetctlDraining", "Warning"),
        ("FleetctlMaintenance", "Warning"),
        ("FleetctlProduction", "Normal"),
    ]
    assert all(e["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-1"} for e in events)
    assert all(e["source"] == {"component": "fleetctl"} and e["metadata"]["namespace"] == "default" for e in events)
    assert len({e["metadata"]["name"] for e in events}) == 3


def test_a_conflicting_status_write_is_read_again_and_retried_then_reported(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    kube.fail_node_patches(status=409, attempts=2, status_only=True)  # the kubelet wrote in between, twice
    scheduler.set_state("gpu-1", "maintenance", "drained")
    assert conditions(kube, "gpu-1")["MaintenanceInProgress"]["status"] == "True"

    kube.fail_node_patches(status=409, attempts=3, status_only=True)
    with pytest.raises(SchedulerError, match="set conditions of node gpu-1: HTTP 409"):
        scheduler.set_state("gpu-1", "rma", "sent back")
    assert conditions(kube, "gpu-1")["MaintenanceInProgress"]["status"] == "True"


def test_set_state_on_a_node_fleetctl_has_not_cordoned_changes_only_the_label(
    kube: KubeEmulator, scheduler: KubernetesScheduler
) -> None:
    scheduler.set_state("gpu-1", "burn_in", "admitted to burn-in")

    node = kube.node("gpu-1")
    assert node["metadata"]["labels"][STATE_KEY] == "burn_in"
    assert "taints" not in node["spec"] and "unschedulable" not in node["spec"]
    assert conditions(kube, "gpu-1")["GpuHealthy"]["status"] == "Unknown"


def test_noexecute_only_for_a_critical_fault_as_configured(kube: KubeEmulator) -> None:
    scheduler = scheduler_for(kube)
    scheduler.drain("gpu-1", "XID 79", critical=True)
    scheduler.drain("gpu-2", "slow NVLink")
    assert kube.node("gpu-1")["spec"]["taints"][0]["effect"] == "NoExecute"
    assert kube.node("gpu-2")["spec"]["taints"][0]["effect"] == "NoSchedule"

    scheduler.set_state("gpu-1", "maintenance", "drained")  # the effect stays with the state's value
    assert kube.node("gpu-1")["spec"]["taints"] == [{"key": STATE_KEY, "value": "maintenance", "effect": "NoExecute"}]

    calm = scheduler_for(kube, critical_taint_effect="NoSchedule")
    calm.drain("gpu-2", "XID 79", critical=True)
    assert kube.node("gpu-2")["spec"]["taints"][0]["effect"] == "NoSchedule"


def test_draining_a_node_fleetctl_holds_again_keeps_its_state_and_its_critical_taint(kube: KubeEmulator) -> None:
    """A job restart drains its bad nodes again, maybe after their workflow showed them in
    maintenance: the label must not go back to draining, nor NoExecute soften."""
    scheduler = scheduler_for(kube)
    scheduler.drain("gpu-1", "XID 79", critical=True)
    scheduler.set_state("gpu-1", "maintenance", "drained")
    scheduler.drain("gpu-1", "restart job train/llm")

    node = kube.node("gpu-1")
    assert node["spec"]["taints"] == [{"key": STATE_KEY, "value": "maintenance", "effect": "NoExecute"}]
    assert node["metadata"]["labels"][STATE_KEY] == "maintenance"


# -- RBAC and real clients ---------------------------------------------------------------------


def test_the_adapter_needs_exactly_the_permissions_rbac_rules_declares(kube: KubeEmulator) -> None:
    kube.add_pod("train", "llm-0", "gpu-1", labels={"job-name": "llm"})
    kube.add_pod("serve", "vllm-0", "gpu-1")
    scheduler = scheduler_for(kube, policy=parse_drain_policy("namespace:serve=delete"))

    scheduler.drain("gpu-1", "XID 79")
    scheduler.node_state("gpu-1")
    scheduler.busy_nodes()
    scheduler.jobs_on_node("gpu-1")
    scheduler.drain_pods("gpu-1", deadline_passed=True)
    scheduler.set_state("gpu-1", "maintenance", "drained")
    scheduler.resume("gpu-1")
    kube.add_pod("train", "bert-0", "gpu-2", labels={"job-name": "bert"})
    scheduler.restart_job("train/bert", exclude_nodes=[])

    used = {(group, resource, verb) for verb, group, resource in kube.access}
    declared = {(group, resource, verb) for group, resource, verbs in RBAC_RULES for verb in verbs}
    assert used == declared


def test_kubectl_reads_back_what_fleetctl_wrote(
    kube: KubeEmulator, scheduler: KubernetesScheduler, tmp_path: Path
) -> None:
    # Debian's kubernetes-client, or whichever kubectl the machine has (make test installs
    # Debian's where there is none); FLEETCTL_TEST_KUBECTL names another.
    kubectl_path = os.environ.get("FLEETCTL_TEST_KUBECTL") or shutil.which("kubectl")
    if kubectl_path is None:
        missing_service("kubectl", "no kubectl on PATH (Debian package kubernetes-client)")
    scheduler.drain("gpu-1", "XID 79 on GPU 3", critical=True)
    kubeconfig = kube.write_kubeconfig(tmp_path / "config")
    kubectl = [kubectl_path, "--kubeconfig", str(kubeconfig), "--request-timeout", "20s"]

    def run(*args: str) -> str:
        result = subprocess.run(
            [*kubectl, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)},
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert run("get", "node", "gpu-1", "-o", "jsonpath={.metadata.labels.fleetctl\\.io/state}") == "draining"
    assert json.loads(run("get", "node", "gpu-1", "-o", "jsonpath={.spec.taints}")) == [
        {"key": STATE_KEY, "value": "draining", "effect": "NoExecute"}
    ]
    health = run(
        "get",
        "node",
        "gpu-1",
        "-o",
        'jsonpath={range .status.conditions[?(@.type=="GpuHealthy")]}{.status} {.reason} {.message}{end}',
    )
    assert health == "False FleetctlDraining fleetctl: XID 79 on GPU 3"
    events = json.loads(run("get", "events", "-n", "default", "-o", "json"))["items"]
    assert [(e["involvedObject"]["name"], e["reason"]) for e in events] == [("gpu-1", "FleetctlDraining")]
