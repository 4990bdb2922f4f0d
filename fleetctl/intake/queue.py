"""The intake's queue of accepted events, one queue a node: which node's events go next,
which repeats merge, what a sender's flood may hold. Pure: the clock comes in as an
argument, nothing is read or written (fleetctl.intake.delivery keeps the events on disk and
sends them).

Which next. Critical events first, across all nodes (the node whose critical event waits
longest first), then the nodes with minor events in turn, a batch each. A node whose
workflow answered an error (no workflow, a signal refused) is held for a backoff of its
own; the others go on.

Repeats. A minor event with a code or a signature that repeats one queued for its node
(same code, signature and severity) is merged into the newest queued one, which then
carries how many it stands for and when the first and last were seen. The first
REPEATS_KEPT of them stay separate events: the node's workflow escalates a warning repeated
that many times in a window (fleetctl.nodes.health.EscalationPolicy), and must see them.

Bounds. A credential (the operator token, one agent's, the Kubernetes poller) holds at most
`per_credential` queued events and the intake at most `total`: past them a minor event is
dropped (counted), a critical one is still queued. Past `total`, a critical event takes the
room of the oldest minor event queued, and is refused (never dropped: the sender keeps it)
only when nothing minor is left.
"""

from __future__ import annotations

import itertools
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from enum import Enum

from fleetctl.agent.spool import Event, severity_of
from fleetctl.nodes.health import EscalationPolicy

REPEATS_KEPT = EscalationPolicy().repeats
MAX_ATTEMPTS = 20  # refusals of one event by its node's workflow, then it is dropped (undeliverable)
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0


class Admission(Enum):
    QUEUED = "queued"
    MERGED = "merged"  # into a queued repeat of it
    DROPPED = "dropped"  # minor, past its credential's bound or the total
    REFUSED = "refused"  # critical, past the total with nothing minor left to make room


# What makes two events of a node repeats of one another: node, code, signature, severity, GPU.
RepeatKey = tuple[str, int | None, str, str, str]


def critical(event: Event) -> bool:
    return severity_of(event) == "critical"


def repeat_key(event: Event) -> RepeatKey | None:
    """What makes two events of a node repeats of one another; None: never merged."""
    if critical(event) or (event.get("code") is None and not event.get("signature")):
        return None
    return (
        event["node"],
        event.get("code"),
        event.get("signature", ""),
        event.get("severity", ""),
        event.get("gpu", ""),
    )


def _last_at(event: Event) -> float:
    """When the last repeat `event` stands for was seen: `last_at`, else its own time."""
    last: float = event["last_at"] if "last_at" in event else event["at"]
    return last


@dataclass(eq=False)
class Entry:
    """One queued event, standing for `repeat_count` of them. `event` is the spooled form:
    the IntakeEvent's fields, `attempts`, `credential`, `repeat_count` and `last_at` (the
    last repeat's time; `at` is the first's). `lines`: the spool lines it covers."""

    event: Event
    lines: list[int]
    seq: int
    sending: bool = False

    @property
    def node(self) -> str:
        node: str = self.event["node"]
        return node

    @property
    def critical(self) -> bool:
        return critical(self.event)

    @property
    def repeat_count(self) -> int:
        count: int = self.event.get("repeat_count", 1)
        return count

    def merge(self, event: Event, line: int) -> None:
        self.event["repeat_count"] = self.repeat_count + event.get("repeat_count", 1)
        self.event["at"] = min(self.event["at"], event["at"])
        self.event["last_at"] = max(_last_at(self.event), _last_at(event))
        self.lines.append(line)


@dataclass(eq=False)
class NodeQueue:
    critical: dict[int, Entry] = field(default_factory=dict)  # by seq: arrival order
    minor: dict[int, Entry] = field(default_factory=dict)
    repeats: dict[RepeatKey, list[Entry]] = field(default_factory=dict)  # repeat_key -> queued, oldest first
    busy: bool = False  # a batch of it is being sent
    held_until: float = 0.0
    backoff_s: float = 0.0

    def __len__(self) -> int:
        return len(self.critical) + len(self.minor)

    def ready(self, now: float) -> bool:
        return not self.busy and self.held_until <= now


