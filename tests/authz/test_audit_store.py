"""The audit trail on real SQLite and real PostgreSQL: filters, and retention letting go of
what is older than retention_audit_days (and only that)."""

from __future__ import annotations

import os
from datetime import timedelta

from sqlalchemy import update
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.db.audit import audit_requests, record_exit, record_request
from fleetctl.db.engine import get_engine
from fleetctl.db.models import AuditRequest, table_of, utcnow


def _asked(engine, subject: str, command: str, nodes: list[str], allowed: bool) -> int:
    return record_request(
        engine,
        subject=subject,
        actor=subject if allowed else "",
        fleet="default",
        command=command,
        args=nodes,
        nodes=nodes,
        allowed=allowed,
        role_needed="operator",
        role_held="operator" if allowed else "viewer",
        reason="test",
    )


def test_filters_and_retention(db_url: str) -> None:
    engine = get_engine(db_url)
    old = _asked(engine, "olga", "node drain", ["gpu-1", "gpu-10"], True)
    record_exit(engine, old, 0)
    _asked(engine, "vera", "node drain", ["gpu-1"], False)
    _asked(engine, "vera", "node undrain", ["gpu-10"], False)
    with engine.begin() as conn:
        table = table_of(AuditRequest)
        conn.execute(update(table).where(table.c.id == old).values(at=utcnow() - timedelta(days=500)))

    def seen(**filters) -> list[tuple[str, str, str]]:
        return [(r["subject"], r["command"], r["decision"]) for r in audit_requests(engine, **filters)]

    assert seen(node="gpu-1") == [("olga", "node drain", "allowed"), ("vera", "node drain", "denied")]  # not gpu-10
    assert seen(subject="vera", denied_only=True) == [
        ("vera", "node drain", "denied"),
        ("vera", "node undrain", "denied"),
    ]
    assert seen(since=utcnow() - timedelta(days=1)) == seen(subject="vera")
    assert audit_requests(engine, subject="olga")[0]["exit_code"] == 0

    runner = CliRunner()
    base = ["--config", os.devnull, "--db-url", db_url]
    listed = runner.invoke(app, [*base, "audit", "--node", "gpu-10", "--denied"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0 and "node undrain" in listed.output and "node drain " not in listed.output
    bad = runner.invoke(app, [*base, "audit", "--since", "yesterday"])
    assert bad.exit_code == 2 and bad.output.startswith("error: --since: ")

    pruned = runner.invoke(app, [*base, "db", "prune"], env={"FLEETCTL_RETENTION_AUDIT_DAYS": "400"})
    assert pruned.exit_code == 0, pruned.output
    assert "1 audit requests" in pruned.output
    assert seen() == [("vera", "node drain", "denied"), ("vera", "node undrain", "denied")]
