"""`fleetctl node ...`: import the inventory, look at nodes, and command their lifecycle."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from fleetctl.cli import context
from fleetctl.cli.output import (
    EXIT_OPERATIONAL,
    EXIT_USAGE,
    OUTPUT_OPTION,
    SORT_BY_OPTION,
    Column,
    OutputFormat,
    age,
    column_table,
    emit,
    fail,
    free_text,
    shown,
    sorted_rows,
)
from fleetctl.durations import when
from fleetctl.text import plural, printable

if TYPE_CHECKING:
    from rich.console import Group, RenderableType
    from rich.text import Text
    from sqlalchemy.engine import Engine

    from fleetctl.checks.xid_policy import XidPolicy
    from fleetctl.db.models import Node, NodeEvent
    from fleetctl.inventory.parse import NodeSpec
    from fleetctl.nodes.view_store import Freshness
    from fleetctl.schedulers.base import Scheduler
    from fleetctl.workflows.activities.prejob import JobGate
    from fleetctl.workflows.api import HealthEventInput
    from fleetctl.workflows.client import Outcome, PhaseOutcome

app = typer.Typer(help="Nodes: import, list, show, drain, undrain, RMA, retire.", no_args_is_help=True)


def _known_profiles(profiles_dir: str) -> set[str] | None:
    """The packaged profiles and the operator's (the `profiles_dir` setting), as the worker judges by.
    Every site profile is loaded: a broken one is refused in one line (exit 2) naming its file,
    never a node imported to fail each check it is judged by."""
    try:
        from fleetctl.checks.profiles import ProfileError, profile_names, site_profiles
    except ImportError:  # profiles ship with checks/; an older checkout may lack them
        return None
    try:
        site_profiles(profiles_dir or None)
        return set(profile_names(profiles_dir or None))
    except ProfileError as exc:
        fail(str(exc), EXIT_USAGE)


def _domain_sizes(profiles_dir: str, names: set[str]) -> dict[str, tuple[int, int]]:
    """(GPUs per node, GPUs per NVLink domain) of each named profile, for domain_size_conflict."""
    from fleetctl.checks.profiles import load_profile

    profiles = {name: load_profile(name, profiles_dir or None) for name in names}
    return {name: (p.gpu_count, p.nvlink_domain_gpus) for name, p in profiles.items()}


def _state_text(state: str) -> Text:
    from rich.text import Text

    from fleetctl.nodes.lifecycle import NodeState

    try:
        return Text(state, style=NodeState(state).colour)
    except ValueError:
        return Text(state)


def _health_text(health: str) -> Text:
    from rich.text import Text

    from fleetctl.nodes.conditions import OUT_OF_SERVICE

    out = health.split(",")[0] in OUT_OF_SERVICE.values() and "," not in health
    return Text(
        health, style="green" if health == "Ready" else "dim" if health == "-" else "yellow" if out else "bold red"
    )


def topology_line(d: dict[str, Any]) -> str:
    """Where the node sits: rack unit, leaf switch and island, `-` for what the inventory
    does not say."""
    unit = "-" if d["position"] is None else f"U{d['position']}"
    return (
        f"topology: rack {d['rack'] or '-'} {unit}  switch {d['switch'] or '-'}  island {d['island'] or '-'}"
        f"  nvlink-domain {d.get('nvlink_domain') or '-'}"
    )


def _jobs_cell(jobs: list[str] | None) -> str:
    """`?`: the node's scheduler is not mirrored in the database; `node show` says what the
    node's workflow waits for."""
    if jobs is None:
        return "?"
    return ",".join(jobs) if len(jobs) <= 2 else f"{jobs[0]},{jobs[1]},+{len(jobs) - 2}"


NODE_COLUMNS = (
    Column("NAME", lambda r: r["name"], whole=True),
    Column("STATE", lambda r: _state_text(r["state"]), whole=True),
    Column("HEALTH", lambda r: _health_text(r["health"]), whole=True),
    Column("RACK", lambda r: r["rack"], whole=True),  # where an operator walks to: never cut at 80 columns
    Column("AGE", lambda r: age(r["state_since"]), secondary=True),  # in its current state
    Column("JOBS", lambda r: _jobs_cell(r["jobs"]), secondary=True),
    Column("REASON", lambda r: shown(r["reason"])),
    Column("ISLAND", lambda r: r["island"], wide=True),
    Column("SWITCH", lambda r: r["switch"], wide=True),
    Column("NVL-DOMAIN", lambda r: r.get("nvlink_domain", ""), wide=True),
    Column("U", lambda r: "" if r["position"] is None else str(r["position"]), wide=True),
    Column("PROFILE", lambda r: r["profile"], wide=True),
    Column("SCHEDULER", lambda r: r["scheduler"], wide=True),
    Column("ADDRESS", lambda r: r["address"], wide=True),
    Column("BMC", lambda r: r.get("bmc") or "", wide=True),
    Column("LABELS", lambda r: ",".join(f"{k}={v}" for k, v in r["labels"].items()), wide=True),
    Column("SINCE", lambda r: when(r["state_since"]), wide=True),
    Column("AGENT", lambda r: age(r["agent_seen_at"]) or "-", wide=True),  # how long ago its agent was heard
    Column("GPUS-OUT", lambda r: ",".join(g["gpu"] for g in r.get("gpus_out", [])) or "-", wide=True),
)
EVENT_COLUMNS = (
    Column("at", lambda r: when(r["at"])),
    Column("from", lambda r: r["from"], whole=True),
    Column("to", lambda r: r["to"], whole=True),
    Column("trigger", lambda r: r["trigger"]),
    Column("actor", lambda r: r["actor"]),
    Column("for", lambda r: r["for"] or "-"),
    Column("cause", lambda r: r["cause"]),
)

