"""`fleetctl fleet status [--watch]` and `fleetctl fleet resume-automation`."""

from __future__ import annotations

import time
from datetime import UTC
from typing import TYPE_CHECKING, Any

import typer

from fleetctl.cli import context
from fleetctl.cli.output import (
    OUTPUT_OPTION,
    Column,
    OutputFormat,
    age,
    column_table,
    emit,
    fail,
    shown,
    simple_table,
    within,
)
from fleetctl.durations import when
from fleetctl.text import plural

if TYPE_CHECKING:
    from rich.console import Group, RenderableType
    from rich.text import Text
    from sqlalchemy.engine import Engine
    from temporalio.client import Client

    from fleetctl.nodes.capacity import GuardPolicy
    from fleetctl.workflows.api.nodes import CapacityGuardState

app = typer.Typer(help="The fleet as a whole: status, automation.", no_args_is_help=True)


def fleet_status(ctx: typer.Context) -> dict[str, Any]:
    """Counts from the database (fleetctl.nodes.fleet_status_store); automation state from the guard
    workflow, whose policy the budget is measured against (the configured one without it)."""
    from datetime import datetime

    from fleetctl.config import guard_policy
    from fleetctl.nodes.fleet_status_store import fleet_status as from_database

    s = context.settings(ctx)
    automation, policy = _automation(ctx)
    status = from_database(
        context.engine(ctx), automation, policy or guard_policy(s, s.fleet), s.fleet, s.spares_per_island
    )
    status["rma_held"] = _held_rmas(context.engine(ctx), s.fleet)
    status["at"] = datetime.now(UTC)  # when this was read: a watched screen says how fresh it is
    return status


def _held_rmas(engine: Engine, fleet: str) -> list[dict[str, Any]]:
    """The fleet's RMAs held for an operator's confirmation (a correlated burst), oldest first."""
    from fleetctl.db import queries
    from fleetctl.db.remediation import rma_records
    from fleetctl.nodes.capacity import in_fleet
    from fleetctl.remediation.rma import AWAITING_CONFIRMATION

    held = rma_records(engine, AWAITING_CONFIRMATION)
    ours = {
        n.name for n in queries.nodes_named(engine, sorted({r.node_name for r in held})) if in_fleet(n.labels, fleet)
    }
    return [
        {"id": r.id, "node": r.node_name, "opened_at": r.opened_at, "held_reason": r.held_reason}
        for r in reversed(held)
        if r.node_name in ours
    ]


def _automation(ctx: typer.Context) -> tuple[dict[str, Any], GuardPolicy | None]:
    from fleetctl.workflows.client import guarded_fleets, running_guard_status

    s = context.settings(ctx)

    async def ask(client: Client) -> tuple[CapacityGuardState | None, list[str]]:
        g = await running_guard_status(client, s)
        return g, ([] if g is not None else await guarded_fleets(client))

    answer, error = context.temporal_read(ctx, ask, "the capacity guard")
    if answer is None:  # ask always answers: None is Temporal's error
        return {"reachable": False, "error": error}, None
    g, others = answer
    if g is None:
        # No automated drain has asked this fleet's guard yet, or the fleet is misnamed.
        return {"reachable": True, "guard_running": False, "fleet": s.fleet, "other_fleets": others}, None
    return {
        "reachable": True,
        "guard_running": True,
        "fleet": s.fleet,
        "breaker": "open" if g.breaker_open else "closed",
        "breaker_reason": g.breaker_reason,
        "breaker_since": g.breaker_since,
        "max_unavailable_fleet": g.policy.max_unavailable_fleet,
        "max_unavailable_rack": g.policy.max_unavailable_rack,
        "storm_fraction": g.policy.storm_fraction,
        "granted": g.granted_total,
        "denied": g.denied_total,
    }, g.policy


def _headroom(n: float) -> Text:
    from rich.text import Text

    return Text(_nodes(n), style="bold red" if n <= 0 else "green")


def _nodes(n: float) -> str:
    """A budget's count of nodes: whole, or with the GPUs out alone as a fraction (1.125)."""
    return f"{n:g}"


