"""Slurm's job history (squeue --states=all) read by fleetctl.schedulers.slurm.parse_job_history,
on real output (tests/fixtures/slurm/) and on lines it must refuse."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleetctl.schedulers.base import JobHistory, SchedulerError
from fleetctl.schedulers.slurm import parse_job_history

FIXTURE = Path(__file__).parent.parent / "fixtures" / "slurm" / "squeue_job_history.txt"


def at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def test_real_squeue_output_is_read_with_times_only_where_they_are_facts() -> None:
    lines = [line for line in FIXTURE.read_text().splitlines() if not line.startswith("#")]
    done, running, requeued = parse_job_history("\n".join(lines))
    assert done == JobHistory(
        "2", "short", "completed", ("node3",), 1, at(1796083141), at(1796083143), at(1796083143), 0, None
    )
    # The name keeps the separator; a running job's EndTime (NONE) is no end.
    assert running == JobHistory(
        "1", "train llama|x", "running", ("node1", "node2"), 2, at(1796083141), at(1796083143), None, 0, None
    )
    # Pending after a requeue: StartTime is Slurm's expectation, not a start.
    assert requeued.started_at is None and requeued.restart_count == 1 and requeued.nodes == ()


def test_gpus_per_node_from_the_allocated_tres() -> None:
    (job,) = parse_job_history("7|RUNNING|1|2|NONE|0|2|cpu=64,mem=1T,node=2,billing=64,gres/gpu=16|gpu[01-02]|llm")
    assert job.gpus_per_node == 8 and job.nodes == ("gpu01", "gpu02")


@pytest.mark.parametrize(
    "line",
    [
        "1|RUNNING|1796083141",  # too few fields
        "1;rm -rf|RUNNING|1|2|NONE|0|1|cpu=1|node1|x",  # not a job id
        "1|RUNNING|yesterday|2|NONE|0|1|cpu=1|node1|x",  # not a time
        "1|RUNNING|1|2|NONE|-1|1|cpu=1|node1|x",  # not a count
        "1|RUNNING|1|2|NONE|0|1|cpu=1|node[3-1]|x",  # not a host list
    ],
)
def test_a_line_it_cannot_read_is_one_error_not_a_guess(line) -> None:
    with pytest.raises(SchedulerError, match="cannot read"):
        parse_job_history(line)


def test_the_kinds_that_list_their_jobs_are_the_adapters_that_can() -> None:
    from fleetctl.schedulers import JOB_HISTORY_KINDS, SCHEDULER_KINDS
    from fleetctl.schedulers.base import ListsJobHistory
    from fleetctl.schedulers.kubernetes import KubernetesScheduler
    from fleetctl.schedulers.slurm import SlurmScheduler
    from fleetctl.sim.scheduler import SimScheduler

    adapters = {"slurm": SlurmScheduler, "kubernetes": KubernetesScheduler, "sim": SimScheduler}
    assert set(adapters) == set(SCHEDULER_KINDS)
    assert {kind for kind, cls in adapters.items() if issubclass(cls, ListsJobHistory)} == set(JOB_HISTORY_KINDS)


def test_one_schedulers_error_leaves_the_others_synced(sqlite_url) -> None:
    from fleetctl.db import jobs
    from fleetctl.db.engine import get_engine
    from fleetctl.jobs.history_sync import sync_jobs

    engine = get_engine(sqlite_url)
    listed = JobHistory("9", "llm", "running", ("n1",), 1, at(1796083141), at(1796083143), None)

    class Listing:
        def __init__(self, kind):
            self.kind = kind

        def job_history(self):
            return [listed] if self.kind == "sim" else []

    def scheduler_for(kind):
        if kind == "slurm":
            raise ValueError("slurm_host is login1: Slurm's commands need its SSH runner")
        return Listing(kind)

    result = sync_jobs(engine, ["slurm", "kubernetes", "sim", "none"], scheduler_for, at(1796083200))
    assert (result.jobs, result.skipped) == ({"kubernetes": 0, "sim": 1}, ["none"])
    assert result.errors == {"slurm": "slurm_host is login1: Slurm's commands need its SSH runner"}
    assert jobs.get_job(engine, "9").scheduler == "sim"
