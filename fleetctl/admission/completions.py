"""Kubernetes' stand-in for Slurm's epilog: nothing runs on a node when a pod completes, so
the gate (`fleetctl job gate-serve --watch-completions-s N`) lists the cluster's pods every N
seconds and, for each GPU pod that completed (Succeeded or Failed) since its previous list,
runs the epilog's suite on the pod's node: the same `gate_node` the Slurm epilog runs, fenced
and recorded like every check (runs `epilog/<job>-<id>`, actor `epilog@<job>`), a failing
node drained through its fleet's capacity guard. One check per node and job, however many of
the job's pods ended there.

The pods already completed when the watch starts are not checked (a restarted gate would
check every node of every finished job again); the pre-job gate still checks such a node
before its next GPU pod starts. A list that fails (the API server down) checks nothing and
is tried again at the next interval.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleetctl.admission.job_gate import GateOutcome, gate_node
from fleetctl.admission.webhook import SKIP_ANNOTATION, gpu_pod, job_of
from fleetctl.checks.suites import SuiteError
from fleetctl.db.queries import get_node
from fleetctl.schedulers.base import SchedulerError
from fleetctl.workflows.activities.prejob import JobGate

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from fleetctl.config import Settings

log = logging.getLogger(__name__)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# How many nodes' suites run at once when many pods complete together (a large job's end).
PARALLEL_CHECKS = 8


@dataclass(frozen=True)
class Completion:
    node: str
    job: str  # the pod's job label (webhook.job_of), as the pre-job gate records its checks


def completed_gpu_pods(pods: Sequence[Mapping[str, Any]]) -> dict[str, Completion]:
    """Every GPU pod in a terminal phase, bound to a node and not annotated to skip the gate:
    its key (namespace/name/uid) -> its node and job."""
    done: dict[str, Completion] = {}
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        node = spec.get("nodeName")
        skipped = (meta.get("annotations") or {}).get(SKIP_ANNOTATION) == "skip"
        if phase in TERMINAL_PHASES and node and gpu_pod(pod) and not skipped:
            key = f"{meta.get('namespace', '')}/{meta.get('name', '')}/{meta.get('uid', '')}"
            done[key] = Completion(str(node), job_of(pod))
    return done


def new_completions(done: Mapping[str, Completion], seen: set[str]) -> list[Completion]:
    """The completions not `seen` before, one per node and job, in the pods' order."""
    return list(dict.fromkeys(c for key, c in done.items() if key not in seen))


class CompletionWatcher:
    """Lists the pods every `interval_s` (`list_pods`: KubernetesScheduler.pods) and runs the
    epilog's `suite` on the node of each GPU pod that completed since, under the gate's lock
    of that node (`node_lock`: one suite per node at a time, the pre-job gate's too)."""

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        list_pods: Callable[[], list[dict[str, Any]]],
        node_lock: Callable[[str], threading.Lock],
        suite: str,
        interval_s: float,
    ) -> None:
        self.settings, self.engine, self.list_pods, self.node_lock = settings, engine, list_pods, node_lock
        self.suite, self.interval_s = suite, interval_s

    def run(self, stop: threading.Event) -> None:
        seen = None
        while not stop.is_set():
            seen = self.tick(seen)
            stop.wait(self.interval_s)

    def tick(self, seen: set[str] | None) -> set[str] | None:
        """One list: check the nodes of the pods completed since `seen` (None: the first list,
        which only notes what had completed before); the completed pods' keys now."""
        try:
            done = completed_gpu_pods(self.list_pods())
        except SchedulerError as exc:
            log.warning("pod completions: the pods could not be listed: %s", exc)
            return seen
        if seen is not None:
            with ThreadPoolExecutor(PARALLEL_CHECKS) as pool:
                for outcome in pool.map(self.check, new_completions(done, seen)):
                    if outcome is not None:
                        log.info("pod completion: %s", outcome.message)
        return set(done)

    def check(self, done: Completion) -> GateOutcome | None:
        """The epilog's suite on the node a GPU pod ended on; None when fleetctl does not
        manage the node or could not judge (said in the log)."""
        if get_node(self.engine, done.node) is None:
            return None
        with self.node_lock(done.node):
            try:
                return asyncio.run(
                    gate_node(self.settings, self.engine, done.node, done.job, self.suite, JobGate.EPILOG)
                )
            except (LookupError, SuiteError) as exc:
                log.warning("pod completion on %s: %s", done.node, exc)
            except Exception as exc:  # noqa: BLE001 - Temporal or the database down: the next pod's gate checks it
                log.warning("pod completion on %s: fleetctl unavailable: %s", done.node, exc)
        return None
