"""The Kubernetes pre-job gate (fleetctl.admission), against the API server emulator: the
mutating webhook gives a GPU pod its init container (the patched pod valid against the
Kubernetes schemas) and leaves other pods alone; the init container's own script, run as the
kubelet would run it on the node the pod was bound to, asks the gate; a node that fails the
pre-job suite is drained through the capacity guard (cordoned and tainted in the emulator)
and its pod evicted, so that its controller places it elsewhere, while a healthy node's pod
starts. The health answer for in-job restart frameworks says which is which. And the epilog
Kubernetes lacks: a node that failed during a GPU pod is drained once the pod completed."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import jsonpatch
import kubernetes_validate
import pytest

from fleetctl.admission.completions import CompletionWatcher
from fleetctl.admission.server import GateServer
from fleetctl.admission.webhook import INIT_CONTAINER, GateSettings, gate_container
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import CheckRun
from fleetctl.inventory.parse import parse_inventory
from fleetctl.schedulers.kubernetes import KubernetesScheduler
from fleetctl.sim.store import add_fault
from fleetctl.workflows.client import connect
from tests.schedulers.kube_emulator import KubeEmulator
from tests.support.fleet import wait_for
from tests.support.worker import DRAIN_LOOKS_OFTEN, WorkerThread, start_in_production, terminate_node_workflows

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kubernetes" / "admission_review_gpu_pod.json"
GATE_TIMEOUT_S = 150  # GateSettings' default: the init container's wait on the gate
NODES = ["gpu-1", "gpu-2", "gpu-3"]


@pytest.fixture
def gate(tmp_path, make_settings, sqlite_url):
    """The emulator, a fleet of three Kubernetes nodes, and the gate's server on 127.0.0.1."""
    with KubeEmulator() as kube:
        settings = make_settings(sqlite_url)
        settings.kubeconfig = str(kube.write_kubeconfig(tmp_path / "kubeconfig"))
        engine = get_engine(sqlite_url)
        queries.upsert_nodes(
            engine,
            parse_inventory(
                "nodes:\n"
                + "".join(
                    f"  - {{name: {n}, address: sim://{n}, profile: h100-sxm, rack: r1, scheduler: kubernetes}}\n"
                    for n in NODES
                )
            ),
        )
        for node in NODES:
            kube.add_node(node)
        server = GateServer(("127.0.0.1", 0), settings, engine, GateSettings("http://placeholder", "curl"))
        url = f"http://127.0.0.1:{server.server_address[1]}"
        server.gate = GateSettings(url, "curlimages/curl:8.11.1")
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield kube, settings, engine, url, server
        finally:
            server.shutdown()
            server.server_close()


def _post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("version", ["1.31.0", kubernetes_validate.latest_version()])
def test_the_webhook_gives_a_gpu_pod_its_gate_and_the_pod_stays_valid(gate, version) -> None:
    _, _, _, url, _ = gate
    review = json.loads(FIXTURE.read_text())
    status, answer = _post(f"{url}/mutate", json.dumps(review).encode())
    assert status == 200 and answer["kind"] == "AdmissionReview", answer
    response = answer["response"]
    assert response["uid"] == review["request"]["uid"] and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    pod = jsonpatch.apply_patch(review["request"]["object"], json.loads(base64.b64decode(response["patch"])))
    (init,) = pod["spec"]["initContainers"]
    assert init["name"] == INIT_CONTAINER
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in init["env"]
    assert {"name": "JOB", "value": "cuda-vectoradd"} in init["env"]  # its job label
    assert pod["spec"]["containers"] == review["request"]["object"]["spec"]["containers"]  # untouched
    kubernetes_validate.validate(pod, version, strict=True)


def test_the_webhook_leaves_other_pods_and_refuses_what_is_no_review(gate) -> None:
    _, _, _, url, _ = gate
    review = json.loads(FIXTURE.read_text())
    cpu = copy.deepcopy(review)
    cpu["request"]["object"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    skipped = copy.deepcopy(review)
    skipped["request"]["object"]["metadata"]["annotations"] = {"fleetctl.io/prejob-gate": "skip"}
    update = copy.deepcopy(review)
    update["request"]["operation"] = "UPDATE"
    for left_alone in (cpu, skipped, update):
        status, answer = _post(f"{url}/mutate", json.dumps(left_alone).encode())
        assert status == 200 and answer["response"] == {"uid": review["request"]["uid"], "allowed": True}
    # A pod that has its own init containers: the gate goes first.
    own = copy.deepcopy(review)
    own["request"]["object"]["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox"}]
    _, answer = _post(f"{url}/mutate", json.dumps(own).encode())
    pod = jsonpatch.apply_patch(own["request"]["object"], json.loads(base64.b64decode(answer["response"]["patch"])))
    assert [c["name"] for c in pod["spec"]["initContainers"]] == [INIT_CONTAINER, "fetch"]
    for bad in (b"{", b'{"kind": "Pod"}', json.dumps({"kind": "AdmissionReview", "request": {}}).encode()):
        status, answer = _post(f"{url}/mutate", bad)
        assert status == 400 and answer["error"], answer


