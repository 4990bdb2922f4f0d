"""Another tool's drain of a production node in its scheduler (NHC's `NHC: ...`, a person's
free text) becomes a health event of the node with the tool's reason and owner, shown in
`node list` while the drain stands; under external_drain_policy `maintenance` the node goes
to maintenance through the capacity guard, which counts it out already: asked once, granted,
never a failure toward the storm breaker. The worker's watcher against the simulated
scheduler (its drains are rows another tool writes: fleetctl.db.jobs.set_sim_drain)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from sqlmodel import Session, select

from fleetctl.db import jobs, queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import AutomationEvent, HealthEvent
from fleetctl.workflows.definitions.shared import QUICK
from tests.support.cli import console
from tests.support.fleet import wait_for
from tests.support.jobs import slurm_inventory, until
from tests.support.worker import terminate_node_workflows

pytestmark = pytest.mark.temporal

WATCH_S = 1.0
# A watch, the signal, and the workflow's recording activity (QUICK); the guard's decision
# and the drain's transition are activities of the same bound.
BOUND_S = 2 * WATCH_S + 4 * QUICK["start_to_close_timeout"].total_seconds()


def _fleet(cli, tmp_path, count: int) -> list[str]:
    names = [f"ext-{uuid.uuid4().hex[:6]}-{i}" for i in range(count)]
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(
        "nodes:\n"
        + "".join(
            f"  - {{name: {n}, address: sim://{n}, rack: r1, profile: h100-sxm, scheduler: sim}}\n" for n in names
        )
    )
    r = cli("node", "import", str(inventory), "--adopt")
    assert r.exit_code == 0, r.output
    return names


def _conditions(cli) -> dict[str, dict[str, str]]:
    rows = json.loads(cli("node", "list", "-o", "json").stdout)
    return {row["name"]: {c["type"]: c["reason"] for c in row["conditions"]} for row in rows}


def _events(engine, node: str) -> list[HealthEvent]:
    with Session(engine) as session:
        return list(
            session.exec(
                select(HealthEvent)
                .where(HealthEvent.node_name == node, HealthEvent.source == "external-drain")
                .order_by(HealthEvent.id)
            )
        )


def _signals(settings, node: str) -> int:
    """How many health events the node's workflow was signalled: Temporal's own record."""
    from temporalio.client import Client

    from fleetctl.workflows.api import node_workflow_id
    from fleetctl.workflows.api.names import HEALTH_EVENT_SIGNAL

    async def count() -> int:
        client = await Client.connect(settings.temporal_address)
        history = await client.get_workflow_handle(node_workflow_id(node)).fetch_history()
        return sum(
            1
            for e in history.events
            if e.HasField("workflow_execution_signaled_event_attributes")
            and e.workflow_execution_signaled_event_attributes.signal_name == HEALTH_EVENT_SIGNAL
        )

    return asyncio.run(count())


def _until(predicate, bound_s: float, what: str):
    return asyncio.run(until(predicate, bound_s, what))


@pytest.fixture
def settings(make_settings, sqlite_url):
    s = make_settings(sqlite_url)
    s.external_drain_watch_s = WATCH_S
    return s


def test_another_tools_drain_is_recorded_shown_and_left_in_production(settings, tmp_path) -> None:
    engine = get_engine(settings.db_url)
    with console(settings) as cli:
        nhc, person, untouched = _fleet(cli, tmp_path, 3)
        jobs.set_sim_drain(engine, nhc, True, "NHC: check_hw_ib: No IB port is ACTIVE")
        jobs.set_sim_drain(engine, person, True, "reseat the cable")

        _until(
            lambda: all(len(_events(engine, n)) == 1 for n in (nhc, person)),
            BOUND_S,
            "both drains recorded as health events",
        )
        (event,) = _events(engine, nhc)
        assert event.severity == "warning" and event.message == (
            "drained in sim outside fleetctl by NHC: NHC: check_hw_ib: No IB port is ACTIVE"
        )
        assert _events(engine, person)[0].message.endswith("by someone (the reason names no tool): reseat the cable")
        shown = _conditions(cli)
        assert "NHC: check_hw_ib" in shown[nhc]["DrainedOutside"] and "DrainedOutside" in shown[person]
        assert "DrainedOutside" not in shown[untouched]
        assert "DrainedOutside" in cli("node", "list").stdout
        shown_one = json.loads(cli("node", "show", nhc, "-o", "json").stdout)
        assert "DrainedOutside" in {c["type"] for c in shown_one["conditions"]}
        assert [h["source"] for h in shown_one["health_events"]] == ["external-drain"]
        # record-only: the nodes stay in production
        assert {queries.get_node(engine, n).state for n in (nhc, person, untouched)} == {"production"}

        jobs.set_sim_drain(engine, nhc, False, None)  # NHC lifted its drain
        _until(lambda: "DrainedOutside" not in _conditions(cli)[nhc], BOUND_S, "the condition cleared")
        # recorded once however many watches saw it, then its lifting once
        assert [e.severity for e in _events(engine, nhc)] == ["warning", "info"]
        assert "DrainedOutside" in _conditions(cli)[person]
        # The watch that saw the lift saw the person's drain again (it asks of those first, and
        # has sent what it sends before it looks at lifts): still one signal, one event.
        assert _signals(settings, person) == 1 and len(_events(engine, person)) == 1

        # NHC drains it again for the same reason, in the same spell in production: a new episode.
        jobs.set_sim_drain(engine, nhc, True, "NHC: check_hw_ib: No IB port is ACTIVE")
        _until(lambda: "DrainedOutside" in _conditions(cli)[nhc], BOUND_S, "the drain made again shown again")
        assert [e.severity for e in _events(engine, nhc)] == ["warning", "info", "warning"]


def test_the_maintenance_policy_takes_the_node_out_through_the_guard(settings, tmp_path) -> None:
    """Each drained node goes to maintenance with the guard's grant, asked once: a node another
    tool drained is counted out already, so the fleet's limit (one of four) holds neither."""
    engine = get_engine(settings.db_url)
    settings.external_drain_policy = "maintenance"
    settings.guard_max_unavailable_fleet = 0.25  # of 4 nodes: one may go
    with console(settings) as cli:
        first, second, *_ = _fleet(cli, tmp_path, 4)
        jobs.set_sim_drain(engine, first, True, "NHC: check_hw_eth: eth0 missing")
        _until(
            lambda: queries.get_node(engine, first).state == "maintenance",
            BOUND_S,
            "the first drained node in maintenance",
        )
        jobs.set_sim_drain(engine, second, True, "NHC: check_fs_mount: /scratch not mounted")
        _until(lambda: queries.get_node(engine, second).state == "maintenance", BOUND_S, "the second in maintenance")
        with Session(engine) as session:
            kinds = [
                (e.node_name, e.kind)
                for e in session.exec(select(AutomationEvent).where(AutomationEvent.actor == "external-drain"))
            ]
        # the guard's own record: one grant each
        assert sorted(kinds) == sorted([(first, "grant"), (second, "grant")])
        assert [(e.from_state, e.to_state, e.actor, e.failure) for e in queries.node_events(engine, first)][1:] == [
            ("production", "draining", "external-drain", "health"),
            ("draining", "maintenance", "external-drain", ""),
        ]


