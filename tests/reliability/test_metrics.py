"""fleetctl.reliability.metrics on synthetic time lines; every expected number is worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleetctl.reliability import metrics
from fleetctl.reliability.metrics import CheckSample, JobRecord, NodeHistory, NodeRecord, RestartRecord, Transition
from fleetctl.remediation.lemons import LemonPolicy, remediation_entries

T0 = datetime(2025, 3, 1, tzinfo=UTC)
HOUR = 3600.0


def h(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def move(
    at: float,
    from_state: str,
    to_state: str,
    trigger: str = "",
    cause: str = "",
    actor_kind: str = "automation",
    node: str = "n1",
) -> Transition:
    failure = FAILURE_OF.get(cause, "") if trigger == "drain" else ""
    return Transition(node, from_state, to_state, h(at), trigger, cause, actor_kind, failure)


def history(
    *transitions: Transition, name: str = "n1", created: float = 0, rack: str = "r1", profile: str = "h100-sxm"
) -> NodeHistory:
    return NodeHistory(NodeRecord(name, rack, profile, h(created)), tuple(transitions))


XID_79 = "health: XID 79: reset_gpu (critical): GPU has fallen off the bus"
NCCL_DRAIN = "active check quick: nccl-allreduce: busbw 310 GB/s"
# The failure the workflow records with each of these causes' drains (fleetctl.remediation.events.Event.failure).
FAILURE_OF = {XID_79: "xid 79", NCCL_DRAIN: "check nccl-allreduce"}

# Admitted at 4 h, an XID 79 drain at 10 h, back in production at 17 h; now is 24 h.
ONE_REPAIR = history(
    move(1, "new", "burn_in", "begin_burn_in"),
    move(3, "burn_in", "admission", "begin_admission"),
    move(4, "admission", "production", "enter_production"),
    move(10, "production", "draining", "drain", XID_79),
    move(11, "draining", "maintenance", "drain_complete", "drained: " + XID_79),
    move(15, "maintenance", "burn_in", "begin_burn_in", "runbook: recheck"),
    move(16, "burn_in", "admission", "begin_admission"),
    move(17, "admission", "production", "enter_production"),
)


@pytest.mark.parametrize(
    "since, expected_hours",
    [
        (0, {"new": 1, "burn_in": 3, "admission": 2, "production": 13, "draining": 1, "maintenance": 4}),
        (12, {"maintenance": 3, "burn_in": 1, "admission": 1, "production": 7}),
        (20, {"production": 4}),
    ],
)
def test_time_per_state_is_the_intervals_clipped_to_the_window(since, expected_hours) -> None:
    node = ONE_REPAIR.node
    spans = metrics.intervals(node.created_at, metrics.timeline(node.created_at, ONE_REPAIR.transitions, h(24)), h(24))
    by_state = metrics.seconds_by_state(metrics.clip(spans, h(since), h(24)))
    assert by_state == {state: hours * HOUR for state, hours in expected_hours.items()}


@pytest.mark.parametrize(
    "since, failures, mttf, repairs, mttr, availability",
    [
        # 13 production hours, one failure; out of production 10 h -> 17 h; 13 / (13 + 1 + 4).
        (0, 1, 13.0, 1, 7.0, 13 / 18),
        # The failure is before the window, the return inside it: 7 / (7 + 3).
        (12, 0, None, 1, 7.0, 7 / 10),
        (20, 0, None, 0, None, 1.0),
    ],
)
def test_mttf_mttr_and_availability_of_one_node(since, failures, mttf, repairs, mttr, availability) -> None:
    s = metrics.summarise([ONE_REPAIR], h(since), h(24))
    assert (s.failures, s.mttf_hours, s.repairs, s.mttr_hours) == (failures, mttf, repairs, mttr)
    assert s.availability == pytest.approx(availability)
    # Out for the XID 79 (10 h -> 15 h in draining and maintenance; burn-in and admission are
    # not capacity): unplanned, none of it planned.
    assert s.planned_out_hours == 0 and s.unplanned_out_hours == pytest.approx(max(0, 15 - max(since, 10)))
    assert s.causes == ({"xid 79": 1} if failures else {})
    assert sum(s.node_days.values()) == pytest.approx((24 - since) / 24)


def test_fleet_summary_adds_nodes_up() -> None:
    # n2: new until 2 h, in production from 2.5 h, drained by an active check at 8 h, still
    # in maintenance at 24 h.
    n2 = history(
        move(2, "new", "admission", "begin_admission", node="n2"),
        move(2.5, "admission", "production", "enter_production", node="n2"),
        move(8, "production", "draining", "drain", NCCL_DRAIN, node="n2"),
        move(9, "draining", "maintenance", "drain_complete", node="n2"),
        name="n2",
    )
    s = metrics.summarise([ONE_REPAIR, n2], h(0), h(24))
    # production 13 + 5.5 h; failures 2; draining 1 + 1, maintenance 4 + 15.
    assert s.production_hours == 18.5
    assert (s.failures, s.mttf_hours) == (2, 9.25)
    assert s.availability == pytest.approx(18.5 / (18.5 + 2 + 19))
    assert s.causes == {"xid 79": 1, "check nccl-allreduce": 1}
    assert (s.repairs, s.mttr_hours) == (1, 7.0)  # n2 has not returned
    assert s.node_days["maintenance"] == pytest.approx(19 / 24)


def test_clock_jumps_never_give_negative_durations() -> None:
    # Recorded in this order: the drain is timed before the admission (clock went back),
    # the maintenance after `now` (clock ahead).
    jumped = history(
        move(5, "new", "production", "enter_production"),
        move(3, "production", "draining", "drain", XID_79),
        move(30, "draining", "maintenance", "drain_complete"),
    )
    now = h(24)
    events = metrics.timeline(jumped.node.created_at, jumped.transitions, now)
    assert [e.at for e in events] == [h(5), h(5), h(24)]
    spans = metrics.intervals(jumped.node.created_at, events, now)
    assert all(i.seconds > 0 for i in spans)
    assert metrics.seconds_by_state(spans) == {"new": 5 * HOUR, "draining": 19 * HOUR}
    s = metrics.summarise([jumped], h(0), now)
    assert (s.failures, s.mttf_hours, s.availability) == (1, 0.0, 0.0)  # no production time at all

    # Created "in the future", with an event before its creation: nothing, not negative.
    future = history(move(20, "new", "production", "enter_production"), created=30)
    spans = metrics.intervals(h(30), metrics.timeline(h(30), future.transitions, now), now)
    assert spans == []
    assert metrics.summarise([future], h(0), now).node_days == {}


@pytest.mark.parametrize(
    "from_state, to_state, trigger, actor_kind, recorded, failure, label",
    [
        ("production", "draining", "drain", "automation", "xid 79", True, "xid 79"),
        ("production", "draining", "drain", "automation", "check nccl-allreduce", True, "check nccl-allreduce"),
        ("production", "draining", "drain", "automation", "health", True, "health"),
        ("production", "draining", "drain", "automation", "straggler nccl-allreduce", True, "straggler nccl-allreduce"),
        # A drain by automation that records no fault (a runbook's, a storm test's) still counts.
        ("production", "draining", "drain", "automation", "", True, "automation"),
        # An operator's drain is planned work unless it records a fault.
        ("production", "draining", "drain", "operator", "", False, "automation"),
        ("production", "draining", "drain", "operator", "xid 79", True, "xid 79"),
        # `node drain --maintenance` (the default) records planned work: never a failure.
        ("production", "draining", "drain", "operator", "maintenance", False, "maintenance"),
        ("production", "draining", "drain", "operator", "operator", True, "operator"),
        ("production", "retired", "retire", "operator", "", False, "automation"),
        # Not out of production.
        ("draining", "maintenance", "drain_complete", "automation", "xid 79", False, "xid 79"),
        ("maintenance", "production", "undrain", "operator", "", False, "automation"),
    ],
)
def test_what_counts_as_a_failure(from_state, to_state, trigger, actor_kind, recorded, failure, label) -> None:
    # The cause's words do not matter: the recorded failure does.
    t = Transition("n1", from_state, to_state, T0, trigger, "health: XID 79 in the words only", actor_kind, recorded)
    assert metrics.is_failure(t) is failure
    assert metrics.failure_label(t) == label


def _cycle(start: float, node: str = "n1") -> list[Transition]:
    """production -> draining -> maintenance (start + 1 h) -> burn_in -> admission -> production."""
    return [
        move(start, "production", "draining", "drain", XID_79, node=node),
        move(start + 1, "draining", "maintenance", "drain_complete", node=node),
        move(start + 2, "maintenance", "burn_in", "begin_burn_in", node=node),
        move(start + 3, "burn_in", "admission", "begin_admission", node=node),
        move(start + 4, "admission", "production", "enter_production", node=node),
    ]


@pytest.mark.parametrize(
    "cycle_days, threshold, since_days, lemon",
    [
        ([0.5, 2, 4], 3, 0, {"n1": 3}),  # three within 7 days
        ([0.5, 8, 16], 3, 0, {}),  # three, but never three within 7 days
        ([0.5, 2, 4], 4, 0, {}),  # a stricter policy
        (
            [0.5, 2, 4],
            3,
            3,
            {"n1": 3},
        ),  # the third entry (inside the window) makes it a lemon: 3 times, as its RMA said
        ([0.5, 2, 4, 5, 6], 3, 0, {"n1": 5}),  # the worst window: five times in seven days
        ([0.5, 2, 9, 10, 11], 3, 0, {"n1": 3}),  # three, then three again (the first two left the window)
        ([0.5, 2, 4], 3, 5, {}),  # no entry inside the window
    ],
)
def test_lemon_nodes(cycle_days, threshold, since_days, lemon) -> None:
    node = history(
        move(0, "new", "production", "enter_production"), *[t for day in cycle_days for t in _cycle(day * 24)]
    )
    assert metrics.lemon_nodes([node], h(since_days * 24), h(20 * 24), threshold, timedelta(days=7)) == lemon


def _planned(start: float, failure: str = "maintenance") -> list[Transition]:
    """An operator's drain for planned work at `start`, in maintenance 1 h later, undrained at +3 h."""
    return [
        Transition("n1", "production", "draining", h(start), "drain", "operator: PDU maintenance", "operator", failure),
        Transition("n1", "draining", "maintenance", h(start + 1), "drain_complete", "drained", "automation"),
        Transition("n1", "maintenance", "production", h(start + 3), "undrain", "operator: undrain", "operator"),
    ]


