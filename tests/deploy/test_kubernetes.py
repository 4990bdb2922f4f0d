"""deploy/kubernetes: valid against the Kubernetes schemas (kubernetes-validate, strict), and
the worker's RBAC rules are exactly the API calls the Kubernetes adapter makes, derived by
driving every public method of the adapter against the emulator and recording each request."""

from __future__ import annotations

import copy
import inspect
import tomllib
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from fleetctl.schedulers import kubernetes as kube_module
from fleetctl.schedulers.kubernetes import KubernetesScheduler
from fleetctl.schedulers.kubernetes_drain import DrainOptions, parse_drain_policy
from tests.deploy.test_files import is_a_fleetctl_command
from tests.schedulers.kube_emulator import KubeEmulator

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "deploy" / "kubernetes"
# The oldest Kubernetes release still supported upstream when these were written, and the
# newest the installed kubernetes-validate knows.
VERSIONS = ("1.31.0", kubernetes_validate.latest_version())
VERBS = {"GET": "get", "PATCH": "patch", "POST": "create", "PUT": "update", "DELETE": "delete"}


def resources() -> list[dict]:
    docs = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        docs += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def find(kind: str, name: str) -> dict:
    return next(doc for doc in resources() if doc["kind"] == kind and doc["metadata"]["name"] == name)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_strictly(version):
    docs = resources()
    assert {doc["kind"] for doc in docs} >= {
        "Deployment",
        "Job",
        "Service",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Namespace",
        "DaemonSet",
        "NetworkPolicy",
        "PersistentVolumeClaim",
    }
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_validation_catches_a_misspelled_field():
    worker = copy.deepcopy(find("Deployment", "fleetctl-worker"))
    worker["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(worker, VERSIONS[-1], strict=True)


def _recording(kube: KubeEmulator, calls: set[tuple[str, str, str]], then=lambda request: None) -> None:
    """Record (API group, resource[/subresource], verb) of every request the emulator gets."""
    refuse = kube.handler.refuse

    def record(request):
        verb = VERBS[str(request.method.value)]
        if verb == "get" and request.name is None:
            verb = "watch" if request.params.get("watch") else "list"
        resource = request.resource.plural + (f"/{request.subresource}" if request.subresource else "")
        calls.add((request.resource.group, resource, verb))
        then(request)
        return refuse(request)

    kube.handler.refuse = record


def adapter_calls() -> set[tuple[str, str, str]]:
    """(API group, resource[/subresource], verb) of every request the adapter's public
    methods make, each method driven down the path that calls the API most."""
    calls: set[tuple[str, str, str]] = set()
    with KubeEmulator() as kube:
        _recording(kube, calls)
        kube.add_node("gpu-1")
        kube.add_node("gpu-2")
        kube.add_pod("ml", "train-0", "gpu-1", labels={"job-name": "train"}, owner_kind="Job")
        kube.add_pod("ml", "serve-0", "gpu-2", labels={"fleetctl.io/job": "serve"}, owner_kind="ReplicaSet")
        # serve-0's namespace is deleted after the drain's deadline: the delete verb is exercised too.
        adapter = KubernetesScheduler(
            host=kube.url, eviction_attempts=1, options=DrainOptions(policy=parse_drain_policy("namespace:ml=delete"))
        )
        driven = {
            "node_state": lambda: adapter.node_state("gpu-1"),
            "busy_nodes": adapter.busy_nodes,
            "jobs_on_node": lambda: adapter.jobs_on_node("gpu-1"),
            "workloads_on_node": lambda: adapter.workloads_on_node("gpu-1"),
            "job": lambda: adapter.job("ml/train"),
            "job_history": adapter.job_history,
            "pods": adapter.pods,
            "drain": lambda: adapter.drain("gpu-1", "rbac"),
            "restart_job": lambda: adapter.restart_job("ml/train", ["gpu-1"]),
            "drain_pods": lambda: adapter.drain_pods("gpu-2", deadline_passed=True),
            "set_state": lambda: adapter.set_state("gpu-1", "maintenance", "rbac"),
            "resume": lambda: adapter.resume("gpu-1"),
        }
        public = {
            name for name, _ in inspect.getmembers(KubernetesScheduler, inspect.isfunction) if not name.startswith("_")
        }
        # A new method of the adapter must be driven here, or its calls would go unchecked.
        assert set(driven) == public, sorted(public ^ set(driven))
        for call in driven.values():
            call()
    return calls


def granted(role: dict) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_worker_role_grants_exactly_what_the_adapter_calls():
    calls = adapter_calls()
    assert calls, "the adapter made no API calls: the recording is broken"
    assert granted(find("ClusterRole", "fleetctl-worker")) == calls


def intake_calls(tmp_path) -> set[tuple[str, str, str]]:
    """What `fleetctl events serve --in-cluster` asks the API: one Node Problem Detector poll,
    driven through the intake's own poller against the emulator."""
    import threading

    from kubernetes import client, config

    from fleetctl.intake.server import Intake, poll_node_conditions

    calls: set[tuple[str, str, str]] = set()
    polled = threading.Event()
    with KubeEmulator() as kube:
        kube.add_node("gpu-1")
        _recording(kube, calls, then=lambda request: polled.set())
        api = client.CoreV1Api(
            config.new_client_from_config(config_file=str(kube.write_kubeconfig(tmp_path / "kubeconfig")))
        )
        intake = Intake(tmp_path / "spool", transport=None)
        # The poller sets nothing it could be waited on by but the request itself: stop it
        # once the first poll reached the emulator, and let it finish that poll.
        stop = threading.Event()
        poller = threading.Thread(target=poll_node_conditions, args=(intake, api, ("XidError",), stop, 3600))
        poller.start()
        assert polled.wait(30), "the intake never polled the API"
        stop.set()
        poller.join(60)
        intake.spool.close()
    return calls


def test_the_intake_role_grants_exactly_what_the_intake_calls(tmp_path):
    calls = intake_calls(tmp_path)
    assert calls == granted(find("ClusterRole", "fleetctl-intake"))


ROLE_HOLDERS = {
    "fleetctl-worker": ("Deployment", "fleetctl-worker"),
    "fleetctl-intake": ("Deployment", "fleetctl-intake"),
}


def test_only_the_worker_and_the_intake_hold_an_api_token_each_for_its_own_role():
    for name, (kind, workload) in ROLE_HOLDERS.items():
        binding = find("ClusterRoleBinding", name)
        assert binding["roleRef"]["name"] == name
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "fleetctl"}]
        assert find(kind, workload)["spec"]["template"]["spec"]["serviceAccountName"] == name
    bound = {
        s["name"]
        for doc in resources()
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding")
        for s in doc["subjects"]
    }
    assert bound == set(ROLE_HOLDERS)
    for kind, name in (
        ("Deployment", "fleetctl-metrics"),
        ("Job", "fleetctl-bootstrap"),
        ("DaemonSet", "fleetctl-agent"),
    ):
        pod = find(kind, name)["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False and pod["serviceAccountName"] not in ROLE_HOLDERS


def documented_rbac() -> set[tuple[str, str, str, str]]:
    """(ServiceAccount, API group, resource, verb) of docs/deployment.md's RBAC table."""
    text = (REPO / "docs" / "deployment.md").read_text()
    rows = set()
    for line in text[text.index("<!-- rbac -->") : text.index("<!-- /rbac -->")].splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("fleetctl-"):
            group = "" if cells[1] == "core" else cells[1]
            rows |= {(cells[0], group, cells[2], verb.strip()) for verb in cells[3].split(",")}
    return rows


def test_the_docs_list_exactly_the_rbac_the_manifests_grant():
    manifests = {(name, *grant) for name in ROLE_HOLDERS for grant in granted(find("ClusterRole", name))}
    assert documented_rbac() == manifests


def test_the_agent_daemonset_holds_only_what_it_needs():
    daemonset = find("DaemonSet", "fleetctl-agent")
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    kmsg = next(m for m in container["volumeMounts"] if m["mountPath"] == "/dev/kmsg")
    assert kmsg["readOnly"] is True
    assert {"operator": "Exists"} in pod["tolerations"]  # watches a cordoned node too
    assert container["args"][:2] == ["agent", "$(NODE_NAME)"] and is_a_fleetctl_command(container["args"])
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert container["image"] == f"fleetctl:{version}"


def test_the_intake_is_reached_only_by_the_agents_and_alertmanager():
    policy = find("NetworkPolicy", "fleetctl-intake")
    intake = find("Deployment", "fleetctl-intake")["spec"]["template"]["metadata"]["labels"]
    agent = find("DaemonSet", "fleetctl-agent")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"] == intake and policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9411}]
    assert {"podSelector": {"matchLabels": agent}} in rule["from"]
    service = find("Service", "fleetctl-intake")["spec"]
    assert service["selector"] == intake and service["ports"][0]["port"] == 9411


def test_every_container_runs_this_version_of_the_image_as_non_root():
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    pods = [doc["spec"]["template"]["spec"] for doc in resources() if doc["kind"] in ("Deployment", "Job")]
    for pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        for container in pod.get("initContainers", []) + pod["containers"]:
            assert container["image"] == f"fleetctl:{version}"
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert is_a_fleetctl_command(container["args"]), container["args"]


def test_in_a_pod_the_adapter_uses_its_service_account(tmp_path, monkeypatch):
    (tmp_path / "token").write_text("pod-token")
    (tmp_path / "ca.crt").write_text("not parsed until a request is made")
    monkeypatch.setattr(kube_module, "SERVICE_ACCOUNT_DIR", str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    configuration = KubernetesScheduler()._api().api_client.configuration
    assert configuration.host == "https://10.96.0.1:443"
    assert configuration.api_key == {"BearerToken": "bearer pod-token"}
    assert configuration.ssl_ca_cert == str(tmp_path / "ca.crt")  # the API server verified by the cluster's CA
