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
        "decided_reason": r.decided_reason,
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
    Column("WHY", lambda r: r["decided_reason"] or "", wide=True),
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

    rma_id = _rma_id(ctx, given)
    engine = context.engine(ctx)
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

    # What an operator needs first (how it stands, why, what answers it), then the evidence.
    for line in status_lines(record):
        typer.echo(printable(line))
    stdout_console().print(Markdown(rma.render_markdown(evidence, record.id)))


def status_lines(record: RmaRecord) -> list[str]:
    """The lines `rma show` leads with: the status, why it stands so, and the commands that
    answer it."""
    from fleetctl.remediation.rma import AWAITING_CONFIRMATION, CLOSED, OPEN

    closed = (
        f", replaced {record.replaced}" if record.replaced else ", no fault found" if record.status == CLOSED else ""
    )
    lines = [f"status: {record.status}{closed}" + (f" ({record.closed_by})" if record.closed_by else "")]
    lines.append(f"reason: {record.reason}")
    if record.status == AWAITING_CONFIRMATION:
        lines.append(f"held: {record.held_reason or 'for an operator'}")
        lines.append(
            f"answer: fleetctl rma confirm {record.id} --reason TEXT | fleetctl rma reject {record.id} --reason TEXT"
        )
    elif record.decided_by:
        said = f": {record.decided_reason}" if record.decided_reason else ""
        lines.append(f"answered by {record.decided_by}{said}")
    if record.status == OPEN:
        lines.append(f"when the part is back: fleetctl rma close {record.id} --replaced PART | --no-fault-found")
    return lines


def _rma_id(ctx: typer.Context, given: str) -> int:
    """An RMA's id as typed; anything else (a node's name, most often) is one line naming the
    ids there are for it, and exit 2."""
    from fleetctl.db.remediation import rma_records

    if given.isascii() and given.isdecimal():
        # Said as every bounded argument says it (cli.output.within); 20 digits are past 2**63
        # already, and int() of a long enough string refuses to convert at all.
        if len(given) > 19 or not 1 <= int(given) <= 2**63 - 1:
            fail(f"ID must be between 1 and {2**63 - 1}, not {given[:80]}", EXIT_USAGE)
        return int(given)
    ids = [str(r.id) for r in rma_records(context.engine(ctx), node_name=given)] if len(given) <= 253 else []
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
    from fleetctl.workflows.client import request_phase

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


RMA_IDS = typer.Argument(None, metavar="ID", help="the held RMAs' ids (fleetctl rma list)", show_default=False)
ALL_HELD = typer.Option(False, "--all-held", help="every RMA of the fleet held for an operator")


@app.command("confirm")
def confirm(
    ctx: typer.Context,
    rma_ids: list[int] | None = RMA_IDS,
    all_held: bool = ALL_HELD,
    reason: str | None = typer.Option(
        None, "--reason", callback=free_text(), help="why it is sent, recorded with the answer"
    ),
) -> None:
    """Send RMAs that automation held for an operator (a correlated burst: status
    awaiting_confirmation): each node goes to rma and its RMA is opened (the webhook)."""
    _answer_each(ctx, _held_ids(ctx, rma_ids, all_held), confirm=True, reason=reason or "")


@app.command("reject")
def reject(
    ctx: typer.Context,
    rma_ids: list[int] | None = RMA_IDS,
    all_held: bool = ALL_HELD,
    reason: str | None = typer.Option(
        None,
        "--reason",
        callback=free_text(required=True),
        help='why nothing goes to the vendor, recorded with the answer (e.g. "driver 550.90 bug")',
    ),
) -> None:
    """Do not send RMAs that automation held for an operator: nothing goes to the vendor and
    each node goes back through burn-in (a driver, firmware or checker fault behind the
    burst, once fixed, lets it pass; a real fault fails it again)."""
    if reason is None:
        fail("--reason must say why the RMAs are not sent (it is recorded with the answer)", EXIT_USAGE)
    _answer_each(ctx, _held_ids(ctx, rma_ids, all_held), confirm=False, reason=reason)


# More ids than any burst holds: a typo'd shell glob, not an answer.
MAX_ANSWERED = 1000


