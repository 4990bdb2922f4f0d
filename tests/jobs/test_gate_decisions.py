"""The pre-job gate's pure parts, table-driven: which pods get the gate (fleetctl.admission.
webhook), the job they are recorded under, and the node health answer in-job restart
frameworks read (fleetctl.admission.node_health)."""

from __future__ import annotations

import pytest

from fleetctl.admission.completions import completed_gpu_pods, new_completions
from fleetctl.admission.node_health import node_health
from fleetctl.admission.webhook import gpu_pod, job_of


def _pod(limits=None, requests=None, init=False, **meta) -> dict:
    container = {"name": "c", "resources": {k: v for k, v in (("limits", limits), ("requests", requests)) if v}}
    spec = {"initContainers": [container]} if init else {"containers": [container]}
    return {"metadata": meta, "spec": spec}


@pytest.mark.parametrize(
    ("pod", "gpu"),
    [
        (_pod(limits={"nvidia.com/gpu": 8}), True),
        (_pod(limits={"nvidia.com/gpu": "1"}), True),  # a quantity as a string, as YAML may give it
        (_pod(requests={"nvidia.com/gpu": 1}), True),
        (_pod(limits={"nvidia.com/gpu": 1}, init=True), True),  # an init container's GPU too
        (_pod(limits={"nvidia.com/gpu": 0}), False),
        (_pod(limits={"cpu": "4", "memory": "1Gi"}), False),
        (_pod(), False),
        ({}, False),
    ],
)
def test_which_pods_are_gpu_pods(pod, gpu) -> None:
    assert gpu_pod(pod) is gpu


@pytest.mark.parametrize(
    ("meta", "job"),
    [
        ({"labels": {"fleetctl.io/job": "llm-70b", "job-name": "other"}, "name": "p"}, "llm-70b"),
        ({"labels": {"job-name": "cuda-vectoradd"}}, "cuda-vectoradd"),
        ({"name": "trainer-0"}, "trainer-0"),
        ({"generateName": "cuda-vectoradd-"}, "cuda-vectoradd"),
        ({"labels": {"job-name": "a b/c;d"}}, "a-b-c-d"),  # only what a job id may hold
        ({}, "pod"),
    ],
)
def test_the_job_a_pod_is_checked_under(meta, job) -> None:
    assert job_of({"metadata": meta}) == job


@pytest.mark.parametrize(
    ("state", "critical", "findings", "healthy", "reason"),
    [
        ("production", [], [], True, ""),
        ("draining", [], [], False, "draining in fleetctl, not production"),
        ("production", ["GPU has fallen off the bus"], [], False, "critical health event: GPU has fallen off the bus"),
        ("production", [], ["straggler sm_clock in job 7"], False, "straggler sm_clock in job 7"),
        ("maintenance", ["XID 79"], ["straggler"], False, "maintenance in fleetctl, not production"),
    ],
)
def test_node_health(state, critical, findings, healthy, reason) -> None:
    assert node_health("n1", state, critical, findings) == {
        "node": "n1",
        "healthy": healthy,
        "state": state,
        "reason": reason,
    }


def _ended(name: str, node: str | None, phase: str, job: str = "llm", gpus: int = 8, skip: bool = False) -> dict:
    """A pod of the fixture's shape (a real GPU pod's spec), bound to `node`, in `phase`."""
    pod = _pod(limits={"nvidia.com/gpu": gpus}, name=name, namespace="train", uid=f"u-{name}", labels={"job-name": job})
    if skip:
        pod["metadata"]["annotations"] = {"fleetctl.io/prejob-gate": "skip"}
    if node:
        pod["spec"]["nodeName"] = node
    return {**pod, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("pods", "seen", "checked"),
    [
        ([_ended("a", "n1", "Succeeded")], set(), [("n1", "llm")]),
        ([_ended("a", "n1", "Failed")], set(), [("n1", "llm")]),  # a failed pod: its node is checked too
        ([_ended("a", "n1", "Running"), _ended("b", "n1", "Pending")], set(), []),
        ([_ended("a", "n1", "Succeeded", gpus=0)], set(), []),  # no GPU: no GPU check after it
        ([_ended("a", "n1", "Succeeded", skip=True)], set(), []),  # the node's own diagnostics
        ([_ended("a", None, "Failed")], set(), []),  # never bound: it ran nowhere
        ([_ended("a", "n1", "Succeeded")], {"train/a/u-a"}, []),  # seen at the previous list
        # Two pods of one job on one node: one check; another job's pod there: its own.
        (
            [_ended("a", "n1", "Succeeded"), _ended("b", "n1", "Succeeded"), _ended("c", "n1", "Failed", "etl")],
            set(),
            [("n1", "llm"), ("n1", "etl")],
        ),
    ],
)
def test_which_completed_pods_check_their_node(pods, seen, checked) -> None:
    done = completed_gpu_pods(pods)
    assert [(c.node, c.job) for c in new_completions(done, seen)] == checked
