"""`fleetctl validate`: an all-reduce across a set of production nodes, judged against the
profile's multi-node floor; when it falls short, bisection names the node or link (the
ClusterValidation workflow: workflows/definitions/validation.py)."""

from __future__ import annotations

import uuid
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import typer

from fleetctl.cli import context
from fleetctl.cli.output import (
    EXIT_CHECK_ERROR,
    EXIT_CHECK_FAILED,
    EXIT_USAGE,
    OUTPUT_OPTION,
    OutputFormat,
    emit,
    fail,
    shown,
)

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text
    from temporalio.client import Client

    from fleetctl.config import Settings
    from fleetctl.workflows.api import ValidationResult


def validate(
    ctx: typer.Context,
    nodes: list[str] = typer.Argument(None, help="node names or host lists (gpu-[001-032]); none: every node"),
    island: str = typer.Option("", "--island", help="only the nodes of this island"),
    rack: str = typer.Option("", "--rack", help="only the nodes of this rack"),
    domain: str = typer.Option("", "--domain", help="only the nodes of this NVLink domain"),
    selector: str | None = typer.Option(None, "--selector", "-l", help="labels: key=value[,key=value]"),
    idle: bool = typer.Option(False, "--idle", help="only the production nodes no job runs on"),
    max_runs: int = typer.Option(0, "--max-runs", min=0, help="give up after this many runs (0: 4 log2 N + 3)"),
    drain: bool = typer.Option(
        False, "--drain", help="drain each slow node it names through the capacity guard, as a failed check"
    ),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """All-reduce across production nodes; when it falls short of the multi-node floor, bisection names the slow node or link.

    The nodes are held in their scheduler as a check holds a node; halves, quarters and pairs
    follow a slow run. --drain: each slow node goes through the capacity guard as a sweep's
    failed check does (check nccl-validate). Exit 3 when something is slow, 4 when the
    validation could not run."""
    from fleetctl.db.queries import list_nodes
    from fleetctl.inventory.parse import InventoryError, parse_selector
    from fleetctl.workflows.api import ValidationInput
    from fleetctl.workflows.client import run_validation

    try:
        labels = parse_selector(selector) if selector else {}
    except InventoryError as exc:
        fail(str(exc), EXIT_USAGE)
    s = context.settings(ctx)
    _refuse_a_bad_scope(ctx, list(nodes or []), island, rack, domain, labels)
    inp = ValidationInput(
        names=list(nodes or []),
        island=island,
        rack=rack,
        domain=domain,
        labels=labels,
        idle=idle,
        fleet=s.fleet,
        actor=s.identity(),
        max_runs=max_runs,
    )

    request_id = uuid.uuid4().hex[:12]
    racks = {n.name: n.rack for n in list_nodes(context.engine(ctx))}

    async def go() -> tuple[ValidationResult, dict[str, str]]:
        client = await context.temporal_client(ctx)
        result = await run_validation(client, s, inp, request_id)
        kept = await _drain_bad_nodes(client, s, result, racks, request_id) if drain else {}
        return result, kept

    result, kept = context.run_async(go())
    data = _data(asdict(result))
    data["drained"] = [n for n in result.bad_nodes if drain and n not in kept]
    data["kept"] = kept
    emit(data, output, _table)
    if result.error and not result.runs:
        raise typer.Exit(EXIT_CHECK_ERROR)
    if not result.passed:
        raise typer.Exit(EXIT_CHECK_ERROR if result.error else EXIT_CHECK_FAILED)


async def _drain_bad_nodes(
    client: Client, s: Settings, result: ValidationResult, racks: dict[str, str], request_id: str
) -> dict[str, str]:
    """Each slow node through the capacity guard, then its workflow, as a sweep drains a node
    whose check failed: the failed `nccl-validate` run that named it is the cause and the
    event. Asked here, after the verdict, not by the workflow (whose commands stay as they
    are): the node was released with the others a moment before, so a job that landed on it
    in between runs on while its scheduler drains it. The nodes the guard kept (or that were
    already out of production), with why."""
    from fleetctl.remediation.events import Event, EventKind
    from fleetctl.validation.bisect import RunVerdict
    from fleetctl.workflows.activities.validation import VALIDATE_CHECK, VALIDATE_SUITE
    from fleetctl.workflows.client import CommandRejected, request_guarded_drain

    kept: dict[str, str] = {}
    for node in result.bad_nodes:
        # Its last slow run: the probe beside a cleared node that named it.
        run = next(r for r in reversed(result.runs) if node in r.nodes and r.verdict == RunVerdict.SLOW.value)
        cause = f"active check {VALIDATE_SUITE}: {VALIDATE_CHECK}: {run.reason}"
        event = Event(EventKind.CHECK, check=VALIDATE_CHECK, status="fail", message=run.reason).to_dict()
        try:
            decision, moved = await request_guarded_drain(
                client, s, node, racks.get(node, ""), cause, s.identity(), f"validate/{request_id}/{node}", event
            )
        except CommandRejected as exc:
            kept[node] = str(exc)
            continue
        if moved is None:
            kept[node] = f"the capacity guard kept it in service: {decision.reason}"
    return kept


def _refuse_a_bad_scope(
    ctx: typer.Context, names: list[str], island: str, rack: str, domain: str, labels: dict[str, str]
) -> None:
    """A scope that names no usable set of nodes, refused here in one line (exit 2) before a
    node is held; the workflow chooses again from the database it reads (and, for --idle,
    from the schedulers)."""
    from fleetctl.db.queries import list_nodes
    from fleetctl.nodes.capacity import in_fleet
    from fleetctl.validation.scope import Scope, ScopeError, select_nodes

    fleet = context.settings(ctx).fleet
    rows = [n for n in list_nodes(context.engine(ctx)) if in_fleet(n.labels, fleet)]
    try:
        select_nodes(rows, Scope(tuple(names), island, rack, domain, labels))
    except ScopeError as exc:
        fail(str(exc), EXIT_USAGE)


def _data(result: dict[str, Any]) -> dict[str, Any]:
    from fleetctl.inventory.hostlist import compress

    runs = [{**run, "nodes": compress(sorted(run["nodes"]))} for run in result["runs"]]
    return {**result, "runs": runs, "run_count": len(runs)}


def _table(data: dict[str, Any], _wide: bool) -> RenderableType:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from fleetctl.inventory.hostlist import compress

    lines: list[RenderableType] = []
    if data["nodes"]:
        lines.append(Text(f"{len(data['nodes'])} nodes held: {compress(data['nodes'])}"))
    for node, why in sorted(data["skipped"].items()):
        lines.append(_styled(shown(f"skipped {node}: {why}"), "yellow"))
    if data["runs"]:
        table = Table(header_style="bold", box=None)
        for column in ("RUN", "NODES", "VERDICT", "BUSBW GB/s", "CHECK RUN"):
            table.add_column(column)
        for i, run in enumerate(data["runs"]):
            busbw = "" if run["busbw_gbps"] is None else f"{run['busbw_gbps']:g}"
            table.add_row(str(i), shown(run["nodes"]), run["verdict"], busbw, str(run["check_run_id"] or ""))
        lines.append(table)
    lines.append(_verdict(data))
    return Group(*lines)


def _verdict(data: dict[str, Any]) -> RenderableType:
    from rich.text import Text

    from fleetctl.inventory.hostlist import compress
    from fleetctl.text import plural

    if data["error"]:
        return _styled(shown(f"error: {data['error']}"), "red")
    if data["passed"]:
        return Text(f"passed: {len(data['nodes'])} nodes at or above the multi-node floor", style="green")
    said = []
    if data["bad_nodes"]:
        said.append(f"slow node{'s' if len(data['bad_nodes']) > 1 else ''}: {compress(data['bad_nodes'])}")
    said += [
        "slow only together (the fabric between): " + " | ".join(compress(group) for group in groups)
        for groups in data["slow_together"]
    ]
    said += [f"slow, no node to compare with: {compress(nodes)}" for nodes in data["unresolved"]]
    if data["drained"]:
        said.append(f"drained: {compress(data['drained'])}")
    said += [f"not drained {node}: {why}" for node, why in sorted(data["kept"].items())]
    return Text(f"{plural(len(data['runs']), 'run')}; " + "; ".join(said), style="red")


def _styled(text: Text, style: str) -> Text:
    text.stylize(style)
    return text
