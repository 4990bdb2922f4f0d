"""The demo's per-fault line and its verdict tell the truth: a fault whose node's drain the
capacity guard holds, or whose runbook failed and waits for an operator, is not "handled",
and an XID 79 node is said to be rebooted only once a reboot step passed. Rows as the
workflows write them, in a real database."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from sqlmodel import Session, select

from fleetctl.db import jobs, queries
from fleetctl.db import remediation as db
from fleetctl.db.engine import get_engine
from fleetctl.db.models import AutomationEvent, CheckRun, Node, NodeEvent, utcnow
from fleetctl.demo import Fault, handled_how
from fleetctl.inventory.parse import parse_inventory
from fleetctl.sim.scheduler import SimScheduler

NO_BMC = "the node has no BMC address in the inventory"


def _fleet(engine, state: str = "production") -> None:
    queries.upsert_nodes(
        engine, parse_inventory("nodes:\n  - {name: n1, address: sim://n1, profile: h100-sxm, scheduler: sim}\n")
    )
    with Session(engine) as session:
        node = session.exec(select(Node).where(Node.name == "n1")).one()
        node.state, node.state_since = state, utcnow() - timedelta(hours=1)
        session.add(node)
        session.commit()


def _add(engine, row, key_field) -> None:
    queries.insert_once(engine, row, key_field, row.idempotency_key)


def _unreachable_checks(engine) -> None:
    for i in range(3):
        _add(
            engine,
            CheckRun(
                node_name="n1",
                check_name="nvidia-smi-query",
                kind="nvidia-smi-query",
                status="error",
                error_kind="unreachable",
                reason="ssh: no route to host",
                idempotency_key=f"c{i}",
            ),
            CheckRun.idempotency_key,
        )


def test_an_unreachable_node_whose_drain_is_held_is_not_handled(sqlite_url) -> None:
    engine = get_engine(sqlite_url)
    _fleet(engine)
    _unreachable_checks(engine)
    fault = Fault("unreachable", "n1", "checks error out; never drained for it", 20)
    assert handled_how(engine, fault).startswith("✓ 3 checks ended in error (unreachable); not drained")

    _add(
        engine,
        AutomationEvent(
            kind="deny",
            node_name="n1",
            actor="active-checks",
            reason="rack limit: rack r1 would have 2 of 4 nodes out (limit 25%)",
            idempotency_key="held",
        ),
        AutomationEvent.idempotency_key,
    )

    assert handled_how(engine, fault) == (
        "… drain held (rack limit: rack r1 would have 2 of 4 nodes out (limit 25%)): the node still takes work"
    )


def _xid79_drained_and_restarted(engine) -> None:
    _add(
        engine,
        NodeEvent(
            node_name="n1",
            from_state="production",
            to_state="draining",
            trigger="drain",
            cause="xid 79",
            actor="lifecycle",
            idempotency_key="drain",
        ),
        NodeEvent.idempotency_key,
    )
    job = SimScheduler(engine).submit("train", node_count=1)
    seen = datetime.now(UTC) - timedelta(seconds=30)
    jobs.record_restart_started(
        engine,
        workflow_id="restart",
        job_id=job.job_id,
        scheduler="sim",
        bad_nodes=["n1"],
        cause="xid 79",
        actor="lifecycle",
        restart_id="r",
        fault_seen_at=seen,
    )
    jobs.record_restart_step(engine, "restart", running_at=seen + timedelta(seconds=1.5))


def _xid79_run(engine, reboot: str, status: str) -> str:
    key = f"remediation/n1@{uuid.uuid4()}"
    now = utcnow()
    db.start_run(
        engine,
        run_key=key,
        node_name="n1",
        runbook="xid-79-fallen-off-bus",
        event={},
        mode="live",
        actor="lifecycle",
        started_at=now,
    )
    for i, (name, action, step_status, detail) in enumerate(
        [("0-drain", "drain", "passed", "drained"), ("reboot", "reboot", reboot, NO_BMC if reboot == "failed" else "")]
    ):
        db.record_step(
            engine,
            run_key=key,
            node_name="n1",
            step_index=i,
            name=name,
            action=action,
            status=step_status,
            params={},
            detail=detail,
            started_at=now,
            finished_at=now,
        )
    if status != "running":
        db.finish_run(engine, key, status, f"step reboot {reboot}", now)
    return key


def test_an_xid79_node_whose_reboot_failed_needs_an_operator_not_a_tick(sqlite_url) -> None:
    engine = get_engine(sqlite_url)
    _fleet(engine, "maintenance")
    _xid79_drained_and_restarted(engine)
    key = _xid79_run(engine, "failed", "failed")
    fault = Fault("xid79-event", "n1", "drained at once, job restarted, rebooted", 5)

    line = handled_how(engine, fault)

    assert line.startswith(
        f"… needs an operator: runbook xid-79-fallen-off-bus (run {key}) failed at step reboot: {NO_BMC}"
    )


def test_an_xid79_node_is_said_rebooted_only_once_its_reboot_passed(sqlite_url) -> None:
    engine = get_engine(sqlite_url)
    _fleet(engine, "maintenance")
    _xid79_drained_and_restarted(engine)
    fault = Fault("xid79-event", "n1", "drained at once, job restarted, rebooted", 5)
    _xid79_run(engine, "skipped", "running")  # under way: its reboot has not run

    assert handled_how(engine, fault) == (
        "… drained at once; job sim-1 running again after 1.5 s; not rebooted yet (now maintenance)"
    )

    _xid79_run(engine, "passed", "succeeded")
    assert handled_how(engine, fault) == (
        "✓ drained at once; job sim-1 running again after 1.5 s; rebooted (now maintenance)"
    )
