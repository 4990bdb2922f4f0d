"""`fleetctl validate` end to end: the CLI, the ClusterValidation workflow on the real Temporal
dev server, the simulated fleet (a node with `fabric-slow` slows every all-reduce it is in, a
leaf with `leaf-uplink-slow` every one across it, as nccl-tests prints it) and the simulated
scheduler that holds the nodes."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass

import pytest
from sqlmodel import Session, select

from fleetctl.config import Settings
from fleetctl.db import queries
from fleetctl.db.models import CheckRun
from fleetctl.sim.node import LEAF_UPLINK_SLOW_FACTOR
from fleetctl.sim.scheduler import SimScheduler
from tests.support.sim_fleet import SimFleet, fleet_in_production
from tests.support.worker import WorkerThread

pytestmark = pytest.mark.temporal


@pytest.fixture
async def production_fleet(make_settings, sqlite_url):
    workers: list[WorkerThread] = []

    async def factory(count: int, islands: int = 0) -> SimFleet:
        settings = make_settings(sqlite_url)
        workers.append(WorkerThread(settings).start())
        return await fleet_in_production(settings, count, islands=islands)

    yield factory
    for w in workers:
        w.stop()


# A validation of 32 nodes is a dozen all-reduce runs, each holding and releasing its nodes:
# well inside the test's own timeout. The CLI runs as a process, killed at the bound, so a
# validation that never ends fails its test and leaves nothing waiting behind it.
VALIDATE_S = 240.0


@dataclass
class Ran:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


async def validate(settings: Settings, *args: str, output: str = "json") -> Ran:
    """`fleetctl validate` as a process of its own, as at a console."""
    flags = ["--db-url", settings.db_url, "--temporal-address", settings.temporal_address]
    argv = [*flags, "--task-queue", settings.task_queue, "--fleet", settings.fleet, "validate", *args, "-o", output]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "fleetctl.cli.main",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "FLEETCTL_CONFIG": os.devnull, "COLUMNS": "200"},
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), VALIDATE_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"fleetctl validate {' '.join(args)} did not end within {VALIDATE_S:.0f} s") from None
    assert process.returncode is not None
    return Ran(process.returncode, out.decode(), err.decode())


def validate_runs(fleet: SimFleet) -> list[CheckRun]:
    with Session(fleet.engine) as session:
        query = select(CheckRun).where(CheckRun.check_name == "nccl-validate").order_by(CheckRun.id)
        return list(session.exec(query))


async def test_a_node_with_a_slow_fabric_is_named_among_32_in_at_most_11_runs(production_fleet) -> None:
    fleet = await production_fleet(32)
    bad = fleet.names[21]
    fleet.inject(bad, "fabric-slow")
    out = await validate(fleet.settings)
    assert out.exit_code == 3, out.output
    data = json.loads(out.stdout)
    assert data["bad_nodes"] == [bad] and data["slow_together"] == [] and data["error"] == ""
    assert len(data["runs"]) <= 11 and data["runs"][0]["verdict"] == "slow"
    assert len(data["nodes"]) == 32 and data["skipped"] == {}
    # Each run is a check run of its own, judged against the multi-node floor for its size.
    rows = validate_runs(fleet)
    assert sorted(r.id for r in rows) == sorted(run["check_run_id"] for run in data["runs"])
    assert rows[0].metrics["hosts"] == 32 and rows[0].metrics["ranks"] == 256
    assert "32-node out-of-place busbw at the largest size" in rows[0].reason and rows[0].status == "fail"
    # Each node's latest run says what bisection found of it: only the slow node's is a failure.
    latest = {r.node_name: r.status for r in rows}
    assert latest[bad] == "fail" and {s for n, s in latest.items() if n != bad} == {"pass"}
    # Held for it, and released after: no node is left drained in its scheduler.
    scheduler = SimScheduler(fleet.engine)
    assert [n for n in fleet.names if scheduler.node_state(n).drained] == []


async def test_a_leaf_with_slow_uplinks_is_named_as_the_fabric_between_two_leaves_not_a_node(
    production_fleet,
) -> None:
    fleet = await production_fleet(32, islands=1)  # four racks of 8, each its leaf switch
    leaf_01, leaf_02 = fleet.names[:8], fleet.names[8:16]
    fleet.inject(leaf_02[3], "leaf-uplink-slow")  # on one node: every node of leaf-02 is behind it
    out = await validate(fleet.settings)
    assert out.exit_code == 3, out.output
    data = json.loads(out.stdout)
    assert data["bad_nodes"] == [] and data["unresolved"] == [] and data["error"] == ""
    assert data["slow_together"] == [[leaf_01, leaf_02]]
    # All, then the halves (leaf-01+02 slow, leaf-03+04 fast), then each leaf alone: both fast.
    runs = [(run["nodes"], run["verdict"]) for run in data["runs"]]
    assert [verdict for _, verdict in runs] == ["slow", "slow", "pass", "pass", "pass"], runs
    fast = data["runs"][2]["busbw_gbps"]
    assert data["runs"][0]["busbw_gbps"] / fast == pytest.approx(LEAF_UPLINK_SLOW_FACTOR, rel=0.03)
    # No node is blamed: the slow runs were launched on the first node, whose latest run (its
    # leaf alone) is a pass, as is every other node's.
    latest = {r.node_name: r.status for r in validate_runs(fleet)}
    assert set(latest.values()) == {"pass"} and fleet.names[0] in latest, latest


async def test_drain_takes_each_slow_node_through_the_capacity_guard_as_a_failed_check(production_fleet) -> None:
    fleet = await production_fleet(8)
    first, second = fleet.names[1], fleet.names[6]  # one in each half
    fleet.inject(first, "fabric-slow")
    fleet.inject(second, "fabric-slow")
    out = await validate(fleet.settings, "--drain")
    assert out.exit_code == 3, out.output
    data = json.loads(out.stdout)
    assert data["bad_nodes"] == [first, second]
    # One node of 8 may be out at once (10%, at least one): the guard grants the first only.
    assert data["drained"] == [first] and list(data["kept"]) == [second]
    assert data["kept"][second].startswith("the capacity guard kept it in service: ")
    assert fleet.state(first) in ("draining", "maintenance") and fleet.state(second) == "production"
    drain = next(e for e in queries.node_events(fleet.engine, first) if e.trigger == "drain")
    assert drain.actor_kind == "automation" and drain.failure == "check nccl-validate"
    assert drain.cause.startswith("active check validate: nccl-validate: 2-node all-reduce of ")
    # The validation's own holds are all released (the drained node's scheduler drain is its
    # workflow's, after the transition: not waited for here).
    scheduler = SimScheduler(fleet.engine)
    assert [n for n in fleet.names if n != first and scheduler.node_state(n).drained] == []
    # Without --drain nothing is drained, whatever is found.
    again = json.loads((await validate(fleet.settings, *fleet.names[2:])).stdout)
    assert again["bad_nodes"] == [second] and again["drained"] == [] and again["kept"] == {}
    assert fleet.state(second) == "production"


async def test_a_healthy_set_passes_in_one_run_and_a_busy_node_is_skipped(production_fleet) -> None:
    fleet = await production_fleet(6)
    job = SimScheduler(fleet.engine).submit("train", 1)
    busy = job.nodes[0]
    out = await validate(fleet.settings, *fleet.names)
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["passed"] and len(data["runs"]) == 1 and data["bad_nodes"] == []
    assert busy not in data["nodes"] and data["skipped"][busy].startswith(f"job {job.job_id} running")
    assert validate_runs(fleet)[0].metrics["hosts"] == 5
    # What an operator reads: the nodes held, the one skipped and why, the run, the verdict.
    table = await validate(fleet.settings, *fleet.names, output="table")
    assert table.exit_code == 0, table.output
    assert f"skipped {busy}: job {job.job_id} running on the node" in table.stdout
    assert "passed: 5 nodes at or above the multi-node floor" in table.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("{0}",), "1 production node; an all-reduce across nodes needs 2 or more"),
        (("{0}", "gpu-none"), "unknown node: gpu-none"),
        (("--island", "nowhere"), "island nowhere: 0 production nodes"),
        (("-l", "pool"), "bad label selector"),
    ],
)
async def test_a_scope_with_no_usable_set_is_refused_in_one_line_holding_nothing(
    production_fleet, args: tuple[str, ...], message: str
) -> None:
    fleet = await production_fleet(2)
    out = await validate(fleet.settings, *(a.format(fleet.names[0]) for a in args))
    assert out.exit_code == 2 and out.stdout == ""
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert validate_runs(fleet) == []
    assert [n for n in fleet.names if SimScheduler(fleet.engine).node_state(n).drained] == []


async def test_a_set_left_with_one_idle_node_after_the_holds_is_an_error_and_released(production_fleet) -> None:
    fleet = await production_fleet(2)
    job = SimScheduler(fleet.engine).submit("train", 1)
    out = await validate(fleet.settings)
    assert out.exit_code == 4, out.output
    data = json.loads(out.stdout)
    assert data["error"].startswith("1 of 2 nodes held (the rest busy)") and data["runs"] == []
    assert list(data["skipped"]) == list(job.nodes)
    assert [n for n in fleet.names if SimScheduler(fleet.engine).node_state(n).drained] == []
