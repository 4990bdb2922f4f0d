"""Runbook model: loading, validation errors, matching, the sandbox, escalation."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from fleetctl.remediation.actions import trigger_towards
from fleetctl.remediation.drains import PLANNED, DrainKind, drain_kind
from fleetctl.remediation.events import Event, EventKind
from fleetctl.remediation.lemons import LemonPolicy, remediations
from fleetctl.remediation.matching import runbook_for
from fleetctl.remediation.runbooks import load_runbooks, parse_runbook
from fleetctl.remediation.sandbox import RunbookError, TemplateRefused, evaluate, render

SHIPPED = load_runbooks()

GOOD = """
name: demo
match: {xid: [79]}
steps:
  - action: drain
  - action: wait
    name: pause
    with: {duration: 5m}
  - action: set_state
    when: "steps.pause.status == 'passed'"
    with: {state: burn_in}
"""


def test_shipped_runbooks_cover_the_issue() -> None:
    assert {
        "xid-79-fallen-off-bus",
        "ecc-uncorrectable-rma",
        "xid-reset-gpu",
        "row-remap-pending",
        "nvlink-straggler",
        "thermal-throttling",
        "ib-port-down",
        "escalation-ladder",
    } <= set(SHIPPED)


def test_a_good_runbook_loads_with_defaults() -> None:
    book = parse_runbook(GOOD, "demo.yaml")
    assert [s.name for s in book.steps] == ["0-drain", "pause", "2-set_state"]
    assert book.steps[0].params == {"reason": "runbook {{ runbook }}: {{ event.summary }}"}
    assert book.steps[2].on_failure == "stop"


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: x\nmatch: {xid: [1]}\nsteps: [", "bad.yaml: not valid YAML at line"),
        ("- a", "bad.yaml: expected a mapping"),
        ("name: Bad Name\nmatch: {xid: [1]}\nsteps: [{action: drain}]", "bad.yaml: name 'Bad Name'"),
        ("name: x\nmatch: {xid: [1]}\nsteps: []", "bad.yaml: steps must be a non-empty list"),
        ("name: x\nmatch: {xid: ['79']}\nsteps: [{action: drain}]", "bad.yaml: match: xid must be a list"),
        ("name: x\nmatch: {checks: [{name: a, finding: '('}]}\nsteps: [{action: drain}]", "finding is not a regex"),
        ("name: x\nmatch: {stragglers: [nvlink]}\nsteps: [{action: drain}]", "stragglers: unknown metric 'nvlink'"),
        ("name: x\nmatch: {stragglers: nvlink_tx}\nsteps: [{action: drain}]", "stragglers must be a list"),
        (
            "name: x\nmatch: {xid: [1]}\nsteps: [{action: drain}, {action: explode}]",
            "bad.yaml: step 1 (explode): unknown action 'explode'",
        ),
        (
            "name: x\nmatch: {xid: [1]}\nsteps: [{action: wait}]",
            "bad.yaml: step 0 (wait): wait needs parameter 'duration'",
        ),
        (
            "name: x\nmatch: {xid: [1]}\nsteps: [{action: wait, with: {duration: soon}}]",
            "parameter duration: bad duration",
        ),
        (
            "name: x\nmatch: {xid: [1]}\nsteps: [{action: drain, with: {force: true}}]",
            "drain takes no parameter 'force'",
        ),
        ("name: x\nmatch: {xid: [1]}\nsteps: [{action: set_state, with: {state: retired}}]", "operator-only state"),
        (
            "name: x\nmatch: {xid: [1]}\nsteps: [{action: drain, name: a}, {action: drain, name: a}]",
            "step 1 (a): step name 'a' is used twice",
        ),
        ("name: x\nmatch: {xid: [1]}\nsteps: [{action: drain, on_failure: retry}]", "on_failure must be one of"),
        ("name: x\nmatch: {xid: [1]}\nsteps: [{action: drain, when: 'steps.a.status =='}]", "template does not parse"),
        (
            "name: x\nmatch: {xid: [1]}\nsteps: [{action: notify, with: {message: '{{ x'}}]",
            "step 0 (notify): template does not parse",
        ),
    ],
)
def test_malformed_runbooks_name_file_step_and_reason(text: str, message: str) -> None:
    with pytest.raises(RunbookError) as info:
        parse_runbook(text, "bad.yaml")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


ESCAPES = [
    "{{ ''.__class__.__mro__ }}",
    "{{ ''['__class__'] }}",
    "{{ cycler.__init__.__globals__ }}",
    "{{ self._TemplateReference__context }}",
    "{% include '/etc/passwd' %}",
    "{% import 'os' as os %}",
    "{% extends '/etc/passwd' %}",
    "{% from 'x' import y %}",
]


@pytest.mark.parametrize("template", ESCAPES)
def test_sandbox_escapes_are_refused_at_load_time(template: str) -> None:
    text = f"name: x\nmatch: {{xid: [1]}}\nsteps:\n  - action: notify\n    with: {{message: {template!r}}}\n"
    with pytest.raises(TemplateRefused, match=r"bad\.yaml: step 0 \(notify\): "):
        parse_runbook(text, "bad.yaml")


@pytest.mark.parametrize(
    "template",
    [
        "{{ (node|attr('__class__')) }}",  # dynamic attribute names slip past the static check
        "{{ node.items.__self__ }}",
        "{{ cycler }}",
        "{{ range(3) }}",
        "{{ 'x' * 100000000 }}",
        "{{ 2 ** 100000 }}",
        "{{ node.update({'name': 'evil'}) }}",
    ],
)
def test_sandbox_refuses_at_render_time(template: str) -> None:
    with pytest.raises(TemplateRefused):
        render(template, {"node": {"name": "n1"}})


def test_render_and_evaluate() -> None:
    ctx = {"node": {"name": "gpu-01"}, "steps": {"reset": {"status": "failed"}}, "event": {"summary": "XID 79"}}
    assert render("{{ node.name }}: {{ event.summary | lower }}", ctx) == "gpu-01: xid 79"
    assert evaluate("steps.reset.status != 'passed'", ctx) is True
    with pytest.raises(TemplateRefused, match="no attribute 'later'"):
        evaluate("steps.later.status == 'passed'", ctx)


@pytest.mark.parametrize(
    "event, expected",
    [
        (Event("xid", code=79), "xid-79-fallen-off-bus"),
        (Event("xid", code=64), "ecc-uncorrectable-rma"),
        # NVIDIA's catalog: XID 48 -> its XID 48 workflow, XID 95 -> RESET_GPU; never RMA first.
        (Event("xid", code=48), "xid-reset-gpu"),
        (Event("xid", code=95), "xid-reset-gpu"),
        (Event("xid", code=63), "row-remap-pending"),
        (Event("xid", code=74), "nvlink-straggler"),
        (Event("xid", code=119), "escalation-ladder"),
        (Event("xid", code=9999), "escalation-ladder"),  # fallback
        (
            Event("check", check="nvidia-smi-query", status="fail", message="row remapping failed: RMA the GPU"),
            "ecc-uncorrectable-rma",
        ),
        (
            Event("check", check="nvidia-smi-query", status="warn", message="row remap pending: reset the GPU"),
            "row-remap-pending",
        ),
        # DCGM's own words, as fleetctl.sim renders its Page Retirement/Row Remap test.
        (
            Event(
                "check",
                check="dcgm-r1",
                status="fail",
                message="GPU 4: Page Retirement/Row Remap failed: GPU 4 had "
                "uncorrectable memory errors and row remapping failed.",
            ),
            "ecc-uncorrectable-rma",
        ),
        (
            Event(
                "check",
                check="dcgm-r3",
                status="warn",
                message="GPU 2: Page Retirement/Row Remap warn: GPU 2 has "
                "uncorrectable memory errors and row remappings are pending",
            ),
            "row-remap-pending",
        ),
        (
            Event("check", check="nvidia-smi-query", status="warn", message="clocks limited by HW Thermal Slowdown"),
            "thermal-throttling",
        ),
        (
            Event("check", check="nvidia-smi-query", status="fail", message="GPU unreachable: Unable to determine"),
            "xid-79-fallen-off-bus",
        ),
        (Event("check", check="ib-ports", status="fail", message="Down / Polling"), "ib-port-down"),
        (
            Event("check", check="nccl-allreduce", status="warn", message="busbw 310 GB/s is 20% below peers"),
            "nvlink-straggler",
        ),
        # A sweep's straggler (the check passed, its peers did not): the check's runbook.
        (
            Event(
                "check",
                check="nccl-allreduce",
                status="fail",
                message="straggler: nccl-allreduce busbw_gbps: 380 is 20.0% below the fleet median 475",
                against_peers=True,
            ),
            "nvlink-straggler",
        ),
        (Event("check", check="ib-ports", status="pass"), "escalation-ladder"),
        # Production stragglers, by the metric that found them.
        (
            Event("straggler", check="nvlink_rx", status="fail", message="nvlink_rx 60 GB/s vs median 120"),
            "nvlink-straggler",
        ),
        (Event("straggler", check="throttled", status="fail"), "thermal-throttling"),
        (Event("straggler", check="pcie_tx", status="fail"), "escalation-ladder"),
        (Event("manual", message="operator"), None),
    ],
)
def test_event_matching(event: Event, expected: str | None) -> None:
    book = runbook_for(SHIPPED.values(), event)
    assert (book.name if book else None) == expected


@pytest.mark.parametrize(
    "event, failure",
    [
        (Event("xid", code=79), "xid 79"),
        (Event("check", check="nccl-allreduce", status="fail"), "check nccl-allreduce"),
        (Event("check", check="nccl-allreduce", status="fail", against_peers=True), "straggler nccl-allreduce"),
        (Event("manual", message="operator"), "health"),
        (Event("straggler", check="nvlink_rx", status="fail"), "straggler nvlink_rx"),
        (Event("operator", message="fan noise"), "operator"),
        (Event("maintenance", message="PDU swap"), "maintenance"),
    ],
)
def test_the_failure_a_drain_is_counted_as_survives_the_payload(event: Event, failure: str) -> None:
    """What the node's workflow records travels as the event's dict in its transition."""
    assert event.failure == failure and Event.from_dict(event.to_dict()).failure == failure
    # Events written before peers were judged have no such key: the same dict as before.
    assert ("against_peers" in event.to_dict()) is event.against_peers


def test_every_event_kind_has_a_failure_of_a_drain_kind() -> None:
    """Each kind of event records a failure whose first word is a drain kind the report counts."""
    for kind in EventKind:
        assert drain_kind(Event(kind, code=79, check="nccl-allreduce").failure) in DrainKind


@pytest.mark.parametrize("kind", ["xid79", "XID", "health", ""])
def test_an_unknown_event_kind_is_refused_not_dropped(kind: str) -> None:
    with pytest.raises(ValueError, match="EventKind"):
        Event(kind)
    with pytest.raises(ValueError, match="EventKind"):
        Event.from_dict({"kind": kind, "message": "x"})


@pytest.mark.parametrize(
    "failure, kind",
    [
        ("xid 79", DrainKind.XID),
        ("check nccl-allreduce", DrainKind.CHECK),
        ("straggler nvlink_rx", DrainKind.STRAGGLER),
        ("health", DrainKind.HEALTH),
        ("operator", DrainKind.OPERATOR),
        (PLANNED, DrainKind.MAINTENANCE),
    ],
)
def test_a_failure_label_names_its_drain_kind(failure: str, kind: DrainKind) -> None:
    assert drain_kind(failure) is kind


@pytest.mark.parametrize("failure", ["xyd 79", "checks nccl", "", "Xid 79"])
def test_a_failure_label_that_names_no_drain_kind_is_refused(failure: str) -> None:
    with pytest.raises(ValueError, match="names no drain kind"):
        drain_kind(failure)


def test_finding_text_is_matched_too() -> None:
    event = Event("check", check="nvidia-smi-q", status="fail", message="1 GPU failed")
    assert (
        runbook_for(SHIPPED.values(), event, "GPU 3: row remapping failed: RMA the GPU").name == "ecc-uncorrectable-rma"
    )


@pytest.mark.parametrize(
    "current, target, trigger",
    [
        ("maintenance", "burn_in", "begin_burn_in"),
        ("maintenance", "rma", "send_to_rma"),
        ("production", "draining", "drain"),
        ("maintenance", "production", None),
        ("rma", "burn_in", "begin_burn_in"),
    ],
)
def test_trigger_towards(current: str, target: str, trigger: str | None) -> None:
    assert trigger_towards(current, target) == trigger


@pytest.mark.parametrize(
    "days_ago, lemon",
    [([0], False), ([0, 1], False), ([0, 1, 6.9], True), ([0, 1, 7.5], False), ([0, 3, 5, 20], True)],
)
def test_lemon_policy(days_ago: list[float], lemon: bool) -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    history = [now - timedelta(days=d) for d in days_ago]
    assert LemonPolicy(3, timedelta(days=7)).is_lemon(history, [], now) is lemon
    assert LemonPolicy(3, timedelta(days=7)).is_lemon([], history, now) is lemon


# ---- the ladder climbs; silent data corruption goes straight to RMA -------------------------


def _path(book, repeats: int, checks_pass: bool) -> list[str]:
    """The actions a live run takes when every hardware step succeeds and every recheck
    passes (or fails), `repeats` remediations after the node was last in production."""
    steps: dict[str, dict] = {}
    taken = []
    for step in book.steps:
        if step.when is not None and not evaluate(step.when, {"node": {"repeats": repeats}, "steps": steps}):
            steps[step.name] = {"status": "skipped"}
            continue
        taken.append(step.action)
        ok = checks_pass or step.action not in ("run_suite", "run_check")
        steps[step.name] = {"status": "passed" if ok else "failed"}
    return taken


@pytest.mark.parametrize(
    "repeats, checks_pass, actions",
    [
        (0, True, ["drain", "restart_jobs", "gpu_reset", "run_suite", "set_state"]),
        (0, False, ["drain", "restart_jobs", "gpu_reset", "run_suite", "reboot", "run_suite", "rma"]),
        # burn-in failed after the reset: the reset failed; this run starts on the reboot
        (1, True, ["drain", "restart_jobs", "reboot", "run_suite", "set_state"]),
        (1, False, ["drain", "restart_jobs", "reboot", "run_suite", "rma"]),
        # and after the reboot too: the last rung
        (2, True, ["drain", "restart_jobs", "rma"]),
        (5, False, ["drain", "restart_jobs", "rma"]),
    ],
)
def test_the_escalation_ladder_starts_a_repeat_on_its_next_rung(repeats, checks_pass, actions) -> None:
    assert _path(SHIPPED["escalation-ladder"], repeats, checks_pass) == actions


@pytest.mark.parametrize(
    "kind, check, fixture, runbook",
    [
        ("nccl", "nccl-allreduce", "nccl/2node_wrong_gformat_fail.txt", "silent-data-corruption"),
        ("nccl", "nccl-allreduce", "nccl/a100_old_error_column_oob_fail.txt", "silent-data-corruption"),
        ("hpl", "hpl", "hpl/nvidia_8xh100_residual_failed_fail.txt", "silent-data-corruption"),
        ("hpl", "hpl", "hpl/intel_residual_failed_fail.txt", "silent-data-corruption"),
        ("nccl", "nccl-allreduce", "nccl/8xh100_slow_fail.txt", "nvlink-straggler"),  # slow is not corrupt
    ],
)
def test_wrong_results_are_silent_data_corruption_and_go_straight_to_rma(kind, check, fixture, runbook) -> None:
    from fleetctl.checks import judge
    from tests.support.fixtures import fixture_text

    result = judge(kind, fixture_text(fixture), "h100-sxm")
    assert result.status.value == "fail"
    event = Event("check", check=check, status="fail", message=result.reason)
    book = runbook_for(SHIPPED.values(), event, event.message)
    assert book is not None and book.name == runbook, (result.reason, book and book.name)
    if runbook == "silent-data-corruption":
        actions = [s.action for s in book.steps]
        assert "rma" in actions and not {"gpu_reset", "reboot", "run_check", "run_suite", "set_state"} & set(actions)


@dataclass(frozen=True)
class _Run:
    status: str
    event: dict
    started_at: datetime


XID79 = Event(EventKind.XID, code=79).to_dict()
XID48 = Event(EventKind.XID, code=48).to_dict()
DCGM = Event(EventKind.CHECK, check="dcgm_diag", status="failed").to_dict()
NCCL = Event(EventKind.CHECK, check="nccl_allreduce", status="failed").to_dict()
SIGNATURE_A = Event(EventKind.MANUAL, message="GPU memory page retirement").to_dict()
SIGNATURE_B = Event(EventKind.MANUAL, message="PCIe link degraded").to_dict()


@pytest.mark.parametrize(
    "runs, counted",
    [
        # A repeat of the XID 79 a second into the run interrupts it: one remediation, not two.
        ([("interrupted", XID79, 0), ("succeeded", XID79, 1)], [1]),
        ([("interrupted", XID79, 0), ("interrupted", XID79, 1), ("running", XID79, 2)], [2]),
        # Another fault interrupting it is a remediation of its own.
        ([("interrupted", XID48, 0), ("succeeded", XID79, 1)], [0, 1]),
        # The same fault again after a run that ended on its own is a remediation again.
        ([("failed", XID79, 0), ("succeeded", XID79, 1)], [0, 1]),
        ([("succeeded", XID79, 0), ("succeeded", XID79, 1)], [0, 1]),
        # An interrupted run with no run after it (the new event had no runbook) counts.
        ([("interrupted", XID79, 0)], [0]),
        ([("interrupted", DCGM, 0), ("succeeded", DCGM, 1)], [1]),
        ([("interrupted", DCGM, 0), ("succeeded", NCCL, 1)], [0, 1]),
        ([("interrupted", SIGNATURE_A, 0), ("succeeded", SIGNATURE_A, 1)], [1]),
        ([("interrupted", SIGNATURE_A, 0), ("succeeded", SIGNATURE_B, 1)], [0, 1]),
        # Judged in start order whatever the order given.
        ([("succeeded", XID79, 1), ("interrupted", XID79, 0)], [1]),
    ],
)
def test_a_run_interrupted_by_its_own_fault_is_no_remediation(runs, counted) -> None:
    at = datetime(2026, 12, 1, tzinfo=UTC)
    given = [_Run(status, event, at + timedelta(seconds=s)) for status, event, s in runs]
    assert [r.started_at for r in remediations(given)] == [at + timedelta(seconds=s) for s in counted]


def test_two_faults_each_repeated_within_their_run_are_two_remediations_not_a_lemon() -> None:
    """The node that became a lemon after 2 real faults: each XID 79 came twice, a second apart."""
    now = datetime(2026, 12, 1, tzinfo=UTC)
    runs = [
        _Run("interrupted", XID79, now - timedelta(days=2)),
        _Run("succeeded", XID79, now - timedelta(days=2) + timedelta(seconds=1)),
        _Run("interrupted", XID79, now - timedelta(days=1)),
        _Run("succeeded", XID79, now - timedelta(days=1) + timedelta(seconds=1)),
    ]
    starts = [r.started_at for r in remediations(runs)]
    assert LemonPolicy(3, timedelta(days=7)).times_remediated(starts, [], now) == 2
