"""Fleet-relative judgement: nodes well below their peers on the same check and profile.

Uses the median and the median absolute deviation (MAD), which a few bad nodes cannot drag
the way they drag a mean and standard deviation. A node is a straggler when its robust
z-score, (value - median) / (1.4826 * MAD), is beyond `threshold` in the bad direction.
Because a fleet of identical hardware can have a MAD near zero, the spread is floored at
`min_relative_spread` of the median, so a node 3% off a perfectly uniform fleet is not
flagged.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

# The (check, metric, higher is better) pairs a node is compared with its peers on, at
# admission and in the fleet report.
STRAGGLER_METRICS: tuple[tuple[str, str, bool], ...] = (
    ("nccl-allreduce", "busbw_gbps", True),
    ("hpl", "gflops_per_gpu", True),
)

# The checks with a metric nodes are compared on.
PEER_JUDGED_CHECKS: frozenset[str] = frozenset(check for check, _, _ in STRAGGLER_METRICS)

# MAD * 1.4826 estimates the standard deviation of normally distributed values.
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class StragglerVerdict:
    straggler: bool
    value: float
    median: float | None
    robust_z: float | None  # negative: worse than the fleet (whatever the metric's direction)
    reason: str


def find_stragglers(
    values: Mapping[str, float],
    higher_is_better: bool = True,
    threshold: float = 3.5,  # Iglewicz and Hoaglin's cut-off for modified z-scores
    min_peers: int = 5,
    min_relative_spread: float = 0.01,
    min_spread: float = 0.0,
) -> dict[str, StragglerVerdict]:
    """`min_spread` floors the spread in the values' own unit, for a metric whose median may
    be 0 (a fraction of time throttled): there a relative floor is no floor."""
    if len(values) < min_peers:
        reason = f"only {len(values)} nodes, need {min_peers} to compare; nobody flagged"
        return {node: StragglerVerdict(False, value, None, None, reason) for node, value in values.items()}
    median = statistics.median(values.values())
    mad = statistics.median(abs(v - median) for v in values.values())
    spread = max(MAD_TO_SIGMA * mad, abs(median) * min_relative_spread, min_spread, 1e-12)
    sign = 1 if higher_is_better else -1
    verdicts = {}
    for node, value in values.items():
        z = sign * (value - median) / spread
        straggler = z < -threshold
        relation = "below" if value < median else "above"
        reason = (
            f"{value:g} is {abs(value - median) / abs(median or 1):.1%} {relation} the fleet median {median:g} "
            f"(robust z {z:.1f}{', straggler' if straggler else ''})"
        )
        verdicts[node] = StragglerVerdict(straggler, value, median, round(z, 2), reason)
    return verdicts


@dataclass(frozen=True)
class PairVerdict:
    node: str
    pairs: int
    slow_pairs: int
    straggler: bool
    reason: str


def localise_by_pairs(
    busbw: Mapping[tuple[str, str], float], floor: float, min_partners: int = 2
) -> dict[str, PairVerdict]:
    """Each node's verdict from pairwise (two-node) all-reduce bus bandwidths.

    A slow pair says one of its two nodes is slow, not which. A node slow with every
    partner, when those partners are fast with someone else, is the straggler; a node with
    fewer than `min_partners` partners cannot be told apart from its partner. When every
    pair is slow the fault is the fabric (or the floor), not one node, and nobody is named.
    """
    if not math.isfinite(floor) or floor <= 0:
        raise ValueError(f"the bandwidth floor must be a positive number, not {floor!r}")
    partners: dict[str, dict[str, float]] = {}
    for (a, b), value in busbw.items():
        if a == b:
            raise ValueError(f"pair ({a}, {b}) is one node, not a pair")
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"pair ({a}, {b}): bus bandwidth {value!r} is not a measurement")
        for x, y in ((a, b), (b, a)):
            # Measured twice (a-b and b-a): the slower run is the one that says something.
            partners.setdefault(x, {})[y] = min(value, partners.get(x, {}).get(y, value))
    slow = {node: {p for p, v in seen.items() if v < floor} for node, seen in partners.items()}
    any_fast = any(len(s) < len(partners[n]) for n, s in slow.items())
    verdicts = {}
    for node, seen in partners.items():
        others_fast = {p for p in slow[node] if len(slow[p]) < len(partners[p])}
        straggler = any_fast and len(seen) >= min_partners and slow[node] == set(seen) and len(others_fast) == len(seen)
        if straggler:
            reason = f"slow with all {len(seen)} partners, each of them fast with another node: the straggler"
        elif not any_fast and seen:
            reason = f"every pair is below {floor:g} GB/s: the fabric or the floor, not one node"
        elif slow[node]:
            reason = f"slow with {len(slow[node])} of {len(seen)} partners ({', '.join(sorted(slow[node]))})"
        else:
            reason = f"at or above {floor:g} GB/s with all {len(seen)} partners"
        if len(seen) < min_partners and slow[node]:
            reason += f"; {len(seen)} partner(s) cannot tell which node of a slow pair is slow"
        verdicts[node] = PairVerdict(node, len(seen), len(slow[node]), straggler, reason)
    return verdicts
