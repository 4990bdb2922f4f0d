"""The hung-job decision (fleetctl.jobs.hang), table-driven: when a running job counts as hung
(late by more than its own cadence, and its GPUs stopped or a collective timed out), and which
node it is blamed on. The watchdog lines are real PyTorch output (tests/fixtures/nccl_watchdog/,
each file citing its source)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fleetctl.jobs.hang import (
    HangState,
    JobProgress,
    Localised,
    NodeEvidence,
    cadence_s,
    judge_hang,
    parse_watchdog_timeouts,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl_watchdog"
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
CADENCE_S = 600.0
FACTOR = 1.5
IDLE_PCT = 5.0
NODES = ("n1", "n2", "n3", "n4")


def _job(checkpoints: int = 3, started_at: datetime | None = None) -> JobProgress:
    """A job that checkpointed every CADENCE_S, last at T0."""
    times = tuple(T0 - timedelta(seconds=CADENCE_S * i) for i in range(checkpoints))
    return JobProgress("1234", NODES, started_at or T0 - timedelta(hours=2), times)


def _watchdog(name: str):
    return parse_watchdog_timeouts((FIXTURES / name).read_text())


def _rank(name: str, rank: int):
    return [t for t in _watchdog(name) if t.rank == rank]


def _after(cadences: float) -> datetime:
    return T0 + timedelta(seconds=CADENCE_S * cadences)


IDLE = dict.fromkeys(NODES, 0.0)
BUSY = dict.fromkeys(NODES, 97.0)

CASES = [
    # (id, job, now, evidence, state, suspects, localised)
    ("on time", _job(), _after(1.4), NodeEvidence(IDLE), HangState.PROGRESSING, (), Localised.NONE),
    ("just inside the factor", _job(), _after(FACTOR), NodeEvidence(IDLE), HangState.PROGRESSING, (), Localised.NONE),
    ("one checkpoint: no cadence", _job(1), _after(10), NodeEvidence(IDLE), HangState.NO_CADENCE, (), Localised.NONE),
    ("late but GPUs busy: slow", _job(), _after(3), NodeEvidence(BUSY), HangState.SLOW, (), Localised.NONE),
    ("late, nothing reported", _job(), _after(3), NodeEvidence({}), HangState.NO_EVIDENCE, (), Localised.NONE),
    # Restarted after its last checkpoint: the clock runs from the restart.
    (
        "restarted since",
        _job(started_at=_after(2)),
        _after(3),
        NodeEvidence(IDLE),
        HangState.PROGRESSING,
        (),
        Localised.NONE,
    ),
    ("all idle, alike", _job(), _after(1.6), NodeEvidence(IDLE), HangState.HUNG, (), Localised.NONE),
    (
        "all idle, a fault on n3",
        _job(),
        _after(1.6),
        NodeEvidence(IDLE, faults={"n3": "XID 79 at 10:05"}),
        HangState.HUNG,
        ("n3",),
        Localised.FAULT,
    ),
    (
        "a fault outweighs a straggler",
        _job(),
        _after(2),
        NodeEvidence(IDLE, faults={"n3": "XID 79"}, stragglers={"n1": "sm_clock"}),
        HangState.HUNG,
        ("n3",),
        Localised.FAULT,
    ),
    (
        "all idle, a straggler",
        _job(),
        _after(2),
        NodeEvidence(IDLE, stragglers={"n2": "nvlink_tx 60 GB/s vs median 120"}),
        HangState.HUNG,
        ("n2",),
        Localised.STRAGGLER,
    ),
    # One node spins in a kernel that never ends while the others wait, idle.
    (
        "n4's GPUs busy, the rest idle",
        _job(),
        _after(2),
        NodeEvidence({**IDLE, "n4": 100.0}),
        HangState.HUNG,
        ("n4",),
        Localised.GPUS_DIFFER,
    ),
    # NCCL's waiting kernels keep the others at 100%; n1 stopped (its process died).
    (
        "n1 idle, the rest spinning",
        _job(),
        _after(2),
        NodeEvidence({**BUSY, "n1": 0.0}),
        HangState.HUNG,
        ("n1",),
        Localised.GPUS_DIFFER,
    ),
    (
        "n2 silent, the rest idle",
        _job(),
        _after(2),
        NodeEvidence({n: 0.0 for n in NODES if n != "n2"}),
        HangState.HUNG,
        ("n2",),
        Localised.GPUS_DIFFER,
    ),
    (
        "half and half: nobody stands out",
        _job(),
        _after(2),
        NodeEvidence({"n1": 0.0, "n2": 0.0, "n3": 99.0, "n4": 99.0}),
        HangState.HUNG,
        (),
        Localised.NONE,
    ),
    # Three nodes' ranks timed out on the collective; n3's never joined it and logged nothing.
    (
        "watchdog everywhere but n3",
        _job(),
        _after(2),
        NodeEvidence(BUSY, watchdog={n: _watchdog("llamafactory_7396_allreduce.log") for n in ("n1", "n2", "n4")}),
        HangState.HUNG,
        ("n3",),
        Localised.WATCHDOG,
    ),
    # The PyTorch issue's job: rank 0 timed out on collectives 96117 to 96125, rank 7 on 64088,
    # long before: n4 (rank 7's node) is the one the others waited on.
    (
        "watchdog: n4 behind",
        _job(),
        _after(2),
        NodeEvidence(
            BUSY,
            watchdog={
                **{n: _rank("pytorch_118369_rank7_behind.log", 0) for n in ("n1", "n2", "n3")},
                "n4": _rank("pytorch_118369_rank7_behind.log", 7),
            },
        ),
        HangState.HUNG,
        ("n4",),
        Localised.WATCHDOG,
    ),
    # A timeout on one node only, the GPUs busy: hung (a collective timed out), but one node
    # noticing is no proof of where: the other three are not blamed for staying quiet.
    (
        "one watchdog line, GPUs busy",
        _job(),
        _after(2),
        NodeEvidence(BUSY, watchdog={"n1": _watchdog("arctictraining_219_stuck_watchdog.log")}),
        HangState.HUNG,
        (),
        Localised.NONE,
    ),
    (
        "a watchdog line but on time",
        _job(),
        _after(1),
        NodeEvidence(BUSY, watchdog={"n1": _watchdog("llamafactory_7396_allreduce.log")}),
        HangState.PROGRESSING,
        (),
        Localised.NONE,
    ),
]


@pytest.mark.parametrize(
    ("job", "now", "evidence", "state", "suspects", "localised"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_judge_hang(job, now, evidence, state, suspects, localised) -> None:
    verdict = judge_hang(job, now, evidence, FACTOR, IDLE_PCT)
    assert (verdict.state, verdict.suspects, verdict.localised) == (state, suspects, localised), verdict.evidence
    assert verdict.job_id == "1234" and "job 1234" in verdict.evidence


def test_a_hung_job_is_flagged_within_twice_its_cadence() -> None:
    """The judge's rule, swept over the time since the last checkpoint: flagged past FACTOR
    cadences, so a judge every half cadence flags it within twice its cadence."""
    flagged = [
        c / 10
        for c in range(40)
        if judge_hang(_job(), _after(c / 10), NodeEvidence(IDLE), FACTOR, IDLE_PCT).state is HangState.HUNG
    ]
    assert flagged[0] == 1.6
    assert FACTOR + 0.5 <= 2.0


FIXTURE_CASES = [
    ("llamafactory_7396_allreduce.log", [(0, 1580, "ALLREDUCE"), (4, 1580, "ALLREDUCE")]),
    (
        "pytorch_118369_rank7_behind.log",
        [
            (0, 96120, "ALLREDUCE"),
            (0, 96117, "ALLREDUCE"),
            (0, 96125, "ALLREDUCE"),
            (0, 96125, "ALLREDUCE"),
            (7, 64088, "ALLREDUCE"),
        ],
    ),
    ("sglang_1693_terminate.log", [(5, 9141, "_ALLGATHER_BASE")]),
    ("arctictraining_219_stuck_watchdog.log", [(2, 120049, "_ALLGATHER_BASE")]),
]


@pytest.mark.parametrize(("name", "expected"), FIXTURE_CASES, ids=[c[0] for c in FIXTURE_CASES])
def test_parse_watchdog_timeouts(name: str, expected) -> None:
    assert [(t.rank, t.seq_num, t.op_type) for t in _watchdog(name)] == expected


def test_every_watchdog_fixture_is_read() -> None:
    assert sorted(p.name for p in FIXTURES.glob("*.log")) == sorted(c[0] for c in FIXTURE_CASES)


def test_cadence_is_the_median_gap() -> None:
    times = [T0, T0 + timedelta(seconds=100), T0 + timedelta(seconds=700), T0 + timedelta(seconds=800)]
    assert cadence_s(times) == 100.0
    assert cadence_s([T0, T0]) is None
