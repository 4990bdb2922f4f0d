"""Remediation: run one runbook for one node, step by step, each step recorded.

The workflow never writes node state: drains, RMAs and returns to service are requests to
the node's own NodeLifecycle workflow (through NodeCommandActivities.command_node and the
admit update), which may refuse them. Hardware steps wait until the node is out of service.

Modes: `live` acts; `dry_run` (an operator's --dry-run) and `shadow` (the fleet-wide
setting) record what each step would do and do nothing. A dry run follows the path on
which every step succeeds, so it shows the steps a healthy recovery takes.

A critical event on the node while the run works on it (the node's workflow signals
`interrupt`, patch remediation-interrupt) cuts the step in flight short: a check, a wait, a
drain waiting for the node is cancelled and recorded as `interrupted`, never as passed or
failed; a GPU reset, a reboot or an RMA finishes first (a half-done power cycle or ticket
helps nobody). The run then ends `interrupted`, and the node's workflow starts the runbook
for the new event.

An RMA step of a node in a correlated burst (critical events on more nodes than the guard's
storm limit, fleetctl.remediation.rma.burst_verdict; patch rma-burst-confirmation) opens
nothing: the RMA is recorded as awaiting confirmation and the run waits for an operator's
`decide_rma` update (`fleetctl rma confirm` / `rma reject`). The wait is part of the RMA
step, which finishes first: an interrupt meanwhile finds the node already waiting for an
operator.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from fleetctl.nodes.capacity import RemovalRequest
    from fleetctl.nodes.lifecycle import Actor, NodeState
    from fleetctl.remediation.actions import DISRUPTIVE, trigger_towards
    from fleetctl.remediation.runbooks import Step
    from fleetctl.workflows.activities.checks import CheckActivities
    from fleetctl.workflows.activities.jobs import JobRestartActivities
    from fleetctl.workflows.activities.node import NodeActivities
    from fleetctl.workflows.activities.remediation import RemediationActivities
    from fleetctl.workflows.api import (
        REMEDIATION_INTERRUPT_SIGNAL,
        RMA_DECISION_UPDATE,
        ActionOutcome,
        AdmitRequest,
        BurstAnswer,
        BurstQuery,
        CheckRequest,
        HardwareRequest,
        JobRestartInput,
        NodeCommandOutcome,
        NodeFacts,
        NotifyRequest,
        PreparedStep,
        RemediationInput,
        RemediationInterrupt,
        RemediationResult,
        RmaDecided,
        RmaDecision,
        RmaOpened,
        RmaRequest,
        RunContext,
        RunEnd,
        RunStart,
        StepInput,
        StepRecord,
        StepResult,
        SweepScope,
        TransitionRequest,
        job_restart_id,
    )
    from fleetctl.workflows.definitions.job_restart import JobRestart
    from fleetctl.workflows.definitions.shared import (
        MESSAGE,
        QUICK,
        SCHEDULER,
        command_node,
        guarded_drain,
        hardware_step,
        run_check,
        unless,
    )

# How long a hardware step waits for the node's own workflow to finish draining it.
OUT_OF_SERVICE_WAIT = timedelta(hours=3)
OUT_OF_SERVICE_POLL = timedelta(seconds=2)
CHECK_ATTEMPTS = 3
# Steps that finish even when a critical event interrupts the run: what they set going on the
# node (a reset, a power cycle, a vendor ticket) is not undone by stopping to wait for it.
FINISH_FIRST = frozenset({"gpu_reset", "reboot", "rma"})


def run_key_for(workflow_id: str, run_id: str, whole: bool = True) -> str:
    """The run's key in the database (and in the ids of the job restarts it starts). The whole
    run id: Temporal's run ids are UUIDv7, whose first characters are the start time, so two
    runs of one node begun within a minute of each other shared their first eight and the
    second wrote over the first's row. Runs begun before the patch keep the eight (`whole`
    False): their histories name children by it."""
    return f"{workflow_id}@{run_id if whole else run_id[:8]}"


@workflow.defn
class Remediation:
    def __init__(self) -> None:
        self.steps: list[StepResult] = []
        self.state = ""
        self.escalated = ""
        self.interrupted = ""
        # The RMA held for an operator (its record's id), the answer, and what came of it.
        self.held_rma: int | None = None
        self.rma_answer: RmaDecision | None = None
        self.rma_decided: RmaDecided | None = None

    @workflow.query
    def progress(self) -> list[StepResult]:
        return self.steps

    @workflow.signal(name=REMEDIATION_INTERRUPT_SIGNAL)
    def interrupt(self, req: RemediationInterrupt) -> None:
        self.interrupted = self.interrupted or req.reason

    @workflow.update(name=RMA_DECISION_UPDATE)
    async def decide_rma(self, answer: RmaDecision) -> RmaDecided:
        """`fleetctl rma confirm|reject ID`: the answer the held RMA waits for; returns once
        the run has acted on it."""
        self.rma_answer = answer
        await workflow.wait_condition(lambda: self.rma_decided is not None)
        assert self.rma_decided is not None  # what the wait was for
        return self.rma_decided

    @decide_rma.validator
    def _answerable(self, answer: RmaDecision) -> None:
        if self.held_rma != answer.rma_id:
            raise ValueError(f"RMA {answer.rma_id} is not held by this run")
        if self.rma_answer is not None:
            done = "confirmed" if self.rma_answer.confirm else "rejected"
            raise ValueError(f"RMA {answer.rma_id} was already {done} by {self.rma_answer.actor}")

    @workflow.run
    async def run(self, inp: RemediationInput) -> RemediationResult:
        self.inp = inp
        info = workflow.info()
        self.run_key = run_key_for(
            info.workflow_id, info.first_execution_run_id, whole=workflow.patched("remediation-run-key-whole")
        )
        self.ctx: RunContext = await workflow.execute_activity_method(
            RemediationActivities.begin_run,
            RunStart(self.run_key, inp.node, inp.runbook["name"], inp.event, inp.mode, inp.actor, workflow.now()),
            **QUICK,
        )
        self.state = self.ctx.state
        results: dict[str, dict[str, str]] = {}
        status, outcome = ("succeeded", "every step done") if inp.mode == "live" else ("dry_run", "nothing was done")
        for step in (Step.from_dict(s) for s in inp.runbook["steps"]):
            started = workflow.now()
            context = {
                "node": {**self.ctx.node, "state": self.state},
                "event": inp.event,
                "steps": results,
                "runbook": inp.runbook["name"],
                "mode": inp.mode,
            }
            prepared: PreparedStep = await workflow.execute_activity_method(
                RemediationActivities.prepare_step, StepInput(step.to_dict(), context), **QUICK
            )
            if prepared.error:
                result = StepResult(step.index, step.name, step.action, "failed", prepared.error)
            elif not prepared.run:
                result = StepResult(step.index, step.name, step.action, "skipped", f"condition false: {step.when}")
            elif inp.mode != "live":
                result = StepResult(step.index, step.name, step.action, "would_run", _describe(step, prepared.params))
            elif self.interrupted and workflow.patched("remediation-interrupt"):
                result = StepResult(step.index, step.name, step.action, "interrupted", self.interrupted)
            else:
                done = await self._act_unless_interrupted(step, prepared.params)
                if done is None:
                    result = StepResult(step.index, step.name, step.action, "interrupted", self.interrupted)
                else:
                    result = StepResult(step.index, step.name, step.action, "passed" if done[0] else "failed", done[1])
            # A dry run assumes success, so later conditions follow the recovery path.
            results[step.name] = {
                "status": "passed" if result.status == "would_run" else result.status,
                "detail": result.detail,
            }
            self.steps.append(result)
            await workflow.execute_activity_method(
                RemediationActivities.record_step,
                StepRecord(
                    self.run_key,
                    inp.node,
                    step.index,
                    step.name,
                    step.action,
                    result.status,
                    prepared.params,
                    result.detail,
                    started,
                    workflow.now(),
                ),
                **QUICK,
            )
            if result.status == "interrupted":
                status, outcome = "interrupted", f"step {step.name} interrupted by {self.interrupted}"
                break
            if result.status == "failed" and step.on_failure == "stop":
                status, outcome = "failed", f"step {step.name} failed: {result.detail}"
                break
        if self.escalated and status == "succeeded":
            status, outcome = "escalated", self.escalated
        await workflow.execute_activity_method(
            RemediationActivities.finish_run, RunEnd(self.run_key, status, outcome, workflow.now()), **QUICK
        )
        return RemediationResult(self.run_key, inp.node, inp.runbook["name"], inp.mode, status, outcome, self.steps)

    # -- the actions ---------------------------------------------------------------------

    async def _act_unless_interrupted(self, step: Step, params: dict[str, Any]) -> tuple[bool, str] | None:
        """The step's (ok, detail), or None when an interrupt cut it short (its activity is
        cancelled with it). A FINISH_FIRST step runs to its end. Histories from before the
        patch run every step to its end."""
        if step.action in FINISH_FIRST or not workflow.patched("remediation-interrupt"):
            return await self._act(step, params)
        finished, done = await unless(self._act(step, params), lambda: bool(self.interrupted))
        return done if finished else None

    async def _act(self, step: Step, params: dict[str, Any]) -> tuple[bool, str]:
        if step.action in DISRUPTIVE:
            ready, why = await self._out_of_service()
            if not ready:
                return False, why
        if step.action == "drain":
            return await self._drain(params["reason"])
        if step.action == "restart_jobs":
            return await self._restart_jobs()
        if step.action in ("gpu_reset", "reboot"):
            done: ActionOutcome = await workflow.execute_activity_method(
                getattr(RemediationActivities, step.action),
                HardwareRequest(self.inp.node, step.action, params),
                **hardware_step(params),
            )
            return done.ok, done.detail
        if step.action == "run_check":
            return await self._checks([params["check"]], params["expect"], step)
        if step.action == "run_suite":
            checks = await workflow.execute_activity_method(
                CheckActivities.suite_checks, SweepScope(suite=params["suite"]), **QUICK
            )
            return await self._checks(checks, params["expect"], step)
        if step.action == "wait":
            await workflow.sleep(timedelta(seconds=params["duration"]))
            return True, f"waited {params['duration']:g} s"
        if step.action == "set_state":
            return await self._set_state(params["state"], params["cause"], step)
        if step.action == "rma":
            return await self._rma(params["reason"], step)
        if step.action == "notify":
            done = await workflow.execute_activity_method(
                RemediationActivities.notify,
                NotifyRequest(self.inp.node, params["message"], params["severity"], self.run_key),
                **MESSAGE,
            )
            return done.ok, done.detail
        return False, f"unknown action {step.action}"

    async def _command(self, trigger: str, cause: str, step_key: str) -> NodeCommandOutcome:
        outcome = await command_node(self._transition(trigger, cause, step_key))
        await self._heard(outcome)
        return outcome

    async def _heard(self, outcome: NodeCommandOutcome) -> None:
        """The node's state after its workflow answered: the new one, or (refused) as it is now."""
        self.state = outcome.to_state if outcome.accepted else await self._current_state()

    def _transition(self, trigger: str, cause: str, step_key: str) -> TransitionRequest:
        return TransitionRequest(
            node=self.inp.node,
            trigger=trigger,
            actor=f"runbook:{self.inp.runbook['name']}",
            actor_kind=Actor.AUTOMATION.value,
            cause=cause,
            request_id=f"{self.run_key}/{step_key}/{trigger}",
        )

    async def _current_state(self) -> str:
        return await workflow.execute_activity_method(RemediationActivities.node_state, self.inp.node, **QUICK)

    async def _drain(self, reason: str) -> tuple[bool, str]:
        self.state = await self._current_state()
        if NodeState(self.state).out_of_service:
            return True, f"already out of service ({self.state})"
        if not NodeState(self.state).in_service:
            return False, f"cannot drain a node in {self.state}"
        decision, outcome = await guarded_drain(
            RemovalRequest(
                node=self.inp.node,
                rack=self.ctx.node.get("rack", ""),
                reason=reason,
                actor=f"runbook:{self.inp.runbook['name']}",
                critical=self.inp.critical,
                request_id=f"{self.run_key}/drain",
            ),
            self._transition("drain", reason, "drain"),
        )
        if outcome is None:
            return False, f"capacity guard refused: {decision.reason}"
        await self._heard(outcome)
        return outcome.accepted, f"drained: {reason}" if outcome.accepted else outcome.message

    async def _restart_jobs(self) -> tuple[bool, str]:
        """Move the node's running jobs to healthy nodes now (a JobRestart each), rather than
        let a non-critical drain wait hours for them to finish on a node known to be bad."""
        jobs = await workflow.execute_activity_method(NodeActivities.running_jobs_on, self.inp.node, **SCHEDULER)
        if not jobs:
            return True, "no running jobs on the node"
        workflow.deprecate_patch("runbook-restarts-jobs")
        facts: NodeFacts = await workflow.execute_activity_method(NodeActivities.node_facts, self.inp.node, **QUICK)
        if NodeState(facts.state).in_service:
            # A job restart cordons the node in its scheduler: capacity only the guard may take.
            return False, f"{len(jobs)} jobs running on a node in production: drain it first"
        restart_id = f"{self.inp.node}-{self.run_key}"
        # Keyed by the fault (the drain that took the node out of service), as the node's own
        # workflow keys its restarts: a job it is still moving off the node is the same restart,
        # never a second requeue of a job that has just started again. Histories from before
        # the key name the restart by this run.
        keyed = workflow.patched("restart-keyed-by-fault")
        if keyed:
            restart_id = (
                await workflow.execute_activity_method(
                    JobRestartActivities.restart_id_of_fault, [self.inp.node], **QUICK
                )
                or restart_id
            )
        already: list[str] = []
        for job in jobs:
            try:
                await workflow.start_child_workflow(
                    JobRestart.run,
                    JobRestartInput(
                        job_id=job,
                        scheduler=facts.scheduler,
                        bad_nodes=[self.inp.node],
                        cause=self.inp.event.get("summary") or self.inp.runbook["name"],
                        actor=f"runbook:{self.inp.runbook['name']}",
                        fault_seen_at=workflow.now().isoformat(),
                        restart_id=restart_id,
                    ),
                    id=job_restart_id(job, restart_id),
                    # The restart outlives this runbook's part in it.
                    parent_close_policy=ParentClosePolicy.ABANDON,
                    # A restart of this fault that has already ended is its answer, not a cue to requeue again.
                    id_reuse_policy=(
                        WorkflowIDReusePolicy.REJECT_DUPLICATE if keyed else WorkflowIDReusePolicy.ALLOW_DUPLICATE
                    ),
                )
            except WorkflowAlreadyStartedError:
                already.append(job)  # this fault's restart of the job was started already
        if already:
            return True, (
                f"restarting {len(jobs)} job(s) off the node: {', '.join(jobs)} "
                f"({', '.join(already)} already restarted for this fault: {restart_id})"
            )
        return True, f"restarting {len(jobs)} job(s) off the node: {', '.join(jobs)}"

    async def _out_of_service(self) -> tuple[bool, str]:
        """Wait for the node's own workflow to finish draining it into maintenance."""
        waited = timedelta()
        while True:
            self.state = await self._current_state()
            if self.state == NodeState.MAINTENANCE.value:
                return True, ""
            if self.state != NodeState.DRAINING.value or waited >= OUT_OF_SERVICE_WAIT:
                return False, f"the node is in {self.state}, not maintenance: drain it first"
            await workflow.sleep(OUT_OF_SERVICE_POLL)
            waited += OUT_OF_SERVICE_POLL

    async def _checks(self, checks: list[str], expect: list[str], step: Step) -> tuple[bool, str]:
        bad: list[str] = []
        for i, check in enumerate(checks):
            outcome = await run_check(
                CheckRequest(
                    self.inp.node,
                    check,
                    f"runbook:{self.inp.runbook['name']}",
                    f"{self.run_key}/{step.index}/{i}",
                    CHECK_ATTEMPTS,
                )
            )
            if outcome.status not in expect:
                bad.append(f"{check}: {outcome.status}: {outcome.reason}")
        if bad:
            return False, "; ".join(bad)
        return True, f"{len(checks)} checks {'/'.join(expect)}"

    async def _set_state(self, target: str, cause: str, step: Step) -> tuple[bool, str]:
        if NodeState(target).returns_to_service and self.ctx.lemon:
            ok, detail = await self._rma(self.ctx.lemon, step)
            return ok, f"not returned to {target}: {detail}"
        self.state = await self._current_state()
        if self.state == target:
            return True, f"already {target}"
        if target == NodeState.DRAINING.value:
            # A drain by any name is a drain: through the capacity guard, like the drain step.
            workflow.deprecate_patch("set-state-drain-asks-the-guard")
            return await self._drain(cause)
        if target == NodeState.BURN_IN.value:
            done: ActionOutcome = await workflow.execute_activity_method(
                RemediationActivities.admit_node,
                AdmitRequest(
                    self.inp.node,
                    f"runbook:{self.inp.runbook['name']}",
                    request_id=f"{self.run_key}/{step.index}/admit",
                ),
                **MESSAGE,
            )
            return done.ok, done.detail
        trigger = trigger_towards(self.state, target)
        if trigger is None:
            return False, f"automation cannot move a node from {self.state} to {target}"
        outcome = await self._command(trigger, cause, str(step.index))
        return outcome.accepted, f"{outcome.from_state} -> {outcome.to_state}" if outcome.accepted else outcome.message

    async def _rma(self, reason: str, step: Step) -> tuple[bool, str]:
        self.state = await self._current_state()
        if NodeState(self.state).in_service:
            ok, why = await self._drain(reason)
            if not ok:
                return False, why
        # Patch rma-burst-confirmation: asked first whether the node is one of a correlated burst.
        if self.state != NodeState.RMA.value and workflow.patched("rma-burst-confirmation"):
            held = await self._held_for_burst(reason, step)
            if held is not None:
                return held
        if self.state != NodeState.RMA.value:
            outcome = await self._command("send_to_rma", reason, f"{step.index}/rma")
            if not outcome.accepted:
                return False, outcome.message
        opened: RmaOpened = await workflow.execute_activity_method(
            RemediationActivities.open_rma,
            RmaRequest(
                self.inp.node,
                reason,
                f"runbook:{self.inp.runbook['name']}",
                self.run_key,
                f"{self.run_key}/{step.index}/rma",
            ),
            **MESSAGE,
        )
        self.escalated = f"sent to RMA (record {opened.rma_id}): {reason}"
        return True, self.escalated

    async def _held_for_burst(self, reason: str, step: Step) -> tuple[bool, str] | None:
        """None when the node's RMA may open now. Otherwise the node is one of a correlated
        burst: its RMA is recorded as awaiting confirmation (the node stays drained, in
        maintenance) and the run waits, durably, for an operator's answer (the decide_rma
        update): confirmed, the node goes to RMA and the RMA is sent; rejected, the node goes
        back through burn-in. While other nodes had critical events near this one's, the
        question is asked again once the storm window after it has passed (a timer), so the
        first nodes of a burst are not sent before the rest arrives."""
        burst: BurstAnswer = await workflow.execute_activity_method(
            RemediationActivities.rma_burst, BurstQuery(self.inp.node, workflow.now().timestamp()), **QUICK
        )
        if burst.wait_until:
            await workflow.sleep(timedelta(seconds=max(0.0, burst.wait_until - workflow.now().timestamp())))
            # Asked at or after wait_until: the answer waits no more.
            burst = await workflow.execute_activity_method(
                RemediationActivities.rma_burst,
                BurstQuery(self.inp.node, max(workflow.now().timestamp(), burst.wait_until), burst.event_at),
                **QUICK,
            )
        if not burst.hold:
            return None
        held: RmaOpened = await workflow.execute_activity_method(
            RemediationActivities.open_rma,
            RmaRequest(
                self.inp.node,
                reason,
                f"runbook:{self.inp.runbook['name']}",
                self.run_key,
                f"{self.run_key}/{step.index}/rma",
                held_reason=burst.hold,
            ),
            **MESSAGE,
        )
        self.held_rma = held.rma_id
        await workflow.execute_activity_method(
            RemediationActivities.notify,
            NotifyRequest(
                self.inp.node,
                f"RMA {held.rma_id} of {self.inp.node} awaits an operator ({burst.hold}): "
                f"fleetctl rma confirm {held.rma_id} sends it, fleetctl rma reject "
                f"{held.rma_id} sends the node back through burn-in",
                "warning",
                self.run_key,
            ),
            **MESSAGE,
        )
        await workflow.wait_condition(lambda: self.rma_answer is not None)
        answer = self.rma_answer
        assert answer is not None  # what the wait was for
        decided: RmaDecided = await workflow.execute_activity_method(
            RemediationActivities.decide_rma, answer, **MESSAGE
        )
        if answer.confirm:
            self.state = await self._current_state()
            outcome = None
            if self.state != NodeState.RMA.value:
                outcome = await self._command("send_to_rma", reason, f"{step.index}/rma")
            self.rma_decided = decided
            if outcome is not None and not outcome.accepted:
                return False, f"{decided.detail}; the node was not moved to rma: {outcome.message}"
            self.escalated = f"sent to RMA (record {held.rma_id}, {decided.detail}): {reason}"
            return True, self.escalated
        admitted: ActionOutcome = await workflow.execute_activity_method(
            RemediationActivities.admit_node,
            AdmitRequest(self.inp.node, answer.actor, request_id=f"{self.run_key}/{step.index}/rma-rejected"),
            **MESSAGE,
        )
        self.rma_decided = RmaDecided(decided.rma_id, decided.status, f"{decided.detail}; burn-in: {admitted.detail}")
        # Failed, not passed: what the runbook does after an RMA (telling that it was sent) is not true.
        return False, f"{self.rma_decided.detail} (held: {burst.hold})"


def _describe(step: Step, params: dict[str, Any]) -> str:
    shown = ", ".join(f"{k}={v}" for k, v in params.items())
    return f"would {step.action.replace('_', ' ')}" + (f" ({shown})" if shown else "")
