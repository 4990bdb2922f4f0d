"""The Prometheus exporter served on 127.0.0.1, scraped over HTTP, on the hand-worked history
(tests/reliability/history.py) and a few rows of our own: a node of another fleet out with a hostile
cause, remediation runs, RMA records. Then the Grafana dashboard: the fields Grafana's
dashboard schema requires, only series the exporter exports, and every expression checked by the
real Prometheus (`promtool check rules`, and a `prometheus` scraping the exporter and answering
each panel's query; the Debian packages, installed by the Makefile)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlmodel import Session

from fleetctl.connections.temporal_server import free_port
from fleetctl.db.engine import get_engine
from fleetctl.db.models import AutomationEvent, CheckRun, Job, JobRestart, Node, NodeEvent, RemediationRun, RmaRecord
from fleetctl.jobs.placement import FLEET_WIDE, IN_ISLAND, NOT_PLACED
from fleetctl.nodes.capacity import (
    AGENT_SILENCE,
    FleetSnapshot,
    GuardPolicy,
    RackCounts,
    RemovalRequest,
    checker_storm,
    decide,
)
from fleetctl.nodes.conditions import HELD_BY_CLASSES, PRODUCTION_CONDITIONS, held_by
from fleetctl.reliability import exporter_server
from fleetctl.reliability.exporter_server import FleetCollector
from fleetctl.reliability.metrics import CAUSE_CLASSES, PENDING_REASONS, pending_reason
from fleetctl.remediation.lemons import LemonPolicy
from tests.reliability import history
from tests.support.prometheus import needs_prometheus, query, running_prometheus, wait_for_result  # noqa: F401

DASHBOARD = Path(exporter_server.__file__).parent / "grafana-dashboard.json"
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
# Grafana's own variables the dashboard may use, with the values Grafana would put in (longest
# name first: $__range is a prefix of $__range_s).
GRAFANA_VARIABLES = {"$__range_s": "3600", "$__range": "1h"}
# A cause as a kernel log can carry it: a terminal title sequence, and far too long for a label.
HOSTILE_CAUSE = "health: XID 94 \x1b]0;owned\x07" + "x" * 300
B01_SINCE = NOW - timedelta(hours=2)
B02_SINCE = NOW - timedelta(hours=5)


B02_STALLED = NOW - timedelta(minutes=7)
B01_RMA_HELD = NOW - timedelta(minutes=90)


def seed_more(engine) -> None:
    """What history.seed lacks: a node of fleet blue in maintenance, remediations, RMAs."""
    with Session(engine) as session:
        session.add_all(
            [
                Node(
                    name="b01",
                    address="sim://b01",
                    rack="b1",
                    profile="h100-sxm",
                    scheduler="sim",
                    state="maintenance",
                    labels={"fleet": "blue"},
                    state_since=B01_SINCE,
                    created_at=NOW - timedelta(days=3),
                ),
                NodeEvent(
                    node_name="b01",
                    from_state="draining",
                    to_state="maintenance",
                    trigger="drain_complete",
                    cause=HOSTILE_CAUSE,
                    actor="lifecycle",
                    actor_kind="automation",
                    at=B01_SINCE,
                    idempotency_key="b01-1",
                ),
                *[
                    RemediationRun(
                        run_key=f"remediate/n{i}",
                        node_name=f"n0{i}",
                        runbook="xid-79",
                        status=status,
                        actor="lifecycle",
                    )
                    for i, status in enumerate(["succeeded", "succeeded", "escalated", "running"])
                ],
                # n07's open RMA is the history's own (tests/reliability/history.py).
                # b02's drain is refused twice since it entered production; one refusal from before does not count.
                Node(
                    name="b02",
                    address="sim://b02",
                    rack="b1",
                    profile="h100-sxm",
                    scheduler="sim",
                    state="production",
                    labels={"fleet": "blue"},
                    state_since=B02_SINCE,
                    created_at=NOW - timedelta(days=3),
                ),
                NodeEvent(
                    node_name="b02",
                    from_state="admission",
                    to_state="production",
                    trigger="enter_production",
                    actor="lifecycle",
                    actor_kind="automation",
                    at=B02_SINCE,
                    idempotency_key="b02-0",
                ),
                *[
                    AutomationEvent(
                        fleet="blue",
                        kind="deny",
                        node_name="b02",
                        reason=f"fleet limit: {k + 2} of 14 already unavailable (max 1, 10%); "
                        f"can go once {k + 2} nodes of the fleet are back in service",
                        actor="lifecycle",
                        at=B02_SINCE + timedelta(hours=k),
                        idempotency_key=f"b02-{k}",
                    )
                    for k in (-1, 1, 2)
                ],
                # b02's workflow was found stalled; b01's was, and works again.
                AutomationEvent(
                    fleet="blue",
                    kind="stalled",
                    node_name="b02",
                    reason="workflow tasks failing",
                    actor="stall-watch",
                    at=B02_STALLED,
                    idempotency_key="b02-stalled",
                ),
                AutomationEvent(
                    fleet="blue",
                    kind="stalled",
                    node_name="b01",
                    reason="work queued 400 s ago",
                    actor="stall-watch",
                    at=B01_SINCE,
                    idempotency_key="b01-stalled",
                ),
                AutomationEvent(
                    fleet="blue",
                    kind="unstalled",
                    node_name="b01",
                    reason="working its queue again",
                    actor="stall-watch",
                    at=B01_SINCE + timedelta(minutes=1),
                    idempotency_key="b01-unstalled",
                ),
                # b01's RMA, held for an operator (a correlated burst) and not answered yet.
                RmaRecord(
                    node_name="b01",
                    reason="xid 79",
                    opened_by="lifecycle",
                    opened_at=B01_RMA_HELD,
                    status="awaiting_confirmation",
                    held_reason="correlated burst: 7 nodes with critical events",
                    idempotency_key="rma-b01",
                ),
            ]
        )
        session.commit()


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
def served(db_url):
    engine = get_engine(db_url)
    history.seed(engine, NOW)
    seed_more(engine)
    server = exporter_server.serve(engine, 0, "127.0.0.1")
    yield server.server_port
    server.shutdown()


def test_exporter_serves_the_fleet(served) -> None:
    samples = scrape(served)

    # Per fleet: the history's twelve are default's; blue has b01 (maintenance) and b02.
    nodes = {
        (dict(labels)["fleet"], dict(labels)["state"]): value
        for (name, labels), value in samples.items()
        if name == "fleetctl_nodes"
    }
    zero = dict.fromkeys(("new", "firmware", "burn_in", "admission", "draining"), 0)
    assert nodes == {
        **{("default", k): v for k, v in {**zero, "production": 9, "maintenance": 1, "rma": 1, "retired": 1}.items()},
        **{("blue", k): v for k, v in {**zero, "production": 1, "maintenance": 1, "rma": 0, "retired": 0}.items()},
    }
    assert sample(samples, "fleetctl_nodes_by_rack", fleet="default", rack="r2", profile="h100-sxm", state="rma") == 1
    assert (
        sample(samples, "fleetctl_nodes_by_rack", fleet="default", rack="r3", profile="a100-sxm-80gb", state="retired")
        == 1
    )
    assert (
        sample(samples, "fleetctl_nodes_by_rack", fleet="blue", rack="b1", profile="h100-sxm", state="maintenance") == 1
    )

    # Who is out and why: one series per node, its cause a bounded class, never the free text
    # (b01's hostile kernel message reaches no label; a new event makes no new series).
    out = {
        dict(labels)["node"]: dict(labels) | {"value": value}
        for (name, labels), value in samples.items()
        if name == "fleetctl_node_out_since_timestamp_seconds"
    }
    assert sorted(out) == ["b01", "n05", "n07"]
    assert (out["n05"]["cause"], out["n07"]["cause"]) == ("check", "xid")  # nccl-allreduce; XID 48
    assert (out["n07"]["state"], out["n07"]["fleet"], out["n07"]["rack"]) == ("rma", "default", "r2")
    b01 = out["b01"]
    assert (b01["fleet"], b01["state"], b01["value"]) == ("blue", "maintenance", B01_SINCE.timestamp())
    assert b01["cause"] == "other"  # its move out of production is not in the record
    assert all(
        set(labels) == {"fleet", "node", "rack", "state", "cause", "value"} and labels["cause"] in CAUSE_CLASSES
        for labels in out.values()
    )

    # Drains the guard holds: b02 since its first refusal in production, held by what the latest
    # refusal names, as a class, not its words (one refusal from before it entered production
    # does not count); n09, in production all week, refused at +75 h of the history's week.
    held = {
        dict(labels)["node"]: (dict(labels)["held_by"], value)
        for (name, labels), value in samples.items()
        if name == "fleetctl_node_drain_held_since_timestamp_seconds"
    }
    assert held == {
        "b02": ("fleet_limit", (B02_SINCE + timedelta(hours=1)).timestamp()),
        "n09": ("rack_limit", (NOW - history.WINDOW + timedelta(hours=75)).timestamp()),
    }
    assert all(
        set(dict(labels)) == {"fleet", "node", "rack", "held_by"}
        for (name, labels) in samples
        if name == "fleetctl_node_drain_held_since_timestamp_seconds"
    )
    # Stalled now: b02 (since the watcher found it); b01 was, and works again.
    stalled = {
        labels: value
        for (name, labels), value in samples.items()
        if name == "fleetctl_node_stalled_since_timestamp_seconds"
    }
    assert stalled == {frozenset({("fleet", "blue"), ("node", "b02"), ("rack", "b1")}): B02_STALLED.timestamp()}

    # The fleet served (default) and its budget, as `fleet status` shows it; b01 is blue's.
    # 10 nodes serve (9 production, n05 in maintenance; RMA and retired do not): 10% is 1 node.
    budget = {
        (name.removeprefix("fleetctl_capacity_"), dict(labels)["scope"], dict(labels)["rack"]): value
        for (name, labels), value in samples.items()
        if name.startswith("fleetctl_capacity_")
    }
    assert {k: v for k, v in budget.items() if k[1] == "fleet"} == {
        ("unavailable", "fleet", ""): 1,
        ("limit", "fleet", ""): 1,
        ("headroom", "fleet", ""): 0,
    }
    # r2: n05 out, n06 and n08 serving, n07 in RMA; r3: three serving, n12 retired.
    assert (budget["unavailable", "rack", "r2"], budget["limit", "rack", "r2"], budget["headroom", "rack", "r2"]) == (
        1,
        1,
        0,
    )
    assert budget["headroom", "rack", "r3"] == 1
    assert {k[2] for k in budget} == {"", "r1", "r2", "r3"}

    # Back to production after a failure: n03 after 8 h, n07 twice after 4 h (MTTR as the report's:
    # n08's return from the operator's planned drain is no repair).
    assert sample(samples, "fleetctl_node_repair_seconds_count", fleet="default") == 3
    assert sample(samples, "fleetctl_node_repair_seconds_sum", fleet="default") == (8 + 4 + 4) * 3600
    assert sample(samples, "fleetctl_node_repair_seconds_bucket", fleet="default", le="14400.0") == 2
    # Runs ended are a counter; the one running is a gauge of now.
    assert (
        sample(
            samples,
            "fleetctl_remediation_runs_total",
            fleet="default",
            runbook="xid-79",
            mode="live",
            status="succeeded",
        )
        == 2
    )
    assert sample(samples, "fleetctl_remediation_runs_running", fleet="default", runbook="xid-79", mode="live") == 1
    assert sample(samples, "fleetctl_rma_records", fleet="default", status="open") == 1
    assert sample(samples, "fleetctl_rma_records", fleet="blue", status="awaiting_confirmation") == 1
    held_rmas = {
        labels: value
        for (name, labels), value in samples.items()
        if name == "fleetctl_rma_awaiting_confirmation_since_timestamp_seconds"
    }
    rma_id = next(dict(labels)["rma"] for labels in held_rmas)
    assert held_rmas == {
        frozenset({("fleet", "blue"), ("node", "b01"), ("rack", "b1"), ("rma", rma_id)}): B01_RMA_HELD.timestamp()
    }  # n07's open RMA is none: it waits for no operator

    assert sample(samples, "fleetctl_check_runs_total", fleet="default", check="nccl-allreduce", status="pass") == 11
    assert sample(samples, "fleetctl_check_runs_total", fleet="default", check="nccl-allreduce", status="fail") == 2
    # Every NCCL run took 90 s, every HPL run 600 s.
    assert (
        sample(samples, "fleetctl_check_duration_seconds_bucket", fleet="default", check="nccl-allreduce", le="60.0")
        == 0
    )
    assert (
        sample(samples, "fleetctl_check_duration_seconds_bucket", fleet="default", check="nccl-allreduce", le="120.0")
        == 13
    )
    assert sample(samples, "fleetctl_check_duration_seconds_sum", fleet="default", check="nccl-allreduce") == 13 * 90
    assert sample(samples, "fleetctl_check_duration_seconds_count", fleet="default", check="hpl") == 12
    assert sample(samples, "fleetctl_check_duration_seconds_bucket", fleet="default", check="hpl", le="300.0") == 0
    assert sample(samples, "fleetctl_check_duration_seconds_bucket", fleet="default", check="hpl", le="+Inf") == 12

    assert sample(samples, "fleetctl_drains_total", fleet="default", actor_kind="automation") == 5
    assert sample(samples, "fleetctl_drains_total", fleet="default", actor_kind="operator") == 1
    failures = {
        (dict(labels)["fleet"], dict(labels)["cause"]): value
        for (name, labels), value in samples.items()
        if name == "fleetctl_node_failures_total"
    }
    assert failures == {("default", "xid 48"): 3, ("default", "xid 79"): 1, ("default", "check nccl-allreduce"): 1}

    # Restarts are their bad node's fleet's: all three off default's nodes.
    assert sample(samples, "fleetctl_job_restarts_total", fleet="default", status="succeeded") == 2
    assert sample(samples, "fleetctl_job_restarts_total", fleet="default", status="failed") == 1
    assert sample(samples, "fleetctl_job_restart_latency_seconds_count", fleet="default") == 2
    assert sample(samples, "fleetctl_job_restart_latency_seconds_sum", fleet="default") == 210
    assert [
        sample(samples, "fleetctl_job_restart_latency_seconds_bucket", fleet="default", le=le)
        for le in ("60.0", "120.0", "300.0")
    ] == [0, 2, 2]
    # sim-3 waits in the queue, no restart of fleetctl's under way; the other reasons read 0.
    assert {dict(labels)["reason"]: v for (name, labels), v in samples.items() if name == "fleetctl_jobs_pending"} == {
        "queued": 1,
        "restart_in_island": 0,
        "restart_fleet_wide": 0,
        "restart_unplaced": 0,
    }

    # Unhealthy nodes still in production, as `node list` shows them: n10's nccl-allreduce
    # failed (140 GB/s), n09's drain is held; blue's b02 is stalled, held, and never checked.
    conditions = {
        (dict(labels)["node"], dict(labels)["condition"])
        for (name, labels), v in samples.items()
        if name == "fleetctl_production_node_condition" and v == 1
    }
    assert conditions == {
        ("n10", "CheckFailed"),
        ("n09", "DrainHeld"),
        ("b02", "Stalled"),
        ("b02", "DrainHeld"),
        ("b02", "Unchecked"),
    }
    by_condition = {
        (dict(labels)["fleet"], dict(labels)["condition"]): v
        for (name, labels), v in samples.items()
        if name == "fleetctl_production_nodes_by_condition" and v
    }
    assert by_condition == {
        ("default", "CheckFailed"): 1,
        ("default", "DrainHeld"): 1,
        ("blue", "Stalled"): 1,
        ("blue", "DrainHeld"): 1,
        ("blue", "Unchecked"): 1,
    }
    assert {
        dict(labels)["condition"] for (name, labels) in samples if name == "fleetctl_production_nodes_by_condition"
    } == set(PRODUCTION_CONDITIONS)

    # Rule precision: n03's XID 79 removal and n07's first two XID 48 came back as they were
    # (unchanged); n07's third is in an open RMA and n05's nccl-allreduce still in maintenance.
    resolved = {
        (dict(labels)["rule"], dict(labels)["outcome"]): v
        for (name, labels), v in samples.items()
        if name == "fleetctl_rule_removals_resolved_total"
    }
    assert resolved == {("xid 79", "unchanged"): 1, ("xid 48", "unchanged"): 2}
    assert {
        dict(labels)["rule"]: v for (name, labels), v in samples.items() if name == "fleetctl_rule_removals_open"
    } == {"xid 48": 1, "check nccl-allreduce": 1}
    # The history's week ended long before this scrape: no node is a lemon now, in either fleet.
    assert {dict(labels)["fleet"]: v for (name, labels), v in samples.items() if name == "fleetctl_lemon_nodes"} == {
        "default": 0,
        "blue": 0,
    }

    assert sample(samples, "fleetctl_guard_decisions_total", fleet="default", decision="grant") == 4
    assert sample(samples, "fleetctl_guard_decisions_total", fleet="default", decision="deny") == 1
    # default: opened, then closed by an operator; blue: open.
    assert sample(samples, "fleetctl_breaker_open", fleet="default") == 0
    assert sample(samples, "fleetctl_breaker_open", fleet="blue") == 1


def _refusal(*, breaker_open: bool = False, failing: int = 0, fleet_out: int = 0, rack_out: int = 0) -> str:
    """The capacity guard's own refusal of a drain of n01, of rack r1 (8 nodes: 2 may be out)
    in a fleet of 48 (4 may be out; a storm is 10 failing)."""
    snapshot = FleetSnapshot(
        {"r1": RackCounts(8, rack_out, 8 - rack_out), "r2": RackCounts(40, fleet_out, 40 - fleet_out)}
    )
    decision = decide(
        GuardPolicy(),
        snapshot,
        RemovalRequest("n01", "r1", "xid 79", "t"),
        {f"f{i}": 0.0 for i in range(failing)},
        0.0,
        breaker_open,
    )
    assert not decision.granted
    return decision.reason


@pytest.mark.parametrize(
    "refusal, expected",
    [
        pytest.param(_refusal(breaker_open=True), "breaker", id="the breaker is open"),
        pytest.param(_refusal(failing=12), "storm_window", id="this request's storm opens it"),
        pytest.param(_refusal(fleet_out=4), "fleet_limit", id="the fleet's limit"),
        pytest.param(_refusal(rack_out=2), "rack_limit", id="the rack's limit"),
        pytest.param(checker_storm(GuardPolicy(), 9, 10), "breaker", id="a checker storm opened the breaker"),
        pytest.param(checker_storm(GuardPolicy(), 9, 10, AGENT_SILENCE), "breaker", id="agents fell silent"),
        pytest.param("rack r3 at its limit", "other", id="words the guard does not write"),
        pytest.param("", "other", id="no words"),
    ],
)
def test_what_holds_a_drain_is_a_bounded_class(refusal: str, expected: str) -> None:
    """held_by classifies the guard's refusals as the guard words them (capacity.decide,
    checker_storm), so a change of wording there fails here."""
    assert held_by(refusal) == expected
    assert expected in HELD_BY_CLASSES


def test_many_distinct_refusals_make_one_series_per_node(sqlite_url) -> None:
    """The guard words each refusal with its figures (a new text at every ask): the held drains
    are one series per node, with as many label values as HELD_BY_CLASSES, however many texts."""
    engine = get_engine(sqlite_url)
    since = NOW - timedelta(days=1)
    with Session(engine) as session:
        for i in range(20):
            session.add(
                Node(
                    name=f"h{i:02d}",
                    address=f"sim://h{i:02d}",
                    rack=f"r{i % 2}",
                    profile="h100-sxm",
                    state="production",
                    state_since=since,
                    created_at=since,
                )
            )
        for k in range(400):  # 20 asks per node, each refusal worded anew
            session.add(
                AutomationEvent(
                    kind="deny",
                    node_name=f"h{k % 20:02d}",
                    actor="lifecycle",
                    at=since + timedelta(seconds=k),
                    reason=(
                        f"rack limit: {k} of {k + 4} in r{k % 2} already unavailable"
                        if k % 3
                        else f"fleet limit: {k} of 20 already unavailable (max 2, 10%)"
                    )
                    + f"; ask {k}",
                    idempotency_key=f"deny-{k}",
                )
            )
        session.commit()
    server = exporter_server.serve(engine, 0, "127.0.0.1")
    try:
        samples = scrape(server.server_port)
    finally:
        server.shutdown()
    held = [dict(labels) for name, labels in samples if name == "fleetctl_node_drain_held_since_timestamp_seconds"]
    assert len(held) == 20 and {h["node"] for h in held} == {f"h{i:02d}" for i in range(20)}
    # The last refusal of each node (ask 380 + i) decides its class: k % 3 == 0 is the fleet's limit.
    assert {h["node"]: h["held_by"] for h in held} == {
        f"h{i:02d}": "fleet_limit" if (380 + i) % 3 == 0 else "rack_limit" for i in range(20)
    }
    # No label of any series carries a refusal's words.
    assert not [labels for _, labels in samples if any("limit:" in v for _, v in labels)]


def test_the_exporter_judges_production_nodes_as_node_list_does(sqlite_url) -> None:
    """Every production node's conditions in the exporter are those `node list` shows (view_store,
    the same conditions.conditions on the database's rows): on the history, with a reachability
    judgement that stands (n01), one from before the node's state (n02), an agent silence whose
    agent was heard since (n04), and default's hourly sweep (its history's checks are days old:
    Stale where no agent reports), then again after new rows (a second scrape)."""
    from fleetctl.db import queries, sweep_intervals
    from fleetctl.nodes.view_store import freshness, node_rows

    engine = get_engine(sqlite_url)
    history.seed(engine, NOW)
    seed_more(engine)
    now = datetime.now(UTC)
    sweep_intervals.record(engine, sweep_intervals.SweepSchedule("hourly", "default", 3600.0))
    collector = FleetCollector(engine, agent_silence_s=300.0)

    def judge(name: str, reason: str, actor: str, at: datetime) -> AutomationEvent:
        return AutomationEvent(
            kind="suspect",
            node_name=name,
            reason=reason,
            actor=actor,
            at=at,
            idempotency_key=f"suspect-{name}-{at.timestamp()}",
        )

    def compare() -> dict[str, set[str]]:
        (family,) = [f for f in collector.collect() if f.name == "fleetctl_production_node_condition"]
        exported: dict[str, set[str]] = {}
        for sample in family.samples:
            exported.setdefault(sample.labels["node"], set()).add(sample.labels["condition"])
        listed = {}
        for fleet in ("default", "blue"):
            fresh = freshness(engine, fleet, 300.0, datetime.now(UTC))
            for row in node_rows(
                engine,
                [n for n in queries.list_nodes(engine) if n.labels.get("fleet", "default") == fleet],
                False,
                fresh,
            ):
                if row["state"] == "production" and row["conditions"]:
                    listed[row["name"]] = {c["type"] for c in row["conditions"]}
        assert exported == listed
        return exported

    with Session(engine) as session:
        session.add_all(
            [
                judge("n01", "3 check runs in a row could not reach it", "reachability", now),
                judge("n02", "unreachable", "reachability", NOW - timedelta(days=20)),
                judge("n04", "agent silent for 400 s", queries.AGENT_SILENCE_ACTOR, now - timedelta(minutes=2)),
            ]
        )
        n04 = session.get(Node, next(n.id for n in queries.list_nodes(engine) if n.name == "n04"))
        n04.agent_seen_at = now  # heard again since it was judged
        session.add(n04)
        session.commit()
    found = compare()
    assert {"Suspect", "Stale"} <= found["n01"]
    assert "n04" not in found  # judged, but its agent was heard since, and reports: Ready
    assert "Suspect" not in found["n02"]  # judged before it entered production

    # New rows, a second scrape: a fresh check on n01, n04's agent now silent past the setting.
    with Session(engine) as session:
        session.add(
            CheckRun(
                node_name="n01",
                check_name="nvidia-smi-query",
                kind="x",
                status="pass",
                started_at=now,
                finished_at=now,
                idempotency_key="fresh-n01",
            )
        )
        n04 = session.get(Node, next(n.id for n in queries.list_nodes(engine) if n.name == "n04"))
        n04.agent_seen_at = now - timedelta(hours=1)
        session.add(n04)
        session.commit()
    found = compare()
    assert "Stale" not in found["n01"] and {"Suspect", "Stale"} <= found["n04"]


def test_lemon_nodes_are_counted_over_the_lemon_window_ending_now(sqlite_url) -> None:
    """The lemon gauge is the lemon rule's figure at the scrape (LemonPolicy.times_remediated):
    `lemon` was drained by automation three times in the last three days, each back through
    burn-in; `planned` was drained four times for maintenance (no remediation); `old` three
    times, but more than a lemon window ago."""
    engine = get_engine(sqlite_url)
    now = datetime.now(UTC)
    keys = iter(range(10_000))

    def moves(node: str, start: datetime, failure: str, actor_kind: str) -> list[NodeEvent]:
        path = [
            ("production", "draining", "drain"),
            ("draining", "maintenance", "drain_complete"),
            ("maintenance", "burn_in", "begin_burn_in"),
            ("burn_in", "admission", "begin_admission"),
            ("admission", "production", "enter_production"),
        ]
        if failure == "maintenance":  # an operator's planned drain ends with an undrain
            path = [*path[:2], ("maintenance", "production", "undrain")]
        return [
            NodeEvent(
                node_name=node,
                from_state=a,
                to_state=b,
                trigger=trigger,
                actor="t",
                actor_kind=actor_kind,
                failure=failure if trigger == "drain" else "",
                at=start + timedelta(minutes=10 * k),
                idempotency_key=f"e{next(keys)}",
            )
            for k, (a, b, trigger) in enumerate(path)
        ]

    with Session(engine) as session:
        for name in ("lemon", "planned", "old"):
            session.add(
                Node(
                    name=name,
                    address=f"sim://{name}",
                    rack="r1",
                    profile="h100-sxm",
                    state="production",
                    state_since=now - timedelta(hours=1),
                    created_at=now - timedelta(days=30),
                )
            )
        for day in (1, 2, 3):
            session.add_all(moves("lemon", now - timedelta(days=day), "xid 48", "automation"))
            session.add_all(moves("old", now - timedelta(days=10 + day), "xid 48", "automation"))
        for day in (1, 2, 3, 4):
            session.add_all(moves("planned", now - timedelta(days=day), "maintenance", "operator"))
        session.commit()

    def lemons(policy: LemonPolicy) -> float:
        (family,) = [f for f in FleetCollector(engine, lemon=policy).collect() if f.name == "fleetctl_lemon_nodes"]
        return {s.labels["fleet"]: s.value for s in family.samples}["default"]

    assert lemons(LemonPolicy(3, timedelta(days=7))) == 1  # lemon: 3 entries into maintenance to be remediated
    assert lemons(LemonPolicy(4, timedelta(days=7))) == 0  # not 4: planned's four drains are no remediation
    assert lemons(LemonPolicy(3, timedelta(days=14))) == 2  # a wider window takes old in


@pytest.mark.parametrize(
    "placement, expected",
    [
        (None, "queued"),  # no restart of fleetctl's under way: the scheduler's queue
        (IN_ISLAND, "restart_in_island"),
        (FLEET_WIDE, "restart_fleet_wide"),
        (NOT_PLACED, "restart_unplaced"),
        ("somewhere new", "restart_unplaced"),  # a placement this version does not know
    ],
)
def test_why_a_job_is_pending_is_a_bounded_class(placement, expected) -> None:
    assert pending_reason(placement) == expected and expected in PENDING_REASONS


def test_pending_jobs_say_why_they_wait(sqlite_url) -> None:
    """Three pending jobs: one queued, one restarted into its island, one restarted fleet-wide
    off a blue node (its fleet's); a restart that has finished says nothing of why a job waits."""
    engine = get_engine(sqlite_url)
    with Session(engine) as session:
        session.add(
            Node(
                name="g1",
                address="sim://g1",
                rack="r1",
                profile="h100-sxm",
                state="production",
                labels={"fleet": "blue"},
            )
        )
        for job in ("queued", "island", "fleet", "done"):
            session.add(Job(job_id=job, scheduler="sim", state="pending" if job != "done" else "running"))
        for job, placement, status, bad in (
            ("island", IN_ISLAND, "in_progress", "n1"),
            ("fleet", FLEET_WIDE, "in_progress", "g1"),
            ("queued", IN_ISLAND, "succeeded", "n1"),
            ("done", FLEET_WIDE, "in_progress", "n1"),
        ):
            session.add(
                JobRestart(
                    job_id=job,
                    scheduler="sim",
                    bad_nodes=[bad],
                    cause="xid 79",
                    actor="t",
                    restart_id=f"{job}-{status}",
                    fault_seen_at=NOW,
                    status=status,
                    placement=placement,
                    placement_detail=f"words about {job} that change every time",
                    workflow_id=f"job-restart/{job}/{status}",
                )
            )
        session.commit()
    (family,) = [f for f in FleetCollector(engine).collect() if f.name == "fleetctl_jobs_pending"]
    assert {(s.labels["fleet"], s.labels["reason"]): s.value for s in family.samples if s.value} == {
        ("default", "queued"): 1,
        ("default", "restart_in_island"): 1,
        ("blue", "restart_fleet_wide"): 1,
    }


def test_a_quiet_fleet_reads_zero_not_no_data(sqlite_url) -> None:
    """Nothing recorded yet: the served fleet's breaker is closed (0) and its budget is there."""
    engine = get_engine(sqlite_url)
    with Session(engine) as session:
        session.add(Node(name="n01", address="sim://n01", rack="r1", profile="h100-sxm", state="production"))
        session.add(
            JobRestart(
                job_id="j",
                scheduler="sim",
                bad_nodes=["n01"],
                cause="xid 79",
                actor="t",
                restart_id="1",
                fault_seen_at=NOW,
                running_at=NOW + timedelta(seconds=0.4),
                status="succeeded",
                workflow_id="job-restart/j/1",
            )
        )
        session.commit()
    server = exporter_server.serve(engine, 0, "127.0.0.1", fleet="green")
    try:
        samples = scrape(server.server_port)
    finally:
        server.shutdown()
    assert {dict(labels)["fleet"]: v for (name, labels), v in samples.items() if name == "fleetctl_breaker_open"} == {
        "green": 0
    }
    assert sample(samples, "fleetctl_capacity_headroom", fleet="green", scope="fleet", rack="") == 1
    assert sample(samples, "fleetctl_capacity_headroom", fleet="green", scope="rack", rack="r1") == 1
    # A restart in 0.4 s reads as under half a second, not as "somewhere below 10 s".
    assert [
        sample(samples, "fleetctl_job_restart_latency_seconds_bucket", fleet="green", le=le) for le in ("0.25", "0.5")
    ] == [0, 1]


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def targets(dash: dict) -> list[tuple[dict, dict]]:
    return [(panel, target) for panel in dash["panels"] for target in panel["targets"]]


def concrete(expr: str, dash: dict) -> str:
    """`expr` as Grafana sends it to Prometheus, with every template variable matching all."""
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    for variable in dash["templating"]["list"]:
        expr = expr.replace(f"${variable['name']}", ".*")
    assert "$" not in expr, f"a variable neither Grafana's nor the dashboard's: {expr}"
    return expr


def test_dashboard_has_what_grafana_requires() -> None:
    """The fields Grafana's dashboard schema (schemaVersion 39) requires of a dashboard, its
    panels, targets and template variables; panels on the 24-column grid without overlap."""
    dash = dashboard()
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 36
    variables = dash["templating"]["list"]
    assert all(v["name"] and v["type"] in ("datasource", "query", "custom", "constant") for v in variables)
    fleet = next(v for v in variables if v["name"] == "fleet")
    assert re.search(r"label_values\(fleetctl_\w+, fleet\)", fleet["query"]["query"])
    assert {p["id"] for p in dash["panels"]} == set(range(1, len(dash["panels"]) + 1))
    cells: set[tuple[int, int]] = set()
    for panel in dash["panels"]:
        assert panel["type"] in ("timeseries", "stat", "table", "bargauge", "gauge") and panel["title"], panel
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in "xywh") and grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {
            (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        assert panel["targets"] and len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
        assert all(t["expr"] and t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])
    for _, target in targets(dash):
        concrete(target["expr"], dash)


def served_with_more(url: str):
    engine = get_engine(url)
    history.seed(engine, NOW)
    seed_more(engine)
    return exporter_server.serve(engine, 0, "127.0.0.1")


def test_grafana_dashboard_only_uses_exported_metrics(sqlite_url) -> None:
    server = served_with_more(sqlite_url)
    try:
        samples = scrape(server.server_port)
    finally:
        server.shutdown()
    exported = {name for name, _ in samples}
    exprs = [target["expr"] for _, target in targets(dashboard())]
    used = {name for expr in exprs for name in re.findall(r"\bfleetctl_\w+", expr)}
    assert exprs and used <= exported, used - exported
    # A series with a fleet label is asked for the fleets chosen in the dashboard's variable.
    by_fleet = {name for name, labels in samples if "fleet" in dict(labels)}
    assert {"fleetctl_breaker_open", "fleetctl_capacity_headroom", "fleetctl_nodes_by_rack"} <= by_fleet
    for expr in exprs:
        for name in set(re.findall(r"\bfleetctl_\w+", expr)) & by_fleet:
            assert re.search(rf'\b{name}\{{[^}}]*fleet=~"\$fleet"', expr), expr
    # Each of the exporter's families appears on the dashboard.
    families = {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in exported}
    assert families <= {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in used}, families


def test_metrics_serve_command(sqlite_url) -> None:
    history.seed(get_engine(sqlite_url), NOW)
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetctl.cli.main",
            "--db-url",
            sqlite_url,
            "metrics",
            "serve",
            "--port",
            str(port),
            "--address",
            "127.0.0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "FLEETCTL_FLEET": "green"},
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                samples = scrape(port)
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "fleetctl metrics serve did not answer"
                time.sleep(0.1)
        assert sample(samples, "fleetctl_nodes", fleet="green", state="production") == 9
        # The configured fleet's breaker and budget (no node carries a fleet label: all are green's).
        assert sample(samples, "fleetctl_breaker_open", fleet="green") == 0
        assert sample(samples, "fleetctl_capacity_limit", fleet="green", scope="fleet", rack="") == 1
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    assert f"http://127.0.0.1:{port}/metrics" in stderr


@pytest.mark.usefixtures("needs_prometheus")
def test_the_exposition_passes_promtool_check_metrics(sqlite_url) -> None:
    """Prometheus's own linter on what a scrape serves: names, units, counters' _total, help."""
    server = served_with_more(sqlite_url)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0 and not checked.stdout.strip() and not checked.stderr.strip(), (
        checked.stdout + checked.stderr
    )


@pytest.mark.usefixtures("needs_prometheus")
def test_every_expression_parses_in_promtool(tmp_path) -> None:
    dash = dashboard()
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {
                        "record": f"fleetctl_dashboard:panel{panel['id']}_{target['refId']}",
                        "expr": concrete(target["expr"], dash),
                    }
                    for panel, target in targets(dash)
                ],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    checked = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules['groups'][0]['rules'])} rules found" in checked.stdout