# Four maintenance windows of 3 h (at 24, 48, 72 and 96 h), one of them recorded before drains
# said what they were (an operator's drain with no failure); now is 120 h. No failure, so no
# MTTF, no repair, and the node was never remediated: not a lemon at a threshold of 3.
# Production 120 - 4 x 3 = 108 h; availability 108 / 120.
PLANNED_WINDOWS = history(
    move(0, "new", "production", "enter_production"),
    *_planned(24),
    *_planned(48),
    *_planned(72, failure=""),
    *_planned(96),
)


def test_maintenance_windows_are_no_failure_no_repair_and_no_remediation() -> None:
    s = metrics.summarise([PLANNED_WINDOWS], h(0), h(120))
    assert (s.failures, s.mttf_hours, s.repairs, s.mttr_hours, s.causes) == (0, None, 0, None, {})
    assert s.production_hours == 108 and s.availability == pytest.approx(108 / 120)
    # What availability lost was planned work, all of it: none to faults.
    assert (s.planned_out_hours, s.unplanned_out_hours, s.availability_unplanned) == (12, 0, 1.0)
    assert metrics.lemon_nodes([PLANNED_WINDOWS], h(0), h(120), 3, timedelta(days=7)) == {}
    assert remediation_entries(PLANNED_WINDOWS.transitions) == []
    assert metrics.rule_precision([PLANNED_WINDOWS], h(0), h(120)) == []


