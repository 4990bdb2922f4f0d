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
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from fleetctl.agent.coalesce import coalesce_minor
from fleetctl.agent.detect import UnreadableRecord, detect
from fleetctl.agent.node_watch import NodeWatch, WatchLimits
from fleetctl.agent.records import MAX_SEQ, Cursor, KernelRecord, event_id
from fleetctl.agent.sampler import DRIVER_LOADED, Confirmation, Debounce, Sampled, SampleTracker
from fleetctl.agent.spool import SEVERITY_WORDS, Event, Spool, move_aside, write_atomically
from fleetctl.checks.profiles import load_profile
from fleetctl.checks.signatures import MAX_SIGNATURE_NAME
from fleetctl.checks.xid_policy import CATALOG, XidPolicy
from fleetctl.text import MAX_TEXT, bounded

log = logging.getLogger("fleetctl.agent")

SAMPLE_TIMEOUT_S = 30.0
CURSOR_EVERY_S = 1.0  # the cursor is only an optimisation (ids de-duplicate): saved at most this often
MAX_BACKOFF_S = 30.0
MAX_URGENT = 1000  # critical events held for sending first (all are in the spool regardless)
APPEND_RETRY_S = 1.0  # a spool that cannot be written (a full disk) is tried again this often
# A sampled critical finding not yet confirmed is sampled again this soon (or at the sample
# interval, if shorter): at once, yet not inside the same GPU reset (a few seconds) it may race.
RESAMPLE_AFTER_S = 5.0
CURSOR_FILE = "cursor.json"
# What an event the agent spools holds (the last two absent from an older agent's spool).
_EVENT_FIELDS: dict[str, type | tuple[type, ...]] = {
    "node": str,
    "source": str,
    "code": (int, type(None)),
    "message": str,
    "actor": str,
    "event_id": str,
    "at": (int, float),
}
_EVENT_OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "severity": str,
    "at_from_record": bool,
    "signature": str,
    "gpu": str,
}


class Source(Protocol):
    """Where the kernel's records come from (fleetctl.agent.follow: FileSource, KmsgSource,
    JournalSource), polled without blocking. A source may also count what it skipped
    (`bad_records`, `last_bad`) and its read position's resets (`seq_resets`)."""

    @property
    def cursor(self) -> Cursor:
        """The read position after the records polled so far."""
        ...

    def poll(self) -> list[KernelRecord]: ...

    def close(self) -> None: ...


class Transport(Protocol):
    """Where events go (fleetctl.agent.transport); raises when they were not taken."""

    async def send(self, node: str, events: list[Event]) -> None: ...


class Heartbeat(Protocol):
    """The agent's liveness to the intake (fleetctl.agent.heartbeat); raises on failure."""

    def send(self, node: str) -> None: ...


@dataclass(frozen=True)
class SavedCursor:
    """The read position saved in a spool directory, as read before the source is opened."""

    position: Cursor | None  # None: none saved, or the file was not one
    moved_aside: int = 0  # cursor files found corrupt and moved aside (the agent counts them)


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
    profiles_dir: str | None = None  # where the profile may be, beside the packaged ones
    boot_id: str = ""
    boot_time: float = 0.0  # when this boot began (unix seconds): sampled findings wait out its grace
    confirmation: Confirmation = field(default_factory=Confirmation)  # when a sampled critical finding is believed
    xid_policy: XidPolicy = CATALOG  # the site's (the xid_policy setting): how severe each fault is
    heartbeat_interval_s: float = 30.0  # with a heartbeat sender: how often the agent says it is alive
    # The node watch (fleetctl.agent.node_watch), with every sample: the fabric under
    # <watch_root>/sys, the mounts and stuck processes under <watch_root>/proc (None: not watched).
    watch_root: Path | None = None
    watch_limits: WatchLimits = field(default_factory=WatchLimits)


