"""Migrations that move data, on real SQLite and real PostgreSQL: the database is built up to
the revision before, filled as the old code wrote it, then upgraded."""

from __future__ import annotations

from datetime import UTC, datetime

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text

from fleetctl.db import queries
from fleetctl.db.engine import MIGRATIONS_DIR, get_engine
from fleetctl.reliability.metrics import failure_label, is_failure
from fleetctl.reliability.metrics_store import transition_of


def _migrate(url: str, revision: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    engine = create_engine(url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    engine.dispose()


# (from, to, trigger, actor_kind, cause) as the code before 0007 wrote them; the label the
# report gave each, which it must still give after the upgrade.
OLD_ROWS = [
    (
        "production",
        "draining",
        "drain",
        "automation",
        "health: XID 79: reset_gpu (critical): GPU has fallen off the bus",
        "xid 79",
    ),
    (
        "production",
        "draining",
        "drain",
        "automation",
        "recheck quick: nccl-allreduce: busbw 300 below 360",
        "check nccl-allreduce",
    ),
    (
        "production",
        "draining",
        "drain",
        "automation",
        "active check quick: dcgm-diag-r3: GPU 5 memory",
        "check dcgm-diag-r3",
    ),
    ("production", "draining", "drain", "automation", "health: operator report: fans loud", "health"),
    ("production", "draining", "drain", "automation", "runbook thermal: drain", "automation"),
    ("production", "draining", "drain", "operator", "XID 79 seen on the console", "xid 79"),
    ("production", "draining", "drain", "operator", "reseat the cable", None),
    ("draining", "maintenance", "drain_complete", "automation", "drained: health: XID 79", None),
]


def test_0007_records_the_failure_of_old_rows_as_the_report_read_them(empty_db_url: str) -> None:
    _migrate(empty_db_url, "0006")
    engine = create_engine(empty_db_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO nodes (name, address, rack, profile, scheduler, state, state_version, labels, "
                "created_at, updated_at, state_since) VALUES ('n1', 'sim://n1', 'r1', 'h100-sxm', 'sim', "
                "'maintenance', 8, '{}', :t, :t, :t)"
            ),
            {"t": datetime(2026, 1, 1, tzinfo=UTC)},
        )
        for i, (frm, to, trigger, kind, cause, _) in enumerate(OLD_ROWS):
            conn.execute(
                text(
                    "INSERT INTO node_events (node_name, from_state, to_state, trigger, cause, actor, "
                    "actor_kind, at, workflow_id, run_id, state_version, idempotency_key) VALUES "
                    "('n1', :f, :t, :tr, :c, 'x', :k, :at, '', '', :v, :key)"
                ),
                {
                    "f": frm,
                    "t": to,
                    "tr": trigger,
                    "c": cause,
                    "k": kind,
                    "v": i + 1,
                    "key": f"k{i}",
                    "at": datetime(2026, 1, 1, i, tzinfo=UTC),
                },
            )
    engine.dispose()

    _migrate(empty_db_url, "head")

    events = queries.node_events(get_engine(empty_db_url), "n1")
    assert len(events) == len(OLD_ROWS)
    for event, (*_, label) in zip(events, OLD_ROWS, strict=False):
        t = transition_of(event)
        assert (failure_label(t) if is_failure(t) else None) == label, event.cause


def test_0011_adds_and_removes_the_straggler_findings_and_the_model_writes_them(db_url: str) -> None:
    from sqlalchemy import inspect

    from fleetctl.db import stragglers
    from fleetctl.db.models import Job
    from fleetctl.jobs.stragglers import STRAGGLER, MetricVerdict

    engine = get_engine(db_url)  # at head
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    job = Job(job_id="7", scheduler="slurm", state="running", nodes=["a"], restart_count=2)
    verdict = MetricVerdict("a", "sm_clock", STRAGGLER, 1410.0, 1980.0, -19.2, "sm_clock 1410 MHz ...")
    stragglers.record_findings(engine, job, [verdict], [], datetime(2026, 12, 1, tzinfo=UTC))
    (row,) = stragglers.open_findings(engine)
    assert (row.node_name, row.metric, row.value, row.robust_z, row.job_restart_count, row.detail) == (
        "a",
        "sm_clock",
        1410.0,
        -19.2,
        2,
        "",
    )
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0010")
    assert not inspect(engine).has_table("straggler_findings")
    _migrate(db_url, "head")
    assert inspect(engine).has_table("straggler_findings") and stragglers.open_findings(engine) == []


# A restart's cause as the code before 0018 wrote it, and the label the report gave it then:
# what its failure column must make the report give now.
OLD_RESTART_CAUSES = [
    ("health: XID 79: reset_gpu (critical): GPU has fallen off the bus", "xid 79"),
    ("drained: active check standard: nccl-allreduce: busbw 120 GB/s below the floor", "check nccl-allreduce"),
    (
        "active check standard: nccl-allreduce: straggler: nccl-allreduce busbw_gbps: 380 is 20% below",
        "straggler nccl-allreduce",
    ),
    ("prolog quick: dcgm-diag-r1: GPU 2 failed", "check dcgm-diag-r1"),
    ("straggler nvlink_tx in job j: nvlink_tx 60.67 GB/s vs job j median 120.7", "straggler nvlink_tx"),
    ("health: operator report: fans loud", "health"),
    ("operator: moving the job off a bad fan", "operator"),
    ("straggler", "other"),
    ("", "other"),
]


def test_0018_records_the_failure_of_old_restarts_as_the_report_read_them(empty_db_url: str) -> None:
    from fleetctl.reliability.metrics import RestartRecord, restart_label

    _migrate(empty_db_url, "0017")
    at = datetime(2026, 1, 1, tzinfo=UTC)
    engine = create_engine(empty_db_url)
    with engine.begin() as conn:
        for i, (cause, _) in enumerate(OLD_RESTART_CAUSES):
            conn.execute(
                text(
                    "INSERT INTO job_restarts (job_id, scheduler, bad_nodes, cause, actor, restart_id, fault_seen_at, "
                    "new_nodes, nodes_before, status, error, island, placement, placement_detail, placed_on, landed, "
                    "spares_taken, workflow_id) VALUES ('j', 'sim', '[\"n1\"]', :c, 'x', :r, :at, '[]', '[]', "
                    "'succeeded', '', '', '', '', '[]', '', '[]', :w)"
                ),
                {"c": cause, "r": f"r{i}", "w": f"job-restart/j/r{i}", "at": at},
            )
    engine.dispose()

    _migrate(empty_db_url, "head")

    engine = create_engine(empty_db_url)
    with engine.begin() as conn:
        failures = [f for (f,) in conn.execute(text("SELECT failure FROM job_restarts ORDER BY id"))]
    engine.dispose()
    labels = [restart_label(RestartRecord(at, None, failure=f)) for f in failures]
    assert labels == [label for _, label in OLD_RESTART_CAUSES]


def test_0025_adds_and_removes_the_hang_findings_and_the_latest_run_and_the_model_writes_them(db_url: str) -> None:
    from sqlalchemy import inspect

    from fleetctl.db import hangs
    from fleetctl.jobs.hang import HangState, HangVerdict, Localised

    engine = get_engine(db_url)  # at head
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    at = datetime(2026, 12, 5, tzinfo=UTC)
    verdict = HangVerdict("7", HangState.HUNG, ("a",), Localised.WATCHDOG, "job 7: no checkpoint for 900 s")
    hangs.record_verdicts(engine, [(verdict, at)], {"7"}, {"7"}, at)
    (row,) = hangs.findings(engine, job_id="7")
    assert (row.state, row.suspects, row.localised, row.resolved_at) == ("hung", ["a"], "watchdog", None)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0024")
    assert not inspect(engine).has_table("hang_findings")
    assert "run_started_at" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
    _migrate(db_url, "head")
    assert inspect(engine).has_table("hang_findings") and hangs.findings(engine) == []
    assert "run_started_at" in {c["name"] for c in inspect(engine).get_columns("jobs")}
