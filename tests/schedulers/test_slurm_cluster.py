"""SlurmScheduler against a real 4-node Slurm cluster (Debian's slurm-wlm and munge)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.slurm_cluster import SlurmCluster, measure_restart
from fleetctl.schedulers.base import REASON_PREFIX, FleetctlDoesNotOwnDrain, SchedulerError, SchedulerJob
from fleetctl.schedulers.slurm import LocalCommandRunner, SlurmScheduler

pytestmark = pytest.mark.slurm


def test_drain_with_fleetctl_reason_then_resume(slurm: SlurmScheduler) -> None:
    slurm.drain("node1", "XID 79: GPU has fallen off the bus")

    state = slurm.node_state("node1")
    assert state.drained and state.owned_by_fleetctl
    assert state.state == "drain"
    assert state.reason == f"{REASON_PREFIX} XID 79: GPU has fallen off the bus"

    slurm.resume("node1")
    state = slurm.node_state("node1")
    assert (state.state, state.drained, state.reason) == ("idle", False, None)


def test_resume_refuses_a_drain_by_someone_else_unless_forced(
    slurm: SlurmScheduler, slurm_cluster: SlurmCluster
) -> None:
    slurm_cluster.run("scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=manual")

    with pytest.raises(FleetctlDoesNotOwnDrain, match="'manual'"):
        slurm.resume("node3")
    assert slurm.node_state("node3").drained

    slurm.resume("node3", force=True)
    assert slurm.node_state("node3").state == "idle"


def test_drain_leaves_a_drain_by_someone_else_theirs(slurm: SlurmScheduler, slurm_cluster: SlurmCluster) -> None:
    slurm_cluster.run("scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=manual")

    slurm.drain("node3", "XID 79")

    state = slurm.node_state("node3")
    assert state.drained and not state.owned_by_fleetctl
    assert state.reason == "manual"


def test_jobs_on_node_lists_a_running_two_node_job(slurm: SlurmScheduler, slurm_cluster: SlurmCluster) -> None:
    job_id = slurm_cluster.submit_sleep_job("-N2", "-w", "node1,node2")
    slurm_cluster.wait_for_run(job_id, run=0)

    expected = SchedulerJob(job_id=job_id, name="wrap", state="running", nodes=("node1", "node2"))
    assert slurm.jobs_on_node("node1") == [expected]
    assert slurm.jobs_on_node("node2") == [expected]
    assert slurm.jobs_on_node("node3") == []
    assert slurm.job(job_id) == expected
    assert slurm.busy_nodes() == {"node1", "node2"}  # one squeue for the whole cluster

    slurm.drain("node1", "XID 79")
    assert slurm.node_state("node1").state == "draining"


def test_restart_job_excludes_the_bad_node_and_runs_again_on_healthy_nodes(slurm_cluster: SlurmCluster) -> None:
    with_release = measure_restart(slurm_cluster, with_release=True)
    plain = measure_restart(slurm_cluster, with_release=False)
    print(
        f"\nrestart after drain, drain -> batch script running again: fleetctl (requeue, exclude, release) "
        f"{with_release.seconds:.2f}s on {','.join(with_release.restarted_nodes)}; "
        f"plain scontrol requeue {plain.seconds:.2f}s on {','.join(plain.restarted_nodes)} "
        f"(requeue hold cred_expire={slurm_cluster.cred_expire_s or 120}s here, Slurm's default 120s)"
    )

    for measurement in (with_release, plain):
        assert len(measurement.restarted_nodes) == 2
        assert measurement.bad_node in measurement.first_nodes
        assert measurement.bad_node not in measurement.restarted_nodes
    # Released at once: the job never waited out Slurm's requeue hold, which the plain way does.
    assert not with_release.held_for_begin_time
    assert plain.held_for_begin_time


def test_restart_job_pinned_to_the_bad_node_keeps_its_good_nodes(
    slurm: SlurmScheduler, slurm_cluster: SlurmCluster
) -> None:
    job_id = slurm_cluster.submit_sleep_job("-N2", "-w", "node1,node2")
    slurm_cluster.wait_for_run(job_id, run=0)
    slurm.drain("node1", "XID 79")

    slurm.restart_job(job_id, exclude_nodes=["node1"])

    restarted = slurm_cluster.wait_for_run(job_id, run=1)
    assert "node1" not in restarted.nodes
    assert "node2" in restarted.nodes
    assert len(restarted.nodes) == 2
    assert slurm.job(job_id).state == "running"


def test_restart_job_twice_only_updates_the_pending_job(slurm: SlurmScheduler, slurm_cluster: SlurmCluster) -> None:
    # Every node but node4 is busy, so the requeued job stays pending between the calls.
    slurm_cluster.submit_sleep_job("-N3", "-w", "node1,node2,node3")
    job_id = slurm_cluster.submit_sleep_job("-N1")
    assert slurm_cluster.wait_for_run(job_id, run=0).nodes == ("node4",)
    slurm.drain("node4", "XID 79")

    slurm.restart_job(job_id, exclude_nodes=["node4"])
    slurm.restart_job(job_id, exclude_nodes=["node3"])

    assert slurm.job(job_id).state == "pending"
    excluded = slurm_cluster.run("squeue", "-h", f"--jobs={job_id}", "-o", "%x").strip()
    assert excluded == "node[3-4]"


def test_unknown_node_and_job_raise_scheduler_error(slurm: SlurmScheduler) -> None:
    with pytest.raises(SchedulerError, match="does not know node node9"):
        slurm.node_state("node9")
    with pytest.raises(SchedulerError, match="Invalid job id") as raised:
        slurm.job("999999")
    assert "\n" not in str(raised.value)


def test_controller_down_raises_one_line_scheduler_error(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    conf = slurm_cluster.conf_path.read_text()
    dead_port_conf = tmp_path / "slurm.conf"
    dead_port_conf.write_text(
        "\n".join("SlurmctldPort=1" if line.startswith("SlurmctldPort=") else line for line in conf.splitlines())
    )
    slurm = SlurmScheduler(run=LocalCommandRunner(env={"SLURM_CONF": str(dead_port_conf)}))

    with pytest.raises(SchedulerError, match="Unable to contact slurm controller") as raised:
        slurm.jobs_on_node("node1")
    assert "\n" not in str(raised.value)


def test_a_cause_of_any_size_or_bytes_drains_with_a_bounded_one_line_reason(slurm: SlurmScheduler) -> None:
    """A 200 KB alert label once became a 400,000-character drain cause, which the real
    scontrol cannot be started with ("Argument list too long"), and the cordon was retried
    for ever. Bounded, with control characters escaped (a NUL would stop the command before
    it runs, a newline would split sinfo's line), any cause drains."""
    from fleetctl.text import MAX_TEXT

    slurm.drain("node2", "health: XID 79: " + "X" * 400_000 + "\n\x00\x1b[31m\ud800")
    state = slurm.node_state("node2")
    assert state.drained and state.owned_by_fleetctl
    assert state.reason.startswith(f"{REASON_PREFIX} health: XID 79: XXXX")
    assert len(state.reason) <= len(REASON_PREFIX) + 1 + MAX_TEXT and "\n" not in state.reason
    slurm.resume("node2")
    assert not slurm.node_state("node2").drained


def test_node_states_reads_the_cluster_in_one_sinfo_as_node_state_reads_each(
    slurm: SlurmScheduler, slurm_cluster: SlurmCluster
) -> None:
    """A watch over the fleet asks Slurm once a round: the states of every node from one sinfo,
    each the same as sinfo says of that node alone; reconcile over the cluster's nodes finds
    another tool's drain with that one call. A name Slurm does not know is not in the answer."""
    from dataclasses import dataclass
    from datetime import UTC, datetime

    from fleetctl.nodes.scheduler_sync import reconcile

    slurm.drain("node1", "XID 79")
    slurm_cluster.run("scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=NHC: ib0 down")
    names = ["node1", "node2", "node3", "node4", "node404"]
    asked: list[list[str]] = []
    runner = slurm_cluster.runner()

    def counted(argv: list[str], timeout_s: float):
        asked.append(argv)
        return runner(argv, timeout_s)

    counting = SlurmScheduler(run=counted)
    states = counting.node_states(names)
    assert sorted(states) == ["node1", "node2", "node3", "node4"]
    assert states == {name: slurm.node_state(name) for name in states}
    assert (states["node1"].owned_by_fleetctl, states["node3"].reason) == (True, "NHC: ib0 down")

    @dataclass
    class Row:
        name: str
        scheduler: str = "slurm"
        state: str = "production"
        state_since: datetime = datetime(2026, 12, 1, tzinfo=UTC)

    asked.clear()
    found = reconcile([Row(n) for n in names], {"slurm": counting}, False)
    assert [argv[0] for argv in asked] == ["sinfo"]
    assert {(d.node, d.difference) for d in found} == {
        ("node1", "stale_fleetctl_drain"),
        ("node3", "drained_by_someone_else"),
        ("node404", "unreachable"),
    }