BUDGET_COLUMNS = (
    Column("scope", lambda b: b["scope"]),
    Column("out", lambda b: _nodes(b["unavailable"])),
    Column("of", lambda b: b["serving"]),
    Column("limit", lambda b: f"{b['limit']} ({b['max_fraction']:.0%})"),
    Column("headroom", lambda b: _headroom(b["headroom"])),
)
HELD_COLUMNS = (
    Column("node", lambda h: h["node"]),
    Column("since", lambda h: when(h["since"])),
    Column("refusals", lambda h: h["refusals"]),
    Column("reason", lambda h: shown(h["reason"])),
)


OPERATOR_COLUMNS = (
    Column("at", lambda e: when(e["at"])),
    Column("node", lambda e: e["node"]),
    Column("nodes", lambda e: len(e["nodes"])),
    Column("command", lambda e: e["trigger"]),
    Column("to", lambda e: e["to"]),
    Column("actor", lambda e: e["actor"]),
    Column("cause", lambda e: shown(e["cause"][:100])),
)


# Collapsed automation events (fleetctl.nodes.event_groups): in `fleet status` and `node show`.
# First and last seen as ages, as `kubectl get events` gives them (-o json has the times).
AUTOMATION_COLUMNS = (
    Column("node", lambda g: g["node"] or "-"),
    Column("kind", lambda g: g["kind"]),
    Column("count", lambda g: g["count"]),
    Column("first seen", lambda g: age(g["first"]), whole=True),
    Column("last seen", lambda g: age(g["last"]), whole=True),
    Column("reason", lambda g: shown(g["reason"][:200])),
)


# One letter per node in the rack view: capitals for the states an operator looks for.
STATE_LETTER = {
    "new": "n",
    "firmware": "f",
    "burn_in": "b",
    "admission": "a",
    "production": "P",
    "draining": "D",
    "maintenance": "M",
    "rma": "R",
    "retired": "x",
}


def render_racks(islands: list[dict[str, Any]]) -> Group:
    """`fleet status -o wide`: a line per rack, a letter per node from the top of the rack
    down, coloured by state; racks grouped by island."""
    from rich.console import Group
    from rich.text import Text

    from fleetctl.nodes.lifecycle import NodeState

    legend = "  ".join(f"{letter} {state}" for state, letter in STATE_LETTER.items())
    lines = [Text.assemble(("racks by island", "bold"), f"   (top of rack first; {legend})")]
    width = max((len(r["rack"] or "-") for i in islands for r in i["racks"]), default=1)
    for island in islands:
        lines.append(Text(f"island {island['island'] or '(none)'}", style="bold"))
        for rack in island["racks"]:
            cells = [(STATE_LETTER.get(n["state"], "?"), NodeState(n["state"]).colour) for n in rack["nodes"]]
            lines.append(
                Text.assemble(
                    shown(f"  {(rack['rack'] or '-').ljust(width)}  "), *cells, f"  {plural(len(cells), 'node')}"
                )
            )
    return Group(*lines)


def render_status(data: dict[str, Any], wide: bool = False) -> Group:
    from rich.console import Group

    # What needs an operator first (a watched 80x24 screen shows its top): stalled nodes (their
    # workflow acts on nothing, an XID 79 included), held drains, suspects, what automation did;
    # then what is under way; the budget and the per-rack counts last.
    parts: list[RenderableType] = [_status_head(data), _automation_line(data["automation"]), *_needs_an_operator(data)]
    parts.extend(_under_way(data))
    parts.append(column_table(BUDGET_COLUMNS, data["budget"], title="capacity budget (automation)"))
    spares = data["spares"]
    if spares["per_island"]:
        from rich.text import Text

        parts.append(
            Text.assemble(
                ("hot spares ", "bold"),
                f"{spares['count']} (in service, running no job)   ",
                *[f"{island} {c['spares']}/{c['wanted']}  " for island, c in spares["per_island"].items()],
            )
        )
    parts.append(render_racks(data["islands"]) if wide else _per_rack(data))
    return Group(*parts)


