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
    assert {doc["kind"] for doc in docs} >= {"Deployment", "Job", "Service", "ServiceAccount", "ClusterRole",
                                             "ClusterRoleBinding", "ConfigMap", "Namespace"}
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_validation_catches_a_misspelled_field():
    worker = copy.deepcopy(find("Deployment", "fleetctl-worker"))
    worker["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(worker, VERSIONS[-1], strict=True)


def adapter_calls() -> set[tuple[str, str, str]]:
    """(API group, resource[/subresource], verb) of every request the adapter's public
    methods make, each method driven down the path that calls the API most."""
    calls: set[tuple[str, str, str]] = set()
    with KubeEmulator() as kube:
        refuse = kube.handler.refuse

        def record(request):
            verb = VERBS[str(request.method.value)]
            if verb == "get" and request.name is None:
                verb = "watch" if request.params.get("watch") else "list"
            resource = request.resource.plural + (f"/{request.subresource}" if request.subresource else "")
            calls.add((request.resource.group, resource, verb))
            return refuse(request)

        kube.handler.refuse = record
        kube.add_node("gpu-1")
        kube.add_node("gpu-2")
        kube.add_pod("ml", "train-0", "gpu-1", labels={"job-name": "train"}, owner_kind="Job")
        kube.add_pod("ml", "serve-0", "gpu-2", labels={"fleetctl.io/job": "serve"}, owner_kind="ReplicaSet")
        # serve-0's namespace is deleted after the drain's deadline: the delete verb is exercised too.
        adapter = KubernetesScheduler(host=kube.url, eviction_attempts=1,
                                      options=DrainOptions(policy=parse_drain_policy("namespace:ml=delete")))
        driven = {
            "node_state": lambda: adapter.node_state("gpu-1"),
            "busy_nodes": adapter.busy_nodes,
            "jobs_on_node": lambda: adapter.jobs_on_node("gpu-1"),
            "job": lambda: adapter.job("ml/train"),
            "drain": lambda: adapter.drain("gpu-1", "rbac"),
            "restart_job": lambda: adapter.restart_job("ml/train", ["gpu-1"]),
            "drain_pods": lambda: adapter.drain_pods("gpu-2", deadline_passed=True),
            "set_state": lambda: adapter.set_state("gpu-1", "maintenance", "rbac"),
            "resume": lambda: adapter.resume("gpu-1"),
        }
        public = {name for name, _ in inspect.getmembers(KubernetesScheduler, inspect.isfunction) if not name.startswith("_")}
        # A new method of the adapter must be driven here, or its calls would go unchecked.
        assert set(driven) == public, sorted(public ^ set(driven))
        for call in driven.values():
            call()
    return calls


def granted(role: dict) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_the_worker_role_grants_exactly_what_the_adapter_calls():
    calls = adapter_calls()
    assert calls, "the adapter made no API calls: the recording is broken"
    assert granted(find("ClusterRole", "fleetctl-worker")) == calls


def test_only_the_worker_holds_an_api_token():
    binding = find("ClusterRoleBinding", "fleetctl-worker")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "fleetctl-worker", "namespace": "fleetctl"}]
    assert find("Deployment", "fleetctl-worker")["spec"]["template"]["spec"]["serviceAccountName"] == "fleetctl-worker"
    for kind, name in (("Deployment", "fleetctl-metrics"), ("Job", "fleetctl-bootstrap")):
        pod = find(kind, name)["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False and pod["serviceAccountName"] != "fleetctl-worker"


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
