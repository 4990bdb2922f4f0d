"""`fleetctl audit`: every write asked of the front door, allowed or denied, and by whom."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from fleetctl.cli import context
from fleetctl.cli.output import EXIT_USAGE, OUTPUT_OPTION, OutputFormat, emit, fail, simple_table

if TYPE_CHECKING:
    from rich.console import RenderableType


def _table(rows: list[dict[str, Any]], wide: bool) -> RenderableType:
    headers = ["at", "subject", "actor", "fleet", "command", "nodes", "decision", "why"]
    return simple_table(
        None,
        [*headers, "args", "exit"] if wide else headers,
        [
            [
                r["at"][:19].replace("T", " "),
                r["subject"],
                r["actor"],
                r["fleet"],
                r["command"],
                " ".join(r["nodes"]),
                r["decision"],
                r["reason"],
                *([" ".join(r["args"]), "" if r["exit_code"] is None else r["exit_code"]] if wide else []),
            ]
            for r in rows
        ],
    )


def audit(
    ctx: typer.Context,
    node: str | None = typer.Option(None, "--node", help="only requests naming this node"),
    subject: str | None = typer.Option(None, "--subject", help="only requests of this authenticated subject"),
    denied: bool = typer.Option(False, "--denied", help="only denied requests"),
    since: str | None = typer.Option(None, "--since", help="only the last 30m, 12h, 7d, 1d12h"),
    limit: int = typer.Option(1000, "--limit", min=1, max=100_000, help="at most this many, the most recent"),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Every write asked of the front door (`fleetctl api serve`): who (the authenticated
    subject), what, on which nodes, allowed or denied and why, oldest first."""
    from fleetctl.db.audit import audit_requests
    from fleetctl.db.models import utcnow
    from fleetctl.durations import parse_duration

    start = None
    if since is not None:
        try:
            start = utcnow() - parse_duration(since)
        except ValueError as exc:
            fail(f"--since: {exc}", EXIT_USAGE)
    rows = audit_requests(context.engine(ctx), node=node, subject=subject, denied_only=denied, since=start, limit=limit)
    emit(rows, output, _table, empty="No audited requests.")
