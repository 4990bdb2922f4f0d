"""`fleetctl job ...`: training jobs as their schedulers see them, and their restarts."""

from __future__ import annotations

from datetime import UTC
from typing import TYPE_CHECKING, Any

import typer

from fleetctl.cli import context
from fleetctl.cli.output import (
    EXIT_USAGE,
    OUTPUT_OPTION,
    Column,
    OutputFormat,
    column_table,
    emit,
    fail,
    free_text,
    shown,
    within,
)
from fleetctl.durations import when
from fleetctl.text import failure_message

if TYPE_CHECKING:
    import threading
    from datetime import datetime

    from rich.console import Group, RenderableType

    from fleetctl.admission.server import GateServer
    from fleetctl.config import Settings
    from fleetctl.db.models import JobRestart
    from fleetctl.jobs.history_sync import SyncResult
    from fleetctl.schedulers.base import ListsJobHistory, Scheduler, SchedulerJob
    from fleetctl.sim.scheduler import SimScheduler
    from fleetctl.workflows.api import JobRestartResult

app = typer.Typer(
    help="Training jobs: list, show, restart off bad nodes, record checkpoints, sync from the schedulers; "
    "submit simulated ones.",
    no_args_is_help=True,
)

# Job ids of every scheduler: Slurm's 123, 123_4, 123+1; Kubernetes' namespace/name; sim-7.
_JOB_ID = r"[A-Za-z0-9][A-Za-z0-9._/+-]{0,199}"
# How far ahead of this machine's clock a reported checkpoint time may be (clock skew).
CHECKPOINT_FUTURE_ALLOWANCE_S = 300
# How old a reported checkpoint may be; older is a mistake (a wrong unit, a wrong year).
CHECKPOINT_MAX_AGE_DAYS = 366

SCHEDULER_OPTION = typer.Option(None, "--scheduler", help="slurm, kubernetes or sim (default: found from the job id)")


def scheduler_adapter(ctx: typer.Context, kind: str) -> Scheduler:
    from fleetctl.connections.slurm_client import slurm_runner
    from fleetctl.inventory.names import scheduler_members
    from fleetctl.schedulers import scheduler_for

    try:
        return scheduler_for(
            kind,
            context.settings(ctx),
            slurm_runner=slurm_runner(context.settings(ctx)) if "slurm" in scheduler_members(kind) else None,
        )
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)


def _sim_scheduler(ctx: typer.Context) -> SimScheduler:
    """The simulated scheduler, whose queue can be listed and submitted to."""
    from fleetctl.sim.scheduler import SimScheduler

    scheduler = scheduler_adapter(ctx, "sim")
    if not isinstance(scheduler, SimScheduler):
        raise TypeError(f"the sim scheduler is a {type(scheduler).__name__}")
    return scheduler


def _scheduler_kinds(ctx: typer.Context) -> list[str]:
    """The schedulers the inventory's nodes use, in a stable order."""
    from fleetctl.db.queries import list_nodes
    from fleetctl.inventory.names import scheduler_members
    from fleetctl.schedulers import SCHEDULER_KINDS

    # A SUNK node's jobs are its members' (Slurm's and Kubernetes'), each asked once.
    used = {kind for n in list_nodes(context.engine(ctx)) for kind in scheduler_members(n.scheduler)}
    return [kind for kind in SCHEDULER_KINDS if kind in used]


def _find_job(ctx: typer.Context, job_id: str, kind: str | None) -> tuple[str, SchedulerJob | None]:
    """(scheduler kind, SchedulerJob or None): the job as the scheduler that knows it sees it.

    None when no scheduler knows the job now but fleetctl recorded restarts of it (Slurm
    forgets finished jobs after a few minutes; their restarts stay worth showing).
    """
    from fleetctl.db import jobs
    from fleetctl.schedulers.base import SchedulerError

    engine = context.engine(ctx)
    recorded = jobs.restart_schedulers(engine, job_id)
    stored = jobs.get_job(engine, job_id)
    candidates = (
        [kind]
        if kind
        else list(dict.fromkeys(([stored.scheduler] if stored else []) + recorded + _scheduler_kinds(ctx)))
    )
    errors = []
    for candidate in candidates:
        try:
            return candidate, scheduler_adapter(ctx, candidate).job(job_id)
        except SchedulerError as exc:
            errors.append(f"{candidate}: {exc}")
    if recorded and (kind is None or kind in recorded):
        return kind or recorded[0], None
    fail(f"no scheduler knows job {job_id}" + (f" ({'; '.join(errors)})" if errors else " (no node uses a scheduler)"))


