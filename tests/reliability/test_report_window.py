"""`fleetctl report` on a fleet younger than the default window (tests/reliability/young_fleet.py):
the window is taken from the data and says so, an explicit --since is kept, durations come in
the unit their size calls for, times to the second, definitions in the operators' words."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.db.engine import get_engine
from fleetctl.db.models import utcnow
from fleetctl.reliability.report import DEFAULT_WINDOW, default_window, definitions, duration
from tests.reliability import young_fleet

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MICROSECONDS = re.compile(r"\d\d:\d\d:\d\d\.\d")
HOURS_BELOW_ONE = re.compile(r"\b0\.\d+ ?(h|hours?)\b")


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "-"),
        (0, "0 s"),
        (0.4, "0.4 s"),
        (12.25, "12.2 s"),
        (59, "59 s"),
        (60, "1 min"),
        (600, "10 min"),
        (3599, "60 min"),
        (3600, "1 h"),
        (5.8333 * 3600, "5.83 h"),
        (47 * 3600, "47 h"),
        (2 * 86400, "2 d"),
        (7 * 86400, "7 d"),
        (72.125 * 86400, "72.1 d"),
        (1234 * 86400, "1,234 d"),
    ],
)
def test_duration_picks_the_unit_the_size_calls_for(seconds, shown) -> None:
    assert duration(seconds) == shown


@pytest.mark.parametrize(
    ("first_ago", "since_ago", "why"),
    [
        (None, DEFAULT_WINDOW, "no node event is recorded yet"),
        (timedelta(days=30), DEFAULT_WINDOW, "the default 7 d; older history is left out"),
        (timedelta(days=7), DEFAULT_WINDOW, "the default 7 d"),
        (timedelta(hours=2, minutes=50), timedelta(hours=2, minutes=50), "since the first recorded node event"),
        # Seconds of history still give a window a chart can slice.
        (timedelta(seconds=5), timedelta(minutes=1), "since the first recorded node event"),
    ],
)
def test_default_window_follows_the_data_up_to_seven_days(first_ago, since_ago, why) -> None:
    since, basis = default_window(NOW, None if first_ago is None else NOW - first_ago)
    assert (NOW - since, why in basis) == (since_ago, True), basis


def test_report_window_units_and_times_on_a_young_fleet(db_url, tmp_path) -> None:
    engine = get_engine(db_url)
    seeded_at = utcnow()
    young_fleet.seed(engine, seeded_at)
    first_event = seeded_at - young_fleet.FIRST_EVENT
    runner = CliRunner()
    page = tmp_path / "young.html"

    r = runner.invoke(app, ["--db-url", db_url, "report", "--no-sync", "-o", "json", "--html", str(page)])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert datetime.fromisoformat(data["window"]["since"]) == first_event
    assert data["window"]["basis"].startswith("since the first recorded node event")
    s = data["summary"]
    # JSON keeps raw numbers in the units its keys name.
    production = 3 * (datetime.fromisoformat(data["window"]["until"]) - seeded_at + timedelta(hours=2)) - timedelta(
        minutes=10
    )
    assert (s["failures"], s["mttr_hours"], s["mttf_hours"]) == (
        1,
        pytest.approx(10 / 60),
        pytest.approx(production.total_seconds() / 3600),
    )
    assert data["restart_latency"]["seconds"] == [pytest.approx(0.4)]
    # Every one of the chart's points falls inside the fleet's life: no "no data in this window".
    timeline = data["state_over_time"]
    assert all(sum(c[k] for c in timeline["counts"].values()) == 3 for k in range(len(timeline["times"])))

    html = page.read_text()
    assert "no data in this window" not in html
    assert "since the first recorded node event" in html
    # MTTR, MTTF (5.83 h and what the test's own seconds add), restart.
    assert "10 min" in html and re.search(r"5\.8\d h", html) and "0.4 s" in html
    assert not HOURS_BELOW_ONE.search(html) and not MICROSECONDS.search(html)
    assert f"{first_event:%Y-%m-%d %H:%M:%S} to" in html

    # as redirected to a file: no terminal width, laid out at 120 columns (the prose wraps)
    r = runner.invoke(app, ["--db-url", db_url, "report", "--no-sync"], env={"COLUMNS": None, "LINES": None})
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.stdout.splitlines()) <= 120, r.stdout
    table = " ".join(r.stdout.split())
    assert f"{first_event:%Y-%m-%d %H:%M:%S} to" in table and "since the first recorded node event" in table
    assert "MTTR 10 min" in table and re.search(r"MTTF 5\.8\d h", table) and "restart median 0.4 s" in table
    assert not HOURS_BELOW_ONE.search(table) and not MICROSECONDS.search(table)

    r = runner.invoke(app, ["--db-url", db_url, "report", "--no-sync", "--since", "7d", "-o", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    since, until = (datetime.fromisoformat(data["window"][k]) for k in ("since", "until"))
    assert (until - since, data["window"]["basis"]) == (timedelta(days=7), "--since 7d")  # kept as given


def test_definitions_are_in_the_operators_words(sqlite_url) -> None:
    from markupsafe import escape

    from fleetctl.reliability.report import render_html
    from fleetctl.reliability.report_store import build_report

    engine = get_engine(sqlite_url)
    young_fleet.seed(engine, NOW)
    report = build_report(engine, NOW - timedelta(hours=3), NOW, lemon_threshold=4, lemon_window=timedelta(days=10))
    terms = dict(definitions(report))
    assert {
        "Failure",
        "MTTF (mean time to failure)",
        "MTTR (mean time to repair)",
        "Availability",
        "Lemon node",
    } <= set(terms)
    assert "remediated 4 times or more within 10 d" in terms["Lemon node"]  # the configured rule, not a constant
    html = render_html(report)
    section = html[html.index('id="definitions"') :]
    for term, meaning in definitions(report):
        assert f"<dt>{escape(term)}</dt><dd>{escape(meaning)}</dd>" in section
        # No identifiers: no code spans, snake_case names, dotted module paths or CamelCase classes.
        assert not re.search(r"`|\b[a-z]+_[a-z_]+\b|\b[a-z]+\.[a-z_]+\b|\b[A-Z][a-z]+[A-Z]\w*\b", meaning), meaning


def test_demo_summary_prints_the_report_durations_in_units_that_fit(sqlite_url, tmp_path) -> None:
    from types import SimpleNamespace

    from rich.console import Console

    from fleetctl.cli.demo import summary
    from fleetctl.reliability.report_store import build_report

    engine = get_engine(sqlite_url)
    young_fleet.seed(engine, NOW)
    report = build_report(engine, NOW - young_fleet.FIRST_EVENT, NOW)
    # The demo run itself is not under test: only what its summary prints of the report.
    demo = SimpleNamespace(engine=engine, plan=SimpleNamespace(faults=[]), finished=lambda: True)
    console = Console(record=True, width=200)
    console.print(summary(demo, report, tmp_path / "report.html"))
    text = console.export_text()
    assert re.search(r"MTTF +5\.83 h production node time per failure \(1 failure\)", text), text
    assert re.search(r"MTTR +10 min over 1 repair\b", text) and re.search(
        r"median 0\.4 s, max 0\.4 s over 1 restart\b", text
    )
    assert not HOURS_BELOW_ONE.search(text)


def test_the_html_report_says_one_in_the_singular(sqlite_url) -> None:
    from fleetctl.reliability.report import render_html
    from fleetctl.reliability.report_store import build_report

    engine = get_engine(sqlite_url)
    young_fleet.seed(engine, NOW)
    report = build_report(engine, NOW - young_fleet.FIRST_EVENT, NOW)
    report["lemons"] = report["lemons"][:1] or [
        {"node": "g02", "rack": "y1", "profile": "h100-sxm", "times_remediated": 3}
    ]
    report["summary"]["nodes"] = 1
    assert report["summary"]["repairs"] == 1 and len(report["jobs"]["per_job"]) == 1
    page = render_html(report)
    assert "), 1 node. Generated" in page and "(1 return)" in page and "job ETTR (1 job" in page, page
    assert '<div class="label">lemon node</div>' in page
    assert not re.search(r"(?<!of )\b1 (nodes|returns|jobs|lemon nodes)\b", page)
