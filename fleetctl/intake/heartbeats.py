"""Agents' heartbeats: held in memory, written to the database in one statement a second.

Why not a signal to the node's workflow, the way the agent sends events: a signal is a
history event and a workflow task on that node's workflow, and at 10,000 nodes beating
every 30 s that is 333 workflow tasks a second whose histories grow with nothing to act
on. A heartbeat only has to say "the agent was here at T", so the intake keeps the latest
time per node (its own clock, not the node's) and writes every node it heard from since
the last write in one UPDATE (fleetctl.db.queries.record_agent_heartbeats): 10,000 nodes
cost one statement of at most 10,000 rows a second, and the sweep that judges silence
reads the column it already lists (workflows.definitions.active_checks).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime

log = logging.getLogger("fleetctl.intake")

MAX_PENDING = 100_000  # distinct nodes heard between two writes; more is refused (503), not held
FLUSH_INTERVAL_S = 1.0


class Heartbeats:
    """Thread-safe: HTTP handlers note, one thread writes."""

    def __init__(self, record: Callable[[dict[str, datetime]], int], max_pending: int = MAX_PENDING):
        self.record, self.max_pending = record, max_pending
        self._pending: dict[str, datetime] = {}
        self._lock = threading.Lock()
        self.heard = self.written = self.write_failures = 0

    def note(self, node: str, at: datetime | None = None) -> bool:
        """Whether the heartbeat was taken (False: too many nodes wait for the next write)."""
        at = at or datetime.now(UTC)
        with self._lock:
            if node not in self._pending and len(self._pending) >= self.max_pending:
                return False
            self._pending[node] = max(at, self._pending.get(node, at))
            self.heard += 1
        return True

    @property
    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> int:
        """Write what was heard; on failure it is kept (a later heartbeat of a node wins) and
        written with the next."""
        with self._lock:
            batch, self._pending = self._pending, {}
        if not batch:
            return 0
        try:
            written = self.record(batch)
        except Exception as exc:  # noqa: BLE001 - the database is away: keep the times, write them next time
            self.write_failures += 1
            log.warning(
                "cannot record %d agent heartbeats (%s)",
                len(batch),
                str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
            )
            with self._lock:
                for node, at in batch.items():
                    self._pending[node] = max(at, self._pending.get(node, at))
            return 0
        self.written += written
        return written

    def flush_until(self, stop: threading.Event, interval_s: float = FLUSH_INTERVAL_S) -> None:
        while not stop.wait(interval_s):
            self.flush()
        self.flush()
