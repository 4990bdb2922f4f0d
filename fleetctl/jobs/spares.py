"""Hot spares: which production nodes each island holds out of normal scheduling, so that a
restarted job takes one at once instead of waiting for the scheduler to find a free node. Pure.

A spare is a node in production (so it passed burn-in and admission: the lifecycle reaches
production only through them), idle in its scheduler, with an island in the inventory. The
scheduler keeps jobs off it (Slurm: a reservation fleetctl owns per island); a restart in its
island names it (fleetctl.jobs.placement), and the pool is refilled from the island's idle
production nodes. A spare stays in service for the capacity guard: it is healthy, only kept
free. A spare that leaves production (drained, failed) leaves the pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Bounds of the `spares_per_island` setting (fleetctl.config): more would hold a whole
# island of a fleet this size idle by mistake.
MAX_SPARES_PER_ISLAND = 64

PRODUCTION = "production"


@dataclass(frozen=True)
class SpareCandidate:
    """A node as the pool sees it."""

    name: str
    island: str  # "" when the inventory gives none: never a spare
    state: str  # its lifecycle state
    idle: bool  # running no job in its scheduler
    healthy: bool = True  # nothing against it (fleetctl.jobs.placement.unfit): no failed or erroring
    # check, no held drain, no suspect or straggler finding


@dataclass(frozen=True)
class PoolChange:
    """What to change in the pools: per island, every node it holds after the change."""

    pools: dict[str, tuple[str, ...]]  # island -> its spares afterwards (only islands that change)
    added: tuple[str, ...]
    removed: tuple[str, ...]


def plan_pools(per_island: int, held: Mapping[str, str], nodes: Sequence[SpareCandidate]) -> PoolChange:
    """The pools after a refill: `held` maps each spare to its island now.

    A spare that left production, lost its island or moved island, or has evidence against it
    (not `healthy`: a failed check, a held drain, ...) leaves its pool; a pool
    larger than `per_island` (the policy was lowered) gives back its last nodes by name; a
    pool smaller takes idle healthy production nodes of its island, by name. A held spare is not
    asked to be idle (the scheduler keeps jobs off it; a restart may be starting there)."""
    if not 0 <= per_island <= MAX_SPARES_PER_ISLAND:
        raise ValueError(f"spares per island {per_island} is outside 0..{MAX_SPARES_PER_ISLAND}")
    by_name = {n.name: n for n in nodes}
    keep: dict[str, list[str]] = {}
    removed = []
    for name in sorted(held):
        node = by_name.get(name)
        if node is None or node.state != PRODUCTION or not node.healthy or not node.island or node.island != held[name]:
            removed.append(name)
        else:
            keep.setdefault(node.island, []).append(name)
    islands = sorted(({n.island for n in nodes} | set(held.values())) - {""})
    added = []
    pools: dict[str, tuple[str, ...]] = {}
    for island in islands:
        pool = keep.get(island, [])
        removed += pool[per_island:]
        pool = pool[:per_island]
        free = sorted(
            n.name
            for n in nodes
            if n.island == island and n.state == PRODUCTION and n.healthy and n.idle and n.name not in held
        )
        new = free[: per_island - len(pool)]
        added += new
        after = tuple(sorted([*pool, *new]))
        if after != tuple(sorted(n for n, i in held.items() if i == island)):
            pools[island] = after
    return PoolChange(pools, tuple(sorted(added)), tuple(sorted(removed)))


def spare_counts(held: Mapping[str, str], per_island: int) -> dict[str, dict[str, int]]:
    """island -> how many spares it holds and how many the policy asks for."""
    counts: dict[str, int] = {}
    for island in held.values():
        counts[island] = counts.get(island, 0) + 1
    return {island: {"spares": count, "wanted": per_island} for island, count in sorted(counts.items())}
