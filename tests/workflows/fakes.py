"""Activities NodeLifecycle calls, replaced by name (as Temporal's samples-python does): each
fake is registered under the real activity's name, answers from a `World` the test sets up,
and records what it was asked. No database, no simulator, no scheduler: the workflow's own
decisions are what a test observes."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from temporalio import activity
from temporalio.exceptions import ApplicationError

from fleetctl.nodes.capacity import RemovalDecision, RemovalRequest, grant_for, removals_for_fault
from fleetctl.workflows.activities.database import BAD_DATA
from fleetctl.workflows.api import (
    AdmissionRequest,
    AdmissionVerdict,
    AutomationRecord,
    CheckOutcome,
    CheckRequest,
    DriftReport,
    DriftRequest,
    FaultRemoval,
    FaultRemovals,
    HealthEventBatch,
    HealthEventBatchResult,
    HealthEventInput,
    HealthEventVerdict,
    HeldNode,
    NodeCommandOutcome,
    NodeFacts,
    PodDrainOutcome,
    PodDrainRequest,
    RecordedTransition,
    RemediationChoice,
    RemediationPlan,
    RmaOpened,
    RmaRequest,
    SchedulerCordon,
    SchedulerHold,
    SchedulerStateReport,
    SweepScope,
    TransitionRecord,
    TransitionRequest,
    UpdateOutcome,
)

# The largest code the health_events column holds (a BIGINT): larger is bad data.
LARGEST_CODE = 2**63 - 1


@dataclass
class World:
    """What the fakes answer. Defaults: a healthy node whose checks pass, a guard that
    grants, a scheduler with no jobs, no firmware baseline, no runbook."""

    suite: list[str] = field(default_factory=lambda: ["nvidia-smi-query", "nccl-allreduce"])
    check_status: dict[str, str] = field(default_factory=dict)  # check -> status; "raise": the activity fails
    admission: AdmissionVerdict | None = None
    guard_grants: bool = True
    guard_reason: str = "within the fleet's limits"
    jobs: list[str] = field(default_factory=list)  # the node's running jobs, every time it is asked
    held_jobs: list[str] = field(default_factory=list)  # those read once a check's hold is taken
    verdict: HealthEventVerdict | None = None  # the judgement of every recordable event...
    verdicts: dict[int | None, HealthEventVerdict] = field(default_factory=dict)  # ...or of those of this code
    # Set: the first recording of health events waits for it (a test queues what arrives meanwhile).
    records_held: asyncio.Event | None = None
    baseline_id: int = 0
    drifts: list[list[str]] = field(default_factory=list)  # node_drift's answers, in order ([]: matches)
    update: UpdateOutcome = field(default_factory=lambda: UpdateOutcome(True, "updated"))
    scheduler_resumes: bool = True
    # The pods holding a drain, round by round (the last answer repeats; []: none hold).
    pods_holding: list[list[str]] = field(default_factory=list)
    # Set: every check waits for it (a test sends what arrives while a check runs).
    checks_held: asyncio.Event | None = None
    # The node's NVLink domain and its other nodes (all in service): a fault of the domain's
    # fabric asks the guard for them too. "": the node is in no domain.
    nvlink_domain: str = ""
    domain_nodes: list[str] = field(default_factory=list)


class FakeActivities:
    def __init__(self, world: World) -> None:
        self.world = world
        self.calls: list[tuple[str, object]] = []
        self.transitions: list[TransitionRecord] = []
        self.automation: list[AutomationRecord] = []
        self._changed = asyncio.Condition()

    async def _called(self, name: str, arg: object) -> None:
        async with self._changed:
            self.calls.append((name, arg))
            self._changed.notify_all()

    def asked(self, name: str) -> list:
        return [arg for called, arg in self.calls if called == name]

    def triggers(self) -> list[str]:
        return [t.trigger for t in self.transitions]

    async def until(self, predicate: Callable[[], bool], timeout_s: float) -> None:
        """Wait until the fakes have been asked enough that `predicate` holds."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout_s)

    def all(self) -> list[Callable]:
        return [
            self.record_transition,
            self.record_transition_with_facts,
            self.node_facts,
            self.record_health_event,
            self.record_health_events,
            self.record_automation_event,
            self.running_jobs_on,
            self.cordon_in_scheduler,
            self.resume_in_scheduler,
            self.drain_pods_on,
            self.hold_in_scheduler,
            self.release_hold,
            self.report_state,
            self.choose_remediation,
            self.suite_checks,
            self.run_check,
            self.judge_admission,
            self.ask_capacity_guard,
            self.removals_for_fault,
            self.command_node,
            self.current_baseline_id,
            self.node_drift,
            self.apply_updates,
            self.open_rma,
        ]

    # -- the node's row and events -----------------------------------------------------------

    @activity.defn(name="record_transition")
    async def record_transition(self, record: TransitionRecord) -> int:
        self.transitions.append(record)
        await self._called("record_transition", record)
        return record.expected_version + 1

    @activity.defn(name="record_transition_with_facts")
    async def record_transition_with_facts(self, record: TransitionRecord) -> RecordedTransition:
        """The real one is record_transition and node_facts in one activity: so is this one,
        and a test asks either by the name of its part."""
        version = await self.record_transition(record)
        return RecordedTransition(version, await self.node_facts(record.node_name))

    @activity.defn(name="node_facts")
    async def node_facts(self, name: str) -> NodeFacts:
        await self._called("node_facts", name)
        return NodeFacts(name=name, rack="r1", profile="h100-sxm", scheduler="fake", state="production")

    @activity.defn(name="record_health_event")
    async def record_health_event(self, ev: HealthEventInput) -> HealthEventVerdict:
        await self._called("record_health_event", ev)
        if ev.code is not None and not 0 <= ev.code <= LARGEST_CODE:
            raise ApplicationError(f"code {ev.code} is outside the column's range", type=BAD_DATA, non_retryable=True)
        assert self.world.verdict is not None, "the test sent an event without saying how it is judged"
        return self.world.verdict

    @activity.defn(name="record_health_events")
    async def record_health_events(self, batch: HealthEventBatch) -> HealthEventBatchResult:
        await self._called("record_health_events", batch)
        if self.world.records_held is not None and len(self.asked("record_health_events")) == 1:
            await self.world.records_held.wait()
        result = HealthEventBatchResult()
        for index, ev in enumerate(batch.events):
            refusal = (
                ""
                if ev.code is None or 0 <= ev.code <= LARGEST_CODE
                else f"code {ev.code} is outside the column's range"
            )
            result.refusals.append(refusal)
            if refusal:  # as the real activity: recorded as refused, the others go on
                await self.record_automation_event(AutomationRecord("rejected", refusal, ev.actor, batch.node))
                continue
            verdict = self.world.verdicts.get(ev.code, self.world.verdict)
            assert verdict is not None, "the test sent an event without saying how it is judged"
            result.last_reason = verdict.reason
            if verdict.drain_now:
                result.acted.append(dataclasses.replace(verdict, index=index))
        return result

    @activity.defn(name="record_automation_event")
    async def record_automation_event(self, rec: AutomationRecord) -> None:
        self.automation.append(rec)
        await self._called("record_automation_event", rec)

    # -- the scheduler -----------------------------------------------------------------------

    @activity.defn(name="running_jobs_on")
    async def running_jobs_on(self, name: str) -> list[str]:
        await self._called("running_jobs_on", name)
        return list(self.world.jobs)

    @activity.defn(name="cordon_in_scheduler")
    async def cordon_in_scheduler(self, req: SchedulerCordon) -> str:
        await self._called("cordon_in_scheduler", req)
        return "fake"

    @activity.defn(name="hold_in_scheduler")
    async def hold_in_scheduler(self, req: SchedulerHold) -> HeldNode:
        await self._called("hold_in_scheduler", req)
        return HeldNode(req.node, list(self.world.held_jobs))

    @activity.defn(name="release_hold")
    async def release_hold(self, req: SchedulerHold) -> bool:
        await self._called("release_hold", req)
        return True

    @activity.defn(name="drain_pods_on")
    async def drain_pods_on(self, req: PodDrainRequest) -> PodDrainOutcome:
        await self._called("drain_pods_on", req)
        rounds = self.world.pods_holding
        holding = (rounds.pop(0) if len(rounds) > 1 else rounds[0]) if rounds else []
        return PodDrainOutcome(req.node, holding=list(holding))

    @activity.defn(name="report_state")
    async def report_state(self, req: SchedulerStateReport) -> None:
        await self._called("report_state", req)

    @activity.defn(name="resume_in_scheduler")
    async def resume_in_scheduler(self, name: str) -> None:
        await self._called("resume_in_scheduler", name)
        if not self.world.scheduler_resumes:
            raise ApplicationError(
                f"{name} was drained by someone else", type="DrainedBySomeoneElse", non_retryable=True
            )

    # -- checks, admission, firmware -----------------------------------------------------------

    @activity.defn(name="suite_checks")
    async def suite_checks(self, scope: SweepScope) -> list[str]:
        await self._called("suite_checks", scope)
        return list(self.world.suite)

    @activity.defn(name="run_check")
    async def run_check(self, req: CheckRequest) -> CheckOutcome:
        await self._called("run_check", req)
        if self.world.checks_held is not None:
            await self.world.checks_held.wait()
        status = self.world.check_status.get(req.check, "pass")
        if status == "raise":
            raise ApplicationError(f"{req.node}: unreachable", type="Executor.unreachable", non_retryable=True)
        return CheckOutcome(req.node, req.check, status, f"{req.check}: {status}", {}, None, len(self.calls))

    @activity.defn(name="judge_admission")
    async def judge_admission(self, req: AdmissionRequest) -> AdmissionVerdict:
        await self._called("judge_admission", req)
        return self.world.admission or AdmissionVerdict(req.node, True, "within the profile")

    @activity.defn(name="current_baseline_id")
    async def current_baseline_id(self, fleet: str) -> int:
        await self._called("current_baseline_id", fleet)
        return self.world.baseline_id

    @activity.defn(name="node_drift")
    async def node_drift(self, req: DriftRequest) -> DriftReport:
        await self._called("node_drift", req)
        drifts = self.world.drifts.pop(0) if self.world.drifts else []
        return DriftReport(req.node, "drift" if drifts else "ok", drifts)

    @activity.defn(name="apply_updates")
    async def apply_updates(self, req: DriftRequest) -> UpdateOutcome:
        await self._called("apply_updates", req)
        return self.world.update

    # -- the capacity guard, remediation ---------------------------------------------------------

    @activity.defn(name="ask_capacity_guard")
    async def ask_capacity_guard(self, req: RemovalRequest) -> RemovalDecision:
        await self._called("ask_capacity_guard", req)
        granted = self.world.guard_grants or req.critical
        decision = RemovalDecision(
            req.node,
            granted,
            "critical" if req.critical else self.world.guard_reason,
            grant=grant_for("fake-guard", req.node, 1) if granted else "",
        )
        if granted and req.domain_nodes:
            decision.domain_nodes = list(req.domain_nodes)
            decision.domain_grants = {n: grant_for("fake-guard", n, 1) for n in req.domain_nodes}
        return decision

    @activity.defn(name="removals_for_fault")
    async def removals_for_fault(self, fault: FaultRemoval) -> FaultRemovals:
        await self._called("removals_for_fault", fault)
        members = [(fault.request.node, "production"), *((n, "production") for n in self.world.domain_nodes)]
        return FaultRemovals(
            removals_for_fault(fault.request, self.world.nvlink_domain, members, fault.check, fault.signature)
        )

    @activity.defn(name="command_node")
    async def command_node(self, req: TransitionRequest) -> NodeCommandOutcome:
        """Another node's workflow asked to move (a domain's node held with the finder): accepted."""
        await self._called("command_node", req)
        return NodeCommandOutcome(req.node, True, "production", "draining")

    @activity.defn(name="choose_remediation")
    async def choose_remediation(self, choice: RemediationChoice) -> RemediationPlan:
        await self._called("choose_remediation", choice)
        return RemediationPlan(runbook=None, event=choice.event)

    @activity.defn(name="open_rma")
    async def open_rma(self, req: RmaRequest) -> RmaOpened:
        await self._called("open_rma", req)
        return RmaOpened(rma_id=1, created=True)
