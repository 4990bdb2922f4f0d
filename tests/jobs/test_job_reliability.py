"""Jobs' reliability figures from the database: checkpoints recorded by `fleetctl job
checkpoint`, jobs reconciled from the simulated scheduler through the path Slurm's take,
the report's ETTR, interruptions and restart latency, and migration 0008."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import inspect
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.db import jobs
from fleetctl.db.engine import MIGRATIONS_DIR, get_engine
from fleetctl.db.models import utcnow
from fleetctl.schedulers.base import JobHistory
from tests.support.cli import console
from tests.support.jobs import sim_fleet

NOW = datetime.now(UTC).replace(microsecond=0)


def checkpoint_cli(db_url: str, *args: str):
    return CliRunner().invoke(app, ["--db-url", db_url, "job", "checkpoint", *args])


@pytest.mark.parametrize(
    "args, message",
    [
        (["sim-1", "--at", "yesterday"], "--at: not a time"),
        (["sim-1", "--at", "2026-12-01T10:00:00"], "has no UTC offset"),
        (["sim-1", "--at", (NOW + timedelta(hours=1)).isoformat()], "is in the future"),
        (["sim-1", "--at", (NOW - timedelta(days=400)).isoformat()], "more than 366 days ago"),
        (["sim-1", "--at", "nan"], "is not a time in Unix seconds"),
        (["sim-1", "--at", "1e300"], "is not a time in Unix seconds"),
        (["sim-1", "--at", "9" * 60], "too long"),
        (["42;reboot"], "not a job id"),
        (["../etc"], "not a job id"),
        (["a" * 500], "not a job id"),
    ],
)
def test_a_bad_checkpoint_is_one_line_exit_2_and_records_nothing(sqlite_url, args, message) -> None:
    r = checkpoint_cli(sqlite_url, *args)
    assert r.exit_code == 2, r.output
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert jobs.job_checkpoints(get_engine(sqlite_url), args[0]) == []


def test_a_checkpoint_is_recorded_once_and_moves_the_jobs_last_checkpoint(db_url) -> None:
    engine = get_engine(db_url)
    jobs.reconcile_jobs(
        engine,
        "slurm",
        [JobHistory("42", "llm", "running", ("n1",), 1, NOW - timedelta(hours=2), NOW - timedelta(hours=2), None)],
        NOW,
    )
    hour_ago = NOW - timedelta(hours=1)
    assert checkpoint_cli(db_url, "42", "--at", str(hour_ago.timestamp())).stdout.endswith(" recorded\n")
    # The same instant in another zone is the same checkpoint.
    r = checkpoint_cli(db_url, "42", "--at", hour_ago.astimezone(timezone(timedelta(hours=5))).isoformat())
    assert r.exit_code == 0 and r.stdout.endswith("already recorded\n")
    r = checkpoint_cli(db_url, "42")  # now
    assert r.exit_code == 0 and r.stdout.endswith(" recorded\n") and "already" not in r.stdout
    recorded = jobs.job_checkpoints(engine, "42")
    assert len(recorded) == 2 and recorded[0] == hour_ago
    assert jobs.get_job(engine, "42").last_checkpoint_at.replace(tzinfo=UTC) == recorded[1]


def test_reconcile_keeps_the_first_start_and_ends_a_job_the_scheduler_forgot(db_url) -> None:
    engine = get_engine(db_url)
    t0 = NOW - timedelta(hours=3)
    first = JobHistory("7", "llm", "running", ("n1", "n2"), 2, t0, t0 + timedelta(minutes=1), None, 0, None)
    jobs.reconcile_jobs(engine, "slurm", [first], NOW - timedelta(hours=2), lambda nodes: 8)
    # Requeued: Slurm moved submit and start times to the new run and counts one restart.
    later = t0 + timedelta(hours=2)
    jobs.reconcile_jobs(
        engine,
        "slurm",
        [JobHistory("7", "llm", "running", ("n2", "n3"), 2, later, later, None, 1)],
        NOW - timedelta(hours=1),
    )
    row = jobs.get_job(engine, "7")
    assert (row.started_at.replace(tzinfo=UTC), row.submitted_at.replace(tzinfo=UTC)) == (
        t0 + timedelta(minutes=1),
        t0,
    )
    assert (row.restart_count, row.nodes, row.gpus_per_node) == (1, ["n2", "n3"], 8)
    # Slurm forgot it (MinJobAge after its end): it ended when fleetctl last saw it.
    jobs.reconcile_jobs(engine, "slurm", [], NOW)
    row = jobs.get_job(engine, "7")
    assert row.state == "gone" and row.ended_at.replace(tzinfo=UTC) == NOW - timedelta(hours=1)


@pytest.mark.temporal
def test_report_shows_a_simulated_jobs_ettr_checkpoints_and_restart(make_settings, sqlite_url) -> None:
    with console(make_settings(sqlite_url)) as cli:
        engine = get_engine(sqlite_url)
        sim_fleet(engine, ["n1", "n2", "n3"])
        job_id = json.loads(cli("job", "submit", "--nodes", "2", "--name", "llm", "-o", "json").stdout)["job_id"]
        assert cli("job", "checkpoint", job_id).exit_code == 0
        r = cli("job", "restart", job_id, "--bad-node", "n1", "--reason", "XID 79: GPU has fallen off the bus", "--yes")
        assert r.exit_code == 0, r.output
        r = cli("report", "-o", "json", "--job-gpus", "16")
        assert r.exit_code == 0, r.output
        report = json.loads(r.stdout)
    (job,) = report["jobs"]["per_job"]
    assert (job["job_id"], job["gpus"], job["restarts"], job["scheduler_restarts"], job["checkpoints"]) == (
        job_id,
        16,
        1,
        1,
        1,
    )
    # The simulated scheduler counted the requeue fleetctl asked for: no requeue of its own.
    assert job["interruptions"] == ["xid 79"] and report["jobs"]["interruptions"] == {"xid 79": 1}
    assert job["lost_seconds"] > 0 and job["downtime_seconds"] > 0 and 0 < job["ettr"] < 1
    assert report["restart_latency"]["count"] == 1 and job["restart_seconds"] == report["restart_latency"]["seconds"]
    assert report["jobs"]["at_job_size"]["gpus"] == 16


@pytest.mark.temporal
def test_a_restarted_job_that_never_reported_a_checkpoint_has_no_measured_ettr(make_settings, sqlite_url) -> None:
    """Nothing says where it went back to: `report -o json` gives null and why, a lower bound
    beside it, and the fleet's ETTR is not measured either (it read 98.81 % with 0 s lost)."""
    with console(make_settings(sqlite_url)) as cli:
        engine = get_engine(sqlite_url)
        sim_fleet(engine, ["n1", "n2", "n3"])
        job_id = json.loads(cli("job", "submit", "--nodes", "2", "--name", "llm", "-o", "json").stdout)["job_id"]
        r = cli("job", "restart", job_id, "--bad-node", "n1", "--reason", "XID 79: GPU has fallen off the bus", "--yes")
        assert r.exit_code == 0, r.output
        r = cli("report", "-o", "json")
        assert r.exit_code == 0, r.output
        report = json.loads(r.stdout)
    (job,) = report["jobs"]["per_job"]
    assert (job["restarts"], job["checkpoints"]) == (1, 0)
    assert job["ettr"] is None and job["lost_seconds"] is None
    assert "no checkpoint reported before the fault" in job["ettr_unknown"]
    assert 0 <= job["ettr_at_least"] < 1 and job["lost_seconds_at_most"] > 0
    assert report["jobs"]["ettr"] is None and report["jobs"]["ettr_at_least"] == job["ettr_at_least"]
    assert "lower bound" in report["jobs"]["ettr_unknown"]


