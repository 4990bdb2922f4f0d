"""The job reliability formulas of fleetctl.reliability.metrics on hand-worked histories: ETTR with work
lost since the last checkpoint, interruptions by cause, the checkpoint interval, MTTF at a
job size and Meta's predicted ETTR. Every expected number is worked out in the comment."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleetctl.reliability import metrics
from fleetctl.reliability.metrics import JobRecord, NodeHistory, NodeRecord, RestartRecord, Transition
from fleetctl.workflows.activities.jobs import failure_said_in

T0 = datetime(2025, 3, 1, tzinfo=UTC)
HOUR = 3600.0
XID_79 = "health: XID 79: reset_gpu (critical): GPU has fallen off the bus"


def h(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def restart(fault: float, back: float | None, cause: str = XID_79) -> RestartRecord:
    """A restart as its row is written for a caller that names no failure: classified from the
    cause once (workflows.activities.jobs.failure_said_in)."""
    return RestartRecord(h(fault), h(back) if back is not None else None, "succeeded", cause, failure_said_in(cause))


# Each case: the job, `now` (hours), expected (wall, down, lost) in hours and ETTR.
GOODPUT_CASES = {
    # No restart: all 10 h productive.
    "no restarts": (JobRecord("j", h(0), checkpoints=(h(2), h(4))), 10, (10, 0, 0), 1.0),
    # Fault at 5 h, running again at 5.5 h: 0.5 h down. Last checkpoint before the fault is
    # 4 h (the 6 h one is after it): 1 h lost. (10 - 0.5 - 1) / 10.
    "lost since the last checkpoint before the fault": (
        JobRecord("j", h(0), checkpoints=(h(2), h(4), h(6)), restarts=(restart(5, 5.5),)),
        10,
        (10, 0.5, 1),
        0.85,
    ),
    # Checkpoints only after the fault: what was lost is not known, so no ETTR is measured;
    # at least (10 - 0.5 - 5) / 10, had the job lost all 5 h since it started.
    "no checkpoint before the fault: no measured ETTR": (
        JobRecord("j", h(0), checkpoints=(h(6),), restarts=(restart(5, 5.5),)),
        10,
        (10, 0.5, 0),
        None,
    ),
    # Two faults, checkpoint at 2 h only. First at 3 h, back at 4 h: lost 3 - 2 = 1 h. Second at
    # 6 h, back at 6.5 h: the job resumed at 4 h after the 2 h checkpoint, so it lost 6 - 4 = 2 h.
    # Down 1 + 0.5 h. (10 - 1.5 - 3) / 10.
    "lost from the resumption when it is after the checkpoint": (
        JobRecord("j", h(0), checkpoints=(h(2),), restarts=(restart(3, 4), restart(6, 6.5))),
        10,
        (10, 1.5, 3),
        0.55,
    ),
    # The single last_checkpoint_at column counts as a checkpoint too (jobs from before the
    # checkpoints table): fault 5 h, back 6 h, checkpoint 4.5 h: lost 0.5 h. (8 - 1 - 0.5) / 8.
    "last_checkpoint_at is a checkpoint": (
        JobRecord("j", h(0), h(8), h(4.5), restarts=(restart(5, 6),)),
        12,
        (8, 1, 0.5),
        0.8125,
    ),
    # Never ran again: down from the fault (9 h) to now (10 h). Lost 9 - 8 = 1 h. (10 - 1 - 1) / 10.
    "a restart that never ran again is down until now": (
        JobRecord("j", h(0), checkpoints=(h(8),), restarts=(restart(9, None),)),
        10,
        (10, 1, 1),
        0.8,
    ),
}


@pytest.mark.parametrize("job, now, expected, ettr", GOODPUT_CASES.values(), ids=GOODPUT_CASES.keys())
def test_job_ettr_counts_restart_time_and_work_lost_since_the_last_checkpoint(job, now, expected, ettr) -> None:
    g = metrics.job_goodput(job, h(now))
    assert (g.wall_seconds, g.downtime_seconds, g.lost_seconds) == tuple(v * HOUR for v in expected)
    if ettr is None:
        assert g.ettr is None and g.ettr_at_least == pytest.approx(0.45)
    else:
        assert g.ettr == pytest.approx(ettr)


INTERRUPTION_CASES = {
    "fleetctl's restarts by their causes": (
        JobRecord(
            "j",
            h(0),
            restarts=(
                restart(1, 2),
                restart(3, 4, "recheck quick: dcgm-r1: DCGM failed"),
                restart(5, 6, "operator: job restart"),
            ),
            scheduler_restarts=3,
        ),
        ["xid 79", "check dcgm-r1", "operator"],
    ),
    # Slurm counted 3 requeues, fleetctl ran 1 of them: 2 by the scheduler alone.
    "requeues beyond fleetctl's are the scheduler's": (
        JobRecord("j", h(0), restarts=(restart(1, 2),), scheduler_restarts=3),
        ["xid 79", "scheduler requeue", "scheduler requeue"],
    ),
    "an end by a node failure is an interruption": (JobRecord("j", h(0), h(5), state="node_fail"), ["node_fail"]),
    "a completed job was not interrupted": (JobRecord("j", h(0), h(5), state="completed"), []),
    "a sweep's straggler is its own rule, not the check's failure": (
        JobRecord(
            "j",
            h(0),
            restarts=(
                restart(
                    1,
                    2,
                    "active check standard: nccl-allreduce: straggler: nccl-allreduce busbw_gbps: 380 is 20% below",
                ),
                restart(3, 4, "active check standard: nccl-allreduce: busbw 120 GB/s below the floor"),
            ),
        ),
        ["straggler nccl-allreduce", "check nccl-allreduce"],
    ),
    "a straggler in production, restarted off at its checkpoint": (
        JobRecord(
            "j",
            h(0),
            restarts=(
                restart(
                    1,
                    2,
                    "straggler nvlink_tx in job j: nvlink_tx 60.67 GB/s (slowest GPU) "
                    "vs job j median 120.7 over 6 nodes",
                ),
            ),
        ),
        ["straggler nvlink_tx"],
    ),
    "a restart with a cause of another kind": (JobRecord("j", h(0), restarts=(restart(1, 2, "straggler"),)), ["other"]),
}


@pytest.mark.parametrize("job, expected", INTERRUPTION_CASES.values(), ids=INTERRUPTION_CASES.keys())
def test_interruptions_by_cause(job, expected) -> None:
    assert metrics.interruptions(job) == expected


def test_checkpoint_interval_is_the_median_gap_pooled_over_jobs() -> None:
    # Gaps: job a 1 h, 1 h, 2 h; job b 4 h; job c has one checkpoint, no gap. Pooled
    # [1, 1, 2, 4]: median 1.5 h. The last_checkpoint_at of b (at one of its times) adds none.
    a = JobRecord("a", h(0), checkpoints=(h(1), h(2), h(3), h(5)))
    b = JobRecord("b", h(0), last_checkpoint_at=h(6), checkpoints=(h(2), h(6)))
    c = JobRecord("c", h(0), checkpoints=(h(1),))
    assert metrics.checkpoint_interval_seconds([a, b, c]) == 1.5 * HOUR
    assert metrics.checkpoint_interval_seconds([c]) is None


def test_mttf_at_a_job_size_from_production_gpu_hours() -> None:
    # Two 8-GPU nodes in production 0 -> 24 h, one 4-GPU node 0 -> 12 h then failed:
    # 2 x 24 x 8 + 12 x 4 = 432 GPU-hours; 1 failure: 1/432 per GPU-hour.
    # A 16-GPU job: 432 / 16 = 27 h. 1,024 GPUs: 432 / 1024 = 0.421875 h.
    def node(name: str, gpus: int, *moves: Transition) -> NodeHistory:
        return NodeHistory(NodeRecord(name, "r1", "p", h(0), gpus), moves)

    nodes = [node(n, 8, Transition(n, "new", "production", h(0))) for n in ("a", "b")]
    nodes.append(
        node(
            "c",
            4,
            Transition("c", "new", "production", h(0)),
            Transition("c", "production", "draining", h(12), "drain", XID_79, "automation"),
        )
    )
    summary = metrics.summarise(nodes, h(0), h(24))
    assert summary.production_gpu_hours == 432 and summary.failures == 1
    rate = metrics.failure_rate_per_gpu_hour(summary.production_gpu_hours, summary.failures)
    assert rate == 1 / 432
    assert metrics.mttf_at_job_size_hours(rate, 16) == pytest.approx(27.0)
    assert metrics.mttf_at_job_size_hours(rate, 1024) == pytest.approx(0.421875)
    assert metrics.mttf_at_job_size_hours(0.0, 16) is None  # no failures: no finite MTTF
    assert metrics.failure_rate_per_gpu_hour(0.0, 0) is None  # no GPU-hours: no rate


PREDICTED_CASES = {
    # 1,024 GPUs at 1/432 per GPU-hour: 1024/432 failures an hour = 2.370370.../3600 per s.
    # Restart 120 s, checkpoint every 1,800 s: each failure costs 120 + 900 = 1,020 s.
    # 1 - 1024/432/3600 x 1020 = 1 - 0.671604... = 0.328395...
    "a large job": ((1024, 1 / 432, 1800.0, 120.0), 1 - 1024 / 432 / 3600 * 1020),
    # 16 GPUs: 1 - 16/432/3600 x 1020 = 0.989506...
    "a small job": ((16, 1 / 432, 1800.0, 120.0), 1 - 16 / 432 / 3600 * 1020),
    # A failure more often than its cost: the model bottoms out at 0.
    "the model is floored at zero": ((100_000, 1 / 432, 1800.0, 120.0), 0.0),
    "no failures: nothing lost": ((1024, 0.0, 1800.0, 120.0), 1.0),
    "no checkpoint interval known": ((1024, 1 / 432, None, 120.0), None),
    "no restart time known": ((1024, 1 / 432, 1800.0, None), None),
}


@pytest.mark.parametrize("args, expected", PREDICTED_CASES.values(), ids=PREDICTED_CASES.keys())
def test_predicted_ettr_is_metas_first_order_model(args, expected) -> None:
    result = metrics.predicted_ettr(*args)
    assert result == (pytest.approx(expected) if expected is not None else None)
