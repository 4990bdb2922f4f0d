"""Accepted events, kept on disk and delivered to their nodes' workflows.

Kept. Accepted events go to a spool on disk (the agent's, fleetctl.agent.spool) before the
request is answered, so neither a Temporal outage nor a restart loses one. The spool is read
in order; events delivered out of order (another node's first, a critical one first) are
marked delivered in memory and acknowledged once everything before them is, and when the
spool holds many more lines than events queued (a node that refuses, repeats merged) the
queued events are written again, merged, and the old lines acknowledged. A crash in between
sends some events again (same ids: the workflow records them once), never loses one.

Delivered. One queue a node (fleetctl.intake.queue decides what goes next): up to LANES
nodes are sent to at once, a node with a critical event waiting besides them, so no node's
flood and no slow node delays another's critical event. Each event is one signal, and each
signal that goes is counted delivered at once: a send that fails or times out resumes at the
event it stopped on. Who answered the error decides what waits (fleetctl.intake.signals):
the node's workflow (no workflow, a signal refused) holds that node's events only, for a
backoff of its own; Temporal not answering holds every node's, for a backoff that doubles.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections import Counter, OrderedDict, deque
from pathlib import Path
from typing import TYPE_CHECKING

from fleetctl.agent.spool import Event, Spool
from fleetctl.agent.transport import NodeRefused
from fleetctl.intake.parse import IntakeEvent
from fleetctl.intake.queue import FIRST_BACKOFF_S, MAX_BACKOFF_S, Admission, DeliveryQueue, Entry
from fleetctl.intake.signals import NodeFailed
from fleetctl.text import one_line

if TYPE_CHECKING:
    from fleetctl.agent.runner import Transport

log = logging.getLogger("fleetctl.intake")

MAX_QUEUED = 100_000  # events queued in all (fleetctl.intake.queue: what happens past it)
MAX_QUEUED_PER_CREDENTIAL = 10_000  # ... by one credential: one agent, the operator token, the poller
BATCH = 50  # events a node is sent in its turn before the next node's turn
LANES = 8  # nodes sent to at once; a node with a critical event waiting goes besides them
POLL_S = 0.05  # the delivery loop looks for new events, and at its stop event, this often
STOP_S = 2.0  # on stop, the signal in flight gets this long, then is cancelled (its event stays spooled)
COMPACT_AT = 10_000  # spool lines past which, and past twice the events queued, the spool is rewritten
SEEN_IDS = 100_000  # ids remembered for de-duplication (the workflow de-duplicates again)
# Events without an id whose content (node, code, message, severity) was accepted this
# recently are a replayed POST, not a new fault.
CONTENT_WINDOW_S = 600.0
# The spool's own bound: never reached, the queue's bounds are the intake's.
SPOOL_UNBOUNDED = 2**62


def _spooled(event: Event) -> bool:
    """Whether a spool line is an event the intake can queue (else it is corrupt)."""
    at, code = event.get("at"), event.get("code")
    return (
        all(isinstance(event.get(k), str) for k in ("node", "source", "message", "event_id"))
        and isinstance(at, (int, float))
        and not isinstance(at, bool)
        and (code is None or (isinstance(code, int) and not isinstance(code, bool)))
    )


def signal_of(event: Event) -> Event:
    """What the node's workflow is sent for a queued event (workflows.api.HealthEventInput)."""
    out = {
        "node": event["node"],
        "source": event["source"],
        "code": event["code"],
        "message": event["message"],
        "actor": "fleetctl-intake",
        "event_id": event["event_id"],
        "at": event["at"],
        # absent from events spooled by an older intake
        "severity": event.get("severity", ""),
        "signature": event.get("signature", ""),
        "at_from_record": event.get("at_from_record", False),
    }
    if event.get("gpu"):
        out["gpu"] = event["gpu"]
    if event.get("repeat_count", 1) > 1:
        out |= {
            "repeat_count": event["repeat_count"],
            "first_seen": event["at"],
            "last_seen": event.get("last_at") or event["at"],
        }
    return out


