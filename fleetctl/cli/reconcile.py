"""`fleetctl reconcile [--fix]`: where fleetctl and the schedulers disagree about nodes.

fleetctl's node workflows own node state: a node in production should be schedulable,
every other state should be drained in its scheduler. A drain or resume by hand leaves
the two disagreeing; this reports it, and `--fix` makes the scheduler match fleetctl
(never the reverse: to keep a node out, drain it with `fleetctl node drain`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import typer

from fleetctl.cli import context
from fleetctl.cli.output import EXIT_OPERATIONAL, OUTPUT_OPTION, OutputFormat, emit

# What each difference means, and what --fix does about it (None: nothing it can do).
DIFFERENCES = {
    "not_drained": ("out of service in fleetctl, schedulable in the scheduler", "drain"),
    "stale_fleetctl_drain": ("in production, but still drained by fleetctl", "resume"),
    "drained_by_someone_else": ("in production, but drained outside fleetctl", "force resume"),
    "down": ("in production, but down in the scheduler", None),
    "unreachable": ("the scheduler could not be asked", None),
}


@dataclass
class Difference:
    node: str
    scheduler: str
    fleetctl_state: str
    scheduler_state: str
    reason: str | None
    difference: str
    meaning: str
    action: str | None
    fixed: bool = False
    error: str = ""


def _compare(node, scheduler) -> Difference | None:
    from fleetctl.lifecycle import NodeState
    from fleetctl.schedulers.base import SchedulerError

    def difference(kind: str, scheduler_state: str = "", reason: str | None = None) -> Difference:
        meaning, action = DIFFERENCES[kind]
        return Difference(node.name, node.scheduler, node.state, scheduler_state, reason, kind, meaning, action)

    try:
        seen = scheduler.node_state(node.name)
    except SchedulerError as exc:
        return difference("unreachable", "unknown", str(exc))
    if node.state != NodeState.PRODUCTION.value:
        return None if seen.drained else difference("not_drained", seen.state, seen.reason)
    if seen.drained:
        return difference("stale_fleetctl_drain" if seen.owned_by_fleetctl else "drained_by_someone_else", seen.state, seen.reason)
    if seen.state == "down":
        return difference("down", seen.state, seen.reason)
    return None


def _fix(found: Difference, scheduler) -> None:
    from fleetctl.schedulers.base import SchedulerError

    try:
        if found.difference == "not_drained":
            scheduler.drain(found.node, f"reconcile: fleetctl has the node in {found.fleetctl_state}")
        elif found.difference == "stale_fleetctl_drain":
            scheduler.resume(found.node)
        elif found.difference == "drained_by_someone_else":
            scheduler.resume(found.node, force=True)
        else:
            return
    except SchedulerError as exc:
        found.error = str(exc)
        return
    found.fixed = True


def _table(data: dict, _wide: bool):
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    head = f"{data['nodes_checked']} nodes checked"
    if not data["differences"]:
        return Text(f"{head}: fleetctl and the schedulers agree")
    table = Table(header_style="bold", box=None)
    for column in ("NODE", "SCHEDULER", "FLEETCTL", "IN SCHEDULER", "DIFFERENCE", "ACTION"):
        table.add_column(column)
    for d in data["differences"]:
        if d["fixed"]:
            outcome = Text(f"done: {d['action']}", style="green")
        elif d["error"]:
            outcome = Text(f"{d['action']} failed: {d['error']}", style="red")
        else:
            outcome = Text(f"--fix: {d['action']}" if d["action"] else "needs a person", style="yellow")
        difference = d["difference"].replace("_", " ") + (f" ({d['reason']})" if d["reason"] else "")
        table.add_row(d["node"], d["scheduler"], d["fleetctl_state"], d["scheduler_state"], difference, outcome)
    return Group(Text(f"{head}, {len(data['differences'])} differ"), table)


def reconcile(
    ctx: typer.Context,
    fix: bool = typer.Option(False, "--fix", help="make each scheduler match fleetctl (drain, or resume)"),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Compare node states with the schedulers' drains; exit 1 while any difference remains."""
    from concurrent.futures import ThreadPoolExecutor

    from rich.console import Console
    from rich.progress import Progress

    from fleetctl.db.queries import list_nodes
    from fleetctl.schedulers import SCHEDULER_KINDS, scheduler_for

    nodes = [n for n in list_nodes(context.engine(ctx)) if n.scheduler in SCHEDULER_KINDS]
    from fleetctl.slurm_host import slurm_runner

    settings = context.settings(ctx)
    schedulers = {kind: scheduler_for(kind, settings, slurm_runner=slurm_runner(settings) if kind == "slurm" else None)
                  for kind in {n.scheduler for n in nodes}}

    def check(node) -> Difference | None:
        found = _compare(node, schedulers[node.scheduler])
        if found is not None and fix:
            _fix(found, schedulers[node.scheduler])
        progress.advance(task)
        return found

    with Progress(transient=True, console=Console(stderr=True)) as progress:
        task = progress.add_task("fixing" if fix else "comparing", total=len(nodes))
        with ThreadPoolExecutor(8) as pool:
            differences = [d for d in pool.map(check, nodes) if d is not None]

    emit({"nodes_checked": len(nodes), "fix": fix, "differences": [asdict(d) for d in differences]}, output, _table)
    if any(not d.fixed for d in differences):
        raise typer.Exit(EXIT_OPERATIONAL)