CHECK_COLUMNS = (
    Column("check", lambda c: c["check"]),
    Column("status", lambda c: c["status"]),
    Column("since", lambda c: when(c["since"])),
    Column("runs", lambda c: c["runs"]),
    Column("last", lambda c: when(c["at"])),
    Column("reason", lambda c: shown(c["reason"])),
)
CONDITION_COLUMNS = (
    Column("condition", lambda c: c["type"]),
    Column("since", lambda c: when(c["since"])),
    Column("reason", lambda c: shown(c["reason"])),
)
HEALTH_EVENT_COLUMNS = (
    Column("source", lambda h: h["source"]),
    Column("code", lambda h: h["code"]),
    Column("severity", lambda h: h["severity"]),
    Column("action", lambda h: h["action"]),
    Column("at", lambda h: when(h["at"])),
)


def _nodes_table(rows: list[dict[str, Any]], wide: bool) -> RenderableType:
    return column_table(NODE_COLUMNS, rows, wide)


# NVIDIA's XID codes are small numbers (below 200 today); the bound keeps a typo from becoming
# an integer the database cannot store.
MAX_XID = 65535


def _hosts(names: list[str]) -> list[str]:
    """Node names as given, each of them possibly a Slurm host list (gpu-[002-008,017])."""
    from fleetctl.inventory.hostlist import HostListError, expand_all

    try:
        return expand_all(names)
    except HostListError as exc:
        fail(str(exc), EXIT_USAGE)


def _require_nodes(ctx: typer.Context, names: list[str]) -> None:
    from fleetctl.db.queries import existing_names

    unknown = [n for n in names if n not in existing_names(context.engine(ctx), names)]
    if unknown:
        fail(f"unknown node{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}", EXIT_OPERATIONAL)


@app.command("import")
def import_nodes(
    ctx: typer.Context,
    file: Path = typer.Argument(..., help="YAML inventory with a top-level 'nodes:' list"),
    dry_run: bool = typer.Option(False, "--dry-run", help="validate and show what would change; write nothing"),
    adopt: bool = typer.Option(
        False,
        "--adopt",
        help="the new nodes already run jobs: bring them in as production "
        "(no burn-in, no drain), unchecked until a sweep finds each idle",
    ),
) -> None:
    """Import (or re-import) an inventory; starts a lifecycle workflow for each new node.

    With --adopt, each node new to fleetctl is recorded as adopted and its workflow starts in
    production; nodes fleetctl already knows keep their state."""
    from fleetctl.db import queries
    from fleetctl.inventory.parse import load_inventory
    from fleetctl.inventory.topology import domain_size_conflict
    from fleetctl.nodes.scheduler_sync import hold_new_nodes
    from fleetctl.text import bounded, printable

    specs = load_inventory(
        file, _known_profiles(context.settings(ctx).profiles_dir), allow_http_bmc=context.settings(ctx).bmc_allow_http
    )
    in_domains = {s.profile for s in specs if s.nvlink_domain}
    if in_domains and (
        conflict := domain_size_conflict(specs, _domain_sizes(context.settings(ctx).profiles_dir, in_domains))
    ):
        fail(f"{file}: {conflict}", EXIT_USAGE)
    engine = context.engine(ctx)
    if clashes := queries.case_clashes(engine, (s.name for s in specs)):
        fail(f"{file}: {queries.clash_message(clashes)}", EXIT_USAGE)
    if clash := queries.machine_clash(engine, specs):
        fail(f"{file}: {clash}", EXIT_USAGE)
    existing = queries.existing_names(engine, (s.name for s in specs))
    if dry_run:
        typer.echo(
            f"{file}: {plural(len(specs), 'node')} valid; {len(specs) - len(existing)} new, {len(existing)} already known (dry run, nothing written)"
        )
        _warn_lacking_bmc(ctx, specs)
        return

    async def run() -> None:
        from rich.progress import Progress

        from fleetctl.workflows.api import node_workflow_id
        from fleetctl.workflows.client import ensure_node_workflows, require_search_attributes

        client = await context.temporal_client(ctx)  # before writing: no half-imported fleet
        # A namespace without fleetctl's search attributes refuses the workflows' start (a raw
        # RPCError): one line saying to run `fleetctl temporal setup` instead, as the worker's.
        if warning := await require_search_attributes(client):
            typer.echo(f"warning: {warning}", err=True)
        schedulers = _schedulers(ctx, {s.scheduler for s in specs})  # so too the adapters that hold them
        created, updated, unchanged = queries.upsert_nodes(engine, specs)
        adopted = []
        if adopt:
            actor = context.settings(ctx).identity()
            for name in created:
                # the key the node's workflow would give its first transition: it starts past it
                workflow_id = node_workflow_id(name)
                if queries.record_adoption(engine, name, actor, workflow_id, f"{workflow_id}@1") is not None:
                    adopted.append(name)
        # A scheduler places work on any node it has not drained: a node imported for
        # burn-in is held there until admitted (an adopted one already runs jobs: never).
        for_burn_in = set(created) - set(adopted)
        refusals = hold_new_nodes(
            [(s.name, s.scheduler) for s in specs if s.name in for_burn_in and s.scheduler != "none"], schedulers
        )
        nodes = {n.name: n for n in queries.list_nodes(engine)}
        with Progress(transient=True) as progress:
            task = progress.add_task("starting node workflows", total=len(specs))
            await ensure_node_workflows(
                client,
                context.settings(ctx),
                ((s.name, nodes[s.name].state, nodes[s.name].state_version) for s in specs),
                on_started=lambda _name: progress.advance(task),
            )
        typer.echo(
            f"{file}: {len(created)} created, {len(updated)} updated, {len(unchanged)} unchanged"
            + (f"; {len(adopted)} adopted in production, unchecked until a sweep finds each idle" if adopt else "")
        )
        _warn_lacking_bmc(ctx, specs)
        for refusal in refusals:
            typer.echo(printable(bounded(f"{refusal}; admission holds it before any check")), err=True)
        if refusals:
            raise typer.Exit(EXIT_OPERATIONAL)

    context.run_async(run())