def test_a_fault_found_during_maintenance_is_a_remediation_and_a_failure_drain_is_one_too() -> None:
    # Drained for planned work at 0, in maintenance at 1; its burn-in fails at 3 (back to
    # maintenance: a remediation); undrained at 5. Then an operator's drain for a fault at
    # 10 (in maintenance at 11), back at 15: a failure, an entry, and a repair of 5 h.
    node = history(
        *_planned(0)[:2],
        move(2, "maintenance", "burn_in", "begin_burn_in"),
        move(3, "burn_in", "maintenance", "phase_failed"),
        move(5, "maintenance", "production", "undrain", actor_kind="operator"),
        Transition("n1", "production", "draining", h(10), "drain", "operator: fans loud", "operator", "operator"),
        move(11, "draining", "maintenance", "drain_complete"),
        move(15, "maintenance", "production", "undrain", actor_kind="operator"),
        created=-1,
    )
    assert remediation_entries(node.transitions) == [h(3), h(11)]
    s = metrics.summarise([node], h(-1), h(20))
    assert (s.failures, s.repairs, s.mttr_hours, s.causes) == (1, 1, 5.0, {"operator": 1})
    # Planned 0 -> 2 (draining, maintenance); burn-in 2 -> 3 is no capacity; once it failed,
    # 3 -> 5 is the fault's, as is the fault drain's 10 -> 15: unplanned 7 h. Production 1 + 5 + 5.
    assert (s.planned_out_hours, s.unplanned_out_hours) == (2, 7)
    assert s.availability_unplanned == pytest.approx(11 / 18)


