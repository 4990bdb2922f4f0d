"""SlurmScheduler's argv, parsing and errors, with a scripted command runner (no Slurm needed)."""

from __future__ import annotations

import sys

import pytest

from fleetctl.schedulers.base import FleetctlDoesNotOwnDrain, SchedulerError, SchedulerJob
from fleetctl.schedulers.slurm import (
    CLOCK_SKEW_ALLOWANCE_S,
    SETTLE_POLL_S,
    LocalCommandRunner,
    SlurmScheduler,
    expand_hostlist,
)


class ScriptedRunner:
    """Answers each command from a script keyed by argv[0] and records every argv."""

    def __init__(self, answers: dict[str, list[tuple[int, str, str]]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], timeout_s: float) -> tuple[int, str, str]:
        self.calls.append(argv)
        return self.answers[argv[0]].pop(0)


def sinfo(state: str, reason: str = "none") -> tuple[int, str, str]:
    return 0, f"node1|{state}|{reason}\n", ""


@pytest.mark.parametrize(
    ("hostlist", "names"),
    [
        ("", ()),
        ("node1", ("node1",)),
        ("node[1-3,7]", ("node1", "node2", "node3", "node7")),
        ("gpu[08-10],login-a", ("gpu08", "gpu09", "gpu10", "login-a")),
        ("rack[1-2]-n", ("rack1-n", "rack2-n")),
    ],
)
def test_expand_hostlist(hostlist: str, names: tuple[str, ...]) -> None:
    assert expand_hostlist(hostlist) == names


@pytest.mark.parametrize("hostlist", ["node[1-", "node[3-1]", "node[1-2]]", "a,,b"])
def test_expand_hostlist_refuses_what_it_cannot_read(hostlist: str) -> None:
    with pytest.raises(SchedulerError, match="cannot read Slurm host list"):
        expand_hostlist(hostlist)


@pytest.mark.parametrize("node", ["", "-node1", "node1,node2", "node[1-2]", "node1 State=RESUME", "Node=x"])
def test_invalid_node_names_never_reach_argv(node: str) -> None:
    runner = ScriptedRunner({})
    slurm = SlurmScheduler(run=runner)
    for call in (slurm.node_state, slurm.jobs_on_node, slurm.resume):
        with pytest.raises(SchedulerError, match="invalid Slurm node name"):
            call(node)
    with pytest.raises(SchedulerError, match="invalid Slurm node name"):
        slurm.restart_job("42", exclude_nodes=[node])
    assert runner.calls == []


@pytest.mark.parametrize("job_id", ["", "-1", "42 StartTime=now", "42,43", "abc"])
def test_invalid_job_ids_never_reach_argv(job_id: str) -> None:
    runner = ScriptedRunner({})
    slurm = SlurmScheduler(run=runner)
    with pytest.raises(SchedulerError, match="invalid Slurm job id"):
        slurm.job(job_id)
    with pytest.raises(SchedulerError, match="invalid Slurm job id"):
        slurm.restart_job(job_id, exclude_nodes=["node1"])
    assert runner.calls == []


def test_drain_prefixes_the_reason_once() -> None:
    runner = ScriptedRunner({"sinfo": [sinfo("idle"), sinfo("idle")], "scontrol": [(0, "", ""), (0, "", "")]})
    slurm = SlurmScheduler(run=runner)

    slurm.drain("node1", "XID 79\nGPU gone")
    slurm.drain("node1", "fleetctl: already marked")

    updates = [call for call in runner.calls if call[0] == "scontrol"]
    assert updates == [
        ["scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=fleetctl: XID 79 GPU gone"],
        ["scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=fleetctl: already marked"],
    ]


