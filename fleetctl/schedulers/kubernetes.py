"""Kubernetes adapter: cordon, taint and label nodes; evict pods through the Eviction API.

A drain cordons the node, adds the taint `fleetctl.io/state=<state>:NoSchedule`, sets the
label `fleetctl.io/state=<state>` and records the reason in the annotation
`fleetctl.io/reason`. The annotation is how fleetctl knows a cordon is its own: resume
lifts only those, unless forced. A drain does not evict: running pods either finish or
are evicted explicitly (`evict_pods`, `restart_job`), and evictions go through the
Eviction API so PodDisruptionBudgets are honoured.

A job is the set of pods sharing a job label (`fleetctl.io/job`, then the batch Job
controller's `job-name`); its id is `namespace/name`. Restarting a job evicts its pods
so that its controller (Job, JobSet, PyTorchJob ...) creates them anew elsewhere.

The `kubernetes` package is imported on first use only: it costs half a second, and
most CLI commands never talk to a cluster.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from fleetctl.schedulers.base import (
    REASON_PREFIX,
    FleetctlDoesNotOwnDrain,
    SchedulerError,
    SchedulerJob,
    SchedulerNodeState,
)
from fleetctl.names import KUBERNETES_NODE_NAME_RE
from fleetctl.text import one_line

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException

# Nodes and pods are handled as the API's JSON (dicts), converted from the client's models
# on arrival: every model field is optional, and the JSON reads like `kubectl -o json`.
Json = dict[str, Any]

log = logging.getLogger(__name__)

STATE_KEY = "fleetctl.io/state"  # both the label and the taint key
REASON_ANNOTATION = "fleetctl.io/reason"
JOB_LABELS = ("fleetctl.io/job", "job-name")
# Where Kubernetes mounts a pod's ServiceAccount token and the API server's CA.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

DEFAULT_REQUEST_TIMEOUT_S = 30.0
DEFAULT_EVICTION_ATTEMPTS = 6
DEFAULT_EVICTION_BACKOFF_S = 2.0
MAX_EVICTION_BACKOFF_S = 30.0

# Node names go into field selectors and job names into label selectors: a comma or an
# '=' there would widen the selection, so both are checked against what Kubernetes allows.
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# The kubelet's copy of a static pod: evicting it does nothing, the kubelet owns it.
_MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


class KubernetesScheduler:
    """The Scheduler protocol over the Kubernetes API.

    Connects with `host` (an API server URL, no credentials; used by tests) or with a
    kubeconfig (`kubeconfig` path and `context`; both default to kubectl's defaults).
    A PodDisruptionBudget that refuses an eviction (HTTP 429) is retried
    `eviction_attempts` times, backing off from `eviction_backoff_s`, before the pods it
    still protects are reported in a SchedulerError.
    """

    def __init__(
        self,
        *,
        host: str | None = None,
        kubeconfig: str | None = None,
        context: str | None = None,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        eviction_attempts: int = DEFAULT_EVICTION_ATTEMPTS,
        eviction_backoff_s: float = DEFAULT_EVICTION_BACKOFF_S,
        job_labels: Sequence[str] = JOB_LABELS,
    ) -> None:
        # Empty strings mean "kubectl's default", as unset settings arrive from the config.
        kubeconfig, context = kubeconfig or None, context or None
        if host is not None and (kubeconfig is not None or context is not None):
            raise ValueError("give either host or kubeconfig/context, not both")
        if eviction_attempts < 1:
            raise ValueError("eviction_attempts must be at least 1")
        self._host = host
        self._kubeconfig = kubeconfig
        self._context = context
        self._request_timeout_s = request_timeout_s
        self._eviction_attempts = eviction_attempts
        self._eviction_backoff_s = eviction_backoff_s
        self._job_labels = tuple(job_labels)
        self._core: CoreV1Api | None = None

    def __repr__(self) -> str:
        return f"KubernetesScheduler({self._where()})"

    # -- the Scheduler protocol ------------------------------------------------------

    def drain(self, node: str, reason: str, state: str = "draining") -> None:
        """Cordon, taint and label the node, and record why.

        A node someone else already cordoned keeps their cordon and stays theirs: it gets
        the taint and label but not fleetctl's reason, so resume will not lift it.
        """
        current = self._read_node(node)
        reason = reason if reason.startswith(REASON_PREFIX) else f"{REASON_PREFIX} {reason}"
        spec: Json = {"taints": _taints_with_state(current, state)}
        metadata: Json = {"labels": {STATE_KEY: state}}
        if _cordoned(current) and not _owned_by_fleetctl(current):
            log.info("node %s was cordoned by someone else; leaving their cordon to them", node)
        else:
            spec["unschedulable"] = True
            metadata["annotations"] = {REASON_ANNOTATION: reason}
        self._patch_node(current, {"metadata": metadata, "spec": spec}, f"drain node {node}")
        log.info("drained node %s: %s", node, reason)

    def resume(self, node: str, force: bool = False, state: str = "production") -> None:
        """Uncordon the node, drop fleetctl's taint and reason, and label it with `state`.

        Refuses (FleetctlDoesNotOwnDrain) a node cordoned by someone else unless forced.
        """
        current = self._read_node(node)
        if _cordoned(current) and not _owned_by_fleetctl(current) and not force:
            raise FleetctlDoesNotOwnDrain(
                f"node {node} was cordoned by someone else, not fleetctl; resume with force to override"
            )
        patch = {
            "metadata": {"labels": {STATE_KEY: state}, "annotations": {REASON_ANNOTATION: None}},
            "spec": {"unschedulable": None, "taints": _taints_with_state(current, None)},
        }
        self._patch_node(current, patch, f"resume node {node}")
        log.info("resumed node %s", node)

    def node_state(self, node: str) -> SchedulerNodeState:
        current = self._read_node(node)
        cordoned = _cordoned(current)
        conditions = (current.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        if not ready:
            state = "down"
        elif cordoned:
            state = "cordoned"
        elif any(_is_workload(pod) for pod in self._pods_on_node(node)):
            state = "allocated"
        else:
            state = "idle"
        return SchedulerNodeState(
            node=node,
            state=state,
            drained=cordoned,
            reason=_annotations(current).get(REASON_ANNOTATION),
            owned_by_fleetctl=_owned_by_fleetctl(current),
        )

    def jobs_on_node(self, node: str) -> list[SchedulerJob]:
        job_ids = {job_id for pod in self._pods_on_node(node) if (job_id := self._job_id(pod))}
        return [self.job(job_id) for job_id in sorted(job_ids)]

    def busy_nodes(self) -> set[str]:
        """Nodes with a live workload pod of any kind (not only labelled jobs): a node that
        serves inference is as busy as one that trains."""
        with self._api_errors("list pods"):
            pods = self._api().list_pod_for_all_namespaces(_request_timeout=self._request_timeout_s)
        return {node for pod in map(self._json, pods.items)
                if _is_workload(pod) and (node := (pod.get("spec") or {}).get("nodeName"))}

    def job(self, job_id: str) -> SchedulerJob:
        namespace, name = _split_job_id(job_id)
        pods = self._job_pods(namespace, name)
        if not pods:
            raise SchedulerError(f"kubernetes: job {job_id}: no pods labelled {' or '.join(self._job_labels)}={name}")
        return SchedulerJob(
            job_id=job_id,
            name=name,
            state=_job_state(pods),
            nodes=tuple(sorted({node for pod in pods if (node := (pod.get("spec") or {}).get("nodeName"))})),
        )

    def restart_job(self, job_id: str, exclude_nodes: Sequence[str]) -> None:
        """Evict every live pod of the job so that its controller recreates them.

        Kubernetes has no per-job node exclusion, so the excluded nodes must already be
        cordoned (drained): otherwise the new pods could land right back on them.
        """
        schedulable = [node for node in exclude_nodes if not _cordoned(self._read_node(node))]
        if schedulable:
            raise SchedulerError(
                f"kubernetes: restart job {job_id}: drain {', '.join(schedulable)} first, "
                "or the job's new pods may be placed there again"
            )
        namespace, name = _split_job_id(job_id)
        pods = [pod for pod in self._job_pods(namespace, name) if _phase(pod) not in _TERMINAL_PHASES]
        if not pods:
            raise SchedulerError(f"kubernetes: restart job {job_id}: it has no live pods to evict")
        self._evict(pods, f"restart job {job_id}")

    # -- Kubernetes only ---------------------------------------------------------------

    def evict_pods(self, node: str) -> None:
        """Evict the node's workload pods (not DaemonSet or static pods), honouring PDBs."""
        pods = [pod for pod in self._pods_on_node(node) if _is_workload(pod)]
        self._evict(pods, f"evict pods on node {node}")

    # -- internals ---------------------------------------------------------------------

    def _api(self) -> CoreV1Api:
        if self._core is None:
            from kubernetes import client, config

            configuration = client.Configuration()
            if self._host is not None:
                configuration.host = self._host
            elif self._kubeconfig is None and self._context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
                # A worker in a pod: its ServiceAccount (deploy/kubernetes/rbac.yaml), as
                # kubectl in a pod does; a kubeconfig setting still wins.
                from kubernetes.config.incluster_config import InClusterConfigLoader

                try:
                    InClusterConfigLoader(token_filename=f"{SERVICE_ACCOUNT_DIR}/token",
                                          cert_filename=f"{SERVICE_ACCOUNT_DIR}/ca.crt").load_and_set(configuration)
                except (config.ConfigException, OSError) as exc:
                    raise SchedulerError(f"kubernetes: cannot load the pod's service account: {one_line(str(exc))}") from exc
            else:
                try:
                    config.load_kube_config(
                        config_file=self._kubeconfig,
                        context=self._context,
                        client_configuration=configuration,
                    )
                except (config.ConfigException, OSError) as exc:
                    raise SchedulerError(f"kubernetes: cannot load kubeconfig: {one_line(str(exc))}") from exc
            self._core = client.CoreV1Api(client.ApiClient(configuration))
        return self._core

    def _where(self) -> str:
        if self._host is not None:
            return self._host
        return f"kubeconfig {self._kubeconfig or '~/.kube/config'}" + (
            f" context {self._context}" if self._context else ""
        )

    @contextmanager
    def _api_errors(self, action: str) -> Iterator[None]:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            yield
        except ApiException as exc:
            raise SchedulerError(f"kubernetes: {action}: {_api_error_text(exc)}") from exc
        except HTTPError as exc:
            cause = getattr(exc, "reason", None) or exc
            raise SchedulerError(
                f"kubernetes: {action}: API server unreachable ({self._where()}): {one_line(str(cause))}"
            ) from exc

    def _read_node(self, node: str) -> Json:
        _check(node, KUBERNETES_NODE_NAME_RE, "node name")
        with self._api_errors(f"read node {node}"):
            return self._json(self._api().read_node(node, _request_timeout=self._request_timeout_s))

    def _patch_node(self, current: Json, patch: Json, action: str) -> None:
        # The resourceVersion makes the patch conditional: the taint list is replaced as a
        # whole, so a taint someone added since we read the node must not be lost (409).
        metadata = current.get("metadata") or {}
        if metadata.get("resourceVersion"):
            patch["metadata"]["resourceVersion"] = metadata["resourceVersion"]
        with self._api_errors(action):
            self._api().patch_node(
                metadata["name"],
                patch,
                _content_type="application/merge-patch+json",
                _request_timeout=self._request_timeout_s,
            )

    def _json(self, model: object) -> Json:
        return cast(Json, self._api().api_client.sanitize_for_serialization(model))

    def _pods_on_node(self, node: str) -> list[Json]:
        _check(node, KUBERNETES_NODE_NAME_RE, "node name")
        with self._api_errors(f"list pods on node {node}"):
            pods = self._api().list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}", _request_timeout=self._request_timeout_s
            )
        return [self._json(pod) for pod in pods.items]

    def _job_pods(self, namespace: str, name: str) -> list[Json]:
        for label in self._job_labels:
            with self._api_errors(f"list pods of job {namespace}/{name}"):
                pods = self._api().list_namespaced_pod(
                    namespace, label_selector=f"{label}={name}", _request_timeout=self._request_timeout_s
                )
            if pods.items:
                return [self._json(pod) for pod in pods.items]
        return []

    def _job_id(self, pod: Json) -> str | None:
        metadata = pod.get("metadata") or {}
        labels = metadata.get("labels") or {}
        for label in self._job_labels:
            if label in labels:
                return f"{metadata.get('namespace')}/{labels[label]}"
        return None

    def _evict(self, pods: Sequence[Json], action: str) -> None:
        pending = sorted((pod["metadata"]["namespace"], pod["metadata"]["name"]) for pod in pods)
        backoff_s = self._eviction_backoff_s
        for attempt in range(1, self._eviction_attempts + 1):
            pending = [(namespace, name) for namespace, name in pending if not self._evict_pod(namespace, name)]
            if not pending:
                return
            if attempt < self._eviction_attempts:
                log.info(
                    "%s: a disruption budget blocks %d pod(s); retrying in %gs", action, len(pending), backoff_s
                )
                time.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, MAX_EVICTION_BACKOFF_S)
        blocked = ", ".join(f"{namespace}/{name}" for namespace, name in pending)
        raise SchedulerError(
            f"kubernetes: {action}: PodDisruptionBudget still blocks eviction after "
            f"{self._eviction_attempts} attempts: {blocked}"
        )

    def _evict_pod(self, namespace: str, name: str) -> bool:
        """True when the pod is evicted or already gone; False while a PDB refuses (429)."""
        from kubernetes.client import V1Eviction, V1ObjectMeta
        from kubernetes.client.exceptions import ApiException

        body = V1Eviction(
            api_version="policy/v1", kind="Eviction", metadata=V1ObjectMeta(name=name, namespace=namespace)
        )
        with self._api_errors(f"evict pod {namespace}/{name}"):
            try:
                self._api().create_namespaced_pod_eviction(
                    name, namespace, body, _request_timeout=self._request_timeout_s
                )
            except ApiException as exc:
                if exc.status == 429:
                    return False
                if exc.status != 404:
                    raise
        log.info("evicted pod %s/%s", namespace, name)
        return True