@pytest.mark.usefixtures("needs_prometheus")
def test_real_prometheus_answers_every_panel(sqlite_url, tmp_path) -> None:
    """A real Prometheus scrapes the exporter once; every panel's query is valid, and each
    panel that shows the present (instant, no rate) has data: no "No data" on a quiet fleet."""
    exporter = served_with_more(sqlite_url)
    try:
        with running_prometheus(tmp_path, [f"127.0.0.1:{exporter.server_port}"]) as prometheus:
            wait_for_result(prometheus, "fleetctl_breaker_open", bool)
            dash = dashboard()
            answers = {}
            for panel, target in targets(dash):
                answer = query(prometheus, concrete(target["expr"], dash))
                assert answer["status"] == "success", (panel["title"], answer)
                answers[panel["title"], target["refId"]] = answer["data"]["result"]
                if target.get("instant") and not re.search(r"\b(rate|increase)\(", target["expr"]):
                    assert answer["data"]["result"], f"{panel['title']}: No data"
            out = answers["Nodes out of production, and why", "A"]
            assert sorted(r["metric"]["node"] for r in out) == ["b01", "n05", "n07"]
            # The health panels: n09, n10 and b02 are unhealthy in production; a rule whose removals
            # all came back as they were reads 0 (not missing); sim-3 waits in the queue; no lemon now.
            assert [r["value"][1] for r in answers["Unhealthy nodes in production", "A"]] == ["3"]
            assert {
                (r["metric"]["node"], r["metric"]["condition"])
                for r in answers["Unhealthy nodes in production, by condition", "A"]
            } == {
                ("n10", "CheckFailed"),
                ("n09", "DrainHeld"),
                ("b02", "Stalled"),
                ("b02", "DrainHeld"),
                ("b02", "Unchecked"),
            }
            assert {r["metric"]["rule"]: r["value"][1] for r in answers["Rule precision", "A"]} == {
                "xid 48": "0",
                "xid 79": "0",
            }
            assert {r["metric"]["rule"]: r["value"][1] for r in answers["Rule precision", "B"]} == {
                "xid 48": "1",
                "check nccl-allreduce": "1",
            }
            assert {r["metric"]["reason"]: r["value"][1] for r in answers["Pending jobs and why", "A"]}["queued"] == "1"
            assert [r["value"][1] for r in answers["Lemon nodes", "A"]] == ["0"]
            assert [r["metric"]["node"] for r in answers["RMAs awaiting an operator", "A"]] == ["b01"]
            assert {r["metric"]["fleet"]: r["value"][1] for r in answers["Automation circuit breaker", "A"]} == {
                "default": "0",
                "blue": "1",
            }
            # The fleet variable's choices, as Grafana asks Prometheus for label_values(SERIES, fleet).
            series, label = re.fullmatch(
                r"label_values\((\w+), (\w+)\)",
                next(v for v in dash["templating"]["list"] if v["name"] == "fleet")["query"]["query"],
            ).groups()
            url = f"{prometheus}/api/v1/label/{label}/values?" + urllib.parse.urlencode({"match[]": series})
            with urllib.request.urlopen(url, timeout=10) as response:
                assert sorted(json.loads(response.read())["data"]) == ["blue", "default"]
    finally:
        exporter.shutdown()
