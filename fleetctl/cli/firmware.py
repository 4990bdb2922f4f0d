"""`fleetctl firmware ...`: the fleet's baseline, every node's drift from it, and roll-outs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

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
    simple_table,
    within,
)
from fleetctl.text import plural

if TYPE_CHECKING:
    from temporalio.client import Client

    from fleetctl.remediation.firmware import Baseline
    from fleetctl.workflows.api import RolloutStatus

app = typer.Typer(help="Firmware: baseline, drift status, roll-outs.", no_args_is_help=True)
baseline_app = typer.Typer(help="The fleet's firmware baseline.", no_args_is_help=True)
rollout_app = typer.Typer(help="Roll a baseline out: canary, batches, halt on failures.", invoke_without_command=True)
app.add_typer(baseline_app, name="baseline")
app.add_typer(rollout_app, name="rollout")


def _load(ctx: typer.Context, path: Path) -> Baseline:
    """The baseline in `path`, its profiles judged against the packaged and the site's (profiles_dir)."""
    from fleetctl.cli.node import _known_profiles
    from fleetctl.remediation.firmware import BaselineError, load_baseline
    from fleetctl.remediation.sandbox import TemplateRefused

    try:
        return load_baseline(path, _known_profiles(context.settings(ctx).profiles_dir))
    except (BaselineError, TemplateRefused) as exc:
        fail(str(exc), EXIT_USAGE)


@baseline_app.command("set")
def baseline_set(ctx: typer.Context, file: Path = typer.Argument(..., help="baseline YAML")) -> None:
    """Make FILE the fleet's firmware baseline (earlier ones stay on record)."""
    from fleetctl.db.firmware import set_baseline

    baseline = _load(ctx, file)
    row = set_baseline(
        context.engine(ctx), baseline.name, baseline.to_dict(), file.read_text(), context.settings(ctx).identity()
    )
    typer.echo(f"baseline {baseline.name} set (id {row.id}; profiles {', '.join(baseline.profiles)})")


@app.command("status")
def status(ctx: typer.Context, output: OutputFormat = OUTPUT_OPTION) -> None:
    """Every node's drift from the baseline, from the firmware its checks, its BMC and
    `firmware report` last reported."""
    from fleetctl.db import firmware as db
    from fleetctl.db.queries import list_nodes
    from fleetctl.remediation.firmware import Baseline, node_drift

    engine = context.engine(ctx)
    row = db.current_baseline(engine)
    if row is None:
        fail("no firmware baseline set; use `fleetctl firmware baseline set FILE`")
    baseline = Baseline.from_dict(row.document)
    reported = db.reported_components(engine)
    rows = []
    for n in list_nodes(engine):
        d = node_drift(baseline, n.name, n.profile, reported.get(n.name))
        rows.append(
            {
                "node": n.name,
                "profile": n.profile,
                "state": n.state,
                "firmware": d.status,
                "drift": [
                    {"component": x.component or x.pattern, "actual": x.actual, "expected": x.expected}
                    for x in d.drifts
                ],
            }
        )
    emit(
        {"baseline": baseline.name, "nodes": rows},
        output,
        lambda data, _w: simple_table(
            f"baseline {data['baseline']}",
            ["node", "profile", "state", "firmware", "drift"],
            [
                [
                    r["node"],
                    r["profile"],
                    r["state"],
                    r["firmware"],
                    "; ".join(
                        f"{x['component']}: {x['actual'] or 'missing'} -> {x['expected']}" for x in r["drift"][:3]
                    )
                    + (f" (+{len(r['drift']) - 3})" if len(r["drift"]) > 3 else ""),
                ]
                for r in data["nodes"]
            ],
        ),
    )


@app.command("report")
def report(
    ctx: typer.Context,
    node: str = typer.Argument(..., help="the node whose firmware FILE lists"),
    file: Path = typer.Argument(..., help="nvfwupd show_version output (its table or -j), or Redfish JSON"),
) -> None:
    """Record firmware read off the node's tray (nvfwupd from the management host) as what
    NODE reports; `firmware status` and roll-outs compare it with the baseline."""
    import uuid

    from fleetctl.checks import judge
    from fleetctl.checks.result import Status
    from fleetctl.checks.safe_yaml import YamlRefused, read_text
    from fleetctl.cli.node import unknown_node
    from fleetctl.db import firmware as db
    from fleetctl.db import queries
    from fleetctl.db.models import utcnow

    engine = context.engine(ctx)
    found = queries.get_node(engine, node)
    if found is None:
        unknown_node(node)
    try:
        text = read_text(file)
    except YamlRefused as exc:
        fail(str(exc), EXIT_USAGE)
    result = judge("firmware", text)
    if result.status is Status.ERROR:
        fail(f"{file}: not a firmware inventory: {result.reason}", EXIT_USAGE)
    key = f"{db.FirmwareSource.REPORT.value}/{found.name}/{uuid.uuid4().hex}"
    db.record_firmware(engine, found.name, db.FirmwareSource.REPORT, result, text, utcnow(), "", key)
    typer.echo(f"{found.name}: recorded {result.reason} ({result.status.value})")