def _status_head(data: dict[str, Any]) -> Text:
    """The fleet's node count per state."""
    from rich.text import Text

    from fleetctl.nodes.lifecycle import NodeState

    return Text.assemble(
        ("fleet ", "bold"),
        f"{plural(data['nodes'], 'node')}   ",
        *[(f"{s.value} {data['per_state'][s.value]}  ", s.colour) for s in NodeState if data["per_state"].get(s.value)],
        (f" at {when(data['at'])} UTC", "dim") if data.get("at") else "",
    )


def _per_rack(data: dict[str, Any]) -> RenderableType:
    from fleetctl.nodes.lifecycle import NodeState

    present = [s.value for s in NodeState if data["per_state"].get(s.value)]
    return simple_table(
        "per rack",
        ["rack", *present],
        [[rack, *[counts.get(s, "") for s in present]] for rack, counts in sorted(data["per_rack"].items())],
    )


def _automation_line(a: dict[str, Any]) -> Text:
    """The capacity guard: its breaker, limits and decisions, or why they are not known."""
    from rich.text import Text

    if not a.get("reachable"):
        return Text(f"automation: unknown ({a.get('error')})", style="yellow")
    if not a["guard_running"]:
        return Text(
            f"automation: no capacity guard runs for fleet {a['fleet']!r}: no automated drain has asked it yet"
            + (f"; guards run for: {', '.join(a['other_fleets'])} (--fleet)" if a["other_fleets"] else ""),
            style="yellow" if a["other_fleets"] else "",
        )
    style = "bold red" if a["breaker"] == "open" else "green"
    return Text.assemble(
        ("automation: ", "bold"),
        (f"breaker {a['breaker']}", style),
        f"  {a['breaker_reason']}" if a["breaker_reason"] else "",
        f"   limits: fleet {a['max_unavailable_fleet']:.0%}, rack {a['max_unavailable_rack']:.0%}, "
        f"storm {a['storm_fraction']:.0%}   decisions: {a['granted']} granted, {a['denied']} refused",
    )


def _needs_an_operator(data: dict[str, Any]) -> list[RenderableType]:
    """Stalled nodes, failed or stuck runbooks, RMAs held, drains held, suspects, and what
    automation did lately."""
    parts: list[RenderableType] = []
    if data["stalled"]:
        parts.append(
            simple_table(
                f"stalled: {plural(len(data['stalled']), 'node')} whose workflow acts on nothing now",
                ["node", "since", "reason"],
                [[x["node"], when(x["since"]), x["reason"]] for x in data["stalled"][:20]],
            )
        )
    if data["needs_operator"]:
        parts.append(
            simple_table(
                f"needs an operator: {plural(len(data['needs_operator']), 'node')} whose runbook failed or is stuck "
                "(fleetctl runbook runs --node NODE)",
                ["node", "since", "condition", "reason"],
                [
                    [x["node"], when(x["since"]) if x["since"] else "-", x["condition"], x["reason"]]
                    for x in data["needs_operator"][:20]
                ],
            )
        )
    if data["rma_held"]:
        held = data["rma_held"]
        title = f"RMAs awaiting an operator: {len(held)} (fleetctl rma confirm|reject ID... --reason TEXT)"
        reasons = {x["held_reason"] for x in held}
        if len(held) > 1 and len(reasons) == 1:  # a burst's one reason, said once
            parts.append(
                simple_table(
                    f"{title}; all held for: {reasons.pop()}",
                    ["id", "node", "since"],
                    [[str(x["id"]), x["node"], when(x["opened_at"])] for x in held[:20]],
                )
            )
        else:
            parts.append(
                simple_table(
                    title,
                    ["id", "node", "since", "why"],
                    [[str(x["id"]), x["node"], when(x["opened_at"]), x["held_reason"]] for x in held[:20]],
                )
            )
    if data["held_drains"]:
        parts.append(
            column_table(
                HELD_COLUMNS,
                data["held_drains"],
                title=f"drains held by the capacity guard: {plural(len(data['held_drains']), 'node')}",
            )
        )
    if data["gpus_out"]:
        parts.append(
            simple_table(
                f"GPUs out of their schedulers: {len(data['gpus_out'])} (their nodes serve on with the others)",
                ["node", "gpu", "since", "reason"],
                [[x["node"], x["gpu"], when(x["since"]), x["reason"]] for x in data["gpus_out"][:20]],
            )
        )
    if data["suspect"]:
        parts.append(
            simple_table(
                "suspect (unreachable or agent silent: drained through the guard)",
                ["node", "since", "why", "reason"],
                [[x["node"], when(x["since"]), x["why"], x["reason"]] for x in data["suspect"][:20]],
            )
        )
    if data["recent_automation_events"]:
        parts.append(
            column_table(
                AUTOMATION_COLUMNS,
                data["recent_automation_events"],
                title="recent automation (repeats counted, as kubectl's events)",
            )
        )
    return parts