class DeliveryQueue:
    def __init__(self, per_credential: int, total: int):
        if per_credential < 1 or total < 1:
            raise ValueError("the bounds must allow at least one event")
        self.per_credential, self.total = per_credential, total
        self._nodes: dict[str, NodeQueue] = {}
        self._critical_nodes: OrderedDict[str, None] = OrderedDict()  # nodes with critical events, oldest first
        self._turns: OrderedDict[str, None] = OrderedDict()  # nodes with minor events, next turn first
        self._minor: OrderedDict[int, Entry] = OrderedDict()  # every node's, oldest first
        self._by_credential: Counter[str] = Counter()
        self._seq = itertools.count()
        self.size = 0
        self.merged = 0

    def add(self, event: Event, line: int, force: bool = False) -> tuple[Admission, list[int]]:
        """Queue `event`, spooled at `line`; what became of it, and the lines of an event it
        displaced (done with: dropped to make room for a critical event). `force`: a critical
        event is queued past every bound (one read back from the spool: taken already)."""
        key = repeat_key(event)
        q = self._nodes.get(event["node"])
        if key is not None and q is not None:
            same = q.repeats.get(key, [])
            if len(same) >= REPEATS_KEPT and not same[-1].sending:
                same[-1].merge(event, line)
                self.merged += 1
                return Admission.MERGED, []
        credential = event.get("credential", "")
        displaced: list[int] = []
        if not critical(event):
            if self._by_credential[credential] >= self.per_credential or self.size >= self.total:
                return Admission.DROPPED, []
        elif self.size >= self.total:
            oldest = next((e for e in self._minor.values() if not e.sending), None)
            if oldest is not None:
                displaced = self._remove(oldest)
            elif not force:
                return Admission.REFUSED, []
        self._queue(Entry(event, [line], next(self._seq)), key)
        return Admission.QUEUED, displaced

    def _queue(self, entry: Entry, key: RepeatKey | None) -> None:
        q = self._nodes.setdefault(entry.node, NodeQueue())
        if entry.critical:
            q.critical[entry.seq] = entry
            self._critical_nodes.setdefault(entry.node)
        else:
            q.minor[entry.seq] = entry
            self._minor[entry.seq] = entry
            self._turns.setdefault(entry.node)
            if key is not None:
                q.repeats.setdefault(key, []).append(entry)
        self._by_credential[entry.event.get("credential", "")] += 1
        self.size += 1

    def _remove(self, entry: Entry) -> list[int]:
        q = self._nodes[entry.node]
        if entry.critical:
            del q.critical[entry.seq]
            if not q.critical:
                self._critical_nodes.pop(entry.node, None)
        else:
            del q.minor[entry.seq]
            del self._minor[entry.seq]
            if not q.minor:
                self._turns.pop(entry.node, None)
            key = repeat_key(entry.event)
            if key is not None:
                q.repeats[key].remove(entry)
                if not q.repeats[key]:
                    del q.repeats[key]
        credential = entry.event.get("credential", "")
        self._by_credential[credential] -= 1
        if not self._by_credential[credential]:
            del self._by_credential[credential]
        self.size -= 1
        if not q and not q.busy:
            del self._nodes[entry.node]
        return entry.lines

    def take(self, now: float, limit: int, minor: bool = True) -> tuple[str, list[Entry]] | None:
        """The next node's batch (its critical events first), marked as being sent; None when
        no node is ready. `minor` False: only a node with a critical event waiting."""
        for node in self._critical_nodes:
            if self._nodes[node].ready(now):
                return node, self._batch(node, limit)
        if minor:
            for node in self._turns:
                if self._nodes[node].ready(now):
                    return node, self._batch(node, limit)
        return None

    def _batch(self, node: str, limit: int) -> list[Entry]:
        q = self._nodes[node]
        batch = list(itertools.islice(itertools.chain(q.critical.values(), q.minor.values()), limit))
        if node in self._turns:  # its turn is taken: the others' minor events go first next time
            self._turns.move_to_end(node)
        q.busy = True
        for entry in batch:
            entry.sending = True
        return batch

    def critical_waiting(self, node: str) -> bool:
        """A critical event of `node` queued outside the batch being sent: the batch stops
        before its next minor event, and the critical one goes next."""
        q = self._nodes.get(node)
        return q is not None and any(not e.sending for e in q.critical.values())

    def delivered(self, entry: Entry) -> list[int]:
        self._nodes[entry.node].backoff_s = 0.0
        return self._remove(entry)

    def refused(self, entry: Entry, now: float) -> list[int]:
        """The node's workflow answered an error for `entry`: the node is held for its backoff
        (doubling, to MAX_BACKOFF_S). Past MAX_ATTEMPTS refusals the event is dropped: its
        lines (else none)."""
        q = self._nodes[entry.node]
        q.backoff_s = min(max(FIRST_BACKOFF_S, q.backoff_s * 2), MAX_BACKOFF_S)
        q.held_until = now + q.backoff_s
        entry.event["attempts"] = entry.event.get("attempts", 0) + 1
        return self._remove(entry) if entry.event["attempts"] >= MAX_ATTEMPTS else []

    def release(self, node: str, batch: list[Entry]) -> None:
        """The batch's send ended: what of it was not delivered waits for the node's next turn."""
        for entry in batch:
            entry.sending = False
        q = self._nodes.get(node)
        if q is not None:
            q.busy = False
            if not q:
                del self._nodes[node]

    def next_ready(self, now: float) -> float | None:
        """When the earliest held node with events is ready again (None: none is held)."""
        held = [q.held_until for q in self._nodes.values() if q and not q.busy and q.held_until > now]
        return min(held, default=None)

    def entries(self) -> list[Entry]:
        """Every queued event, in the order they were queued."""
        return sorted(
            (e for q in self._nodes.values() for e in itertools.chain(q.critical.values(), q.minor.values())),
            key=lambda e: e.seq,
        )

    def held_nodes(self, now: float) -> int:
        return sum(1 for q in self._nodes.values() if q.held_until > now)

    def queued_by(self, credential: str) -> int:
        return self._by_credential[credential]
