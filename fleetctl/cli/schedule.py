"""`fleetctl schedule ...`: Temporal Schedules that start the active-check sweeps, the
production straggler judge and the job history sync."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from fleetctl.cli import context
from fleetctl.cli.output import EXIT_USAGE, OUTPUT_OPTION, Column, OutputFormat, column_table, emit, fail
from fleetctl.durations import when

if TYPE_CHECKING:
    from datetime import timedelta

    from temporalio.client import Schedule

    from fleetctl.config import Settings
    from fleetctl.db.sweep_intervals import SweepSchedule

T = TypeVar("T")

app = typer.Typer(
    help="Periodic active checks on idle production nodes, the production straggler judge, and the job history sync.",
    no_args_is_help=True,
)
KINDS = ("active-checks", "stragglers", "job-sync", "validate", "hung-jobs", "gpu-returns")
# A validation holds the idle part of the fleet for minutes: a daily run, not an hourly one.
VALIDATE_EVERY = "1d"
# Well inside Slurm's MinJobAge (300 s by default): a finished job is recorded before Slurm forgets it.
JOB_SYNC_EVERY = "1m"
# A quarantined GPU settles for GpuReturnsInput's settle_s (30 min) before its first return.
GPU_RETURNS_EVERY = "15m"


def _concurrency(text: str) -> tuple[int, float]:
    """`5%` of the idle nodes, or a plain count."""
    try:
        if text.endswith("%"):
            fraction = float(text[:-1]) / 100
            if not 0 < fraction <= 1:
                raise ValueError
            return 0, fraction
        count = int(text)
        if count < 1:
            raise ValueError
        return count, 0.0
    except ValueError:
        fail(f"bad --max-concurrent {text!r}: a count (10) or a percentage (5%)", EXIT_USAGE)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return context.run_async(coro)


@app.command("create")
def create(
    ctx: typer.Context,
    kind: str = typer.Argument(
        ...,
        help="active-checks, stragglers (the running jobs' nodes compared from "
        "Prometheus: straggler_* settings), job-sync (the schedulers' jobs "
        "into the database, as `job sync`), validate (`fleetctl validate --idle`), hung-jobs (running jobs "
        "judged for a hang: hang_* settings), or gpu-returns (quarantined GPUs reset, rechecked and returned)",
    ),
    every: str | None = typer.Option(
        None,
        "--every",
        help="interval: 30m, 1h, 6h ... (default: 1h for "
        "active-checks, straggler_interval_s for stragglers, hang_interval_s for hung-jobs, "
        f"{JOB_SYNC_EVERY} for job-sync, {GPU_RETURNS_EVERY} for gpu-returns)",
    ),
    suite: str = typer.Option("quick", "--suite"),
    max_concurrent: str = typer.Option("5%", "--max-concurrent", help="nodes checked at once: 10 or 5%"),
    name: str | None = typer.Option(None, "--name", help="schedule id (default: the kind)"),
) -> None:
    """Create (or replace) a schedule. A run still going when the next is due is skipped."""

    from temporalio.service import RPCError

    from fleetctl.checks.suites import SuiteError, load_suite
    from fleetctl.durations import parse_duration
    from fleetctl.workflows.api import JobSyncInput, SweepInput
    from fleetctl.workflows.client import job_sync_schedule, sweep_schedule

    if kind not in KINDS:
        fail(f"unknown schedule kind {kind!r} (one of: {', '.join(KINDS)})", EXIT_USAGE)
    s = context.settings(ctx)
    schedule_id = name or kind
    if kind in ("stragglers", "hung-jobs"):
        schedule, interval, summary = _judge_schedule(s, kind, schedule_id, every)
    elif kind == "job-sync":
        try:
            interval = parse_duration(every or JOB_SYNC_EVERY)
        except ValueError as exc:
            fail(str(exc), EXIT_USAGE)
        schedule = job_sync_schedule(s, schedule_id, interval, JobSyncInput(actor=f"schedule/{schedule_id}"))
        summary = f"the schedulers' jobs into the database every {_every(interval.total_seconds())}"
    elif kind == "validate":
        schedule, interval, summary = _validate_schedule(s, schedule_id, every)
    elif kind == "gpu-returns":
        schedule, interval, summary = _gpu_returns_schedule(s, schedule_id, every)
    else:
        try:
            interval = parse_duration(every or "1h")
            load_suite(suite, s.suites_dir or None)
        except (ValueError, SuiteError) as exc:
            fail(str(exc), EXIT_USAGE)
        count, fraction = _concurrency(max_concurrent)
        schedule = sweep_schedule(
            s,
            schedule_id,
            interval,
            SweepInput(
                suite=suite,
                max_concurrent=count,
                max_concurrent_fraction=fraction,
                fleet=s.fleet,
                actor=f"schedule/{schedule_id}",
            ),
        )
        summary = f"{suite} every {every or '1h'}, at most {max_concurrent} nodes at once"

    async def run() -> None:
        client = await context.temporal_client(ctx)
        try:
            await client.get_schedule_handle(schedule_id).delete()
        except RPCError:
            pass  # none yet
        await client.create_schedule(schedule_id, schedule)

    _run(run())
    # What `node list` judges the age of evidence by (conditions.stale_evidence); a
    # straggler judge refreshes no evidence.
    from fleetctl.db import sweep_intervals

    if kind == "active-checks":
        sweep_intervals.record(
            context.engine(ctx), sweep_intervals.SweepSchedule(schedule_id, s.fleet, interval.total_seconds())
        )
    else:
        sweep_intervals.forget(context.engine(ctx), schedule_id)
    typer.echo(f"schedule {schedule_id}: {summary}")


def _validate_schedule(s: Settings, schedule_id: str, every: str | None) -> tuple[Schedule, timedelta, str]:
    """A ClusterValidation of the fleet's idle production nodes every `every` (default a day)."""
    from fleetctl.durations import parse_duration
    from fleetctl.workflows.api import ValidationInput
    from fleetctl.workflows.client import validation_schedule

    try:
        interval = parse_duration(every or VALIDATE_EVERY)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    inp = ValidationInput(idle=True, fleet=s.fleet, actor=f"schedule/{schedule_id}")
    summary = (
        f"an all-reduce across the idle production nodes every {_every(interval.total_seconds())}, bisected when slow"
    )
    return validation_schedule(s, schedule_id, interval, inp), interval, summary


