"""An in-memory Kubernetes API server for the adapter tests.

No API server can be installed here, so the adapter talks real HTTP, through the official
client, to kmock's KubernetesEmulator: it stores objects and serves create, read, patch,
list and delete. It does not evaluate label or field selectors and has no Eviction
subresource; `KubeEmulator` adds both, as a real API server would answer them.

Evictions follow the API server's documented rules (k8s.io/docs/concepts/scheduling-eviction/
api-eviction and pkg/registry/core/pod/storage/eviction.go): a pod that is not running
(Pending, Succeeded, Failed) is deleted whatever its budget; a pod matched by more than one
PodDisruptionBudget is refused with 500; a pod matched by one is refused with 429 and the
budget's name in the Status details while the budget allows no disruption (its healthy
pods, Running ones here, not above minAvailable, or expected minus maxUnavailable).
`block_eviction` scripts the same refusal for a number of attempts, and `throttle_evictions`
answers 429 with `Retry-After` as the API server's priority-and-fairness rate limit does.
An API server in trouble is the test's too: `fail_node_patches` answers node PATCHes with
an error (500 by default) and leaves the node as it was, as etcd timing out behind it does.

Every request is recorded as the RBAC verb, API group and resource it needs (`access`), so
tests can hold the adapter's calls against the permissions it declares. Discovery names the
resources and lists carry their kind, so a real kubectl can read what the adapter wrote.

kmock is asyncio-based and the adapter is synchronous, so the server runs its own event
loop in a background thread.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp.web
import kmock

PODS = kmock.resource("v1/pods")
NODES = kmock.resource("v1/nodes")
EVENTS = kmock.resource("v1/events")
PDBS = kmock.resource("policy/v1/poddisruptionbudgets")

# What discovery says about them, so that kubectl can name and print them.
_DISCOVERY = {
    "v1/nodes": kmock.ResourceInfo(
        kind="Node",
        singular="node",
        namespaced=False,
        shortnames={"no"},
        verbs={"get", "list", "patch", "update"},
        subresources={"status"},
    ),
    "v1/pods": kmock.ResourceInfo(
        kind="Pod",
        singular="pod",
        namespaced=True,
        shortnames={"po"},
        verbs={"get", "list", "create", "delete"},
        subresources={"eviction"},
    ),
    "v1/events": kmock.ResourceInfo(
        kind="Event", singular="event", namespaced=True, shortnames={"ev"}, verbs={"get", "list", "create", "patch"}
    ),
    "policy/v1/poddisruptionbudgets": kmock.ResourceInfo(
        kind="PodDisruptionBudget",
        singular="poddisruptionbudget",
        namespaced=True,
        shortnames={"pdb"},
        verbs={"get", "list", "create"},
    ),
}
_RBAC_VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


class _Emulator(kmock.KubernetesEmulator):
    """kmock's emulator applies a PATCH to its objects before any reaction answers: a
    reaction's 500 would still change the node. Refusals are decided here, first."""

    refuse: Any = None  # request -> KubernetesError, an aiohttp response, or None
    record: Any = None  # request -> None, called for every request first

    async def _serve_version(self, request: kmock.Request) -> Any:
        # kmock names the core group's version "/v1"; kubectl maps resources only under "v1".
        listing = await super()._serve_version(request)
        if isinstance(listing, dict) and str(listing.get("groupVersion", "")).startswith("/"):
            listing["groupVersion"] = listing["groupVersion"][1:]
        return listing

    async def _serve_list(self, request: kmock.Request) -> Any:
        # kmock's lists carry no kind; kubectl refuses a list without one.
        listing = await super()._serve_list(request)
        resource = request.resource
        group_version = f"{resource.group}/{resource.version}" if resource.group else resource.version
        info = _DISCOVERY.get(f"{group_version}/{resource.plural}")
        if isinstance(listing, dict) and info is not None:
            listing.setdefault("kind", f"{info.kind}List")
            listing.setdefault("apiVersion", group_version)
        return listing

    async def _handle(self, request: kmock.Request) -> Any:
        if self.record is not None:
            self.record(request)
        error = self.refuse(request) if self.refuse is not None else None
        if isinstance(error, aiohttp.web.StreamResponse):
            return error
        if error is not None:
            raise error
        return await super()._handle(request)


