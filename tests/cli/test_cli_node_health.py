"""What an operator sees in `node list` and `node show`: health, reason, jobs, one row per
check, on a fleet written to a real database as the workflows write it."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.connections.temporal_server import free_port
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import AutomationEvent, CheckRun, Job, utcnow
from fleetctl.inventory.parse import NodeSpec

PATH = ["new", "burn_in", "admission", "production"]
TRIGGERS = ["begin_burn_in", "begin_admission", "enter_production"]


def _move(engine, name: str, to: str, trigger: str, cause: str, actor: str = "lifecycle", at=None) -> None:
    node = queries.get_node(engine, name)
    queries.record_transition(
        engine,
        node_name=name,
        from_state=node.state,
        to_state=to,
        trigger=trigger,
        cause=cause,
        actor=actor,
        actor_kind="operator",
        workflow_id=f"node/{name}",
        run_id="r",
        expected_version=node.state_version,
        idempotency_key=uuid.uuid4().hex,
        at=at,
    )


def _to_production(engine, name: str, at) -> None:
    for to, trigger in zip(PATH[1:], TRIGGERS, strict=False):
        _move(engine, name, to, trigger, trigger, at=at)


def _check(engine, node: str, check: str, status: str, at, error_kind=None, reason="") -> None:
    key = uuid.uuid4().hex
    queries.insert_once(
        engine,
        CheckRun(
            node_name=node,
            check_name=check,
            kind="x",
            status=status,
            reason=reason or status,
            error_kind=error_kind,
            started_at=at,
            finished_at=at,
            idempotency_key=key,
        ),
        CheckRun.idempotency_key,
        key,
    )


def _guard(engine, node: str, kind: str, reason: str, at) -> None:
    key = uuid.uuid4().hex
    queries.insert_once(
        engine,
        AutomationEvent(kind=kind, node_name=node, reason=reason, actor="sweep", at=at, idempotency_key=key),
        AutomationEvent.idempotency_key,
        key,
    )


@pytest.fixture
def fleet(db_url):
    """Six nodes, each with one thing to see (the problems an operator's try-out found)."""
    engine = get_engine(db_url)
    names = ["gpu-001", "gpu-002", "gpu-003", "gpu-004", "gpu-005", "gpu-006"]
    queries.upsert_nodes(engine, [NodeSpec(n, f"sim://{n}", "h100-sxm", rack="r1", scheduler="sim") for n in names])
    start = utcnow() - timedelta(hours=1)
    for n in names:
        _to_production(engine, n, start)
    # gpu-001: every check timed out for twenty minutes, 19 sweeps
    for i in range(19):
        at = start + timedelta(minutes=30 + i)
        _check(engine, "gpu-001", "dcgm-diag-r1", "error", at, "timeout", "timeout: ssh gpu-001: Connection timed out")
        _check(
            engine, "gpu-001", "nvidia-smi-query", "error", at, "timeout", "timeout: ssh gpu-001: Connection timed out"
        )
    # gpu-002: healthy
    _check(engine, "gpu-002", "nvidia-smi-query", "pass", start + timedelta(minutes=50))
    # gpu-003: ECC failure, its drain held by the guard three times
    _check(engine, "gpu-003", "nvidia-smi-query", "fail", start + timedelta(minutes=40), reason="uncorrectable ECC 2")
    for i in range(3):
        _guard(
            engine,
            "gpu-003",
            "deny",
            "sweep: nvidia-smi-query: fleet limit: 1 of 6 already unavailable (max 1, 10%)",
            start + timedelta(minutes=41 + i),
        )
    # gpu-004: drained by an operator, waits for job sim-1
    _move(engine, "gpu-004", "draining", "drain", "operator: swap optics", actor="alice@console")
    with __import__("sqlmodel").Session(engine) as s:
        s.add(Job(job_id="sim-1", scheduler="sim", state="running", nodes=["gpu-004", "gpu-005"]))
        s.commit()
    # gpu-006: held once, then granted: no longer held
    _guard(engine, "gpu-006", "deny", "held", start + timedelta(minutes=41))
    _guard(engine, "gpu-006", "grant", "granted", start + timedelta(minutes=42))
    return db_url


def _cli(db_url, *args, columns: int = 80, input: str | None = None):
    """No Temporal here: a port nothing listens on (never whatever runs on this host's default)."""
    return CliRunner(env={"COLUMNS": str(columns)}).invoke(
        app, ["--db-url", db_url, "--temporal-address", f"127.0.0.1:{free_port()}", *args], input=input
    )


def test_node_list_json_says_what_is_wrong(fleet) -> None:
    r = _cli(fleet, "node", "list", "-o", "json")
    assert r.exit_code == 0, r.output
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert rows["gpu-001"]["health"] == "Unreachable"
    assert rows["gpu-001"]["conditions"][0]["type"] == "Unreachable"
    assert rows["gpu-002"]["health"] == "Ready"
    assert rows["gpu-003"]["health"] == "CheckFailed(1),DrainHeld"
    assert rows["gpu-003"]["drain_held"]["refusals"] == 3
    assert rows["gpu-003"]["reason"].startswith("drain held: sweep: nvidia-smi-query: fleet limit")
    assert rows["gpu-004"]["reason"].startswith("operator: swap optics [alice@console@")
    assert rows["gpu-004"]["jobs"] == ["sim-1"] and rows["gpu-005"]["jobs"] == ["sim-1"]
    assert rows["gpu-006"]["drain_held"] is None and rows["gpu-006"]["health"] == "Unchecked"


def test_node_list_table_has_health_jobs_reason(fleet) -> None:
    narrow = _cli(fleet, "node", "list").stdout.splitlines()
    assert len(narrow) == 7 and all(len(line) <= 80 for line in narrow)  # one line per node in 80 columns
    assert "CheckFailed(1),DrainHeld" in next(
        line for line in narrow if line.split()[0] == "gpu-003"
    )  # health never cut
    r = _cli(fleet, "node", "list", columns=200)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATE", "HEALTH", "RACK", "AGE", "JOBS", "REASON"]
    line = {line.split()[0]: line for line in lines[1:]}
    assert line["gpu-001"].split()[1:3] == ["production", "Unreachable"]
    assert "DrainHeld" in line["gpu-003"] and "drain held: sweep" in line["gpu-003"]
    assert line["gpu-004"].split()[1] == "draining" and "sim-1" in line["gpu-004"] and "swap optics" in line["gpu-004"]


def test_node_show_one_row_per_check(fleet) -> None:
    data = json.loads(_cli(fleet, "node", "show", "gpu-001", "-o", "json").stdout)
    assert [(c["check"], c["status"], c["runs"]) for c in data["checks"]] in (
        [("dcgm-diag-r1", "error", 19), ("nvidia-smi-query", "error", 19)],
        [("nvidia-smi-query", "error", 19), ("dcgm-diag-r1", "error", 19)],
    )
    r = _cli(fleet, "node", "show", "gpu-001", columns=200)
    assert r.exit_code == 0, r.output
    assert r.stdout.count("Connection timed out") == 3  # the condition and one row per check, not 38 rows
    assert "Unreachable" in r.stdout
    # what the node's workflow is doing needs Temporal; the rest stands without it, and says so
    assert data["workflow"]["reachable"] is False and "workflow: unknown (cannot reach Temporal" in r.stdout
    held = _cli(fleet, "node", "show", "gpu-003", columns=200).stdout
    assert "DrainHeld" in held and "reason: drain held: sweep" in held


def test_state_filter_takes_several_and_operator_words(fleet) -> None:
    def names(*args):
        r = _cli(fleet, "node", "list", "-o", "json", *args)
        assert r.exit_code == 0, r.output
        return sorted(row["name"] for row in json.loads(r.stdout))

    assert names("--state", "draining") == ["gpu-004"]
    assert names("--state", "drain") == ["gpu-004"]
    assert len(names("--state", "production", "--state", "draining")) == 6  # both count, not the last
    assert len(names("--state", "production,draining")) == 6
    assert names("--state", "drained") == []
    r = _cli(fleet, "node", "list", "--state", "sideways")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "drained" in r.stderr


def test_operator_drain_past_the_automation_limit_warns_and_asks(fleet) -> None:
    # gpu-004 is out already: one of six is the fleet's and the rack's automation limit
    r = _cli(fleet, "node", "drain", "gpu-002", "gpu-003", "--reason", "swap optics", input="n\n")
    assert r.exit_code == 1
    assert "warning: fleet: 3 of 6 nodes out after this drain, past the automation limit of 1 (10%)" in r.stderr
    assert "warning: rack r1: 3 of 6 nodes out after this drain" in r.stderr
    assert "Drain anyway?" in r.stderr and r.stderr.strip().endswith("error: not drained")
    engine = get_engine(fleet)
    assert [queries.get_node(engine, n).state for n in ("gpu-002", "gpu-003")] == ["production", "production"]


def test_fleet_status_shows_budget_and_held_drains(fleet) -> None:
    r = _cli(fleet, "fleet", "status", "-o", "json")
    data = json.loads(r.stdout)
    fleet_budget, rack = data["budget"]
    assert (
        fleet_budget["scope"],
        fleet_budget["unavailable"],
        fleet_budget["serving"],
        fleet_budget["limit"],
        fleet_budget["headroom"],
    ) == ("fleet", 1, 6, 1, 0)
    assert (rack["scope"], rack["unavailable"], rack["limit"], rack["headroom"]) == ("rack r1", 1, 1, 0)
    assert [(h["node"], h["refusals"]) for h in data["held_drains"]] == [("gpu-003", 3)]
    assert "fleet limit" in data["held_drains"][0]["reason"]
    table = _cli(fleet, "fleet", "status", columns=160).stdout
    assert "capacity budget" in table
    assert re.search(r"drains held by the capacity guard: 1 node\s*$", table, re.M), table  # not "1 nodes"
    budget_line = next(line for line in table.splitlines() if "│ fleet" in line)
    assert [c.strip() for c in budget_line.split("│")[1:6]] == ["fleet", "1", "6", "1 (10%)", "0"]


def test_a_fresh_rma_stays_in_the_budget_operators_see(fleet) -> None:
    """fleet status and the drain prompt count as the guard does: a node sent to RMA within the
    storm window is still out (capacity.counted_state), not gone from the fleet."""
    engine = get_engine(fleet)
    _move(engine, "gpu-005", "draining", "drain", "xid 79")
    _move(engine, "gpu-005", "maintenance", "drain_complete", "drained")
    _move(engine, "gpu-005", "rma", "send_to_rma", "row-remap failure")
    fleet_budget, _ = json.loads(_cli(fleet, "fleet", "status", "-o", "json").stdout)["budget"]
    assert (fleet_budget["unavailable"], fleet_budget["serving"], fleet_budget["headroom"]) == (2, 6, -1)
    r = _cli(fleet, "node", "drain", "gpu-002", "--reason", "swap optics", input="n\n")
    assert "warning: fleet: 3 of 6 nodes out after this drain" in r.stderr


def test_draining_a_drained_node_is_done(fleet) -> None:
    r = _cli(fleet, "node", "drain", "gpu-004", "--reason", "again")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == "gpu-004: already draining"
    events = queries.node_events(get_engine(fleet), "gpu-004")
    assert events[-1].cause == "operator: swap optics"  # the first drain's reason stands


def test_fleet_status_lists_operator_commands(fleet) -> None:
    data = json.loads(_cli(fleet, "fleet", "status", "-o", "json").stdout)
    drain = data["recent_operator_commands"][0]
    assert (drain["node"], drain["trigger"], drain["actor"]) == ("gpu-004", "drain", "alice@console")
    assert "recent operator commands" in _cli(fleet, "fleet", "status", columns=160).stdout


def test_machine_output_is_iso_8601_utc_and_names_one_per_line(fleet) -> None:
    import re

    rows = json.loads(_cli(fleet, "node", "list", "-o", "json").stdout)
    iso_utc = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")
    assert all(iso_utc.match(r["state_since"]) for r in rows), [r["state_since"] for r in rows]
    assert iso_utc.match(rows[2]["drain_held"]["since"])
    names = _cli(fleet, "node", "list", "-o", "name", "--state", "production")
    assert names.exit_code == 0 and names.stdout.split() == ["gpu-001", "gpu-002", "gpu-003", "gpu-005", "gpu-006"]


def test_sort_by_a_field_and_age(fleet) -> None:
    r = _cli(fleet, "node", "list", "-o", "name", "--sort-by", "state_since")
    assert r.exit_code == 0 and r.stdout.split()[-1] == "gpu-004"  # drained last, so latest
    by_health = _cli(fleet, "node", "list", "-o", "name", "--sort-by", "health").stdout.split()
    assert by_health[:2] == ["gpu-003", "gpu-004"]  # CheckFailed..., then Maintenance (draining)
    bad = _cli(fleet, "node", "list", "--sort-by", "colour")
    assert bad.exit_code == 2 and "no such field (one of: name, state, health" in bad.stderr
    table = _cli(fleet, "node", "list", columns=200).stdout.splitlines()
    ages = {line.split()[0]: line.split()[4] for line in table[1:]}
    assert ages["gpu-001"] == "60m" and ages["gpu-004"].endswith("s")


def test_host_lists_as_input(fleet) -> None:
    r = _cli(fleet, "node", "drain", "gpu-[004,004]", "--reason", "again")
    assert r.exit_code == 0 and r.stdout.strip() == "gpu-004: already draining"
    bad = _cli(fleet, "node", "drain", "gpu-[9-1]", "--reason", "x")
    assert bad.exit_code == 2 and "runs backwards" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    unknown = _cli(fleet, "node", "drain", "gpu-[007-008]", "--reason", "x")
    assert unknown.exit_code == 1 and "unknown nodes: gpu-007, gpu-008" in unknown.stderr


def test_out_of_service_is_never_ready_and_suspect_since_the_first_judgement(db_url) -> None:
    """A node in RMA whose last checks passed once read `Ready`, so `node list | grep -v
    Ready` hid every RMA; a node judged suspect by each of three sweeps showed the last
    sweep's time as its `since`."""
    engine = get_engine(db_url)
    names = ["rma-1", "maint-1", "gone-1", "ok-1", "sus-1"]
    queries.upsert_nodes(engine, [NodeSpec(n, f"sim://{n}", "h100-sxm", rack="r1", scheduler="sim") for n in names])
    start = utcnow() - timedelta(hours=1)
    for n in names:
        _to_production(engine, n, start)
        _check(engine, n, "nvidia-smi-query", "pass", start + timedelta(minutes=5))
    _move(engine, "rma-1", "draining", "drain", "health: XID 79")
    _move(engine, "rma-1", "maintenance", "drain_complete", "drained: health: XID 79")
    _move(engine, "rma-1", "rma", "send_to_rma", "runbook: RMA: XID 79")
    _move(engine, "maint-1", "draining", "drain", "operator: PDU maintenance", actor="alice@console")
    _move(engine, "maint-1", "maintenance", "drain_complete", "drained: operator: PDU maintenance")
    _move(engine, "gone-1", "retired", "retire", "operator: decommissioned", actor="alice@console")
    first = start + timedelta(minutes=10)
    for i in range(3):  # three sweeps, each judging it unreachable again
        _guard(engine, "sus-1", "suspect", f"unreachable in sweep {i}", first + timedelta(minutes=5 * i))

    rows = {row["name"]: row for row in json.loads(_cli(db_url, "node", "list", "-o", "json").stdout)}
    assert {n: rows[n]["health"] for n in names} == {
        "rma-1": "InRMA",
        "maint-1": "Maintenance",
        "gone-1": "Retired",
        "ok-1": "Ready",
        "sus-1": "Suspect",
    }
    assert rows["rma-1"]["conditions"][0]["reason"] == "runbook: RMA: XID 79"
    suspect = next(c for c in rows["sus-1"]["conditions"] if c["type"] == "Suspect")
    assert (suspect["since"], suspect["reason"]) == (
        first.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "unreachable in sweep 2",
    )
    status = json.loads(_cli(db_url, "fleet", "status", "-o", "json").stdout)
    assert [(s["node"], s["since"]) for s in status["suspect"]] == [("sus-1", suspect["since"])]

    # As an operator filters the table: every node out of service survives `grep -v Ready`.
    table = _cli(db_url, "node", "list", columns=200).stdout.splitlines()
    assert {line.split()[0] for line in table[1:] if "Ready" not in line} == set(names) - {"ok-1"}