def test_in_dry_run_an_outside_drain_is_recorded_once_however_often_its_watch_asks(settings, tmp_path) -> None:
    """Automation dry: the guard would grant the move to maintenance and grants nothing, so each
    watch asks again; its record (what `report --automation` reads) is one per drain."""
    from fleetctl.workflows.client import connect, guard_status

    engine = get_engine(settings.db_url)
    settings.external_drain_policy = "maintenance"
    settings.automation_dry_run = True

    async def asked_three_times() -> bool:
        return (await guard_status(await connect(settings), settings)).denied_total >= 3

    with console(settings) as cli:
        node, *_ = _fleet(cli, tmp_path, 4)
        jobs.set_sim_drain(engine, node, True, "NHC: check_hw_eth: eth0 missing")
        asyncio.run(wait_for(asked_three_times, 3 * BOUND_S, "three watches asking the guard"))
        with Session(engine) as session:
            kinds = [
                e.kind for e in session.exec(select(AutomationEvent).where(AutomationEvent.actor == "external-drain"))
            ]
        assert kinds == ["dry_run"] and queries.get_node(engine, node).state == "production"


@pytest.mark.slurm
def test_a_slurm_drain_by_nhc_becomes_the_nodes_health_event(settings, slurm_cluster, tmp_path, monkeypatch) -> None:
    engine = get_engine(settings.db_url)
    settings.slurm_conf = str(slurm_cluster.conf_path)
    monkeypatch.setenv("SLURM_CONF", settings.slurm_conf)  # the CLI's, as the worker's
    inventory = tmp_path / "slurm.yaml"
    inventory.write_text(slurm_inventory(slurm_cluster.node_names))
    try:
        with console(settings) as cli:
            r = cli("node", "import", str(inventory), "--adopt")
            assert r.exit_code == 0, r.output
            # Node Health Check's drain, in the form its Slurm integration writes; and fleetctl's
            # own, which is no other tool's.
            slurm_cluster.run(
                "scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=NHC: check_hw_ib: port down"
            )
            slurm_cluster.scheduler().drain("node4", "XID 79")
            _until(lambda: _events(engine, "node3"), BOUND_S, "NHC's drain recorded")
            assert [e.message for e in _events(engine, "node3")] == [
                "drained in slurm outside fleetctl by NHC: NHC: check_hw_ib: port down"
            ]
            assert "NHC: check_hw_ib: port down" in _conditions(cli)["node3"]["DrainedOutside"]
            assert _events(engine, "node4") == [] and "DrainedOutside" not in _conditions(cli)["node4"]
            assert queries.get_node(engine, "node3").state == "production"  # record-only
    finally:
        # The Slurm cluster's node names are every Slurm test's: a node workflow left running on
        # this test's task queue (no worker after it) would be the one a later test's start finds.
        asyncio.run(terminate_node_workflows(settings, slurm_cluster.node_names))
        slurm_cluster.reset()


