"""Retention: the fleet database's size per 1,000 node-days with the default policy
(`fleetctl db prune` once a day, as each worker does) against none, in the same run.

N production nodes (2) through D simulated days (default 90, --full 400, past every default cut-off):
every hour a quick-suite sweep stores one check run per check (5) with a real tool output
each (the cited fixtures below, judged by checks.judge as the worker judges them), every
day one minor XID health event per node. One database keeps everything; the other is
pruned at the end of every simulated day with the default settings. Both on SQLite, then
both on PostgreSQL (the tests' throwaway cluster, VACUUMed after each day as autovacuum
would) when it starts. Figures: MiB per 1,000 node-days each way and pruned over kept."""

from __future__ import annotations

import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bench.harness import CannotMeasure

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "checks"
# The quick suite (checks/suites/quick.yaml): (check, kind, a healthy H100 node's real output).
QUICK_SUITE = (
    ("nvidia-smi-query", "nvidia-smi", "nvidia_smi/csv_8xh100_ok.txt"),
    ("xid-scan", "xid", "xid/dmesg_no_xid_ok.txt"),
    ("nvidia-smi-q", "nvidia-smi", "nvidia_smi/q_8xh100_ok.txt"),
    ("dcgm-r1", "dcgm", "dcgm/r1_json_ok.txt"),
    ("ib-ports", "ib", "ib/ibstat_h100_8rails_bluefield_bond_ok.txt"),
)
NODES, DAYS = 2, 90
NODES_FULL, DAYS_FULL = 2, 400


def _outputs() -> list[dict]:
    from fleetctl.checks import judge

    rows = []
    for check, kind, fixture in QUICK_SUITE:
        text = (FIXTURES / fixture).read_text()
        judged = judge(kind, text, "h100-sxm").to_dict()  # as workflows.activities.checks stores it
        rows.append(
            {
                "check_name": check,
                "kind": kind,
                "status": judged["status"],
                "metrics": judged["metrics"],
                "findings": judged["findings"],
                "reason": judged["reason"],
                "raw_output": text,
            }
        )
    return rows


def _fleet(engine, nodes: int, start) -> list[str]:
    from sqlmodel import Session

    from fleetctl.db import queries
    from fleetctl.db.models import NodeEvent
    from fleetctl.inventory.parse import parse_inventory

    names = [f"node-{i:03d}" for i in range(nodes)]
    queries.upsert_nodes(
        engine,
        parse_inventory(
            "nodes:\n" + "".join(f"  - {{name: {n}, address: sim://{n}, profile: h100-sxm}}\n" for n in names)
        ),
    )
    with Session(engine) as session:
        for n in names:
            session.add(
                NodeEvent(
                    node_name=n,
                    from_state="admission",
                    to_state="production",
                    trigger="admit",
                    actor="lifecycle",
                    at=start,
                    idempotency_key=f"{n}/production",
                )
            )
        session.commit()
    return names


def _one_day(engine, names: list[str], outputs: list[dict], day_start) -> None:
    from fleetctl.db.models import CheckRun, HealthEvent

    runs = []
    for hour in range(24):
        at = day_start + timedelta(hours=hour)
        for n in names:
            for out in outputs:
                runs.append(
                    {
                        **out,
                        "node_name": n,
                        "suite": "quick",
                        "output_truncated": False,
                        "started_at": at,
                        "finished_at": at,
                        "workflow_id": f"sweep/{at.isoformat()}",
                        "idempotency_key": f"{n}/{out['check_name']}/{at.isoformat()}",
                    }
                )
    events = [
        {
            "node_name": n,
            "source": "xid",
            "code": 13,
            "severity": "info",
            "action": "",
            "message": "NVRM: Xid (PCI:0000:18:00): 13, Graphics SM Warp Exception",
            "at": day_start + timedelta(hours=3),
            "idempotency_key": f"{n}/xid/{day_start.isoformat()}",
        }
        for n in names
    ]
    with engine.begin() as conn:
        conn.execute(CheckRun.__table__.insert(), runs)
        conn.execute(HealthEvent.__table__.insert(), events)


