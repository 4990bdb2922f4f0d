"""`fleetctl agent NODE`: follow this node's kernel log and GPUs, send faults to its workflow."""

from __future__ import annotations

import asyncio
import signal
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from fleetctl.cli import context
from fleetctl.cli.output import EXIT_USAGE, fail

if TYPE_CHECKING:
    from fleetctl.agent.heartbeat import HeartbeatSender
    from fleetctl.agent.runner import Agent, AgentConfig, SavedCursor, Source
    from fleetctl.agent.transport import IntakeTransport


def agent(
    ctx: typer.Context,
    node: str = typer.Argument(None, help="this node's name in the inventory (default: the host name)"),
    kmsg: Path | None = typer.Option(
        None, "--kmsg", help="read /dev/kmsg records from this path (the default source: /dev/kmsg)"
    ),
    journal: bool = typer.Option(False, "--journal", help="read `journalctl -k -f -o json` instead of /dev/kmsg"),
    journalctl: str = typer.Option("journalctl", "--journalctl", help="the journalctl binary"),
    log_file: Path | None = typer.Option(
        None, "--file", help="follow this log file (rotation and truncation survived)"
    ),
    spool: Path = typer.Option(
        Path("/var/lib/fleetctl-agent"), "--spool", help="directory for undelivered events and the read position"
    ),
    max_spool: int = typer.Option(
        100_000, "--max-spool", help="events kept while Temporal is unreachable (oldest dropped past it)"
    ),
    sample_interval: float = typer.Option(
        30.0, "--sample-interval", help="seconds between GPU health samples (0: none)"
    ),
    nvidia_smi: str = typer.Option("nvidia-smi", "--nvidia-smi", help="the nvidia-smi binary"),
    dcgmi: str | None = typer.Option(
        None,
        "--dcgmi",
        help="the dcgmi binary: also sample `dcgmi health -c` (DCGM's health "
        "watches, set with `dcgmi health -s a`) where DCGM runs",
    ),
    profile: str | None = typer.Option(
        None, "--profile", help="GPU profile (GPU count, limits) the samples are judged against"
    ),
    metrics_port: int = typer.Option(9410, "--metrics-port", help="TCP port of the agent's own /metrics (0: none)"),
    metrics_address: str = typer.Option("127.0.0.1", "--metrics-address", help="address /metrics listens on"),
    heartbeat_url: str | None = typer.Option(
        None,
        "--heartbeat-url",
        envvar="FLEETCTL_AGENT_HEARTBEAT_URL",
        help="the intake (`fleetctl events serve`) to send heartbeats to, "
        "e.g. https://intake:9411 (http only to this machine); fleetctl judges a node whose agent "
        "falls silent (FLEETCTL_AGENT_SILENCE_S)",
    ),
    heartbeat_token_file: Path | None = typer.Option(
        None,
        "--heartbeat-token-file",
        help="file holding this node's credential "
        "(`fleetctl events credential issue`) or the "
        "intake's token (or env FLEETCTL_INTAKE_TOKEN)",
    ),
    heartbeat_interval: float = typer.Option(30.0, "--heartbeat-interval", help="seconds between heartbeats"),
    events_to_intake: bool = typer.Option(
        False,
        "--events-to-intake",
        help="send events through the intake at --heartbeat-url with this "
        "node's credential, not to Temporal: the agent then holds no "
        "Temporal credential, and nothing that speaks for another node",
    ),
    heartbeat_ca: Path | None = typer.Option(
        None,
        "--heartbeat-ca",
        help="CA bundle the intake's https certificate is verified against (default: the system's)",
    ),
    watch: bool = typer.Option(True, "--watch/--no-watch", help="also watch the fabric, mounts, stuck processes"),
    watch_root: Path = typer.Option(Path("/"), "--watch-root", help="where sys/ and proc/ are read under"),
) -> None:
    """Run until SIGTERM: kernel log faults and GPU health changes go to the node's workflow,
    through an on-disk spool while Temporal is unreachable."""
    from prometheus_client import start_http_server

    from fleetctl.agent.runner import Agent
    from fleetctl.agent.transport import TemporalTransport

    if sum((kmsg is not None, journal, log_file is not None)) > 1:
        fail("give at most one of --kmsg, --journal, --file", EXIT_USAGE)
    _check_bounds(max_spool, sample_interval, metrics_port, heartbeat_interval)
    heartbeat, events_via_intake = _intake_senders(heartbeat_url, heartbeat_token_file, heartbeat_ca, events_to_intake)
    if profile:
        _check_profile(ctx, profile)
    settings = context.settings(ctx)
    context.xid_policy(settings)  # a broken site policy: one line, and no agent
    node = node or socket.gethostname().split(".")[0]
    source, (boot_id, boot_time), saved = _kernel_log(spool, log_file, journal, journalctl, kmsg)
    config = _config(ctx, node, spool, max_spool, sample_interval, profile, (boot_id, boot_time), (nvidia_smi, dcgmi))
    config.heartbeat_interval_s, config.watch_root = heartbeat_interval, watch_root if watch else None
    the_agent = Agent(
        config,
        source,
        events_via_intake or TemporalTransport(settings),
        heartbeat=heartbeat,
        cursor_moved_aside=saved.moved_aside,
    )
    if metrics_port:
        server, _ = start_http_server(metrics_port, metrics_address, registry=the_agent.metrics.registry)
        typer.echo(f"agent metrics on http://{metrics_address}:{server.server_port}/metrics", err=True)
    typer.echo(f"agent for {node}: following {log_file or ('journal' if journal else kmsg or '/dev/kmsg')}", err=True)
    context.run_async(_run_until_signalled(the_agent))