# A hand-worked flaky node (hours from T0): drained at 0 (run r1 begun at 0, the drain's entry
# at 1), the run sends it to burn-in, which fails at 3 and at 5 (entries, no new run: r1 is
# still going); a second run r2 begins at 6 while it is in maintenance. The lemon window is
# 7 days, so at each moment the figure counts everything so far:
#   at 0: runs 1, entries 0 -> 1;   at 1: 1, 1 -> 1;   at 3: 1, 2 -> 2;   at 5: 1, 3 -> 3
#   at 6: runs 2, entries 3 -> 3 (a run begun in maintenance adds no entry)
#   at 168.5 (r1 left the window): runs 1, entries 3 -> 3;   at 171.5: runs 1, entries 1 -> 1
FLAKY = (
    move(0, "production", "draining", "drain", XID_79),
    move(1, "draining", "maintenance", "drain_complete"),
    move(2, "maintenance", "burn_in", "begin_burn_in"),
    move(3, "burn_in", "maintenance", "phase_failed"),
    move(4, "maintenance", "burn_in", "begin_burn_in"),
    move(5, "burn_in", "maintenance", "phase_failed"),
)
FLAKY_RUNS = (h(0), h(6))


@pytest.mark.parametrize("at, times", [(0, 1), (1, 1), (3, 2), (5, 3), (6, 3), (7 * 24 + 0.5, 3), (7 * 24 + 3.5, 1)])
def test_times_remediated_is_one_figure_for_the_rma_reason_and_the_report(at, times) -> None:
    policy = LemonPolicy(3, timedelta(days=7))
    entries = [t.at for t in FLAKY if t.to_state == "maintenance"]
    assert policy.times_remediated(FLAKY_RUNS, entries, h(at)) == times
    # The report's lemon table, over a window ending at that moment, shows the same figure
    # whenever it is the worst so far (the figure never falls before the window slides).
    node = NodeHistory(
        NodeRecord("n1", "r1", "h100-sxm", h(-1)),
        tuple(t for t in FLAKY if t.at <= h(at)),
        tuple(r for r in FLAKY_RUNS if r <= h(at)),
    )  # what was recorded by then
    report = metrics.lemon_nodes([node], h(-1), h(at), 3, timedelta(days=7))
    assert report == ({"n1": 3} if at >= 5 else {})
    if times >= 3:
        assert policy.describe(times) == "remediated 3 times in 7 days"


