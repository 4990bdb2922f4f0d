"""The node commands end to end: CLI -> Temporal -> worker -> database."""

from __future__ import annotations

import json
import uuid

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.connections.temporal_server import free_port
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from tests.support.cli import console

pytestmark = pytest.mark.temporal


@pytest.fixture
def cli(make_settings, db_url):
    with console(make_settings(db_url)) as invoke:
        invoke.db_url = db_url
        yield invoke


def _inventory(tmp_path, names, extra: str = "") -> str:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "nodes:\n"
        + "".join(
            f"  - {{name: {n}, address: sim://{n}, profile: h100-sxm, rack: rack-{i % 2}, scheduler: sim, labels: {{pool: p{i % 2}}}}}\n"
            for i, n in enumerate(names)
        )
        + extra
    )
    return str(path)


def test_import_list_drain_undrain_round_trip(cli, tmp_path, make_settings) -> None:
    names = [f"cli-{uuid.uuid4().hex[:6]}-{i}" for i in range(3)]
    inv = _inventory(tmp_path, names)
    r = cli("node", "import", inv)
    assert r.exit_code == 0, r.output
    assert "3 created" in r.output
    r = cli("node", "import", inv)
    assert r.exit_code == 0 and "3 unchanged" in r.output

    r = cli("node", "list", "-o", "json")
    rows = json.loads(r.stdout)
    assert sorted(row["name"] for row in rows) == sorted(names)
    assert {row["state"] for row in rows} == {"new"}
    assert len(json.loads(cli("node", "list", "-l", "pool=p0", "-o", "json").stdout)) == 2

    import asyncio

    from fleetctl.workflows.client import connect, request_transition

    settings = make_settings(cli.db_url)

    async def promote():
        client = await connect(settings)
        for n in names:
            for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
                await request_transition(client, n, trigger, "test", actor_kind="automation")

    asyncio.run(promote())

    r = cli("node", "drain", names[0], names[1], "--reason", "swap optics", "--yes")
    assert r.exit_code == 0, r.output
    assert f"{names[0]}: production -> draining" in r.output
    # With no jobs to wait for, the node's workflow completes the drain to maintenance.
    out_of_service = [
        r["name"]
        for r in json.loads(cli("node", "list", "-o", "json").stdout)
        if r["state"] in ("draining", "maintenance")
    ]
    assert sorted(out_of_service) == sorted(names[:2])

    r = cli("node", "undrain", names[0], names[1])
    assert r.exit_code == 0, r.output
    show = json.loads(cli("node", "show", names[0], "-o", "json").stdout)
    assert show["state"] == "production"
    assert show["workflow"]["reachable"] is True and show["workflow"]["last_outcome"] is not None
    drain = next(e for e in show["events"] if e["to"] == "draining")
    assert show["events"][-1]["to"] == "production" and show["events"][-1]["actor"] == "alice@console"
    assert drain["actor"] == "alice@console" and "swap optics" in drain["cause"]

    hist = json.loads(cli("node", "history", names[0], "-o", "json").stdout)
    assert [e["to"] for e in hist][:4] == ["burn_in", "admission", "production", "draining"]

    # Undrained again: already so, exit 0, nothing recorded.
    events = len(hist)
    again = cli("node", "undrain", names[0])
    assert again.exit_code == 0 and f"{names[0]}: already in production" in again.stdout, again.output
    assert len(json.loads(cli("node", "history", names[0], "-o", "json").stdout)) == events


def test_illegal_transition_refused_and_database_unchanged(cli, tmp_path) -> None:
    name = f"cli-{uuid.uuid4().hex[:6]}"
    assert cli("node", "import", _inventory(tmp_path, [name])).exit_code == 0
    engine = get_engine(cli.db_url)
    before = (queries.get_node(engine, name).state_version, len(queries.node_events(engine, name)))
    r = cli("node", "drain", name, "--reason", "x")
    assert r.exit_code == 1
    assert "cannot drain a node in new" in r.stderr and "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1
    assert (queries.get_node(engine, name).state_version, len(queries.node_events(engine, name))) == before


def test_unknown_node_is_one_line_and_exit_1(cli) -> None:
    r = cli("node", "drain", "no-such-node", "--reason", "x")
    assert r.exit_code == 1 and r.stderr.strip() == "error: unknown node: no-such-node"
    r = cli("node", "show", "no-such-node")
    assert r.exit_code == 1


