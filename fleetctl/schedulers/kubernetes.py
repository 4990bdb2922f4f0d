"""Kubernetes adapter: cordon, taint and label nodes; evict pods through the Eviction API.

A drain cordons the node, adds the taint `fleetctl.io/state=<state>:NoSchedule`
(`NoExecute` for a critical fault, as configured), sets the label `fleetctl.io/state=<state>`
and records the reason in the annotation `fleetctl.io/reason`. The annotation is how
fleetctl knows a cordon is its own: resume lifts only those, unless forced.

Every transition fleetctl reports (`drain`, `resume`, `set_state`) is said in Kubernetes'
words too: the label, a health condition on the node's status (`GpuHealthy` by default,
with reason and message, as Node Problem Detector writes them) beside the lifecycle
conditions `DrainInProgress`, `Drained` and `MaintenanceInProgress`, and an Event on the
Node from component `fleetctl`.

Moving pods off a cordoned node is `drain_pods`, called once per poll, as `kubectl drain`
with fleetctl's judgement: DaemonSet pods, mirror (static) pods, pods owned by an
infrastructure controller (the Slurm operator's NodeSet: slurmd is the node, not work on
it) and pods with the do-not-evict annotation are left; the others follow the drain policy
(evict now, wait for completion, or delete after the deadline), and a critical fault
evicts them all at once. Evictions go through the Eviction API, so PodDisruptionBudgets
are honoured; a budget's refusal (429 naming the budget) is retried with backoff and then
reported by name, while the API server's rate limit (429 with Retry-After) is waited out.

A job is the set of pods sharing a job label (`fleetctl.io/job`, then the batch Job
controller's `job-name`); its id is `namespace/name`. Restarting a job evicts its pods
so that its controller (Job, JobSet, PyTorchJob ...) creates them anew elsewhere.

The `kubernetes` package is imported on first use only: it costs half a second, and
most CLI commands never talk to a cluster.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from fleetctl.inventory.names import KUBERNETES_NODE_NAME_RE
from fleetctl.schedulers.base import (
    REASON_PREFIX,
    FleetctlDoesNotOwnDrain,
    JobHistory,
    PodDrainProgress,
    SchedulerError,
    SchedulerJob,
    SchedulerNodeState,
)
from fleetctl.schedulers.kubernetes_drain import LABEL_VALUE_RE, NAMESPACE_RE, DrainOptions
from fleetctl.text import MAX_TEXT, bounded, one_line

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
# A Retry-After longer than this is cut to it: one activity must not sleep for minutes.
MAX_RETRY_AFTER_S = 30.0
STATUS_CONFLICT_ATTEMPTS = 3
# Events about nodes (cluster-scoped) go to the default namespace, as the kubelet's do.
EVENT_NAMESPACE = "default"
EVENT_SOURCE = "fleetctl"

# Every call this adapter makes, as the RBAC rules a ClusterRole must grant it:
# (apiGroup, resource, verbs). The deployment's ClusterRole is built from this list, and a
# test holds every request the adapter makes against the emulator to it.
RBAC_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("", "nodes", ("get", "patch")),
    ("", "nodes/status", ("patch",)),
    ("", "pods", ("list", "delete")),
    ("", "pods/eviction", ("create",)),
    ("", "events", ("create",)),
)

# The budget's name in the API server's refusal (pkg/registry/core/pod/storage/eviction.go).
_BUDGET_IN_MESSAGE = re.compile(r"disruption budget (\S+) needs")

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# The kubelet's copy of a static pod: evicting it does nothing, the kubelet owns it.
_MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


class KubernetesScheduler:
    """The Scheduler protocol over the Kubernetes API.

    Connects with `host` (an API server URL, no credentials; used by tests) or with a
    kubeconfig (`kubeconfig` path and `context`; both default to kubectl's defaults).
    A PodDisruptionBudget that refuses an eviction (HTTP 429) is retried
    `eviction_attempts` times, backing off from `eviction_backoff_s`, before the pods it
    still protects are reported with the budget's name; the API server's rate limit is
    waited out (its Retry-After, at most MAX_RETRY_AFTER_S) up to as many times.
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
        options: DrainOptions | None = None,
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
        self._options = options or DrainOptions()
        self._core: CoreV1Api | None = None

    def __repr__(self) -> str:
        return f"KubernetesScheduler({self._where()})"

    # -- the Scheduler protocol ------------------------------------------------------

    def drain(self, node: str, reason: str, critical: bool = False, *, state: str | None = None) -> None:
        """Cordon, taint and label the node, record why, and say so in its conditions and events.

        The taint is NoSchedule, or the configured critical effect (NoExecute: pods that do
        not tolerate it leave at once) for a critical fault. A node someone else already
        cordoned keeps their cordon and stays theirs: it gets the taint and label but not
        fleetctl's reason, so resume will not lift it.

        `state` is `draining` unless given. A node fleetctl's drain already holds is left as
        it is when no state is given, unless a critical drain must harden its taint: a job
        restart drains its bad nodes again, possibly just as their workflow shows them in
        maintenance, and must neither move the label, taint or conditions back to
        `draining` nor soften a critical fault's NoExecute.
        """
        current = self._read_node(node)
        # Bounded (MAX_TEXT, nothing unencodable) before it becomes an annotation, a
        # condition's message and an Event: no cause can make the API server refuse them.
        # One line, control characters escaped, as Slurm's reason: `kubectl describe node`
        # prints the annotation raw to an operator's terminal.
        reason = one_line(
            bounded(reason if reason.startswith(REASON_PREFIX) else f"{REASON_PREFIX} {reason}"), MAX_TEXT
        )
        effect = self._options.critical_taint_effect if critical else "NoSchedule"
        held = _own_taint(current) if _cordoned(current) and _owned_by_fleetctl(current) else None
        if held is not None and state is None:
            if held.get("effect") == self._options.critical_taint_effect or not critical:
                log.info("node %s is already drained by fleetctl (%s); left as it is", node, held.get("value"))
                return
            state = held.get("value") or None
        state = state or "draining"
        spec: Json = {"taints": _taints_with_state(current, state, effect)}
        metadata: Json = {"labels": {STATE_KEY: state}}
        if _cordoned(current) and not _owned_by_fleetctl(current):
            log.info("node %s was cordoned by someone else; leaving their cordon to them", node)
        else:
            spec["unschedulable"] = True
            metadata["annotations"] = {REASON_ANNOTATION: reason}
        self._patch_node(current, {"metadata": metadata, "spec": spec}, f"drain node {node}")
        self._report(node, state, reason)
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
        self._report(node, state, f"{REASON_PREFIX} back in {state}")
        log.info("resumed node %s", node)

    def set_state(self, node: str, state: str, reason: str) -> None:
        """Say fleetctl's lifecycle state on the node: label, the state taint's value where
        fleetctl's cordon holds the node, conditions and an Event. Placement is not changed:
        drain and resume do that."""
        reason = bounded(reason)
        current = self._read_node(node)
        metadata: Json = {"labels": {STATE_KEY: state}}
        patch: Json = {"metadata": metadata}
        own_taint = _own_taint(current)
        if own_taint is not None:
            patch["spec"] = {"taints": _taints_with_state(current, state, own_taint.get("effect") or "NoSchedule")}
        self._patch_node(current, patch, f"label node {node} {state}")
        self._report(node, state, reason)

    def node_state(self, node: str) -> SchedulerNodeState:
        current = self._read_node(node)
        cordoned = _cordoned(current)
        conditions = (current.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        if not ready:
            state = "down"
        elif cordoned:
            state = "cordoned"
        elif any(self._is_workload(pod) for pod in self._pods_on_node(node)):
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

    def workloads_on_node(self, node: str) -> list[str]:
        """The node's live workload pods, labelled as a job or not (busy_nodes' notion of work)."""
        return sorted(
            f"{(pod.get('metadata') or {}).get('namespace')}/{(pod.get('metadata') or {}).get('name')}"
            for pod in self._pods_on_node(node)
            if self._is_workload(pod)
        )

    def busy_nodes(self) -> set[str]:
        """Nodes with a live workload pod of any kind (not only labelled jobs): a node that
        serves inference is as busy as one that trains. Infrastructure pods (DaemonSet,
        static, NodeSet-owned slurmd) are not work."""
        with self._api_errors("list pods"):
            pods = self._api().list_pod_for_all_namespaces(_request_timeout=self._request_timeout_s)
        return {
            node
            for pod in map(self._json, pods.items)
            if self._is_workload(pod) and (node := (pod.get("spec") or {}).get("nodeName"))
        }

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

    def job_history(self) -> list[JobHistory]:
        """Every job the cluster's pods show (a pod labelled with a job label, not the node's
        infrastructure), as its pods tell it, one list of the cluster's pods: submitted when its
        first pod was created, started when its first pod started, ended (completed, failed)
        when its last container finished. A job whose pods are gone is no longer listed: it
        ended when fleetctl last saw it (fleetctl.db.jobs.reconcile_jobs), as a job Slurm
        forgot."""
        with self._api_errors("list pods"):
            listed = self._api().list_pod_for_all_namespaces(_request_timeout=self._request_timeout_s)
        by_job: dict[str, list[Json]] = {}
        for pod in map(self._json, listed.items):
            if (job_id := self._job_id(pod)) and _infrastructure(pod, self._options) is None:
                by_job.setdefault(job_id, []).append(pod)
        return [_job_history(job_id, pods) for job_id, pods in sorted(by_job.items())]

    def pods(self) -> list[Json]:
        """Every pod of the cluster, as the API's JSON, in one list (the pre-job gate reads
        which GPU pods completed: fleetctl.admission.completions)."""
        with self._api_errors("list pods"):
            listed = self._api().list_pod_for_all_namespaces(_request_timeout=self._request_timeout_s)
        return [self._json(pod) for pod in listed.items]

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
        action = f"restart job {job_id}"
        if blocked := self._evict(pods, action):
            raise SchedulerError(f"kubernetes: {action}: {_blocked_text(blocked, self._eviction_attempts)}")

    # -- Kubernetes only ---------------------------------------------------------------

    def drain_pods(self, node: str, critical: bool = False, deadline_passed: bool = False) -> PodDrainProgress:
        """One round of moving the node's pods off it; see the module docstring for the rules.

        Pods whose rule is `evict` (every workload pod, when `critical`) are evicted now;
        `delete` pods are deleted once `deadline_passed`, bypassing their budgets; `wait`
        pods are left to finish. Every workload pod still on the node holds the drain open,
        labelled as a job or not. Pods a budget protects stay, named with the budget.
        """
        pods = self._pods_on_node(node)
        evict, delete, holding, left = [], [], [], []
        for pod in pods:
            verdict, why = self._drain_verdict(pod, critical, deadline_passed)
            if verdict == "evict":
                evict.append(pod)
            elif verdict == "delete":
                delete.append(pod)
            elif verdict == "left":
                left.append(f"{_pod_id(pod)}: {why}")
            elif verdict == "hold":
                holding.append(f"{_pod_id(pod)}: {why}")
        blocked = self._evict(evict, f"drain pods on node {node}") if evict else {}
        for pod in delete:
            self._delete_pod(pod)
        holding += [f"{pod_id}: {_budget_text(budget)}" for pod_id, budget in blocked.items()]
        return PodDrainProgress(
            node=node,
            evicted=tuple(sorted(_pod_id(pod) for pod in evict if _pod_id(pod) not in blocked)),
            deleted=tuple(sorted(_pod_id(pod) for pod in delete)),
            holding=tuple(sorted(holding)),
            left=tuple(sorted(left)),
        )

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
                    # kubernetes.config is unannotated although the package ships py.typed.
                    InClusterConfigLoader(  # type: ignore[no-untyped-call]
                        token_filename=f"{SERVICE_ACCOUNT_DIR}/token", cert_filename=f"{SERVICE_ACCOUNT_DIR}/ca.crt"
                    ).load_and_set(configuration)
                except (config.ConfigException, OSError) as exc:
                    raise SchedulerError(
                        f"kubernetes: cannot load the pod's service account: {one_line(str(exc))}"
                    ) from exc
            else:
                try:
                    # kubernetes.config is unannotated although the package ships py.typed.
                    config.load_kube_config(  # type: ignore[no-untyped-call]
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

    def _is_workload(self, pod: Json) -> bool:
        """A live pod that is work on the node: not the node's own infrastructure."""
        return _phase(pod) not in _TERMINAL_PHASES and _infrastructure(pod, self._options) is None

    def _drain_verdict(self, pod: Json, critical: bool, deadline_passed: bool) -> tuple[str, str]:
        """What this round of a drain does with the pod, and why: gone (it finished), left
        (by rule; it does not hold the drain), evict, delete, or hold (it keeps the drain open)."""
        if _phase(pod) in _TERMINAL_PHASES:
            return "gone", "finished"
        if (why := _infrastructure(pod, self._options)) is not None:
            return "left", why
        if _annotations(pod).get(self._options.do_not_evict_annotation) == "true":
            return "left", f"annotated {self._options.do_not_evict_annotation}"
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            return "hold", "terminating"
        if critical:
            return "evict", "critical fault"
        action = next((rule.action for rule in self._options.policy if rule.matches(pod)), "evict")
        if action == "delete":
            return (
                ("delete", "drain deadline passed")
                if deadline_passed
                else ("hold", "policy deletes it after the drain deadline")
            )
        if action == "wait":
            return "hold", "policy waits for it to complete"
        return "evict", "policy evicts it"

    def _evict(self, pods: Sequence[Json], action: str) -> dict[str, str]:
        """Evict the pods, retrying the ones a budget refuses; those still refused after the
        last attempt, as {namespace/name: the budget's name}."""
        pending = sorted(_pod_id(pod) for pod in pods)
        blocked: dict[str, str] = {}
        backoff_s = self._eviction_backoff_s
        for attempt in range(1, self._eviction_attempts + 1):
            blocked = {}
            for pod_id in pending:
                budget = self._evict_pod(pod_id)
                if budget is not None:
                    blocked[pod_id] = budget
            pending = sorted(blocked)
            if not pending:
                return {}
            if attempt < self._eviction_attempts:
                log.info("%s: a disruption budget blocks %d pod(s); retrying in %gs", action, len(pending), backoff_s)
                time.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, MAX_EVICTION_BACKOFF_S)
        log.warning("%s: %s", action, _blocked_text(blocked, self._eviction_attempts))
        return blocked

    def _evict_pod(self, pod_id: str) -> str | None:
        """None when the pod is evicted or already gone; the refusing budget's name (or "" if
        the answer names none) while a PodDisruptionBudget refuses. The API server's rate
        limit is waited out here, as often as a budget would be retried."""
        from kubernetes.client import V1Eviction, V1ObjectMeta
        from kubernetes.client.exceptions import ApiException

        namespace, _, name = pod_id.partition("/")
        body = V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=V1ObjectMeta(name=name, namespace=namespace),
            delete_options=self._delete_options(),
        )
        for _ in range(self._eviction_attempts):
            with self._api_errors(f"evict pod {pod_id}"):
                try:
                    self._api().create_namespaced_pod_eviction(
                        name, namespace, body, _request_timeout=self._request_timeout_s
                    )
                except ApiException as exc:
                    if exc.status == 404:
                        return None
                    if exc.status != 429:
                        raise
                    budget = _refusing_budget(exc.body)
                    if budget is not None:
                        return f"{namespace}/{budget}" if budget else ""
                    wait_s = _retry_after_s(exc.headers, self._eviction_backoff_s)
                    log.info("evict pod %s: the API server limits requests; retrying in %gs", pod_id, wait_s)
                    time.sleep(wait_s)
                    continue
            log.info("evicted pod %s", pod_id)
            return None
        raise SchedulerError(
            f"kubernetes: evict pod {pod_id}: the API server still rate-limits evictions (HTTP 429 "
            f"with Retry-After) after {self._eviction_attempts} attempts"
        )

    def _delete_pod(self, pod: Json) -> None:
        """Delete the pod outright: its budget is not asked (a drain policy's `delete`)."""
        from kubernetes.client.exceptions import ApiException

        pod_id = _pod_id(pod)
        namespace, _, name = pod_id.partition("/")
        with self._api_errors(f"delete pod {pod_id}"):
            try:
                self._api().delete_namespaced_pod(
                    name,
                    namespace,
                    body=self._delete_options(),
                    _request_timeout=self._request_timeout_s,
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
        log.info("deleted pod %s after the drain deadline", pod_id)

    def _delete_options(self) -> Any:
        """The configured grace period for an eviction or deletion; None leaves each pod's own."""
        from kubernetes.client import V1DeleteOptions

        if self._options.grace_period_s is None:
            return None
        return V1DeleteOptions(grace_period_seconds=self._options.grace_period_s)

    def _report(self, node: str, state: str, reason: str) -> None:
        """The node's conditions and an Event say the state fleetctl moved it to.

        The conditions list is written whole, conditional on the node's resourceVersion so
        that the kubelet's own conditions are never overwritten with stale ones; a conflict
        (the kubelet wrote in between) is read again and retried.
        """
        from kubernetes.client.exceptions import ApiException

        now = datetime.now(UTC)
        for attempt in range(1, STATUS_CONFLICT_ATTEMPTS + 1):
            current = self._read_node(node)
            conditions = _merged_conditions(
                (current.get("status") or {}).get("conditions") or [],
                state_conditions(state, reason, self._options.health_condition),
                now,
            )
            patch: Json = {"metadata": {}, "status": {"conditions": conditions}}
            if (current.get("metadata") or {}).get("resourceVersion"):
                patch["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            with self._api_errors(f"set conditions of node {node}"):
                try:
                    self._api().patch_node_status(
                        node,
                        patch,
                        _content_type="application/merge-patch+json",
                        _request_timeout=self._request_timeout_s,
                    )
                except ApiException as exc:
                    if exc.status == 409 and attempt < STATUS_CONFLICT_ATTEMPTS:
                        continue
                    raise
            break
        event = node_event(current, state, reason, now)
        with self._api_errors(f"record event on node {node}"):
            # The client serialises a dict body as it is (sanitize_for_serialization), as for
            # every other call here; its signature names only the generated model class.
            self._api().create_namespaced_event(
                EVENT_NAMESPACE,
                event,  # type: ignore[arg-type]
                _request_timeout=self._request_timeout_s,
            )


def _annotations(obj: Json) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _cordoned(node: Json) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def _owned_by_fleetctl(node: Json) -> bool:
    return _annotations(node).get(REASON_ANNOTATION, "").startswith(REASON_PREFIX)


def _own_taint(node: Json) -> Json | None:
    return next((t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") == STATE_KEY), None)


def _taints_with_state(node: Json, state: str | None, effect: str = "NoSchedule") -> list[Json]:
    """The node's taints without fleetctl's, plus fleetctl's for `state` unless None."""
    taints = [taint for taint in (node.get("spec") or {}).get("taints") or [] if taint.get("key") != STATE_KEY]
    if state is not None:
        taints.append({"key": STATE_KEY, "value": state, "effect": effect})
    return taints


def state_conditions(state: str, reason: str, health_condition: str) -> list[Json]:
    """The node conditions fleetctl owns, for a node in `state` (without timestamps).

    The health condition is True only in production, Unknown while a node has yet to prove
    itself (new, firmware, burn-in, admission), False otherwise. The lifecycle conditions
    follow the draining -> maintenance path.
    """
    message = one_line(reason, 1024)
    if state == "production":
        healthy = "True"
    elif state in ("new", "firmware", "burn_in", "admission"):
        healthy = "Unknown"
    else:
        healthy = "False"
    lifecycle = {
        "DrainInProgress": state == "draining",
        "Drained": state in ("maintenance", "rma", "retired"),
        "MaintenanceInProgress": state == "maintenance",
    }
    why = _state_reason(state)
    return [{"type": health_condition, "status": healthy, "reason": why, "message": message}] + [
        {"type": kind, "status": "True" if on else "False", "reason": why, "message": message}
        for kind, on in lifecycle.items()
    ]


def _state_reason(state: str) -> str:
    """'burn_in' -> 'FleetctlBurnIn': a condition's or Event's reason is one UpperCamelCase word."""
    return "Fleetctl" + "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", state) if part)


def _merged_conditions(current: Sequence[Json], ours: Sequence[Json], now: datetime) -> list[Json]:
    """The node's conditions with ours replaced by type; lastTransitionTime moves only when a
    condition's status changes, as the kubelet and Node Problem Detector keep it."""
    stamp = _rfc3339(now) or ""
    before = {c.get("type"): c for c in current}
    merged = [c for c in current if c.get("type") not in {o["type"] for o in ours}]
    for condition in ours:
        previous = before.get(condition["type"])
        kept = (
            None
            if previous is None or previous.get("status") != condition["status"]
            else _rfc3339(previous.get("lastTransitionTime"))
        )
        merged.append({**condition, "lastHeartbeatTime": stamp, "lastTransitionTime": kept or stamp})
    return merged


def _rfc3339(when: datetime | str | None) -> str | None:
    """Seconds in UTC with a Z, as the API server writes times (the client reads them back
    as +00:00); None for what is not a time."""
    if isinstance(when, str):
        try:
            when = datetime.fromisoformat(when.replace("Z", "+00:00"))
        except ValueError:
            return None
    if not isinstance(when, datetime) or when.tzinfo is None:
        return None
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_event(node: Json, state: str, reason: str, now: datetime) -> Json:
    """A core/v1 Event on the Node, named as client-go's recorder names them."""
    metadata = node.get("metadata") or {}
    name = metadata["name"]
    stamp = _rfc3339(now) or ""
    involved: Json = {"apiVersion": "v1", "kind": "Node", "name": name}
    if metadata.get("uid"):
        involved["uid"] = metadata["uid"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": EVENT_NAMESPACE},
        "involvedObject": involved,
        "reason": _state_reason(state),
        "message": one_line(reason, 1024),
        "type": "Normal" if state == "production" else "Warning",
        "source": {"component": EVENT_SOURCE},
        "reportingComponent": EVENT_SOURCE,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def _phase(pod: Json) -> str | None:
    return (pod.get("status") or {}).get("phase")


def _infrastructure(pod: Json, options: DrainOptions) -> str | None:
    """Why the pod is the node's own rather than work on it, or None: DaemonSet pods come
    straight back, static pods are the kubelet's, and an infrastructure owner's pods (the
    Slurm operator's NodeSet runs slurmd) make the node what it is."""
    if _MIRROR_POD_ANNOTATION in _annotations(pod):
        return "mirror pod"
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        kind = owner.get("kind")
        if kind == "DaemonSet":
            return "DaemonSet pod"
        if kind in options.infrastructure_owner_kinds:
            return f"owned by {kind} {owner.get('name')}"
    return None


def _pod_id(pod: Json) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _refusing_budget(body: str | None) -> str | None:
    """The budget's name ("" if the answer names none) when a 429 is a PodDisruptionBudget's
    refusal, None when it is not (the API server's rate limit). The eviction subresource
    puts a DisruptionBudget cause in the Status details; the rate limit gives none."""
    try:
        status = json.loads(body or "")
    except ValueError:
        return None
    if not isinstance(status, dict):
        return None
    causes = (status.get("details") or {}).get("causes") or []
    for cause in causes:
        if isinstance(cause, dict) and cause.get("reason") == "DisruptionBudget":
            found = _BUDGET_IN_MESSAGE.search(str(cause.get("message") or ""))
            return found.group(1) if found else ""
    if "disruption budget" in str(status.get("message") or ""):
        return ""
    return None


def _retry_after_s(headers: Any, default_s: float) -> float:
    """The Retry-After header's delay in seconds (the API server sends whole seconds), at
    most MAX_RETRY_AFTER_S; `default_s` when absent or not a number."""
    raw = (headers or {}).get("Retry-After")
    if raw is None:
        return default_s
    try:
        seconds = float(raw)
    except (TypeError, ValueError):
        return default_s
    return default_s if math.isnan(seconds) else min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def _budget_text(budget: str) -> str:
    return (
        f"PodDisruptionBudget {budget} allows no disruption" if budget else "a PodDisruptionBudget allows no disruption"
    )


def _blocked_text(blocked: dict[str, str], attempts: int) -> str:
    pods = ", ".join(f"{pod_id} ({_budget_text(budget)})" for pod_id, budget in sorted(blocked.items()))
    return f"PodDisruptionBudget still blocks eviction after {attempts} attempts: {pods}"


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


def _job_history(job_id: str, pods: Sequence[Json]) -> JobHistory:
    state = _job_state(pods)
    nodes = tuple(sorted({node for pod in pods if (node := (pod.get("spec") or {}).get("nodeName"))}))
    created = [t for pod in pods if (t := _time((pod.get("metadata") or {}).get("creationTimestamp")))]
    started = [t for pod in pods if (t := _time((pod.get("status") or {}).get("startTime")))]
    finished = [
        t
        for pod in pods
        for status in (pod.get("status") or {}).get("containerStatuses") or []
        if (t := _time(((status.get("state") or {}).get("terminated") or {}).get("finishedAt")))
    ]
    gpus = [
        int(limit)
        for pod in pods
        for container in (pod.get("spec") or {}).get("containers") or []
        if str(limit := ((container.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", "")).isdigit()
    ]
    return JobHistory(
        job_id=job_id,
        name=job_id.partition("/")[2],
        state=state,
        nodes=nodes,
        node_count=max(len(nodes), 1),
        submitted_at=min(created, default=None),
        started_at=min(started, default=None),
        ended_at=max(finished, default=None) if state in ("completed", "failed") else None,
        gpus_per_node=max(gpus) if gpus else None,
    )


def _time(value: Any) -> datetime | None:
    """An API time (RFC 3339) as UTC, None when absent or unreadable."""
    text = _rfc3339(value)
    return None if text is None else datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _split_job_id(job_id: str) -> tuple[str, str]:
    namespace, slash, name = job_id.partition("/")
    if not slash:
        raise SchedulerError(f"kubernetes: job id {job_id!r} is not namespace/name")
    _check(namespace, NAMESPACE_RE, "namespace in job id")
    _check(name, LABEL_VALUE_RE, "job name in job id")
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