def test_runs_alone_count_in_the_report_as_they_do_for_the_rma_reason() -> None:
    """Three runs begun on a node that stayed in maintenance: the RMA reason said 3 times,
    so the report's lemon table says 3 too (it used to count only the one entry)."""
    node = NodeHistory(
        NodeRecord("n1", "r1", "h100-sxm", h(-1)),
        (move(0, "production", "maintenance", "drain_complete"),),
        (h(0), h(10), h(20)),
    )
    assert metrics.lemon_nodes([node], h(-1), h(30), 3, timedelta(days=7)) == {"n1": 3}


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "job, wall, downtime, lost, lost_at_most",
    [
        (JobRecord("plain", h(0), h(10)), 10 * HOUR, 0, 0, 0),
        # Still running at now (10 h); one restart of 90 s, 30 min after the last checkpoint.
        (JobRecord("ckpt", h(0), None, h(3.5), (RestartRecord(h(4), h(4) + s(90)),)), 10 * HOUR, 90, 1800, 1800),
        # Two restarts after the one checkpoint: the second loses from the first resumption.
        (
            JobRecord(
                "twice", h(0), h(8), h(1), (RestartRecord(h(5), h(5) + s(120)), RestartRecord(h(2), h(2) + s(60)))
            ),
            8 * HOUR,
            180,
            HOUR + (3 * HOUR - 60),
            HOUR + (3 * HOUR - 60),
        ),
        # A restart before the checkpoint we know of: what it lost is not known (not 0), at
        # most everything since the start (2 h).
        (JobRecord("early", h(0), h(8), h(6), (RestartRecord(h(2), h(2) + s(100)),)), 8 * HOUR, 100, None, 2 * HOUR),
        # Restarted 4 times, never a checkpoint: each restart lost at most its run since the last.
        (
            JobRecord("never", h(0), h(8), None, tuple(RestartRecord(h(k), h(k) + s(60)) for k in (1, 2, 3, 4))),
            8 * HOUR,
            240,
            None,
            HOUR + 3 * (HOUR - 60),
        ),
        # Never ran again: down until the job ended; what it lost before is not known.
        (
            JobRecord("dead", h(0), h(8), None, (RestartRecord(h(6), None, "failed"),)),
            8 * HOUR,
            2 * HOUR,
            None,
            6 * HOUR,
        ),
        # Overlapping restarts count once: down 2 h -> 3 h, then 3 h (not 2.5 h) -> 3.5 h.
        (
            JobRecord("overlap", h(0), h(8), h(1), (RestartRecord(h(2), h(3)), RestartRecord(h(2.5), h(3.5)))),
            8 * HOUR,
            1.5 * HOUR,
            HOUR,
            HOUR,
        ),
        # Clock jump: running again "before" the fault.
        (JobRecord("jump", h(0), h(8), h(1), (RestartRecord(h(2), h(1)),)), 8 * HOUR, 0, HOUR, HOUR),
    ],
)
def test_job_goodput(job, wall, downtime, lost, lost_at_most) -> None:
    g = metrics.job_goodput(job, h(10))
    assert (g.wall_seconds, g.downtime_seconds) == (wall, downtime)
    assert g.lost_seconds + g.unknown_lost_at_most == lost_at_most
    assert g.ettr_at_least == pytest.approx((wall - downtime - lost_at_most) / wall)
    if lost is None:  # not measured: no ETTR, and why
        assert g.ettr is None and not g.measured and "no checkpoint" in g.ettr_unknown
    else:
        assert g.lost_seconds == lost and g.ettr_unknown == ""
        assert g.ettr == pytest.approx((wall - downtime - lost) / wall) == g.ettr_at_least
        assert 0 <= g.ettr <= 1


def test_jobs_that_never_ran_have_no_goodput_and_fleet_ettr_weights_by_wall_time() -> None:
    assert metrics.job_goodput(JobRecord("pending", None), h(10)) is None
    assert metrics.job_goodput(JobRecord("backwards", h(5), h(4)), h(10)) is None
    a = metrics.job_goodput(JobRecord("a", h(0), h(10)), h(10))
    b = metrics.job_goodput(JobRecord("b", h(0), None, h(3.5), (RestartRecord(h(4), h(4) + s(90)),)), h(10))
    assert metrics.fleet_ettr([a, b]) == pytest.approx((36000 + 36000 - 1890) / 72000)
    assert metrics.fleet_ettr_at_least([a, b]) == metrics.fleet_ettr([a, b])
    assert metrics.fleet_ettr([]) is None


