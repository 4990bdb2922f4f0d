"""The Kubernetes pre-job gate's admission decision: a GPU pod (one whose containers ask for
`nvidia.com/gpu`) gets an init container, first, that asks fleetctl's gate to run the pre-job
suite on the node the pod was bound to before any of its containers start
(POST <gate>/prejob/<node>). The gate drains a failing node through the capacity guard
(fleetctl cordons and taints it) and answers 409: the init container fails, and the node's
drain evicts the pod so that its controller (a Job, a JobSet, a StatefulSet) places it again,
elsewhere. Any other answer, and a gate that cannot be reached, lets the pod start: an outage
of fleetctl must not stop a cluster.

The init container holds no fleetctl credential: the gate runs the checks with its own. It
is a plain curl, so the gate's checks and its drain are fleetctl's, not the pod's.

Pure: the AdmissionReview in, the AdmissionReview answer out (a JSONPatch, base64, per
kube-apiserver's admission.k8s.io/v1 API).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
INIT_CONTAINER = "fleetctl-prejob-gate"
# A pod annotated with this set to "skip" is let through as it is (a node's own diagnostics).
SKIP_ANNOTATION = "fleetctl.io/prejob-gate"
# The labels that name a pod's job, as fleetctl's Kubernetes job history reads them.
JOB_LABELS = ("fleetctl.io/job", "job-name")
# curl's exit status for an HTTP answer of 400 or more under --fail: the gate refused the node.
# Any other failure (no route, a timeout, a TLS error) is fleetctl unreachable: the pod starts.
_CURL_HTTP_ERROR = 22


class BadReview(ValueError):
    """The body is not an AdmissionReview of a pod."""


@dataclass(frozen=True)
class GateSettings:
    gate_url: str  # https://fleetctl-prejob-gate.fleetctl.svc:9443, as the pods reach it
    image: str  # an image with curl and a POSIX shell
    timeout_s: int = 150  # above the gate's own limit on the checks (FLEETCTL_PROLOG_TIMEOUT_S)
    ca_path: str = ""  # the gate's CA inside the init container (a mounted ConfigMap); "" none


def gpu_pod(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for amounts in (resources.get("limits") or {}, resources.get("requests") or {}):
            if str(amounts.get(GPU_RESOURCE, "0")) not in ("0", ""):
                return True
    return False


def job_of(pod: Mapping[str, Any]) -> str:
    """The pod's job as fleetctl records the gate's checks under it: its job label, or the
    pod's own name (generateName's prefix when the name is not set yet)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    named = next((labels[k] for k in JOB_LABELS if labels.get(k)), meta.get("name") or meta.get("generateName") or "")
    return re.sub(r"[^0-9A-Za-z._+-]", "-", str(named)).strip("-.")[:64] or "pod"


def gate_container(pod: Mapping[str, Any], gate: GateSettings) -> dict[str, Any]:
    """The init container: ask the gate about the node the pod was bound to (spec.nodeName,
    through the downward API), fail only on the gate's refusal."""
    ca = f" --cacert {gate.ca_path}" if gate.ca_path else ""
    script = (
        f'curl --fail --silent --show-error --max-time "$GATE_TIMEOUT_S"{ca} -X POST '
        '"$GATE_URL/prejob/$NODE_NAME?job=$JOB"; status=$?; '
        f'if [ "$status" -eq {_CURL_HTTP_ERROR} ]; then exit 1; fi; '
        'if [ "$status" -ne 0 ]; then echo "fleetctl pre-job gate unreachable (curl $status): starting" >&2; fi; exit 0'
    )
    return {
        "name": INIT_CONTAINER,
        "image": gate.image,
        "command": ["/bin/sh", "-c", script],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "GATE_URL", "value": gate.gate_url.rstrip("/")},
            {"name": "GATE_TIMEOUT_S", "value": str(gate.timeout_s)},
            {"name": "JOB", "value": job_of(pod)},
        ],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def review(body: Any, gate: GateSettings) -> dict[str, Any]:
    """The answer to an AdmissionReview: always allowed; a GPU pod created without the gate
    gets it as its first init container."""
    if not isinstance(body, dict) or body.get("kind") != "AdmissionReview" or not isinstance(body.get("request"), dict):
        raise BadReview("not an AdmissionReview with a request")
    request = body["request"]
    uid, pod = request.get("uid"), request.get("object")
    if not isinstance(uid, str) or not uid:
        raise BadReview("an AdmissionReview request without its uid")
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if request.get("operation") == "CREATE" and isinstance(pod, dict) and _needs_gate(pod):
        existing = (pod.get("spec") or {}).get("initContainers")
        container = gate_container(pod, gate)
        patch = (
            [{"op": "add", "path": "/spec/initContainers/0", "value": container}]
            if existing
            else [{"op": "add", "path": "/spec/initContainers", "value": [container]}]
        )
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {
        "apiVersion": body.get("apiVersion", "admission.k8s.io/v1"),
        "kind": "AdmissionReview",
        "response": response,
    }


def _needs_gate(pod: Mapping[str, Any]) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    already = any(c.get("name") == INIT_CONTAINER for c in (pod.get("spec") or {}).get("initContainers") or [])
    return gpu_pod(pod) and not already and annotations.get(SKIP_ANNOTATION) != "skip"
