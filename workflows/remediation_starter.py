"""The client side of remediation: pick a runbook, start a Remediation, wait for it."""

from __future__ import annotations

import uuid

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from fleetctl.config import Settings
from fleetctl.runbooks import Event, Runbook
from workflows.remediation import Remediation, RemediationInput, RemediationResult


class RemediationAlreadyRunning(RuntimeError):
    pass


def remediation_id(node: str) -> str:
    """One live remediation per node at a time; dry runs get their own ids and never block."""
    return f"remediation/{node}"


def mode_for(settings: Settings, dry_run: bool) -> str:
    return "dry_run" if dry_run else "shadow" if settings.remediation_shadow else "live"


def is_critical(event: Event) -> bool:
    if event.kind != "xid" or event.code is None:
        return False
    from checks.xid import xid_action

    return xid_action(event.code).severity == "critical"


async def start_remediation(client: Client, settings: Settings, node: str, runbook: Runbook, event: Event,
                            actor: str, dry_run: bool = False) -> WorkflowHandle:
    mode = mode_for(settings, dry_run)
    workflow_id = remediation_id(node) if mode == "live" else f"{remediation_id(node)}/{mode}-{uuid.uuid4().hex[:8]}"
    try:
        return await client.start_workflow(
            Remediation.run,
            RemediationInput(node, runbook.to_dict(), event.to_dict(), mode, actor, is_critical(event)),
            id=workflow_id, task_queue=settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        )
    except WorkflowAlreadyStartedError:
        raise RemediationAlreadyRunning(f"{node}: a remediation is already running ({workflow_id})") from None


async def run_remediation(client: Client, settings: Settings, node: str, runbook: Runbook, event: Event,
                          actor: str, dry_run: bool = False) -> RemediationResult:
    handle = await start_remediation(client, settings, node, runbook, event, actor, dry_run)
    return await handle.result()
