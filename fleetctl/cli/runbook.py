"""`fleetctl runbook ...`: list, show and validate runbooks; run one for a node; the runs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from fleetctl.cli import context
from fleetctl.cli.node import MAX_XID
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
    simple_table,
    within,
)
from fleetctl.durations import when

if TYPE_CHECKING:
    from rich.console import Group

    from fleetctl.db.models import RemediationRun, RemediationStep
    from fleetctl.remediation.runbooks import Runbook
    from fleetctl.workflows.api import RemediationResult

app = typer.Typer(help="Remediation runbooks: list, show, validate, run; the runs.", no_args_is_help=True)


def _books(ctx: typer.Context) -> dict[str, Runbook]:
    from fleetctl.remediation.runbooks import RUNBOOKS_DIR, load_runbooks
    from fleetctl.remediation.sandbox import RunbookError

    try:
        return load_runbooks(context.settings(ctx).runbooks_dir or RUNBOOKS_DIR)
    except RunbookError as exc:
        fail(str(exc), EXIT_USAGE)


def _summary(book: Runbook) -> dict[str, Any]:
    m = book.match
    matches = [f"xid {','.join(map(str, m.xids))}"] if m.xids else []
    matches += [f"check {c.name} {'/'.join(c.statuses)}" + (f" ~/{c.finding}/" if c.finding else "") for c in m.checks]
    matches += ["fallback"] if m.fallback else []
    return {
        "name": book.name,
        "priority": book.priority,
        "matches": matches,
        "steps": len(book.steps),
        "description": book.description,
        "source": book.source,
    }


RUNBOOK_COLUMNS = (
    Column("NAME", lambda r: r["name"], whole=True),
    Column("PRIORITY", lambda r: r["priority"]),
    Column("STEPS", lambda r: r["steps"]),
    Column("MATCHES", lambda r: "; ".join(r["matches"])),
    Column("DESCRIPTION", lambda r: r["description"], wide=True),
)


@app.command("list")
def list_runbooks(ctx: typer.Context, output: OutputFormat = OUTPUT_OPTION) -> None:
    """Every runbook, what it matches and how many steps it takes."""
    rows = [_summary(b) for b in sorted(_books(ctx).values(), key=lambda b: (-b.priority, b.name))]
    emit(rows, output, lambda rs, wide: column_table(RUNBOOK_COLUMNS, rs, wide))


@app.command("show")
def show(ctx: typer.Context, name: str, output: OutputFormat = OUTPUT_OPTION) -> None:
    """A runbook's steps, conditions and parameters."""
    book = _books(ctx).get(name)
    if book is None:
        fail(f"unknown runbook {name!r}", EXIT_OPERATIONAL)
    data = {**_summary(book), "steps": [s.to_dict() for s in book.steps]}

    def render(d: dict[str, Any], _wide: bool) -> Group:
        from rich.console import Group
        from rich.text import Text

        table = simple_table(
            None,
            ["#", "name", "action", "when", "on failure", "parameters"],
            [
                [
                    s["index"],
                    s["name"],
                    s["action"],
                    s["when"] or "",
                    s["on_failure"],
                    ", ".join(f"{k}={v}" for k, v in s["params"].items()),
                ]
                for s in d["steps"]
            ],
        )
        return Group(
            Text(d["name"], style="bold"), Text(d["description"]), Text("matches: " + "; ".join(d["matches"])), table
        )

    emit(data, output, render)


@app.command("validate")
def validate(file: Path = typer.Argument(..., help="runbook YAML file")) -> None:
    """Check a runbook without running it: structure, parameters and template safety."""
    from fleetctl.remediation.runbooks import load_runbook
    from fleetctl.remediation.sandbox import RunbookError

    try:
        book = load_runbook(file)
    except RunbookError as exc:
        fail(str(exc), EXIT_USAGE)
    typer.echo(f"{file}: runbook {book.name} is valid ({len(book.steps)} steps)")


