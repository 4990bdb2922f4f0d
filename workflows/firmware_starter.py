"""The client side of firmware roll-outs: plan, start, resume, abort, watch."""

from __future__ import annotations

import uuid

from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError

from fleetctl import firmware
from fleetctl.config import Settings
from fleetctl.db import firmware as db
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from workflows.firmware_rollout import (
    FirmwareRollout,
    RolloutCommand,
    RolloutInput,
    RolloutStatus,
    rollout_workflow_id,
)


class RolloutRefused(RuntimeError):
    pass


def drifting_nodes(settings: Settings, baseline: firmware.Baseline) -> list[str]:
    """Nodes whose reported firmware differs from the baseline, by name (the roll-out order)."""
    engine = get_engine(settings.db_url)
    reported = db.reported_components(engine)
    return [n.name for n in queries.list_nodes(engine) if n.state != "retired"
            and firmware.node_drift(baseline, n.name, n.profile, reported.get(n.name)).status == "drift"]


async def start_rollout(client: Client, settings: Settings, baseline: firmware.Baseline, source: str, canary: int,
                        batch: str, max_failures: int, dry_run: bool, actor: str) -> tuple[str, RolloutInput]:
    nodes = drifting_nodes(settings, baseline)
    batches = firmware.plan_batches(nodes, canary, batch)
    engine = get_engine(settings.db_url)
    stored = db.set_baseline(engine, baseline.name, baseline.to_dict(), source, actor)
    rollout_id = f"fw-{uuid.uuid4().hex[:8]}"
    db.create_rollout(engine, rollout_id=rollout_id, baseline_id=stored.id, canary=canary, batch=str(batch),
                      max_failures=max_failures, dry_run=dry_run, total=len(nodes), created_by=actor,
                      detail=f"{len(nodes)} nodes in {len(batches)} batches")
    inp = RolloutInput(rollout_id, stored.id, batches, max_failures, dry_run, actor)
    await client.start_workflow(FirmwareRollout.run, inp, id=rollout_workflow_id(rollout_id), task_queue=settings.task_queue)
    return rollout_id, inp


async def rollout_command(client: Client, rollout_id: str, command: str, actor: str) -> str:
    handle = client.get_workflow_handle(rollout_workflow_id(rollout_id))
    update = FirmwareRollout.resume if command == "resume" else FirmwareRollout.abort
    try:
        return await handle.execute_update(update, RolloutCommand(actor))
    except WorkflowUpdateFailedError as exc:
        raise RolloutRefused(getattr(exc.cause, "message", None) or str(exc.cause or exc)) from None
    except RPCError as exc:
        raise RolloutRefused(f"roll-out {rollout_id}: {str(exc).splitlines()[0] if str(exc) else 'not found'}") from None


async def rollout_progress(client: Client, rollout_id: str) -> RolloutStatus:
    return await client.get_workflow_handle(rollout_workflow_id(rollout_id)).query(FirmwareRollout.progress)
