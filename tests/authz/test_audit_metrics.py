"""`fleetctl metrics serve` counts the front door's decisions from the audit trail, on real
SQLite and real PostgreSQL: every row once, a new one at the next scrape, and retention's
removal of old rows never lowers a count."""

from __future__ import annotations

import urllib.request
from datetime import timedelta

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from fleetctl.db.audit import record_request
from fleetctl.db.engine import get_engine
from fleetctl.db.models import AuditRequest, table_of, utcnow
from fleetctl.db.retention import RetentionPolicy, prune
from fleetctl.reliability import exporter_server


def _asked(engine, fleet: str, allowed: bool, role_needed: str) -> int:
    return record_request(
        engine,
        subject="olga",
        actor="olga" if allowed else "",
        fleet=fleet,
        command="node drain",
        args=["gpu-1"],
        nodes=["gpu-1"],
        allowed=allowed,
        role_needed=role_needed,
        role_held="operator",
        reason="test",
    )


def _counted(port: int) -> dict[tuple[str, str, str], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {
        (s.labels["fleet"], s.labels["decision"], s.labels["role"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "fleetctl_audit_requests"
        for s in family.samples
        if s.name == "fleetctl_audit_requests_total"
    }


def test_the_exporter_counts_the_audit_trail_and_never_counts_down(db_url: str) -> None:
    engine = get_engine(db_url)
    old = _asked(engine, "gpu-east", True, "operator")
    _asked(engine, "gpu-east", False, "admin")
    _asked(engine, "gpu-west", False, "admin")
    server = exporter_server.serve(engine, 0, "127.0.0.1")
    try:
        assert _counted(server.server_port) == {
            ("gpu-east", "allowed", "operator"): 1,
            ("gpu-east", "denied", "admin"): 1,
            ("gpu-west", "denied", "admin"): 1,
        }
        _asked(engine, "gpu-east", False, "admin")
        with engine.begin() as conn:
            table = table_of(AuditRequest)
            conn.execute(update(table).where(table.c.id == old).values(at=utcnow() - timedelta(days=500)))
        removed = prune(engine, RetentionPolicy(1000, 1000, 1000, audit_days=400), utcnow())
        assert removed["audit_requests"] == 1
        assert _counted(server.server_port) == {
            ("gpu-east", "allowed", "operator"): 1,
            ("gpu-east", "denied", "admin"): 2,
            ("gpu-west", "denied", "admin"): 1,
        }
    finally:
        server.shutdown()
