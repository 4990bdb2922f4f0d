"""Fleet-relative judgement: nodes well below their peers on the same check and profile.

Uses the median and the median absolute deviation (MAD), which a few bad nodes cannot drag
the way they drag a mean and standard deviation. A node is a straggler when its robust
z-score, (value - median) / (1.4826 * MAD), is beyond `threshold` in the bad direction.
Because a fleet of identical hardware can have a MAD near zero, the spread is floored at
`min_relative_spread` of the median, so a node 3% off a perfectly uniform fleet is not
flagged.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

# The (check, metric, higher is better) pairs a node is compared with its peers on, at
# admission and in the fleet report.
STRAGGLER_METRICS: tuple[tuple[str, str, bool], ...] = (
    ("nccl-allreduce", "busbw_gbps", True),
    ("hpl", "gflops_per_gpu", True),
)

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
) -> dict[str, StragglerVerdict]:
    if len(values) < min_peers:
        reason = f"only {len(values)} nodes, need {min_peers} to compare; nobody flagged"
        return {node: StragglerVerdict(False, value, None, None, reason) for node, value in values.items()}
    median = statistics.median(values.values())
    mad = statistics.median(abs(v - median) for v in values.values())
    spread = max(MAD_TO_SIGMA * mad, abs(median) * min_relative_spread, 1e-12)
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