def _run_init_container(pod: dict, node: str, gate_settings: GateSettings) -> subprocess.CompletedProcess:
    """The init container's command with its environment, as the kubelet runs it once the pod
    is bound to `node` (the downward API's spec.nodeName)."""
    container = gate_container(pod, gate_settings)
    env = {e["name"]: e.get("value", node) for e in container["env"]}
    return subprocess.run(
        container["command"],
        env={**env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=GATE_TIMEOUT_S + 30,
    )


async def test_a_failing_node_is_cordoned_and_its_pod_evicted_a_healthy_nodes_pod_starts(gate) -> None:
    kube, settings, engine, url, server = gate
    add_fault(engine, "gpu-1", "row-remap-failure", 0, time.time(), None, 1)
    pod = json.loads(FIXTURE.read_text())["request"]["object"]
    kube.add_pod("my-namespace", "cuda-vectoradd-a", "gpu-1", labels={"job-name": "cuda-vectoradd"}, phase="Pending")
    kube.add_pod("my-namespace", "cuda-vectoradd-b", "gpu-2", labels={"job-name": "cuda-vectoradd"}, phase="Pending")
    worker = WorkerThread(settings).start()
    try:
        client = await connect(settings)
        for node in NODES:
            await start_in_production(client, settings, node, **DRAIN_LOOKS_OFTEN)

        healthy = await asyncio.to_thread(_run_init_container, pod, "gpu-2", server.gate)
        assert healthy.returncode == 0, (healthy.stdout, healthy.stderr)
        assert json.loads(healthy.stdout)["verdict"] == "passed"

        refused = await asyncio.to_thread(_run_init_container, pod, "gpu-1", server.gate)
        assert refused.returncode == 1, (refused.stdout, refused.stderr)
        drain = next(e for e in queries.node_events(engine, "gpu-1") if e.trigger == "drain")
        assert drain.actor == "prolog@cuda-vectoradd" and drain.cause.startswith("prolog prejob: nvidia-smi-query: ")
        # Cordoned and tainted in the API server, and the pod moved off it by the drain.
        await wait_for(lambda: kube.node("gpu-1")["spec"].get("unschedulable") is True, 60, "gpu-1 cordoned")
        assert kube.node("gpu-1")["spec"]["taints"][0]["key"].startswith("fleetctl")
        await wait_for(
            lambda: "my-namespace/cuda-vectoradd-a" in kube.eviction_requests, 60, "the pod on gpu-1 evicted"
        )
        assert not kube.pod_exists("my-namespace", "cuda-vectoradd-a")
        assert kube.pod_exists("my-namespace", "cuda-vectoradd-b")  # the healthy node's pod runs on
        assert not kube.node("gpu-2")["spec"].get("unschedulable")

        # What an in-job restart framework asks.
        assert _get(f"{url}/nodes/gpu-2/health") == (
            200,
            {"node": "gpu-2", "healthy": True, "state": "production", "reason": ""},
        )
        status, sick = _get(f"{url}/nodes/gpu-1/health")
        assert status == 200 and sick["healthy"] is False and "not production" in sick["reason"]
        assert _get(f"{url}/nodes/gpu-404/health")[0] == 404
    finally:
        await terminate_node_workflows(settings, NODES)
        worker.stop()


def test_an_unreachable_gate_or_a_node_fleetctl_does_not_manage_lets_the_pod_start(gate) -> None:
    _, _, _, _, server = gate
    pod = json.loads(FIXTURE.read_text())["request"]["object"]
    unmanaged = _run_init_container(pod, "cpu-7", server.gate)
    assert unmanaged.returncode == 0 and json.loads(unmanaged.stdout)["message"] == "unknown node: cpu-7"
    # A port nothing listens on: fleetctl's outage must not stop pods.
    done = _run_init_container(pod, "gpu-1", GateSettings("http://127.0.0.1:9", "curl", timeout_s=5))
    assert done.returncode == 0 and "unreachable" in done.stderr


def test_the_gate_serves_https_and_a_silent_client_blocks_no_other(tmp_path, make_settings, sqlite_url) -> None:
    """Each connection's handshake in its own thread: a client that connects and never says
    hello holds its own thread only."""
    import socket
    import ssl

    from fleetctl.server_tls import tls_context
    from tests.production.mtls_proxy import Authority

    ca = Authority(tmp_path, "gate-ca")
    cert, key = ca.server("gate")
    settings = make_settings(sqlite_url)
    server = GateServer(
        ("127.0.0.1", 0),
        settings,
        get_engine(sqlite_url),
        GateSettings("https://placeholder", "curl"),
        tls=tls_context(cert, key, check_s=0.5),
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    client = ssl.create_default_context(cafile=ca.cert_path)
    try:
        silent = socket.create_connection(("127.0.0.1", port), timeout=30)  # never says hello
        request = urllib.request.Request(f"https://127.0.0.1:{port}/nodes/gpu-404/health")
        with pytest.raises(urllib.error.HTTPError) as answered:
            urllib.request.urlopen(request, timeout=30, context=client)
        assert answered.value.code == 404  # answered over https while the silent client waits
        silent.close()
    finally:
        server.shutdown()
        server.server_close()


def test_the_gate_serves_a_renewed_certificate_without_a_restart_and_not_a_broken_one(
    tmp_path, make_settings, sqlite_url
) -> None:
    """The gate's certificate renewed in place, as the intake's and the exporter's: init
    containers' new connections get the renewed one; a key that is not its certificate's is
    not taken, and the gate answers on with the one it has."""
    import ssl

    from fleetctl.server_tls import tls_context
    from tests.production.mtls_proxy import Authority
    from tests.support.tls_renewal import renewal_served_and_a_broken_one_not

    ca = Authority(tmp_path, "gate-ca")
    check_s = 0.5
    server = GateServer(
        ("127.0.0.1", 0),
        make_settings(sqlite_url),
        get_engine(sqlite_url),
        GateSettings("https://placeholder", "curl"),
        tls=tls_context(*ca.server("gate"), check_s=check_s),
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    client = ssl.create_default_context(cafile=ca.cert_path)

    def answers() -> None:
        request = urllib.request.Request(f"https://127.0.0.1:{port}/nodes/gpu-404/health")
        with pytest.raises(urllib.error.HTTPError) as answered:
            urllib.request.urlopen(request, timeout=30, context=client)
        assert answered.value.code == 404

    (tmp_path / "other").mkdir()
    try:
        renewal_served_and_a_broken_one_not(
            port, client, lambda: ca.server("gate"), check_s, answers, tmp_path / "other"
        )
    finally:
        server.shutdown()
        server.server_close()


async def test_a_node_that_failed_during_a_gpu_pod_is_drained_when_the_pod_completes(gate) -> None:
    """Three GPU pods: one completed before the watch began (its node is not checked), one on
    gpu-1 whose GPU falls off the bus while it runs, one on gpu-2, healthy. Both complete:
    gpu-1 is drained through the capacity guard as the epilog drains (actor epilog@<job>),
    gpu-2 passes the suite and stays in production; a later list checks nothing again."""
    kube, settings, engine, _, server = gate
    job = {"job-name": "llm-pretrain"}
    kube.add_pod("train", "before-0", "gpu-3", labels=job, phase="Succeeded", gpus=8)
    kube.add_pod("train", "llm-pretrain-0", "gpu-1", labels=job, gpus=8)
    kube.add_pod("train", "llm-pretrain-1", "gpu-2", labels=job, gpus=8)
    kube.add_pod("train", "cpu-only", "gpu-2", labels={"job-name": "etl"}, phase="Succeeded")
    pods = KubernetesScheduler(kubeconfig=settings.kubeconfig).pods
    watcher = CompletionWatcher(settings, engine, pods, server.node_lock, "prejob", 1.0)
    worker = WorkerThread(settings).start()
    try:
        client = await connect(settings)
        for node in NODES:
            await start_in_production(client, settings, node, **DRAIN_LOOKS_OFTEN)
        seen = await asyncio.to_thread(watcher.tick, None)  # the watch begins: nothing checked
        assert seen == {"train/before-0/"}

        add_fault(engine, "gpu-1", "row-remap-failure", 0, time.time(), None, 1)  # during the job
        kube.finish_pod("train", "llm-pretrain-0", phase="Failed")
        kube.finish_pod("train", "llm-pretrain-1")
        seen = await asyncio.to_thread(watcher.tick, seen)
        assert seen == {"train/before-0/", "train/llm-pretrain-0/", "train/llm-pretrain-1/"}

        drain = next(e for e in queries.node_events(engine, "gpu-1") if e.trigger == "drain")
        assert drain.actor == "epilog@llm-pretrain" and drain.cause.startswith("epilog prejob: nvidia-smi-query: ")
        await wait_for(lambda: kube.node("gpu-1")["spec"].get("unschedulable") is True, 60, "gpu-1 cordoned")
        assert queries.get_node(engine, "gpu-2").state == "production"
        assert not kube.node("gpu-2")["spec"].get("unschedulable")
        passed = _epilog_runs(engine, "gpu-2")
        assert passed and {r.status for r in passed} == {"pass"}, [(r.check_name, r.status) for r in passed]
        assert _epilog_runs(engine, "gpu-3") == []  # completed before the watch: not checked

        # The next list finds nothing new: no node is checked twice for one completion.
        assert await asyncio.to_thread(watcher.tick, seen) == seen
        assert len(_epilog_runs(engine, "gpu-2")) == len(passed)
    finally:
        await terminate_node_workflows(settings, NODES)
        worker.stop()


def _epilog_runs(engine, node: str) -> list[CheckRun]:
    from sqlmodel import Session, col, select

    with Session(engine) as session:
        return list(
            session.exec(
                select(CheckRun).where(CheckRun.node_name == node, col(CheckRun.workflow_id).startswith("epilog/"))
            )
        )