def _gpu_returns_schedule(s: Settings, schedule_id: str, every: str | None) -> tuple[Schedule, timedelta, str]:
    """A GpuReturns every `every` (default GPU_RETURNS_EVERY): each GPU out 30 min or more reset
    as its Xid's catalog action says, rechecked alone and returned when clean."""
    from fleetctl.durations import parse_duration
    from fleetctl.workflows.api import GpuReturnsInput
    from fleetctl.workflows.client import gpu_returns_schedule

    try:
        interval = parse_duration(every or GPU_RETURNS_EVERY)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    inp = GpuReturnsInput(fleet=s.fleet)  # actor gpu-returns: the release says who returned the GPU
    summary = f"quarantined GPUs reset, rechecked and returned every {_every(interval.total_seconds())}"
    return gpu_returns_schedule(s, schedule_id, interval, inp), interval, summary


def _judge_schedule(s: Settings, kind: str, schedule_id: str, every: str | None) -> tuple[Schedule, timedelta, str]:
    """A judge of the running jobs' schedule: by default as often as the workers' settings say.
    The policy, window and thresholds are the worker's settings (as the guard's limits are)."""
    from datetime import timedelta

    from fleetctl.durations import parse_duration
    from fleetctl.workflows.api import HungJobsInput, StragglerSweepInput
    from fleetctl.workflows.client import hung_jobs_schedule, straggler_schedule

    default_s = s.straggler_interval_s if kind == "stragglers" else s.hang_interval_s
    try:
        interval = parse_duration(every) if every else timedelta(seconds=default_s)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    actor = f"schedule/{schedule_id}"
    if kind == "stragglers":
        schedule = straggler_schedule(s, schedule_id, interval, StragglerSweepInput(fleet=s.fleet, actor=actor))
        return (
            schedule,
            interval,
            f"production stragglers every {_every(interval.total_seconds())} (the worker's straggler_* settings)",
        )
    schedule = hung_jobs_schedule(s, schedule_id, interval, HungJobsInput(fleet=s.fleet, actor=actor))
    return schedule, interval, f"hung jobs every {_every(interval.total_seconds())} (the worker's hang_* settings)"


