"""NodeLifecycle's decisions, each tested alone: the real workflow on the dev server, every
activity it calls replaced by name (tests/workflows/fakes.py), so what is asserted is the
workflow's choice, not the database's or the simulator's. The end-to-end tests under
tests/lifecycle run the same decisions on the real activities."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from fleetctl.remediation.events import Event
from fleetctl.workflows.api import AdmissionVerdict, HealthEventVerdict, UpdateOutcome
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from tests.workflows.conftest import DECISION_S
from tests.workflows.fakes import World

pytestmark = pytest.mark.temporal

XID79 = HealthEventVerdict("", "critical", "drain", drain_now=True, critical=True, reason="XID 79: fallen off the bus")
NOT_CRITICAL = HealthEventVerdict("", "error", "drain", drain_now=True, critical=False, reason="XID 48: double-bit ECC")
MINOR = HealthEventVerdict("", "info", "restart_app", drain_now=False, critical=False, reason="XID 13: restart the app")


async def test_an_operator_drain_cordons_then_hands_the_idle_node_to_maintenance(lifecycle) -> None:
    node = await lifecycle()
    result = await node.transition("drain")
    assert (result.from_state, result.to_state) == ("production", "draining")
    s = await node.settled()
    assert s.state == "maintenance" and node.fakes.triggers() == ["drain", "drain_complete"]
    (cordon,) = node.fakes.asked("cordon_in_scheduler")
    assert not cordon.critical  # NoSchedule: the node's work may finish
    assert node.fakes.asked("ask_capacity_guard") == []  # an operator's drain is the operator's call
    # The scheduler is told where the node went (Kubernetes: its state label, conditions, an Event).
    assert [(r.state, r.reason) for r in node.fakes.asked("report_state")] == [("maintenance", "drained: test: drain")]


async def test_a_drain_the_capacity_guard_refuses_leaves_the_node_in_production(lifecycle) -> None:
    node = await lifecycle(
        world=World(verdict=NOT_CRITICAL, guard_grants=False, guard_reason="3 of 20 out: at the limit")
    )
    await node.event(48, "e-48")
    s = await node.settled()
    (asked,) = node.fakes.asked("ask_capacity_guard")
    assert not asked.critical and asked.node == node.node
    assert s.state == "production" and node.fakes.transitions == []
    assert s.last_outcome == "drain held by the capacity guard: 3 of 20 out: at the limit"


async def test_a_critical_event_drains_at_once_and_restarts_the_jobs_without_waiting_for_them(lifecycle) -> None:
    # A two-hour wait for jobs: the test finishing at all shows the critical drain skipped it.
    node = await lifecycle(world=World(verdict=XID79, guard_grants=False, jobs=["job-1"]), drain_job_wait_s=7200.0)
    await node.event(79, "e-79")
    s = await node.settled()
    assert s.state == "maintenance" and node.fakes.triggers() == ["drain", "drain_complete"]
    (asked,) = node.fakes.asked("ask_capacity_guard")
    assert asked.critical  # granted past the guard's limits because the GPU is already lost
    (cordon,) = node.fakes.asked("cordon_in_scheduler")
    assert cordon.critical  # the scheduler moves work off at once where it can (NoExecute)
    assert node.fakes.asked("drain_pods_on") == []  # no waiting on the policy: the restarts and the taint move them
    restart = await node.job_restart("job-1", f"{node.node}-v2")
    assert restart.bad_nodes == [node.node] and "XID 79" in restart.cause
    # a drained node with a fault goes to its runbook, with the event that drained it
    (choice,) = node.fakes.asked("choose_remediation")
    assert choice.event["kind"] == "xid" and choice.event["code"] == 79


async def test_jobs_that_outlast_a_drains_wait_are_restarted_before_maintenance(lifecycle) -> None:
    node = await lifecycle(world=World(jobs=["job-7"]), drain_job_wait_s=0.3, drain_job_poll_s=0.1)
    await node.transition("drain")
    s = await node.settled()
    assert s.state == "maintenance" and node.fakes.triggers() == ["drain", "drain_complete"]
    assert len(node.fakes.asked("running_jobs_on")) >= 2  # it did wait (polled) before acting
    restart = await node.job_restart("job-7", f"{node.node}-v2")
    assert restart.bad_nodes == [node.node]


async def test_a_transition_the_table_forbids_is_refused_and_changes_nothing(lifecycle) -> None:
    node = await lifecycle()
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await node.transition("undrain")
    assert isinstance(refused.value.cause, ApplicationError) and refused.value.cause.type == "IllegalTransition"
    s = await node.settled()
    assert s.state == "production" and s.state_version == 1 and node.fakes.transitions == []


async def test_a_repeated_request_id_gets_the_first_answer_and_moves_the_node_once(lifecycle) -> None:
    node = await lifecycle()
    first = await node.transition("drain", request_id="cli-1")
    await node.settled()
    again = await node.transition("drain", request_id="cli-1")  # a retry after a network blip
    assert again.repeated and not first.repeated
    assert (again.from_state, again.to_state, again.state_version) == (
        first.from_state,
        first.to_state,
        first.state_version,
    )
    assert node.fakes.triggers() == ["drain", "drain_complete"]
    with pytest.raises(WorkflowUpdateFailedError):  # a new request is judged on today's state
        await node.transition("drain", request_id="cli-2")


async def test_a_passed_admission_enters_production_and_resumes_the_node_in_its_scheduler(lifecycle) -> None:
    node = await lifecycle(state="new")
    await node.admit()
    s = await node.settled()
    assert s.state == "production"
    assert node.fakes.triggers() == ["begin_burn_in", "begin_admission", "enter_production"]
    assert [r.check for r in node.fakes.asked("run_check")] == ["nvidia-smi-query", "nccl-allreduce"]
    assert node.fakes.asked("resume_in_scheduler") == [node.node]


async def test_a_scheduler_that_will_not_resume_the_node_is_recorded_not_fatal(lifecycle) -> None:
    node = await lifecycle(state="new", world=World(scheduler_resumes=False))
    await node.admit()
    s = await node.settled()
    assert s.state == "production" and s.last_outcome.startswith("not resumed in the scheduler")
    assert [a.kind for a in node.fakes.automation] == ["scheduler_error"]


async def test_a_failed_burn_in_check_sends_the_node_to_maintenance_and_its_runbook(lifecycle) -> None:
    node = await lifecycle(state="new", world=World(check_status={"nvidia-smi-query": "fail"}))
    await node.admit()
    s = await node.settled()
    assert s.state == "maintenance" and node.fakes.triggers() == ["begin_burn_in", "phase_failed"]
    assert [r.check for r in node.fakes.asked("run_check")] == ["nvidia-smi-query"]  # stops at the first failure
    (choice,) = node.fakes.asked("choose_remediation")
    assert Event.from_dict(choice.event) == Event(
        "check", check="nvidia-smi-query", status="fail", message="nvidia-smi-query: fail"
    )


async def test_a_critical_event_during_burn_in_fails_the_phase_without_draining(lifecycle) -> None:
    held = asyncio.Event()
    node = await lifecycle(state="new", world=World(verdict=XID79, checks_held=held))
    await node.admit()
    await node.until(lambda: node.fakes.asked("run_check"))
    await node.event(79, "e-79")  # queued behind the check in progress
    held.set()
    s = await node.settled()
    assert s.state == "maintenance" and node.fakes.triggers() == ["begin_burn_in", "phase_failed"]
    assert node.fakes.transitions[-1].cause == "burn-in: a critical health event arrived during burn-in"
    assert len(node.fakes.asked("run_check")) == 1 and node.fakes.asked("ask_capacity_guard") == []


async def test_a_check_that_could_not_run_fails_burn_in_without_blaming_the_hardware(lifecycle) -> None:
    node = await lifecycle(state="new", world=World(check_status={"nvidia-smi-query": "raise"}))
    await node.admit()
    s = await node.settled()
    assert s.state == "maintenance" and "nvidia-smi-query: error" in s.last_outcome
    assert node.fakes.asked("choose_remediation") == []  # an error says nothing about the node


async def test_an_admission_failed_on_bandwidth_is_remediated_as_an_nccl_failure(lifecycle) -> None:
    # The check travels as data: the reason's words do not name it.
    verdict = AdmissionVerdict(
        "", False, "straggler: busbw 310 GB/s below the fleet's 400", failed_check="nccl-allreduce"
    )
    node = await lifecycle(state="new", world=World(admission=verdict))
    await node.admit()
    s = await node.settled()
    assert s.state == "maintenance"
    assert node.fakes.triggers() == ["begin_burn_in", "begin_admission", "phase_failed"]
    (choice,) = node.fakes.asked("choose_remediation")
    assert choice.event["check"] == "nccl-allreduce"


async def test_a_drain_records_the_failure_of_the_event_behind_it(lifecycle) -> None:
    """What the report counts is written with the transition, not read back from its cause."""
    node = await lifecycle(world=World(verdict=XID79))
    await node.event(79, "e-79")
    await node.settled()
    assert [(t.trigger, t.failure) for t in node.fakes.transitions] == [("drain", "xid 79"), ("drain_complete", "")]


async def test_a_node_off_the_firmware_baseline_is_updated_before_burn_in(lifecycle) -> None:
    world = World(baseline_id=3, drifts=[["GPU 0 VBIOS: 96.00.5E -> 96.00.89"], []])
    node = await lifecycle(state="new", world=world)
    await node.admit()
    s = await node.settled()
    assert s.state == "production"
    assert node.fakes.triggers() == ["begin_firmware", "begin_burn_in", "begin_admission", "enter_production"]
    assert "off the baseline: GPU 0 VBIOS" in node.fakes.transitions[0].cause
    assert len(node.fakes.asked("apply_updates")) == 1


async def test_a_failed_firmware_update_sends_the_node_to_maintenance_before_any_burn_in(lifecycle) -> None:
    world = World(baseline_id=3, drifts=[["NIC firmware: 28.39 -> 28.41"]], update=UpdateOutcome(False, "BMC said 503"))
    node = await lifecycle(state="new", world=world)
    await node.admit()
    s = await node.settled()
    assert s.state == "maintenance" and node.fakes.triggers() == ["begin_firmware", "phase_failed"]
    assert node.fakes.transitions[-1].cause == "firmware: update failed: BMC said 503"
    assert node.fakes.asked("suite_checks") == []


async def test_an_event_that_cannot_be_recorded_is_refused_once_and_the_next_still_drains(lifecycle) -> None:
    node = await lifecycle(world=World(verdict=XID79))
    await node.event(99999999999999999999, "bad-1")
    await node.event(79, "e-79")
    s = await node.settled()
    assert s.state == "maintenance"
    recorded = [e.code for batch in node.fakes.asked("record_health_events") for e in batch.events]
    assert recorded == [99999999999999999999, 79]  # no retries
    (refused,) = [a for a in node.fakes.automation if a.kind == "rejected"]
    assert "outside the column's range" in refused.reason and refused.node == node.node


async def test_admitting_a_node_in_production_is_refused_before_anything_runs(lifecycle) -> None:
    node = await lifecycle(state="production")
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await node.admit()
    assert "cannot admit a node in production" in str(refused.value.cause)
    assert node.fakes.calls == []


async def test_an_automated_drain_without_the_guards_grant_for_this_node_now_is_refused(lifecycle) -> None:
    """A runbook's `set_state: draining`, or any workflow that skips the capacity guard, sends
    a drain without a grant: the node's own workflow refuses it."""
    from fleetctl.nodes.capacity import grant_for
    from fleetctl.workflows.api import TransitionRequest

    node = await lifecycle()

    def drain(grant: str) -> TransitionRequest:
        return TransitionRequest(trigger="drain", actor="runbook:x", actor_kind="automation", cause="test", grant=grant)

    for grant in ("", grant_for("capacity-guard/f", "someone-else", 1), grant_for("capacity-guard/f", node.node, 0)):
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await node.handle.execute_update(NodeLifecycle.transition, drain(grant))
        assert refused.value.cause.type == "NoCapacityGrant", grant
    s = await node.settled()
    assert s.state == "production" and node.fakes.transitions == []

    granted = await node.handle.execute_update(
        NodeLifecycle.transition, drain(grant_for("capacity-guard/f", node.node, 1))
    )
    assert (granted.from_state, granted.to_state) == ("production", "draining")


