"""The report's topology: where restarts were placed and landed, and the racks by island."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import Session

from fleetctl.db.engine import get_engine
from fleetctl.db.models import JobRestart, Node
from fleetctl.jobs.placement import placement_counts
from fleetctl.reliability.report import render_html
from fleetctl.reliability.report_store import build_report

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "rows,counts",
    [
        (
            [("island", "island"), ("island", "outside"), ("fleet", "outside"), ("", "island"), ("", "")],
            {"asked": {"island": 2, "fleet": 1, "none": 2}, "landed": {"island": 2, "outside": 2}},
        ),
        ([], {"asked": {"island": 0, "fleet": 0, "none": 0}, "landed": {"island": 0, "outside": 0}}),
    ],
)
def test_placement_counts(rows, counts) -> None:
    assert placement_counts(rows) == counts


def test_report_counts_placements_in_the_window_and_draws_the_racks(sqlite_url) -> None:
    engine = get_engine(sqlite_url)
    with Session(engine) as session:
        for name, state, rack, island, position in [
            ("g1", "production", "r1", "ib-a", 2),
            ("g2", "draining", "r1", "ib-a", 9),
            ("g3", "rma", "r2", "", None),
        ]:
            session.add(
                Node(
                    name=name,
                    address=f"sim://{name}",
                    profile="h100-sxm",
                    rack=rack,
                    island=island,
                    position=position,
                    state=state,
                    created_at=NOW - timedelta(days=3),
                )
            )
        for i, (placement, landed, ago, spares) in enumerate(
            [("island", "island", 1, ["g1"]), ("fleet", "outside", 2, []), ("island", "island", 30, ["g1"])]
        ):  # the last: before the window
            session.add(
                JobRestart(
                    workflow_id=f"job-restart/j{i}/r",
                    job_id=f"j{i}",
                    scheduler="slurm",
                    actor="t",
                    restart_id="r",
                    fault_seen_at=NOW - timedelta(days=ago),
                    island="ib-a",
                    placement=placement,
                    landed=landed,
                    status="succeeded",
                    spares_taken=spares,
                )
            )
        session.commit()

    report = build_report(engine, NOW - timedelta(days=7), NOW)
    assert report["restart_placement"] == {
        "asked": {"island": 1, "fleet": 1, "none": 0},
        "landed": {"island": 1, "outside": 1},
        "on_spares": 1,
    }
    assert [
        (i["island"], [(r["rack"], [n["name"] for n in r["nodes"]]) for r in i["racks"]]) for i in report["rack_view"]
    ] == [("ib-a", [("r1", ["g2", "g1"])]), ("", [("r2", ["g3"])])]

    page = render_html(report)
    assert "1 asked for healthy nodes in the job" in page
    assert "1 fell back to the whole fleet" in page and "1 ran again inside their island, 1 outside it" in page
    assert "1 took a hot spare" in page
    assert 'title="g2 U9: draining"' in page and "<h3>island ib-a</h3>" in page and "<h3>island (none)</h3>" in page
