"""The simulated scheduler over SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from fleetctl.db import jobs
from fleetctl.db.engine import get_engine
from fleetctl.schedulers.base import BURN_IN_HOLD, REASON_PREFIX, FleetctlDoesNotOwnDrain, SchedulerError
from fleetctl.sim.scheduler import SimScheduler
from tests.support.jobs import sim_fleet


@pytest.fixture
def sim(db_url) -> SimScheduler:
    engine = get_engine(db_url)
    sim_fleet(engine, ["n1", "n2", "n3", "n4"])
    sim_fleet(engine, ["n5"], state="burn_in")
    scheduler = SimScheduler(engine)
    scheduler.drain("n5", BURN_IN_HOLD)  # as fleetctl holds it from import until admitted
    return scheduler


def test_jobs_run_first_fit_in_queue_order_and_wait_for_nodes(sim: SimScheduler) -> None:
    first = sim.submit("train-a", node_count=3)
    second = sim.submit("train-b", node_count=2)
    third = sim.submit("eval", node_count=1)

    assert (first.state, first.nodes) == ("running", ("n1", "n2", "n3"))
    # Not enough free nodes for b (n5 is held for its burn-in); the smaller job behind it fits.
    assert (second.state, second.nodes) == ("pending", ())
    assert (third.state, third.nodes) == ("running", ("n4",))
    assert [j.job_id for j in sim.jobs_on_node("n2")] == [first.job_id]
    assert sim.jobs_on_node("n5") == []
    assert sim.busy_nodes() == {"n1", "n2", "n3", "n4"}
    assert sim.node_state("n1").state == "allocated"
    assert sim.node_state("n5").state == "drain"


def test_a_node_fleetctl_does_not_hold_takes_work_whatever_its_state_in_fleetctl(sim: SimScheduler) -> None:
    """As Slurm places work: on any node it has not drained. A node in burn-in that fleetctl
    forgot to hold is filled like any other (the simulator is never kinder than Slurm)."""
    sim_fleet(sim.engine, ["n6"], state="new")
    sim_fleet(sim.engine, ["n7"], state="maintenance")
    assert sim.submit("wide", node_count=6).nodes == ("n1", "n2", "n3", "n4", "n6", "n7")
    assert sim.node_state("n5").state == "drain"  # the one held stays free


def test_restart_moves_the_job_off_the_bad_node_and_keeps_its_size(sim: SimScheduler) -> None:
    job = sim.submit("train", node_count=2)
    assert job.nodes == ("n1", "n2")
    sim.drain("n1", "XID 79: GPU has fallen off the bus")
    assert sim.node_state("n1").state == "draining"

    sim.restart_job(job.job_id, exclude_nodes=["n1"])

    restarted = sim.job(job.job_id)
    assert restarted.state == "running"
    assert "n1" not in restarted.nodes and len(restarted.nodes) == 2
    state = sim.node_state("n1")
    assert (state.state, state.drained, state.owned_by_fleetctl) == ("drain", True, True)
    assert state.reason == f"{REASON_PREFIX} XID 79: GPU has fallen off the bus"


def test_a_restart_without_room_waits_and_never_takes_a_node_it_was_told_to_avoid(sim: SimScheduler) -> None:
    """As Slurm keeps a job's ExcNodeList: the exclusions outlast the pass that requeued the
    job, and a node resumed later still does not take it."""
    job = sim.submit("big", node_count=3)
    assert job.nodes == ("n1", "n2", "n3")
    sim.drain("n1", "XID 79")

    sim.restart_job(job.job_id, exclude_nodes=["n1", "n4"])  # n4: unfit in fleetctl, free here
    sim.restart_job(job.job_id, exclude_nodes=["n1", "n4"])  # a retry changes nothing

    assert sim.job(job.job_id) == job.__class__(job.job_id, "big", "pending", ())
    sim.resume("n1")
    assert sim.job(job.job_id).state == "pending"  # n1, n2, n3, n4 free; n1 and n4 excluded
    assert sim.busy_nodes() == set()
    sim.resume("n5")  # its burn-in hold lifted
    assert sim.job(job.job_id).nodes == ("n2", "n3", "n5")


def test_a_drain_by_hand_stays_the_operators(sim: SimScheduler) -> None:
    jobs.set_sim_drain(sim.engine, "n3", True, "manual: reseat cable")

    sim.drain("n3", "XID 79")
    state = sim.node_state("n3")
    assert (state.drained, state.owned_by_fleetctl, state.reason) == (True, False, "manual: reseat cable")
    with pytest.raises(FleetctlDoesNotOwnDrain, match="reseat cable"):
        sim.resume("n3")
    assert sim.submit("j", node_count=4).state == "pending"

    sim.resume("n3", force=True)
    assert sim.node_state("n3").state == "allocated"  # the queued job took it at once


def test_unknown_node_and_job_are_scheduler_errors(sim: SimScheduler) -> None:
    with pytest.raises(SchedulerError, match="does not know node nope"):
        sim.node_state("nope")
    with pytest.raises(SchedulerError, match="does not know job sim-999"):
        sim.job("sim-999")
    with pytest.raises(SchedulerError, match="does not know job sim-999"):
        sim.restart_job("sim-999", exclude_nodes=[])
    with pytest.raises(SchedulerError, match="at least one node"):
        sim.submit("empty", node_count=0)


def test_concurrent_submissions_never_share_a_node(sim: SimScheduler) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        submitted = list(pool.map(lambda i: sim.submit(f"j{i}", node_count=1), range(8)))

    running = [sim.job(j.job_id) for j in submitted if sim.job(j.job_id).state == "running"]
    assert sorted(n for j in running for n in j.nodes) == ["n1", "n2", "n3", "n4"]


def test_restart_onto_named_nodes_runs_exactly_there(sim: SimScheduler) -> None:
    job = sim.submit("train", node_count=2)
    assert job.nodes == ("n1", "n2")
    sim.drain("n1", "XID 79")

    sim.restart_job_on(job.job_id, exclude_nodes=["n1"], nodes=["n2", "n4"])  # first fit would take n3

    assert sim.job(job.job_id).nodes == ("n2", "n4")


def test_named_nodes_hold_until_released_then_the_job_runs_anywhere_but_where_excluded(sim: SimScheduler) -> None:
    job = sim.submit("train", node_count=2)
    sim.drain("n1", "XID 79")

    sim.restart_job_on(job.job_id, exclude_nodes=["n1"], nodes=["n2", "n5"])  # n5 is in burn-in

    # As Slurm's ReqNodeList: it waits for n2 and n5, pass after pass, until released.
    assert sim.job(job.job_id).state == "pending"
    sim.resume("n1")
    sim.release_nodes(job.job_id)
    # First fit, still off n1 (resumed, but excluded).
    assert sim.job(job.job_id).nodes == ("n2", "n3")


def test_a_node_both_named_and_excluded_is_refused(sim: SimScheduler) -> None:
    job = sim.submit("train", node_count=2)
    with pytest.raises(SchedulerError, match="n2 is both excluded and asked for"):
        sim.restart_job_on(job.job_id, exclude_nodes=["n1", "n2"], nodes=["n2", "n3"])
    assert sim.job(job.job_id).nodes == ("n1", "n2")


def test_spares_fill_holds_idle_production_nodes_and_gives_back_those_that_left(sqlite_url) -> None:
    """`fleetctl spares fill` against the simulated scheduler: an island takes its spares from
    idle production nodes by name (a busy one, one in maintenance are passed over), and a
    spare that left production is let go the next time."""
    import json

    from sqlalchemy import update
    from sqlmodel import Session
    from typer.testing import CliRunner

    from fleetctl.cli.main import app
    from fleetctl.db import spares as spare_store
    from fleetctl.db.engine import get_engine
    from fleetctl.db.models import Node
    from tests.support.jobs import sim_fleet

    engine = get_engine(sqlite_url)
    sim_fleet(engine, ["s1", "s2", "s3", "s4"])
    with Session(engine) as session:
        session.exec(update(Node).values(island="ib-a"))
        session.exec(update(Node).where(Node.name == "s3").values(state="maintenance"))
        session.commit()
    sim = SimScheduler(engine)
    sim.drain("s3", "drained: maintenance")  # as the node's drain left it
    assert sim.submit("train", node_count=1).nodes == ("s1",)

    def fill() -> dict:
        result = CliRunner().invoke(
            app, ["--db-url", sqlite_url, "spares", "fill", "-o", "json"], env={"FLEETCTL_SPARES_PER_ISLAND": "2"}
        )
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    assert fill()["pools"] == {"ib-a": ["s2", "s4"]}
    assert sim.submit("other", node_count=1).state == "pending"  # every free node is a spare
    with Session(engine) as session:
        session.exec(update(Node).where(Node.name == "s4").values(state="draining"))
        session.commit()
    assert fill() == {"pools": {"ib-a": ["s2"]}, "added": [], "removed": ["s4"], "errors": {}}
    assert spare_store.held(engine) == {"s2": "ib-a"}
