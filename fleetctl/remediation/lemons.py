"""The lemon rule: a node remediated too often in a window goes to RMA, not back to
production, and the one figure it counts ("times remediated"), wherever it is shown. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import zip_longest
from typing import Any, Protocol, TypeVar

from fleetctl.nodes.conditions import RunStatus
from fleetctl.nodes.lifecycle import NodeState
from fleetctl.remediation.drains import is_planned_drain
from fleetctl.remediation.events import Event


class RunRecord(Protocol):
    """What the lemon rule reads of a live remediation run (a remediation_runs row)."""

    @property
    def status(self) -> str: ...
    @property
    def event(self) -> Mapping[str, Any]: ...
    @property
    def started_at(self) -> datetime: ...


def fault_of(event: Mapping[str, Any]) -> tuple[str, str]:
    """Which fault a run's event is: its failure label (`xid 79`, `check dcgm`, ...) and, for
    an event with neither code nor check (a signature or an operator's report), its message."""
    e = Event.from_dict(event)
    return e.failure, e.message if e.code is None and e.check is None else ""


Run = TypeVar("Run", bound=RunRecord)


def remediations(runs: Iterable[Run]) -> list[Run]:
    """The node's live runs that are remediations of their own, in start order. A run interrupted by an event
    for the fault it was remediating is that remediation going on, not another: the node's
    workflow hands an interrupted run over to the runbook for the interrupting event, so the
    node's next run is that event's, and when it is for the same fault the interrupted run is
    not counted (a repeat of the fault's XID a second into the run made two). An interrupted run
    whose next is for another fault counts. Should the interrupting event have had no runbook, the
    next run is a later fault's; were it the same fault again, that fault's entry into
    maintenance still counts it (`times_remediated` takes the greater figure)."""
    ordered = sorted(runs, key=lambda r: r.started_at)
    return [
        run
        for run, after in zip_longest(ordered, ordered[1:])
        if not (
            run.status == RunStatus.INTERRUPTED and after is not None and fault_of(after.event) == fault_of(run.event)
        )
    ]


def remediation_entries(transitions: Iterable[Any]) -> list[datetime]:
    """When the node entered maintenance to be remediated, from its transitions in recorded
    order (anything with from_state, to_state, failure, actor_kind and at: node_events rows,
    fleetctl.reliability.metrics.Transition). The entry that ends a planned drain (straight
    from production or draining, while the node is out for maintenance) is not a remediation;
    a check that fails while it is out (burn-in back to maintenance) is."""
    out_for_maintenance = False
    entries = []
    for t in transitions:
        if t.from_state == NodeState.PRODUCTION.value and t.to_state != NodeState.PRODUCTION.value:
            out_for_maintenance = is_planned_drain(t.from_state, t.to_state, t.failure, t.actor_kind)
        elif t.to_state == NodeState.PRODUCTION.value:
            out_for_maintenance = False
        if t.to_state == NodeState.MAINTENANCE.value and not (
            out_for_maintenance and t.from_state in (NodeState.PRODUCTION.value, NodeState.DRAINING.value)
        ):
            entries.append(t.at)
    return entries


@dataclass(frozen=True)
class LemonPolicy:
    """A node remediated `threshold` times within `window` is a lemon: RMA, not production.

    "Times remediated" is one figure, `times_remediated`, shown as "remediated N times in
    D days" by the RMA reason, `fleetctl report`'s lemon table and `fleetctl node show`.
    """

    threshold: int = 3
    window: timedelta = timedelta(days=7)

    def times_remediated(
        self, run_starts: Iterable[datetime], maintenance_entries: Iterable[datetime], now: datetime
    ) -> int:
        """How many times the node was remediated in the window that ends at `now`: its
        remediations begun in it (`remediations`), or its entries into maintenance in it, whichever is more.
        Both, because neither alone sees every repair: a run begins before the drain it asks
        for (its entry comes later), and a burn-in that fails again puts the node back in
        maintenance while the run that sent it there is still going (no new run)."""
        since = now - self.window

        def within(times: Iterable[datetime]) -> int:
            return sum(1 for at in times if since <= at <= now)

        return max(within(run_starts), within(maintenance_entries))

    def is_lemon(self, run_starts: Iterable[datetime], maintenance_entries: Iterable[datetime], now: datetime) -> bool:
        return self.times_remediated(run_starts, maintenance_entries, now) >= self.threshold

    def describe(self, times: int) -> str:
        """The figure in words, the same wherever it is shown."""
        from fleetctl.text import plural
        from fleetctl.text import times as how_often

        return f"remediated {how_often(times)} in {plural(self.window / timedelta(days=1), 'day')}"