@app.command("run")
def run(
    ctx: typer.Context,
    name: str,
    node: str = typer.Option(..., "--node", help="the node to remediate"),
    dry_run: bool = typer.Option(False, "--dry-run", help="record what would happen; change nothing"),
    xid: int | None = typer.Option(
        None, "--xid", callback=within(0, MAX_XID), help="the XID that prompted this (templates see it as event)"
    ),
    reason: str = typer.Option(
        "operator request", "--reason", callback=free_text(required=True), help="why; templates see it as event.message"
    ),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Run a runbook for one node and wait for it; every step is recorded."""
    from fleetctl.db.queries import get_node
    from fleetctl.remediation.events import Event, EventKind
    from fleetctl.workflows.client import RemediationAlreadyRunning, run_remediation

    book = _books(ctx).get(name)
    if book is None:
        fail(f"unknown runbook {name!r}", EXIT_OPERATIONAL)
    if get_node(context.engine(ctx), node) is None:
        fail(f"unknown node: {node}")
    s = context.settings(ctx)
    event = (
        Event(EventKind.XID, code=xid, message=reason) if xid is not None else Event(EventKind.MANUAL, message=reason)
    )

    async def go() -> RemediationResult:
        client = await context.temporal_client(ctx)
        return await run_remediation(client, s, node, book, event, s.identity(), dry_run)

    try:
        result = context.run_async(go())
    except RemediationAlreadyRunning as exc:
        fail(str(exc))
    data = {
        "run": result.run_key,
        "node": result.node,
        "runbook": result.runbook,
        "mode": result.mode,
        "status": result.status,
        "outcome": result.outcome,
        "steps": [
            {"index": st.index, "name": st.name, "action": st.action, "status": st.status, "detail": st.detail}
            for st in result.steps
        ],
    }
    emit(
        data,
        output,
        lambda d, _w: simple_table(
            f"{d['runbook']} on {d['node']} ({d['mode']}): {d['status']}: {d['outcome']}",
            ["#", "step", "action", "status", "detail"],
            [[x["index"], x["name"], x["action"], x["status"], x["detail"]] for x in d["steps"]],
        ),
    )
    if result.status == "failed":
        raise typer.Exit(EXIT_OPERATIONAL)


# The step statuses a run stops at (the Remediation workflow's): what `runs` shows of it.
_STOPPING = ("failed", "interrupted")


def _step_text(step: dict[str, Any] | None) -> str:
    return "" if step is None else f"#{step['index']} {step['name']} {step['status']}: {step['detail']}"


RUN_COLUMNS = (
    Column("NODE", lambda r: r["node"], whole=True),
    Column("RUNBOOK", lambda r: r["runbook"]),
    Column("STATUS", lambda r: r["status"] + ("" if r["mode"] == "live" else f" ({r['mode'].replace('_', ' ')})")),
    Column("AGE", lambda r: age(r["started_at"])),
    # Where a failed, interrupted or running run stands: the step an operator looks at.
    Column("STEP", lambda r: _step_text(r["stopped_at"])),
    Column("STEPS", lambda r: ", ".join(f"{s['index']} {s['name']} {s['status']}" for s in r["steps"]), wide=True),
    Column("STARTED", lambda r: when(r["started_at"]), wide=True),
    Column("RUN", lambda r: r["run"], wide=True),
)


def _run_row(run: RemediationRun, steps: Sequence[RemediationStep]) -> dict[str, Any]:
    shown = [
        {
            "index": st.step_index,
            "name": st.name,
            "action": st.action,
            "status": st.status,
            "detail": st.detail,
            "started_at": st.started_at,
            "finished_at": st.finished_at,
        }
        for st in steps
    ]
    if run.status == "running":
        stopped = shown[-1] if shown else None
    else:
        stopped = next((st for st in reversed(shown) if st["status"] in _STOPPING), None)
    return {
        "run": run.run_key,
        "node": run.node_name,
        "runbook": run.runbook,
        "mode": run.mode,
        "status": run.status,
        "outcome": run.outcome,
        "actor": run.actor,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "stopped_at": stopped,
        "steps": shown,
    }


@app.command("runs")
def runs(
    ctx: typer.Context,
    node: str | None = typer.Option(None, "--node", help="only this node's runs"),
    status: str | None = typer.Option(
        None, "--status", help="running, succeeded, failed, escalated (sent to RMA), interrupted or dry_run"
    ),
    limit: int = typer.Option(50, "--limit", callback=within(1, 10_000), help="the newest this many"),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Runbook runs, newest first, each with the step it stopped at (-o wide, -o json: every step)."""
    from fleetctl.db.queries import get_node
    from fleetctl.db.remediation import runs_with_steps
    from fleetctl.nodes.conditions import RunStatus

    known = [s.value for s in RunStatus]
    if status is not None and status not in known:
        fail(f"unknown run status {status!r} (one of: {', '.join(known)})", EXIT_USAGE)
    engine = context.engine(ctx)
    if node is not None and get_node(engine, node) is None:
        fail(f"unknown node: {node}")
    rows = [_run_row(run, steps) for run, steps in runs_with_steps(engine, node, status, limit)]
    emit(rows, output, lambda rs, wide: column_table(RUN_COLUMNS, rs, wide), empty="No runbook runs.")
