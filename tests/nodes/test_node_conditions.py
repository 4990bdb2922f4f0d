"""A node's conditions and reason from its check runs, held drain and last transition (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleetctl.nodes.conditions import (
    REMEDIATION_STUCK_AFTER,
    CheckRow,
    Condition,
    DrainHeld,
    RunInFlight,
    RunRow,
    UnknownState,
    conditions,
    doing,
    health_word,
    reason,
    remediation_condition,
    states_named,
    summarise_checks,
)

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def runs(check: str, *statuses: str, kind: str | None = None, every_s: float = 60.0) -> list[CheckRow]:
    """`statuses` oldest first, one run every `every_s` from T0."""
    return [
        CheckRow(check, s, f"{check} {s}", T0 + timedelta(seconds=i * every_s), kind if s == "error" else None)
        for i, s in enumerate(statuses)
    ]


def test_one_summary_per_check_with_the_streak_of_its_latest_status() -> None:
    summary = summarise_checks(
        runs("dcgm-diag-r1", "pass", "error", "error", "error", kind="timeout")
        + runs("nvidia-smi-query", "pass", "pass")
    )
    by_check = {s.check: s for s in summary}
    assert len(summary) == 2
    dcgm = by_check["dcgm-diag-r1"]
    assert (dcgm.status, dcgm.runs) == ("error", 3)
    assert dcgm.since == T0 + timedelta(seconds=60) and dcgm.at == T0 + timedelta(seconds=180)
    assert (by_check["nvidia-smi-query"].runs, by_check["nvidia-smi-query"].since) == (2, T0)
    assert summary[0].check == "dcgm-diag-r1"  # newest first


HELD = DrainHeld("health: XID 48: fleet limit: 1 of 10 already unavailable (max 1, 10%)", T0, T0, 3)


@pytest.mark.parametrize(
    "state, checks, held, cause, expected",
    [
        ("production", runs("a", "pass") + runs("b", "warn"), None, "", "Ready"),
        ("production", [], None, "", "Unchecked"),
        # On its way in, a node is not Ready however its first checks went: it serves no work yet.
        ("new", [], None, "", "NotAdmitted"),
        ("burn_in", runs("a", "pass"), None, "", "NotAdmitted"),
        ("admission", runs("a", "pass") + runs("b", "pass"), None, "", "NotAdmitted"),
        ("burn_in", runs("a", "fail"), None, "", "NotAdmitted,CheckFailed(1)"),
        (
            "production",
            runs("a", "pass", "error", kind="unreachable") + runs("b", "error", kind="timeout"),
            None,
            "",
            "Unreachable",
        ),
        # an unjudgeable output is not unreachability: the node answered
        ("production", runs("a", "error", kind="unjudgeable"), None, "", "CheckError(1)"),
        ("production", runs("a", "fail") + runs("b", "pass"), None, "", "CheckFailed(1)"),
        ("production", runs("a", "fail") + runs("b", "fail") + runs("c", "fail"), HELD, "", "CheckFailed(3),DrainHeld"),
        (
            "maintenance",
            runs("a", "pass"),
            None,
            "admission failed: straggler: nccl busbw",
            "Maintenance,StragglerSuspected",
        ),
        # Out of service is never Ready, whatever its last checks said (`grep -v Ready` finds it).
        ("retired", runs("a", "fail"), None, "", "Retired"),
        ("rma", runs("a", "pass"), None, "runbook: RMA: XID 79", "InRMA"),
        ("rma", [], None, "", "InRMA"),
        ("maintenance", runs("a", "pass"), None, "drained: operator: PDU maintenance", "Maintenance"),
        ("draining", runs("a", "pass", "fail"), None, "operator: PDU maintenance", "Maintenance,CheckFailed(1)"),
        # unreachable out of service: the timed-out checks are the unreachability, not errors too
        (
            "maintenance",
            runs("a", "error", kind="timeout") + runs("b", "error", kind="timeout"),
            None,
            "x",
            "Maintenance,Unreachable",
        ),
    ],
)
def test_health_word(state, checks, held, cause, expected) -> None:
    summary = summarise_checks(checks)
    assert health_word(state, conditions(state, summary, held, cause), summary) == expected


def test_unreachable_names_when_it_began() -> None:
    summary = summarise_checks(runs("a", "pass", "error", "error", kind="timeout"))
    found = conditions("production", summary, None)
    assert [(c.type, c.since) for c in found] == [("Unreachable", T0 + timedelta(seconds=60))]


@pytest.mark.parametrize(
    "state, cause, held, expected",
    [
        ("production", "enter_production", None, ""),
        ("production", "", HELD, f"drain held: {HELD.reason}"),
        ("maintenance", "operator: swap optics", None, "operator: swap optics [alice@2026-11-30T12:00]"),
        ("draining", "", None, ""),
    ],
)
def test_reason_like_sinfo(state, cause, held, expected) -> None:
    assert reason(state, cause, "alice", T0, held) == expected


@pytest.mark.parametrize(
    "values, expected",
    [
        (["production"], ["production"]),
        (["draining", "maintenance"], ["draining", "maintenance"]),  # repeated: every one counts
        (["draining,Maintenance", "draining"], ["draining", "maintenance"]),
        (["drained"], ["maintenance"]),
        (["drain"], ["draining", "maintenance"]),
        ([], []),
    ],
)
def test_state_words(values, expected) -> None:
    assert states_named(values) == expected


def test_unknown_state_word_names_the_choices() -> None:
    with pytest.raises(UnknownState, match=r"unknown state 'sideways' .*drained"):
        states_named(["production,sideways"])


HOUR_S = 3600.0


@pytest.mark.parametrize(
    "state, age_h, agent_age_s, sweep_h, jobs, expected, why",
    [
        # A busy node whose newest check is from burn-in, no agent, swept hourly: not Ready,
        # and not `Unchecked` either (it was checked): its evidence is stale, and why not since.
        ("production", 30, None, 1, ["sim-4"], "Stale(1d)", "; not since: busy with job sim-4"),
        (
            "production",
            30,
            None,
            1,
            ["1", "2", "3", "4"],
            "Stale(1d)",
            "; not since: busy with jobs 1, 2, 3 and 1 more",
        ),
        ("production", 30, None, 1, [], "Stale(1d)", ""),  # idle, and still not checked since
        ("production", 30, None, 1, None, "Stale(1d)", ""),  # its jobs are not known
        # Checked two minutes ago, swept every minute: stale, never `Unchecked`.
        ("production", 2 / 60, None, 1 / 60, None, "Stale(2m)", ""),
        ("production", 0.5, None, 1, None, "Ready", ""),  # fresher than the sweep interval
        ("production", 30, 60.0, 1, None, "Ready", ""),  # its agent reports
        ("production", 30, 3600.0, 1, None, "Stale(1d)", ""),  # its agent fell silent (past agent_silence_s)
        ("production", 30, None, None, None, "Ready", ""),  # no sweep interval known: nothing says how old is too old
        ("maintenance", 30, None, 1, None, "Maintenance", ""),  # out of service says so already
    ],
)
def test_old_evidence_without_an_agent_is_stale(state, age_h, agent_age_s, sweep_h, jobs, expected, why) -> None:
    from fleetctl.nodes.conditions import stale_evidence

    now = T0 + timedelta(hours=age_h)
    summary = summarise_checks(runs("nvidia-smi-query", "pass"))
    agent = None if agent_age_s is None else now - timedelta(seconds=agent_age_s)
    stale = stale_evidence(state, summary, agent, now, None if sweep_h is None else sweep_h * HOUR_S, 300.0, jobs)
    found = conditions(state, summary, None, "", stale=stale)
    assert health_word(state, found, summary) == expected
    if expected.startswith("Stale"):
        age, sweep = expected[6:-1], "1h" if sweep_h == 1 else "1m"
        assert found[-1].reason == (
            f"last checked {age} ago, at {T0:%Y-%m-%dT%H:%M}Z (sweep every {sweep}, no agent reports){why}"
        )
        assert found[-1].since == T0


def test_unchecked_is_only_a_node_never_checked() -> None:
    """`Unchecked` is the node no check has judged; a checked node never reads it, however old its check."""
    from fleetctl.nodes.conditions import stale_evidence

    now = T0 + timedelta(days=400)
    checked = summarise_checks(runs("nvidia-smi-query", "pass"))
    stale = stale_evidence("production", checked, None, now, 60.0, 300.0)
    assert health_word("production", conditions("production", checked, None, "", stale=stale), checked) == "Stale(400d)"
    assert health_word("production", conditions("production", [], None, ""), []) == "Unchecked"
    assert stale_evidence("production", [], None, now, 60.0, 300.0) is None  # never checked: unchecked, not stale


FAILED = RunRow("remediation/n1@r1", "xid-79", "failed", T0, T0 + timedelta(minutes=2), "reboot", "no BMC address")
GOING = RunRow("remediation/n1@r2", "xid-79", "running", T0, None, "drain", "drained", T0 + timedelta(minutes=1))
FRESH = RunRow("remediation/n1@r3", "xid-79", "running", T0)
STUCK_AT = T0 + timedelta(minutes=1) + REMEDIATION_STUCK_AFTER


@pytest.mark.parametrize(
    "state,run,state_since,now,rma_held,expected",
    [
        (
            "maintenance",
            FAILED,
            T0,
            None,
            False,
            Condition(
                "RemediationFailed",
                "runbook xid-79 (run remediation/n1@r1) failed at step reboot: no BMC address; see `fleetctl runbook "
                "runs --node n1`, fix the cause, then `fleetctl runbook run xid-79 --node n1` again, or "
                "`fleetctl node rma n1 --reason ...`",
                T0 + timedelta(minutes=2),
            ),
        ),
        # A drain the guard refused: still production, the run failed after the node got there.
        ("production", FAILED, T0 - timedelta(days=1), None, False, "RemediationFailed"),
        # The node moved after the run failed (an operator undrained it, sent it to RMA): over.
        ("production", FAILED, T0 + timedelta(minutes=3), None, False, None),
        ("rma", FAILED, T0 + timedelta(minutes=3), None, False, None),
        ("retired", FAILED, T0, None, False, None),
        (
            "maintenance",
            GOING,
            T0,
            STUCK_AT,
            False,
            Condition(
                "RemediationStuck",
                "runbook xid-79 (run remediation/n1@r2) has finished no step for 4h, after step drain; see "
                "`fleetctl runbook runs --node n1` and the run's workflow in Temporal",
                T0 + timedelta(minutes=1),
            ),
        ),
        # Its last step finished a second short of the bound: still going.
        ("maintenance", GOING, T0, STUCK_AT - timedelta(seconds=1), False, None),
        # No step yet: measured from its start.
        ("maintenance", FRESH, T0, T0 + REMEDIATION_STUCK_AFTER, False, "RemediationStuck"),
        # Its RMA waits for an operator's confirmation, which says so itself.
        ("maintenance", GOING, T0, STUCK_AT, True, None),
        # Not judged without a clock.
        ("maintenance", GOING, T0, None, False, None),
        ("maintenance", None, T0, STUCK_AT, False, None),
    ]
    + [
        ("maintenance", RunRow("k", "xid-79", status, T0, T0), T0, STUCK_AT, False, None)
        for status in ("succeeded", "escalated", "interrupted", "dry_run")
    ],
)
def test_a_failed_or_stuck_runbook_run_waits_for_an_operator(state, run, state_since, now, rma_held, expected) -> None:
    found = remediation_condition("n1", state, run, state_since, now, rma_held)
    assert (found.type if isinstance(expected, str) and found else found) == expected


def test_a_node_waiting_for_an_operator_is_never_ready() -> None:
    waiting = Condition("RemediationFailed", "runbook xid-79 failed", T0)
    found = conditions("production", summarise_checks(runs("nvidia-smi-query", "pass")), None, remediation=waiting)
    assert [c.type for c in found] == ["RemediationFailed"]
    assert health_word("production", found, summarise_checks(runs("nvidia-smi-query", "pass"))) == "RemediationFailed"


@pytest.mark.parametrize(
    "activity, jobs, run, held, sent, said",
    [
        ("", [], None, [], [], "idle"),
        ("", None, None, [], [], "idle"),  # jobs not known: nothing to say of them
        ("", ["1234"], None, [], [], "running job 1234"),
        ("", ["1", "2"], None, [], [], "running jobs 1, 2"),
        ("", [], None, [7], [], "waiting for an operator on RMA 7"),
        ("", [], RunInFlight("remediation/n1", "xid79", 0), [], [], "runbook xid79: step 1 of run remediation/n1"),
        (
            "",
            [],
            RunInFlight("remediation/n1", "xid79", 2, "reboot"),
            [7],
            [],
            "waiting for an operator on RMA 7; runbook xid79: step 3 of run remediation/n1, after reboot",
        ),
        ("", [], None, [], [9], "in RMA 9 with the vendor"),
        ("checking dcgm_diag", [], None, [], [], "checking dcgm_diag"),
        ("draining: waiting for jobs", ["42"], None, [], [], "draining: waiting for jobs; running job 42"),
    ],
)
def test_now_says_what_the_node_is_doing_not_what_its_workflow_is(activity, jobs, run, held, sent, said) -> None:
    assert doing(activity, jobs, run, held, sent) == said