async def test_a_critical_event_is_acted_on_ahead_of_the_minor_burst_queued_before_it(lifecycle) -> None:
    held = asyncio.Event()
    node = await lifecycle(world=World(verdict=MINOR, verdicts={79: XID79}, records_held=held))
    await node.event(13, "first")
    await node.until(lambda: node.fakes.asked("record_health_events"))  # being recorded, held
    for i in range(40):  # forty different codes: repeats of one would be queued once (test_bounded_run)
        await node.event(100 + i, f"minor-{i}")
    await node.event(79, "e-79", severity="critical")  # queued behind forty minor events
    held.set()
    s = await node.settled()
    assert s.state == "maintenance" and node.fakes.triggers() == ["drain", "drain_complete"]
    batches = [[e.event_id for e in b.events] for b in node.fakes.asked("record_health_events")]
    # the burst is recorded in one activity, not one each; the critical event before it
    assert batches == [["first"], ["e-79"], [f"minor-{i}" for i in range(40)]]
    names = [name for name, _ in node.fakes.calls]
    drained = names.index("record_transition")
    assert drained < max(i for i, name in enumerate(names) if name == "record_health_events")


async def test_pods_that_hold_a_drain_keep_it_open_and_the_node_says_why(lifecycle) -> None:
    budget = "training/llm-0: PodDisruptionBudget training/llm allows no disruption"
    # No jobs at all: pods alone (labelled as a job or not) hold the drain.
    node = await lifecycle(world=World(pods_holding=[[budget]]), drain_job_wait_s=3600.0, drain_job_poll_s=0.1)
    await node.transition("drain")
    await node.until(lambda: len(node.fakes.asked("drain_pods_on")) >= 3)
    s = await node.handle.query(NodeLifecycle.current)
    assert s.state == "draining" and node.fakes.triggers() == ["drain"]
    assert s.last_outcome == f"draining pods: holding the drain 1 pod(s): {budget}"
    node.world.pods_holding = [[]]  # the budget lets it go
    s = await node.settled()
    assert s.state == "maintenance" and node.fakes.triggers() == ["drain", "drain_complete"]
    assert not any(r.deadline_passed or r.critical for r in node.fakes.asked("drain_pods_on"))


async def test_at_the_drain_deadline_the_policy_decides_then_the_drain_completes(lifecycle) -> None:
    waiting = "serving/vllm-0: policy deletes it after the drain deadline"
    node = await lifecycle(world=World(pods_holding=[[waiting]]), drain_job_wait_s=0.3, drain_job_poll_s=0.1)
    await node.transition("drain")
    s = await node.settled()
    assert s.state == "maintenance" and node.fakes.triggers() == ["drain", "drain_complete"]
    rounds = [r.deadline_passed for r in node.fakes.asked("drain_pods_on")]
    assert len(rounds) >= 3 and rounds[-1] and not any(rounds[:-1])  # one round past the deadline, the last


async def test_a_retired_node_is_shown_retired_in_its_scheduler(lifecycle) -> None:
    node = await lifecycle(state="maintenance")
    await node.transition("retire")
    await asyncio.wait_for(node.handle.result(), DECISION_S)
    assert [r.state for r in node.fakes.asked("report_state")] == ["retired"]