def _warn_lacking_bmc(ctx: typer.Context, specs: list[NodeSpec]) -> None:
    """On stderr, a line per node with no BMC while a runbook acts through one (a reboot):
    there that step fails, and the node waits for an operator. The import stands either way."""
    from fleetctl.remediation.runbooks import RUNBOOKS_DIR, load_runbooks, needing_bmc
    from fleetctl.remediation.sandbox import RunbookError
    from fleetctl.text import printable

    lacking = [s.name for s in specs if not s.bmc]
    if not lacking:
        return
    try:
        books = needing_bmc(load_runbooks(context.settings(ctx).runbooks_dir or RUNBOOKS_DIR).values())
    except RunbookError as exc:
        typer.echo(printable(f"warning: which runbooks need a BMC is not known: {exc}"), err=True)
        return
    for name in lacking if books else ():
        typer.echo(
            printable(
                f"warning: {name} has no BMC (inventory field 'bmc'): the reboot step of {', '.join(books)} "
                "fails on it, leaving it for an operator"
            ),
            err=True,
        )


def _schedulers(ctx: typer.Context, kinds: set[str]) -> dict[str, Scheduler]:
    """The adapter of each scheduler kind (none: no scheduler to hold a node in)."""
    from fleetctl.cli.job import scheduler_adapter

    return {kind: scheduler_adapter(ctx, kind) for kind in sorted(kinds - {"none"})}


