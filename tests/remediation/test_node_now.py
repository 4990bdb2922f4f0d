"""`node show`'s `now:` says what the node is doing, from what the database records: the
jobs it runs, the RMA it waits on an operator for, its runbook's step in flight. The node's
workflow alone said `idle` of a node running a job or waiting for an operator."""

from __future__ import annotations

import json

from sqlmodel import Session

from fleetctl.db import queries
from fleetctl.db import remediation as db
from fleetctl.db.engine import get_engine
from fleetctl.db.models import Job, utcnow
from fleetctl.inventory.parse import parse_inventory


def _show(sqlite_url: str, name: str) -> tuple[dict, str]:
    from typer.testing import CliRunner

    from fleetctl.cli.main import app
    from fleetctl.connections.temporal_server import free_port

    def run(*args: str) -> str:
        r = CliRunner(env={"COLUMNS": "200"}).invoke(
            app, ["--db-url", sqlite_url, "--temporal-address", f"127.0.0.1:{free_port()}", "node", "show", name, *args]
        )
        assert r.exit_code == 0, r.output
        return r.stdout

    return json.loads(run("-o", "json")), run()


def test_now_names_the_job_the_rma_held_for_an_operator_and_the_runbook_step(sqlite_url) -> None:
    engine = get_engine(sqlite_url)
    queries.upsert_nodes(
        engine,
        parse_inventory(
            "nodes:\n"
            "  - {name: busy, address: sim://busy, profile: h100-sxm, scheduler: sim}\n"
            "  - {name: held, address: sim://held, profile: h100-sxm, scheduler: sim}\n"
            "  - {name: free, address: sim://free, profile: h100-sxm, scheduler: sim}\n"
        ),
    )
    with Session(engine) as session:
        session.add(Job(job_id="1234", scheduler="sim", state="running", nodes=["busy"], node_count=1))
        session.commit()
    db.start_run(
        engine,
        run_key="remediation/held",
        node_name="held",
        runbook="xid48-recovery",
        event={"kind": "xid", "code": 48},
        mode="live",
        actor="lifecycle",
        started_at=utcnow(),
    )
    db.record_step(
        engine,
        run_key="remediation/held",
        node_name="held",
        step_index=0,
        name="drain",
        action="drain",
        status="passed",
        params={},
        detail="",
        started_at=utcnow(),
        finished_at=utcnow(),
    )
    record, _ = db.open_rma(
        engine,
        node_name="held",
        reason="XID 48",
        remediation_run="remediation/held",
        evidence={},
        evidence_markdown="",
        opened_by="runbook:xid48-recovery",
        idempotency_key="remediation/held/1/rma",
        held_reason="correlated burst",
    )

    busy, table = _show(sqlite_url, "busy")
    assert busy["now"] == "running job 1234"
    assert "now: running job 1234" in table
    held, _ = _show(sqlite_url, "held")
    assert held["now"] == (
        f"waiting for an operator on RMA {record.id}; runbook xid48-recovery: step 2 of run remediation/held, after drain"
    )
    assert _show(sqlite_url, "free")[0]["now"] == "idle"
    # The run ended: it is no longer in flight.
    db.finish_run(engine, "remediation/held", "escalated", "sent to RMA", utcnow())
    assert _show(sqlite_url, "held")[0]["now"] == f"waiting for an operator on RMA {record.id}"
