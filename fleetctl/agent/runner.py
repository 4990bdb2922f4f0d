"""The agent's loop: read the source, spool what it finds, sample the GPUs, deliver."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge

from fleetctl.agent.detect import detect
from fleetctl.agent.records import KernelRecord, event_id
from fleetctl.agent.sampler import SampleTracker
from fleetctl.agent.spool import Spool, write_atomically

log = logging.getLogger("fleetctl.agent")

SAMPLE_TIMEOUT_S = 30.0
CURSOR_EVERY_S = 1.0  # the cursor is only an optimisation (ids de-duplicate): saved at most this often
MAX_BACKOFF_S = 30.0
MAX_URGENT = 1000  # critical events held for sending first (all are in the spool regardless)


@dataclass
class AgentConfig:
    node: str
    spool_dir: Path
    actor: str = "fleetctl-agent"
    max_spool: int = 100_000
    batch_size: int = 200
    poll_interval_s: float = 0.05
    sample_interval_s: float = 0.0  # 0: no sampling
    sample_argv: Sequence[str] = ()
    dcgm_health_argv: Sequence[str] = ()  # `dcgmi health -c`, sampled beside nvidia-smi where DCGM runs
    profile: str | None = None
    boot_id: str = ""
    heartbeat_interval_s: float = 30.0  # with a heartbeat sender: how often the agent says it is alive


def run_command(argv: Sequence[str]) -> str:
    """stdout of a tool, or what it said when it failed (judged as unreadable output)."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=SAMPLE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{argv[0]}: {exc.__class__.__name__}"
    return proc.stdout if proc.returncode == 0 else (proc.stdout + proc.stderr)


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.lines = Counter("fleetctl_agent_lines_read", "Kernel log records read", registry=r)
        self.last_line = Gauge("fleetctl_agent_last_line_timestamp_seconds",
                               "Log time of the last record read (unix seconds)", registry=r)
        self.detected = Counter("fleetctl_agent_events_detected", "Faults found in the log or the samples", registry=r)
        self.sent = Counter("fleetctl_agent_events_sent", "Events the node's workflow accepted", registry=r)
        self.send_failures = Counter("fleetctl_agent_send_failures", "Deliveries that failed (retried)", registry=r)
        self.depth = Gauge("fleetctl_agent_spool_depth", "Events spooled, not yet delivered", registry=r)
        self.dropped = Gauge("fleetctl_agent_spool_dropped", "Events dropped (oldest first) past the spool's bound",
                             registry=r)
        self.samples = Counter("fleetctl_agent_samples", "GPU health samples taken", registry=r)
        self.heartbeats = Counter("fleetctl_agent_heartbeats_sent", "Heartbeats the intake took", registry=r)
        self.heartbeat_failures = Counter("fleetctl_agent_heartbeat_failures", "Heartbeats that failed (not retried)",
                                          registry=r)