def test_one_unmeasured_job_leaves_the_fleet_a_lower_bound_not_a_measured_ettr() -> None:
    """A job restarted with no checkpoint: the fleet's ETTR is not measured (None), and its
    lower bound counts that job's run before the fault (4 h) as lost."""
    a = metrics.job_goodput(JobRecord("a", h(0), h(10)), h(10))
    b = metrics.job_goodput(JobRecord("b", h(0), h(10), None, (RestartRecord(h(4), h(4) + s(90)),)), h(10))
    assert metrics.fleet_ettr([a, b]) is None
    assert metrics.fleet_ettr_at_least([a, b]) == pytest.approx((72000 - 90 - 4 * HOUR) / 72000)


def test_restart_latencies_and_their_distribution() -> None:
    jobs = [
        JobRecord(
            "a",
            h(0),
            None,
            None,
            (RestartRecord(h(1), h(1) + s(60)), RestartRecord(h(2), h(2) + s(90)), RestartRecord(h(3), None, "failed")),
        ),
        JobRecord(
            "b",
            h(0),
            None,
            None,
            (
                RestartRecord(h(4), h(4) + s(90)),
                RestartRecord(h(5), h(5) + s(120)),
                RestartRecord(h(6), h(6) + s(600)),
                RestartRecord(h(7), h(7) - s(5)),  # clock jump: 0, not -5
                RestartRecord(h(30), h(30) + s(60)),
            ),
        ),  # after now
    ]
    latencies = metrics.restart_latencies(jobs, h(0.5), h(24))
    assert sorted(latencies) == [0, 60, 90, 90, 120, 600]
    d = metrics.distribution([60, 90, 90, 120, 600])
    # p90: rank 0.9 * 4 = 3.6, between 120 and 600.
    assert d == {
        "count": 5,
        "mean": 192.0,
        "p50": 90.0,
        "p90": pytest.approx(408.0),
        "p99": pytest.approx(580.8),
        "max": 600,
    }
    assert metrics.distribution([]) == {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    assert metrics.distribution([90])["p99"] == 90


def test_stragglers_use_each_nodes_latest_value_within_its_profile() -> None:
    h100 = {"n1": 480, "n2": 482, "n3": 479, "n4": 481, "n5": 480}
    samples = [CheckSample("n6", "h100-sxm", "nccl-allreduce", {"busbw_gbps": 481.0})]  # superseded below
    samples += [CheckSample(n, "h100-sxm", "nccl-allreduce", {"busbw_gbps": v}) for n, v in h100.items()]
    samples += [
        CheckSample("n6", "h100-sxm", "nccl-allreduce", {"busbw_gbps": 300.0}),
        CheckSample("n7", "h100-sxm", "nccl-allreduce", {"busbw_gbps": None}),  # unparsed: left out
        CheckSample("n7", "h100-sxm", "dcgm-diag", {"busbw_gbps": 1.0}),  # not a straggler check
        CheckSample("a1", "a100-sxm-80gb", "hpl", {"gflops_per_gpu": 17000.0}),
        CheckSample("a2", "a100-sxm-80gb", "hpl", {"gflops_per_gpu": 9000.0}),
    ]
    groups = {(g.check, g.profile): g for g in metrics.stragglers(samples)}
    assert set(groups) == {("nccl-allreduce", "h100-sxm"), ("hpl", "a100-sxm-80gb")}
    nccl = groups[("nccl-allreduce", "h100-sxm")]
    # Median of 300, 479, 480, 480, 481, 482 is 480; MAD is 1, floored at 1% of 480 = 4.8.
    assert nccl.median == 480
    assert [n for n, v in nccl.verdicts.items() if v.straggler] == ["n6"]
    assert nccl.verdicts["n6"].robust_z == -37.5
    # Two nodes are too few to compare: nobody flagged.
    assert not any(v.straggler for v in groups[("hpl", "a100-sxm-80gb")].verdicts.values())


def test_states_at_counts_nodes_per_state_at_each_time() -> None:
    spans = {
        "n1": [metrics.Interval("new", h(0), h(1)), metrics.Interval("production", h(1), h(10))],
        "n2": [metrics.Interval("production", h(0), h(5)), metrics.Interval("maintenance", h(5), h(10))],
    }
    assert metrics.states_at(spans, [h(0.5), h(5), h(10)]) == {
        "new": [1, 0, 0],
        "production": [1, 1, 0],
        "maintenance": [0, 1, 0],
    }
