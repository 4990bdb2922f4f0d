"""The database's grants match the command table (fleetctl.authz.commands): under an
operator's own PostgreSQL login every operator command does its work, the workers (the
schema's owner) writing what goes through Temporal; and every admin-only write is refused in
one line naming fleetctl_admin, changing nothing, `db prune` included."""

from __future__ import annotations

import asyncio
import os

import pytest
from sqlalchemy import text
from temporalio.testing import ActivityEnvironment

from fleetctl.config import load_settings
from fleetctl.db import queries
from fleetctl.db.engine import dispose, get_engine
from fleetctl.workflows.activities.remediation import RemediationActivities
from fleetctl.workflows.api import RmaRequest
from fleetctl.workflows.client import connect, node_now
from tests.authz_engines.test_pg_roles import BASELINE, ROLES, Fleet
from tests.support.fleet import wait_for
from tests.support.sim_fleet import make_fleet
from tests.support.worker import WorkerThread, start_in_production, terminate_node_workflows

pytestmark = [pytest.mark.postgres, pytest.mark.temporal]
DATABASE_REFUSED = "error: the database refused this command"


@pytest.fixture(scope="module")
def fleet(postgres_server, temporal_address, tmp_path_factory):
    fleet = Fleet(postgres_server, temporal_address, tmp_path_factory.mktemp("operator"))
    settings = load_settings(
        flags={"db_url": fleet.owner_url, "temporal_address": temporal_address}
        | {"task_queue": fleet.env["FLEETCTL_TASK_QUEUE"], "fleet": fleet.env["FLEETCTL_FLEET"]}
        # No runbooks: the XID 79 an operator sends drains its node to maintenance and the
        # automation stops there, so the later tests' before-and-after snapshots of every row
        # see only what their own command wrote (a runbook's reboot, burn-in and escalation
        # went on writing under them).
        | {"runbooks_dir": str(tmp_path_factory.mktemp("no-runbooks"))},
        env={},
        config_file=os.devnull,
    )
    opened = ActivityEnvironment().run(
        RemediationActivities(settings, executors=None).open_rma,
        RmaRequest(node="n05", reason="nccl-allreduce below its floor", actor="tester@ci"),
    )
    assert opened.rma_id == 2
    granted = fleet.grant(ROLES)
    assert granted.returncode == 0, granted.stderr
    fleet.settings = settings
    fleet.nodes = make_fleet(settings, 3, racks=1)
    worker = WorkerThread(settings).start()

    async def in_production() -> None:
        client = await connect(settings)
        for node in fleet.nodes:
            await start_in_production(client, settings, node)

    try:
        asyncio.run(in_production())
        yield fleet
    finally:
        worker.stop()
        asyncio.run(terminate_node_workflows(settings, fleet.nodes))
        dispose([fleet.owner_url])


def _as_operator(fleet, *args: str, **env: str):
    done = fleet.fleetctl("olga", *args, **env)
    assert DATABASE_REFUSED not in done.stderr, done.stderr
    return done


def _state(fleet, node: str) -> str:
    found = queries.get_node(get_engine(fleet.owner_url), node)
    assert found is not None
    return found.state


def test_an_operator_drains_undrains_rechecks_and_sends_events(fleet) -> None:
    a, b, c = fleet.nodes
    done = _as_operator(fleet, "node", "drain", a, "--reason", "fans loud", "--yes")
    assert done.returncode == 0 and f"{a}: production -> draining" in done.stdout, done.stderr
    done = _as_operator(fleet, "node", "undrain", a)
    assert done.returncode == 0 and "-> production" in done.stdout, done.stderr
    done = _as_operator(fleet, "node", "recheck", b)
    assert done.returncode == 0 and "recheck with suite quick started" in done.stdout, done.stderr
    done = _as_operator(fleet, "node", "event", c, "--xid", "79")
    assert done.returncode == 0 and f"{c}: 1 health event sent (XID 79)" in done.stdout, done.stderr
    actors = {(e.trigger, e.actor) for e in queries.node_events(get_engine(fleet.owner_url), a)}
    assert {("drain", "tester@ci"), ("undrain", "tester@ci")} <= actors, actors
    asyncio.run(_settled(fleet, drained=c))