def _config(
    ctx: typer.Context,
    node: str,
    spool: Path,
    max_spool: int,
    sample_interval: float,
    profile: str | None,
    boot: tuple[str, float],
    tools: tuple[str, str | None],
) -> AgentConfig:
    """The agent's configuration from its options and the settings (the xid policy already checked)."""
    from fleetctl.agent.node_watch import WatchLimits
    from fleetctl.agent.runner import AgentConfig
    from fleetctl.agent.sampler import Confirmation
    from fleetctl.checks.catalog import CHECKS

    settings = context.settings(ctx)
    nvidia_smi, dcgmi = tools
    return AgentConfig(
        node=node,
        spool_dir=spool,
        actor=f"fleetctl-agent@{node}",
        max_spool=max_spool,
        sample_interval_s=sample_interval,
        profile=profile,
        profiles_dir=settings.profiles_dir or None,
        boot_id=boot[0],
        boot_time=boot[1],
        confirmation=Confirmation(settings.agent_sample_confirmations, settings.agent_sample_grace_s),
        xid_policy=context.xid_policy(settings),
        sample_argv=(nvidia_smi, *CHECKS["nvidia-smi-query"].argv[1:]),
        dcgm_health_argv=(dcgmi, "health", "-c") if dcgmi else (),
        watch_limits=WatchLimits(
            settings.agent_watch_flap_window_s,
            settings.agent_watch_flaps,
            settings.agent_watch_errors_per_hour,
            settings.agent_watch_stuck_s,
        ),
    )


def _check_bounds(max_spool: int, sample_interval: float, metrics_port: int, heartbeat_interval: float) -> None:
    if not 1 <= max_spool <= 10_000_000:
        fail("--max-spool must be between 1 and 10000000", EXIT_USAGE)
    if not (sample_interval == 0 or 1 <= sample_interval <= 86400):
        fail("--sample-interval must be 0 or between 1 and 86400 seconds", EXIT_USAGE)
    if not 0 <= metrics_port <= 65535:
        fail("--metrics-port must be between 0 and 65535", EXIT_USAGE)
    if not 1 <= heartbeat_interval <= 3600:
        fail("--heartbeat-interval must be between 1 and 3600 seconds", EXIT_USAGE)


def _intake_senders(
    heartbeat_url: str | None, token_file: Path | None, heartbeat_ca: Path | None, events_to_intake: bool
) -> tuple[HeartbeatSender | None, IntakeTransport | None]:
    """The heartbeat sender and, with --events-to-intake, the events' transport through the
    intake; (None, None) without --heartbeat-url."""
    if events_to_intake and heartbeat_url is None:
        fail("--events-to-intake sends through the intake at --heartbeat-url: give it", EXIT_USAGE)
    if heartbeat_url is None:
        return None, None
    from fleetctl.agent.heartbeat import HeartbeatSender
    from fleetctl.agent.transport import IntakeTransport

    token = _intake_token(token_file)
    ca_path = str(heartbeat_ca) if heartbeat_ca else None
    try:
        heartbeat = HeartbeatSender(heartbeat_url, token, ca_path=ca_path)
        return heartbeat, IntakeTransport(heartbeat_url, token, ca_path) if events_to_intake else None
    except ValueError as exc:
        fail(f"--heartbeat-url: {exc}", EXIT_USAGE)


def _check_profile(ctx: typer.Context, profile: str) -> None:
    from fleetctl.checks import load_profile
    from fleetctl.checks.profiles import ProfileError

    try:
        load_profile(profile, context.settings(ctx).profiles_dir or None)
    except ProfileError as exc:  # an unknown name, or a site profile that does not validate
        fail(str(exc), EXIT_USAGE)


def _kernel_log(
    spool: Path, log_file: Path | None, journal: bool, journalctl: str, kmsg: Path | None
) -> tuple[Source, tuple[str, float], SavedCursor]:
    """The spool made ready, and the kernel log to follow from where it was last read, with
    this boot's id and start time and the saved cursor (whether it was moved aside)."""
    from fleetctl.agent.follow import FileSource, JournalSource, KmsgSource
    from fleetctl.agent.runner import Agent, boot_identity, ensure_dir

    try:
        ensure_dir(spool)
    except OSError as exc:
        fail(f"--spool {spool}: {exc}", EXIT_USAGE)
    boot_id, boot_time = boot_identity()
    saved = Agent.saved_cursor(spool)
    source: Source
    try:
        if log_file is not None:
            source = FileSource(log_file, saved.position)
        elif journal:
            source = JournalSource([journalctl, "-k", "-f", "-o", "json"], saved.position)
        else:
            source = KmsgSource(kmsg or Path("/dev/kmsg"), boot_id, boot_time, saved.position)
    except OSError as exc:
        fail(f"cannot open the kernel log ({exc})", EXIT_USAGE)
    return source, (boot_id, boot_time), saved


async def _run_until_signalled(the_agent: Agent) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await the_agent.run_until(stop)


def _intake_token(path: Path | None) -> str:
    """The intake's bearer token, from the file or the environment; one line and exit 2 when
    it is missing or would not fit in a header."""
    token = context.intake_token(path, "--heartbeat-token-file")  # read strictly: one line, printable ASCII
    if not token:
        fail(
            "--heartbeat-url needs the intake's token or this node's credential (--heartbeat-token-file "
            "or FLEETCTL_INTAKE_TOKEN)",
            EXIT_USAGE,
        )
    return token