@pytest.mark.parametrize(
    ("state_flags", "state", "drained"),
    [
        ("idle", "idle", False),
        ("mixed", "mixed", False),
        ("idle+drain", "drain", True),
        ("allocated+drain", "draining", True),
        ("down+drain+not_responding", "down", True),
        ("down+not_responding", "down", False),
        ("future", "unknown", False),
    ],
)
def test_node_state_from_sinfo_state_flags(state_flags: str, state: str, drained: bool) -> None:
    slurm = SlurmScheduler(run=ScriptedRunner({"sinfo": [sinfo(state_flags)]}))
    node_state = slurm.node_state("node1")
    assert (node_state.state, node_state.drained, node_state.reason) == (state, drained, None)


def test_resume_refuses_a_down_node_it_did_not_take_out() -> None:
    runner = ScriptedRunner({"sinfo": [sinfo("down+not_responding", "Not responding")]})
    with pytest.raises(FleetctlDoesNotOwnDrain, match="down with reason 'Not responding'"):
        SlurmScheduler(run=runner).resume("node1")
    assert [call[0] for call in runner.calls] == ["sinfo"]


def test_jobs_keep_a_job_name_with_the_separator_in_it() -> None:
    runner = ScriptedRunner({"squeue": [(0, "42|RUNNING|node[1-2]|train|llama\n43|PENDING||eval\n", "")]})
    assert SlurmScheduler(run=runner).jobs_on_node("node1") == [
        SchedulerJob(job_id="42", name="train|llama", state="running", nodes=("node1", "node2")),
        SchedulerJob(job_id="43", name="eval", state="pending", nodes=()),
    ]


def test_restart_of_a_pending_job_only_updates_it() -> None:
    runner = ScriptedRunner({"squeue": [(0, "PENDING|node[1-2]|node7|\n", "")] * 2, "scontrol": [(0, "", "")]})

    SlurmScheduler(run=runner).restart_job("42", exclude_nodes=["node1"])

    assert [call for call in runner.calls if call[0] == "scontrol"] == [
        ["scontrol", "update", "JobId=42", "ExcNodeList=node7,node1", "ReqNodeList=node2", "StartTime=now"]
    ]


def test_restart_onto_named_nodes_sets_exactly_them() -> None:
    runner = ScriptedRunner({"squeue": [(0, "PENDING|node[1-2]||\n", "")] * 2, "scontrol": [(0, "", "")]})

    SlurmScheduler(run=runner).restart_job_on("42", exclude_nodes=["node1"], nodes=["node2", "node4"])

    assert [call for call in runner.calls if call[0] == "scontrol"] == [
        ["scontrol", "update", "JobId=42", "ExcNodeList=node1", "ReqNodeList=node2,node4", "StartTime=now"]
    ]


def test_release_nodes_clears_only_the_node_list() -> None:
    runner = ScriptedRunner({"scontrol": [(0, "", "")]})
    SlurmScheduler(run=runner).release_nodes("42")
    assert runner.calls == [["scontrol", "update", "JobId=42", "ReqNodeList="]]


@pytest.mark.parametrize(
    "nodes,message",
    [
        ([], "names none"),
        (["node1", "node2"], "node1 is both excluded and asked for"),
        (["node2;reboot"], "invalid Slurm node name"),
    ],
)
def test_restart_onto_named_nodes_refuses_a_bad_list_before_touching_the_job(nodes, message) -> None:
    runner = ScriptedRunner({})
    with pytest.raises(SchedulerError, match=message):
        SlurmScheduler(run=runner).restart_job_on("42", exclude_nodes=["node1"], nodes=nodes)
    assert runner.calls == []


def test_restart_waits_for_the_old_run_to_complete_and_the_requeue_second_to_pass() -> None:
    events: list[object] = []
    runner = ScriptedRunner(
        {
            "squeue": [(0, "RUNNING|||node[1-2]\n", ""), (0, "COMPLETING|||node[1-2]\n", ""), (0, "PENDING|||\n", "")],
            "scontrol": [(0, "", ""), (0, "", "")],
        }
    )

    def record(argv: list[str], timeout_s: float) -> tuple[int, str, str]:
        events.append(" ".join(argv[:2]))
        return runner(argv, timeout_s)

    SlurmScheduler(run=record, clock=lambda: 100.3, sleep=lambda seconds: events.append(round(seconds, 3))).restart_job(
        "42", exclude_nodes=["node1"]
    )

    assert events == [
        "squeue --noheader",
        "scontrol requeue",
        "squeue --noheader",
        SETTLE_POLL_S,
        "squeue --noheader",
        # Released once slurmctld's clock is past the second the old credential was revoked in.
        round(101 + CLOCK_SKEW_ALLOWANCE_S - 100.3, 3),
        "scontrol update",
    ]