@app.command("list")
def list_nodes(
    ctx: typer.Context,
    selector: str | None = typer.Option(None, "--selector", "-l", help="labels: key=value[,key=value]"),
    state: list[str] = typer.Option(
        [],
        "--state",
        help="only nodes in these states: repeat it or give a comma list; "
        "also drained (maintenance), drain (draining, maintenance), out (and rma)",
    ),
    sort_by: str | None = SORT_BY_OPTION,
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """List nodes, optionally filtered by labels and state."""
    from fleetctl.db.queries import list_nodes as query
    from fleetctl.inventory.parse import parse_selector
    from fleetctl.nodes.conditions import UnknownState, states_named
    from fleetctl.nodes.view_store import node_rows

    labels = parse_selector(selector) if selector else None
    try:
        states = states_named(state)
    except UnknownState as exc:
        fail(str(exc), EXIT_USAGE)
    wide = output is not OutputFormat.table
    engine = context.engine(ctx)
    nodes = query(engine, labels, states or None)
    rows = sorted_rows(node_rows(engine, nodes, wide, _freshness(ctx), _asked_jobs(ctx, nodes)), sort_by)
    emit(rows, output, _nodes_table, empty="No nodes.")


def unknown_node(name: str, code: int = 1) -> NoReturn:
    """One line for a name no node has: what is wrong with it when it is a host list (a
    malformed one, or one naming several nodes where the command takes one), else unknown."""
    from fleetctl.inventory.hostlist import HostListError, expand

    if "[" in name or "]" in name:
        try:
            names = expand(name)
        except HostListError as exc:
            fail(f"malformed host list: {exc}", EXIT_USAGE)
        if len(names) > 1:
            fail(f"{printable(name[:80])} names {len(names)} nodes; this command takes one", EXIT_USAGE)
    fail(f"unknown node: {printable(name[:255])}", code)


@app.command("show")
def show(ctx: typer.Context, name: str, output: OutputFormat = OUTPUT_OPTION) -> None:
    """One node: state, health (one row per check), why it is out or held, recent events."""
    from fleetctl.db import queries
    from fleetctl.nodes.fleet_status_store import RECENT_AUTOMATION_EVENTS, recent_automation
    from fleetctl.nodes.view_store import node_detail

    engine = context.engine(ctx)
    node = queries.get_node(engine, name)
    if node is None:
        unknown_node(name)
    data = node_detail(engine, node, _freshness(ctx), _asked_jobs(ctx, [node]).get(name))
    data["workflow"] = _workflow_now(ctx, name)
    data["events"] = [_event_row(e) for e in queries.node_events(engine, name, limit=10)]
    if data["workflow"]["reachable"]:
        data["workflow"]["last_outcome"] = current_outcome(
            data["workflow"]["last_outcome"], data["state"], data["events"]
        )
    # What took the node out, while it is out: planned work or the failure it counts as.
    data["out_for"] = _out_for(data["events"])
    data["remediated"], remediated_text = _remediated(ctx, name)
    data["stragglers"] = _straggler_findings(engine, name)
    data["automation"] = recent_automation(engine, node=name)[:RECENT_AUTOMATION_EVENTS]
    data["rma_held"] = _held_rmas(engine, name)
    data["now"] = _doing(engine, name, data)

    def render(d: dict[str, Any], _wide: bool) -> Group:
        from rich.console import Group
        from rich.text import Text

        head = Text.assemble(
            (d["name"], "bold"),
            "  ",
            _state_text(d["state"]),
            "  ",
            _health_text(d["health"]),
            shown(
                f"  since {when(d['state_since'])}  rack {d['rack']}  profile {d['profile']}"
                f"  scheduler {d['scheduler']}  address {d['address']}"
            ),
        )
        parts: list[RenderableType] = [
            head,
            shown(topology_line(d)),
            shown("labels: " + (", ".join(f"{k}={v}" for k, v in d["labels"].items()) or "-")),
        ]
        if d["reason"]:
            parts.append(Text.assemble(("reason: ", "bold"), shown(d["reason"])))
        if d["out_for"]:
            parts.append(Text.assemble(("out for: ", "bold"), shown(d["out_for"])))
        if d["jobs"]:
            parts.append(shown(f"jobs: {', '.join(d['jobs'])}"))
        for g in d["gpus_out"]:  # the node serves on with its other GPUs
            parts.append(shown(f"GPU out: {g['gpu']} since {when(g['since'])}: {g['reason']}"))
        if d["agent_seen_at"]:
            parts.append(shown(f"agent: last heard {when(d['agent_seen_at'])} ({age(d['agent_seen_at'])} ago)"))
        if d["remediated"]["times"]:
            parts.append(shown(remediated_text))
        if d["needs_operator"]:
            parts.append(
                Text.assemble(
                    ("needs an operator: ", "bold yellow"),
                    shown(f"{d['needs_operator']['type']}: {d['needs_operator']['reason']}"),
                )
            )
        for held in d["rma_held"]:
            parts.append(
                Text.assemble(
                    (f"RMA {held['id']} awaits an operator: ", "bold yellow"),
                    shown(f"{held['held_reason']} (fleetctl rma confirm {held['id']} | reject {held['id']})"),
                )
            )
        w = d["workflow"]
        if not w["reachable"]:
            parts.append(Text(f"workflow: unknown ({w['error']})", style="yellow"))
        last = w.get("last_outcome")
        parts.append(
            Text.assemble(("now: ", "bold"), shown(d["now"]), *((("   last: ", "bold"), shown(last)) if last else ()))
        )
        if d["conditions"]:
            parts.append(column_table(CONDITION_COLUMNS, d["conditions"], title="conditions"))
        if d["checks"]:
            parts.append(column_table(CHECK_COLUMNS, d["checks"], title="checks (latest run of each)"))
        if d["health_events"]:
            parts.append(column_table(HEALTH_EVENT_COLUMNS, d["health_events"], title="health events"))
        if d["stragglers"]:
            from fleetctl.cli.job import STRAGGLER_COLUMNS

            parts.append(column_table(STRAGGLER_COLUMNS, d["stragglers"], title="stragglers in production"))
        if d["automation"]:
            from fleetctl.cli.fleet import AUTOMATION_COLUMNS

            parts.append(column_table(AUTOMATION_COLUMNS[1:], d["automation"], title="automation (repeats counted)"))
        parts.append(_events_table(d["events"], "recent events"))
        return Group(*parts)

    emit(data, output, render)


def current_outcome(last_outcome: str, state: str, events: list[dict[str, Any]]) -> str:
    """The workflow's last outcome as `node show` gives it: a drain's ("drained: ...") is over
    once the node is back in production (an undrain is a transition, not a phase, and leaves
    the workflow's outcome as the drain left it): then the return says what happened last."""
    if state != "production" or not last_outcome.startswith("drained"):
        return last_outcome
    back = next((e for e in reversed(events) if e["to"] == "production"), None)
    if back is None:
        return last_outcome
    return f"back in production ({back['trigger']} by {back['actor']}, {when(back['at'])})"


def _out_for(events: list[dict[str, Any]]) -> str:
    """What the latest move out of production was for, unless the node has returned since."""
    for e in reversed(events):
        if e["to"] == "production":
            return ""
        purpose: str = e["for"]  # _event_row's what_a_drain_is
        if purpose:
            return purpose
    return ""


def _freshness(ctx: typer.Context) -> Freshness:
    """How old evidence may be before a node reads Stale: its fleet's sweep interval, as
    `fleetctl schedule` recorded it in the database (not known, so not judged, when no sweep
    is scheduled). `node list` and `node show` judge alike, without asking Temporal."""
    from fleetctl.db.models import utcnow
    from fleetctl.durations import as_utc
    from fleetctl.nodes.view_store import freshness

    s = context.settings(ctx)
    return freshness(context.engine(ctx), s.fleet, s.agent_silence_s, as_utc(utcnow()))


def _asked_jobs(ctx: typer.Context, nodes: Sequence[Node]) -> dict[str, list[str]]:
    """The jobs on each node whose scheduler the database does not mirror (Slurm, Kubernetes),
    as `job list --node` asks them of the scheduler. A scheduler that does not answer leaves its
    nodes' jobs unknown (`?`), said once on stderr: the rest of the view stands without it."""
    from concurrent.futures import ThreadPoolExecutor

    from fleetctl.cli.job import scheduler_adapter
    from fleetctl.nodes.view_store import MIRRORED_SCHEDULERS
    from fleetctl.schedulers.base import SchedulerError
    from fleetctl.text import bounded, printable

    per_kind: dict[str, list[str]] = {}
    for n in nodes:
        if n.scheduler != "none" and n.scheduler not in MIRRORED_SCHEDULERS:
            per_kind.setdefault(n.scheduler, []).append(n.name)
    asked: dict[str, list[str]] = {}
    for kind, names in sorted(per_kind.items()):
        try:
            jobs_on_node = scheduler_adapter(ctx, kind).jobs_on_node
            with ThreadPoolExecutor(8) as pool:
                found = list(zip(names, pool.map(jobs_on_node, names), strict=True))
        except SchedulerError as exc:
            typer.echo(printable(bounded(f"warning: jobs of the {kind} nodes not known: {exc}")), err=True)
            continue
        asked.update((name, [j.job_id for j in jobs]) for name, jobs in found)
    return asked


def _doing(engine: Engine, name: str, data: dict[str, Any]) -> str:
    """What the node is doing (conditions.doing): its workflow's activity, its RMAs, its live
    runbook run still going, its jobs, from what the database records."""
    from fleetctl.db.remediation import rma_records, runs, steps
    from fleetctl.nodes.conditions import RunInFlight, doing
    from fleetctl.remediation.rma import AWAITING_CONFIRMATION, OPEN

    newest = next((r for r in runs(engine, name, limit=20) if r.mode == "live"), None)
    run = None
    if newest is not None and newest.status == "running":
        done = steps(engine, newest.run_key)
        run = RunInFlight(newest.run_key, newest.runbook, len(done), done[-1].name if done else "")
    records = rma_records(engine, node_name=name)
    return doing(
        data["workflow"].get("activity") or "",
        data["jobs"],
        run,
        [r.id for r in reversed(records) if r.status == AWAITING_CONFIRMATION and r.id is not None],
        [r.id for r in reversed(records) if r.status == OPEN and r.id is not None],
    )


def _held_rmas(engine: Engine, name: str) -> list[dict[str, Any]]:
    """The node's RMAs held for an operator's confirmation (a correlated burst)."""
    from fleetctl.db.remediation import rma_records
    from fleetctl.remediation.rma import AWAITING_CONFIRMATION

    return [
        {"id": r.id, "reason": r.reason, "held_reason": r.held_reason, "opened_at": r.opened_at}
        for r in rma_records(engine, AWAITING_CONFIRMATION, name)
    ]


def _straggler_findings(engine: Engine, name: str) -> list[dict[str, Any]]:
    """The node's production straggler findings, newest first (the latest ten)."""
    from fleetctl.db import stragglers

    return [stragglers.finding_row(f) for f in stragglers.findings(engine, node=name, limit=10)]


def _remediated(ctx: typer.Context, name: str) -> tuple[dict[str, Any], str]:
    """The lemon rule's figure now, as the RMA reason and the report give it."""
    from datetime import timedelta

    from fleetctl.db.models import utcnow
    from fleetctl.db.remediation import times_remediated
    from fleetctl.remediation.lemons import LemonPolicy

    s = context.settings(ctx)
    policy = LemonPolicy(s.lemon_threshold, timedelta(days=s.lemon_window_days))
    times = times_remediated(context.engine(ctx), name, policy, utcnow())
    return (
        {"times": times, "window_days": s.lemon_window_days, "lemon_threshold": policy.threshold},
        f"{policy.describe(times)} (a lemon at {policy.threshold})",
    )


def _workflow_now(ctx: typer.Context, name: str) -> dict[str, Any]:
    """What the node's own workflow is doing (waiting for jobs, cordoning, a check) and how
    its last phase ended; the rest of `node show` comes from the database and stands without it."""
    from fleetctl.workflows.client import node_now

    now, error = context.temporal_read(ctx, lambda client: node_now(client, name), "the node's workflow")
    if now is None:  # a query of the workflow always answers: None is Temporal's error
        return {"reachable": False, "error": error}
    return {"reachable": True, "activity": now.activity, "last_outcome": now.last_outcome, "queued": len(now.work)}


def _event_row(e: NodeEvent) -> dict[str, Any]:
    from fleetctl.remediation.drains import what_a_drain_is

    return {
        "at": e.at,
        "from": e.from_state,
        "to": e.to_state,
        "trigger": e.trigger,
        "cause": e.cause,
        "actor": e.actor,
        "actor_kind": e.actor_kind,
        "workflow_id": e.workflow_id,
        "version": e.state_version,
        "failure": e.failure,
        "for": what_a_drain_is(e.from_state, e.to_state, e.failure, e.actor_kind, e.trigger),
    }


def _events_table(rows: list[dict[str, Any]], title: str | None = None) -> RenderableType:
    return column_table(EVENT_COLUMNS, rows, title=title)


@app.command("history")
def history(ctx: typer.Context, name: str, output: OutputFormat = OUTPUT_OPTION) -> None:
    """Every transition of a node, oldest first."""
    from fleetctl.db import queries

    engine = context.engine(ctx)
    if queries.get_node(engine, name) is None:
        unknown_node(name)
    emit(
        [_event_row(e) for e in queries.node_events(engine, name)],
        output,
        lambda rows, _w: _events_table(rows),
        empty=f"No events of {name}.",
    )


def _command(
    ctx: typer.Context, names: list[str], trigger: str, cause: str, event: dict[str, Any] | None = None
) -> None:
    from fleetctl.workflows.client import request_many

    _require_nodes(ctx, names)
    s = context.settings(ctx)

    async def run() -> list[Outcome]:
        client = await context.temporal_client(ctx)
        return await request_many(client, names, trigger, s.identity(), cause, event)

    failed = 0
    for outcome in context.run_async(run()):
        r = outcome.result
        if r is None:  # refused: request_many says why in `error`
            failed += 1
            error = outcome.error or f"{outcome.node}: {trigger} refused"
            _record_rejection(ctx, outcome.node, trigger, error)
            typer.echo(f"error: {error}", err=True)
        else:
            typer.echo(f"{r.node}: {r.from_state} -> {r.to_state}")
    if failed:
        raise typer.Exit(EXIT_OPERATIONAL)


def _record_rejection(ctx: typer.Context, node: str, trigger: str, reason: str) -> None:
    from fleetctl.db.audit import record_rejection

    s = context.settings(ctx)
    record_rejection(context.engine(ctx), fleet=s.fleet, node=node, actor=s.identity(), trigger=trigger, reason=reason)


@app.command("drain")
def drain(
    ctx: typer.Context,
    names: list[str] = typer.Argument(..., help="node names or Slurm host lists (gpu-[002-008,017])"),
    reason: str = typer.Option(
        ..., "--reason", callback=free_text(required=True), help="why; recorded on the event and in the scheduler"
    ),
    maintenance: bool | None = typer.Option(
        None,
        "--maintenance/--failure",
        help="planned work, not counted as a failure (the default when --reason names no XID), or a fault "
        "(counted in MTTF, MTTR and the lemon rule)",
    ),
    check: str | None = typer.Option(None, "--check", help="the failure is this check's (implies --failure)"),
    xid: int | None = typer.Option(None, "--xid", help="the failure is this XID (implies --failure)"),
    yes: bool = typer.Option(False, "--yes", help="go past the automation's capacity limits without asking"),
    dry_run: bool = typer.Option(False, "--dry-run", help="say what each node would do; change and record nothing"),
) -> None:
    """Take production nodes out of service. A drain says what it is: planned work
    (--maintenance, the default) or a fault (--failure, --check NAME, --xid CODE); only a
    fault counts in the report's failures, repairs and lemons. A drain that takes the fleet
    or a rack past the capacity guard's limits says so and asks first (--yes: do not ask)."""
    from fleetctl.db.queries import nodes_named
    from fleetctl.inventory.hostlist import compress
    from fleetctl.nodes.lifecycle import NodeState

    event = drain_event(reason, maintenance, check, xid)
    names = _hosts(names)
    if dry_run:
        _would(ctx, names, "drain")
        # What the real command would say before it drains: the same warnings, nothing asked.
        for line in _drain_warnings(ctx, names):
            typer.echo(f"warning: {line} (dry run: the drain would ask first)", err=True)
        return
    _require_nodes(ctx, names)
    # Already out of service is done, as kubectl drain and scontrol update State=DRAIN say:
    # the drain that took the node out keeps its reason.
    done: dict[str, list[str]] = {}
    for n in nodes_named(context.engine(ctx), names):
        if NodeState(n.state).out_of_service:
            done.setdefault(n.state, []).append(n.name)
    for state, already in done.items():
        typer.echo(f"{compress(already)}: already {state}")
    skipped = {name for already in done.values() for name in already}
    names = [n for n in names if n not in skipped]
    if not names:
        return
    over = _drain_warnings(ctx, names)
    for line in over:
        typer.echo(f"warning: {line}", err=True)
    if (
        over
        and not yes
        and not typer.confirm(
            "Drain anyway? Automation cannot drain in these racks until nodes return", default=False, err=True
        )
    ):
        fail("not drained", EXIT_OPERATIONAL)
    _command(ctx, names, "drain", f"operator: {reason}", event)


def _drain_warnings(ctx: typer.Context, names: list[str]) -> list[str]:
    """What a drain of `names` would take past the capacity guard's limits (the drain asks
    first); and, said first, the jobs running on each node, as kubectl drain lists the pods it
    evicts: the drain waits for them to end, or a critical fault restarts them elsewhere."""
    from fleetctl.config import guard_policy
    from fleetctl.nodes.fleet_status_store import drain_overruns
    from fleetctl.nodes.view_store import running_jobs_by_node

    engine = context.engine(ctx)
    running = running_jobs_by_node(engine)
    for name in names:
        if jobs := running.get(name):
            typer.echo(
                f"{name}: {plural(len(jobs), 'job')} running: {', '.join(jobs)}: the drain waits for "
                f"{'it' if len(jobs) == 1 else 'them'} to end (`fleetctl job restart` moves a job now)"
            )
    s = context.settings(ctx)
    return drain_overruns(engine, guard_policy(s, s.fleet), s.fleet, names)


_XID_IN_REASON = re.compile(r"\bxid\s*(\d+)\b", re.IGNORECASE)


def drain_event(reason: str, maintenance: bool | None, check: str | None, xid: int | None) -> dict[str, Any]:
    """What an operator's drain is, as the event its node_events row records the failure of
    (events.Event.failure): `maintenance` for planned work; `xid <code>`, `check <name>` or
    `operator` for a fault. With neither flag, a reason that names an XID is that XID's
    failure, any other is planned work. Saying --maintenance with a fault is a usage error."""
    from fleetctl.remediation.events import Event, EventKind

    if maintenance and (check is not None or xid is not None):
        fail("--maintenance is planned work: it names no --check or --xid", EXIT_USAGE)
    if check is not None and xid is not None:
        fail("a drain is for one fault: --check or --xid, not both", EXIT_USAGE)
    if maintenance is None and check is None and xid is None and (named := _XID_IN_REASON.search(reason)):
        xid = int(named[1])
    if xid is not None and not 0 <= xid <= MAX_XID:
        fail(f"--xid must be a positive XID code (at most {MAX_XID})", EXIT_USAGE)
    if check is not None:
        from fleetctl.checks.catalog import CHECKS

        if check not in CHECKS:
            fail(f"--check: no such check: {check[:80]!r} (see fleetctl check list)", EXIT_USAGE)
    if xid is not None:
        return Event(EventKind.XID, code=xid, message=reason).to_dict()
    if check is not None:
        return Event(EventKind.CHECK, check=check, status="fail", message=reason).to_dict()
    if maintenance is False:
        return Event(EventKind.OPERATOR, message=reason).to_dict()
    return Event(EventKind.MAINTENANCE, message=reason).to_dict()


def _would(ctx: typer.Context, names: list[str], trigger: str) -> None:
    """What `trigger` would do to each node, judged by the same table its workflow uses, on the
    state the database holds; Temporal is not asked and nothing is written."""
    from fleetctl.db import queries
    from fleetctl.nodes.lifecycle import Actor, IllegalTransition, next_state

    _require_nodes(ctx, names)
    refused = 0
    for node in queries.nodes_named(context.engine(ctx), dict.fromkeys(names)):
        try:
            target = next_state(node.state, trigger, Actor.OPERATOR)
        except IllegalTransition as exc:
            refused += 1
            typer.echo(f"error: {node.name}: {exc}", err=True)
            continue
        typer.echo(f"{node.name}: would {trigger}: {node.state} -> {target.value} (dry run, nothing done)")
    if refused:
        raise typer.Exit(EXIT_OPERATIONAL)


@app.command("undrain")
def undrain(ctx: typer.Context, names: list[str] = typer.Argument(..., help="node names or Slurm host lists")) -> None:
    """Return drained nodes to production. A node in production already is said so, and is
    no failure (as `kubectl uncordon` of a schedulable node)."""
    from fleetctl.db import queries
    from fleetctl.inventory.hostlist import compress
    from fleetctl.nodes.lifecycle import NodeState

    hosts = _hosts(names)
    _require_nodes(ctx, hosts)
    states = {n.name: n.state for n in queries.nodes_named(context.engine(ctx), hosts)}
    for name in hosts:
        if states[name] == NodeState.PRODUCTION.value:
            typer.echo(f"{name}: already in production")
    rest = [name for name in hosts if states[name] != NodeState.PRODUCTION.value]
    if rest:
        _command(ctx, rest, "undrain", "operator: undrain")
    # Drained to the end (maintenance): worked on, perhaps a part swapped, and back unchecked.
    worked_on = compress(name for name in rest if states[name] == NodeState.MAINTENANCE.value)
    if worked_on:
        typer.echo(
            f"hint: undrain returns a node unchecked; after hardware work use `fleetctl node admit {worked_on} "
            "--suite quick`, which checks it first",
            err=True,
        )


@app.command("release-gpu")
def release_gpu(
    ctx: typer.Context,
    name: str,
    gpu: str = typer.Argument(..., help="the GPU's PCI address, as `node show` lists it (0000:2b:00)"),
    reason: str = typer.Option(..., "--reason", callback=free_text(required=True), help="why it is fit again"),
) -> None:
    """Put a GPU taken out alone (a fault scoped to it) back in the node's scheduler."""
    from fleetctl.nodes.gpu_quarantine import NotAGpuAddress, gpu_key
    from fleetctl.workflows.client import CommandRejected
    from fleetctl.workflows.client import release_gpu as release

    try:
        key = gpu_key(gpu)
    except NotAGpuAddress as exc:
        fail(str(exc), EXIT_USAGE)
    _require_nodes(ctx, [name])
    s = context.settings(ctx)

    async def run() -> str:
        return await release(await context.temporal_client(ctx), name, key, s.identity(), reason)

    try:
        typer.echo(context.run_async(run()))
    except CommandRejected as exc:
        fail(str(exc), EXIT_OPERATIONAL)


@app.command("rma")
def rma(
    ctx: typer.Context, name: str, reason: str = typer.Option(..., "--reason", callback=free_text(required=True))
) -> None:
    """Send a drained node to RMA."""
    _command(ctx, [name], "send_to_rma", f"operator: {reason}")


@app.command("retire")
def retire(ctx: typer.Context, name: str, yes: bool = typer.Option(False, "--yes", help="do not ask")) -> None:
    """Remove a node from the fleet for good."""
    _require_nodes(ctx, [name])
    if not yes and not typer.confirm(f"Retire {name}? It leaves the fleet for good", default=False):
        fail("not retired", EXIT_OPERATIONAL)
    _command(ctx, [name], "retire", "operator: retire")


def _phase(ctx: typer.Context, names: list[str], kind: str, suite: str) -> None:
    from fleetctl.checks.suites import SuiteError, load_suite
    from fleetctl.workflows.client import request_phases

    names = _hosts(names)  # a node named twice is asked once
    _require_nodes(ctx, names)
    s = context.settings(ctx)
    try:
        # Refused here: a node's workflow that is handed an unknown suite cannot run it.
        load_suite(suite, s.suites_dir or None)
    except SuiteError as exc:
        fail(str(exc), EXIT_USAGE)

    async def run() -> list[PhaseOutcome]:
        from rich.progress import Progress

        client = await context.temporal_client(ctx)
        # Many nodes at once, a bounded number in flight; each node's update has an id of its
        # own for this command, so a call retried after a timeout is never a second request.
        with Progress(transient=True, disable=len(names) < 2) as progress:
            task = progress.add_task(f"{kind}: asking {len(names)} nodes' workflows", total=len(names))
            return await request_phases(
                client, names, kind, s.identity(), suite, on_done=lambda _outcome: progress.advance(task)
            )

    outcomes = context.run_async(run())
    for o in outcomes:
        if o.accepted:
            typer.echo(f"{o.node}: {kind} with suite {suite} started ({o.message})")
    failed = [o for o in outcomes if not o.accepted]
    for o in failed:
        typer.echo(f"error: {o.message}", err=True)
    if failed:
        if len(names) > 1:
            typer.echo(f"error: {kind}: {len(failed)} of {plural(len(names), 'node')} not started", err=True)
        raise typer.Exit(EXIT_OPERATIONAL)


@app.command("admit")
def admit(
    ctx: typer.Context,
    names: list[str] = typer.Argument(
        ..., help="node names or Slurm host lists (new, maintenance or returned from RMA)"
    ),
    suite: str = typer.Option("burn-in", "--suite", help="the suite burn-in runs"),
) -> None:
    """Burn in, admit and put into production (new nodes, repaired nodes, RMA returns)."""
    _phase(ctx, names, "admit", suite)


@app.command("recheck")
def recheck(ctx: typer.Context, name: str, suite: str = typer.Option("quick", "--suite")) -> None:
    """Run a suite on a node now; a production node that fails is drained (capacity guard permitting)."""
    _phase(ctx, [name], "recheck", suite)


@app.command("event")
def event(
    ctx: typer.Context,
    name: str,
    xid: int | None = typer.Option(None, "--xid", help="an XID code seen on the node"),
    message: str = typer.Option("", "--message", callback=free_text(), help="what was seen"),
    from_log: Path | None = typer.Option(
        None, "--from-log", help="kernel log lines (dmesg, journal) to parse for XIDs"
    ),
    severity: str = typer.Option(
        "",
        "--severity",
        help="info, warning or critical: an event with --message and no --xid drains the node "
        "at once when critical; a critical one is handled ahead of others queued",
    ),
) -> None:
    """Report a health event; critical ones (XID 79, 48, 95, ...) drain the node at once."""
    import time
    import uuid

    # Only the Temporal client, the message and the catalog: this is the first step of the
    # reaction to a critical event, and the workflows, the activity stack and the database
    # cost seconds to import. The database is asked only when the event cannot be delivered.
    from fleetctl.checks.result import SEVERITIES
    from fleetctl.workflows.client import CommandRejected, send_health_events
    from fleetctl.workflows.health_events import health_event

    if xid is not None and from_log is not None:
        fail("give at most one of --xid or --from-log", EXIT_USAGE)
    if xid is None and from_log is None and not (message and severity):
        fail("give --xid, --from-log, or --message with --severity", EXIT_USAGE)
    if severity not in ("", *SEVERITIES):
        fail(f"--severity must be one of {', '.join(SEVERITIES)}", EXIT_USAGE)
    s = context.settings(ctx)
    policy = context.xid_policy(s)
    now = time.time()
    if xid is not None:
        if not 0 <= xid <= MAX_XID:
            fail(f"--xid must be a positive XID code (at most {MAX_XID})", EXIT_USAGE)
        events = [
            health_event(
                name,
                "xid",
                code=xid,
                message=message,
                actor=s.identity(),
                event_id=str(uuid.uuid4()),
                at=now,
                severity=severity,
                policy=policy,
            )
        ]
    elif from_log is None:  # an operator's report of a fault without an Xid (an SXid, a link down)
        events = [
            health_event(
                name,
                "operator",
                message=message,
                actor=s.identity(),
                event_id=str(uuid.uuid4()),
                at=now,
                severity=severity,
                policy=policy,
            )
        ]
    else:
        events = _events_from_log(name, from_log, s.identity(), now, severity, policy)
    # An operator may say more than the catalog, never less: a graver catalog word stands.
    for code, graver in sorted({(e.code, e.severity) for e in events if severity and e.severity != severity}):
        typer.echo(
            f"note: XID {code} is {graver} in {policy.source or 'the catalog'}: sent as {graver}, not {severity}",
            err=True,
        )

    async def run() -> None:
        client = await context.temporal_client(ctx)
        await send_health_events(client, name, events)

    try:
        context.run_async(run())
    except CommandRejected:
        _require_nodes(ctx, [name])  # an unknown node says so; a known one without a workflow, why not
        raise
    codes = ", ".join(str(e.code) for e in events if e.code is not None)
    typer.echo(
        f"{name}: {plural(len(events), 'health event')} sent" + (f" (XID {codes})" if codes else f" ({severity})")
    )


def _events_from_log(
    name: str, from_log: Path, actor: str, now: float, severity: str, policy: XidPolicy
) -> list[HealthEventInput]:
    """The XID lines of a kernel log as health events, each line's id its own (the same line
    sent twice is one event); a log that cannot be read or holds no XID line: one line, exit 2."""
    from fleetctl.checks.xid import parse_xid_lines
    from fleetctl.nodes.health import health_event_id
    from fleetctl.text import bounded
    from fleetctl.workflows.health_events import health_event

    try:
        text = from_log.read_text(errors="replace")
    except OSError as exc:
        fail(f"{from_log}: cannot read ({exc.strerror})", EXIT_USAGE)
    try:
        parsed = parse_xid_lines(text)
    except ValueError as exc:  # checks' UnjudgeableOutput: a report it cannot read, a code out of range
        fail(f"{from_log}: {exc}", EXIT_USAGE)
    if not parsed:
        fail(f"{from_log}: no XID lines found", EXIT_USAGE)
    return [
        health_event(
            name,
            "log",
            code=e.code,
            message=bounded(e.message),
            actor=actor,
            event_id=health_event_id(name, e.timestamp, e.pci, e.code, e.message),
            at=now,
            severity=severity,
            policy=policy,
        )
        for e in parsed
    ]


_JOB_OPTION_HELP = "the job (Slurm: $SLURM_JOB_ID); recorded with the checks"


@app.command("prolog")
def prolog(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="the node a job is about to start on (Slurm: $SLURMD_NODENAME)"),
    job: str = typer.Option("", "--job", callback=free_text(), help=_JOB_OPTION_HELP),
    suite: str = typer.Option("prejob", "--suite", help="the suite to run: short, the job waits for it"),
) -> None:
    """Pre-job checks, for a scheduler's prolog: run a short suite on the node now; on a
    failure drain it (capacity guard permitting) with the check as cause.

    Exits 3 when the job must not start on the node (a check failed and the node was drained,
    or fleetctl has it out of production); 0 when it may (passed, or the guard kept the node
    in service: a warning says so); 4 when a check could not be judged and none failed; 1
    when fleetctl could not ask (the database, Temporal). deploy's prolog fails the job only
    on 3, so an outage of fleetctl never drains a cluster.
    """
    from fleetctl.workflows.activities.prejob import JobGate

    _job_gate(ctx, name, job, suite, JobGate.PROLOG)


