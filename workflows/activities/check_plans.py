"""Checks that are more than one command, run from the check activity.

`rails`: ibstat first, then one shell run that tests every rail it lists (the script is
built by checks.ib.rails_script). `pairs`: two-node all-reduce of the node with each of its
partners, and of the partners among themselves, each launched by MPI on its first node; the
outputs are put together under step markers (checks.transcript) for checks.nccl's pair judge.

Partners are other nodes of the same GPU profile that are new (imported, not yet admitted:
idle), being admitted or in production, reached by MPI under their node names (the fleet's
host names). Not nodes in maintenance (suspect) nor under a firmware update (rebooting).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from fleetctl.checks._text import UnjudgeableOutput
from fleetctl.checks.catalog import CheckSpec
from fleetctl.checks.ib import rails_script
from fleetctl.checks.nccl import pair_argv, pair_plan, plan_label
from fleetctl.checks.profiles import GpuProfile
from fleetctl.checks.transcript import section, with_stderr
from fleetctl.executors.base import CommandResult
from fleetctl.nodes.lifecycle import NodeState

PAIR_PARTNERS = 2  # two partners and their own pair: enough to name a straggler
PARTNER_STATES = frozenset(
    s.value for s in (NodeState.NEW, NodeState.BURN_IN, NodeState.ADMISSION, NodeState.PRODUCTION)
)


class PartnerRow(Protocol):
    """What choosing partners reads of a node (a `nodes` row)."""

    @property
    def name(self) -> str: ...
    @property
    def rack(self) -> str: ...
    @property
    def profile(self) -> str: ...
    @property
    def state(self) -> str: ...


class NoPartner(Exception):
    """The fleet has no node to pair this one with: its fabric cannot be tested (error)."""


def choose_partners(node: PartnerRow, nodes: Sequence[PartnerRow], count: int = PAIR_PARTNERS) -> list[str]:
    """Up to `count` partners for `node` among `nodes` (rows with name, rack, profile, state):
    the next node after it in its rack and the next one in another rack (next by name, so
    a batch of nodes spreads its pairs instead of all choosing the same partner), then more
    of either."""
    peers = sorted(
        (n for n in nodes if n.name != node.name and n.profile == node.profile and n.state in PARTNER_STATES),
        key=lambda n: n.name,
    )

    def after(group: list[PartnerRow]) -> list[str]:
        names = [n.name for n in group]
        later = [n for n in names if n > node.name]
        return later + [n for n in names if n <= node.name]

    same = after([n for n in peers if n.rack == node.rack])
    other = after([n for n in peers if n.rack != node.rack])
    chosen = [group[0] for group in (same, other) if group]
    chosen += same[1:] + other[1:]
    return chosen[:count]


def run_rails(
    run: Callable[[Sequence[str]], CommandResult], spec: CheckSpec, profile: GpuProfile | None
) -> CommandResult:
    """ibstat (the catalog's argv), then the script that tests each rail it lists."""
    listing = run(spec.argv)
    try:
        script = rails_script(listing.stdout, profile)
    except UnjudgeableOutput as exc:
        return CommandResult(
            listing.argv,
            listing.exit_status,
            listing.stdout,
            f"{listing.stderr}cannot tell the rails from ibstat: {exc}\n",
            listing.duration_s,
            listing.truncated,
        )
    return run(script)


def run_pairs(
    run_on: Callable[[str, Sequence[str]], CommandResult],
    spec: CheckSpec,
    node: str,
    partners: list[str],
    gpus_per_node: int,
) -> CommandResult:
    """Every pair of the plan, launched on its first node; one transcript of all of them."""
    if not partners:
        raise NoPartner(
            f"no other node of {node}'s profile is new, being admitted or in production: "
            "nothing to pair with, the fabric is untested"
        )
    parts, seconds, truncated = [section(plan_label(node, partners), "")], 0.0, False
    for launcher, partner, label in pair_plan(node, partners):
        result = run_on(launcher, pair_argv(launcher, partner, gpus_per_node, spec.argv))
        parts.append(section(label, with_stderr(result.stdout, result.stderr)))
        seconds += result.duration_s
        truncated = truncated or result.truncated
    return CommandResult(("nccl-pairs", node, *partners), 0, "".join(parts), "", seconds, truncated)
