"""`fleetctl node prolog` on simulated nodes: a pass lets the job start, a failed check drains
the node through the capacity guard (exit 3), a drain the guard refuses lets the job start
with a warning, and bad input is one line."""

from __future__ import annotations

import asyncio
import time

import pytest

from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.inventory.parse import parse_inventory
from fleetctl.sim.store import add_fault
from fleetctl.workflows.client import connect
from tests.support.cli import console
from tests.support.worker import start_in_production

pytestmark = pytest.mark.temporal


def test_prolog_drains_a_faulty_node_through_the_capacity_guard(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    names = ["n1", "n2", "n3"]
    queries.upsert_nodes(
        engine,
        parse_inventory(
            "nodes:\n"
            + "".join(
                f"  - {{name: {n}, address: sim://{n}, profile: h100-sxm, rack: r1, scheduler: sim}}\n" for n in names
            )
        ),
    )
    for node in ("n1", "n2"):
        add_fault(engine, node, "row-remap-failure", 0, time.time(), None, 1)
    with console(settings) as cli:

        async def production():
            client = await connect(settings)
            for n in names:
                await start_in_production(client, settings, n)

        asyncio.run(production())

        r = cli("node", "prolog", "n3", "--job", "7")
        assert r.exit_code == 0 and r.stdout.startswith("n3: prejob passed (nvidia-smi-query, xid-scan, nvidia-smi-q)")

        r = cli("node", "prolog", "n1", "--job", "7")
        assert r.exit_code == 3, r.output
        assert r.stderr.startswith("n1: prolog prejob: nvidia-smi-query: ") and r.stderr.rstrip().endswith("; drained")
        assert queries.get_node(engine, "n1").state in ("draining", "maintenance")
        drain = next(e for e in queries.node_events(engine, "n1") if e.trigger == "drain")
        assert (drain.actor, drain.actor_kind) == ("prolog@7", "automation")

        # One of three nodes may be out at once (10%, at least one): the guard keeps n2, and
        # the job may start there; the warning says why.
        r = cli("node", "prolog", "n2", "--job", "8")
        assert r.exit_code == 0, r.output
        assert (
            r.stderr.startswith("warning: n2: prolog prejob: nvidia-smi-query: ")
            and "capacity guard kept it" in r.stderr
        )
        assert queries.get_node(engine, "n2").state == "production"

        # fleetctl has n1 out of production: no job should start there, no check needed.
        r = cli("node", "prolog", "n1", "--job", "9")
        assert r.exit_code == 3 and "not production" in r.stderr

        r = cli("node", "prolog", "n3", "--job", "7;reboot")
        assert r.exit_code == 2 and r.stderr.startswith("error: --job: not a job id")
        r = cli("node", "prolog", "n404")
        assert r.exit_code == 1 and r.stderr.startswith("error: unknown node: n404")
        r = cli("node", "prolog", "n3", "--suite", "nosuch")
        assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1


def test_prolog_drains_through_the_guard_of_the_nodes_own_fleet(make_settings, sqlite_url) -> None:
    """A node labelled with its fleet is counted by that fleet's guard, whatever fleet the
    prolog's settings name (a site's wrapper that forgot FLEETCTL_FLEET, a login node's
    default): the drain must not spend another fleet's budget."""
    import dataclasses

    from sqlmodel import Session, select

    from fleetctl.db.models import AutomationEvent

    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    queries.upsert_nodes(
        engine,
        parse_inventory(
            f"nodes:\n  - {{name: b1, address: sim://b1, profile: h100-sxm, rack: r1, scheduler: sim,"
            f" labels: {{fleet: {settings.fleet}}}}}\n"
        ),
    )
    add_fault(engine, "b1", "row-remap-failure", 0, time.time(), None, 1)
    elsewhere = dataclasses.replace(settings, fleet=f"{settings.fleet}-elsewhere")
    with console(elsewhere) as cli:

        async def production():
            await start_in_production(await connect(settings), settings, "b1")

        asyncio.run(production())
        r = cli("node", "prolog", "b1", "--job", "11")
        assert r.exit_code == 3, r.output
    with Session(engine) as session:
        grants = list(session.exec(select(AutomationEvent).where(AutomationEvent.kind == "grant")))
    assert [(g.node_name, g.fleet) for g in grants] == [("b1", settings.fleet)]
