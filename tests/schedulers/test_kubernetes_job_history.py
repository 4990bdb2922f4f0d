"""Kubernetes jobs mirrored into the database: the adapter's job history,
from the pods the emulator serves, written by the same reconcile as Slurm's (and so by the
job-sync schedule)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from fleetctl.db import jobs
from fleetctl.db.engine import get_engine
from fleetctl.db.models import utcnow
from fleetctl.jobs.history_sync import sync_jobs
from fleetctl.schedulers.kubernetes import KubernetesScheduler
from tests.schedulers.kube_emulator import PODS, KubeEmulator
from tests.support.jobs import sim_fleet


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        yield emulator


def _pod(
    kube: KubeEmulator,
    namespace: str,
    name: str,
    node: str,
    job: str,
    created: str,
    started: str | None = None,
    finished: str | None = None,
    gpus: int | None = None,
    owner_kind: str = "Job",
) -> None:
    """A job's pod as the API server (and the kubelet) write it: its creation, start and, once
    it ran to its end, its container's finish (KubeEmulator.add_pod's pod, with those times)."""
    container: dict = {"name": "main", "image": "trainer"}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    status: dict = {"phase": "Succeeded" if finished else "Running"}
    if started:
        status["startTime"] = started
    if finished:
        status["containerStatuses"] = [
            {
                "name": "main",
                "ready": False,
                "restartCount": 0,
                "image": "trainer",
                "imageID": "",
                "state": {"terminated": {"exitCode": 0, "finishedAt": finished}},
            }
        ]
    kube.handler.objects[PODS, namespace, name] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"job-name": job},
            "annotations": {},
            "creationTimestamp": created,
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": owner_kind, "name": job, "uid": f"uid-{job}", "controller": True}
            ],
        },
        "spec": {"nodeName": node, "containers": [container]},
        "status": status,
    }


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def test_a_jobs_pods_give_its_history_and_the_sync_writes_it(kube: KubeEmulator, sqlite_url: str) -> None:
    kube.add_node("gpu-1")
    kube.add_node("gpu-2")
    for i, node in enumerate(("gpu-1", "gpu-2")):
        _pod(kube, "ml", f"train-{i}", node, "train", f"2026-12-01T10:0{i}:00Z", f"2026-12-01T10:0{i + 1}:00Z", gpus=8)
    _pod(kube, "ml", "done-0", "gpu-1", "done", "2026-12-01T08:00:00Z", "2026-12-01T08:01:00Z", "2026-12-01T09:30:00Z")
    kube.add_pod("kube-system", "dcgm-exporter", "gpu-1", labels={"job-name": "dcgm"}, owner_kind="DaemonSet")
    kube.add_pod("web", "frontend", "gpu-2")  # no job label: not a job

    history = {j.job_id: j for j in KubernetesScheduler(host=kube.url).job_history()}
    assert sorted(history) == ["ml/done", "ml/train"]  # the DaemonSet's pod is the node's infrastructure
    train, done = history["ml/train"], history["ml/done"]
    assert (train.state, train.nodes, train.node_count, train.gpus_per_node) == ("running", ("gpu-1", "gpu-2"), 2, 8)
    assert (train.submitted_at, train.started_at, train.ended_at) == (
        _utc("2026-12-01T10:00:00Z"),
        _utc("2026-12-01T10:01:00Z"),
        None,
    )
    assert (done.state, done.ended_at) == ("completed", _utc("2026-12-01T09:30:00Z"))

    engine = get_engine(sqlite_url)
    sim_fleet(engine, ["gpu-1", "gpu-2"], scheduler="kubernetes")
    result = sync_jobs(engine, ["kubernetes"], lambda kind: KubernetesScheduler(host=kube.url), utcnow())
    assert result.jobs == {"kubernetes": 2} and not result.errors
    stored = jobs.get_job(engine, "ml/train")
    assert (stored.scheduler, stored.state, stored.nodes) == ("kubernetes", "running", ["gpu-1", "gpu-2"])