@dataclass
class Agent:
    config: AgentConfig
    source: object  # FileSource, KmsgSource or JournalSource
    transport: object  # .send(node, events) -> None, raises on failure
    run: Callable[[Sequence[str]], str] = run_command
    metrics: AgentMetrics = field(default_factory=AgentMetrics)
    heartbeat: object | None = None  # .send(node), raises on failure (fleetctl.agent.heartbeat); None: no heartbeats

    def __post_init__(self) -> None:
        self.spool = Spool(self.config.spool_dir, self.config.max_spool)
        self.samplers = [(self.config.sample_argv, SampleTracker(self.config.profile))]
        if self.config.dcgm_health_argv:
            self.samplers.append((self.config.dcgm_health_argv, SampleTracker(self.config.profile, "dcgm-health")))
        self._cursor_saved, self._retry_at, self._backoff, self._sample_at = 0.0, 0.0, 0.5, 0.0
        self._beat_at, self._beating = 0.0, None
        # Critical events read since the last delivery: sent ahead of the spool's order (and
        # again in order later; the workflow counts an id once), so a flood of minor lines
        # never delays a drain.
        self._urgent: list[dict] = []
        self._publish()

    @staticmethod
    def saved_cursor(spool_dir: Path) -> dict | None:
        path = Path(spool_dir) / "cursor.json"
        return json.loads(path.read_text()) if path.exists() else None

    def _event(self, key: str, at: float, code: int | None, message: str, severity: str) -> dict:
        # `at` is the record's own time (the kernel's, the sample's): believed however long
        # the event waits in the spool.
        return {"node": self.config.node, "source": "agent", "code": code, "message": message,
                "actor": self.config.actor, "event_id": event_id(self.config.node, key, 0), "at": at,
                "severity": severity, "at_from_record": True}

    def events_of(self, records: list[KernelRecord]) -> list[dict]:
        out = []
        for r in records:
            for i, fault in enumerate(detect(r.message)):
                out.append(self._event(f"{r.record_id}/{i}", r.at, fault.code, fault.message, fault.severity))
                if fault.critical:
                    self._urgent.append(out[-1])
        del self._urgent[:-MAX_URGENT]  # the oldest stay in the spool, sent in order
        return out

    def read_once(self) -> int:
        records = self.source.poll()
        if records:
            self.metrics.lines.inc(len(records))
            self.metrics.last_line.set(records[-1].at)
            events = self.events_of(records)
            if events:
                self.metrics.detected.inc(len(events))
                if dropped := self.spool.append(events):
                    log.warning("spool full: dropped the %d oldest undelivered events", dropped)
        if records and time.monotonic() - self._cursor_saved >= CURSOR_EVERY_S:
            self.save_cursor()
        self._publish()
        return len(records)

    def save_cursor(self) -> None:
        write_atomically(self.config.spool_dir / "cursor.json", json.dumps(self.source.cursor))
        self._cursor_saved = time.monotonic()

    async def sample_once(self) -> None:
        for argv, tracker in self.samplers:
            text = await asyncio.to_thread(self.run, argv)
            self.metrics.samples.inc()
            now = time.time()
            events = [self._event(f"{self.config.boot_id}/{found.key}", now, None, found.message, found.severity)
                      for found in tracker.observe(text)]
            if events:
                self.metrics.detected.inc(len(events))
                self.spool.append(events)
        self._publish()

    async def deliver(self) -> None:
        """Send what is spooled, critical events first, a batch at a time, until it is empty
        or a send fails."""
        while self.spool.depth and time.monotonic() >= self._retry_at:
            urgent = self._urgent[:self.config.batch_size]
            batch = urgent or self.spool.pending(self.config.batch_size)
            try:
                await self.transport.send(self.config.node, batch)
            except Exception as exc:  # noqa: BLE001 - any failure: keep the events, retry later
                self.metrics.send_failures.inc()
                log.warning("cannot deliver %d events (%s); retrying in %.1fs", len(batch), exc, self._backoff)
                self._retry_at = time.monotonic() + self._backoff
                self._backoff = min(self._backoff * 2, MAX_BACKOFF_S)
                return
            if urgent:  # counted as sent when the spool's order reaches them
                del self._urgent[:len(urgent)]
                continue
            self.spool.ack(len(batch))
            self.metrics.sent.inc(len(batch))
            self._backoff = 0.5
            self._publish()

    def beat_if_due(self) -> None:
        """A heartbeat every interval, in the background: a slow intake never delays reading
        the log or delivering events, and at most one is in flight."""
        if self.heartbeat is None or time.monotonic() < self._beat_at or (self._beating and not self._beating.done()):
            return
        self._beat_at = time.monotonic() + self.config.heartbeat_interval_s
        self._beating = asyncio.create_task(self.beat_once())

    async def beat_once(self) -> bool:
        try:
            await asyncio.to_thread(self.heartbeat.send, self.config.node)
        except Exception as exc:  # noqa: BLE001 - the intake is away: the next beat is the retry
            self.metrics.heartbeat_failures.inc()
            log.warning("heartbeat not taken (%s)", exc)
            return False
        self.metrics.heartbeats.inc()
        return True

    def _publish(self) -> None:
        self.metrics.depth.set(self.spool.depth)
        self.metrics.dropped.set(self.spool.dropped)

    async def run_until(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                self.beat_if_due()
                self.read_once()
                if self.config.sample_interval_s and time.monotonic() >= self._sample_at:
                    self._sample_at = time.monotonic() + self.config.sample_interval_s
                    await self.sample_once()
                await self.deliver()
                try:
                    await asyncio.wait_for(stop.wait(), self.config.poll_interval_s)
                except asyncio.TimeoutError:
                    pass
        finally:
            if self._beating is not None:  # a beat in flight ends within its send timeout
                await asyncio.gather(self._beating, return_exceptions=True)
            self.save_cursor()
            self.spool.close()
            self.source.close()


def boot_identity() -> tuple[str, float]:
    """This boot's id and the unix time it began (what /dev/kmsg's usec counts from)."""
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return boot_id, time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)


def ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not os.access(path, os.W_OK):
        raise PermissionError(f"{path}: not writable")
    return path