async def _settled(fleet, drained: str) -> None:
    """Until what the operator's commands started is done: `drained` in maintenance and no
    node's workflow with work queued or in progress (the next tests compare every row)."""
    client = await connect(fleet.settings)

    async def idle() -> bool:
        if _state(fleet, drained) != "maintenance":
            return False
        for node in fleet.nodes:
            now = await node_now(client, node)
            if now.work or now.activity:
                return False
        return True

    # A drain and a quick suite on the simulator, as the other drains of this suite are bounded.
    await wait_for(idle, 60, "the operator's drain and recheck done")


def test_a_refused_transition_is_recorded_under_the_operator(fleet) -> None:
    a = fleet.nodes[0]
    done = _as_operator(fleet, "node", "rma", a, "--reason", "fans loud")
    assert done.returncode == 1 and "cannot send to rma a node in production" in done.stderr, done.stderr
    with get_engine(fleet.owner_url).connect() as conn:
        recorded = conn.execute(
            text("SELECT actor, reason FROM automation_events WHERE kind = 'rejected' AND node_name = :n"), {"n": a}
        ).all()
    assert [(actor, reason.split(":")[0]) for actor, reason in recorded] == [("tester@ci", "send_to_rma")], recorded


@pytest.mark.parametrize(
    "args",
    [
        ["job", "checkpoint", "sim-2"],
        ["job", "sync"],
        ["job", "submit", "--nodes", "1"],
        ["sim", "inject", "n01", "xid79"],
        ["sim", "clear", "n01"],
        ["spares", "fill"],
    ],
    ids=" ".join,
)
def test_an_operators_own_writes_are_granted(fleet, args) -> None:
    done = _as_operator(fleet, *args)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_operator_closes_an_rma(fleet) -> None:
    # The record is closed by the command itself; n05's history was written straight into the
    # tables, without a workflow to send it to burn-in, which the command says after.
    done = _as_operator(fleet, "rma", "close", "2", "--no-fault-found")
    assert done.stdout.startswith("RMA 2 closed (no fault found)"), done.stdout + done.stderr
    assert done.stderr == "error: n05: not sent to burn-in: n05: workflow not found for ID: node/n05\n"


# Commands that read, then ask the workflows (which write as the schema's owner): under the
# operator's login they get as far as the workflow's own answer, never a database refusal.
ASKS = [
    (["rma", "confirm", "2", "--reason", "bad fans"], "RMA 2 awaits no confirmation"),
    (["rma", "reject", "2", "--reason", "fans fine"], "RMA 2 awaits no confirmation"),
    (["job", "restart", "sim-1", "--yes"], "job sim-1 runs on nodes in production only"),
]


@pytest.mark.parametrize(("args", "answer"), ASKS, ids=[" ".join(a[0][:2]) for a in ASKS])
def test_an_operators_requests_reach_the_workflows(fleet, args, answer) -> None:
    done = _as_operator(fleet, *args)
    assert answer in done.stderr, done.stdout + done.stderr


# (command, environment): each an admin's write, refused to the operator's login before it
# changes anything.
ADMIN_WRITES = [
    (["db", "prune"], {"FLEETCTL_RETENTION_RAW_OUTPUT_DAYS": "0.01", "FLEETCTL_RETENTION_CHECK_DAYS": "0.01"}),
    (["firmware", "baseline", "set", str(BASELINE)], {}),
]


@pytest.mark.parametrize(("args", "env"), ADMIN_WRITES, ids=[" ".join(w[0][:3]) for w in ADMIN_WRITES])
def test_an_admins_write_is_refused_to_an_operator_in_one_line(fleet, args, env) -> None:
    before = fleet.rows()
    done = fleet.fleetctl("olga", *args, **env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert lines[0].startswith(DATABASE_REFUSED) and "needs the fleetctl_admin role" in lines[0], lines
    assert fleet.rows() == before
    allowed = fleet.fleetctl("adam", *args, **env)
    assert allowed.returncode == 0, allowed.stderr
