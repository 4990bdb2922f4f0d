"""`fleetctl db prune` on real SQLite and real PostgreSQL: what the retention settings let go
goes (to the archive first, when asked), and what a figure or a decision reads stays."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pytest
from sqlmodel import Session, select
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import CheckRun, HealthEvent, NodeEvent, utcnow
from fleetctl.inventory.parse import parse_inventory

INVENTORY = """
nodes:
  - {name: n1, address: sim://n1, profile: h100-sxm}
  - {name: n2, address: sim://n2, profile: h100-sxm}
  - {name: n3, address: sim://n3, profile: h100-sxm}
"""
DAY = timedelta(days=1)
# The defaults (docs/deployment.md): raw output 14 days, verdicts 180, health events 400.


def _fleet(engine):
    """n1 in production for 600 days, n2 for 10, n3 never; check runs and health events of
    every age around the default cut-offs. Returns what each row is called in the asserts."""
    now = utcnow()
    queries.upsert_nodes(engine, parse_inventory(INVENTORY))
    runs = {  # name: (check, status, age in days)
        "gpu-old-pass": ("gpu", "pass", 200),
        "gpu-last-pass": ("gpu", "pass", 190),
        "gpu-fail-100d": ("gpu", "fail", 100),
        "gpu-fail-30d": ("gpu", "fail", 30),
        "gpu-fail-1d": ("gpu", "fail", 1),
        "dmesg-only-run": ("dmesg", "error", 300),
    }
    events = {  # name: (node, age in days)
        "n1-in-service-500d": ("n1", 500),
        "n2-before-service-500d": ("n2", 500),
        "n2-in-service-5d": ("n2", 5),
        "n2-before-service-300d": ("n2", 300),
        "n3-never-in-service-900d": ("n3", 900),
    }
    with Session(engine) as session:
        for node, days in (("n1", 600), ("n2", 10)):
            session.add(
                NodeEvent(
                    node_name=node,
                    from_state="admission",
                    to_state="production",
                    trigger="admit",
                    actor="lifecycle",
                    at=now - days * DAY,
                    idempotency_key=f"{node}/production",
                )
            )
        for name, (check, status, days) in sorted(runs.items(), key=lambda item: -item[1][2]):
            at = now - days * DAY
            session.add(
                CheckRun(
                    node_name="n1",
                    check_name=check,
                    kind=check,
                    status=status,
                    raw_output=f"output of {name}",
                    reason=name,
                    started_at=at,
                    finished_at=at,
                    idempotency_key=name,
                )
            )
        for name, (node, days) in events.items():
            session.add(
                HealthEvent(
                    node_name=node,
                    source="xid",
                    code=79,
                    severity="critical",
                    message=name,
                    at=now - days * DAY,
                    idempotency_key=name,
                )
            )
        session.commit()


def _state(engine) -> tuple[dict[str, str], set[str], int]:
    with Session(engine) as session:
        runs = {r.reason: r.raw_output for r in session.exec(select(CheckRun))}
        events = {e.message for e in session.exec(select(HealthEvent))}
        transitions = len(list(session.exec(select(NodeEvent))))
    return runs, events, transitions


def _prune(db_url: str, *args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, ["--config", os.devnull, "--db-url", db_url, "db", "prune", *args], env=env or {})


def test_prune_removes_what_the_policy_lets_go_and_keeps_what_a_figure_reads(db_url: str, tmp_path) -> None:
    engine = get_engine(db_url)
    _fleet(engine)
    before = _state(engine)

    dry = _prune(db_url, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "would remove 1 check runs, the raw output of 2 more, 1 health events" in dry.output
    assert _state(engine) == before

    archive = tmp_path / "pruned.jsonl"
    done = _prune(db_url, "--archive", str(archive))
    assert done.exit_code == 0, done.output
    assert "removed 1 check runs, the raw output of 2 more, 1 health events" in done.output
    runs, events, transitions = _state(engine)
    assert runs == {
        # past the verdicts' 180 days: kept as the latest passing run of its check (the peers'
        # baseline), and as the only run of its check (node list's HEALTH), with their output
        "gpu-last-pass": "output of gpu-last-pass",
        "dmesg-only-run": "output of dmesg-only-run",
        # past the output's 14 days: the verdict stays, the output goes
        "gpu-fail-100d": "",
        "gpu-fail-30d": "",
        "gpu-fail-1d": "output of gpu-fail-1d",
    }
    # n1's event is older than 400 days but since n1 entered production (a critical claim's
    # evidence); n3 never entered production; n2's 300-day one is younger than 400 days
    assert events == {"n1-in-service-500d", "n2-in-service-5d", "n2-before-service-300d", "n3-never-in-service-900d"}
    assert transitions == before[2]
    archived = [json.loads(line) for line in archive.read_text().splitlines()]
    assert sorted((a["pruned"], a.get("reason") or a.get("message") or a["raw_output"]) for a in archived) == [
        ("check_runs", "gpu-old-pass"),
        ("health_events", "n2-before-service-500d"),
        ("raw_output", "output of gpu-fail-100d"),
        ("raw_output", "output of gpu-fail-30d"),
    ]
    assert oct(archive.stat().st_mode & 0o777) == "0o600"

    again = _prune(db_url)
    assert again.exit_code == 0 and "removed 0 check runs, the raw output of 0 more, 0 health events" in again.output


def test_a_prune_in_batches_of_one_row_removes_and_keeps_the_same(sqlite_url: str, tmp_path, monkeypatch) -> None:
    # Kept runs between removed ones in id order: each batch moves past them, none stops the prune.
    from fleetctl.db import retention

    monkeypatch.setattr(retention, "BATCH", 1)
    test_prune_removes_what_the_policy_lets_go_and_keeps_what_a_figure_reads(sqlite_url, tmp_path)


def test_the_retention_settings_move_the_cut_offs(sqlite_url: str) -> None:
    engine = get_engine(sqlite_url)
    _fleet(engine)
    done = _prune(
        sqlite_url,
        env={
            "FLEETCTL_RETENTION_RAW_OUTPUT_DAYS": "0.5",
            "FLEETCTL_RETENTION_CHECK_DAYS": "50",
            "FLEETCTL_RETENTION_HEALTH_EVENT_DAYS": "200",
        },
    )
    assert done.exit_code == 0, done.output
    runs, events, _ = _state(engine)
    assert runs == {
        "gpu-last-pass": "output of gpu-last-pass",
        "dmesg-only-run": "output of dmesg-only-run",
        "gpu-fail-30d": "",
        "gpu-fail-1d": "output of gpu-fail-1d",
    }
    assert events == {"n1-in-service-500d", "n2-in-service-5d", "n3-never-in-service-900d"}


@pytest.mark.parametrize(
    "args, env, message",
    [
        (("--archive", "/nonexistent-dir/pruned.jsonl"), {}, "--archive /nonexistent-dir/pruned.jsonl: No such file"),
        (("--dry-run", "--archive", "x.jsonl"), {}, "a --dry-run removes nothing"),
        ((), {"FLEETCTL_RETENTION_CHECK_DAYS": "7"}, "shorter than retention_raw_output_days (14)"),
        ((), {"FLEETCTL_RETENTION_RAW_OUTPUT_DAYS": "0"}, "out of range"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(sqlite_url: str, args, env, message) -> None:
    engine = get_engine(sqlite_url)
    _fleet(engine)
    before = _state(engine)
    done = _prune(sqlite_url, *args, env=env)
    assert done.exit_code == 2, done.output
    assert message in done.output and len(done.output.strip().splitlines()) == 1, done.output
    assert _state(engine) == before


def test_each_worker_prunes_once_an_interval(sqlite_url: str) -> None:
    import asyncio

    from fleetctl.config import load_settings
    from fleetctl.workflows.worker import prune_periodically
    from tests.support.fleet import wait_for

    settings = load_settings(
        flags={"db_url": sqlite_url}, env={"FLEETCTL_RETENTION_INTERVAL_S": "1"}, config_file=os.devnull
    )
    engine = get_engine(sqlite_url)
    _fleet(engine)

    def pruned() -> bool:
        runs, events, _ = _state(engine)
        return "gpu-old-pass" not in runs and "n2-before-service-500d" not in events

    async def scenario() -> None:
        pruner = asyncio.create_task(prune_periodically(settings))
        try:
            # The worker prunes as it starts, and again each interval: a row past the policy
            # written after the first prune is gone within the next one.
            await wait_for(pruned, 2 * settings.retention_interval_s, "the worker's first prune")
            with Session(engine) as session:
                at = utcnow() - 500 * DAY
                session.add(
                    HealthEvent(
                        node_name="n2",
                        source="xid",
                        code=79,
                        message="n2-before-service-500d",
                        at=at,
                        idempotency_key="written-later",
                    )
                )
                session.commit()
            await wait_for(pruned, 2 * settings.retention_interval_s, "the worker's next prune")
        finally:
            pruner.cancel()

    asyncio.run(scenario())