def sync_schedulers(ctx: typer.Context) -> SyncResult:
    """Reconcile the jobs of every scheduler the inventory uses into the database."""
    from fleetctl.connections.slurm_client import slurm_runner
    from fleetctl.db.models import utcnow
    from fleetctl.jobs.history_sync import sync_jobs
    from fleetctl.schedulers import scheduler_for
    from fleetctl.schedulers.base import ListsJobHistory

    s = context.settings(ctx)

    def job_lister(kind: str) -> ListsJobHistory:
        """The adapter of `kind` as one that lists its jobs (ValueError, which sync_jobs
        records as that scheduler's error: it cannot)."""
        scheduler = scheduler_for(kind, s, slurm_runner=slurm_runner(s) if kind == "slurm" else None)
        if not isinstance(scheduler, ListsJobHistory):
            raise ValueError(f"the {kind} scheduler cannot list its jobs")
        return scheduler

    return sync_jobs(context.engine(ctx), _scheduler_kinds(ctx), job_lister, utcnow())


def _job_row(kind: str, job: SchedulerJob) -> dict[str, Any]:
    return {"job_id": job.job_id, "name": job.name, "scheduler": kind, "state": job.state, "nodes": list(job.nodes)}


JOB_COLUMNS = (
    Column("JOB", lambda r: r["job_id"]),
    Column("NAME", lambda r: r["name"]),
    Column("SCHEDULER", lambda r: r["scheduler"]),
    Column("STATE", lambda r: r["state"]),
    Column("NODES", lambda r: ",".join(r["nodes"])),
)
RESTART_COLUMNS = (
    Column("fault seen", lambda r: when(r["fault_seen_at"])),
    Column("status", lambda r: r["status"]),
    Column("bad", lambda r: ",".join(r["bad_nodes"])),
    Column("new", lambda r: ",".join(r["replacements"])),  # what took the bad nodes' place
    Column("seconds", lambda r: "" if r["restart_seconds"] is None else f"{r['restart_seconds']:.2f}"),
    # Asked for -> landed: "island ib-a -> island", "fleet ib-a -> outside"; "" without an island.
    Column("placed", lambda r: f"{r['placement'] or '-'} {r['island']} -> {r['landed'] or '?'}" if r["island"] else ""),
    Column("cause", lambda r: r["cause"] or r["error"]),
    Column("actor", lambda r: r["actor"]),
)

# Production straggler findings (fleetctl.db.stragglers.finding_row), in `job show` and `node show`.
STRAGGLER_COLUMNS = (
    Column("found", lambda r: when(r["found_at"])),
    Column("node", lambda r: r["node"], whole=True),
    Column("job", lambda r: r["job_id"]),
    Column("status", lambda r: r["status"], whole=True),
    Column("evidence", lambda r: r["evidence"]),
    Column("detail", lambda r: r["detail"]),
)

# The hung-job judge's findings (fleetctl.db.hangs.finding_row), in `job show`.
HANG_COLUMNS = (
    Column("found", lambda r: when(r["found_at"])),
    Column("last seen", lambda r: when(r["last_seen_at"])),
    Column("verdict", lambda r: r["state"], whole=True),
    Column("blamed", lambda r: f"{', '.join(r['suspects'])} ({r['localised']})" if r["suspects"] else "-"),
    Column("evidence", lambda r: r["evidence"]),
    Column("resolved", lambda r: when(r["resolved_at"]) if r["resolved_at"] else "open", whole=True),
)


def _jobs_table(rows: list[dict[str, Any]], _wide: bool) -> RenderableType:
    return column_table(JOB_COLUMNS, rows)


