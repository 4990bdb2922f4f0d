"""`fleetctl schedule create validate`: a Temporal Schedule whose runs validate the idle part
of the fleet (ClusterValidation with --idle): a node a job runs on is left out."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlmodel import Session, select

from fleetctl.db.engine import get_engine
from fleetctl.db.models import CheckRun
from fleetctl.inventory.hostlist import expand
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.workflows.activities.validation import RUN_TIMEOUT
from fleetctl.workflows.definitions.shared import SCHEDULER
from tests.support.cli import console
from tests.support.jobs import sim_fleet, until

pytestmark = pytest.mark.temporal

EVERY_S = 1
# A scheduled run starts within its interval; it reads the idle nodes (one scheduler call),
# holds them, and its first all-reduce ends within the run's timeout.
BOUND_S = 2 * EVERY_S + SCHEDULER["start_to_close_timeout"].total_seconds() + RUN_TIMEOUT.total_seconds()


def test_a_scheduled_validation_runs_across_the_idle_nodes(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    prefix = f"v{uuid.uuid4().hex[:5]}"
    names = sim_fleet(engine, [f"{prefix}-{i}" for i in range(1, 5)])
    (busy,) = SimScheduler(engine).submit("train", 1).nodes
    name = f"validate-{prefix}"
    with console(settings) as cli:
        r = cli("schedule", "create", "validate", "--every", f"{EVERY_S}s", "--name", name)
        assert r.exit_code == 0 and "across the idle production nodes every 1s" in r.stdout, r.output
        try:
            run = asyncio.run(until(lambda: _first_run(engine), BOUND_S, "the scheduled validation's first run"))
        finally:
            assert cli("schedule", "delete", name, "--yes").exit_code == 0
    assert expand(run.metrics["nodes"]) == [n for n in names if n != busy]
    assert run.metrics["hosts"] == 3 and run.status == "pass"


def _first_run(engine) -> CheckRun | None:
    with Session(engine) as session:
        return session.exec(select(CheckRun).where(CheckRun.check_name == "nccl-validate")).first()