@pytest.mark.parametrize(
    "nodes,waits",
    [
        (["node3"], False),  # none of the new nodes ran the job: no slurmd there revoked its credential
        (["node2", "node3"], True),  # node2 ran it and refuses a credential of the revoke's second
    ],
)
def test_a_job_named_onto_nodes_that_never_ran_it_is_released_at_once(nodes, waits) -> None:
    slept: list[float] = []
    runner = ScriptedRunner(
        {"squeue": [(0, "RUNNING|||node[1-2]\n", ""), (0, "PENDING|||\n", "")], "scontrol": [(0, "", ""), (0, "", "")]}
    )
    SlurmScheduler(run=runner, clock=lambda: 100.3, sleep=slept.append).restart_job_on(
        "42", exclude_nodes=["node1"], nodes=nodes
    )
    assert bool(slept) == waits


def test_requeue_first_then_the_release_still_waits_out_the_revoke_second() -> None:
    """requeue() now, the placement decided meanwhile, restart_job_on() later: the release
    waits for the same second as if both were one call, and the job is requeued once."""
    slept: list[float] = []
    clock = iter([100.3, 100.9])
    runner = ScriptedRunner(
        {
            "squeue": [(0, "RUNNING|||node[1-2]\n", ""), (0, "PENDING|||\n", ""), (0, "PENDING|||\n", "")],
            "scontrol": [(0, "", ""), (0, "", "")],
        }
    )
    scheduler = SlurmScheduler(run=runner, clock=lambda: next(clock), sleep=slept.append)
    scheduler.requeue("42")
    scheduler.restart_job_on("42", exclude_nodes=["node1"], nodes=["node2", "node3"])
    assert [c[:2] for c in runner.calls if c[0] == "scontrol"] == [["scontrol", "requeue"], ["scontrol", "update"]]
    assert slept == [pytest.approx(101 + CLOCK_SKEW_ALLOWANCE_S - 100.9)]


def test_command_failure_is_one_line_naming_the_command() -> None:
    stderr = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n\n"
    runner = ScriptedRunner({"squeue": [(1, "", stderr)]})
    with pytest.raises(SchedulerError) as raised:
        SlurmScheduler(run=runner).job("42")
    assert str(raised.value) == (
        "squeue --noheader --jobs=42 --states=all --format=%i|%T|%N|%j: exit status 1: "
        "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
    )


def test_timeout_and_missing_command_are_scheduler_errors() -> None:
    slurm = SlurmScheduler(run=LocalCommandRunner(env={"PATH": "/nonexistent"}))
    with pytest.raises(SchedulerError, match=r"squeue .*: cannot run: No such file or directory"):
        slurm.job("42")

    def too_slow(argv: list[str], timeout_s: float) -> tuple[int, str, str]:
        raise TimeoutError

    with pytest.raises(SchedulerError, match=r"sinfo .*: timed out after 2s"):
        SlurmScheduler(run=too_slow, timeout_s=2).node_state("node1")


def test_local_runner_passes_env_and_times_out() -> None:
    runner = LocalCommandRunner(env={"SLURM_CONF": "/tmp/test-slurm.conf"})
    print_env = [sys.executable, "-c", "import os; print(os.environ['SLURM_CONF'])"]
    assert runner(print_env, 10) == (0, "/tmp/test-slurm.conf\n", "")
    with pytest.raises(TimeoutError):
        runner([sys.executable, "-c", "import time; time.sleep(10)"], 0.2)
