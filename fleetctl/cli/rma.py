"""`fleetctl rma ...`: RMA records and their evidence bundles; close one when the part is back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from fleetctl.cli import context
from fleetctl.cli.output import (
    EXIT_OPERATIONAL,
    EXIT_USAGE,
    OUTPUT_OPTION,
    Column,
    OutputFormat,
    age,
    column_table,
    emit,
    fail,
    free_text,
    stdout_console,
    within,
)
from fleetctl.durations import when
from fleetctl.text import failure_message, printable

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from fleetctl.db.models import RmaRecord

app = typer.Typer(
    help="RMA records: list, show the evidence, confirm or reject a held one, close.", no_args_is_help=True
)


def _row(r: RmaRecord) -> dict[str, Any]:
    from fleetctl.remediation.rma import rma_outcome

    return {
        "id": r.id,
        "node": r.node_name,
        "status": r.status,
        "outcome": rma_outcome(r.status, r.replaced),
        "reason": r.reason,
        "opened_at": r.opened_at,
        "opened_by": r.opened_by,
        "remediation_run": r.remediation_run,
        "webhook": r.webhook_status,
        "replaced": r.replaced,
        "closed_at": r.closed_at,
        "closed_by": r.closed_by,
        "held_reason": r.held_reason,
        "decided_by": r.decided_by,
        "decided_at": r.decided_at,
    }


RMA_COLUMNS = (
    Column("ID", lambda r: r["id"], whole=True),
    Column("NODE", lambda r: r["node"], whole=True),
    Column("STATUS", lambda r: r["status"]),
    Column("OUTCOME", lambda r: r["outcome"].replace("_", " ")),
    Column("AGE", lambda r: age(r["opened_at"])),
    Column("REASON", lambda r: r["reason"]),
    Column("REPLACED", lambda r: r["replaced"] or ""),
    Column("OPENED", lambda r: when(r["opened_at"]), wide=True),
    Column("BY", lambda r: r["opened_by"], wide=True),
    # Why automation held it for an operator (awaiting_confirmation), and who answered.
    Column("HELD", lambda r: r["held_reason"] or "", wide=True),
    Column("ANSWERED BY", lambda r: r["decided_by"] or "", wide=True),
)


@app.command("list")
def list_rmas(
    ctx: typer.Context,
    status: str | None = typer.Option(
        None, "--status", help="awaiting_confirmation (held for an operator), open, closed or rejected"
    ),
    node: str | None = typer.Option(None, "--node"),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """RMA records, newest first."""
    from fleetctl.db.remediation import rma_records

    rows = [_row(r) for r in rma_records(context.engine(ctx), status, node)]
    emit(rows, output, lambda rs, wide: column_table(RMA_COLUMNS, rs, wide), empty="No RMA records.")


@app.command("show")
def show(
    ctx: typer.Context,
    given: str = typer.Argument(..., metavar="ID", help="the RMA's id (fleetctl rma list)"),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """The evidence bundle: Markdown in a terminal, the full JSON with -o json."""
    from fleetctl.db import remediation as db
    from fleetctl.remediation import rma

    engine = context.engine(ctx)
    rma_id = _rma_id(engine, given)
    record = db.get_rma(engine, rma_id)
    if record is None:
        fail(f"no RMA record {rma_id}")
    # The remediation runs as they ended, not as they were when the record was opened.
    keys = [r.get("run") for r in record.evidence.get("remediation", [])]
    current = {
        run.run_key: rma.remediation_entry(run, db.steps(engine, run.run_key)) for run in db.runs_by_key(engine, keys)
    }
    s = context.settings(ctx)
    evidence = rma.with_current_runs(record.evidence, current, (s.bmc_password, s.webhook_token))
    if output in (OutputFormat.json, OutputFormat.yaml):
        emit({**_row(record), "evidence": evidence}, output)
        return
    from rich.markdown import Markdown

    stdout_console(unbounded_when_redirected=False).print(Markdown(rma.render_markdown(evidence, record.id)))
    closed = (
        f", replaced {record.replaced}" if record.replaced else ", no fault found" if record.status == "closed" else ""
    )
    typer.echo(printable(f"status: {record.status}{closed}" + (f" ({record.closed_by})" if record.closed_by else "")))


def _rma_id(engine: Engine, given: str) -> int:
    """An RMA's id as typed; anything else (a node's name, most often) is one line naming the
    ids there are for it, and exit 2."""
    from fleetctl.db.remediation import rma_records

    if given.isascii() and given.isdecimal():
        # Said as every bounded argument says it (cli.output.within); 20 digits are past 2**63
        # already, and int() of a long enough string refuses to convert at all.
        if len(given) > 19 or not 1 <= int(given) <= 2**63 - 1:
            fail(f"ID must be between 1 and {2**63 - 1}, not {given[:80]}", EXIT_USAGE)
        return int(given)
    ids = [str(r.id) for r in rma_records(engine, node_name=given)] if len(given) <= 253 else []
    named = printable(given[:80], keep_newlines=False)
    fail(
        f"{named!r} is not an RMA id; "
        + (f"{named}'s RMAs: {', '.join(ids)}" if ids else "see `fleetctl rma list`")
        + (f" (fleetctl rma show {ids[0]})" if ids else ""),
        EXIT_USAGE,
    )


@app.command("close")
def close(
    ctx: typer.Context,
    rma_id: int = typer.Argument(..., metavar="ID", callback=within(1, 2**63 - 1)),
    replaced: str | None = typer.Option(
        None,
        "--replaced",
        callback=free_text(required=True),
        help='what the vendor replaced, e.g. "GPU3": the RMA confirmed its fault',
    ),
    no_fault_found: bool = typer.Option(
        False, "--no-fault-found", help="the vendor found nothing wrong: the removal behind it was a false alarm"
    ),
) -> None:
    """Close an RMA, saying how it ended (--replaced PART or --no-fault-found: rule precision
    scores the removal behind it by that): the node is back and goes through burn-in before
    it takes work again."""
    from fleetctl.db.remediation import RmaAlreadyClosed, RmaStatusConflict, close_rma
    from workflows.client import request_phase

    if (replaced is None) == (not no_fault_found):
        fail("say how the RMA ended: --replaced PART or --no-fault-found (one of them)", EXIT_USAGE)
    s = context.settings(ctx)
    try:
        record = close_rma(context.engine(ctx), rma_id, replaced, s.identity())
    except (LookupError, RmaAlreadyClosed, RmaStatusConflict) as exc:
        fail(str(exc).strip("'\""))

    async def go() -> tuple[str, bool, str]:
        client = await context.temporal_client(ctx)
        return await request_phase(client, record.node_name, "admit", s.identity(), "burn-in")

    _node, accepted, message = context.run_async(go())
    typer.echo(f"RMA {rma_id} closed ({f'{replaced} replaced' if replaced else 'no fault found'})")
    if not accepted:
        fail(f"{record.node_name}: not sent to burn-in: {message}", EXIT_OPERATIONAL)
    typer.echo(f"{record.node_name}: burn-in queued ({message})")


@app.command("confirm")
def confirm(ctx: typer.Context, rma_id: int = typer.Argument(..., metavar="ID", callback=within(1, 2**63 - 1))) -> None:
    """Send an RMA that automation held for an operator (a correlated burst: status
    awaiting_confirmation): the node goes to rma and the RMA is opened (the webhook)."""
    _answer(ctx, rma_id, confirm=True)


@app.command("reject")
def reject(ctx: typer.Context, rma_id: int = typer.Argument(..., metavar="ID", callback=within(1, 2**63 - 1))) -> None:
    """Do not send an RMA that automation held for an operator: nothing goes to the vendor
    and the node goes back through burn-in (a driver, firmware or checker fault behind the
    burst, once fixed, lets it pass; a real fault fails it again)."""
    _answer(ctx, rma_id, confirm=False)


def _answer(ctx: typer.Context, rma_id: int, confirm: bool) -> None:
    """The held RMA's run takes the answer (its decide_rma update) and acts on it; a record
    held by none, or answered already, changes nothing."""
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError

    from fleetctl.db.remediation import RmaStatusConflict, awaiting_rma
    from workflows.api import RMA_DECISION_UPDATE, RmaDecided, RmaDecision

    s = context.settings(ctx)
    try:
        record = awaiting_rma(context.engine(ctx), rma_id)
    except (LookupError, RmaStatusConflict) as exc:
        fail(str(exc).strip("'\""))
    # The run key is the Remediation's workflow id and run id (workflows.definitions.remediation.run_key_for).
    workflow_id, _, run_id = (record.remediation_run or "").rpartition("@")

    async def go() -> RmaDecided:
        client = await context.temporal_client(ctx)
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        # temporalio types an update called by name as Any, whatever its result_type.
        decided: RmaDecided = await handle.execute_update(
            RMA_DECISION_UPDATE, RmaDecision(rma_id, confirm, s.identity()), result_type=RmaDecided
        )
        return decided

    try:
        decided = context.run_async(go())
    except WorkflowUpdateFailedError as exc:
        fail(failure_message(exc))  # the run's refusal names the RMA
    except RPCError as exc:
        fail(f"RMA {rma_id}: the run that holds it ({record.remediation_run}) does not answer: {exc.message}")
    typer.echo(printable(decided.detail))
