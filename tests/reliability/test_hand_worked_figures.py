"""Hand-worked histories that pin each figure: one small fleet written into the
database per case, as the workflows and `fleetctl rma close` write it, and the report's MTTF,
MTTR, lemon table and rule precision (and the exporter's failure and repair counts, and `node
show`'s times remediated) checked against arithmetic written out here.

Every node is created at -51 h, admitted at -50 h; the window is [0 h, 100 h]. The definitions
these follow are fleetctl.reliability.metrics' docstring; the report states them in words
(fleetctl.reliability.report.definitions), and the last test holds that it does.

- A maintenance window: four planned drains of one node (`node drain --maintenance`) are no
  failure, no repair, no remediation: MTTF and MTTR have nothing to divide by, no lemon, no rule.
- A false alarm: an active check drains a node, its recheck passes on the node as it was, it
  returns with nothing repaired: one failure (the drain was automation's), one repair of 4 h,
  and for the rule `check nccl-allreduce` one removal *unchanged*: precision 0 / (0 + 1) = 0 %.
- A confirmed RMA: an XID 48 sends the node to the vendor, who replaces a GPU (`rma close
  --replaced GPU3`): one removal *confirmed*, 1 / (1 + 0) = 100 %; still out, so no repair.
- A no-fault-found RMA beside it: a second XID 48 node comes back from the vendor with nothing
  found (`rma close --no-fault-found`) and returns through burn-in: *unchanged*, so the rule's
  precision is 1 / (1 + 1) = 50 %, below 100 % (it read 100 % when every RMA confirmed).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import count

import pytest
from sqlmodel import Session

from fleetctl.db import remediation as db
from fleetctl.db.engine import get_engine
from fleetctl.db.models import Node, NodeEvent, RmaRecord
from fleetctl.reliability.exporter_server import FleetCollector
from fleetctl.reliability.report import definitions, render_html
from fleetctl.reliability.report_store import build_report
from fleetctl.remediation.lemons import LemonPolicy

T0 = datetime(2025, 3, 1, tzinfo=UTC)
NOW_H = 100.0
LEMON = LemonPolicy(3, timedelta(days=7))


def h(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


class Fleet:
    """Rows written straight into the tables, each node's moves in order."""

    def __init__(self, engine) -> None:
        self.engine, self.rows, self.keys = engine, [], count()
        self.collector = FleetCollector(engine)  # one exporter, scraped again as the history goes on
        self.state: dict[str, tuple[str, datetime]] = {}

    def node(self, name: str) -> Fleet:
        self.move(name, -51, "new", "burn_in", "begin_burn_in", actor_kind="automation")
        self.move(name, -50.5, "burn_in", "admission", "begin_admission", actor_kind="automation")
        return self.move(name, -50, "admission", "production", "enter_production", actor_kind="automation")

    def move(
        self,
        node: str,
        at: float,
        from_state: str,
        to_state: str,
        trigger: str,
        cause: str = "",
        actor_kind: str = "automation",
        failure: str = "",
    ) -> Fleet:
        self.rows.append(
            NodeEvent(
                node_name=node,
                from_state=from_state,
                to_state=to_state,
                trigger=trigger,
                cause=cause or trigger,
                actor="alice@console" if actor_kind == "operator" else "lifecycle",
                actor_kind=actor_kind,
                at=h(at),
                idempotency_key=f"ev-{next(self.keys)}",
                failure=failure,
            )
        )
        self.state[node] = (to_state, h(at))
        return self

    def automated_drain(self, node: str, at: float, failure: str, cause: str) -> Fleet:
        self.move(node, at, "production", "draining", "drain", cause, failure=failure)
        return self.move(node, at + 1, "draining", "maintenance", "drain_complete", "drained: " + cause)

    def through_burn_in(self, node: str, at: float, from_state: str = "maintenance") -> Fleet:
        """Back to production in 2 h: burn-in at `at`, admission +1 h, production +2 h."""
        self.move(node, at, from_state, "burn_in", "begin_burn_in", "runbook: recheck")
        self.move(node, at + 1, "burn_in", "admission", "begin_admission")
        return self.move(node, at + 2, "admission", "production", "enter_production", "admission: burn-in passed")

    def rma(self, node: str, at: float) -> Fleet:
        self.move(node, at, "maintenance", "rma", "send_to_rma", "runbook: ecc-uncorrectable-rma")
        self.rows.append(
            RmaRecord(
                node_name=node, reason="XID 48", opened_by="runbook", opened_at=h(at), idempotency_key=f"rma-{node}"
            )
        )
        return self

    def write(self) -> None:
        with Session(self.engine) as session:
            for name, (state, since) in self.state.items():
                session.add(
                    Node(
                        name=name,
                        address=f"sim://{name}",
                        rack="r1",
                        profile="h100-sxm",
                        scheduler="sim",
                        state=state,
                        state_since=since,
                        created_at=h(-51),
                    )
                )
            session.add_all(self.rows)
            session.commit()

    def close_rma(self, node: str, replaced: str | None) -> None:
        """`fleetctl rma close --replaced PART`, or `--no-fault-found` (None), through its store."""
        (record,) = db.rma_records(self.engine, node_name=node)
        db.close_rma(self.engine, record.id, replaced, "vendor@desk")