def run_command(argv: Sequence[str]) -> str:
    """stdout of a tool, or what it said when it failed (judged as unreadable output). Bytes
    that are not UTF-8 read as U+FFFD: one stray byte in a tool's output must not stop the
    agent (the kernel log it reads too)."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, errors="replace", timeout=SAMPLE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{argv[0]}: {exc.__class__.__name__}"
    return proc.stdout if proc.returncode == 0 else (proc.stdout + proc.stderr)


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.lines = Counter("fleetctl_agent_lines_read", "Kernel log records read", registry=r)
        self.last_line = Gauge(
            "fleetctl_agent_last_line_timestamp_seconds", "Log time of the last record read (unix seconds)", registry=r
        )
        self.detected = Counter("fleetctl_agent_events_detected", "Faults found in the log or the samples", registry=r)
        self.sent = Counter("fleetctl_agent_events_sent", "Events the node's workflow accepted", registry=r)
        self.send_failures = Counter("fleetctl_agent_send_failures", "Deliveries that failed (retried)", registry=r)
        self.depth = Gauge("fleetctl_agent_spool_depth", "Events spooled, not yet delivered", registry=r)
        self.dropped = Gauge(
            "fleetctl_agent_spool_dropped", "Events dropped past the spool's bound (all severities)", registry=r
        )
        self.dropped_by_severity = Gauge(
            "fleetctl_agent_spool_dropped_by_severity",
            "Events dropped past the spool's bound: minor ones first, critical ones only "
            "when the spool holds nothing else",
            ["severity"],
            registry=r,
        )
        self.unreadable = Counter(
            "fleetctl_agent_unreadable_records",
            "Kernel log records skipped because they could not be read: not a record of the "
            "source's format (source), refused by the Xid parser (parser), or the parser failed "
            "on it (parser_error)",
            ["why"],
            registry=r,
        )
        self.seq_resets = Counter(
            "fleetctl_agent_cursor_resets",
            "Times the read position went back (a /dev/kmsg sequence number that went backwards, "
            "or a saved cursor beyond the log)",
            registry=r,
        )
        self.spool_write_failures = Counter(
            "fleetctl_agent_spool_write_failures",
            "Spool appends that failed (the events are held and tried again)",
            registry=r,
        )
        self.corrupt_files = Counter(
            "fleetctl_agent_corrupt_files",
            "Spool or cursor files that could not be read, moved aside as NAME.corrupt-TIME",
            ["file"],
            registry=r,
        )
        for why in ("source", "parser", "parser_error"):
            self.unreadable.labels(why)
        for severity in (*SEVERITY_WORDS, "none"):
            self.dropped_by_severity.labels(severity)
        for file in ("spool", "cursor"):
            self.corrupt_files.labels(file)
        self.samples = Counter("fleetctl_agent_samples", "GPU health samples taken", registry=r)
        self.heartbeats = Counter("fleetctl_agent_heartbeats_sent", "Heartbeats the intake took", registry=r)
        self.heartbeat_failures = Counter(
            "fleetctl_agent_heartbeat_failures", "Heartbeats that failed (not retried)", registry=r
        )


@dataclass
class Agent:
    config: AgentConfig
    source: Source
    transport: Transport
    run: Callable[[Sequence[str]], str] = run_command
    metrics: AgentMetrics = field(default_factory=AgentMetrics)
    heartbeat: Heartbeat | None = None  # None: no heartbeats
    cursor_moved_aside: int = 0  # SavedCursor.moved_aside of the position the source starts from

    def __post_init__(self) -> None:
        self.spool = Spool(self.config.spool_dir, self.config.max_spool, valid_event)
        self.metrics.corrupt_files.labels("spool").inc(len(self.spool.moved_aside))
        self.metrics.corrupt_files.labels("cursor").inc(self.cursor_moved_aside)
        config = self.config
        self.samplers: list[tuple[Sequence[str], SampleTracker]] = []
        if config.sample_argv:  # none: the GPUs are not sampled (a node watch alone)
            self.samplers.append(
                (
                    config.sample_argv,
                    SampleTracker(config.profile, profiles_dir=config.profiles_dir, confirmation=config.confirmation),
                )
            )
        if config.dcgm_health_argv:
            self.samplers.append(
                (
                    config.dcgm_health_argv,
                    SampleTracker(config.profile, "dcgm-health", config.profiles_dir, config.confirmation),
                )
            )
        self.watch = (
            NodeWatch(
                config.watch_root / "sys",
                config.watch_root / "proc",
                load_profile(config.profile, config.profiles_dir).ib_port_count if config.profile else 0,
                config.watch_limits,
                Debounce(config.confirmation),
            )
            if config.watch_root is not None
            else None
        )
        # When the GPUs last came up: the boot, or a later load of the driver read in the log.
        self.settled_at = config.boot_time
        self._cursor_saved, self._retry_at, self._backoff, self._sample_at = 0.0, 0.0, 0.5, 0.0
        self._beat_at = 0.0
        self._beating: asyncio.Task[bool] | None = None
        # Critical events read since the last delivery: sent ahead of the spool's order (and
        # again in order later; the workflow counts an id once), so a flood of minor lines
        # never delays a drain.
        self._urgent: list[Event] = []
        # Events read but not yet in the spool (it could not be written), and the source's
        # cursor after their records; the cursor saved is the one after the last records
        # whose events are in the spool (None: none read yet; what is on disk stands).
        self._held: tuple[list[Event], Cursor] | None = None
        self._spooled_cursor: Cursor | None = None
        self._cursor_written: Cursor | None = None
        self._append_at, self._append_failing = 0.0, False
        self._bad_seen, self._resets_seen = 0, 0
        self._publish()

    @staticmethod
    def saved_cursor(spool_dir: Path) -> SavedCursor:
        """The read position saved in the spool directory; a file that is not one (truncated
        JSON, garbage, wrong types) is moved aside, and reading starts afresh (the ids keep
        the workflow from counting what is read again); the agent started from it counts it
        (`cursor_moved_aside`)."""
        path = Path(spool_dir) / CURSOR_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return SavedCursor(None)
        try:
            cursor = json.loads(raw)
        except (ValueError, RecursionError):
            cursor = None
        if valid_cursor(cursor):
            return SavedCursor(cursor)
        move_aside(path, "not a read position")
        return SavedCursor(None, moved_aside=1)

    def _event(
        self, key: str, at: float, code: int | None, message: str, severity: str, signature: str = "", gpu: str = ""
    ) -> Event:
        # `at` is the record's own time (the kernel's, the sample's): believed however long
        # the event waits in the spool.
        return {
            "node": self.config.node,
            "source": "agent",
            "code": code,
            "message": bounded(message),
            "actor": self.config.actor,
            "event_id": event_id(self.config.node, key, 0),
            "at": at,
            "severity": severity,
            "at_from_record": True,
            "signature": signature,
            "gpu": gpu,
        }

    def events_of(self, records: list[KernelRecord]) -> list[Event]:
        """The events of the records' faults. A record the parser cannot read is counted and
        skipped: it never stops the records after it."""
        out: list[Event] = []
        for r in records:
            if DRIVER_LOADED.search(r.message):
                self.settled_at = max(self.settled_at, r.at)
            try:
                faults = detect(r.message, self.config.xid_policy)
            except UnreadableRecord as exc:
                self._unreadable("parser", r, str(exc))
                continue
            except Exception as exc:  # noqa: BLE001 - a parser bug costs this record only
                self._unreadable("parser_error", r, f"{type(exc).__name__}: {exc}")
                continue
            for i, fault in enumerate(faults):
                out.append(
                    self._event(
                        f"{r.record_id}/{i}",
                        r.at,
                        fault.code,
                        fault.message,
                        fault.severity,
                        fault.signature,
                        fault.gpu,
                    )
                )
                if fault.critical:
                    self._urgent.append(out[-1])
        del self._urgent[:-MAX_URGENT]  # the oldest stay in the spool, sent in order
        return out

    def _unreadable(self, why: str, record: KernelRecord | None, reason: str) -> None:
        self.metrics.unreadable.labels(why).inc()
        where = f"record {bounded(record.record_id, 200)}" if record is not None else "a record"
        log.warning("unreadable %s skipped (%s): %s", where, why, bounded(" ".join(reason.split()), 300))

    def read_once(self) -> int:
        """Read what the source has and spool its events; the cursor saved never passes a
        record whose events are not in the spool. While the spool cannot be written the
        events wait here (their critical ones are still sent) and nothing more is read."""
        if self._held is not None and not self._spool_held():
            self._publish()
            return 0
        records = self.source.poll()
        cursor = self.source.cursor  # past these records: saved once their events are spooled
        self._count_source()
        if records:
            self.metrics.lines.inc(len(records))
            self.metrics.last_line.set(records[-1].at)
            events = self.events_of(records)
            self.metrics.detected.inc(len(events))
            self._held = (events, cursor)
            self._spool_held()
        elif self._held is None:
            self._spooled_cursor = cursor
        if self._spooled_cursor is not None and time.monotonic() - self._cursor_saved >= CURSOR_EVERY_S:
            self.save_cursor()
        self._publish()
        return len(records)

    def _spool_held(self) -> bool:
        if time.monotonic() < self._append_at or self._held is None:
            return False
        events, cursor = self._held
        try:
            dropped = self.spool.append(events)
        except OSError as exc:
            self.metrics.spool_write_failures.inc()
            self._append_at = time.monotonic() + APPEND_RETRY_S
            if not self._append_failing:
                log.warning(
                    "cannot write the spool (%s): %d events held, tried again every %.0fs; the read "
                    "position stays before their records",
                    bounded(str(exc), 300),
                    len(events),
                    APPEND_RETRY_S,
                )
            self._append_failing = True
            return False
        if self._append_failing:
            log.warning("the spool takes writes again: %d held events spooled", len(events))
        self._append_failing, self._held, self._spooled_cursor = False, None, cursor
        if dropped:
            by = ", ".join(f"{n} {k}" for k, n in self.spool.dropped_by_severity.items() if n)
            log.warning("spool full: dropped %d undelivered events, minor ones first (so far: %s)", dropped, by)
        return True

    def _count_source(self) -> None:
        bad, resets = getattr(self.source, "bad_records", 0), getattr(self.source, "seq_resets", 0)
        if bad > self._bad_seen:
            self.metrics.unreadable.labels("source").inc(bad - self._bad_seen)
            log.warning(
                "%d unreadable kernel log record%s skipped (source): %s",
                bad - self._bad_seen,
                "s" if bad - self._bad_seen > 1 else "",
                bounded(getattr(self.source, "last_bad", ""), 300),
            )
        if resets > self._resets_seen:
            self.metrics.seq_resets.inc(resets - self._resets_seen)
        self._bad_seen, self._resets_seen = max(bad, self._bad_seen), max(resets, self._resets_seen)

    def save_cursor(self) -> None:
        """Save the read position after the last records whose events are spooled."""
        self._cursor_saved = time.monotonic()
        if self._spooled_cursor is None or self._spooled_cursor == self._cursor_written:
            return
        try:
            write_atomically(self.config.spool_dir / CURSOR_FILE, json.dumps(self._spooled_cursor))
            self._cursor_written = self._spooled_cursor
        except OSError as exc:  # the older position stands: records after it are read again
            self.metrics.spool_write_failures.inc()
            log.warning("cannot save the read position (%s)", bounded(str(exc), 300))

    async def sample_once(self) -> None:
        for argv, tracker in self.samplers:
            text = await asyncio.to_thread(self.run, argv)
            self.metrics.samples.inc()
            now = time.time()
            self._spool_sampled(tracker.observe(text, now=now, settled_at=self.settled_at), now)
        if self.watch is not None:
            now = time.time()
            self._spool_sampled(await asyncio.to_thread(self.watch.observe, now=now, settled_at=self.settled_at), now)
        trackers: list[SampleTracker | NodeWatch] = [tracker for _, tracker in self.samplers]
        if any(tracker.unconfirmed for tracker in [*trackers, *([self.watch] if self.watch else [])]):
            grace_left = self.settled_at + self.config.confirmation.grace_s - time.time()
            self._sample_at = min(self._sample_at, time.monotonic() + max(RESAMPLE_AFTER_S, grace_left))
        self._publish()

    def _spool_sampled(self, found: list[Sampled], now: float) -> None:
        events = [
            self._event(f"{self.config.boot_id}/{f.key}", now, None, f.message, f.severity, f.signature) for f in found
        ]
        if events:
            self.metrics.detected.inc(len(events))
            try:
                self.spool.append(events)
            except OSError as exc:  # a sample is taken again; its findings come with the next change
                self.metrics.spool_write_failures.inc()
                log.warning("cannot spool %d sampled findings (%s)", len(events), bounded(str(exc), 300))

    async def deliver(self) -> None:
        """Send what is spooled, critical events first, a batch at a time, until it is empty
        or a send fails. A batch's repeated minor events go as one event with their count
        (coalesce_minor); critical ones, each on its own."""
        while (self.spool.depth or self._urgent) and time.monotonic() >= self._retry_at:
            urgent = self._urgent[: self.config.batch_size]
            batch = urgent or self.spool.pending(self.config.batch_size)
            try:
                await self.transport.send(
                    self.config.node, batch if urgent else coalesce_minor(batch, self.config.xid_policy)
                )
            except Exception as exc:  # noqa: BLE001 - any failure: keep the events, retry later
                self.metrics.send_failures.inc()
                log.warning("cannot deliver %d events (%s); retrying in %.1fs", len(batch), exc, self._backoff)
                self._retry_at = time.monotonic() + self._backoff
                self._backoff = min(self._backoff * 2, MAX_BACKOFF_S)
                return
            if urgent:  # counted as sent when the spool's order reaches them
                del self._urgent[: len(urgent)]
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
        self._beating = asyncio.create_task(self.beat_once(self.heartbeat))

    async def beat_once(self, heartbeat: Heartbeat) -> bool:
        try:
            await asyncio.to_thread(heartbeat.send, self.config.node)
        except Exception as exc:  # noqa: BLE001 - the intake is away: the next beat is the retry
            self.metrics.heartbeat_failures.inc()
            log.warning("heartbeat not taken (%s)", exc)
            return False
        self.metrics.heartbeats.inc()
        return True

    def _publish(self) -> None:
        self.metrics.depth.set(self.spool.depth)
        self.metrics.dropped.set(self.spool.dropped)
        for severity, n in self.spool.dropped_by_severity.items():
            self.metrics.dropped_by_severity.labels(severity).set(n)

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
                except TimeoutError:
                    pass
        finally:
            if self._beating is not None:  # a beat in flight ends within its send timeout
                await asyncio.gather(self._beating, return_exceptions=True)
            self.save_cursor()
            self.spool.close()
            self.source.close()


def valid_event(ev: Event) -> bool:
    """Whether a spooled object is an event this agent can deliver (else the spool line is
    corrupt)."""
    if not set(_EVENT_FIELDS) <= set(ev) <= set(_EVENT_FIELDS) | set(_EVENT_OPTIONAL):
        return False
    fields = {**_EVENT_FIELDS, **_EVENT_OPTIONAL}
    return (
        all(isinstance(v, fields[k]) and not (isinstance(v, bool) and fields[k] is not bool) for k, v in ev.items())
        and all(len(ev[k]) <= MAX_TEXT for k in ("node", "source", "message", "actor", "event_id"))
        and len(ev.get("signature", "")) <= MAX_SIGNATURE_NAME
        and (ev["code"] is None or 0 <= ev["code"] <= 2**31 - 1)
        and ev.get("severity", "") in (*SEVERITY_WORDS, "")
    )


def valid_cursor(cursor: object) -> bool:
    """Whether a saved read position is one a source of this agent wrote: a file's inode and
    offset, a /dev/kmsg boot id and sequence number, or a journal cursor."""
    if not isinstance(cursor, dict):
        return False

    def count(v: object, low: int = 0) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and low <= v <= MAX_SEQ

    def text(v: object) -> bool:
        return isinstance(v, str) and 0 < len(v) <= MAX_TEXT and bounded(v) == v

    if set(cursor) == {"inode", "offset"}:
        return (cursor["inode"] is None or count(cursor["inode"])) and count(cursor["offset"])
    if set(cursor) == {"boot", "seq"}:
        return isinstance(cursor["boot"], str) and len(cursor["boot"]) <= 200 and count(cursor["seq"], -1)
    if set(cursor) == {"cursor"}:
        return cursor["cursor"] is None or text(cursor["cursor"])
    return False


def boot_identity() -> tuple[str, float]:
    """This boot's id and the unix time it began (what /dev/kmsg's usec counts from)."""
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return boot_id, time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)


def ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not os.access(path, os.W_OK):
        raise PermissionError(f"{path}: not writable")
    return path