def _every(seconds: float | None) -> str:
    """An interval as `schedule create --every` takes it: 10s, 30m, 1h, 1h30m."""
    if seconds is None:
        return ""
    s = int(seconds)
    parts = [(s // 3600, "h"), (s % 3600 // 60, "m"), (s % 60, "s")]
    return "".join(f"{n}{unit}" for n, unit in parts if n) or "0s"


SCHEDULE_COLUMNS = (
    Column("ID", lambda r: r["id"], whole=True),
    Column("EVERY", lambda r: _every(r["every_s"])),
    Column("PAUSED", lambda r: "yes" if r["paused"] else "no"),
    Column("NEXT RUN", lambda r: when(r["next_run"])),
    Column("RUNS", lambda r: r["runs"]),
    Column("SKIPPED", lambda r: r["skipped_overlaps"]),
)


@app.command("list")
def list_schedules(ctx: typer.Context, output: OutputFormat = OUTPUT_OPTION) -> None:
    """Schedules with their state and next run."""

    async def run() -> list[dict[str, Any]]:
        client = await context.temporal_client(ctx)
        rows = []
        async for entry in await client.list_schedules():
            desc = await client.get_schedule_handle(entry.id).describe()
            spec = desc.schedule.spec
            rows.append(
                {
                    "id": entry.id,
                    "paused": desc.schedule.state.paused,
                    "every_s": spec.intervals[0].every.total_seconds() if spec.intervals else None,
                    "next_run": desc.info.next_action_times[0] if desc.info.next_action_times else None,
                    "runs": desc.info.num_actions,
                    "skipped_overlaps": desc.info.num_actions_skipped_overlap,
                }
            )
        return rows

    from fleetctl.db import sweep_intervals
    from fleetctl.db.engine import may_write
    from fleetctl.workflows.client import sweep_schedules

    async def sweeps() -> list[SweepSchedule]:
        return await sweep_schedules(await context.temporal_client(ctx))

    rows = _run(run())
    # Temporal holds the schedules: the database's copy (what `node list` judges the age of
    # evidence by) is rewritten from it, so a schedule made or changed outside fleetctl counts;
    # by a login that may write (a viewer's listing stays a read).
    engine = context.engine(ctx)
    if may_write(engine, "sweep_intervals"):
        sweep_intervals.replace_all(engine, _run(sweeps()))
    emit(rows, output, lambda data, wide: column_table(SCHEDULE_COLUMNS, data, wide), empty="No schedules.")


def _handle_action(ctx: typer.Context, schedule_id: str, action: str) -> None:
    from temporalio.service import RPCError

    s = context.settings(ctx)

    async def run() -> None:
        handle = (await context.temporal_client(ctx)).get_schedule_handle(schedule_id)
        try:
            if action == "pause":
                await handle.pause(note=f"paused by {s.identity()}")
            elif action == "unpause":
                await handle.unpause(note=f"unpaused by {s.identity()}")
            else:
                await handle.delete()
        except RPCError as exc:
            from fleetctl.text import one_line

            fail(f"schedule {schedule_id}: {one_line(exc)}")

    _run(run())
    from fleetctl.db import sweep_intervals

    if action == "delete":
        sweep_intervals.forget(context.engine(ctx), schedule_id)
    else:
        sweep_intervals.set_paused(context.engine(ctx), schedule_id, action == "pause")
    typer.echo(f"schedule {schedule_id}: {action}d" if action != "delete" else f"schedule {schedule_id}: deleted")


SCHEDULE_ID = typer.Argument(None, help="the schedule's id (`schedule list`); may be left out when the fleet has one")


def _the_schedule(ctx: typer.Context, schedule_id: str | None) -> str:
    """The id given, or the fleet's only schedule; two or more (or none) is a usage error
    that names them, never a guess."""
    if schedule_id:
        return schedule_id

    async def ids() -> list[str]:
        # This fleet's: those that start their sweeps on its task queue (a namespace may
        # hold other fleets' schedules).
        client = await context.temporal_client(ctx)
        mine: list[str] = []
        async for entry in await client.list_schedules():
            action = (await client.get_schedule_handle(entry.id).describe()).schedule.action
            if getattr(action, "task_queue", None) == context.settings(ctx).task_queue:
                mine.append(entry.id)
        return mine

    found = sorted(_run(ids()))
    if len(found) == 1:
        return found[0]
    fail(
        "name the schedule: " + (f"there are {len(found)} ({', '.join(found)})" if found else "there is none"),
        EXIT_USAGE,
    )


@app.command("pause")
def pause(ctx: typer.Context, schedule_id: str | None = SCHEDULE_ID) -> None:
    """Stop a schedule from starting sweeps (a sweep already running finishes)."""
    _handle_action(ctx, _the_schedule(ctx, schedule_id), "pause")


@app.command("unpause")
def unpause(ctx: typer.Context, schedule_id: str | None = SCHEDULE_ID) -> None:
    """Let a paused schedule start sweeps again."""
    _handle_action(ctx, _the_schedule(ctx, schedule_id), "unpause")


@app.command("delete")
def delete(
    ctx: typer.Context,
    schedule_id: str | None = SCHEDULE_ID,
    yes: bool = typer.Option(False, "--yes", help="do not ask"),
) -> None:
    """Remove a schedule for good (`schedule create` makes it again)."""
    schedule_id = _the_schedule(ctx, schedule_id)
    if not yes and not typer.confirm(f"Delete schedule {schedule_id}?", default=False):
        fail("not deleted")
    _handle_action(ctx, schedule_id, "delete")