@app.command("epilog")
def epilog(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="the node a job just ended on (Slurm: $SLURMD_NODENAME)"),
    job: str = typer.Option("", "--job", callback=free_text(), help=_JOB_OPTION_HELP),
    suite: str = typer.Option("prejob", "--suite", help="the suite to run: short, the node waits for it"),
) -> None:
    """Post-job checks, for a scheduler's epilog: run a short suite on the node a job just
    left; on a failure drain it (capacity guard permitting) with the check as cause, so a node
    that broke during the job takes no other. Exit codes as `node prolog`'s: 3 when the node
    must take no further job (drained, or out of production in fleetctl)."""
    from fleetctl.workflows.activities.prejob import JobGate

    _job_gate(ctx, name, job, suite, JobGate.EPILOG)


def _job_gate(ctx: typer.Context, name: str, job: str, suite: str, gate: JobGate) -> None:
    """Run `suite` on the node around a job (`gate`) and drain it on a failure; exits as
    `node prolog` says."""
    import re

    from fleetctl.admission.job_gate import GateVerdict, gate_node
    from fleetctl.checks.suites import SuiteError
    from fleetctl.cli.output import EXIT_CHECK_ERROR, EXIT_CHECK_FAILED

    if job and not re.fullmatch(r"[0-9A-Za-z][0-9A-Za-z._+-]{0,63}", job):
        fail(f"--job: not a job id: {job[:80]!r}", EXIT_USAGE)
    try:
        outcome = context.run_async(gate_node(context.settings(ctx), context.engine(ctx), name, job, suite, gate))
    except LookupError as exc:
        fail(str(exc), EXIT_OPERATIONAL)
    except SuiteError as exc:
        fail(str(exc), EXIT_USAGE)
    typer.echo(outcome.message, err=outcome.verdict is not GateVerdict.PASSED)
    if outcome.verdict.blocks:
        raise typer.Exit(EXIT_CHECK_FAILED)
    if outcome.verdict is GateVerdict.UNJUDGED:
        raise typer.Exit(EXIT_CHECK_ERROR)