@pytest.fixture
def fleet(sqlite_url) -> Fleet:
    return Fleet(get_engine(sqlite_url))


def report(fleet: Fleet) -> dict:
    return build_report(fleet.engine, h(0), h(NOW_H), lemon_threshold=LEMON.threshold, lemon_window=LEMON.window)


def exported(fleet: Fleet) -> tuple[float, float, float, dict, dict]:
    """The exporter's failures, repairs and repair seconds, rule outcomes resolved and removals
    open, over all its history, as a scrape of the fleet's one exporter reads them now."""
    families = {f.name: f for f in fleet.collector.collect()}
    failures = sum(s.value for s in families["fleetctl_node_failures"].samples if s.name.endswith("_total"))
    repairs = {
        s.name: s.value for s in families["fleetctl_node_repair_seconds"].samples if s.name.endswith(("_count", "_sum"))
    }
    resolved = {
        (s.labels["rule"], s.labels["outcome"]): s.value for s in families["fleetctl_rule_removals_resolved"].samples
    }
    still_open = {s.labels["rule"]: s.value for s in families["fleetctl_rule_removals_open"].samples}
    return (
        failures,
        repairs["fleetctl_node_repair_seconds_count"],
        repairs["fleetctl_node_repair_seconds_sum"],
        resolved,
        still_open,
    )


def test_a_maintenance_window_is_no_failure_no_repair_no_lemon(fleet) -> None:
    """Four planned drains of n1 (PDU work), each 1 h draining and 1 h in maintenance, undrained
    by the operator: 92 h in production, 8 h of planned work."""
    fleet.node("n1")
    for at in (10, 30, 50, 70):
        fleet.move("n1", at, "production", "draining", "drain", "PDU maintenance", "operator", failure="maintenance")
        fleet.move("n1", at + 1, "draining", "maintenance", "drain_complete", "drained: PDU maintenance")
        fleet.move("n1", at + 2, "maintenance", "production", "undrain", "PDU done", "operator")
    fleet.write()

    r = report(fleet)
    s = r["summary"]
    assert s["production_hours"] == pytest.approx(NOW_H - 4 * 2)  # 92 h
    assert s["failures"] == 0 and s["mttf_hours"] is None  # 92 h / 0 failures: nothing to divide by
    assert s["repairs"] == 0 and s["mttr_hours"] is None  # a return from planned work is no repair
    # Availability does count planned work as capacity lost: 92 / (92 + 4 draining + 4 maintenance).
    assert s["availability"] == pytest.approx(92 / 100)
    assert r["failures"] == [] and r["lemons"] == [] and r["rule_precision"] == []
    # `node show`'s figure, the lemon rule's: none of the four entries into maintenance was to be remediated.
    assert db.times_remediated(fleet.engine, "n1", LEMON, h(NOW_H)) == 0
    assert exported(fleet) == (0, 0, 0, {}, {})


