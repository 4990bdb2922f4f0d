"""The hung-job judge's findings in the database (fleetctl.db.hangs), on real SQLite and
PostgreSQL: the same hang seen again is one row, last seen later; a new progress makes a new
one; a finding the judge no longer makes is resolved, but only for the jobs it judged; the
exporter's gauge and the report read them. And a job's latest run as the scheduler reports it
(a requeue of its own) is kept beside its first start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rich.console import Console

from fleetctl.cli.report import render_report
from fleetctl.db import hangs
from fleetctl.db import jobs as jobs_db
from fleetctl.db.engine import get_engine
from fleetctl.db.models import Job
from fleetctl.jobs.hang import HangState, HangVerdict, Localised
from fleetctl.reliability.exporter_server import FleetCollector
from fleetctl.reliability.report import render_html
from fleetctl.reliability.report_store import build_report
from fleetctl.schedulers.base import JobHistory

T0 = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)
TICK = timedelta(seconds=60)


def _hung(job_id: str, suspects: tuple[str, ...] = ("n2",)) -> HangVerdict:
    how = Localised.WATCHDOG if suspects else Localised.NONE
    return HangVerdict(job_id, HangState.HUNG, suspects, how, f"job {job_id}: no checkpoint for 900 s")


def _slow(job_id: str) -> HangVerdict:
    return HangVerdict(job_id, HangState.SLOW, (), Localised.NONE, f"job {job_id}: but its GPUs are busy")


def _gauge(engine) -> dict[str, float]:
    family = next(f for f in FleetCollector(engine).collect() if f.name == "fleetctl_jobs_hung")
    return {s.labels["fleet"]: s.value for s in family.samples}


def test_a_hang_seen_again_is_one_finding_and_one_no_longer_seen_is_resolved(db_url: str) -> None:
    engine = get_engine(db_url)
    for job_id in ("a", "b", "other-fleet"):
        jobs_db.reconcile_jobs(
            engine,
            "slurm",
            [JobHistory(job_id, "train", "running", ("n1", "n2"), 2, T0, T0, None, 0, 8)],
            T0,
        )
    progress = T0 - timedelta(minutes=15)
    running = {"a", "b", "other-fleet"}
    hangs.record_verdicts(engine, [(_hung("a"), progress), (_hung("other-fleet"), progress)], running, running, T0)
    assert _gauge(engine) == {"default": 2}
    # The next tick, of one fleet only: "a" hung still, "b" slow; "other-fleet" not judged.
    judged = {"a", "b"}
    hangs.record_verdicts(engine, [(_hung("a"), progress), (_slow("b"), progress)], judged, running, T0 + TICK)
    (a,) = hangs.findings(engine, job_id="a")
    assert (a.state, a.suspects, a.localised, a.resolved_at) == ("hung", ["n2"], "watchdog", None)
    assert (a.found_at.replace(tzinfo=UTC), a.last_seen_at.replace(tzinfo=UTC)) == (T0, T0 + TICK)
    (b,) = hangs.findings(engine, job_id="b")
    assert b.state == "slow" and b.resolved_at is None
    assert _gauge(engine) == {"default": 2}  # a slow job is not hung

    # "a" checkpointed (not late: no verdict), "b" is hung on another node now, "other-fleet"
    # ended (no longer running anywhere): resolved, though this fleet did not judge it.
    running = {"a", "b"}
    hangs.record_verdicts(engine, [(_hung("b", ("n1",)), progress)], judged, running, T0 + 2 * TICK)
    assert [f.resolved_at is not None for f in hangs.findings(engine, job_id="a")] == [True]
    assert [(f.state, f.suspects, f.resolved_at is None) for f in hangs.findings(engine, job_id="b")] == [
        ("hung", ["n1"], True),
        ("slow", [], False),
    ]
    assert [f.resolved_at is not None for f in hangs.findings(engine, job_id="other-fleet")] == [True]
    assert _gauge(engine) == {"default": 1}

    # The same job hung again after a later progress: a new hang, a new row.
    later = T0 + TICK
    hangs.record_verdicts(engine, [(_hung("b", ("n1",)), later)], judged, running, T0 + 3 * TICK)
    assert [f.progress_at.replace(tzinfo=UTC) for f in hangs.findings(engine, job_id="b")][:2] == [later, progress]

    # The report: the findings last seen in its window, and the open ones whenever found.
    report = build_report(engine, T0 + 2 * TICK + timedelta(seconds=1), T0 + 4 * TICK)
    assert [(f["job_id"], f["state"], f["suspects"], f["resolved_at"]) for f in report["hung_jobs"]] == [
        ("b", "hung", ["n1"], None)
    ]
    html = render_html(report)
    assert "hung job</th>" in html and "n1 (watchdog)" in html
    console = Console(record=True, width=240)
    console.print(render_report(report))
    text = console.export_text()
    assert "hung jobs" in text and "n1 (watchdog)" in text


def test_a_requeue_by_the_scheduler_is_its_latest_run_and_the_first_start_stays(sqlite_url: str) -> None:
    """Slurm moves a requeued job's StartTime to its latest run (and lists it pending, with
    no start, in between): the row keeps the first start and the latest run's apart."""
    engine = get_engine(sqlite_url)
    first, requeued = T0, T0 + timedelta(hours=2)

    def seen(state: str, started: datetime | None, restarts: int, at: datetime) -> Job:
        nodes = ("n1",) if state == "running" else ()
        jobs_db.reconcile_jobs(
            engine, "slurm", [JobHistory("7", "train", state, nodes, 1, first, started, None, restarts, 8)], at
        )
        (row,) = [j for j in jobs_db.list_jobs(engine, scheduler="slurm") if j.job_id == "7"]
        return row

    row = seen("running", first, 0, first)
    assert (row.started_at.replace(tzinfo=UTC), row.run_started_at.replace(tzinfo=UTC)) == (first, first)
    row = seen("pending", None, 1, requeued - timedelta(minutes=1))
    assert row.run_started_at.replace(tzinfo=UTC) == first  # pending: no run of its own yet
    row = seen("running", requeued, 1, requeued)
    assert (row.started_at.replace(tzinfo=UTC), row.run_started_at.replace(tzinfo=UTC), row.restart_count) == (
        first,
        requeued,
        1,
    )
