"""A test's fleet from the outside: database snapshots, an inventory file, the CLI on the
test's settings, its one-line errors, and waiting on a condition (`wait_for`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import MetaData, select
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.config import Settings
from fleetctl.db.engine import get_engine


def db_snapshot(db_url: str) -> dict[str, list[tuple]]:
    """Every row of every table: 'the database is unchanged' means this is equal."""
    engine = get_engine(db_url)
    meta = MetaData()
    meta.reflect(engine)
    with engine.connect() as conn:
        return {name: sorted(map(tuple, conn.execute(select(table))), key=repr) for name, table in meta.tables.items()}


def inventory_file(tmp_path: Path, names: list[str], scheduler: str = "sim", racks: int = 2) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "nodes:\n"
        + "".join(
            f"  - {{name: {n}, address: sim://{n}, profile: h100-sxm, rack: rack-{i % racks}, scheduler: {scheduler}}}\n"
            for i, n in enumerate(names)
        )
    )
    return path


@dataclass
class Cli:
    """`fleetctl` as an operator runs it, against one test's database, Temporal and queue."""

    settings: Settings
    operator: str = "alice@console"

    def __call__(self, *args: str, input: str | None = None, operator: str | None = None):
        s = self.settings
        base = [
            "--db-url",
            s.db_url,
            "--temporal-address",
            s.temporal_address,
            "--task-queue",
            s.task_queue,
            "--as",
            operator or self.operator,
        ]
        # A wide terminal: the tests read what a table's cells say, not where rich wraps them.
        return CliRunner().invoke(app, [*base, *args], input=input, env={"FLEETCTL_FLEET": s.fleet, "COLUMNS": "200"})


def one_line_error(result) -> str:
    """The single stderr line of a failed command (asserted to be one line, no traceback)."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


async def wait_for(
    predicate: Callable[[], bool | Awaitable[bool]], timeout_s: float, what: str, interval_s: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        await asyncio.sleep(interval_s)
