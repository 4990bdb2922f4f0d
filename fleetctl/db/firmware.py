"""Firmware baselines, roll-outs and their per-node results, and nodes' reported firmware."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from fleetctl.checks.result import CheckResult, Status
from fleetctl.db import queries
from fleetctl.db.models import CheckRun, FirmwareBaseline, FirmwareRollout, FirmwareRolloutNode, utcnow
from fleetctl.remediation import firmware


def set_baseline(engine: Engine, name: str, document: dict[str, Any], source: str, created_by: str) -> FirmwareBaseline:
    with Session(engine) as session:
        row = FirmwareBaseline(name=name, document=document, source=source, created_by=created_by)
        session.add(row)
        session.commit()
        session.refresh(row)
        return row


def current_baseline(engine: Engine) -> FirmwareBaseline | None:
    with Session(engine) as session:
        return session.exec(select(FirmwareBaseline).order_by(col(FirmwareBaseline.id).desc())).first()


def get_baseline(engine: Engine, baseline_id: int) -> FirmwareBaseline | None:
    with Session(engine) as session:
        return session.get(FirmwareBaseline, baseline_id)


def reported_components(engine: Engine, node: str | None = None) -> dict[str, dict[str, str]]:
    """Node -> component -> version, from the latest firmware check of each kind on each node."""
    with Session(engine) as session:
        query = select(CheckRun).where(CheckRun.kind == "firmware", col(CheckRun.status).in_(["pass", "warn", "fail"]))
        if node:
            query = query.where(CheckRun.node_name == node)
        latest: dict[tuple[str, str], CheckRun] = {}
        for run in session.exec(query.order_by(col(CheckRun.id))):
            latest[(run.node_name, run.check_name)] = run
    components: dict[str, dict[str, str]] = {}
    for (name, _check), run in latest.items():
        if isinstance(run.metrics.get("components"), dict):
            components.setdefault(name, {}).update(run.metrics["components"])
    return components


class FirmwareSource(str, Enum):
    """Firmware reported beside the checks' inventories, each recorded as a check run of kind
    firmware under its own name, which the drift reads alike with the checks' own."""

    BMC = "bmc-firmware"  # the node's BMC, read where the drift is computed
    REPORT = "firmware-report"  # an inventory read elsewhere (nvfwupd), `fleetctl firmware report`


def record_firmware(
    engine: Engine,
    node: str,
    source: FirmwareSource,
    result: CheckResult,
    raw_output: str,
    started_at: datetime,
    workflow_id: str,
    key: str,
) -> None:
    """Record a firmware inventory of `node` as judged (once per `key`). An ERROR result with
    no output is a BMC that could not be read; with output, output that could not be judged."""
    judged = result.to_dict()
    run = CheckRun(
        node_name=node,
        check_name=source.value,
        kind="firmware",
        status=result.status.value,
        metrics=judged["metrics"],
        findings=judged["findings"],
        reason=result.reason,
        raw_output=raw_output,
        error_kind=None if result.status is not Status.ERROR else "unjudgeable" if raw_output else "bmc",
        started_at=started_at,
        finished_at=utcnow(),
        workflow_id=workflow_id,
        idempotency_key=key,
    )
    queries.insert_once(engine, run, CheckRun.idempotency_key, key)


def create_rollout(engine: Engine, **fields: Any) -> FirmwareRollout:
    with Session(engine) as session:
        row = FirmwareRollout(**fields)
        session.add(row)
        session.commit()
        session.refresh(row)
        return row


def drifting_nodes(engine: Engine, baseline: firmware.Baseline) -> list[str]:
    """Nodes whose reported firmware differs from the baseline, by name (the roll-out order)."""
    reported = reported_components(engine)
    return [
        n.name
        for n in queries.list_nodes(engine)
        if n.state != "retired"
        and firmware.node_drift(baseline, n.name, n.profile, reported.get(n.name)).status == "drift"
    ]


@dataclass(frozen=True)
class RecordedRollout:
    """A roll-out as recorded, before its workflow starts: its id, its baseline's row, and the
    drifting nodes in batches (canary first)."""

    rollout_id: str
    baseline_id: int
    batches: list[list[str]]


def record_rollout(
    engine: Engine,
    baseline: firmware.Baseline,
    source: str,
    canary: int,
    batch: str,
    max_failures: int,
    dry_run: bool,
    actor: str,
) -> RecordedRollout:
    """Record the baseline (it becomes the current one) and a roll-out of it over the nodes that
    drift from it now."""
    nodes = drifting_nodes(engine, baseline)
    batches = firmware.plan_batches(nodes, canary, batch)
    stored = set_baseline(engine, baseline.name, baseline.to_dict(), source, actor)
    if stored.id is None:
        raise RuntimeError(f"baseline {baseline.name}: stored without an id")
    rollout_id = f"fw-{uuid.uuid4().hex[:8]}"
    create_rollout(
        engine,
        rollout_id=rollout_id,
        baseline_id=stored.id,
        canary=canary,
        batch=str(batch),
        max_failures=max_failures,
        dry_run=dry_run,
        total=len(nodes),
        created_by=actor,
        detail=f"{len(nodes)} nodes in {len(batches)} batches",
    )
    return RecordedRollout(rollout_id, stored.id, batches)


def get_rollout(engine: Engine, rollout_id: str) -> FirmwareRollout | None:
    with Session(engine) as session:
        return session.exec(select(FirmwareRollout).where(FirmwareRollout.rollout_id == rollout_id)).first()


def rollouts(engine: Engine, status: str | None = None) -> list[FirmwareRollout]:
    with Session(engine) as session:
        query = select(FirmwareRollout).order_by(col(FirmwareRollout.id).desc())
        if status:
            query = query.where(FirmwareRollout.status == status)
        return list(session.exec(query))


def update_rollout(engine: Engine, rollout_id: str, **fields: Any) -> None:
    with Session(engine) as session:
        row = session.exec(select(FirmwareRollout).where(FirmwareRollout.rollout_id == rollout_id)).one()
        for key, value in fields.items():
            setattr(row, key, value)
        row.updated_at = utcnow()
        session.add(row)
        session.commit()


def record_node(
    engine: Engine, rollout_id: str, node: str, batch_index: int, status: str, detail: str, components: dict[str, Any]
) -> None:
    """Upsert one node's result in a roll-out (a retried activity writes the same row)."""
    with Session(engine) as session:
        row = session.exec(
            select(FirmwareRolloutNode).where(
                FirmwareRolloutNode.rollout_id == rollout_id, FirmwareRolloutNode.node_name == node
            )
        ).first()
        row = row or FirmwareRolloutNode(rollout_id=rollout_id, node_name=node, batch_index=batch_index, status=status)
        row.status, row.detail, row.components, row.batch_index, row.updated_at = (
            status,
            detail,
            components,
            batch_index,
            utcnow(),
        )
        session.add(row)
        session.commit()


def rollout_nodes(engine: Engine, rollout_id: str) -> list[FirmwareRolloutNode]:
    with Session(engine) as session:
        query = select(FirmwareRolloutNode).where(FirmwareRolloutNode.rollout_id == rollout_id)
        return list(
            session.exec(query.order_by(col(FirmwareRolloutNode.batch_index), col(FirmwareRolloutNode.node_name)))
        )