def test_a_false_alarm_is_a_failure_whose_removal_is_unchanged(fleet) -> None:
    """An active check's drain of n1 at 10 h, maintenance from 11 h, its recheck passes and it
    is back at 14 h, nothing repaired (its runbook's one live run rechecked, no reset or reboot)."""
    fleet.node("n1").node("n2")
    nccl = "active check quick: nccl-allreduce: busbw 310 GB/s below the floor of 360 GB/s"
    fleet.automated_drain("n1", 10, "check nccl-allreduce", nccl).through_burn_in("n1", 12)
    fleet.write()
    db.start_run(
        fleet.engine,
        run_key="r-n1",
        node_name="n1",
        runbook="check-failed-recheck",
        event={},
        mode="live",
        actor="lifecycle",
        started_at=h(11.5),
    )
    db.record_step(
        fleet.engine,
        run_key="r-n1",
        node_name="n1",
        step_index=0,
        name="recheck",
        action="run_checks",
        status="passed",
        params={},
        detail="",
        started_at=h(11.5),
        finished_at=h(11.9),
    )

    r = report(fleet)
    s = r["summary"]
    # Production: n1 100 - (14 - 10) = 96 h, n2 100 h.
    assert s["production_hours"] == pytest.approx(196)
    assert s["failures"] == 1 and s["mttf_hours"] == pytest.approx(196 / 1)  # an automated drain is a failure
    assert s["repairs"] == 1 and s["mttr_hours"] == pytest.approx(14 - 10)  # out from 10 h to 14 h
    # Nothing was repaired and the node came back as it was: the removal is unchanged, a likely
    # false alarm; precision = confirmed / (confirmed + unchanged) = 0 / (0 + 1).
    assert r["rule_precision"] == [
        {
            "rule": "check nccl-allreduce",
            "removals": 1,
            "confirmed": 0,
            "unchanged": 1,
            "open": 0,
            "precision": 0.0,
            "usually_wrong": False,
        }
    ]  # 1 resolved: under 3
    # Remediated once (one live run, one entry into maintenance to be remediated): 1 < 3, no lemon.
    assert db.times_remediated(fleet.engine, "n1", LEMON, h(NOW_H)) == 1 and r["lemons"] == []
    assert exported(fleet) == (1, 1, 4 * 3600, {("check nccl-allreduce", "unchanged"): 1}, {})


def test_a_repair_before_the_return_confirms_the_removal(fleet) -> None:
    """The false alarm's history, but its runbook's GPU reset passed at 11.9 h, before the
    return at 14 h: the removal is confirmed (a reset that was not needed cannot be told from
    one that fixed the node), 1 / (1 + 0); a dry run's reset would have repaired nothing."""
    fleet.node("n1")
    fleet.automated_drain("n1", 10, "xid 79", "health: XID 79: GPU has fallen off the bus").through_burn_in("n1", 12)
    fleet.write()
    for run_key, mode in (("dry", "dry_run"), ("live", "live")):
        db.start_run(
            fleet.engine,
            run_key=run_key,
            node_name="n1",
            runbook="xid-79",
            event={},
            mode=mode,
            actor="lifecycle",
            started_at=h(11.5),
        )
        before = (report(fleet)["rule_precision"][0]["confirmed"], exported(fleet)[3])
        db.record_step(
            fleet.engine,
            run_key=run_key,
            node_name="n1",
            step_index=0,
            name="reset",
            action="gpu_reset",
            status="passed",
            params={},
            detail="",
            started_at=h(11.5),
            finished_at=h(11.9),
        )
    # Before the live run's reset was recorded, the dry run's had confirmed nothing.
    assert before == (0, {("xid 79", "unchanged"): 1})
    r = report(fleet)
    assert r["rule_precision"] == [
        {
            "rule": "xid 79",
            "removals": 1,
            "confirmed": 1,
            "unchanged": 0,
            "open": 0,
            "precision": 1.0,
            "usually_wrong": False,
        }
    ]
    # A fresh exporter reads the whole history once: the removal resolves confirmed.
    fleet.collector = FleetCollector(fleet.engine)
    assert exported(fleet)[3:] == ({("xid 79", "confirmed"): 1}, {})


