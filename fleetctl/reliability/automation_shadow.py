"""The shadow run: what automation would have done while it ran dry (FLEETCTL_AUTOMATION_DRY_RUN),
beside what did happen, per node, and how often the two agreed.

An operator bringing fleetctl onto a running fleet lets it decide without acting for a while
(the adoption checklist starts with a week of it). Its record of what it would have done:
- a drain: the capacity guard's `dry_run` decision (it would have granted the drain);
- a runbook, and an RMA: a remediation run in shadow (or dry run) mode, its `rma` step
  recorded as `would_run`.
What did happen, from the recorded transitions and the scheduler sync: drains by an operator
(fleetctl's own `node drain`), drains outside fleetctl (another tool's drain in the
scheduler, the external-drain watch's record), drains automation did make (a forced drain, or
before the dry run), and RMAs filed.

Agreement is per node and per kind of act (drain, RMA): automation's and what happened agree
when both acted on the node within AGREE_WITHIN of each other. A runbook has no counterpart
outside fleetctl: it is listed, never counted.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

# How far apart automation's act and the one that happened may be and still be the same
# judgement of the node: a person drains a node within hours of the fault, not days.
AGREE_WITHIN = timedelta(hours=24)


class Act(enum.StrEnum):
    DRAIN = "drain"
    RUNBOOK = "runbook"
    RMA = "rma"


class Doer(enum.StrEnum):
    """Who did what happened."""

    OPERATOR = "operator"  # through fleetctl (`node drain`, `rma open`)
    OUTSIDE = "outside"  # in the scheduler, outside fleetctl (a person in Slurm, NHC)
    AUTOMATION = "automation"  # fleetctl's automation, acting (forced, or before the dry run)


# The acts agreement is counted over (a runbook has no counterpart outside fleetctl).
COMPARED = (Act.DRAIN, Act.RMA)


@dataclass(frozen=True)
class Would:
    """An act automation would have made: on what evidence (the decision's reason)."""

    node: str
    act: Act
    at: datetime
    evidence: str


@dataclass(frozen=True)
class Did:
    """An act that happened, by whom, and what was said of it."""

    node: str
    act: Act
    at: datetime
    by: Doer
    detail: str


def _matched(would: list[Would], did: list[Did], within: timedelta) -> tuple[int, int, int]:
    """(agreed, automation only, happened only) over one node's acts of one kind: each of
    automation's acts agrees with the nearest act that happened within `within`, used once."""
    left = sorted(did, key=lambda d: d.at)
    agreed = 0
    for w in sorted(would, key=lambda w: w.at):
        near = [d for d in left if abs(d.at - w.at) <= within]
        if near:
            left.remove(min(near, key=lambda d: abs(d.at - w.at)))
            agreed += 1
    return agreed, len(would) - agreed, len(left)


def shadow_report(
    would: Iterable[Would],
    did: Iterable[Did],
    since: datetime,
    until: datetime,
    dry_run: bool,
    within: timedelta = AGREE_WITHIN,
) -> dict[str, Any]:
    """Per node (those with anything either way, by name): automation's acts and those that
    happened, oldest first, and the agreement counts; then the fleet's totals, with
    `agreement` the share of all acts (either side's) on which the two agreed (None: no act)."""
    would, did = list(would), list(did)
    nodes = sorted({w.node for w in would} | {d.node for d in did})
    rows = []
    totals = {"agreed": 0, "automation_only": 0, "happened_only": 0}
    for node in nodes:
        counts = {"agreed": 0, "automation_only": 0, "happened_only": 0}
        for act in COMPARED:
            agreed, auto_only, happened_only = _matched(
                [w for w in would if w.node == node and w.act is act],
                [d for d in did if d.node == node and d.act is act],
                within,
            )
            counts["agreed"] += agreed
            counts["automation_only"] += auto_only
            counts["happened_only"] += happened_only
        for key, value in counts.items():
            totals[key] += value
        rows.append(
            {
                "node": node,
                "would": [
                    {"act": w.act.value, "at": w.at.isoformat(), "evidence": w.evidence}
                    for w in sorted((w for w in would if w.node == node), key=lambda w: w.at)
                ],
                "happened": [
                    {"act": d.act.value, "at": d.at.isoformat(), "by": d.by.value, "detail": d.detail}
                    for d in sorted((d for d in did if d.node == node), key=lambda d: d.at)
                ],
                **counts,
            }
        )
    acts = sum(totals.values())
    return {
        "window": {"since": since.isoformat(), "until": until.isoformat()},
        "dry_run": dry_run,
        "agree_within_seconds": within.total_seconds(),
        "nodes": rows,
        **totals,
        "agreement": totals["agreed"] / acts if acts else None,
    }
