"""`fleetctl reconcile [--fix]`: where fleetctl and the schedulers disagree about nodes (the
comparison and the fixes are fleetctl.nodes.scheduler_sync's; to keep a node out, drain it with
`fleetctl node drain`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import typer

from fleetctl.cli import context
from fleetctl.cli.output import EXIT_OPERATIONAL, EXIT_USAGE, OUTPUT_OPTION, OutputFormat, emit, fail, shown
from fleetctl.text import plural

if TYPE_CHECKING:
    from rich.console import RenderableType


def _table(data: dict[str, Any], _wide: bool) -> RenderableType:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from fleetctl.text import printable

    head = f"{plural(data['nodes_checked'], 'node')} checked"
    if not data["differences"]:
        return Text(f"{head}: fleetctl and the schedulers agree")
    table = Table(header_style="bold", box=None)
    for column in ("NODE", "SCHEDULER", "FLEETCTL", "IN SCHEDULER", "DIFFERENCE", "ACTION"):
        table.add_column(column)
    for d in data["differences"]:
        # Drain reasons and errors are anyone's text (a scheduler's, a person's): shown, never
        # read as rich markup, control characters escaped.
        if d["fixed"]:
            outcome = Text(printable(f"done: {d['action']}"), style="green")
        elif d["error"]:
            outcome = Text(printable(f"{d['action']} failed: {d['error']}"), style="red")
        elif d["action"]:
            outcome = Text(printable(f"--fix: {d['action']}"), style="yellow")
        elif d["owner"]:
            outcome = Text(
                printable(f"left to {d['owner']} (--fix --include-owner {d['owner']} resumes it)"), style="yellow"
            )
        else:
            outcome = Text("needs a person", style="yellow")
        difference = d["difference"].replace("_", " ") + (f" ({d['reason']})" if d["reason"] else "")
        table.add_row(
            *(shown(v) for v in (d["node"], d["scheduler"], d["fleetctl_state"], d["scheduler_state"], difference)),
            outcome,
        )
    return Group(Text(f"{head}, {len(data['differences'])} differ"), table)


def reconcile(
    ctx: typer.Context,
    fix: bool = typer.Option(False, "--fix", help="make each scheduler match fleetctl (drain, or resume)"),
    include_owner: list[str] = typer.Option(
        [],
        "--include-owner",
        metavar="TOOL",
        help="also resume drains this tool made (the word before the reason's colon: NHC, k8s); repeatable",
    ),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Compare node states with the schedulers' drains; exit 1 while any difference remains.
    Another tool's drain is reported and left to it unless named with --include-owner."""
    from rich.console import Console
    from rich.progress import Progress

    from fleetctl.db.queries import list_nodes
    from fleetctl.nodes.scheduler_sync import reconcile as compare_and_fix
    from fleetctl.nodes.scheduler_sync import valid_owner

    if bad := [o for o in include_owner if not valid_owner(o)]:
        fail(
            f"--include-owner {bad[0]!r}: a tool's name is the word before a drain reason's colon "
            "(letters, digits, '_', '.', '-'; at most 32)",
            EXIT_USAGE,
        )
    from fleetctl.inventory.names import scheduler_members
    from fleetctl.schedulers import SCHEDULER_KINDS, scheduler_for

    nodes = [n for n in list_nodes(context.engine(ctx)) if set(scheduler_members(n.scheduler)) <= set(SCHEDULER_KINDS)]
    from fleetctl.connections.slurm_client import slurm_runner

    settings = context.settings(ctx)
    schedulers = {
        kind: scheduler_for(
            kind, settings, slurm_runner=slurm_runner(settings) if "slurm" in scheduler_members(kind) else None
        )
        for kind in {n.scheduler for n in nodes}
    }

    with Progress(transient=True, console=Console(stderr=True)) as progress:
        task = progress.add_task("fixing" if fix else "comparing", total=len(nodes))
        differences = compare_and_fix(
            nodes, schedulers, fix, on_checked=lambda: progress.advance(task), include_owners=frozenset(include_owner)
        )

    emit({"nodes_checked": len(nodes), "fix": fix, "differences": [asdict(d) for d in differences]}, output, _table)
    if any(not d.fixed for d in differences):
        raise typer.Exit(EXIT_OPERATIONAL)