class Intake:
    """Thread-safe: the HTTP handlers and the Kubernetes poller accept, one asyncio loop delivers."""

    def __init__(
        self,
        spool_dir: Path,
        transport: Transport,
        max_spool: int = MAX_QUEUED,
        batch_size: int = BATCH,
        max_per_credential: int = MAX_QUEUED_PER_CREDENTIAL,
        lanes: int = LANES,
    ):
        self.spool = Spool(spool_dir, SPOOL_UNBOUNDED, valid=_spooled)
        self.transport, self.batch_size, self.lanes = transport, batch_size, lanes
        self.queue = DeliveryQueue(max_per_credential, max_spool)
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._recent_content: OrderedDict[str, float] = OrderedDict()  # content key -> when accepted
        self._journal: deque[int] = deque()  # the spool's lines, in its order
        self._done: set[int] = set()  # lines delivered or dropped, not yet acknowledged
        self._line_numbers = itertools.count()
        self._paused_since, self._paused_until, self._backoff_s = 0.0, 0.0, FIRST_BACKOFF_S
        self._stopping = self._closed = False
        self.accepted = self.duplicates = self.sent = self.signals = self.undeliverable = 0
        self.dropped: Counter[str] = Counter()  # minor events dropped past a bound, by credential
        self.displaced = 0  # minor events dropped to make room for a critical one past the total bound
        self.not_in_inventory = 0  # events of nodes fleetctl does not manage, counted and not queued
        self._unmanaged: OrderedDict[str, None] = OrderedDict()  # such nodes, logged once each
        self.npd_skipped = 0  # Node Problem Detector conditions that could not be read (poll_node_conditions)
        self.npd_not_in_inventory = 0  # ... that were of a node fleetctl does not manage
        self._load()

    # ---- keeping -------------------------------------------------------------------------

    def _load(self) -> None:
        """Queue what the spool holds, in its order (merged again, the bounds applied again)."""
        for event in self.spool.pending(self.spool.depth):
            (line,) = self._lines_appended(1)
            if event["event_id"] in self._seen:  # a rewrite's copy of an event read before it
                self._done.add(line)
                continue
            self._remember(event["event_id"])
            admission, displaced = self.queue.add(event, line, force=True)
            self._done.update(displaced)
            if admission is Admission.DROPPED:
                self._done.add(line)
        self._acknowledge()

    def _lines_appended(self, n: int) -> list[int]:
        lines = list(itertools.islice(self._line_numbers, n))
        self._journal.extend(lines)
        return lines

    def _append(self, events: list[Event]) -> list[int]:
        """Write the events durably; their lines. OSError: nothing written."""
        self.spool.append(events)
        return self._lines_appended(len(events))

    def _remember(self, event_id: str) -> None:
        self._seen[event_id] = None
        while len(self._seen) > SEEN_IDS:
            self._seen.popitem(last=False)

    def _acknowledge(self) -> None:
        """Tell the spool how far everything is done with; rewrite it when mostly done with."""
        done = 0
        while self._journal and self._journal[0] in self._done:
            self._done.discard(self._journal.popleft())
            done += 1
        try:
            if done:
                self.spool.ack(done)
            if len(self._journal) > COMPACT_AT and len(self._journal) > 2 * self.queue.size:
                self._rewrite()
        except OSError as exc:  # delivered events stay on disk: sent again after a restart, never lost
            log.warning("cannot update the spool (%s)", one_line(exc, 200))

    def _rewrite(self) -> None:
        """The queued events written again (merged, with their attempts), the old lines done."""
        entries = self.queue.entries()
        old = len(self._journal)
        for entry, line in zip(entries, self._append([e.event for e in entries]), strict=True):
            entry.lines = [line]
        for _ in range(old):
            self._done.discard(self._journal.popleft())
        self.spool.ack(old)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self.spool.close()

    @property
    def depth(self) -> int:
        return self.queue.size

    # ---- accepting -----------------------------------------------------------------------

    def accept(self, events: list[IntakeEvent], credential: str = "operator") -> dict[str, Counter[str]]:
        """Queue the events; how it went for each node ("accepted", "duplicates", "dropped",
        "refused"). The queued ones are on disk when this returns. An event is a duplicate
        of one with its id, or (one sent without an id: IntakeEvent.content_key) of one with
        its content accepted within CONTENT_WINDOW_S. OSError: nothing was taken."""
        account: dict[str, Counter[str]] = {ev.node: Counter() for ev in events}
        now = time.monotonic()
        with self._lock:
            if self._closed:
                raise OSError("the intake is stopping")
            while self._recent_content and now - next(iter(self._recent_content.values())) > CONTENT_WINDOW_S:
                self._recent_content.popitem(last=False)
            fresh, keys = [], set()
            for ev in events:
                key = ev.content_key or ev.event_id
                if ev.event_id in self._seen or key in self._recent_content or key in keys:
                    account[ev.node]["duplicates"] += 1
                    continue
                keys.add(key)
                fresh.append(ev)
            spooled = [{**ev.as_dict(), "attempts": 0, "credential": credential} for ev in fresh]
            for ev, event, line in zip(fresh, spooled, self._append(spooled), strict=True):
                admission, displaced = self.queue.add(event, line)
                self._done.update(displaced)
                self.displaced += bool(displaced)
                if admission in (Admission.DROPPED, Admission.REFUSED):
                    self._done.add(line)
                if admission is Admission.REFUSED:  # the sender keeps it and sends it again
                    account[ev.node]["refused"] += 1
                    continue
                self._remember(ev.event_id)
                if ev.content_key:
                    self._recent_content[ev.content_key] = now
                account[ev.node]["dropped" if admission is Admission.DROPPED else "accepted"] += 1
            while len(self._recent_content) > SEEN_IDS:
                self._recent_content.popitem(last=False)
            self._count(account, credential)
        return account

    def not_managed(self, events: Counter[str]) -> None:
        """Events (how many, by node) of nodes not in the inventory: counted, not queued, and
        each node logged the first time."""
        with self._lock:
            new = sorted(node for node in events if node not in self._unmanaged)
            self.not_in_inventory += sum(events.values())
            for node in new:
                self._unmanaged[node] = None
            while len(self._unmanaged) > SEEN_IDS:
                self._unmanaged.popitem(last=False)
        for node in new:
            log.warning("events of %s not taken: the node is not in the inventory", node)

    def _count(self, account: dict[str, Counter[str]], credential: str) -> None:
        total = sum(account.values(), Counter())
        self.accepted += total["accepted"]
        self.duplicates += total["duplicates"]
        if total["dropped"]:
            self.dropped[credential] += total["dropped"]
            log.warning(
                "%s: %d minor events dropped past its bound of %d queued (%d so far)",
                credential,
                total["dropped"],
                self.queue.per_credential,
                self.dropped[credential],
            )

    # ---- delivering ----------------------------------------------------------------------

    async def deliver_once(self) -> bool:
        """One batch to each node that is ready, critical events first, all at once, whether
        or not an earlier failure paused delivery. False when Temporal did not answer."""
        started = time.monotonic()
        lanes: dict[asyncio.Task[None], str] = {}
        self._start(lanes, paused=False)
        if lanes:
            await asyncio.wait(lanes)
        with self._lock:
            self._acknowledge()
        return self._paused_since < started

    async def deliver_until(self, stop: threading.Event) -> None:
        """Deliver until `stop` is set (from any thread); then the signals in flight get
        STOP_S to end, and what did not go stays spooled."""
        lanes: dict[asyncio.Task[None], str] = {}
        self._stopping = False
        try:
            while not stop.is_set():
                self._start(lanes)
                if lanes:
                    done, _ = await asyncio.wait(lanes, timeout=POLL_S, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        del lanes[task]
                else:
                    await asyncio.sleep(POLL_S)
                with self._lock:
                    self._acknowledge()
        finally:
            self._stopping = True
            if lanes:
                _, late = await asyncio.wait(lanes, timeout=STOP_S)
                for task in late:
                    task.cancel()
                if late:
                    await asyncio.wait(late, timeout=STOP_S)
            with self._lock:
                self._acknowledge()

    def _start(self, lanes: dict[asyncio.Task[None], str], paused: bool = True) -> None:
        """A send for each node that may go now: critical ones always, others while lanes are
        free. `paused`: none while delivery is paused."""
        now = time.monotonic()
        if paused and now < self._paused_until:
            return
        with self._lock:
            while picked := self.queue.take(now, self.batch_size, minor=len(lanes) < self.lanes):
                node, batch = picked
                lanes[asyncio.create_task(self._send(node, batch))] = node

    async def _send(self, node: str, batch: list[Entry]) -> None:
        """The batch in order, one signal an event; stops at the first error, at a critical
        event of the node queued meanwhile (it goes next), and at stop."""
        started = time.monotonic()
        try:
            for entry in batch:
                with self._lock:
                    if self._stopping or (not entry.critical and self.queue.critical_waiting(node)):
                        return
                if self._paused_since > started:  # another send found Temporal away
                    return
                try:
                    await self.transport.send(node, [signal_of(entry.event)])
                except (NodeRefused, NodeFailed) as exc:
                    self._refused(entry, exc)
                    return
                except Exception as exc:  # noqa: BLE001 - Temporal did not answer: every node waits
                    self._unreachable(node, exc)
                    return
                with self._lock:
                    self._done.update(self.queue.delivered(entry))
                    self.sent += entry.repeat_count
                    self.signals += 1
                    self._backoff_s = FIRST_BACKOFF_S
        finally:
            with self._lock:
                self.queue.release(node, batch)

    def _refused(self, entry: Entry, exc: Exception) -> None:
        with self._lock:
            gone = self.queue.refused(entry, time.monotonic())
            self._done.update(gone)
            self.undeliverable += entry.repeat_count if gone else 0
        log.warning(
            "%s did not take event %s (%s)%s",
            entry.node,
            entry.event["event_id"],
            one_line(exc, 200),
            f": dropped after {entry.event['attempts']} attempts" if gone else "; its events wait",
        )

    def _unreachable(self, node: str, exc: Exception) -> None:
        now = time.monotonic()
        with self._lock:
            self._paused_since = now
            if now < self._paused_until:  # said by another send already
                return
            self._paused_until = now + self._backoff_s
            log.warning("cannot deliver to %s (%s): delivery waits %.1fs", node, one_line(exc, 200), self._backoff_s)
            self._backoff_s = min(self._backoff_s * 2, MAX_BACKOFF_S)
