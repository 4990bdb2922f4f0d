"""A command says which database and Temporal it uses when nothing configured them, exits
non-zero when Temporal cannot say what the guard says, and finds the fleet it was pointed
at."""

from __future__ import annotations

import asyncio
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.config import ENV_VARS
from fleetctl.connections.temporal_server import free_port

UNSET = dict.fromkeys(
    [
        *ENV_VARS.values(),
        "FLEETCTL_CONFIG",
        "TEMPORAL_ADDRESS",
        "TEMPORAL_PROFILE",
        "TEMPORAL_CONFIG_FILE",
        "TEMPORAL_NAMESPACE",
    ]
)


def test_an_unconfigured_database_is_named(tmp_path) -> None:
    env = {
        **UNSET,
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "HOME": str(tmp_path),
    }
    # A read never creates the database (not even the default one): `db upgrade` does.
    assert CliRunner(env=env).invoke(app, ["db", "upgrade"]).exit_code == 0
    r = CliRunner(env=env).invoke(app, ["node", "list", "-o", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == []
    note = r.stderr.strip()
    assert note.startswith("note: using database sqlite:///") and str(tmp_path / "data") in note
    assert "the default, nothing configured it (set FLEETCTL_DB_URL or --db-url" in note
    assert (
        CliRunner(env=env).invoke(app, ["--db-url", f"sqlite:///{tmp_path / 'f.db'}", "db", "upgrade"]).exit_code == 0
    )
    configured = CliRunner(env=env).invoke(app, ["--db-url", f"sqlite:///{tmp_path / 'f.db'}", "node", "list"])
    # No note; the empty listing's one line only (on stderr, as kubectl's "No resources found.")
    assert configured.exit_code == 0 and configured.stderr == "No nodes.\n"


def test_fleet_status_exits_1_when_temporal_is_unreachable(sqlite_url) -> None:
    r = CliRunner().invoke(
        app, ["--db-url", sqlite_url, "--temporal-address", f"127.0.0.1:{free_port()}", "fleet", "status", "-o", "json"]
    )
    assert r.exit_code == 1
    assert json.loads(r.stdout)["automation"]["reachable"] is False  # the database's part still printed
    assert len(r.stderr.strip().splitlines()) == 1 and "cannot reach Temporal" in r.stderr


@pytest.mark.temporal
def test_fleet_status_of_a_misnamed_fleet_names_the_fleets_there(make_settings, sqlite_url) -> None:
    from fleetctl.workflows.client import connect, ensure_capacity_guard
    from tests.support.cli import console

    settings = make_settings(sqlite_url)

    async def start_guard():
        await ensure_capacity_guard(await connect(settings), settings)

    with console(settings) as cli:  # a worker answers the guard's queries
        asyncio.run(start_guard())
        r = cli("--fleet", "no-such-fleet", "fleet", "status", "-o", "json")
        ok = cli("--fleet", settings.fleet, "fleet", "status", "-o", "json")
    assert r.exit_code == 0, r.output
    assert "warning: no capacity guard runs for fleet 'no-such-fleet'; guards run for: " in r.stderr
    assert settings.fleet in r.stderr and "--fleet" in r.stderr
    assert json.loads(r.stdout)["automation"]["guard_running"] is False
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["automation"]["breaker"] == "closed"


def test_demo_export_line_is_one_line_in_a_narrow_file(tmp_path) -> None:
    from fleetctl.cli.demo import export_line
    from fleetctl.config import load_settings

    settings = load_settings(
        flags={"db_url": f"sqlite:///{tmp_path}/a b/fleet.db", "task_queue": "demo-1", "fleet": "demo-1"},
        env={},
        config_file="/dev/null",
    )
    console = Console(width=40, file=(tmp_path / "out.txt").open("w"))
    console.print(
        "in another shell:\n" + export_line(settings, "127.0.0.1:7233") + "\nCtrl-C", soft_wrap=True, markup=False
    )
    console.file.close()
    line = (tmp_path / "out.txt").read_text().splitlines()[1]
    assert line.startswith("  export FLEETCTL_DB_URL='sqlite:///") and line.endswith("FLEETCTL_FLEET=demo-1")
    assert "TEMPORAL_ADDRESS=127.0.0.1:7233 FLEETCTL_TASK_QUEUE=demo-1" in line
