"""A node's suite just before or after a job, and a drain through the capacity guard on a
failure: one answer for the Slurm prolog and epilog (`fleetctl node prolog|epilog`) and the
Kubernetes pre-job gate's init containers (fleetctl.admission.server)."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from fleetctl.db.queries import get_node
from fleetctl.nodes.capacity import FLEET_LABEL
from fleetctl.nodes.lifecycle import NodeState
from fleetctl.workflows.activities.prejob import JobGate, PrejobFinding, run_prejob_suite

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from fleetctl.config import Settings


class GateVerdict(str, Enum):
    PASSED = "passed"  # the job may run
    KEPT = "kept"  # a check failed, but the capacity guard kept the node in service: it may run
    UNJUDGED = "unjudged"  # a check could not be judged and none failed: it may run
    DRAINED = "drained"  # a check failed and the node was drained: no job here
    OUT = "out"  # fleetctl has the node out of production (or an operator moved it first)

    @property
    def blocks(self) -> bool:
        """Whether no job may run on the node."""
        return self in (GateVerdict.DRAINED, GateVerdict.OUT)


@dataclass(frozen=True)
class GateOutcome:
    node: str
    verdict: GateVerdict
    message: str  # one line, for the scheduler's log


async def gate_node(settings: Settings, engine: Engine, name: str, job: str, suite: str, gate: JobGate) -> GateOutcome:
    """Run `suite` on the node around `job`; drain it through its own fleet's capacity guard
    on a failed check. LookupError for an unknown node; checks.suites.SuiteError for an
    unknown suite; workflows.client's errors when Temporal cannot be asked."""
    node = get_node(engine, name)
    if node is None:
        raise LookupError(f"unknown node: {name}")
    if node.state != NodeState.PRODUCTION.value:
        return GateOutcome(
            name, GateVerdict.OUT, f"{name}: {node.state} in fleetctl, not production: no job should start here"
        )
    run_id = f"{job or 'nojob'}-{uuid.uuid4().hex[:12]}"
    finding = run_prejob_suite(settings, engine, name, suite, run_id, gate)
    if finding.status == "pass":
        return GateOutcome(name, GateVerdict.PASSED, f"{name}: {suite} passed ({', '.join(finding.checked)})")
    if finding.status == "error":
        return GateOutcome(
            name, GateVerdict.UNJUDGED, f"{name}: {suite}: {finding.check} could not be judged: {finding.reason}"
        )
    # The node's own fleet's guard counts this drain: a gate whose settings name another
    # fleet (or none) must not spend that fleet's budget, nor wait on a guard no worker serves.
    guarded = dataclasses.replace(settings, fleet=str(node.labels.get(FLEET_LABEL, settings.fleet)))
    return await _drain(guarded, name, node.rack, finding, job, run_id)


async def _drain(
    settings: Settings, name: str, rack: str, finding: PrejobFinding, job: str, run_id: str
) -> GateOutcome:
    from fleetctl.workflows.client import CommandRejected, connect, request_guarded_drain

    gate = finding.gate.value
    try:
        decision, moved = await request_guarded_drain(
            await connect(settings),
            settings,
            name,
            rack,
            finding.cause,
            f"{gate}@{job or 'nojob'}",
            f"{gate}/{name}/{run_id}",
            finding.event,
        )
    except CommandRejected as exc:  # an operator moved the node first: it is out of production now
        return GateOutcome(name, GateVerdict.OUT, f"{name}: {finding.cause}; not drained: {exc}")
    if moved is None:
        return GateOutcome(
            name,
            GateVerdict.KEPT,
            f"warning: {name}: {finding.cause}; the capacity guard kept it in service: {decision.reason}",
        )
    return GateOutcome(name, GateVerdict.DRAINED, f"{name}: {finding.cause}; drained")