def _slurm_and_sim_fleet(cli, slurm_cluster, tmp_path) -> list[str]:
    """The real cluster's 4 Slurm nodes and 12 simulated ones, adopted in production: 16 nodes,
    so the 4 Slurm nodes are 25% of the fleet (the storm limit is 4 of 16 failing)."""
    sims = [f"ext-{uuid.uuid4().hex[:6]}-{i}" for i in range(12)]
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(
        slurm_inventory(slurm_cluster.node_names)
        + "".join(f"  - {{name: {n}, address: sim://{n}, rack: r2, profile: h100-sxm, scheduler: sim}}\n" for n in sims)
    )
    r = cli("node", "import", str(inventory), "--adopt")
    assert r.exit_code == 0, r.output
    return sims


def _drain_in_slurm(slurm_cluster) -> None:
    for i, node in enumerate(slurm_cluster.node_names):
        slurm_cluster.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason=NHC: check_hw_ib: port {i}")


@pytest.fixture
def slurm_settings(settings, slurm_cluster, monkeypatch):
    settings.slurm_conf = str(slurm_cluster.conf_path)
    monkeypatch.setenv("SLURM_CONF", settings.slurm_conf)  # the CLI's, as the worker's
    yield settings
    # The Slurm cluster's node names are every Slurm test's: a node workflow left running on
    # this test's task queue (no worker after it) would be the one a later test's start finds.
    asyncio.run(terminate_node_workflows(settings, slurm_cluster.node_names))
    slurm_cluster.reset()


@pytest.mark.slurm
def test_outside_drains_of_a_quarter_of_the_fleet_go_to_maintenance_without_opening_the_breaker(
    slurm_settings, slurm_cluster, tmp_path
) -> None:
    """NHC drains the 4 Slurm nodes of 16 within one watch (25%, past the fleet's 10% and at
    the storm limit): each is asked of the guard once, granted (it is out already), and goes
    to maintenance; none is a failure, and the breaker stays closed."""
    from fleetctl.workflows.client import connect, guard_status

    settings = slurm_settings
    settings.external_drain_policy = "maintenance"
    engine = get_engine(settings.db_url)
    with console(settings) as cli:
        _slurm_and_sim_fleet(cli, slurm_cluster, tmp_path)
        _drain_in_slurm(slurm_cluster)
        _until(
            lambda: {queries.get_node(engine, n).state for n in slurm_cluster.node_names} == {"maintenance"},
            len(slurm_cluster.node_names) * BOUND_S,
            "every node NHC drained in maintenance",
        )

        async def guard():
            return await guard_status(await connect(settings), settings)

        state = asyncio.run(guard())
        assert not state.breaker_open and state.recent_failures == {}, state
        with Session(engine) as session:
            asked = [
                (e.node_name, e.kind)
                for e in session.exec(select(AutomationEvent).where(AutomationEvent.actor == "external-drain"))
            ]
        assert sorted(asked) == [(n, "grant") for n in slurm_cluster.node_names]


@pytest.mark.slurm
def test_the_guard_counts_outside_drains_and_refuses_a_drain_past_the_limit(
    slurm_settings, slurm_cluster, tmp_path
) -> None:
    """record-only: NHC's 4 drains leave the nodes in production in fleetctl, but they serve
    nothing; the guard counts them, so an automated drain of another node (10% of 16 is 1) is
    refused."""
    from fleetctl.workflows.client import connect, request_guarded_drain

    settings = slurm_settings
    engine = get_engine(settings.db_url)
    with console(settings) as cli:
        sims = _slurm_and_sim_fleet(cli, slurm_cluster, tmp_path)
        _drain_in_slurm(slurm_cluster)
        _until(
            lambda: len(queries.open_external_drains(engine)) == len(slurm_cluster.node_names),
            len(slurm_cluster.node_names) * BOUND_S,
            "NHC's drains recorded",
        )
        assert {queries.get_node(engine, n).state for n in slurm_cluster.node_names} == {"production"}

        async def ask():
            client = await connect(settings)
            return await request_guarded_drain(client, settings, sims[0], "r2", "a check failed", "sweep", "ask-1")

        decision, moved = asyncio.run(ask())
        assert moved is None and not decision.granted
        assert decision.reason.startswith("fleet limit: 4 of 16 already unavailable"), decision.reason