def _annotations(obj: Json) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _cordoned(node: Json) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def _owned_by_fleetctl(node: Json) -> bool:
    return _annotations(node).get(REASON_ANNOTATION, "").startswith(REASON_PREFIX)


def _taints_with_state(node: Json, state: str | None) -> list[Json]:
    """The node's taints without fleetctl's, plus fleetctl's for `state` unless None."""
    taints = [taint for taint in (node.get("spec") or {}).get("taints") or [] if taint.get("key") != STATE_KEY]
    if state is not None:
        taints.append({"key": STATE_KEY, "value": state, "effect": "NoSchedule"})
    return taints


def _phase(pod: Json) -> str | None:
    return (pod.get("status") or {}).get("phase")


def _is_workload(pod: Json) -> bool:
    """A live pod that eviction moves: DaemonSet pods come straight back, static pods are the kubelet's."""
    if _phase(pod) in _TERMINAL_PHASES or _MIRROR_POD_ANNOTATION in _annotations(pod):
        return False
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return not any(owner.get("kind") == "DaemonSet" for owner in owners)


def _job_state(pods: Sequence[Json]) -> str:
    phases = {_phase(pod) for pod in pods}
    if "Running" in phases:
        return "running"
    if "Pending" in phases:
        return "pending"
    if phases == {"Succeeded"}:
        return "completed"
    if "Failed" in phases:
        return "failed"
    return "unknown"


def _split_job_id(job_id: str) -> tuple[str, str]:
    namespace, slash, name = job_id.partition("/")
    if not slash:
        raise SchedulerError(f"kubernetes: job id {job_id!r} is not namespace/name")
    _check(namespace, _NAMESPACE, "namespace in job id")
    _check(name, _LABEL_VALUE, "job name in job id")
    return namespace, name


def _check(value: str, pattern: re.Pattern[str], what: str) -> None:
    if len(value) > 253 or not pattern.fullmatch(value):
        raise SchedulerError(f"kubernetes: invalid {what} {value!r}")


def _api_error_text(exc: ApiException) -> str:
    """'HTTP 500 Internal Server Error: <the Status message>' on one line."""
    text = f"HTTP {exc.status} {exc.reason or ''}".rstrip()
    try:
        message = json.loads(exc.body or "").get("message")
    except (ValueError, AttributeError):
        message = None
    return one_line(f"{text}: {message}" if message else text)