def _held_ids(ctx: typer.Context, rma_ids: list[int] | None, all_held: bool) -> list[int]:
    """The ids answered: those given (each in range, each once, in the order given), or with
    --all-held every one the fleet holds for an operator; one of the two."""
    from fleetctl.db.remediation import rma_records
    from fleetctl.remediation.rma import AWAITING_CONFIRMATION

    if all_held == bool(rma_ids):
        fail("name the RMAs (ID...) or say --all-held, one of the two", EXIT_USAGE)
    if all_held:
        held = [r.id for r in rma_records(context.engine(ctx), status=AWAITING_CONFIRMATION) if r.id is not None]
        if not held:
            fail("no RMA awaits an operator (fleetctl rma list)", EXIT_USAGE)
        return held
    given = list(dict.fromkeys(rma_ids or []))
    if len(given) > MAX_ANSWERED:
        fail(f"at most {MAX_ANSWERED} RMAs in one answer, not {len(given)}", EXIT_USAGE)
    for rma_id in given:
        if not 1 <= rma_id <= 2**63 - 1:
            fail(f"ID must be between 1 and {2**63 - 1}, not {rma_id}", EXIT_USAGE)
    return given


def _answer_each(ctx: typer.Context, rma_ids: list[int], confirm: bool, reason: str) -> None:
    """Answer every RMA in `rma_ids`; each one's outcome on a line of its own. One that
    cannot be answered does not stop the others; the command exits non-zero if any could not.
    An RMA already answered the same way is "already so": said, and not a failure."""
    failed = 0
    for rma_id in rma_ids:
        try:
            typer.echo(printable(_answer(ctx, rma_id, confirm, reason)))
        except AnswerRefused as exc:
            if len(rma_ids) == 1:
                fail(str(exc))
            failed += 1
            typer.echo(f"error: {printable(str(exc), keep_newlines=False)}", err=True)
    if failed:
        fail(f"{failed} of {len(rma_ids)} RMAs not answered", EXIT_OPERATIONAL if failed < len(rma_ids) else 1)


class AnswerRefused(RuntimeError):
    """One RMA that could not be answered, and why (one line)."""


def _answer(ctx: typer.Context, rma_id: int, confirm: bool, reason: str) -> str:
    """The held RMA's run takes the answer (its decide_rma update) and acts on it; what it
    did, in a line. A record held by none, or answered otherwise already, changes nothing
    (AnswerRefused)."""
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError

    from fleetctl.db.remediation import RmaStatusConflict, awaiting_rma, get_rma
    from fleetctl.remediation.rma import OPEN, REJECTED
    from fleetctl.workflows.api import RMA_DECISION_UPDATE, RmaDecided, RmaDecision

    s = context.settings(ctx)
    engine = context.engine(ctx)
    answered = get_rma(engine, rma_id)
    if answered is not None and answered.status == (OPEN if confirm else REJECTED) and answered.decided_by:
        return f"RMA {rma_id} is already {'confirmed' if confirm else 'rejected'} (by {answered.decided_by})"
    try:
        record = awaiting_rma(engine, rma_id)
    except (LookupError, RmaStatusConflict) as exc:
        raise AnswerRefused(str(exc).strip("'\"")) from None
    # The run key is the Remediation's workflow id and run id (workflows.definitions.remediation.run_key_for).
    workflow_id, _, run_id = (record.remediation_run or "").rpartition("@")

    async def go() -> RmaDecided:
        client = await context.temporal_client(ctx)
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        # temporalio types an update called by name as Any, whatever its result_type.
        decided: RmaDecided = await handle.execute_update(
            RMA_DECISION_UPDATE, RmaDecision(rma_id, confirm, s.identity(), reason), result_type=RmaDecided
        )
        return decided

    try:
        return context.run_async(go()).detail
    except WorkflowUpdateFailedError as exc:
        raise AnswerRefused(failure_message(exc)) from None  # the run's refusal names the RMA
    except RPCError as exc:
        raise AnswerRefused(
            f"RMA {rma_id}: the run that holds it ({record.remediation_run}) does not answer: {exc.message}"
        ) from None
