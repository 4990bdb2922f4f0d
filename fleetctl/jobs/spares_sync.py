"""The hot spare pools kept in step with the fleet: the decision is fleetctl.jobs.spares (pure);
this reads the nodes and their schedulers, tells each scheduler that can hold spares
(`HoldsSpares`: Slurm) which nodes its islands hold, and records the pools in the database.

Called by `fleetctl spares fill`, by the node's activities when a node returns to production
or a spare leaves it, and by a job restart once it has taken a spare. Two refills at once
decide from the same facts; the last one's pools stand, and each is a whole, valid pool.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from fleetctl.db import spares as store
from fleetctl.jobs.placement import unfit
from fleetctl.jobs.spares import PoolChange, SpareCandidate, plan_pools
from fleetctl.nodes.view_store import node_health
from fleetctl.schedulers.base import HoldsSpares, Scheduler, SchedulerError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


@dataclass
class FillResult:
    pools: dict[str, tuple[str, ...]] = field(default_factory=dict)  # island -> spares, where it changed
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # island or scheduler -> why it was not changed


def fill(
    engine: Engine, per_island: int, scheduler_for: Callable[[str], Scheduler], islands: Collection[str] | None = None
) -> FillResult:
    """Refill every island's pool to `per_island` spares and drop the spares that left
    production; only the pools of `islands` when given (a node's own island, as it comes and
    goes). A
    scheduler that cannot hold spares is skipped; one scheduler's or island's refusal (a
    node that started a job in between) leaves the others' pools as decided."""
    result = FillResult()
    nodes = store.pool_facts(engine)
    held = store.held(engine)
    health = node_health(engine, [n[0] for n in nodes if n[2] == "production"])
    # A node several schedulers run (SUNK) holds no spares: one scheduler's hold would not
    # keep the other's work off it. "none": no scheduler to keep work off.
    for kind in sorted({n[3] for n in nodes if n[3] != "none" and "+" not in n[3]}):
        scheduler = scheduler_for(kind)
        if not isinstance(scheduler, HoldsSpares):
            continue
        try:
            busy = scheduler.busy_nodes()
        except SchedulerError as exc:
            result.errors[kind] = str(exc)
            continue
        mine = [
            SpareCandidate(name, island, state, name not in busy, not unfit(health[name]) if name in health else False)
            for name, island, state, k in nodes
            if k == kind
        ]
        names = {c.name for c in mine}
        try:
            change = _plan_undrained(scheduler, per_island, {n: i for n, i in held.items() if n in names}, mine)
        except SchedulerError as exc:
            result.errors[kind] = str(exc)
            continue
        for island, pool in change.pools.items():
            if islands is not None and island not in islands:
                continue
            try:
                scheduler.set_spares(island, pool)
            except SchedulerError as exc:
                result.errors[island] = str(exc)
                continue
            store.record_pool(engine, island, pool)
            result.pools[island] = pool
            result.added += [n for n in change.added if n in pool]
            result.removed += [n for n in change.removed if held.get(n) == island]
    return result


def _plan_undrained(
    scheduler: Scheduler, per_island: int, held: dict[str, str], nodes: list[SpareCandidate]
) -> PoolChange:
    """plan_pools, never adding a node its scheduler has drained: fleetctl may still have it in
    production (a job restarted off it by an operator, a drain by hand). Only the nodes a
    plan would add are asked, one at a time, until a plan adds none that is drained."""
    while True:
        change = plan_pools(per_island, held, nodes)
        drained = {n for n in change.added if scheduler.node_state(n).drained}
        if not drained:
            return change
        nodes = [replace(n, idle=False) if n.name in drained else n for n in nodes]


def take(engine: Engine, scheduler: HoldsSpares, island: str, taken: Sequence[str]) -> None:
    """A restart takes these spares of the island: out of the scheduler's pool and the record.
    Taking them again changes nothing."""
    remaining = sorted(n for n, i in store.held(engine).items() if i == island and n not in taken)
    scheduler.set_spares(island, remaining)
    store.record_pool(engine, island, remaining)