def test_a_confirmed_rma_scores_its_rule_right(fleet) -> None:
    """An XID 48 on n1 at 10 h, maintenance 11 h, to the vendor at 12 h, who replaces GPU3."""
    fleet.node("n1")
    fleet.automated_drain("n1", 10, "xid 48", "health: XID 48: double-bit ECC").rma("n1", 12)
    fleet.write()
    fleet.close_rma("n1", "GPU3")

    r = report(fleet)
    s = r["summary"]
    assert s["production_hours"] == pytest.approx(10)  # in production from 0 h to 10 h
    assert s["failures"] == 1 and s["mttf_hours"] == pytest.approx(10 / 1)
    assert s["repairs"] == 0 and s["mttr_hours"] is None  # still out: no return to time
    assert r["rule_precision"] == [
        {
            "rule": "xid 48",
            "removals": 1,
            "confirmed": 1,
            "unchanged": 0,
            "open": 0,
            "precision": 1.0,
            "usually_wrong": False,
        }
    ]  # 1 / (1 + 0)
    assert r["lemons"] == []
    assert exported(fleet) == (1, 0, 0, {("xid 48", "confirmed"): 1}, {})


def test_a_no_fault_found_rma_takes_its_rule_below_100_percent(fleet) -> None:
    """n1 as in the confirmed case; n2 the same XID 48 rule at 10 h, to the vendor at 12 h, who
    finds no fault; back from RMA through burn-in at 38 h, in production at 40 h."""
    fleet.node("n1").node("n2")
    for name in ("n1", "n2"):
        fleet.automated_drain(name, 10, "xid 48", "health: XID 48: double-bit ECC").rma(name, 12)
    fleet.through_burn_in("n2", 38, from_state="rma")
    fleet.write()
    fleet.close_rma("n1", "GPU3")
    before = report(fleet)["rule_precision"]
    assert (before[0]["confirmed"], before[0]["unchanged"], before[0]["open"]) == (1, 0, 1)  # n2's RMA still open
    assert exported(fleet)[3:] == ({("xid 48", "confirmed"): 1}, {"xid 48": 1})
    fleet.close_rma("n2", None)

    r = report(fleet)
    s = r["summary"]
    # Production: n1 10 h; n2 10 h + (100 - 40) h = 70 h.
    assert s["production_hours"] == pytest.approx(80)
    assert s["failures"] == 2 and s["mttf_hours"] == pytest.approx(80 / 2)
    assert s["repairs"] == 1 and s["mttr_hours"] == pytest.approx(40 - 10)  # n2 out from 10 h to 40 h
    # n1 confirmed, n2 unchanged (no fault found): 1 / (1 + 1).
    assert r["rule_precision"] == [
        {
            "rule": "xid 48",
            "removals": 2,
            "confirmed": 1,
            "unchanged": 1,
            "open": 0,
            "precision": 0.5,
            "usually_wrong": False,
        }
    ]
    assert r["lemons"] == []
    # The exporter counts n2's removal once, when its RMA closed: 1 confirmed, 1 unchanged, none open.
    assert exported(fleet) == (2, 1, 30 * 3600, {("xid 48", "confirmed"): 1, ("xid 48", "unchanged"): 1}, {})


def test_the_report_states_each_figures_definition(fleet) -> None:
    """What these tests count, in the report's words: on the page and in its definitions."""
    fleet.node("n1")
    fleet.write()
    r = report(fleet)
    words = dict(definitions(r))
    assert "planned work" in words["Failure"] and "is not a failure" in words["Failure"]
    assert "divided by the failures" in words["MTTF (mean time to failure)"]
    assert "nor returns from planned work" in words["MTTR (mean time to repair)"]
    assert "a drain for planned work is none" in words["Lemon node"]
    precision = words["Rule precision"]
    assert "replaced a part" in precision and "no fault found" in precision
    assert "confirmed / (confirmed + unchanged)" in precision and "passed on it as it was" in precision
    page = render_html(r)
    assert all(term in page for term in words)