def _vacuum(engine) -> None:
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            from sqlalchemy import text

            conn.execute(text("VACUUM"))


def _simulate(kept_url: str, pruned_url: str, mib, nodes: int, days: int) -> dict:
    from fleetctl.config import Settings
    from fleetctl.db.engine import get_engine
    from fleetctl.db.models import utcnow
    from fleetctl.db.retention import RetentionPolicy, prune

    policy = RetentionPolicy.of(Settings())
    outputs = _outputs()
    start = utcnow() - timedelta(days=days)
    engines = {"none": get_engine(kept_url), "default": get_engine(pruned_url)}
    names = {way: _fleet(engine, nodes, start) for way, engine in engines.items()}
    removed = {"check_runs": 0, "raw_output": 0, "health_events": 0}
    prune_s: list[float] = []
    for day in range(days):
        day_start = start + timedelta(days=day)
        for way, engine in engines.items():
            _one_day(engine, names[way], outputs, day_start)
        started = time.perf_counter()
        for what, n in prune(engines["default"], policy, day_start + timedelta(days=1)).items():
            removed[what] += n
        prune_s.append(time.perf_counter() - started)
        for engine in engines.values():
            _vacuum(engine)
    sizes = {way: mib(url) for way, url in (("none", kept_url), ("default", pruned_url))}
    node_days = nodes * days
    per_1000 = {way: round(size * 1000 / node_days, 1) for way, size in sizes.items()}
    return {
        "mib": sizes,
        "mib_per_1000_node_days": per_1000,
        "default_over_none": round(sizes["default"] / sizes["none"], 3),
        "removed": removed,
        # One day's prune (the worker's): the last, at the steady state, and the slowest.
        "prune_s": {"last": round(prune_s[-1], 3), "max": round(max(prune_s), 3)},
        "check_runs_stored": nodes * days * 24 * len(QUICK_SUITE),
        "raw_output_bytes_per_sweep_per_node": sum(len(o["raw_output"]) for o in outputs),
    }


def _sqlite(directory: Path, nodes: int, days: int) -> dict:
    from bench.scale import _sqlite_mib
    from fleetctl.db.engine import get_engine

    def mib(url: str) -> float:
        with get_engine(url).connect() as conn:  # the WAL folded back in: the file is what stays
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        return _sqlite_mib(Path(url.split("///", 1)[1]))

    return _simulate(f"sqlite:///{directory / 'kept.db'}", f"sqlite:///{directory / 'pruned.db'}", mib, nodes, days)


def _postgres(nodes: int, days: int) -> dict | str:
    try:
        from bench.postgres import fresh_database_url, remove_cluster, start_postgres
    except ImportError as exc:
        return f"not measured: bench/postgres.py not importable: {exc}"
    try:
        cluster = start_postgres()
    except Exception as exc:  # noqa: BLE001 - PostgreSQL is optional here: SQLite's figures stand
        return f"not measured: PostgreSQL did not start: {exc}"
    try:
        from bench.sweep_db import postgres_database

        return _simulate(
            fresh_database_url(cluster),
            fresh_database_url(cluster),
            lambda url: postgres_database(cluster, url).mib(),
            nodes,
            days,
        )
    finally:
        remove_cluster(cluster)


def run(full: bool) -> dict:
    nodes, days = (NODES_FULL, DAYS_FULL) if full else (NODES, DAYS)
    with tempfile.TemporaryDirectory(prefix="fleetctl-bench-retention-") as tmp:
        try:
            sqlite = _sqlite(Path(tmp), nodes, days)
        except OSError as exc:
            raise CannotMeasure(f"SQLite databases in {tmp}: {exc}") from None
    postgres = _postgres(nodes, days)
    figures = {"nodes": nodes, "days": days, "sqlite": sqlite, "postgresql": postgres}
    return {"figures": figures}