class KubeEmulator:
    """Use as a context manager; `url` is the API server's address while inside."""

    def __init__(self) -> None:
        self.handler = _Emulator()
        self.handler.refuse = self._refuse
        self.handler.record = self._record
        for resource, info in _DISCOVERY.items():
            self.handler.resources[resource] = info
        self.url = ""
        # (verb, API group, resource[/subresource]) of every API request, as RBAC names it.
        self.access: list[tuple[str, str, str]] = []
        # ("namespace/name", gracePeriodSeconds or None) of every eviction and pod DELETE.
        self.eviction_grace: list[tuple[str, int | None]] = []
        self.pod_deletions: list[tuple[str, int | None]] = []
        # "namespace/name" of every eviction request, in order, answered or refused.
        self.eviction_requests: list[str] = []
        # (time.monotonic(), "namespace/name") of the same requests.
        self.eviction_times: list[tuple[float, str]] = []
        # (time.monotonic(), node name, HTTP status answered) of every node PATCH, in order.
        self.node_patches: list[tuple[float, str, int]] = []
        self._blocked_attempts: dict[str, float] = {}
        self._failing_patches: tuple[int, float] = (500, 0)
        self._failing_status_only = False
        self._throttled_evictions: tuple[float, float] = (0, 0.0)
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)

    def __enter__(self) -> KubeEmulator:
        self.handler[kmock.action.LIST, PODS] << self._list_pods
        self.handler["post", PODS, kmock.subresource("eviction")] << self._evict
        self._thread.start()
        if not self._ready.wait(timeout=10):
            raise RuntimeError("the kmock server did not start within 10s")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with self.handler, kmock.Server(self.handler) as server:
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    # -- objects -----------------------------------------------------------------------

    def write_kubeconfig(self, path: Path, user: str = "fleetctl", context: str = "gpu-fleet") -> Path:
        """A kubeconfig for this emulator, as kubectl would read it (the token is not checked)."""
        path.write_text(f"""
apiVersion: v1
kind: Config
clusters: [{{name: emu, cluster: {{server: "{self.url}"}}}}]
users: [{{name: {user}, user: {{token: not-checked-by-the-emulator}}}}]
contexts: [{{name: {context}, context: {{cluster: emu, user: {user}}}}}]
current-context: {context}
""")
        return path

    def add_node(
        self,
        name: str,
        *,
        ready: bool = True,
        unschedulable: bool = False,
        taints: list[dict[str, str]] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> None:
        spec: dict[str, Any] = {"taints": taints} if taints else {}
        if unschedulable:
            spec["unschedulable"] = True
        self.handler.objects[NODES, None, name] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name},
                "annotations": annotations or {},
            },
            "spec": spec,
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
        }

    def add_pod(
        self,
        namespace: str,
        name: str,
        node: str,
        *,
        labels: dict[str, str] | None = None,
        phase: str = "Running",
        owner_kind: str | None = None,
        owner_api_version: str = "apps/v1",
        annotations: dict[str, str] | None = None,
        gpus: int = 0,
    ) -> None:
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "labels": labels or {},
            "annotations": annotations or {},
        }
        if owner_kind:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": owner_api_version,
                    "kind": owner_kind,
                    "name": f"{name}-owner",
                    "uid": f"uid-{name}",
                    "controller": True,
                }
            ]
        # A GPU pod asks for nvidia.com/gpu, as the device plugin's resource is asked for.
        resources = {"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}} if gpus else {}
        self.handler.objects[PODS, namespace, name] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "trainer", **resources}]},
            "status": {"phase": phase},
        }

    def add_pdb(
        self,
        namespace: str,
        name: str,
        match_labels: dict[str, str],
        *,
        min_available: int | str | None = None,
        max_unavailable: int | str | None = None,
    ) -> None:
        """A policy/v1 PodDisruptionBudget; the eviction check reads it as the API server does."""
        spec: dict[str, Any] = {"selector": {"matchLabels": match_labels}}
        if min_available is not None:
            spec["minAvailable"] = min_available
        if max_unavailable is not None:
            spec["maxUnavailable"] = max_unavailable
        self.handler.objects[PDBS, namespace, name] = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }

    def node(self, name: str) -> dict[str, Any]:
        return self.handler.objects[NODES, None, name].raw

    def events(self) -> list[dict[str, Any]]:
        """Every Event created, in the order created."""
        return [obj.raw for (resource, _, _), obj in self.handler.objects.items() if resource == EVENTS]

    def pod_exists(self, namespace: str, name: str) -> bool:
        key = (PODS, namespace, name)
        return key in self.handler.objects and not self.handler.objects[key].deleted

    def finish_pod(self, namespace: str, name: str, phase: str = "Succeeded") -> None:
        """The pod's containers exit (its job is done): it stays, in a terminal phase."""
        self.handler.objects[PODS, namespace, name].patch({"status": {"phase": phase}})

    # -- an API server in trouble --------------------------------------------------------

    def fail_node_patches(self, status: int = 500, attempts: float = math.inf, status_only: bool = False) -> None:
        """Answer the next `attempts` PATCHes of any node (of its status subresource only, if
        `status_only`) with `status`, leaving the node unchanged."""
        self._failing_patches = (status, attempts)
        self._failing_status_only = status_only

    def throttle_evictions(self, requests: float, retry_after_s: float) -> None:
        """Answer the next `requests` evictions with 429 and `Retry-After`, as the API server's
        priority-and-fairness limit does; the pod is left as it was."""
        self._throttled_evictions = (requests, retry_after_s)

    def _record(self, request: kmock.Request) -> None:
        if request.resource is None or not request.resource.plural:
            return  # discovery: every authenticated client may read it
        resource = request.resource.plural + (f"/{request.subresource}" if request.subresource else "")
        method = str(request.method.value if hasattr(request.method, "value") else request.method).upper()
        if method == "GET":
            verb = "watch" if request.params.get("watch") else "get" if request.name else "list"
        else:
            verb = _RBAC_VERBS.get(method, method.lower())
        self.access.append((verb, request.resource.group or "", resource))
        if request.resource == PODS and verb == "delete" and not request.subresource:
            grace = (request.data or {}).get("gracePeriodSeconds") if isinstance(request.data, dict) else None
            self.pod_deletions.append((f"{request.namespace}/{request.name}", grace))

    def _refuse(self, request: kmock.Request) -> kmock.KubernetesError | aiohttp.web.StreamResponse | None:
        if request.resource == PODS and request.subresource == "eviction":
            return self._throttle(request)
        if request.resource != NODES or request.action != kmock.action.UPDATE:
            return None
        status, left = self._failing_patches
        if left <= 0 or (self._failing_status_only and request.subresource != "status"):
            self.node_patches.append((time.monotonic(), request.name or "", 200))
            return None
        self._failing_patches = (status, left - 1)
        self.node_patches.append((time.monotonic(), request.name or "", status))
        return kmock.KubernetesError(
            status=status,
            reason={500: "InternalError", 429: "TooManyRequests", 409: "Conflict"}.get(status, "Failure"),
            message="etcdserver: request timed out" if status == 500 else f"refused with HTTP {status}",
        )

    def _throttle(self, request: kmock.Request) -> aiohttp.web.StreamResponse | None:
        left, retry_after_s = self._throttled_evictions
        if left <= 0:
            return None
        self._throttled_evictions = (left - 1, retry_after_s)
        self.eviction_requests.append(f"{request.namespace}/{request.name}")
        self.eviction_times.append((time.monotonic(), f"{request.namespace}/{request.name}"))
        # The API server's own answer (apiserver/pkg/server/filters/maxinflight.go): no details.
        return aiohttp.web.json_response(
            {
                "apiVersion": "v1",
                "kind": "Status",
                "metadata": {},
                "status": "Failure",
                "message": "Too many requests, please try again later.",
                "reason": "TooManyRequests",
                "details": {"retryAfterSeconds": math.ceil(retry_after_s)},
                "code": 429,
            },
            status=429,
            headers={"Retry-After": f"{retry_after_s:g}"},
        )

    # -- PodDisruptionBudgets ------------------------------------------------------------

    def block_eviction(self, namespace: str, name: str, attempts: float = math.inf) -> None:
        """Refuse the pod's next `attempts` evictions with 429, as a PDB allowing no disruption does
        (for tests that script the refusal rather than build the budget)."""
        self._blocked_attempts[f"{namespace}/{name}"] = attempts

    def _evict(self, request: kmock.Request) -> dict[str, Any]:
        namespace, name = request.namespace or "", request.name or ""
        self.eviction_requests.append(f"{namespace}/{name}")
        self.eviction_times.append((time.monotonic(), f"{namespace}/{name}"))
        options = (request.data or {}).get("deleteOptions") or {} if isinstance(request.data, dict) else {}
        self.eviction_grace.append((f"{namespace}/{name}", options.get("gracePeriodSeconds")))
        if self._blocked_attempts.get(f"{namespace}/{name}", 0) > 0:
            self._blocked_attempts[f"{namespace}/{name}"] -= 1
            raise _budget_refusal("scripted-budget", 1, 1)
        if not self.pod_exists(namespace, name):
            raise kmock.KubernetesError(status=404, reason="NotFound", message=f'pods "{name}" not found')
        pod = self.handler.objects[PODS, namespace, name].raw
        if pod["status"].get("phase") == "Running":
            self._check_budgets(pod)
        self.handler.objects[PODS, namespace, name].delete()
        # The API server answers 201 with this Status; kmock serves it as 200, which the
        # client reads the same way (any 2xx is success).
        return {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success", "code": 201}

    def _check_budgets(self, pod: dict[str, Any]) -> None:
        namespace = pod["metadata"]["namespace"]
        budgets = [
            obj.raw
            for (resource, ns, _), obj in self.handler.objects.items()
            if resource == PDBS
            and ns == namespace
            and not obj.deleted
            and _selects(obj.raw, pod["metadata"].get("labels") or {})
        ]
        if not budgets:
            return
        if len(budgets) > 1:
            raise kmock.KubernetesError(
                status=500,
                reason="InternalError",
                message="This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            )
        budget = budgets[0]
        # The disruption controller expects as many pods as their controllers want: evicted
        # ones count (their controller recreates them) but are not healthy until then.
        covered = [
            obj
            for (resource, ns, _), obj in self.handler.objects.items()
            if resource == PODS
            and ns == namespace
            and _selects(budget, (obj.last.raw if obj.deleted else obj.raw)["metadata"].get("labels") or {})
        ]
        expected = len(covered)
        healthy = sum(1 for obj in covered if not obj.deleted and obj.raw["status"].get("phase") == "Running")
        spec = budget["spec"]
        if "minAvailable" in spec:
            desired = _scaled(spec["minAvailable"], expected)
        else:
            desired = expected - _scaled(spec.get("maxUnavailable", 0), expected)
        if healthy - desired <= 0:
            raise _budget_refusal(budget["metadata"]["name"], desired, healthy)

    # -- selectors -----------------------------------------------------------------------

    def _list_pods(self, request: kmock.Request) -> dict[str, Any]:
        wanted_labels = _equality_selector(request.params.get("labelSelector", ""))
        wanted_fields = _equality_selector(request.params.get("fieldSelector", ""))
        if set(wanted_fields) - {"spec.nodeName"}:
            raise kmock.KubernetesError(status=400, message=f"unsupported field selector {wanted_fields}")
        items = []
        for (resource, namespace, _), obj in self.handler.objects.items():
            if resource != PODS or obj.deleted or request.namespace not in (None, namespace):
                continue
            pod = obj.raw
            labels = pod["metadata"].get("labels", {})
            if any(labels.get(key) != value for key, value in wanted_labels.items()):
                continue
            if "spec.nodeName" in wanted_fields and pod["spec"].get("nodeName") != wanted_fields["spec.nodeName"]:
                continue
            items.append(pod)
        return {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": items}


def _budget_refusal(budget: str, desired: int, healthy: int) -> kmock.KubernetesError:
    """The API server's 429 for a budget that allows no disruption (eviction.go)."""
    return kmock.KubernetesError(
        status=429,
        reason="TooManyRequests",
        message="Cannot evict pod as it would violate the pod's disruption budget.",
        details={
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": f"The disruption budget {budget} needs {desired} healthy pods and has {healthy} currently",
                }
            ]
        },
    )


def _selects(budget: dict[str, Any], labels: dict[str, str]) -> bool:
    wanted = budget["spec"]["selector"].get("matchLabels") or {}
    return all(labels.get(key) == value for key, value in wanted.items())


def _scaled(value: int | str, expected: int) -> int:
    """An int, or a percentage of the expected pods rounded up, as the disruption controller does."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * expected / 100)
    return int(value)


def _equality_selector(selector: str) -> dict[str, str]:
    """'a=1,b=2' -> {'a': '1', 'b': '2'}: the only selector form the adapter sends."""
    pairs = [term.split("=", 1) for term in selector.split(",") if term]
    if any(len(pair) != 2 or pair[1].startswith("=") or pair[0].endswith("!") for pair in pairs):
        raise kmock.KubernetesError(status=400, message=f"unsupported selector {selector!r}")
    return dict(pairs)