@pytest.mark.parametrize(
    "extra,message",
    [
        (
            "  - {name: dup, address: sim://dup, profile: h100-sxm}\n  - {name: dup, address: sim://dup, profile: h100-sxm}\n",
            "duplicate name",
        ),
        ("  - {address: sim://x, profile: h100-sxm}\n", "missing field 'name'"),
        ("  - {name: x, address: sim://x, profile: h100-sxm\n", "not valid YAML"),
        # 19 GB200 trays in one NVL72 domain (72 GPUs, 18 trays of 4); an HGX node in a domain.
        (
            "".join(
                f"  - {{name: t{i:02d}, address: sim://t{i:02d}, profile: gb200, nvlink_domain: nvl-x}}\n"
                for i in range(19)
            ),
            "NVLink domain nvl-x: 19 nodes of 4 GPUs (gb200) are 76 GPUs",
        ),
        (
            "  - {name: hx, address: sim://hx, profile: h100-sxm, nvlink_domain: nvl-x}\n",
            "profile h100-sxm has no multi-node NVLink domain",
        ),
    ],
)
def test_bad_inventory_writes_nothing(cli, tmp_path, extra, message) -> None:
    good = f"cli-{uuid.uuid4().hex[:6]}"
    r = cli("node", "import", _inventory(tmp_path, [good], extra))
    assert r.exit_code == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert queries.get_node(get_engine(cli.db_url), good) is None


def test_dry_run_writes_nothing(cli, tmp_path) -> None:
    name = f"cli-{uuid.uuid4().hex[:6]}"
    r = cli("node", "import", _inventory(tmp_path, [name]), "--dry-run")
    assert r.exit_code == 0 and "1 new" in r.output
    assert queries.get_node(get_engine(cli.db_url), name) is None


def test_no_temporal_says_how_to_start_it(tmp_path, sqlite_url) -> None:
    inv = _inventory(tmp_path, ["lonely"])
    r = CliRunner().invoke(
        app, ["--db-url", sqlite_url, "--temporal-address", f"127.0.0.1:{free_port()}", "node", "import", inv]
    )
    assert r.exit_code == 1
    assert "fleetctl dev server" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert queries.get_node(get_engine(sqlite_url), "lonely") is None


def test_retire_asks_unless_yes(cli, tmp_path) -> None:
    name = f"cli-{uuid.uuid4().hex[:6]}"
    assert cli("node", "import", _inventory(tmp_path, [name])).exit_code == 0
    r = cli("node", "retire", name, input="n\n")
    assert r.exit_code == 1 and queries.get_node(get_engine(cli.db_url), name).state == "new"
    r = cli("node", "retire", name, "--yes")
    assert r.exit_code == 0, r.output
    assert queries.get_node(get_engine(cli.db_url), name).state == "retired"


def test_importing_a_known_name_in_other_cases_is_one_line_and_writes_nothing(cli, tmp_path) -> None:
    name = f"cli-{uuid.uuid4().hex[:6]}"
    assert cli("node", "import", _inventory(tmp_path, [name])).exit_code == 0
    other = f"cli-{uuid.uuid4().hex[:6]}"
    for extra in ((), ("--dry-run",)):
        r = cli("node", "import", _inventory(tmp_path, [name.upper(), other]), *extra)
        assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.output
        assert f"{name.upper()} (known as {name})" in r.stderr and "ignore case" in r.stderr
    engine = get_engine(cli.db_url)
    assert queries.get_node(engine, name.upper()) is None and queries.get_node(engine, other) is None


def test_drain_dry_run_says_what_each_node_would_do_and_changes_nothing(cli, tmp_path, make_settings) -> None:
    import asyncio

    from fleetctl.workflows.client import connect, request_transition

    ready, fresh = (f"cli-{uuid.uuid4().hex[:6]}" for _ in range(2))
    assert cli("node", "import", _inventory(tmp_path, [ready, fresh])).exit_code == 0

    async def promote():
        client = await connect(make_settings(cli.db_url))
        for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
            await request_transition(client, ready, trigger, "test", actor_kind="automation")

    asyncio.run(promote())
    engine = get_engine(cli.db_url)
    before = {
        n: (queries.get_node(engine, n).state_version, len(queries.node_events(engine, n))) for n in (ready, fresh)
    }
    r = cli("node", "drain", ready, fresh, "--reason", "swap optics", "--dry-run")
    assert r.exit_code == 1
    assert r.stdout.strip() == f"{ready}: would drain: production -> draining (dry run, nothing done)"
    assert r.stderr.strip() == f"error: {fresh}: cannot drain a node in new (allowed from: production)"
    assert {
        n: (queries.get_node(engine, n).state_version, len(queries.node_events(engine, n))) for n in (ready, fresh)
    } == before
    assert queries.get_node(engine, ready).state == "production"


def test_topology_is_imported_and_shown_and_a_reimport_updates_it(cli, tmp_path) -> None:
    name = f"cli-{uuid.uuid4().hex[:6]}"
    path = tmp_path / "inventory.yaml"
    path.write_text(
        f"nodes:\n  - {{name: {name}, address: sim://{name}, profile: h100-sxm, rack: r1, position: 7, "
        "switch: leaf-1, island: ib-a, scheduler: sim}\n"
    )
    assert cli("node", "import", str(path)).exit_code == 0

    (row,) = [r for r in json.loads(cli("node", "list", "-o", "json").stdout) if r["name"] == name]
    assert (row["rack"], row["position"], row["switch"], row["island"]) == ("r1", 7, "leaf-1", "ib-a")
    assert "topology: rack r1 U7  switch leaf-1  island ib-a" in cli("node", "show", name).stdout

    path.write_text(
        f"nodes:\n  - {{name: {name}, address: sim://{name}, profile: h100-sxm, rack: r1, scheduler: sim, "
        "island: ib-b}\n"
    )
    r = cli("node", "import", str(path))
    assert r.exit_code == 0 and "1 updated" in r.output
    assert "topology: rack r1 -  switch -  island ib-b" in cli("node", "show", name).stdout


