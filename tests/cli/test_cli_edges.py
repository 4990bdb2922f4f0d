"""The CLI's edges, as an operator meets them at the console: one-line usage errors, help on
every schedule command, the exit code of an unknown name, the suites listed, a drain of a
drained node done, a schedule command without an id, and a firmware baseline set."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.connections.temporal_server import free_port


def run(*args: str, db_url: str | None = None):
    base = ["--db-url", db_url, "--temporal-address", f"127.0.0.1:{free_port()}"] if db_url else []
    return CliRunner().invoke(app, [*base, *args], prog_name="fleetctl")


@pytest.mark.parametrize(
    "args, message",
    [
        (["node", "drain", "gpu-1"], "error: Missing option '--reason'. (see 'fleetctl node drain --help')"),
        (["node", "frobnicate"], "error: No such command 'frobnicate'. (see 'fleetctl node --help')"),
        (["--bogus", "node", "list"], "error: No such option: --bogus (see 'fleetctl --help')"),
    ],
)
def test_usage_errors_are_one_line(args, message) -> None:
    r = run(*args)
    assert r.exit_code == 2
    assert r.stderr.strip() == message


def test_a_noun_alone_still_prints_its_help() -> None:
    r = run("node")
    assert "Usage: fleetctl node" in r.output and "drain" in r.output


@pytest.mark.parametrize("command", ["pause", "unpause", "delete"])
def test_schedule_commands_have_help(command) -> None:
    r = run("schedule", command, "--help")
    assert r.exit_code == 0
    assert "the schedule's id" in r.output
    summary = {"pause": "Stop a schedule", "unpause": "Let a paused schedule", "delete": "Remove a schedule"}[command]
    assert summary in r.output


def test_metrics_help_cites_no_source_paths() -> None:
    r = run("metrics", "serve", "--help")
    assert r.exit_code == 0 and "fleetctl_" in r.output
    assert ".py" not in r.output and ".json" not in r.output


def test_an_unknown_runbook_exits_1_as_an_unknown_node_does(sqlite_url) -> None:
    runbook = run("runbook", "show", "no-such-runbook", db_url=sqlite_url)
    node = run("node", "show", "no-such-node", db_url=sqlite_url)
    assert (runbook.exit_code, node.exit_code) == (1, 1)
    assert runbook.stderr.strip() == "error: unknown runbook 'no-such-runbook'"


def test_check_suites_lists_what_each_suite_runs() -> None:
    r = run("check", "suites", "-o", "json")
    assert r.exit_code == 0, r.output
    suites = {s["name"]: s for s in json.loads(r.stdout)}
    assert {"burn-in", "quick"} <= set(suites)
    assert suites["quick"]["checks"] and suites["burn-in"]["typical_duration_s"] > suites["quick"]["typical_duration_s"]
    table = run("check", "suites").stdout
    assert table.splitlines()[0].split() == ["NAME", "CHECKS", "TYPICAL"]
    assert any(line.split()[0] == "quick" for line in table.splitlines()[1:])


def test_a_firmware_baseline_is_set_from_its_file(sqlite_url) -> None:
    baseline = Path(__file__).parents[1] / "fixtures" / "firmware" / "h100-baseline.yaml"
    r = run("firmware", "baseline", "set", str(baseline), db_url=sqlite_url)
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == "baseline fleet-2026-12 set (id 1; profiles h100-sxm)"
    status = run("firmware", "status", "-o", "json", db_url=sqlite_url)
    assert status.exit_code == 0, status.output
    assert json.loads(status.stdout)["baseline"] == "fleet-2026-12"


@pytest.mark.temporal
def test_schedule_pause_without_an_id_takes_the_fleets_only_schedule(make_settings, sqlite_url) -> None:
    from tests.support.cli import console

    settings = make_settings(sqlite_url)
    with console(settings) as cli:
        none = cli("schedule", "pause")
        assert cli("schedule", "create", "active-checks", "--name", "sweeps-a", "--every", "1h").exit_code == 0
        try:
            one = cli("schedule", "pause")
            listing = {r["id"]: r for r in json.loads(cli("schedule", "list", "-o", "json").stdout)}
            table = cli("schedule", "list").stdout
            assert cli("schedule", "create", "active-checks", "--name", "sweeps-b", "--every", "1h").exit_code == 0
            two = cli("schedule", "unpause")
        finally:
            for name in ("sweeps-a", "sweeps-b"):
                cli("schedule", "delete", name, "--yes")
    assert none.exit_code == 2 and none.stderr.strip() == "error: name the schedule: there is none"
    assert one.exit_code == 0 and one.stdout.strip() == "schedule sweeps-a: paused", one.output
    assert listing["sweeps-a"]["paused"] is True and listing["sweeps-a"]["every_s"] == 3600
    row = next(line.split() for line in table.splitlines() if line.split()[:1] == ["sweeps-a"])
    assert row[1:3] == ["1h", "yes"]  # not "1:00:00" and "True"
    assert two.exit_code == 2 and two.stderr.strip() == "error: name the schedule: there are 2 (sweeps-a, sweeps-b)"


def test_no_help_shows_python_types_or_braced_arguments() -> None:
    """Every command's help says NAMES... and --reason TEXT, as kubectl's and click's do, never
    Typer's `<list[str]>` or `{names}`."""
    import re

    from typer.testing import CliRunner

    from fleetctl.cli.main import NOUNS, app, load_noun

    leaked = re.compile(r"<(list\[|str>|int>|float>|bool>|Path>)")
    braced = re.compile(r"\{[A-Za-z_]+\}")
    runner = CliRunner()
    seen = 0
    for noun in NOUNS:
        group = load_noun(noun)
        for name in getattr(group, "commands", {}) or [None]:
            args = [noun, *([name] if name else []), "--help"]
            result = runner.invoke(app, args, env={"COLUMNS": "200"})
            assert result.exit_code == 0, (args, result.output)
            assert not leaked.search(result.stdout), (args, leaked.findall(result.stdout))
            usage = result.stdout.splitlines()[0]
            assert not braced.search(usage), (args, usage)
            seen += 1
    assert seen > 50  # every command of every noun was asked


@pytest.mark.parametrize("command", [["fleet", "status"], ["node", "list"], ["rma", "list"], ["report"]])
def test_a_read_of_a_database_that_is_not_there_says_so_and_creates_nothing(tmp_path, command) -> None:
    """A mistyped SQLite URL used to create a new, migrated, empty database and report an
    empty fleet from it. A command that only reads refuses in one line; one that writes (`db
    upgrade`) still creates it."""
    from fleetctl.cli.main import app

    missing = tmp_path / "typo" / "fleet.db"
    url = f"sqlite:///{missing}"
    env = {"FLEETCTL_CONFIG": os.devnull, "TEMPORAL_ADDRESS": "127.0.0.1:1"}
    result = CliRunner().invoke(app, ["--db-url", url, *command], env=env)
    assert result.exit_code != 0, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not exist: create it with `fleetctl db upgrade`" in lines[0], result.stderr
    assert not missing.exists() and not missing.parent.exists()
    assert CliRunner().invoke(app, ["--db-url", url, "db", "upgrade"], env=env).exit_code == 0
    assert missing.exists()