def _under_way(data: dict[str, Any]) -> list[RenderableType]:
    """Firmware roll-outs, nodes in flight, and the operators' recent commands."""
    from rich.text import Text

    parts: list[RenderableType] = []
    for r in data["firmware_rollouts"]:
        parts.append(
            Text(
                f"firmware roll-out {r['id']}: {r['status']}, {r['done']}/{r['total']} updated, "
                f"{r['failed']} failed (halts at {r['max_failures']})",
                style="bold red" if r["status"] == "halted" else "cyan",
            )
        )
    if data["in_flight"]:
        parts.append(
            simple_table(
                "in flight",
                ["node", "state", "since"],
                [[f["node"], f["state"], when(f["since"])] for f in data["in_flight"][:20]],
            )
        )
    if data["recent_operator_commands"]:
        parts.append(column_table(OPERATOR_COLUMNS, data["recent_operator_commands"], title="recent operator commands"))
    return parts


@app.command("status")
def status(
    ctx: typer.Context,
    watch: bool = typer.Option(False, "--watch", "-w", help="refresh every --interval seconds until Ctrl-C"),
    interval: float = typer.Option(2.0, "--interval", callback=within(0.1, 3600)),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Nodes per state and rack, nodes in flight, the capacity guard and its breaker;
    `-o wide` shows every rack node by node, grouped by island."""
    if not watch:
        data = fleet_status(ctx)
        emit(data, output, render_status)
        a = data["automation"]
        if not a["reachable"]:
            fail(a["error"])
        if not a["guard_running"] and a["other_fleets"]:
            # A warning, not a failure: a fleet whose guard no automated drain has asked yet
            # is a fleet, and may share its namespace with others.
            typer.echo(
                f"warning: no capacity guard runs for fleet {a['fleet']!r}; guards run for: "
                f"{', '.join(a['other_fleets'])} (--fleet or FLEETCTL_FLEET)",
                err=True,
            )
        return
    from rich.live import Live

    try:
        with Live(_watch_screen(ctx), refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(interval)
                live.update(_watch_screen(ctx))
    except KeyboardInterrupt:
        pass


def _watch_screen(ctx: typer.Context) -> Text:
    """One frame of `--watch`, fitted to the terminal (fleetctl.nodes.incident_screen)."""
    import shutil
    from datetime import datetime

    from rich.text import Text

    from fleetctl.nodes.incident_screen import watch_lines

    data = fleet_status(ctx)
    size = shutil.get_terminal_size((120, 40))
    lines = watch_lines(
        _status_head(data).plain,
        _automation_line(data["automation"]).plain,
        data,
        data["recent_transitions"],
        size.columns,
        size.lines - 1,  # the cursor's line: a full screen would scroll each frame away
        datetime.now(UTC),
    )
    return Text("\n".join(lines))


@app.command("resume-automation")
def resume_automation(ctx: typer.Context) -> None:
    """Close the circuit breaker: automated drains may go ahead again."""
    from fleetctl.workflows.client import resume_automation as resume
    from fleetctl.workflows.client import running_guard_status

    s = context.settings(ctx)

    async def run() -> CapacityGuardState | None:
        client = await context.temporal_client(ctx)
        guard = await running_guard_status(client, s)  # asked first: a look starts no guard
        if guard is None or not guard.breaker_open:
            return None
        return await resume(client, s, s.identity())

    if context.run_async(run()) is None:
        # Nothing to do is said and done, as `kubectl uncordon` of a schedulable node: no
        # breaker event is recorded for a breaker that was not open.
        typer.echo(f"fleet {s.fleet}: the breaker is closed; nothing to resume")
        return
    typer.echo(f"automation resumed by {s.identity()}: breaker closed")