def test_the_domain_is_imported_shown_and_cleared_by_a_reimport(cli, tmp_path) -> None:
    name = f"gb-{uuid.uuid4().hex[:6]}"
    path = tmp_path / "inventory.yaml"
    path.write_text(
        f"nodes:\n  - {{name: {name}, address: sim://{name}, profile: gb200, rack: r1, "
        "nvlink_domain: nvl72-r01, scheduler: sim}\n"
    )
    assert cli("node", "import", str(path)).exit_code == 0
    (row,) = [r for r in json.loads(cli("node", "list", "-o", "json").stdout) if r["name"] == name]
    assert row["nvlink_domain"] == "nvl72-r01"
    assert "nvlink-domain nvl72-r01" in cli("node", "show", name).stdout

    path.write_text(f"nodes:\n  - {{name: {name}, address: sim://{name}, profile: gb200, rack: r1, scheduler: sim}}\n")
    r = cli("node", "import", str(path))
    assert r.exit_code == 0 and "1 updated" in r.output
    assert "nvlink-domain -" in cli("node", "show", name).stdout


def test_an_inventory_giving_a_new_node_a_known_nodes_address_is_refused_naming_both(cli, tmp_path) -> None:
    name = f"cli-{uuid.uuid4().hex[:6]}"
    assert cli("node", "import", _inventory(tmp_path, [name])).exit_code == 0
    known_address = queries.get_node(get_engine(cli.db_url), name).address
    second = f"cli-{uuid.uuid4().hex[:6]}"
    inv = tmp_path / "second-name.yaml"
    inv.write_text(f"nodes: [{{name: {second}, address: '{known_address}', profile: h100-sxm}}]\n")
    for extra in ((), ("--dry-run",), ("--adopt",)):
        r = cli("node", "import", str(inv), *extra)
        assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.output
        assert f"{second}: address {known_address} is already {name}'s" in r.stderr
    assert queries.get_node(get_engine(cli.db_url), second) is None


def test_node_show_of_a_node_whose_workflow_no_worker_runs_stands_on_the_database(
    tmp_path, make_settings, db_url
) -> None:
    """A node's workflow whose worker is down (here: its task queue nobody polls) never
    answers a query; Temporal holds the query until its own limit. `node show` gives up on
    the workflow within its read bound and shows what the database says."""
    stale = make_settings(db_url)
    names = [f"cli-{uuid.uuid4().hex[:6]}"]
    args = ["--db-url", db_url, "--temporal-address", stale.temporal_address, "--task-queue", stale.task_queue]
    args += ["--fleet", stale.fleet]
    imported = CliRunner().invoke(app, [*args, "node", "import", _inventory(tmp_path, names)])
    assert imported.exit_code == 0, imported.output
    shown = CliRunner().invoke(app, [*args, "node", "show", names[0], "-o", "json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["name"] == names[0] and data["state"] == "new", data
    assert data["workflow"] == {"reachable": False, "error": "the node's workflow did not answer within 3 s"}


# A worker polls as soon as it starts; a loaded machine may take a while to start its threads.
def test_an_import_onto_a_task_queue_no_worker_polls_warns_in_one_line(cli, tmp_path, make_settings, db_url) -> None:
    """Workflows started on a queue nobody polls wait unseen (a stale FLEETCTL_TASK_QUEUE): the
    import says so. Where a worker polls (the console's), it says nothing of it."""
    import asyncio

    from tests.support.worker import until_polled

    asyncio.run(until_polled(cli.settings))
    names = [f"cli-{uuid.uuid4().hex[:6]}"]
    polled = cli("node", "import", _inventory(tmp_path, names))
    assert polled.exit_code == 0 and "no worker polls" not in polled.output, polled.output

    stale = make_settings(db_url)  # a task queue of its own: no worker anywhere polls it
    other = [f"cli-{uuid.uuid4().hex[:6]}"]
    args = ["--db-url", db_url, "--temporal-address", stale.temporal_address, "--task-queue", stale.task_queue]
    args += ["--fleet", stale.fleet]
    result = CliRunner().invoke(app, [*args, "node", "import", _inventory(tmp_path, other)])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if "no worker polls" in line]
    assert warnings == [
        f"warning: no worker polls task queue {stale.task_queue!r}: what this command started waits until one"
        f" does (`fleetctl worker` with FLEETCTL_TASK_QUEUE={stale.task_queue})"
    ], result.stderr