@app.command("list")
def list_jobs(
    ctx: typer.Context,
    node: str | None = typer.Option(None, "--node", help="only the jobs on this node"),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Jobs of every scheduler the inventory uses (Slurm and Kubernetes: those on its nodes)."""
    from concurrent.futures import ThreadPoolExecutor

    from rich.console import Console

    from fleetctl.db.queries import get_node, list_nodes
    from fleetctl.schedulers.base import SchedulerError

    engine = context.engine(ctx)
    if node is not None:
        found = get_node(engine, node)
        if found is None:
            fail(f"unknown node: {node}")
        targets = [found] if found.scheduler != "none" else []
    else:
        targets = [n for n in list_nodes(engine) if n.scheduler != "none"]
    rows: dict[str, dict[str, Any]] = {}
    try:
        with Console(stderr=True).status("asking the schedulers for their jobs"):
            if node is None and any(n.scheduler == "sim" for n in targets):
                # The simulated scheduler knows its queue too, not only what runs on nodes.
                rows.update((j.job_id, _job_row("sim", j)) for j in _sim_scheduler(ctx).jobs())
                targets = [n for n in targets if n.scheduler != "sim"]
            schedulers = {kind: scheduler_adapter(ctx, kind) for kind in {n.scheduler for n in targets}}
            with ThreadPoolExecutor(8) as pool:
                per_node = pool.map(lambda n: (n.scheduler, schedulers[n.scheduler].jobs_on_node(n.name)), targets)
                for kind, found_jobs in per_node:
                    rows.update((j.job_id, _job_row(kind, j)) for j in found_jobs)
    except SchedulerError as exc:
        fail(str(exc))
    emit(list(rows.values()), output, _jobs_table, empty="No jobs.")


def _restart_row(r: JobRestart) -> dict[str, Any]:
    """A restart's row; its times stay datetimes, for -o json's one format (fleetctl.cli.output.machine_value)
    and the tables' (fleetctl.durations.when)."""
    from fleetctl.durations import as_utc
    from fleetctl.jobs.placement import replacements

    def utc(at: datetime | None) -> datetime | None:
        return as_utc(at) if at else None

    seconds = round((as_utc(r.running_at) - as_utc(r.fault_seen_at)).total_seconds(), 3) if r.running_at else None
    return {
        "restart_id": r.restart_id,
        "status": r.status,
        "cause": r.cause,
        "actor": r.actor,
        "bad_nodes": r.bad_nodes,
        "new_nodes": r.new_nodes,
        "nodes_before": r.nodes_before,
        "replacements": replacements(r.nodes_before, r.new_nodes),
        "fault_seen_at": utc(r.fault_seen_at),
        "drained_at": utc(r.drained_at),
        "requeued_at": utc(r.requeued_at),
        "running_at": utc(r.running_at),
        "restart_seconds": seconds,
        "error": r.error,
        "workflow_id": r.workflow_id,
        "island": r.island,
        "placement": r.placement,
        "placement_detail": r.placement_detail,
        "landed": r.landed,
    }


def pending_reason(state: str, restarts: list[dict[str, Any]]) -> str:
    """Why a pending job waits, as squeue's Reason=Resources says it: for the nodes a restart
    asks for, in the placement's own words (placement_detail), while that restart is under way."""
    if state != "pending":
        return ""
    waiting = [r for r in restarts if r["status"] == "in_progress"]
    if not waiting:
        return "Resources: waits for free nodes"
    latest = waiting[-1]
    return f"Resources: restart {latest['restart_id'][:8]} waits for " + (
        latest["placement_detail"] or "the scheduler to place it on healthy nodes"
    )


@app.command("show")
def show(
    ctx: typer.Context,
    job_id: str = typer.Argument(..., metavar="JOBID"),
    scheduler: str | None = SCHEDULER_OPTION,
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """One job: where it runs, and every restart with its timings.

    restart_seconds is the latest successful restart's time from the fault to the job
    running again.
    """
    from fleetctl.db import hangs, jobs, stragglers

    kind, job = _find_job(ctx, job_id, scheduler)
    restarts = [_restart_row(r) for r in jobs.job_restarts(context.engine(ctx), job_id) if r.scheduler == kind]
    found = [stragglers.finding_row(f) for f in stragglers.findings(context.engine(ctx), job_id=job_id)]
    hung = [hangs.finding_row(f) for f in hangs.findings(context.engine(ctx), job_id=job_id)]
    succeeded = [r for r in restarts if r["status"] == "succeeded"]
    data = {
        "job_id": job_id,
        "name": job.name if job else "",
        "scheduler": kind,
        "state": job.state if job else "unknown",
        "nodes": list(job.nodes) if job else [],
        "restart_seconds": succeeded[-1]["restart_seconds"] if succeeded else None,
        "reason": pending_reason(job.state if job else "unknown", restarts),
        "restarts": restarts,
        "stragglers": found,
        "hangs": hung,
    }

    def render(d: dict[str, Any], _wide: bool) -> Group:
        from rich.console import Group
        from rich.text import Text

        head = Text.assemble(
            (d["job_id"], "bold"),
            f"  {d['name']}  {d['scheduler']}  {d['state']}",
            f"  on {','.join(d['nodes']) or '-'}",
        )
        parts: list[RenderableType] = [head]
        if d["reason"]:
            parts.append(Text.assemble(("reason: ", "bold"), shown(d["reason"])))
        if d["restart_seconds"] is not None:
            parts.append(Text(f"last restart: running again {d['restart_seconds']:.2f}s after the fault"))
        if d["restarts"]:
            parts.append(column_table(RESTART_COLUMNS, d["restarts"], title="restarts"))
        if d["stragglers"]:
            parts.append(column_table(STRAGGLER_COLUMNS, d["stragglers"], title="stragglers in production"))
        if d["hangs"]:
            parts.append(column_table(HANG_COLUMNS, d["hangs"], title="hung-job judge"))
        return Group(*parts)

    emit(data, output, render)


@app.command("restart")
def restart(
    ctx: typer.Context,
    job_id: str = typer.Argument(..., metavar="JOBID"),
    bad_nodes: list[str] | None = typer.Option(
        None,
        "--bad-node",
        help="a node to drain and move the job off (repeatable; default: its nodes not in production)",
    ),
    reason: str = typer.Option(
        "operator: job restart",
        "--reason",
        callback=free_text(required=True),
        help="why; recorded, and the drain reason in the scheduler",
    ),
    scheduler: str | None = SCHEDULER_OPTION,
    timeout_s: float | None = typer.Option(
        None,
        "--timeout",
        callback=within(1, 7 * 86_400),
        help="seconds to wait for the job to run again (default 30 min)",
    ),
    yes: bool = typer.Option(False, "--yes", help="do not ask"),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Drain the job's bad nodes, restart it on healthy ones, and wait until it runs again."""
    import uuid
    from datetime import datetime

    from fleetctl.db.queries import list_nodes
    from fleetctl.jobs.placement import nodes_to_leave, not_in_job

    kind, job = _find_job(ctx, job_id, scheduler)
    if job is None or job.state != "running":
        fail(f"job {job_id} is {job.state if job else 'unknown to its scheduler now'}, not running: nothing to restart")
    if bad_nodes:
        strangers = not_in_job(job.nodes, bad_nodes)
        if strangers:
            fail(f"job {job_id} does not run on {', '.join(strangers)} (it runs on {', '.join(job.nodes)})", EXIT_USAGE)
    else:
        bad_nodes = nodes_to_leave(job.nodes, {n.name: n.state for n in list_nodes(context.engine(ctx))})
        if not bad_nodes:
            fail(
                f"job {job_id} runs on nodes in production only ({', '.join(job.nodes)}); "
                "name the node to move it off with --bad-node",
                EXIT_USAGE,
            )
    if not yes and not typer.confirm(
        f"Restart job {job_id} ({job.name}, {kind}): drain {', '.join(bad_nodes)} and run it on other nodes?",
        default=False,
    ):
        fail("not restarted")
    fault_seen_at = datetime.now(UTC)  # for a restart by hand, the operator's go is the fault seen
    s = context.settings(ctx)

    async def run() -> JobRestartResult:
        from dataclasses import replace

        from rich.console import Console
        from temporalio.client import WorkflowFailureError

        from fleetctl.workflows.activities.jobs import restart_id_of_fault
        from fleetctl.workflows.api import JobRestartInput
        from fleetctl.workflows.client import start_job_restart

        client = await context.temporal_client(ctx)
        inp = JobRestartInput(
            job_id=job_id,
            scheduler=kind,
            bad_nodes=list(bad_nodes),
            cause=reason,
            actor=s.identity(),
            fault_seen_at=fault_seen_at.isoformat(),
            # The bad nodes' fault, when a drain took them out for one: the restart their own
            # workflows or a runbook started for it, if any, is this one. Else a restart of its own.
            restart_id=restart_id_of_fault(context.engine(ctx), bad_nodes) or uuid.uuid4().hex,
        )
        if timeout_s:
            inp = replace(inp, running_timeout_s=timeout_s)
        handle = await start_job_restart(client, s, inp)
        try:
            with Console(stderr=True).status(f"restarting job {job_id} off {', '.join(bad_nodes)}"):
                # The JobRestart workflow's result (start_job_restart's handle is not typed with it).
                result: JobRestartResult = await handle.result()
                return result
        except WorkflowFailureError as exc:
            fail(failure_message(exc))

    result = context.run_async(run())
    if output in (OutputFormat.table, OutputFormat.wide):
        typer.echo(
            f"job {job_id} running again on {','.join(result.new_nodes)}, "
            f"{result.restart_seconds:.2f}s after the restart was asked for"
        )
    else:
        from dataclasses import asdict

        emit(asdict(result), output)


@app.command("submit")
def submit(
    ctx: typer.Context,
    nodes: int = typer.Option(..., "--nodes", callback=within(1, 100_000), help="how many nodes the job needs"),
    name: str = typer.Option("job", "--name"),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", callback=within(1, 64)),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Submit a job to the simulated scheduler (for the demo and benchmarks)."""
    from fleetctl.schedulers.base import SchedulerError

    try:
        job = _sim_scheduler(ctx).submit(name, nodes, gpus_per_node)
    except SchedulerError as exc:
        fail(str(exc))
    row = _job_row("sim", job)
    if output in (OutputFormat.table, OutputFormat.wide):
        where = (
            f"running on {','.join(job.nodes)}"
            if job.state == "running"
            else f"{job.state}: waits for {nodes} free nodes"
        )
        typer.echo(f"{job.job_id} ({name}) {where}")
    else:
        emit(row, output)


def parse_checkpoint_time(text: str | None, now: datetime) -> datetime:
    """--at: ISO 8601 with a UTC offset, or Unix seconds; `now` when not given. ValueError
    with one line when it cannot be read or lies outside the bounds."""
    import math
    from datetime import datetime, timedelta

    if text is None:
        return now
    text = text.strip()
    if len(text) > 40:
        raise ValueError("--at: too long for a time")
    try:
        seconds = float(text)
    except ValueError:
        try:
            at = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"--at: not a time: {text!r} (ISO 8601 with an offset, or Unix seconds)") from None
        if at.tzinfo is None:
            raise ValueError(f"--at: {text!r} has no UTC offset; add one (2026-12-01T10:00:00Z)") from None
        at = at.astimezone(UTC)
    else:
        if not math.isfinite(seconds) or not 0 <= seconds < 1e11:
            raise ValueError(f"--at: {text!r} is not a time in Unix seconds")
        at = datetime.fromtimestamp(seconds, UTC)
    if at > now + timedelta(seconds=CHECKPOINT_FUTURE_ALLOWANCE_S):
        raise ValueError(f"--at: {at.isoformat()} is in the future")
    if at < now - timedelta(days=CHECKPOINT_MAX_AGE_DAYS):
        raise ValueError(f"--at: {at.isoformat()} is more than {CHECKPOINT_MAX_AGE_DAYS} days ago")
    return at


@app.command("checkpoint")
def checkpoint(
    ctx: typer.Context,
    job_id: str = typer.Argument(..., metavar="JOBID", help="the job's id in its scheduler (Slurm: $SLURM_JOB_ID)"),
    at: str | None = typer.Option(
        None, "--at", help="when the checkpoint was written: ISO 8601 with an offset or Unix seconds (default: now)"
    ),
) -> None:
    """Record that a job wrote a checkpoint: one database row, no scheduler or Temporal call,
    so a training loop or its launcher can call it after every checkpoint. Work lost at a
    restart is counted from the last checkpoint (fleetctl report). Calling it again for the
    same job and time records nothing more."""
    import re

    from fleetctl.db import jobs
    from fleetctl.db.models import utcnow

    if not re.fullmatch(_JOB_ID, job_id):
        fail(f"not a job id: {job_id[:80]!r}", EXIT_USAGE)
    try:
        at_time = parse_checkpoint_time(at, utcnow())
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    new = jobs.record_checkpoint(context.engine(ctx), job_id, at_time)
    typer.echo(f"job {job_id}: checkpoint at {when(at_time)} " + ("recorded" if new else "already recorded"))


@app.command("sync")
def sync(ctx: typer.Context, output: OutputFormat = OUTPUT_OPTION) -> None:
    """Write every job the schedulers remember (Slurm: squeue --states=all) into the database,
    for the report's ETTR and interruptions. `fleetctl report` does this first too."""
    from dataclasses import asdict

    result = sync_schedulers(ctx)
    if output in (OutputFormat.table, OutputFormat.wide):
        for kind, count in result.jobs.items():
            typer.echo(f"{kind}: {count} jobs")
        for kind in result.skipped:
            typer.echo(f"{kind}: cannot list its jobs; not synced")
    else:
        emit(asdict(result), output)
    for kind, error in result.errors.items():
        typer.echo(f"error: {kind}: {error}", err=True)
    if result.errors:
        raise typer.Exit(1)


@app.command("gate-serve")
def gate_serve(
    ctx: typer.Context,
    gate_url: str = typer.Option(
        ..., "--gate-url", help="how GPU pods reach this server: https://fleetctl-prejob-gate.fleetctl.svc:9443"
    ),
    image: str = typer.Option(..., "--image", help="the init container's image: curl and a POSIX shell"),
    address: str = typer.Option("127.0.0.1", "--address"),
    port: int = typer.Option(9443, "--port", min=0, max=65535),
    tls_cert: str = typer.Option("", "--tls-cert", help="the server's certificate (the API server calls https only)"),
    tls_key: str = typer.Option("", "--tls-key"),
    ca_path: str = typer.Option("", "--ca-path", help="the gate's CA inside the init container ('' none)"),
    suite: str = typer.Option("prejob", "--suite", help="the suite a pod's node runs before it starts"),
    watch_completions_s: float = typer.Option(
        0.0,
        "--watch-completions-s",
        min=0.0,
        help="list the cluster's pods this often and run --epilog-suite on the node of each GPU pod that "
        "completed (0: off; one gate process only)",
    ),
    epilog_suite: str = typer.Option("prejob", "--epilog-suite", help="the suite a node runs after a GPU pod ends"),
) -> None:
    """The Kubernetes pre-job gate: the mutating webhook that gives GPU pods an init container,
    the endpoint those containers ask (the suite on their node; a failing node drained through
    the capacity guard, and the pod refused there), and GET /nodes/NAME/health for in-job
    restart frameworks. With --watch-completions-s, also the epilog Kubernetes lacks: a GPU
    pod's completion runs --epilog-suite on its node. deploy/kubernetes/prejob-gate.yaml runs it."""
    from pathlib import Path

    from fleetctl.admission.server import GateServer
    from fleetctl.admission.webhook import GateSettings
    from fleetctl.checks.suites import SuiteError, load_suite
    from fleetctl.server_tls import BadTLSFiles, tls_context

    if bool(tls_cert) != bool(tls_key):
        fail("give --tls-cert and --tls-key together", EXIT_USAGE)
    if not gate_url.startswith(("https://", "http://")):
        fail(f"--gate-url: not an http(s) URL: {gate_url[:80]!r}", EXIT_USAGE)
    s = context.settings(ctx)
    try:
        load_suite(suite, s.suites_dir or None)
        load_suite(epilog_suite, s.suites_dir or None)
        tls = tls_context(Path(tls_cert), Path(tls_key)) if tls_cert else None
    except (SuiteError, BadTLSFiles) as exc:
        fail(str(exc), EXIT_USAGE)
    server = GateServer(
        (address, port), s, context.engine(ctx), GateSettings(gate_url, image, ca_path=ca_path), suite, tls
    )
    typer.echo(f"pre-job gate on {'https' if tls else 'http'}://{address}:{server.server_address[1]}", err=True)
    stop = _watch_completions(s, server, epilog_suite, watch_completions_s) if watch_completions_s else None
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        if stop is not None:
            stop.set()
        server.server_close()


def _watch_completions(s: Settings, server: GateServer, suite: str, interval_s: float) -> threading.Event:
    """The gate's watch for completed GPU pods (fleetctl.admission.completions), on its own
    thread; set the event to stop it."""
    import threading

    from fleetctl.admission.completions import CompletionWatcher
    from fleetctl.schedulers.kubernetes import KubernetesScheduler
    from fleetctl.schedulers.kubernetes_drain import kubernetes_options

    kube = KubernetesScheduler(
        kubeconfig=s.kubeconfig or None, context=s.kube_context or None, options=kubernetes_options(s)
    )
    watcher = CompletionWatcher(s, server.engine, kube.pods, server.node_lock, suite, interval_s)
    stop = threading.Event()
    threading.Thread(target=watcher.run, args=(stop,), name="pod-completions", daemon=True).start()
    typer.echo(f"watching GPU pods' completions every {interval_s:g} s", err=True)
    return stop
