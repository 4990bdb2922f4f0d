"""`build_report` and `fleetctl report` on a database holding a realistic history (SQLite and
PostgreSQL); the expected numbers are the ones tests/reliability/history.py works out by hand."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.db.engine import get_engine
from fleetctl.reliability.report import render_html
from fleetctl.reliability.report_store import build_report
from tests.reliability import history

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def seeded_engine(db_url):
    engine = get_engine(db_url)
    history.seed(engine, NOW)
    return engine


def test_report_numbers_match_the_hand_worked_history(seeded_engine) -> None:
    report = build_report(seeded_engine, NOW - history.WINDOW, NOW, fleet="prod")
    json.dumps(report, allow_nan=False)  # JSON-safe as it is

    s = report["summary"]
    assert (s["nodes"], s["production_hours"], s["failures"]) == (12, history.PRODUCTION_HOURS, history.FAILURES)
    assert s["mttf_hours"] == pytest.approx(1731 / 5)
    assert (s["repairs"], s["mttr_hours"]) == (3, pytest.approx(16 / 3))
    assert s["availability"] == pytest.approx(1731 / (1731 + 6 + 128 + 96))
    # What availability lost, split: every hour out of production is planned or unplanned.
    assert s["planned_out_hours"] + s["unplanned_out_hours"] == pytest.approx(6 + 128 + 96)
    assert s["unplanned_out_hours"] > 0
    assert s["availability_unplanned"] == pytest.approx(1731 / (1731 + s["unplanned_out_hours"]))
    assert {k: pytest.approx(v * 24) for k, v in s["node_days"].items()} == history.EXPECTED_HOURS
    assert s["causes"] == {"xid 48": 3, "xid 79": 1, "check nccl-allreduce": 1}

    racks = report["racks"]
    assert {r: (g["failures"], g["mttf_hours"]) for r, g in racks.items()} == {
        "r1": (1, pytest.approx(664.0)),
        "r2": (4, pytest.approx(443 / 4)),
        "r3": (0, None),
    }
    profiles = report["profiles"]
    assert {p: (g["failures"], g["production_hours"]) for p, g in profiles.items()} == {
        "h100-sxm": (5, pytest.approx(774.0)),
        "a100-sxm-80gb": (0, pytest.approx(957.0)),
    }

    assert [(f["node"], f["cause"]) for f in report["failures"]] == [
        ("n07", "xid 48"),
        ("n03", "xid 79"),
        ("n07", "xid 48"),
        ("n05", "check nccl-allreduce"),
        ("n07", "xid 48"),
    ]
    assert report["lemons"] == [{"node": "n07", "rack": "r2", "profile": "h100-sxm", "times_remediated": 3}]

    jobs = {j["job_id"]: j for j in report["jobs"]["per_job"]}
    assert set(jobs) == {"sim-1", "sim-2"}  # not the one that ended before the window, nor the queued one
    assert (jobs["sim-1"]["wall_hours"], jobs["sim-1"]["downtime_seconds"], jobs["sim-1"]["lost_seconds"]) == (
        192,
        90,
        600,
    )
    assert jobs["sim-1"]["ettr"] == pytest.approx((691200 - 690) / 691200) == jobs["sim-1"]["ettr_at_least"]
    # sim-2 never reported a checkpoint: what its restarts lost is not known (null, and why),
    # at most its run before each: 60 h -> 70 h, then 70 h + 120 s -> 90 h.
    assert (jobs["sim-2"]["downtime_seconds"], jobs["sim-2"]["lost_seconds"]) == (120 + 10 * 3600, None)
    assert jobs["sim-2"]["lost_seconds_at_most"] == 30 * 3600 - 120
    assert jobs["sim-2"]["ettr"] is None and "no checkpoint" in jobs["sim-2"]["ettr_unknown"]
    assert jobs["sim-2"]["ettr_at_least"] == pytest.approx((144000 - 36120 - 107880) / 144000)
    # So the fleet's ETTR is not measured either: a lower bound, said to be one.
    assert report["jobs"]["ettr"] is None and report["jobs"]["ettr_unknown"].startswith("1 of 2 jobs")
    assert report["jobs"]["ettr_at_least"] == pytest.approx(
        (691200 - 690 + 144000 - 36120 - 107880) / (691200 + 144000)
    )
    assert report["restart_latency"]["seconds"] == [90, 120]
    assert report["restart_latency"]["p50"] == 105

    assert [(n["node"], n["profile"], n["check"], n["median"]) for n in report["straggler_nodes"]] == [
        ("n10", "a100-sxm-80gb", "nccl-allreduce", 230),
        ("n11", "h100-sxm", "nccl-allreduce", 480),
    ]
    a100 = next(g for g in report["stragglers"] if (g["check"], g["profile"]) == ("nccl-allreduce", "a100-sxm-80gb"))
    assert "n12" not in {n["node"] for n in a100["nodes"]}  # retired

    timeline = report["state_over_time"]
    assert len(timeline["times"]) == 60
    # Every node is in some state at every point of the window (all were created before it).
    assert all(sum(c[k] for c in timeline["counts"].values()) == 12 for k in range(60))


def test_report_cli_json_table_and_html(db_url, tmp_path) -> None:
    from fleetctl.db.models import utcnow

    engine = get_engine(db_url)
    history.seed(engine, utcnow())
    runner = CliRunner()
    out = tmp_path / "fleet.html"
    r = runner.invoke(app, ["--db-url", db_url, "report", "--since", "7d", "-o", "json", "--html", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert (data["summary"]["failures"], len(data["lemons"])) == (5, 1)
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "n07" in page

    assert data["jobs"]["ettr"] is None  # sim-2 restarted with no checkpoint
    assert f"≥{data['jobs']['ettr_at_least']:.2%}" in page

    r = runner.invoke(app, ["--db-url", db_url, "report", "--since", "2d", "-o", "wide"])
    assert r.exit_code == 0, r.output
    assert "per rack" in r.stdout and "stragglers" in r.stdout and "n11" in r.stdout

    r = runner.invoke(app, ["--db-url", db_url, "report", "--since", "7d"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert f"job ETTR ≥{data['jobs']['ettr_at_least']:.2%}" in r.stdout and "a lower bound" in r.stdout
    capacity = sum(data["summary"][k] for k in ("production_hours", "planned_out_hours", "unplanned_out_hours"))
    assert (
        f"(lost {data['summary']['unplanned_out_hours'] / capacity:.2%} to faults, "
        f"{data['summary']['planned_out_hours'] / capacity:.2%} to planned work)" in r.stdout
    )

    r = runner.invoke(app, ["--db-url", db_url, "report", "--since", "seven days"])
    assert r.exit_code == 2 and "--since" in r.output


def test_html_escapes_what_came_from_the_database(sqlite_url) -> None:
    engine = get_engine(sqlite_url)
    history.seed(engine, NOW)
    report = build_report(engine, NOW - history.WINDOW, NOW)
    report["failures"][0]["detail"] = "<script>alert(1)</script>"
    report["fleet"] = "<b>fleet</b>"
    page = render_html(report)
    assert "<script>" not in page and "&lt;script&gt;" in page and "&lt;b&gt;fleet&lt;/b&gt;" in page
    assert page.count("<svg") == 5  # states, causes, restarts and one strip plot per straggler metric


def test_html_shows_a_profile_too_small_to_compare_on_a_metric(sqlite_url) -> None:
    """Fewer nodes of a profile with a straggler metric than comparing needs (a remediation's
    all-reduce on one node of a small fleet): no median, and the page still renders."""
    engine = get_engine(sqlite_url)
    history.seed(engine, NOW)
    report = build_report(engine, NOW - history.WINDOW, NOW)
    group = report["stragglers"][0]
    report["stragglers"][0] = {
        **group,
        "median": None,
        "nodes": [{**n, "straggler": False} for n in group["nodes"][:2]],
    }
    page = render_html(report)
    assert "too few nodes to compare" in page


def test_lemon_table_counts_live_runs_as_the_rma_reason_does(seeded_engine) -> None:
    """n05 entered maintenance once (at +49 h) and stayed there while three live runbooks
    (and a dry run, which changes nothing) were tried on it: the lemon rule's figure,
    remediated 3 times in 7 days, is the report's too (it used to count the one entry)."""
    from datetime import timedelta

    from fleetctl.db import remediation as db

    start = NOW - history.WINDOW
    for key, hours, mode in (("a", 50, "live"), ("b", 60, "live"), ("dry", 65, "dry_run"), ("c", 70, "live")):
        db.start_run(
            seeded_engine,
            run_key=key,
            node_name="n05",
            runbook="escalation-ladder",
            event={},
            mode=mode,
            actor="t",
            started_at=start + timedelta(hours=hours),
        )
    report = build_report(seeded_engine, start, NOW, fleet="prod")
    assert {lemon["node"]: lemon["times_remediated"] for lemon in report["lemons"]} == {"n07": 3, "n05": 3}