def test_migration_0008_adds_and_removes_the_job_columns(db_url) -> None:
    engine = get_engine(db_url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))

    def columns() -> set[str]:
        return {c["name"] for c in inspect(engine).get_columns("jobs")}

    assert {"restart_count", "seen_at"} <= columns() and inspect(engine).has_table("job_checkpoints")
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0007")
    assert not {"restart_count", "seen_at"} & columns() and not inspect(engine).has_table("job_checkpoints")
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    assert {"restart_count", "seen_at"} <= columns()
    assert jobs.record_checkpoint(engine, "1", utcnow()) is True


def test_a_simulated_job_placed_again_after_it_was_listed_is_not_put_back(sqlite_url) -> None:
    from fleetctl.sim.scheduler import SimScheduler

    engine = get_engine(sqlite_url)
    sim_fleet(engine, ["n1", "n2"])
    sim = SimScheduler(engine)
    job = sim.submit("llm", 1)
    listed = sim.job_history()  # running on n1
    sim.restart_job(job.job_id, ["n1"])  # a restart moves it before the sync writes the listing
    jobs.reconcile_jobs(engine, "sim", listed, utcnow())
    row = jobs.get_job(engine, job.job_id)
    assert (row.state, row.nodes, row.restart_count, row.seen_at) == ("running", ["n2"], 1, None)
    jobs.reconcile_jobs(engine, "sim", sim.job_history(), utcnow())  # the next sync writes it
    assert jobs.get_job(engine, job.job_id).seen_at is not None
