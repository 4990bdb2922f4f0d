"""An RMA held for an operator (a correlated burst, status awaiting_confirmation) is visible to
monitoring: the exporter serves one series per held record, gone once an operator answers it;
the alert FleetctlRmaAwaitingOperator fires once one has waited past its bound (promtool's rule
tests), and a real Prometheus scraping the exporter finds, with the rule's own expression, the
record that waited past it and not the one held a minute ago."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from sqlmodel import Session

from fleetctl.db.engine import get_engine
from fleetctl.db.models import Node
from fleetctl.db.remediation import decide_rma, open_rma
from fleetctl.reliability import exporter_server
from fleetctl.reliability.exporter_server import FleetCollector
from tests.support.prometheus import PROMTOOL, needs_prometheus, running_prometheus, wait_for_result  # noqa: F401

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "fleetctl-alerts.yaml"
SERIES = "fleetctl_rma_awaiting_confirmation_since_timestamp_seconds"
ALERT = "FleetctlRmaAwaitingOperator"


def _rule() -> dict:
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    return next(r for r in rules if r.get("alert") == ALERT)


def _bound_s() -> float:
    """The bound the rule holds a held RMA to: what follows its `>` (the rule says why)."""
    return float(_rule()["expr"].rsplit(">", 1)[1])


def _fleet(engine, now: datetime) -> None:
    with Session(engine) as session:
        session.add_all(
            [
                Node(
                    name=name,
                    address=f"sim://{name}",
                    rack="r4",
                    profile="h100-sxm",
                    scheduler="sim",
                    state="maintenance",
                    labels={"fleet": "blue"},
                    state_since=now,
                )
                for name in ("gpu-1", "gpu-2", "gpu-3")
            ]
        )
        session.commit()


def _rma(engine, node: str, held: bool, at: datetime) -> int:
    record, _ = open_rma(
        engine,
        node_name=node,
        reason="xid 79",
        remediation_run=None,
        evidence={},
        evidence_markdown="",
        opened_by="lifecycle",
        idempotency_key=f"rma-{node}",
        held_reason="correlated burst: 7 nodes with critical events within 10 min" if held else "",
    )
    with Session(engine) as session:  # held at `at`: the exporter reads the record's own time
        stored = session.get(type(record), record.id)
        stored.opened_at = at
        session.add(stored)
        session.commit()
    return record.id


def _held(collector: FleetCollector) -> dict[tuple[str, str, str, str], float]:
    family = next(f for f in collector.collect() if f.name == SERIES)
    return {(s.labels["fleet"], s.labels["node"], s.labels["rack"], s.labels["rma"]): s.value for s in family.samples}


def test_each_held_rma_is_a_series_until_an_operator_answers_it(sqlite_url) -> None:
    engine = get_engine(sqlite_url)
    now = datetime.now(UTC)
    _fleet(engine, now)
    first, second = (_rma(engine, n, True, now - timedelta(hours=h)) for n, h in (("gpu-1", 3), ("gpu-2", 1)))
    _rma(engine, "gpu-3", False, now)  # opened at once: it waits for no operator
    collector = FleetCollector(engine)
    assert _held(collector) == {
        ("blue", "gpu-1", "r4", str(first)): (now - timedelta(hours=3)).timestamp(),
        ("blue", "gpu-2", "r4", str(second)): (now - timedelta(hours=1)).timestamp(),
    }
    decide_rma(engine, first, True, "alice@console")  # confirmed: sent, open
    assert set(_held(collector)) == {("blue", "gpu-2", "r4", str(second))}
    decide_rma(engine, second, False, "alice@console")  # rejected: nothing sent
    assert _held(collector) == {}


@pytest.mark.usefixtures("needs_prometheus")
def test_the_alert_fires_once_a_held_rma_waited_past_the_bound_and_resolves_when_answered(tmp_path) -> None:
    bound_min = int(_bound_s() // 60)
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    # Held at t=0 (the series' value: when), answered after bound + 10 min: gone.
                    {
                        "series": f'{SERIES}{{fleet="blue",node="gpu-7",rack="r4",rma="12"}}',
                        "values": f"0x{bound_min + 10} stale",
                    },
                ],
                "alert_rule_test": [
                    {"eval_time": f"{bound_min - 1}m", "alertname": ALERT, "exp_alerts": []},
                    {
                        "eval_time": f"{bound_min + 1}m",
                        "alertname": ALERT,
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "warning",
                                    "fleet": "blue",
                                    "node": "gpu-7",
                                    "rack": "r4",
                                    "rma": "12",
                                },
                                "exp_annotations": {
                                    "summary": "fleetctl RMA 12 of node gpu-7 (fleet blue) has waited 1h 1m 0s for an operator",
                                    "description": "It was held as part of a correlated burst (usually a driver, firmware or "
                                    "checker fault, not broken parts): nothing goes to the vendor and the node "
                                    "stays drained until an operator answers. `fleetctl rma list --status "
                                    "awaiting_confirmation` shows why; `fleetctl rma confirm 12` sends it, "
                                    "`fleetctl rma reject 12` ends it.",
                                },
                            }
                        ],
                    },
                    {"eval_time": f"{bound_min + 20}m", "alertname": ALERT, "exp_alerts": []},  # answered
                ],
            }
        ],
    }
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.usefixtures("needs_prometheus")
def test_a_real_prometheus_finds_with_the_rules_expression_only_the_rma_past_the_bound(sqlite_url, tmp_path) -> None:
    engine = get_engine(sqlite_url)
    now = datetime.now(UTC)
    _fleet(engine, now)
    waited = _rma(engine, "gpu-1", True, now - timedelta(seconds=_bound_s() * 2))
    _rma(engine, "gpu-2", True, now - timedelta(minutes=1))  # held a minute ago: not yet
    exporter = exporter_server.serve(engine, 0, "127.0.0.1")
    try:
        with running_prometheus(tmp_path, [f"127.0.0.1:{exporter.server_port}"]) as prometheus:
            wait_for_result(prometheus, SERIES, lambda result: len(result) == 2)
            past = wait_for_result(prometheus, _rule()["expr"], bool)
            assert [(r["metric"]["node"], r["metric"]["rma"]) for r in past] == [("gpu-1", str(waited))]
            assert float(past[0]["value"][1]) >= _bound_s() * 2
    finally:
        exporter.shutdown()