@rollout_app.callback()
def rollout(
    ctx: typer.Context,
    baseline_file: Path = typer.Option(None, "--baseline", help="baseline YAML to roll out (becomes the baseline)"),
    canary: int = typer.Option(1, "--canary", callback=within(0, 100_000), help="nodes updated alone first"),
    batch: str = typer.Option("5%", "--batch", help="batch size: nodes, or a percentage of the roll-out"),
    max_failures: int = typer.Option(
        2, "--max-failures", callback=within(1, 100_000), help="halt after this many failed updates"
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="record what would be updated; change nothing"),
    watch: bool = typer.Option(True, "--watch/--no-watch", help="show progress until it halts or completes"),
) -> None:
    """Start a roll-out: canary first, then batches; halts on too many failures."""
    if ctx.invoked_subcommand is not None:
        return
    if baseline_file is None:
        fail("--baseline FILE is required", EXIT_USAGE)
    from fleetctl.db.engine import get_engine
    from fleetctl.db.firmware import record_rollout
    from fleetctl.remediation.firmware import batch_size
    from fleetctl.workflows.api import RolloutInput
    from fleetctl.workflows.client import start_rollout

    baseline = _load(ctx, baseline_file)
    try:
        batch_size(batch, 1)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    s = context.settings(ctx)
    baseline_text = baseline_file.read_text()

    async def go() -> RolloutStatus | None:
        client = await context.temporal_client(ctx)
        recorded = record_rollout(
            get_engine(s.db_url), baseline, baseline_text, canary, batch, max_failures, dry_run, s.identity()
        )
        rollout_id = recorded.rollout_id
        plan = RolloutInput(rollout_id, recorded.baseline_id, recorded.batches, max_failures, dry_run, s.identity())
        await start_rollout(client, s, plan)
        typer.echo(
            f"roll-out {rollout_id}: {plural(sum(map(len, plan.batches)), 'node')} in "
            f"{plural(len(plan.batches), 'batch', 'batches')}" + (" (dry run)" if dry_run else "")
        )
        return await _watch(client, rollout_id) if watch else None

    _exit_for(context.run_async(go()))


async def _watch(client: Client, rollout_id: str) -> RolloutStatus:
    """A progress bar until the roll-out halts, completes or is aborted."""
    import asyncio

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from fleetctl.workflows.client import rollout_progress

    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[note]}")
    ) as bar:
        task = bar.add_task(rollout_id, total=None, note="")
        while True:
            p = await rollout_progress(client, rollout_id)
            bar.update(
                task,
                total=p.total or 1,
                completed=p.done + p.failed,
                note=f"{p.status}: {p.done} updated, {p.failed} failed, batch {p.next_batch}/{p.batches}",
            )
            if p.status != "running":
                break
            await asyncio.sleep(1)
    typer.echo(f"{rollout_id}: {p.status}" + (f": {p.detail}" if p.detail else ""))
    return p


def _exit_for(progress: RolloutStatus | None) -> None:
    if progress is not None and progress.status == "halted":
        typer.echo(f"resume with `fleetctl firmware rollout resume {progress.rollout_id}` or abort it", err=True)
        raise typer.Exit(EXIT_OPERATIONAL)


def _command(ctx: typer.Context, rollout_id: str, command: str, watch: bool) -> None:
    from fleetctl.workflows.client import RolloutRefused, rollout_command

    s = context.settings(ctx)

    async def go() -> RolloutStatus | None:
        client = await context.temporal_client(ctx)
        typer.echo(f"{rollout_id}: {await rollout_command(client, rollout_id, command, s.identity())}")
        return await _watch(client, rollout_id) if watch else None

    try:
        _exit_for(context.run_async(go()))
    except RolloutRefused as exc:
        fail(str(exc))


@rollout_app.command("resume")
def resume(
    ctx: typer.Context,
    rollout_id: str = typer.Argument(..., metavar="ID"),
    watch: bool = typer.Option(True, "--watch/--no-watch"),
) -> None:
    """Continue a halted roll-out with the next batch (the failure count starts again)."""
    _command(ctx, rollout_id, "resume", watch)


@rollout_app.command("abort")
def abort(ctx: typer.Context, rollout_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Stop a halted roll-out for good."""
    _command(ctx, rollout_id, "abort", False)


ROLLOUT_COLUMNS = (
    Column("ID", lambda r: r["id"], whole=True),
    Column("STATUS", lambda r: r["status"] + (" (dry run)" if r["dry_run"] else "")),
    Column("DONE", lambda r: r["done"]),
    Column("FAILED", lambda r: r["failed"]),
    Column("TOTAL", lambda r: r["total"]),
    Column("AGE", lambda r: age(r["created_at"])),
    Column("DETAIL", lambda r: r["detail"]),
)


@rollout_app.command("list")
def list_rollouts(ctx: typer.Context, output: OutputFormat = OUTPUT_OPTION) -> None:
    """Roll-outs, newest first, with their progress."""
    from fleetctl.db.firmware import rollouts

    rows = [
        {
            "id": r.rollout_id,
            "status": r.status,
            "total": r.total,
            "done": r.done,
            "failed": r.failed,
            "dry_run": r.dry_run,
            "detail": r.detail,
            "created_at": r.created_at,
        }
        for r in rollouts(context.engine(ctx))
    ]
    emit(rows, output, lambda rs, wide: column_table(ROLLOUT_COLUMNS, rs, wide), empty="No firmware roll-outs.")
